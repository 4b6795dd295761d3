"""Helpers shared by the text parsers of the Slurm commands.

Text is used where a release has no JSON (22.05's scontrol, sdiag; strigger and ``scontrol show
config`` before 26.05) and as a cross-check of the JSON. Text timestamps are local time without
a zone: every parser that reads one takes ``tz``, the cluster's zone (default: this machine's).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo

from slurmtower.errors import SlurmError
from slurmtower.models.job import ExitCode
from slurmtower.slurm.adapters._values import parse_duration, parse_text_time, text_or_none

__all__ = [
    "as_duration",
    "as_float",
    "as_int",
    "as_limit",
    "exit_text",
    "field",
    "job_ids",
    "name_and_id",
    "reason_parts",
    "scontrol_records",
    "split_key_values",
]

# A key starts a new field only when a space (or the line start) precedes it, so values with
# spaces survive: "Reason=disk replace [root@...]", "OS=Linux 6.1 #1 SMP", "Command=/a b".
_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.]*)=")


def split_key_values(line: str) -> dict[str, str]:
    """Split one ``scontrol -o show`` record into ``{Key: value}`` (values stripped).

    A key is ``[A-Za-z][A-Za-z0-9_:/.]*`` followed by ``=`` and preceded by a space or the
    line start; everything up to the next such key is the value, spaces included.
    """
    matches = list(_KEY_RE.finditer(line))
    result: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        result.setdefault(match[1], line[match.end() : end].strip())
    return result


def scontrol_records(text: str, first_key: str) -> list[dict[str, str]]:
    """Records of ``scontrol [-o] show ...``: one per line with ``-o``, else one per block
    of indented lines starting with ``first_key=``. "No ... in the system" gives none."""
    blocks: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith(f"{first_key}="):
            blocks.append([line.strip()])
        elif blocks and raw[:1].isspace():
            blocks[-1].append(line.strip())
        elif line.startswith("No ") and line.endswith(" in the system"):
            continue
        elif blocks:
            blocks[-1].append(line.strip())
        else:
            raise SlurmError(f"unexpected line in scontrol output: {line[:80]!r}")
    return [split_key_values(" ".join(block)) for block in blocks]


def field(fields: dict[str, str], key: str) -> str | None:
    return text_or_none(fields.get(key))


def as_int(value: str | None) -> int | None:
    if value is None:
        return None
    match = re.match(r"^\s*(-?\d+)", value)
    return int(match[1]) if match else None


def as_float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def as_limit(value: str | None) -> int | None:
    """A count where ``UNLIMITED``/``INFINITE`` means no limit (``None``)."""
    if value is None or value.upper() in ("UNLIMITED", "INFINITE"):
        return None
    return as_int(value)


def as_duration(value: str | None) -> timedelta | None:
    try:
        return parse_duration(value)
    except ValueError:
        return None


def name_and_id(value: str | None) -> tuple[str | None, int | None]:
    """``alice(1001)`` -> ("alice", 1001); ``1001`` -> (None, 1001)."""
    if value is None:
        return None, None
    match = re.fullmatch(r"(.*?)\((\d+)\)", value)
    if match:
        return (match[1] or None), int(match[2])
    if value.isdigit():
        return None, int(value)
    return value, None


_REASON_RE = re.compile(r"^(.*?)\s*\[([^@\]]*)@([^\]]+)\]\s*$")


def reason_parts(value: str | None, tz: tzinfo | None) -> tuple[str | None, str | None, datetime | None]:
    """``disk replace [root@2026-11-29T10:00:00]`` -> (reason, user, time)."""
    if value is None:
        return None, None, None
    match = _REASON_RE.match(value)
    if match is None:
        return value, None, None
    return (match[1] or None), (match[2] or None), parse_text_time(match[3], tz)


def job_ids(text: str) -> tuple[int, int | None, int | None, str | None, int | None]:
    """``2018``, ``2022_3``, ``2023_[1-5%2]``, ``100+1`` ->
    (job_id, array_job_id, array_task_id, array_task_str, het_job_id).

    Without JobIDRaw a task's own id is unknown and the array's id stands in for it.
    """
    match = re.fullmatch(r"(\d+)(?:_(\d+)|_\[(.+)\]|\+(\d+))?", text.strip())
    if match is None:
        raise SlurmError(f"not a job id: {text!r}")
    job_id = int(match[1])
    if match[2] is not None:
        return job_id, job_id, int(match[2]), None, None
    if match[3] is not None:
        return job_id, job_id, None, match[3], None
    if match[4] is not None:
        return job_id + int(match[4]), None, None, None, job_id
    return job_id, None, None, None, None


def exit_text(value: str | None) -> ExitCode | None:
    """Slurm's ``rc:signal`` text as an :class:`ExitCode` (``None`` when unset or malformed)."""
    try:
        return ExitCode.from_text(value) if value else None
    except ValueError:
        return None
