"""Live reads through the shared snapshot cache: /queue, /nodes, /partitions, /stats, /usage.

Every body carries ``fetched_at`` and ``stale`` (and ``stale_reason`` when stale); the
``X-Data-Age`` header gives the age in seconds. ``/nodes/holds`` joins the drain holds of
slurmtower's store to the node snapshot per request (``/nodes`` stays answered from cached
bytes). Partitions listed in
``api.hidden_partitions`` are hidden everywhere: their jobs leave /queue and /usage, their
names leave node partition lists, nodes that belong to hidden partitions only leave /nodes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from slurmtower.actions.hold_store import HoldStore
from slurmtower.actions.holds import held_nodes, node_holds
from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.query import NamesQuery, NodesQuery, checked
from slurmtower.api.reads import FastReads, respond, strict_query
from slurmtower.api.security import Perm, Principal, require
from slurmtower.live.cache import Snapshot, SnapshotCache, query_key
from slurmtower.live.filters import (
    JOB_CURSOR_RE,
    JOB_STATES_RE,
    MAX_LIMIT,
    NODE_CURSOR_RE,
    NODE_STATE_WORDS,
    NODE_STATES_RE,
    QueueFilter,
    decode_cursor,
    mapped,
    node_set,
    page,
    page_rows,
    words,
)
from slurmtower.live.filters import limit as page_limit
from slurmtower.live.hidden import visible_partitions
from slurmtower.live.usage import build_usage
from slurmtower.models import ControllerStats, Job, Node, NodeFlag, NodeState, Partition
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.nodeset import NodeSet
from slurmtower.runtime import Services
from slurmtower.visibility import PrivateFreeRows, Visibility

__all__ = [
    "NodeHoldsResponse",
    "NodesResponse",
    "PartitionsResponse",
    "QueueResponse",
    "StatsResponse",
    "UsageNode",
    "UsagePartition",
    "UsageResponse",
    "UsageTotals",
    "router",
    "setup",
]

log = logging.getLogger(__name__)
router = APIRouter(tags=["live"])


# -- documented shapes ------------------------------------------------------------------
class LiveMeta(BaseModel):
    fetched_at: datetime
    """When slurmctld answered (the ``X-Data-Age`` header gives the age in seconds)."""
    stale: bool
    """True when slurmctld did not answer and this is the last snapshot (``api.serve_stale``)."""
    stale_reason: str | None = None


class QueueResponse(LiveMeta):
    count: int
    """Jobs in the queue (with filters: jobs that match, over every page)."""
    returned: int | None = None
    """With filters or ``limit``: jobs in this page."""
    next_cursor: str | None = None
    """With ``limit``: pass as ``cursor`` for the next page; null on the last one."""
    jobs: list[Job]
    """Fields Slurm does not report for a job are left out (read as null)."""


class NodesResponse(LiveMeta):
    count: int
    returned: int | None = None
    next_cursor: str | None = None
    nodes: list[Node]


class NodeHold(BaseModel):
    holder: str
    """``slurmtower:alice@cli`` (who@via), or ``user:root`` for a DRAIN/DOWN made outside slurmtower."""
    reason: str | None
    since: datetime | None
    """When the hold began (null: unknown)."""
    state: str
    """What the holder asked for: ``DRAIN`` or ``DOWN`` (an outside hold: the node's state)."""
    execution_id: str | None
    """The execution that made it (``GET /executions/{id}``); null for an outside hold."""
    outside: bool


class HeldNode(BaseModel):
    name: str
    state: str
    """``IDLE+DRAIN`` as scontrol prints it."""
    reason: str | None
    """The reason Slurm shows: every hold's, each with its holder's tag."""
    holds: list[NodeHold]
    """Oldest first; the node is back in service only once every hold is released."""


class NodeHoldsResponse(LiveMeta):
    count: int
    """Nodes out of service (DOWN, DRAIN, FAIL) in this answer."""
    nodes: list[HeldNode]


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
    """Answer fresh cached views without routing (:class:`~slurmtower.api.reads.FastReads`)."""
    cache = services.live_cache()
    policy = Visibility.from_settings(services.settings)

    def queue_suffix(viewer: Principal) -> str:
        snap = cache.peek("jobs")
        return _queue_variant(policy, snap.value if snap is not None else None, viewer)[0]

    app.fast_reads = FastReads(cache=cache, views=FAST_VIEWS, permission=_READ.dependency,  # type: ignore[attr-defined]
                               variants={"/queue": queue_suffix})


def _queue(table: JobTable | PrivateFreeRows) -> bytes:
    return b'{"count":%d,"jobs":%s}' % (len(table), table.all_json())


def _queue_variant(policy: Visibility, table: JobTable | None, viewer: Principal) -> tuple[str, str | None]:
    """The suffix of the caller's queue view and whose jobs keep their private fields in it:
    ``""`` (everything) for those who see every private field; for readers the private-free
    view, shared by every reader without jobs in the queue, one's own for a reader with jobs."""
    if policy.sees_all_private(viewer):
        return "", None
    if table is not None and policy.owns_jobs(table, viewer):
        return f"~private-free~{viewer.name}", viewer.name
    return "~private-free", None


def _queue_private_free(table: JobTable, policy: Visibility, owner: str | None) -> bytes:
    return _queue(policy.private_free_table(table, owner))


def _nodes(table: NodeTable) -> bytes:
    return b'{"count":%d,"nodes":%s}' % (len(table), table.all_json())


def _partitions(partitions: list[Partition], hidden: frozenset[str]) -> dict[str, Any]:
    shown = visible_partitions(partitions, hidden)
    return {"count": len(shown), "partitions": shown}


def _stats(stats: ControllerStats) -> dict[str, Any]:
    return {"stats": stats}


# -- filters and paging ---------------------------------------------------------------------
# Each declared with the grammar its check applies (slurmtower.live.filters): api/query.py.
QueueParam = NamesQuery
LimitParam = Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description=f"At most this many items "
                                         f"(1-{MAX_LIMIT}); then `next_cursor` gives the next page.")]
