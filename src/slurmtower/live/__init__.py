"""The cluster as snapshots: the cache (:mod:`.cache`), its sharing between processes
(:mod:`.sharing`), the refresh worker (:mod:`.worker`) and codec (:mod:`.codec`), the
filters and cursors of the live reads (:mod:`.filters`), hidden partitions (:mod:`.hidden`),
the usage matrix (:mod:`.usage`), the load archive (:mod:`.archive`) and the typed reads
over all of it (:class:`~slurmtower.live.state.LiveState`)."""

from slurmtower.live.cache import Rendered, Snapshot, SnapshotCache, build_cache
from slurmtower.live.state import ClusterView, LiveState

__all__ = ["ClusterView", "LiveState", "Rendered", "Snapshot", "SnapshotCache", "build_cache"]
