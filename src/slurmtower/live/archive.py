"""The load archive: samples of the cluster load taken from the live snapshots into
slurmtower's own store, read back as a series (``/load``).

The archiver (a periodic task of the runtime, led by the ``archiver`` role's leader) samples
every ``archiver.archive_wait_time`` seconds and drops samples older than
``archiver.retention_days``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Engine, delete, insert, select

from slurmtower.live.hidden import visible_nodes
from slurmtower.live.usage import build_usage
from slurmtower.models import JobState, Node, Partition
from slurmtower.models.table import JobTable
from slurmtower.store import schema
from slurmtower.store.revision import ensure_current

__all__ = ["LoadArchive", "LoadSample", "take_sample"]

_MAX_SAMPLES = 100_000


class LoadSample(BaseModel):
    """The cluster load at one moment."""

    time: datetime
    timestamp: float
    """Unix seconds."""
    cpus_total: int
    cpus_used: int
    memory_total_mib: int
    memory_used_mib: int
    jobs_running: int
    jobs_pending: int
    nodes_total: int
    nodes_by_state: dict[str, int]
    partitions: dict[str, dict[str, Any]]
    """Per visible partition: the /usage totals."""
    archiver: str
    """Which process took the sample (the archiver role's leader)."""


@dataclass
class LoadArchive:
    """The load samples in slurmtower's own store (:mod:`slurmtower.store.schema`). One
    process of a deployment samples: the leader of the ``archiver`` role
    (:class:`~slurmtower.store.leader.Leadership`, the runtime's one lease mechanism)."""

    engine: Engine
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    """Who takes the samples (this process: the archiver role's leader)."""
    cluster: str = ""
    """Whose samples (the store's ``cluster`` column: ``''`` for the default cluster)."""

    def __post_init__(self) -> None:
        self.samples = schema.load_samples
        self._created = False

    def create(self) -> None:
        """Check the store's schema once (creating an empty store; raises
        :class:`~slurmtower.errors.StoreSchemaError` for one at another revision)."""
        if not self._created:
            ensure_current(self.engine)
            self._created = True

    def add(self, sample: LoadSample, retention_seconds: float) -> None:
        """Store one sample and drop those older than the retention."""
        self.create()
        with self.engine.begin() as conn:
            conn.execute(insert(self.samples).values(ts=sample.timestamp, holder=sample.archiver,
                                                     sample=sample.model_dump_json(), cluster=self.cluster))
            conn.execute(delete(self.samples).where(self.samples.c.cluster == self.cluster,
                                                    self.samples.c.ts < time.time() - retention_seconds))

    def window(self, start: float, end: float) -> list[LoadSample]:
        """Samples with ``start < ts <= end``, oldest first."""
        self.create()
        t = self.samples
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.c.sample).where(t.c.cluster == self.cluster, t.c.ts > start, t.c.ts <= end)
                                .order_by(t.c.ts).limit(_MAX_SAMPLES)).scalars().all()
        return [LoadSample.model_validate(json.loads(r)) for r in rows]


def take_sample(nodes: list[Node], jobs: JobTable, partitions: list[Partition], hidden: frozenset[str],
                holder: str) -> LoadSample:
    """One load sample from snapshots of nodes, jobs and partitions (hidden partitions left out)."""
    shown = jobs.hiding(hidden)
    usage = build_usage(nodes, shown.active(), partitions, hidden)
    states = shown.count_by("state")
    shown_nodes = visible_nodes(nodes, hidden)
    by_state: dict[str, int] = {}
    for n in shown_nodes:
        by_state[n.state_text] = by_state.get(n.state_text, 0) + 1
    totals = usage["totals"]
    now = datetime.now(UTC)
    return LoadSample(
        time=now, timestamp=now.timestamp(),
        cpus_total=totals["cpus_total"], cpus_used=totals["cpus_used"],
        memory_total_mib=totals["memory_total_mib"], memory_used_mib=totals["memory_used_mib"],
        jobs_running=states.get((JobState.RUNNING.value,), 0),
        jobs_pending=states.get((JobState.PENDING.value,), 0),
        nodes_total=len(shown_nodes), nodes_by_state=by_state,
        partitions={name: p["totals"] for name, p in usage["partitions"].items()},
        archiver=holder,
    )
