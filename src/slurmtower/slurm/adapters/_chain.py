"""The version-adapter chain: each record is brought up to the newest format before it is built.

A *step* rewrites one record of an older format into the shape of its target format, so that the
builders only know the newest shape (:data:`NEWEST`, the newest format of
:data:`~._data_parsers.DATA_PARSERS` the adapters read). The steps of a kind of record live in
that resource's module (``nodes.py`` holds the ``node`` and ``sinfo`` steps, ``jobs.py`` the
``job`` steps ...), each registered here with :func:`step`, and each module's docstring has the
table of what changed per release. :func:`upgrade` applies, oldest first, every step of the
record's kind whose target is newer than the record's format; a format with no step of that
kind changed nothing the builders read. A step touches only what changed in the fields
slurmtower reads; unknown keys pass through untouched.

The steps so far: ``v0.0.38 -> v0.0.40`` (22.05 to 23.11: numbers become objects, flat
partition keys nested groups ...; it only rewrites values still in the old shape, so it is also
safe for 23.02's v0.0.39), ``v0.0.44 -> v0.0.45`` (25.11 to 26.05). v0.0.40 -> v0.0.42 and
v0.0.42 -> v0.0.44 changed nothing the builders read (checked against the schemas in 24.11's
and 25.11's OpenAPI documents).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal

from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._data_parsers import KNOWN_DATA_PARSERS
from slurmtower.slurm.adapters._values import INFINITE, NO_VAL

__all__ = ["NEWEST", "Kind", "Record", "num", "step", "upgrade", "wrap"]

Kind = Literal[
    "node",
    "job",
    "partition",
    "reservation",
    "sacct_job",
    "sacct_step",
    "diag",
    "sinfo",
    "ping",
    "association",
    "user",
]
Record = dict[str, Any]
StepFunction = Callable[[Record, SlurmVersion | None], Record]

#: The newest format the builders read.
NEWEST = max(KNOWN_DATA_PARSERS)

_STEPS: dict[str, dict[int, StepFunction]] = {}


def step(kind: Kind, target: int) -> Callable[[StepFunction], StepFunction]:
    """Register a function as the step that brings ``kind`` records of formats older than
    ``target`` into the ``v0.0.<target>`` shape.

    Raises:
        ValueError: ``target`` is not a format the adapters read, or ``kind`` has a step into
            it already.
    """

    if target not in KNOWN_DATA_PARSERS:
        raise ValueError(f"no known data format v0.0.{target} to step {kind!r} records into")

    def register(function: StepFunction) -> StepFunction:
        steps = _STEPS.setdefault(kind, {})
        if target in steps:
            raise ValueError(f"two steps of {kind!r} records into v0.0.{target}")
        steps[target] = function
        return function

    return register


def upgrade(kind: Kind, record: Record, fmt: int, version: SlurmVersion | None = None) -> Record:
    """Bring one record of data format ``v0.0.<fmt>`` up to the newest shape (a copy)."""
    current = copy.deepcopy(record)
    for target, function in sorted(_STEPS.get(kind, {}).items()):
        if fmt < target:
            current = function(current, version)
    return current


def num(value: Any, *, zero_is_unset: bool = False) -> dict[str, Any]:
    """22.05's plain number as a v0.0.40 number object."""
    if isinstance(value, dict):
        return value
    if value is None or isinstance(value, bool) or (zero_is_unset and value == 0):
        return {"set": False, "infinite": False, "number": 0}
    if isinstance(value, int | float) and value in INFINITE:
        return {"set": False, "infinite": True, "number": 0}
    if isinstance(value, int | float) and value in NO_VAL:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def wrap(record: Record, *keys: str) -> None:
    """Make each of ``keys`` present in ``record`` a number object (:func:`num`)."""
    for key in keys:
        if key in record:
            record[key] = num(record[key])
