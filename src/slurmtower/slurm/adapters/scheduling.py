"""What the scheduler weighs, in the text forms of the commands that tell it: ``sprio`` (a
pending job's priority factors, and ``sprio -w`` the weights), ``sshare`` (the fair-share
tree), ``squeue --start`` (expected starts) and ``scontrol show assoc_mgr`` (QOS and
association limits with their use). None of them has a JSON form on 22.05-26.05 (slurmrestd
has ``/shares`` from v0.0.39 on, nothing for the others).

The commands run with formats whose fields are separated by ``\\x1f`` (:data:`SEP`): a user,
account or reason never holds a control character. Each ``*_format()`` gives the argument,
each ``parse_*`` reads what it prints. Measured on 22.05 and 26.05 (tests/fixtures/slurm/_why).

* ``sprio -o`` keeps any text between fields (the separator included); weighted factors print
  as integers, normalized ones with 7 decimals, TRES as ``cpu=250,mem=25``. A job sprio does
  not list (held: priority 0; not pending; unknown) gives the line "Unable to find jobs
  matching user/id(s) specified" and exit status 0.
* ``squeue --start`` takes ``-o`` (not ``-O``, which it overrides with its own columns); it
  lists pending jobs only, ``N/A`` where the scheduler has no estimate.
* ``sshare -P`` indents the account column one space per level of the tree; ``LevelFS`` is
  ``inf`` for an association with no usage, ``RawShares`` is ``parent`` for ``Fairshare=parent``.
* ``assoc_mgr`` prints each limit as ``limit(use)``, ``N`` for no limit (``GrpJobs=N(3)``),
  TRES limits as lists of those (``GrpTRES=cpu=4(2),mem=N(200)``), per-job limits without a
  use (``MaxWallPJ=30``); a QOS's per-user limits under ``User Limits`` by uid (26.05:
  ``alice(1001)``), its per-account ones under ``Account Limits``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.scheduling import (
    AssociationState,
    Limit,
    LimitsState,
    PriorityFactors,
    PriorityWeights,
    QosState,
    ShareRow,
    StartEstimate,
)
from slurmtower.slurm.adapters._queue import SEP
from slurmtower.slurm.adapters._values import parse_text_time, text_or_none

__all__ = [
    "SPRIO_FIELDS",
    "SSHARE_FIELDS",
    "START_FIELDS",
    "parse_assoc_mgr_text",
    "parse_sprio_text",
    "parse_sprio_weights_text",
    "parse_sshare_text",
    "parse_start_text",
    "sprio_format",
    "sshare_format",
    "start_format",
]

#: ``sprio -o`` fields: job id, partition, user, priority, then each factor weighted (site,
#: age, association, fairshare, job size, partition, QOS), nice, TRES weighted, the priority
#: and each factor normalized, TRES normalized.
SPRIO_FIELDS = ("%i", "%r", "%u", "%Y", "%S", "%A", "%B", "%F", "%J", "%P", "%Q", "%N", "%T",
                "%y", "%a", "%b", "%f", "%j", "%p", "%q", "%t")
_WEIGHTED = ("site", "age", "association", "fairshare", "job_size", "partition", "qos")
_NORMALIZED = ("age", "association", "fairshare", "job_size", "partition", "qos")

#: ``squeue --start -o`` fields: job id, expected start, planned nodes, asked nodes, excluded
#: nodes, features, reason with its details.
START_FIELDS = ("%A", "%S", "%Y", "%n", "%x", "%f", "%R")

#: ``sshare -o`` fields.
SSHARE_FIELDS = ("ID", "Account", "User", "Partition", "RawShares", "NormShares", "RawUsage", "NormUsage",
                 "EffectvUsage", "FairShare", "LevelFS", "GrpTRESMins", "GrpTRESRaw", "TRESRunMins")


def sprio_format() -> str:
    """The ``sprio -o`` argument for :data:`SPRIO_FIELDS`."""
    return "".join(f"{f}{SEP}" for f in SPRIO_FIELDS)


def start_format() -> str:
    """The ``squeue --start -o`` argument for :data:`START_FIELDS`."""
    return "".join(f"{f}{SEP}" for f in START_FIELDS)


def sshare_format() -> str:
    """The ``sshare -o`` argument for :data:`SSHARE_FIELDS` (with ``-P``: ``|`` between them)."""
    return ",".join(SSHARE_FIELDS)


# -------------------------------------------------------------------------------- numbers


def _int(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return round(float(text))
        except ValueError:
            return None


def _float(text: str) -> float | None:
    text = text.strip()
    if not text or text.lower() in ("inf", "nan", "n/a"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _pairs(text: str) -> list[tuple[str, str]]:
    """``cpu=250,mem=25`` -> ``[("cpu", "250"), ("mem", "25")]``."""
    out = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if sep and key:
            out.append((key.strip(), value))
    return out


def _tres(text: str) -> dict[str, int]:
    """``cpu=250,mem=25`` -> ``{"cpu": 250, "mem": 25}`` (lower-case names; a value that is
    not a number is left out)."""
    return {key.lower(): number for key, value in _pairs(text) if (number := _int(value)) is not None}


def _tres_float(text: str) -> dict[str, float]:
    """``cpu=0.25,mem=0.03`` -> ``{"cpu": 0.25, "mem": 0.03}``."""
    return {key.lower(): number for key, value in _pairs(text) if (number := _float(value)) is not None}


# ----------------------------------------------------------------------------------- sprio


def _fields(line: str, count: int, what: str) -> list[str]:
    f = line.split(SEP)
    if len(f) < count:
        raise SlurmError(f"{what} printed {len(f)} fields where {count} were asked: {line[:80]!r}")
    return f


def parse_sprio_text(text: str) -> list[PriorityFactors]:
    """Jobs of ``sprio -h -o <sprio_format()>`` (lines that are not a job's, such as "Unable to
    find jobs matching ...", are left out).

    Raises:
        SlurmError: a job's line does not hold :data:`SPRIO_FIELDS`.
    """
    out: list[PriorityFactors] = []
    for line in text.splitlines():
        if not line[:1].isdigit():
            continue
        f = _fields(line, len(SPRIO_FIELDS), "sprio")
        job_id = _int(f[0])
        priority = _int(f[3])
        if job_id is None or priority is None:
            raise SlurmError(f"sprio printed a job line without an id or a priority: {line[:80]!r}")
        weighted = {name: n for name, cell in zip(_WEIGHTED, f[4:11], strict=True) if (n := _int(cell)) is not None}
        normalized = {name: x for name, cell in zip(("priority", *_NORMALIZED), f[13:20], strict=True)
                      if (x := _float(cell)) is not None}
        out.append(PriorityFactors(
            job_id=job_id, partition=text_or_none(f[1]), user_name=text_or_none(f[2]), priority=priority,
            weighted=weighted, normalized=normalized, nice=_int(f[11]) or 0,
            tres=_tres(f[12]), tres_normalized=_tres_float(f[20]),
        ))
    return out


def parse_sprio_weights_text(text: str) -> PriorityWeights:
    """The weights of ``sprio -w -h -o <sprio_format()>`` (its ``Weights`` line).

    Raises:
        SlurmError: no ``Weights`` line (sprio printed something else).
    """
    for line in text.splitlines():
        if line.startswith("Weights"):
            f = _fields(line, len(SPRIO_FIELDS), "sprio -w")
            weights = {name: n for name, cell in zip(_WEIGHTED, f[4:11], strict=True) if (n := _int(cell)) is not None}
            tres = {key: n for key, cell in _pairs(f[12]) if (n := _int(cell)) is not None}
            return PriorityWeights(weights=weights, tres=tres)
    raise SlurmError(f"sprio -w printed no Weights line: {text.strip()[:80]!r}")


# ------------------------------------------------------------------------- squeue --start


def parse_start_text(text: str, *, tz: tzinfo | None = None) -> list[StartEstimate]:
    """Jobs of ``squeue -h --start -o <start_format()>``.

    Raises:
        SlurmError: a line does not hold :data:`START_FIELDS`.
    """
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = _fields(line, len(START_FIELDS), "squeue --start")
        job_id = _int(f[0])
        if job_id is None:
            raise SlurmError(f"squeue --start printed a line without a job id: {line[:80]!r}")
        reason = f[6].strip()
        if reason.startswith("(") and reason.endswith(")"):
            reason = reason[1:-1]
        out.append(StartEstimate(
            job_id=job_id, start_time=parse_text_time(f[1], tz), scheduled_nodes=text_or_none(f[2]),
            required_nodes=text_or_none(f[3]), excluded_nodes=text_or_none(f[4]), features=text_or_none(f[5]),
            reason=text_or_none(reason)))
    return out


# ---------------------------------------------------------------------------------- sshare


def parse_sshare_text(text: str) -> list[ShareRow]:
    """The fair-share tree of ``sshare -a -n -P -o <sshare_format()>``, in sshare's order
    (each account before its children), each line with its depth and parent.

    Raises:
        SlurmError: a line does not hold :data:`SSHARE_FIELDS`.
    """
    out: list[ShareRow] = []
    accounts: list[str] = []  # the account of each depth along the current branch
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("|")
        if len(f) < len(SSHARE_FIELDS):
            raise SlurmError(f"sshare printed {len(f)} fields where {len(SSHARE_FIELDS)} were asked: {line[:80]!r}")
        (assoc_id, account_text, user, partition, raw_shares, norm_shares, raw_usage, norm_usage, effective,
         fairshare, level_fs, grp_tres_mins, grp_tres_raw, tres_run_mins) = f[:14]
        account = account_text.strip()
        if not account:
            raise SlurmError(f"sshare printed a line without an account: {line[:80]!r}")
        depth = len(account_text) - len(account_text.lstrip(" "))
        user_name = text_or_none(user.strip())
        if user_name is None:
            del accounts[depth:]
            parent = accounts[depth - 1] if depth > 0 and len(accounts) >= depth else None
            accounts.append(account)
        else:
            parent = account
        shares_word = raw_shares.strip().lower()
        out.append(ShareRow(
            id=_int(assoc_id), account=account, user=user_name, partition=text_or_none(partition.strip()),
            depth=depth, parent=parent, raw_shares=_int(raw_shares), shares_from_parent=shares_word == "parent",
            normalized_shares=_float(norm_shares), raw_usage=_int(raw_usage), normalized_usage=_float(norm_usage),
            effective_usage=_float(effective), fairshare=_float(fairshare), level_fs=_float(level_fs),
            level_fs_infinite=level_fs.strip().lower() == "inf",
            grp_tres_minutes=_tres(grp_tres_mins), tres_usage_raw=_tres(grp_tres_raw),
            tres_run_minutes=_tres(tres_run_mins),
        ))
    return out


# ------------------------------------------------------------------------------- assoc_mgr

_TOKEN = re.compile(r"(\S+?)=(\S*)")
_LIMIT = re.compile(r"^(N|-?\d+)?(?:\(([-\d.]+)\))?$")
_NAMED = re.compile(r"^(.*?)\((\d+)\)$")


def _limit_values(text: str) -> tuple[int | None, float | None] | None:
    """``1(1)`` -> (1, 1.0); ``N(3)`` -> (None, 3.0); ``30`` -> (30, None); ``N`` or "" ->
    (None, None); anything else None (not a limit)."""
    m = _LIMIT.match(text.strip())
    if m is None:
        return None
    value = int(m[1]) if m[1] not in (None, "N") else None
    used = float(m[2]) if m[2] is not None else None
    return value, used


def _limits(line: str) -> list[Limit]:
    """The limits of one ``assoc_mgr`` line (``Grp*``, ``Max*``, ``Min*`` keys; TRES lists
    give one limit per TRES; a limit neither set nor used is left out)."""
    out: list[Limit] = []
    for m in _TOKEN.finditer(line):
        key, value = m[1], m[2]
        if not key.startswith(("Grp", "Max", "Min")):
            continue
        if "=" in value:  # a TRES list: cpu=N(1),mem=4(2),gres/gpu=N(0)
            for part in value.split(","):
                tres, _sep, limit_text = part.partition("=")
                found = _limit_values(limit_text)
                if found is not None and (found[0] is not None or found[1] is not None):
                    out.append(Limit(name=key, tres=tres.lower(), value=found[0], used=found[1]))
            continue
        found = _limit_values(value)
        if found is not None and (found[0] is not None or found[1] is not None):
            out.append(Limit(name=key, value=found[0], used=found[1]))
    return out


def _named(value: str) -> tuple[str | None, int | None]:
    """``alice(1001)`` -> ("alice", 1001); ``root(1)`` -> ("root", 1); "" -> (None, None)."""
    value = value.strip()
    if not value:
        return None, None
    m = _NAMED.match(value)
    return (m[1] or None, int(m[2])) if m else (value, None)


@dataclass
class _Record:
    """A QOS or association record of ``assoc_mgr`` while its lines are read."""

    kind: str  # "qos" or "assoc"
    fields: dict[str, Any]
    limits: list[Limit] = field(default_factory=list)
    per_user: dict[str, list[Limit]] = field(default_factory=dict)
    per_account: dict[str, list[Limit]] = field(default_factory=dict)
    scope: dict[str, list[Limit]] | None = None
    """``per_user`` or ``per_account`` once its header is read (a QOS's sub-records)."""
    entity: list[Limit] | None = None
    """The limits of the user or account whose name was read last."""

    def line(self, stripped: str) -> None:
        if self.kind == "qos" and stripped in ("User Limits", "Account Limits"):
            self.scope, self.entity = (self.per_user if stripped == "User Limits" else self.per_account), None
        elif self.scope is not None and "=" not in stripped:
            # a user by uid (22.05-25.11: "1001"; 26.05: "alice(1001)"), an account by name
            name, uid = _named(stripped)
            self.entity = self.scope.setdefault(str(uid) if uid is not None else name or stripped, [])
        elif self.scope is not None and self.entity is not None:
            self.entity.extend(_limits(stripped))
        else:
            self.fields.update(_TOKEN.findall(stripped))
            self.limits.extend(_limits(stripped))

    def qos(self) -> QosState:
        name, qos_id = _named(self.fields["QOS"])
        return QosState(name=name or "", id=qos_id, priority=_int(self.fields.get("Priority", "")),
                        limits=self.limits, per_user=self.per_user, per_account=self.per_account)

    def association(self) -> AssociationState:
        user, uid = _named(self.fields.get("UserName", ""))
        return AssociationState(id=_int(self.fields.get("ID", "")), account=self.fields.get("Account", ""), user=user,
                                user_id=uid, partition=text_or_none(self.fields.get("Partition")),
                                parent_account=_named(self.fields.get("ParentAccount", ""))[0], limits=self.limits)


def parse_assoc_mgr_text(text: str, *, read_at: datetime | None = None) -> LimitsState:
    """The QOS and association records of ``scontrol show assoc_mgr flags=qos,assoc``.

    Raises:
        SlurmError: a line that belongs to no record (scontrol printed something else).
    """
    records: list[_Record] = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("Current Association Manager") or stripped.endswith(" Records"):
            continue
        if not raw[:1].isspace() and stripped.startswith(("QOS=", "ClusterName=")):
            records.append(_Record("qos" if stripped.startswith("QOS=") else "assoc", {}))
        if not records:
            raise SlurmError(f"unexpected line in scontrol show assoc_mgr: {stripped[:80]!r}")
        records[-1].line(stripped)
    return LimitsState(qos={q.name: q for q in (r.qos() for r in records if r.kind == "qos")},
                       associations=[r.association() for r in records if r.kind == "assoc"],
                       read_at=read_at or datetime.now(UTC))
