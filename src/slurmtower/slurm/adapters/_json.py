"""Helpers shared by the JSON builders (CLI ``--json`` and slurmrestd documents).

Every ``parse_*_json`` takes the whole document, reads the format from its ``meta``
(:func:`upgraded`), runs each record through the adapter chain (:mod:`._chain`) and builds
models from the newest shape only.
"""

from __future__ import annotations

from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.job import ExitCode
from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._chain import Kind, Record, upgrade
from slurmtower.slurm.adapters._envelope import detect_version, format_version, records
from slurmtower.slurm.adapters._values import number

__all__ = ["array_task_id", "exit_code", "id_or_none", "path", "required_id", "upgraded"]


def upgraded(doc: dict[str, Any], key: str, kind: Kind) -> tuple[list[Record], SlurmVersion | None]:
    """The records under ``key``, each brought up to the newest format, and the release."""
    items = records(doc, key)
    fmt = format_version(doc)
    try:
        version: SlurmVersion | None = detect_version(doc)
    except SlurmError:
        # A document without meta (hand-made, or trimmed by a proxy) still parses.
        version = None
    return [upgrade(kind, item, fmt, version) for item in items], version


def id_or_none(value: Any) -> int | None:
    """Ids where Slurm uses 0 for "none" (array_job_id, het_job_id)."""
    result = number(value)
    return result or None


def required_id(record: Record, key: str = "job_id") -> int:
    value = number(record.get(key))
    if value is None:
        raise SlurmError(f"Slurm JSON record without {key!r}")
    return value


def array_task_id(value: Any) -> int | None:
    # v0.0.40+ JSON can report NO_VAL as a plain number in array_task_id.
    result = number(value)
    return result if result is not None and result < 0xFFFFFFFE else None


def exit_code(value: Any) -> ExitCode | None:
    """A v0.0.40+ exit code object (``{status, return_code, signal}``) as an :class:`ExitCode`."""
    if not isinstance(value, dict):
        return None
    status = [str(s).upper() for s in value.get("status") or []]
    if "INVALID" in status or "PENDING" in status:
        return None
    signal = number((value.get("signal") or {}).get("id"))
    if signal:
        return ExitCode(signal=signal, core_dumped="CORE_DUMPED" in status)
    return_code = number(value.get("return_code"))
    if return_code is None:
        return None
    return ExitCode(return_code=return_code)


def path(record: Record, *keys: str) -> Any:
    """``record[k1][k2]...``, or ``None`` where a level is missing."""
    value: Any = record
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value
