"""Live reads through the shared snapshot cache: /queue, /nodes, /partitions, /stats, /usage.

Every body carries ``fetched_at`` and ``stale`` (and ``stale_reason`` when stale); the
``X-Data-Age`` header gives the age in seconds. Partitions listed in
``api.hidden_partitions`` are hidden everywhere: their jobs leave /queue and /usage, their
names leave node partition lists, nodes that belong to hidden partitions only leave /nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from pydantic import BaseModel, Field

from slurmtower.api.cache import FastReads, SnapshotCache, respond, services_of, shared_cache, strict_query
from slurmtower.api.metrics_hook import slurm_call_observer
from slurmtower.api.offload import OffloadSpec, RefreshWorker
from slurmtower.api.security import Perm, require
from slurmtower.api.services import Services
from slurmtower.models import ControllerStats, Job, JobState, Node, Partition
from slurmtower.nodeset import NodeSet

__all__ = [
    "NodesResponse",
    "PartitionsResponse",
    "QueueResponse",
    "StatsResponse",
    "UsageNode",
    "UsagePartition",
    "UsageResponse",
    "UsageTotals",
    "build_usage",
    "router",
    "setup",
    "shutdown",
    "startup",
    "visible_jobs",
    "visible_nodes",
    "visible_partitions",
]

log = logging.getLogger(__name__)
router = APIRouter(tags=["live"])
ServicesDep = Annotated[Services, Depends(services_of)]


# -- documented shapes ------------------------------------------------------------------
class LiveMeta(BaseModel):
    fetched_at: datetime
    """When slurmctld answered (the ``X-Data-Age`` header gives the age in seconds)."""
    stale: bool
    """True when slurmctld did not answer and this is the last snapshot (``api.serve_stale``)."""
    stale_reason: str | None = None


class QueueResponse(LiveMeta):
    count: int
    jobs: list[Job]


class NodesResponse(LiveMeta):
    count: int
    nodes: list[Node]


class PartitionsResponse(LiveMeta):
    count: int
    partitions: list[Partition]


class StatsResponse(LiveMeta):
    stats: ControllerStats


class UsageTotals(BaseModel):
    cpus_total: int
    cpus_used: int
    memory_total_mib: int
    memory_used_mib: int
    cpu_usage: float | None = Field(description="cpus_used / cpus_total; null when the total is 0")
    memory_usage: float | None = Field(description="memory_used_mib / memory_total_mib; null when 0")
    jobs: int


class UsageNode(UsageTotals):
    state: str | None
    """The node's state (``IDLE``, ``MIXED+DRAIN`` ...); null when slurmctld did not list it."""


class UsagePartition(BaseModel):
    nodes: dict[str, UsageNode]
    """Per node: the CPUs and memory used by this partition's running jobs on it."""
    totals: UsageTotals


class UsageResponse(LiveMeta):
    partitions: dict[str, UsagePartition]
    totals: UsageTotals
    """Over every visible partition (a node in two partitions counts once)."""


# -- hidden partitions --------------------------------------------------------------------
def _split(partition: str | None) -> list[str]:
    return [p for p in (partition or "").split(",") if p]


def visible_jobs(jobs: list[Job], hidden: Collection[str]) -> list[Job]:
    """Jobs outside hidden partitions; a pending job that names several partitions keeps the
    visible ones."""
    if not hidden:
        return jobs
    out = []
    for job in jobs:
        parts = _split(job.partition)
        shown = [p for p in parts if p not in hidden]
        if parts and not shown:
            continue
        out.append(job if shown == parts else job.model_copy(update={"partition": ",".join(shown)}))
    return out


def visible_nodes(nodes: list[Node], hidden: Collection[str]) -> list[Node]:
    """Nodes without hidden partition names; a node only in hidden partitions is left out."""
    if not hidden:
        return nodes
    out = []
    for node in nodes:
        shown = [p for p in node.partitions if p not in hidden]
        if node.partitions and not shown:
            continue
        out.append(node if len(shown) == len(node.partitions)
                   else node.model_copy(update={"partitions": shown}))
    return out


def visible_partitions(partitions: list[Partition], hidden: Collection[str]) -> list[Partition]:
    return [p for p in partitions if p.name not in hidden]


# -- /usage -------------------------------------------------------------------------------
def _ratio(used: int, total: int) -> float | None:
    return round(used / total, 4) if total > 0 else None


