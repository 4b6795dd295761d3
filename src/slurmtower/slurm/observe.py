"""Hook through which every Slurm call is counted (the metrics module fills it in)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["register_slurm_call_sink", "slurm_call_observer"]

_sinks: list[Callable[[str, float, bool], None]] = []


def register_slurm_call_sink(sink: Callable[[str, float, bool], None]) -> None:
    if sink not in _sinks:
        _sinks.append(sink)


def slurm_call_observer(kind: str, seconds: float, ok: bool) -> None:
    for sink in _sinks:
        sink(kind, seconds, ok)
