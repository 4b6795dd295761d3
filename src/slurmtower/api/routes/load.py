"""/load and the load archiver.

The archiver samples the cluster load every ``archiver.archive_wait_time`` seconds into
slurmtower's own store (``settings.effective_store_url()``: SQLite under ``state_dir`` by
default, any SQLAlchemy URL). Every API worker runs the background task, but only the
holder of the ``archiver`` lease row samples, so a deployment has exactly one archiver;
a lease that is not renewed for ``lease_seconds`` passes to another worker. Samples come
from the shared snapshot cache (no extra Slurm query while clients poll); a failing round
backs off exponentially up to ``archiver.max_backoff``. Samples older than
``archiver.retention_days`` are deleted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from pydantic import BaseModel
from sqlalchemy import Engine, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from slurmtower.api.cache import SnapshotCache, services_of, shared_cache, strict_query
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.routes.live import build_usage, visible_nodes
from slurmtower.api.security import Perm, require
from slurmtower.api.services import BackgroundTask, Services
from slurmtower.errors import InvalidInput, SlurmUnavailable
from slurmtower.models import JobState, Node, Partition
from slurmtower.models.table import JobTable
from slurmtower.store import schema
from slurmtower.store.engine import make_store_engine

__all__ = ["LoadArchive", "LoadResponse", "LoadSample", "router", "setup"]

log = logging.getLogger(__name__)
router = APIRouter(tags=["live"])
ServicesDep = Annotated[Services, Depends(services_of)]

_MAX_SAMPLES = 100_000
_DIGITS = re.compile(r"[0-9]{1,12}")


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
    """Which worker took the sample (the lease holder)."""


class LoadResponse(BaseModel):
    archiving: bool
    archive_wait_time: float
    count: int
    samples: list[LoadSample]


@dataclass
class LoadArchive:
    """The archive tables in slurmtower's own store (:mod:`slurmtower.store.schema`), and the
    archiver lease."""

    engine: Engine
    holder: str
    lease_seconds: float

    def __post_init__(self) -> None:
        self.samples = schema.load_samples
        self.leases = schema.leases
        self._created = False

    @classmethod
    def from_settings(cls, services: Services) -> LoadArchive:
        settings = services.settings
        holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        lease = max(3 * settings.archiver.archive_wait_time, 10.0)
        return cls(engine=make_store_engine(settings.effective_store_url()), holder=holder, lease_seconds=lease)

    def create(self) -> None:
        """Check the store's schema once (creating an empty store; raises
        :class:`~slurmtower.errors.StoreSchemaError` for one at another revision)."""
        if not self._created:
            from slurmtower.store.migrate import check_or_create

            check_or_create(self.engine)
            self._created = True

    def acquire(self, name: str = "archiver", now: float | None = None) -> bool:
        """Take or renew the lease ``name``; True when this process holds it."""
        self.create()
        now = time.time() if now is None else now
        lease = self.leases
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(lease).values(name=name, holder=self.holder,
                                                  expires_at=now + self.lease_seconds))
            return True
        except IntegrityError:
            pass
        with self.engine.begin() as conn:
            res = conn.execute(
                update(lease)
                .where(lease.c.name == name, or_(lease.c.holder == self.holder, lease.c.expires_at < now))
                .values(holder=self.holder, expires_at=now + self.lease_seconds)
            )
            return bool(res.rowcount == 1)

    def release(self, name: str = "archiver") -> None:
        if not self._created:
            return
        with self.engine.begin() as conn:
            conn.execute(delete(self.leases).where(self.leases.c.name == name,
                                                   self.leases.c.holder == self.holder))

    def add(self, sample: LoadSample, retention_seconds: float) -> None:
        """Store one sample and drop those older than the retention."""
        self.create()
        with self.engine.begin() as conn:
            conn.execute(insert(self.samples).values(ts=sample.timestamp, holder=sample.archiver,
                                                     sample=sample.model_dump_json()))
            conn.execute(delete(self.samples).where(self.samples.c.ts < time.time() - retention_seconds))

    def window(self, start: float, end: float) -> list[LoadSample]:
        """Samples with ``start < ts <= end``, oldest first."""
        self.create()
        t = self.samples
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.c.sample).where(t.c.ts > start, t.c.ts <= end)
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


def _archive(services: Services) -> LoadArchive:
    archive = services.load_archive
    if archive is None:
        archive = services.load_archive = LoadArchive.from_settings(services)
    return archive


def setup(services: Services, _app: FastAPI) -> None:
    settings = services.settings.archiver
    archive = _archive(services)
    cache: SnapshotCache = shared_cache(services)
    hidden = frozenset(services.settings.api.hidden_partitions)
    if not settings.archive_usage_load:
        return

    async def round_() -> float:
        if not await asyncio.to_thread(archive.acquire):
            return settings.archive_wait_time
        snaps = await cache.get_all("nodes", "jobs", "partitions")
        if any(s.stale for s in snaps):
            raise SlurmUnavailable("slurmctld does not answer: no load sample taken")
        nodes = await asyncio.to_thread(snaps[0].value.nodes)
        sample = await asyncio.to_thread(take_sample, nodes, snaps[1].value, snaps[2].value, hidden,
                                         archive.holder)
        await asyncio.to_thread(archive.add, sample, settings.retention_days * 86400)
        return settings.archive_wait_time

    async def on_stop() -> None:
        try:
            await asyncio.to_thread(archive.release)
        except Exception:  # the lease simply expires
            log.warning("could not release the archiver lease", exc_info=True)

    services.background.append(BackgroundTask(name="load-archiver", run=round_, role="archiver",
                                              max_backoff=settings.max_backoff, on_stop=on_stop))


def _seconds(params: dict[str, str], name: str, default: float) -> float:
    value = params.get(name)
    if value is None:
        return default
    if not _DIGITS.fullmatch(value):
        raise InvalidInput(f"{name} must be a whole number of seconds, not {value[:40]!r}", param=name)
    return float(value)


@router.get("/load", dependencies=[require(Perm.READ)], response_model=LoadResponse,
            responses=problems(400, *READ_PROBLEMS))
async def load(
    request: Request,
    services: ServicesDep,
    time_s: Annotated[str | None, Query(alias="time", description="Seconds of samples (default: one "
                                        "archive interval).")] = None,
    offset_s: Annotated[str | None, Query(alias="offset", description="Ending this many seconds ago "
                                          "(default 0).")] = None,
) -> LoadResponse:
    """Archived load samples of the last ``time`` seconds (default: one archive interval),
    ending ``offset`` seconds ago."""
    params = strict_query(request, ("time", "offset"))
    settings = services.settings.archiver
    span = _seconds(params, "time", settings.archive_wait_time)
    offset = _seconds(params, "offset", 0)
    if span <= 0:
        raise InvalidInput("time must be at least 1 second", param="time")
    end = time.time() - offset
    samples = await asyncio.to_thread(_archive(services).window, end - span, end)
    return LoadResponse(archiving=settings.archive_usage_load, archive_wait_time=settings.archive_wait_time,
                        count=len(samples), samples=samples)