def _totals(cpus_total: int, cpus_used: int, mem_total: int, mem_used: int, jobs: int) -> dict[str, Any]:
    return {"cpus_total": cpus_total, "cpus_used": cpus_used, "memory_total_mib": mem_total,
            "memory_used_mib": mem_used, "cpu_usage": _ratio(cpus_used, cpus_total),
            "memory_usage": _ratio(mem_used, mem_total), "jobs": jobs}


def _job_share(job: Job, node_count: int) -> list[tuple[int, int]]:
    """(cpus, memory MiB) the job uses on each of its nodes, in node order."""
    cpus = job.cpus or 0
    base, extra = divmod(cpus, node_count) if node_count else (0, 0)
    shares = []
    for i in range(node_count):
        c = base + (1 if i < extra else 0)
        if job.memory_per_node_mib is not None:
            mem = job.memory_per_node_mib
        elif job.memory_per_cpu_mib is not None:
            mem = job.memory_per_cpu_mib * c
        else:
            mem = 0
        shares.append((c, mem))
    return shares


def build_usage(nodes: list[Node], jobs: list[Job], partitions: list[Partition],
                hidden: Collection[str]) -> dict[str, Any]:
    """The usage matrix: for each visible partition, its nodes and what its running jobs use.

    Tolerates nodes reporting 0 (or no) CPUs or memory (ratios become null), jobs without a
    user name (deleted users) and jobs of hidden partitions (left out).
    """
    by_name = {n.name: n for n in nodes}
    matrix: dict[str, dict[str, dict[str, Any]]] = {}
    for part in visible_partitions(partitions, hidden):
        rows: dict[str, dict[str, Any]] = {}
        for name in (NodeSet(part.nodes) if part.nodes else ()):
            node = by_name.get(name)
            rows[name] = {"state": node.state_text if node else None,
                          "cpus_total": (node.cpus or 0) if node else 0,
                          "memory_total_mib": (node.real_memory_mib or 0) if node else 0,
                          "cpus_used": 0, "memory_used_mib": 0, "jobs": 0}
        matrix[part.name] = rows
    for job in visible_jobs(jobs, hidden):
        if job.state not in (JobState.RUNNING, JobState.SUSPENDED) or not job.nodes:
            continue
        rows = matrix.get(job.partition or "", {})
        try:
            job_nodes = list(NodeSet(job.nodes))
        except Exception:  # a malformed list from Slurm must not break /usage
            log.warning("job %s has an unparsable node list %r", job.job_id, job.nodes)
            continue
        for name, (cpus, mem) in zip(job_nodes, _job_share(job, len(job_nodes)), strict=True):
            row = rows.get(name)
            if row is not None:
                row["cpus_used"] += cpus
                row["memory_used_mib"] += mem
                row["jobs"] += 1
    out: dict[str, Any] = {}
    seen: dict[str, dict[str, int]] = {}
    for part_name, rows in matrix.items():
        sums = [0, 0, 0, 0, 0]
        shaped = {}
        for name, row in rows.items():
            shaped[name] = {"state": row["state"], **_totals(row["cpus_total"], row["cpus_used"],
                                                              row["memory_total_mib"],
                                                              row["memory_used_mib"], row["jobs"])}
            for i, k in enumerate(("cpus_total", "cpus_used", "memory_total_mib", "memory_used_mib", "jobs")):
                sums[i] += row[k]
            agg = seen.setdefault(name, {"cpus_total": row["cpus_total"],
                                         "memory_total_mib": row["memory_total_mib"],
                                         "cpus_used": 0, "memory_used_mib": 0, "jobs": 0})
            agg["cpus_used"] += row["cpus_used"]
            agg["memory_used_mib"] += row["memory_used_mib"]
            agg["jobs"] += row["jobs"]
        out[part_name] = {"nodes": shaped, "totals": _totals(*sums)}
    grand = _totals(sum(a["cpus_total"] for a in seen.values()), sum(a["cpus_used"] for a in seen.values()),
                    sum(a["memory_total_mib"] for a in seen.values()),
                    sum(a["memory_used_mib"] for a in seen.values()), sum(a["jobs"] for a in seen.values()))
    return {"partitions": out, "totals": grand}