NodesParam = NodesQuery


async def _respond_query(request: Request, cache: SnapshotCache, params: dict[str, str], snap: Snapshot[Any],
                         build: Callable[[], bytes]) -> Response:
    return respond(request, await cache.query_view(query_key(request.url.path, params), [snap], build), cache.clock)


_QUEUE_PARAMS = ("user", "account", "partition", "state", "name", "nodes", "limit", "cursor")
_NODE_PARAMS = ("state", "partition", "nodes", "limit", "cursor", "holds")


@router.get("/queue", response_model=None,
            responses={200: {"model": QueueResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def queue(request: Request, services: ClusterDep, principal: Annotated[Principal, _READ],
                user: QueueParam = None, account: QueueParam = None,
                partition: QueueParam = None,
                state: Annotated[str | None, checked("Job states (`PENDING`, `RUNNING` ... or squeue's `PD`, "
                                                     "`R` ...; any case), comma-separated.", JOB_STATES_RE,
                                                     max_length=400)] = None,
                name: QueueParam = None, nodes: NodesParam = None, limit: LimitParam = None,
                cursor: Annotated[str | None, checked("`next_cursor` of the previous page: the job id the "
                                                      "page starts after.", JOB_CURSOR_RE)] = None) -> Response:
    """The job queue: every job slurmctld holds (pending, running, recently finished), by job id.

    With filters (squeue's: user, account, partition, state, name, nodes) and/or ``limit``
    the answer is one page of the matching jobs, from the same snapshot (no Slurm query),
    with ``count`` (all matching), ``returned`` and ``next_cursor``. Readers see other
    users' jobs without their private fields (``api.private_job_fields``)."""
    params = strict_query(request, _QUEUE_PARAMS)
    live = services.live()
    cache = live.cache
    policy = Visibility.from_settings(services.settings)
    if not params:
        snap = await live.jobs()
        suffix, owner = _queue_variant(policy, snap.value, principal)
        if not suffix:
            return respond(request, await cache.render("queue", [snap], _queue))
        return respond(request, await cache.render("queue" + suffix, [snap], _queue_private_free, policy, owner))
    wanted = QueueFilter.from_params(params)
    page_limit(params), decode_cursor(params, "j")  # bad paging is refused before Slurm is asked
    snap = await live.jobs()
    table: JobTable = snap.value
    suffix, owner = _queue_variant(policy, table, principal)

    def build() -> bytes:
        rows = wanted.rows(table)
        # The private-free table has the same rows in the same order, indexes aside.
        shown = policy.private_free_table(table, owner) if suffix else table
        return page(shown, rows, params, "j", "jobs")

    return respond(request, await cache.query_view(query_key(request.url.path + suffix, params), [snap], build),
                   cache.clock)


@router.get("/nodes", dependencies=[_READ], response_model=None,
            responses={200: {"model": NodesResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def nodes(request: Request, services: ClusterDep,
                state: Annotated[str | None, checked("Base states or flags (`idle`, `down`, `drain`, "
                                                     "`not_responding` ...; any case), comma-separated: any "
                                                     "matches.", NODE_STATES_RE, max_length=400)] = None,
                partition: QueueParam = None, nodes: NodesParam = None, limit: LimitParam = None,
                cursor: Annotated[str | None, checked("`next_cursor` of the previous page: the node name the "
                                                      "page starts after.", NODE_CURSOR_RE)] = None,
                holds: Annotated[bool | None, Query(description="`true`: each node also carries its drain "
                                                    "holds (`holds`, as `/nodes/holds` gives them; `[]` for a "
                                                    "node in service), joined per request from the store.")]
                = None) -> Response:
    """Every node with its state, flags, CPUs and memory, in natural name order.

    With filters (state, partition, nodes) and/or ``limit``: one page of the matching nodes
    from the same snapshot, with ``count``, ``returned`` and ``next_cursor``. With
    ``holds=true`` each node also carries who holds it out of service."""
    params = strict_query(request, _NODE_PARAMS)
    with_holds = bool(holds)  # FastAPI parsed it (a bad value is a 400 naming it)
    params.pop("holds", None)
    live = services.live()
    cache = live.cache
    if not params and not with_holds:
        snap = await live.nodes()
        return respond(request, await cache.render("nodes", [snap], _nodes))
    states = mapped(params, "state", NODE_STATE_WORDS)
    parts = words(params, "partition")
    wanted_nodes = node_set(params)
    page_limit(params), decode_cursor(params, "n")
    snap = await live.nodes()
    table: NodeTable = snap.value

    def matching() -> Sequence[int]:
        rows = table.select(state=states, partition=set(parts) if parts is not None else None)
        if wanted_nodes is not None:
            wanted = set(table.rows_of(wanted_nodes))
            rows = [r for r in rows if r in wanted]
        return rows

    if with_holds:
        store = services.action_catalogue().store.holds()
        body = await asyncio.to_thread(_nodes_with_holds, store, table, matching(), params, snap.fetched_at)
        return _live_json(cache, snap, body)
    return await _respond_query(request, cache, params, snap, lambda: page(table, matching(), params, "n", "nodes"))


def _nodes_with_holds(store: HoldStore, table: NodeTable, rows: Sequence[int], params: dict[str, str],
                      read_at: datetime) -> dict[str, Any]:
    chosen, cursor = page_rows(table, rows, params, "n")
    nodes = [Node.model_validate_json(table.fragments[r]) for r in chosen]
    holds = node_holds(store, nodes, read_at=read_at)
    shown = []
    for r, node in zip(chosen, nodes, strict=True):
        item = json.loads(table.fragments[r])
        item["holds"] = [h.as_dict() for h in holds[node.name]]
        shown.append(item)
    return {"count": len(rows), "returned": len(chosen), "next_cursor": cursor, "nodes": shown}


def _live_json(cache: SnapshotCache, snap: Snapshot[Any], body: dict[str, Any]) -> JSONResponse:
    """A body joined per request (not cached bytes) with the snapshot's age and staleness."""
    now = cache.clock()
    age = max(0.0, now - snap.fetched_mono)
    headers = {"X-Data-Age": f"{age:.3f}", "X-State-Age": f"{min(age, max(0.0, now - snap.clock.mono)):.3f}",
               "Cache-Control": "no-cache"}
    meta: dict[str, Any] = {"fetched_at": snap.fetched_at.isoformat(), "state_fetched_at": snap.clock.at.isoformat(),
                            "stale": snap.stale}
    if snap.stale:
        headers["X-Data-Stale"] = "true"
        meta["stale_reason"] = snap.error
    return JSONResponse({**meta, **body}, headers=headers)


#: Node states and flags that take a node out of service (a hold's).
_OUT = frozenset({NodeState.DOWN.value, NodeFlag.DRAIN.value, NodeFlag.FAIL.value})


def _holds_body(store: HoldStore, table: NodeTable, wanted: NodeSet | None, read_at: datetime) -> dict[str, Any]:
    rows = set(table.select(state=_OUT)) | set(table.rows_of(held_nodes(store)))
    if wanted is not None:
        rows &= set(table.rows_of(wanted))
    nodes = [Node.model_validate_json(table.fragments[r]) for r in sorted(rows)]
    holds = node_holds(store, nodes, read_at=read_at)
    shown = [{"name": n.name, "state": n.state_text, "reason": n.reason,
              "holds": [h.as_dict() for h in holds[n.name]]} for n in nodes if holds[n.name]]
    return {"count": len(shown), "nodes": shown}


@router.get("/nodes/holds", dependencies=[_READ], response_model=None,
            responses={200: {"model": NodeHoldsResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def nodes_holds(request: Request, services: ClusterDep, nodes: NodesParam = None) -> JSONResponse:
    """Who holds each node out of service (drain holds): every owner's hold, oldest first.

    Several owners can hold one node (a person, a health check, a rule); it resumes only when
    every hold is released. Read from the same snapshot as ``/nodes`` (whose bytes stay
    cached: holds are joined here, per request, from slurmtower's store), reconciled with it:
    a node in service has no hold, an out-of-service node is held by the holders its reason
    names (a reason set outside slurmtower: ``user:<who set it>``)."""
    params = strict_query(request, ("nodes",))
    wanted_nodes = node_set(params)
    live = services.live()
    cache = live.cache
    snap = await live.nodes()
    store = services.action_catalogue().store.holds()
    body = await asyncio.to_thread(_holds_body, store, snap.value, wanted_nodes, snap.fetched_at)
    return _live_json(cache, snap, body)


@router.get("/partitions", dependencies=[_READ], response_model=None,
            responses={200: {"model": PartitionsResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def partitions(request: Request, services: ClusterDep) -> Response:
    """Every partition with its nodes and limits."""
    strict_query(request, ())
    live = services.live()
    cache = live.cache
    snap = await live.partitions()
    return respond(request, await cache.render("partitions", [snap], _partitions, live.hidden))


@router.get("/stats", dependencies=[_READ], response_model=None,
            responses={200: {"model": StatsResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def stats(request: Request, services: ClusterDep) -> Response:
    """slurmctld statistics (sdiag): scheduler cycles, job counters, RPCs by type and user."""
    strict_query(request, ())
    live = services.live()
    cache = live.cache
    snap = await live.stats()
    return respond(request, await cache.render("stats", [snap], _stats))


def _usage(nodes: NodeTable, jobs: JobTable, partitions: list[Partition], hidden: frozenset[str]) -> dict[str, Any]:
    return build_usage(nodes.nodes(), jobs.active(), partitions, hidden)


@router.get("/usage", dependencies=[_READ], response_model=None,
            responses={200: {"model": UsageResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def usage(request: Request, services: ClusterDep) -> Response:
    """For each partition, its nodes and the CPUs and memory its running jobs use, with totals."""
    strict_query(request, ())
    live = services.live()
    cache = live.cache
    snaps: list[Snapshot[Any]] = list(await live.load())
    return respond(request, await cache.render("usage", snaps, _usage, live.hidden))
