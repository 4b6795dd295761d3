"""slurmctld's running configuration (``scontrol show config``)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from slurmtower.models.version import SlurmVersion

__all__ = ["ClusterConfig", "config_key"]

_PLURAL_ACRONYM = re.compile(r"([A-Z]{2,})s(?=[A-Z_\[]|$)")
_CAMEL_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL_2 = re.compile(r"([a-z0-9])([A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def config_key(name: str) -> str:
    """Slurm's configuration name in snake case.

    ``TopologyPlugin`` -> ``topology_plugin``, ``SLURM_VERSION`` -> ``slurm_version``,
    ``SlurmctldHost[0]`` -> ``slurmctld_host_0``, ``AccountingStorageTRES`` ->
    ``accounting_storage_tres``.
    """
    # "MaxCPUsPerNode": keep "CPUs" one word.
    text = _PLURAL_ACRONYM.sub(lambda m: m[1].capitalize() + "s", name.strip())
    text = _CAMEL_2.sub(r"\1_\2", _CAMEL_1.sub(r"\1_\2", text))
    return _NON_WORD.sub("_", text.lower()).strip("_")


_SECONDS = re.compile(r"^\s*(\d+)\s*(?:sec|s)?\s*$")


class ClusterConfig(BaseModel):
    """Every ``Key = Value`` of ``scontrol show config``, keyed by :func:`config_key`."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    items: dict[str, str] = Field(default_factory=dict)
    as_of: datetime | None = None
    """``Configuration data as of ...``."""
    controllers: dict[str, str] = Field(default_factory=dict)
    """Controller host -> status from the closing lines (``Slurmctld(primary) at vm is UP``)."""

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of ``key`` (Slurm's name or the snake-case one); ``(null)`` is ``None``."""
        value = self.items.get(config_key(key))
        if value is None or value in ("(null)", "N/A"):
            return default
        return value

    def seconds(self, key: str) -> timedelta | None:
        """A ``"300 sec"`` value as a duration."""
        value = self.get(key)
        match = _SECONDS.match(value) if value else None
        return timedelta(seconds=int(match[1])) if match else None

    @property
    def cluster_name(self) -> str | None:
        return self.get("cluster_name")

    @property
    def slurm_user(self) -> str | None:
        """Just the user name (the config shows ``slurm(64030)``)."""
        value = self.get("slurm_user")
        return value.split("(", 1)[0] if value else None

    @property
    def min_job_age(self) -> int | None:
        """Seconds a finished job stays in slurmctld's memory."""
        value = self.seconds("min_job_age")
        return int(value.total_seconds()) if value is not None else None

    @property
    def version(self) -> SlurmVersion | None:
        value = self.get("slurm_version")
        return SlurmVersion.parse(value) if value else None
