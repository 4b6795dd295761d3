"""slurmctld's running configuration: ``scontrol show config`` (text, every release) and, from
26.05 on, ``scontrol show config --json`` / REST ``GET /slurm/v0.0.45/conf`` (the same schema).

No release steps: the JSON exists only in v0.0.45 (``--json=v0.0.44`` on 26.05 exits 244
without output, and 24.11/25.11 ignore ``--json`` and print the text).

Both forms give the same :class:`ClusterConfig`: ``items`` keyed by :func:`config_key` of the
text's names, each value written the way the text writes it where the notation is all that
differs (see :func:`parse_config_json`).
"""

from __future__ import annotations

import re
from datetime import tzinfo
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.config import ClusterConfig, config_key
from slurmtower.slurm.adapters._envelope import records
from slurmtower.slurm.adapters._values import epoch, number, parse_text_time

__all__ = ["parse_config_json", "parse_config_text"]

# -------------------------------------------------------------------------------------- text


_CONFIG_LINE = re.compile(r"^(\S[^=]*?)\s*=\s?(.*)$")
_CONTROLLER_LINE = re.compile(r"^Slurmctld\((\w+)\) at (\S+) is (\w+)")


def parse_config_text(text: str, *, tz: tzinfo | None = None) -> ClusterConfig:
    """``scontrol show config`` as a :class:`ClusterConfig` (keys in snake case)."""
    items: dict[str, str] = {}
    as_of = None
    controllers: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("Configuration data as of "):
            as_of = parse_text_time(line.removeprefix("Configuration data as of ").strip(), tz)
            continue
        controller = _CONTROLLER_LINE.match(line)
        if controller:
            controllers[controller[2]] = controller[3]
            continue
        match = _CONFIG_LINE.match(line)
        if match and " = " in line:
            items.setdefault(config_key(match[1]), match[2].strip())
    if not items:
        raise SlurmError("no 'Key = Value' lines in scontrol show config output")
    return ClusterConfig(items=items, as_of=as_of, controllers=controllers)


# -------------------------------------------------------------------------------------- JSON

#: JSON names that the text form spells differently.
_TEXT_NAMES = {
    "PriorityWeightFairshare": "PriorityWeightFairShare",
    "SlurmctldHttpAuthParams": "SlurmctldHttpAuthParameters",
    "SlurmdHttpAuthParams": "SlurmdHttpAuthParameters",
}
#: Booleans the text form prints as ``yes``/``no`` (the others as ``1``/``0``).
_YES_NO = frozenset({"PriorityFavorSmall", "AllowSpecResourcesUsage", "DisableRootJobs", "TrackWCKey", "UsePam"})
#: ``SlurmUser: "slurm"`` + ``SlurmUserId: 64030`` is the text's ``SlurmUser = slurm(64030)``.
_USER_IDS = {"SlurmUser": "SlurmUserId", "SlurmdUser": "SlurmdUserId"}
_NULL = "(null)"


def _text(value: Any, *, yes_no: bool = False) -> str:
    """One ``slurm_conf`` value in the text form's notation."""
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return ("yes" if value else "no") if yes_no else ("1" if value else "0")
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value if value.strip() else _NULL
    if isinstance(value, list):
        parts = [
            f"{item.get('type')}={item.get('value')}" if isinstance(item, dict) else str(item) for item in value
        ]
        return ",".join(parts) or _NULL
    if isinstance(value, dict):
        if "number" in value:  # {set, infinite, number}
            if value.get("infinite"):
                return "INFINITE"
            count = number(value)
            return str(count) if count is not None else _NULL
        if "minimum" in value and "maximum" in value:  # SrunPortRange
            return f"{value['minimum']}-{value['maximum']}"
    return str(value)


def parse_config_json(doc: dict[str, Any], *, tz: tzinfo | None = None) -> ClusterConfig:
    """``scontrol show config --json`` or REST ``GET /slurm/v0.0.45/conf`` (26.05+) as the
    :class:`ClusterConfig` that :func:`parse_config_text` makes of the text form.

    Each ``slurm_conf`` value is written as the text writes it: lists as comma lists,
    ``""`` and ``[]`` as ``(null)``, booleans as ``1``/``0`` (``yes``/``no`` where the text
    says so), ``{infinite: true}`` as ``INFINITE``, ``SrunPortRange`` as ``0-0``, ``SlurmUser``
    with its id (``slurm(64030)``), each of ``controllers`` as ``SlurmctldHost[N] =
    machine(address)``; the three names the text spells differently take the text's name
    (``PriorityWeightFairshare`` -> ``priority_weight_fair_share`` ...). ``slurm_conf_meta``
    gives ``as_of`` (``LastUpdate``), ``boot_time`` (local time in ``tz``, as the text prints
    it), ``next_job_id``, ``slurm_conf``, ``slurm_version``, ``hash_value`` and ``cluster_id``.

    What still differs from the text: numbers have no unit (``"60"`` where the text says
    ``60 sec``; :meth:`ClusterConfig.seconds` reads both); a few settings use the JSON's
    names for their values (ReturnToService ``non_responsive_only`` for ``1``, PreemptMode
    ``DISABLED`` for ``OFF``, PropagatePrioProcess ``off`` for ``0``) or leave out what the
    text fills in from defaults (PriorityFlags ``FAIR_TREE``, CpuFreqGovernors, PrivateData);
    memory defaults come as ``DefMemPerCPU``/``MaxMemPerCPU`` where the text says
    ``DefMemPerNode``/``MaxMemPerNode``; and there is no ``controllers`` status (the text's
    ``Slurmctld(primary) at vm is UP`` is a ping scontrol adds), so ``controllers`` is empty.

    Raises:
        SlurmError: no ``slurm_conf`` object in the document (with the envelope's errors).
    """
    conf = doc.get("slurm_conf") if isinstance(doc, dict) else None
    if not isinstance(conf, dict):
        records(doc, "slurm_conf")  # raises with the envelope's errors
        raise SlurmError("Slurm JSON 'slurm_conf' is not an object")
    items: dict[str, str] = {}
    user_ids = set(_USER_IDS.values())
    for key, value in conf.items():
        name = str(key)
        if name in user_ids:
            continue
        if name == "controllers":
            for index, controller in enumerate(value if isinstance(value, list) else []):
                machine = str(controller.get("machine") or "")
                address = controller.get("address")
                items[f"slurmctld_host_{index}"] = f"{machine}({address})" if address else machine
            continue
        text = _text(value, yes_no=name in _YES_NO)
        if name in _USER_IDS and conf.get(_USER_IDS[name]) is not None and text != _NULL:
            text = f"{text}({conf[_USER_IDS[name]]})"
        items[config_key(_TEXT_NAMES.get(name, name))] = text
    meta = doc.get("slurm_conf_meta") or {}
    as_of = epoch(meta.get("LastUpdate"))
    booted = epoch(meta.get("BOOT_TIME"))
    if booted is not None:
        local = booted.astimezone(tz) if tz is not None else booted.astimezone()
        items["boot_time"] = local.strftime("%Y-%m-%dT%H:%M:%S")
    for name in ("NEXT_JOB_ID", "SLURM_CONF", "SLURM_VERSION", "HashValue", "ClusterId"):
        if name in meta:
            items[config_key(name)] = _text(meta[name])
    if not items:
        raise SlurmError("no settings in Slurm's slurm_conf")
    return ClusterConfig(items=items, as_of=as_of)