# -- routes -----------------------------------------------------------------------------------
#: path -> (view, the snapshots it is built from), for the cached fast path.
FAST_VIEWS: dict[str, tuple[str, tuple[str, ...]]] = {
    "/queue": ("queue", ("jobs",)),
    "/nodes": ("nodes", ("nodes",)),
    "/partitions": ("partitions", ("partitions",)),
    "/stats": ("stats", ("stats",)),
    "/usage": ("usage", ("nodes", "jobs", "partitions")),
}
_READ = require(Perm.READ)


def setup(services: Services, app: FastAPI) -> None:
    cache = shared_cache(services)
    app.add_middleware(FastReads, cache=cache, views=FAST_VIEWS, permission=_READ.dependency)
    hidden = _hidden(services)
    cache.offload(OffloadSpec(resource="jobs", method="jobs", view="queue", build=_queue, args=(hidden,)))
    cache.offload(OffloadSpec(resource="nodes", method="nodes", view="nodes", build=_nodes, args=(hidden,)))


async def startup(services: Services) -> None:
    settings = services.settings
    # Only when the client is the one the settings make: the worker builds its own twin.
    if settings.api.refresh_in_subprocess and services.extras.get("client_from_settings"):
        worker = RefreshWorker(settings, report=slurm_call_observer,
                               timeout=max(60.0, 2 * settings.slurm.command_timeout))
        worker.start()
        shared_cache(services).worker = worker


async def shutdown(services: Services) -> None:
    cache = shared_cache(services)
    worker, cache.worker = cache.worker, None
    if worker is not None:
        await worker.close()


def _cache(services: Services) -> SnapshotCache:
    return shared_cache(services)


def _hidden(services: Services) -> frozenset[str]:
    return frozenset(services.settings.api.hidden_partitions)


def _queue(jobs: list[Job], hidden: frozenset[str]) -> dict[str, Any]:
    shown = visible_jobs(jobs, hidden)
    return {"count": len(shown), "jobs": shown}


def _nodes(nodes: list[Node], hidden: frozenset[str]) -> dict[str, Any]:
    shown = visible_nodes(nodes, hidden)
    return {"count": len(shown), "nodes": shown}


def _partitions(partitions: list[Partition], hidden: frozenset[str]) -> dict[str, Any]:
    shown = visible_partitions(partitions, hidden)
    return {"count": len(shown), "partitions": shown}


def _stats(stats: ControllerStats) -> dict[str, Any]:
    return {"stats": stats}


@router.get("/queue", dependencies=[_READ], response_model=None,
            responses={200: {"model": QueueResponse}})
async def queue(request: Request, services: ServicesDep) -> Response:
    """The job queue: every job slurmctld holds (pending, running, recently finished)."""
    strict_query(request, ())
    cache = _cache(services)
    snap = await cache.get("jobs")
    return respond(request, await cache.render("queue", [snap], _queue, _hidden(services)))


@router.get("/nodes", dependencies=[_READ], response_model=None,
            responses={200: {"model": NodesResponse}})
async def nodes(request: Request, services: ServicesDep) -> Response:
    """Every node with its state, flags, CPUs and memory."""
    strict_query(request, ())
    cache = _cache(services)
    snap = await cache.get("nodes")
    return respond(request, await cache.render("nodes", [snap], _nodes, _hidden(services)))


@router.get("/partitions", dependencies=[_READ], response_model=None,
            responses={200: {"model": PartitionsResponse}})
async def partitions(request: Request, services: ServicesDep) -> Response:
    """Every partition with its nodes and limits."""
    strict_query(request, ())
    cache = _cache(services)
    snap = await cache.get("partitions")
    return respond(request, await cache.render("partitions", [snap], _partitions, _hidden(services)))


@router.get("/stats", dependencies=[_READ], response_model=None,
            responses={200: {"model": StatsResponse}})
async def stats(request: Request, services: ServicesDep) -> Response:
    """slurmctld statistics (sdiag): scheduler cycles, job counters, RPCs by type and user."""
    strict_query(request, ())
    cache = _cache(services)
    snap = await cache.get("stats")
    return respond(request, await cache.render("stats", [snap], _stats))


@router.get("/usage", dependencies=[_READ], response_model=None,
            responses={200: {"model": UsageResponse}})
async def usage(request: Request, services: ServicesDep) -> Response:
    """For each partition, its nodes and the CPUs and memory its running jobs use, with totals."""
    strict_query(request, ())
    cache = _cache(services)
    snaps = [await cache.get("nodes"), await cache.get("jobs"), await cache.get("partitions")]
    return respond(request, await cache.render("usage", snaps, build_usage, _hidden(services)))
