"""The cluster as snapshots: the cache (:mod:`.cache`), its sharing between processes
(:mod:`.sharing`), the refresh worker (:mod:`.worker`) and codec (:mod:`.codec`), the
filters and cursors of the live reads (:mod:`.filters`), hidden partitions (:mod:`.hidden`),
the usage matrix (:mod:`.usage`), the load archive (:mod:`.archive`) and the typed reads
over all of it (:class:`~slurmtower.live.state.LiveState`).

The names below are imported when first asked for: the refresh worker, a process of its
own, imports :mod:`.worker` alone (the settings and the Slurm client), not the cache with
its Redis and SQLAlchemy imports (a second off its spawn, 23 MB off its memory).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurmtower.live.cache import Rendered, Snapshot, SnapshotCache, build_cache
    from slurmtower.live.state import ClusterView, LiveState

__all__ = ["ClusterView", "LiveState", "Rendered", "Snapshot", "SnapshotCache", "build_cache"]

_WHERE = {"ClusterView": "state", "LiveState": "state", "Rendered": "cache", "Snapshot": "cache",
          "SnapshotCache": "cache", "build_cache": "cache"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"slurmtower.live.{module}"), name)  # deferred: see the docstring
