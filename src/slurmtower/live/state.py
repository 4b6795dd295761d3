"""The cluster as typed snapshots: what the API, the dashboard, ``/metrics`` and the archiver
read, one :class:`LiveState` per process over its :class:`~slurmtower.live.cache.SnapshotCache`.

Each read is at most ``api.refresh_interval`` old (one shared Slurm query per resource per
interval, whoever polls); hidden partitions are already cut from the queue and the node table
(:mod:`slurmtower.live.hidden`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from slurmtower.live.cache import Snapshot, SnapshotCache
from slurmtower.models import ControllerStats, Node, Partition
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.visibility import NOTHING_HIDDEN, Hidden, Visibility

__all__ = ["ClusterView", "LiveState"]

#: id(a partitions snapshot's list) -> (the list, what it hides): every request of one
#: snapshot shares one (each node set of 5,000 nodes expanded once, not per request).
_HIDDEN: dict[int, tuple[list[Partition], Hidden]] = {}


@dataclass(frozen=True)
class ClusterView:
    """Nodes (as models) and jobs (as a compact table) of one moment."""

    nodes: list[Node]
    jobs: JobTable
    """The queue as a compact table (build models only for the rows shown)."""
    fetched_at: datetime
    stale: bool


class LiveState:
    """Typed reads of the live snapshots.

    Args:
        cache: the process's snapshot cache (``jobs``, ``nodes``, ``partitions`` and ``stats``
            registered, as :func:`~slurmtower.live.cache.build_cache` does).
        hidden_partitions: the partitions no reader sees (``api.hidden_partitions``).
    """

    def __init__(self, cache: SnapshotCache, hidden_partitions: frozenset[str] = frozenset()) -> None:
        self.cache = cache
        self.hidden = hidden_partitions

    async def jobs(self) -> Snapshot[JobTable]:
        """The queue, hidden partitions cut."""
        return cast("Snapshot[JobTable]", await self.cache.get("jobs"))

    async def nodes(self) -> Snapshot[NodeTable]:
        """The nodes as a table, hidden partitions cut."""
        return cast("Snapshot[NodeTable]", await self.cache.get("nodes"))

    async def partitions(self) -> Snapshot[list[Partition]]:
        """Every partition as Slurm gives them (hide them with :func:`~slurmtower.live.hidden.visible_partitions`)."""
        return cast("Snapshot[list[Partition]]", await self.cache.get("partitions"))

    async def stats(self) -> Snapshot[ControllerStats]:
        """slurmctld's statistics (sdiag)."""
        return cast("Snapshot[ControllerStats]", await self.cache.get("stats"))

    async def load(self) -> tuple[Snapshot[NodeTable], Snapshot[JobTable], Snapshot[list[Partition]]]:
        """Nodes, jobs and partitions together (the usage matrix's and the archiver's inputs)."""
        nodes, jobs, partitions = await self.cache.get_all("nodes", "jobs", "partitions")
        return (cast("Snapshot[NodeTable]", nodes), cast("Snapshot[JobTable]", jobs),
                cast("Snapshot[list[Partition]]", partitions))

    async def hidden_nodes(self) -> frozenset[str]:
        """Nodes only in hidden partitions: their events, rule runs and dashboard pages are
        hidden (read from the partitions snapshot, only when partitions are hidden)."""
        return (await self.hiding()).nodes

    async def hiding(self) -> Hidden:
        """What this cluster hides from every caller (:class:`~slurmtower.visibility.Hidden`,
        the filter of events, audit records and envelopes), made once per
        partitions snapshot; nothing (no Slurm read) when no partition is hidden."""
        if not self.hidden:
            return NOTHING_HIDDEN
        partitions = (await self.partitions()).value
        made = _HIDDEN.get(id(partitions))
        if made is not None and made[0] is partitions and made[1].partitions == self.hidden:
            return made[1]
        view = Visibility(hidden_partitions=self.hidden).hiding(partitions)
        if len(_HIDDEN) >= 16:
            _HIDDEN.clear()  # snapshots long replaced
        _HIDDEN[id(partitions)] = (partitions, view)
        return view

    async def view(self) -> ClusterView:
        """Nodes and jobs together (the dashboard's and ``/metrics``' view)."""
        nodes, jobs = await self.cache.get_all("nodes", "jobs")
        table: NodeTable = nodes.value
        # The node models are built from the table's JSON once per snapshot: off the event loop.
        return ClusterView(nodes=list(await asyncio.to_thread(table.nodes)), jobs=jobs.value,
                           fetched_at=min(nodes.fetched_at, jobs.fetched_at), stale=nodes.stale or jobs.stale)

