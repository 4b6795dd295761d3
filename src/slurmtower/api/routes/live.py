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
import base64
import json
import logging
import re
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from slurmtower.actions.holds import HoldStore, node_holds
from slurmtower.api.cache import (
    FastReads,
    Snapshot,
    SnapshotCache,
    query_key,
    respond,
    services_of,
    shared_cache,
    strict_query,
)
from slurmtower.api.metrics_hook import slurm_call_observer
from slurmtower.api.offload import OffloadSpec, RefreshWorker
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.security import Perm, Principal, require
from slurmtower.api.services import BackgroundTask, Services
from slurmtower.errors import InvalidInput
from slurmtower.models import ControllerStats, Job, JobState, Node, NodeFlag, NodeState, Partition
from slurmtower.models.table import JobTable, NodeTable, node_fragment
from slurmtower.nodeset import NodeSet
from slurmtower.visibility import Visibility

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
    "build_usage",
    "hide_jobs",
    "node_table",
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


# -- hidden partitions (the policy is slurmtower.visibility) -------------------------------
def visible_jobs(jobs: list[Job], hidden: Collection[str]) -> list[Job]:
    """Jobs outside hidden partitions (:meth:`Visibility.jobs`)."""
    return Visibility(hidden_partitions=frozenset(hidden)).jobs(jobs) if hidden else jobs


def visible_nodes(nodes: list[Node], hidden: Collection[str]) -> list[Node]:
    """Nodes without hidden partition names (:meth:`Visibility.nodes`)."""
    return Visibility(hidden_partitions=frozenset(hidden)).nodes(nodes) if hidden else nodes


def visible_partitions(partitions: list[Partition], hidden: Collection[str]) -> list[Partition]:
    return Visibility(hidden_partitions=frozenset(hidden)).partitions(partitions)


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
        elif job.memory_mib is not None and node_count:
            mem = job.memory_mib // node_count + (1 if i < job.memory_mib % node_count else 0)
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
    policy = Visibility.from_settings(services.settings)

    def queue_suffix(viewer: Principal) -> str:
        snap = cache.peek("jobs")
        return _queue_variant(policy, snap.value if snap is not None else None, viewer)[0]

    app.add_middleware(FastReads, cache=cache, views=FAST_VIEWS, permission=_READ.dependency,
                       variants={"/queue": queue_suffix})
    hidden = _hidden(services)
    # Hidden partitions leave the queue where it is read, so no view can forget them.
    cache.offload(OffloadSpec(resource="jobs", method="job_table", delta="job_queue_delta", transform=hide_jobs,
                              args=(hidden,), rpcs=("REQUEST_JOB_INFO",)))
    cache.offload(OffloadSpec(resource="nodes", method="nodes", transform=node_table, args=(hidden,),
                              rpcs=("REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO")))
    if cache.shared is not None:
        # Every process takes part in the election (a follower must be ready to take over).
        services.background.append(BackgroundTask(name="shared-snapshot", run=cache.shared_round,
                                                  on_stop=cache.shared.close, needs_leader=False))


async def startup(services: Services) -> None:
    settings = services.settings
    # Only when the client is the one the settings make: the worker builds its own twin.
    if settings.api.refresh_in_subprocess and services.client_from_settings:
        worker = RefreshWorker(settings, report=slurm_call_observer,
                               timeout=max(60.0, 2 * settings.slurm.command_timeout))
        worker.start()
        shared_cache(services).worker = worker
    cache = shared_cache(services)
    if cache.shared is not None:
        await cache.shared_round()  # know this process's part before the first request


async def shutdown(services: Services) -> None:
    cache = shared_cache(services)
    worker, cache.worker = cache.worker, None
    if worker is not None:
        await worker.close()


def _cache(services: Services) -> SnapshotCache:
    return shared_cache(services)


def _hidden(services: Services) -> frozenset[str]:
    return frozenset(services.settings.api.hidden_partitions)


def hide_jobs(table: JobTable, hidden: frozenset[str]) -> JobTable:
    """The queue without hidden partitions (runs where the queue is read: the refresh worker)."""
    return table.hiding(hidden)


def _queue(table: JobTable) -> bytes:
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


#: id(node) -> (node, its JSON): nodes whose scontrol line did not change are the same
#: objects round after round (the client's memo), so their JSON is made once.
_NODE_JSON: dict[int, tuple[Node, bytes]] = {}


def _node_json(node: Node) -> bytes:
    found = _NODE_JSON.get(id(node))
    if found is not None and found[0] is node:
        return found[1]
    fragment = node_fragment(node)
    _NODE_JSON[id(node)] = (node, fragment)
    return fragment


def node_table(nodes: list[Node], hidden: frozenset[str]) -> NodeTable:
    """The nodes as a table without hidden partitions (runs where the nodes are read: the
    refresh worker)."""
    table = NodeTable.from_nodes(visible_nodes(nodes, hidden), _node_json)
    if len(_NODE_JSON) > 2 * len(table) + 100:  # forget nodes no longer read
        keep = {id(n) for n in nodes}
        for key in [k for k in _NODE_JSON if k not in keep]:
            del _NODE_JSON[key]
    return table


def _nodes(table: NodeTable) -> bytes:
    return b'{"count":%d,"nodes":%s}' % (len(table), table.all_json())


def _partitions(partitions: list[Partition], hidden: frozenset[str]) -> dict[str, Any]:
    shown = visible_partitions(partitions, hidden)
    return {"count": len(shown), "partitions": shown}


def _stats(stats: ControllerStats) -> dict[str, Any]:
    return {"stats": stats}


# -- filters and paging ---------------------------------------------------------------------
MAX_LIMIT = 100_000
_LIST_RE = re.compile(r"^[^\x00-\x1f]{1,200}$")
_NODE_STATE_WORDS: dict[str, str] = {
    **{s.value: s.value for s in NodeState},
    **{f.value: f.value for f in NodeFlag},
    "ALLOC": "ALLOCATED", "MIX": "MIXED", "UNK": "UNKNOWN", "FUTR": "FUTURE", "ERR": "ERROR",
    "DRAINED": "DRAIN", "DRAINING": "DRAIN", "DRNG": "DRAIN", "NO_RESPOND": "NOT_RESPONDING",
    "MAINT": "MAINTENANCE", "RESV": "RESERVED", "COMP": "COMPLETING", "POWERED_OFF": "POWERED_DOWN",
}
_JOB_STATE_CODES = {"PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CD": "COMPLETED", "CA": "CANCELLED",
                    "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED", "BF": "BOOT_FAIL",
                    "DL": "DEADLINE", "OOM": "OUT_OF_MEMORY", "CG": "COMPLETING", "CF": "CONFIGURING",
                    "RQ": "REQUEUED", "RH": "REQUEUE_HOLD", "RS": "RESIZING", "RV": "REVOKED",
                    "SI": "SIGNALING", "SE": "SPECIAL_EXIT", "SO": "STAGE_OUT", "ST": "STOPPED"}

QueueParam = Annotated[str | None, Query(description="Comma-separated values; any of them matches.",
                                         max_length=4000)]
LimitParam = Annotated[str | None, Query(description=f"At most this many items (1-{MAX_LIMIT}); "
                                         "then `next_cursor` gives the next page.")]
CursorParam = Annotated[str | None, Query(description="`next_cursor` of the previous page.", max_length=400)]
NodesParam = Annotated[str | None, Query(description="A node set, e.g. `n[1-100]` (jobs: running on any "
                                         "of them).", max_length=4000)]


def _words(params: dict[str, str], name: str) -> list[str] | None:
    raw = params.get(name)
    if raw is None:
        return None
    words = [w.strip() for w in raw.split(",") if w.strip()]
    if not words or not all(_LIST_RE.match(w) for w in words):
        raise InvalidInput(f"{name} must be a comma-separated list of names, not {raw[:60]!r}", param=name)
    return words


def _mapped(params: dict[str, str], name: str, known: dict[str, str]) -> set[str] | None:
    words = _words(params, name)
    if words is None:
        return None
    out = set()
    for word in words:
        value = known.get(word.upper().replace("-", "_"))
        if value is None:
            raise InvalidInput(f"{name}: {word[:40]!r} is not a known state "
                               f"(e.g. {', '.join(sorted(set(known.values()))[:8])} ...)", param=name)
        out.add(value)
    return out


def _node_set(params: dict[str, str]) -> NodeSet | None:
    raw = params.get("nodes")
    if raw is None:
        return None
    try:
        nodes = NodeSet(raw)
    except InvalidInput as exc:
        raise InvalidInput(f"nodes: {exc.message}", param="nodes") from exc
    if not nodes:
        raise InvalidInput("nodes: empty node set", param="nodes")
    return nodes


def _limit(params: dict[str, str]) -> int | None:
    raw = params.get("limit")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:  # int("²") raises
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {raw[:40]!r}", param="limit")
    return int(raw)


def _encode_cursor(kind: str, key: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps([kind, key]).encode()).decode().rstrip("=")


def _decode_cursor(params: dict[str, str], kind: str) -> Any:
    raw = params.get("cursor")
    if raw is None:
        return None
    try:
        got = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        ok = isinstance(got, list) and len(got) == 2 and got[0] == kind
        key = got[1] if ok else None
        ok = ok and (isinstance(key, int) and not isinstance(key, bool) and 0 <= key < 2**63 if kind == "j"
                     else isinstance(key, str) and 0 < len(key) <= 200)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidInput("cursor is not one this service gave (take next_cursor of the previous page)",
                           param="cursor")
    return key


def _page(table: JobTable | NodeTable, rows: Sequence[int], params: dict[str, str], kind: str,
          item: str) -> bytes:
    """``{"count": <matching>, "<item>": [...], "next_cursor": ...}`` for one page of ``rows``."""
    chosen, cursor = _page_rows(table, rows, params, kind)
    return (b'{"count":%d,"returned":%d,"next_cursor":%s,"%s":%s}'
            % (len(rows), len(chosen), json.dumps(cursor).encode(), item.encode(), table.json_array(chosen)))


def _page_rows(table: JobTable | NodeTable, rows: Sequence[int], params: dict[str, str],
               kind: str) -> tuple[Sequence[int], str | None]:
    """The rows of one page of ``rows`` (``limit``, ``cursor``) and the next page's cursor."""
    after = _decode_cursor(params, kind)
    limit = _limit(params)
    start = table.after(rows, after)
    chosen = rows[start:] if limit is None else rows[start:start + limit]
    more = limit is not None and start + limit < len(rows)
    return chosen, (_encode_cursor(kind, table.keys[chosen[-1]]) if more and chosen else None)


async def _respond_query(request: Request, cache: SnapshotCache, params: dict[str, str], snap: Snapshot,
                         build: Callable[[], bytes]) -> Response:
    return respond(request, await cache.query_view(query_key(request.url.path, params), [snap], build), cache.clock)


_QUEUE_PARAMS = ("user", "account", "partition", "state", "name", "nodes", "limit", "cursor")
_NODE_PARAMS = ("state", "partition", "nodes", "limit", "cursor", "holds")


@router.get("/queue", response_model=None,
            responses={200: {"model": QueueResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def queue(request: Request, services: ServicesDep, principal: Annotated[Principal, _READ],
                user: QueueParam = None, account: QueueParam = None,
                partition: QueueParam = None,
                state: Annotated[str | None, Query(description="Job states (`PENDING`, `RUNNING` ... or "
                                                   "squeue's `PD`, `R` ...), comma-separated.",
                                                   max_length=400)] = None,
                name: QueueParam = None, nodes: NodesParam = None, limit: LimitParam = None,
                cursor: CursorParam = None) -> Response:
    """The job queue: every job slurmctld holds (pending, running, recently finished), by job id.

    With filters (squeue's: user, account, partition, state, name, nodes) and/or ``limit``
    the answer is one page of the matching jobs, from the same snapshot (no Slurm query),
    with ``count`` (all matching), ``returned`` and ``next_cursor``. Readers see other
    users' jobs without their private fields (``api.private_job_fields``)."""
    params = strict_query(request, _QUEUE_PARAMS)
    cache = _cache(services)
    policy = Visibility.from_settings(services.settings)
    if not params:
        snap = await cache.get("jobs")
        suffix, owner = _queue_variant(policy, snap.value, principal)
        if not suffix:
            return respond(request, await cache.render("queue", [snap], _queue))
        return respond(request, await cache.render("queue" + suffix, [snap], _queue_private_free, policy, owner))
    filters: dict[str, Any] = {
        "user": _words(params, "user"), "account": _words(params, "account"),
        "partition": _words(params, "partition"), "name": _words(params, "name"),
        "state": _mapped(params, "state", {**{s.value: s.value for s in JobState}, **_JOB_STATE_CODES}),
    }
    node_set = _node_set(params)
    if node_set is not None:
        filters["nodes"] = set(node_set)
    _limit(params), _decode_cursor(params, "j")  # bad paging is refused before Slurm is asked
    snap = await cache.get("jobs")
    table: JobTable = snap.value
    suffix, owner = _queue_variant(policy, table, principal)

    def build() -> bytes:
        rows = table.select(**{k: set(v) for k, v in filters.items() if v is not None})
        # The private-free table has the same rows in the same order, indexes aside.
        shown = policy.private_free_table(table, owner) if suffix else table
        return _page(shown, rows, params, "j", "jobs")

    return respond(request, await cache.query_view(query_key(request.url.path + suffix, params), [snap], build),
                   cache.clock)


@router.get("/nodes", dependencies=[_READ], response_model=None,
            responses={200: {"model": NodesResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def nodes(request: Request, services: ServicesDep,
                state: Annotated[str | None, Query(description="Base states or flags (`idle`, `down`, `drain`, "
                                                   "`not_responding` ...), comma-separated: any matches.",
                                                   max_length=400)] = None,
                partition: QueueParam = None, nodes: NodesParam = None, limit: LimitParam = None,
                cursor: CursorParam = None,
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
    cache = _cache(services)
    if not params and not with_holds:
        snap = await cache.get("nodes")
        return respond(request, await cache.render("nodes", [snap], _nodes))
    states = _mapped(params, "state", _NODE_STATE_WORDS)
    parts = _words(params, "partition")
    node_set = _node_set(params)
    _limit(params), _decode_cursor(params, "n")
    snap = await cache.get("nodes")
    table: NodeTable = snap.value

    def matching() -> Sequence[int]:
        rows = table.select(state=states, partition=set(parts) if parts is not None else None)
        if node_set is not None:
            wanted = set(table.rows_of(node_set))
            rows = [r for r in rows if r in wanted]
        return rows

    if with_holds:
        store = HoldStore(services.action_catalogue().store.engine)
        body = await asyncio.to_thread(_nodes_with_holds, store, table, matching(), params, snap.fetched_at)
        return _live_json(cache, snap, body)
    return await _respond_query(request, cache, params, snap, lambda: _page(table, matching(), params, "n", "nodes"))


def _nodes_with_holds(store: HoldStore, table: NodeTable, rows: Sequence[int], params: dict[str, str],
                      read_at: datetime) -> dict[str, Any]:
    chosen, cursor = _page_rows(table, rows, params, "n")
    nodes = [Node.model_validate_json(table.fragments[r]) for r in chosen]
    holds = node_holds(store, nodes, read_at=read_at)
    shown = []
    for r, node in zip(chosen, nodes, strict=True):
        item = json.loads(table.fragments[r])
        item["holds"] = [h.as_dict() for h in holds[node.name]]
        shown.append(item)
    return {"count": len(rows), "returned": len(chosen), "next_cursor": cursor, "nodes": shown}


def _live_json(cache: SnapshotCache, snap: Snapshot, body: dict[str, Any]) -> JSONResponse:
    """A body joined per request (not cached bytes) with the snapshot's age and staleness."""
    age = max(0.0, cache.clock() - snap.fetched_mono)
    headers = {"X-Data-Age": f"{age:.3f}", "Cache-Control": "no-cache"}
    meta: dict[str, Any] = {"fetched_at": snap.fetched_at.isoformat(), "stale": snap.stale}
    if snap.stale:
        headers["X-Data-Stale"] = "true"
        meta["stale_reason"] = snap.error
    return JSONResponse({**meta, **body}, headers=headers)


#: Node states and flags that take a node out of service (a hold's).
_OUT = frozenset({NodeState.DOWN.value, NodeFlag.DRAIN.value, NodeFlag.FAIL.value})


def _holds_body(store: HoldStore, table: NodeTable, node_set: NodeSet | None, read_at: datetime) -> dict[str, Any]:
    rows = set(table.select(state=_OUT)) | set(table.rows_of(store.nodes()))
    if node_set is not None:
        rows &= set(table.rows_of(node_set))
    nodes = [Node.model_validate_json(table.fragments[r]) for r in sorted(rows)]
    holds = node_holds(store, nodes, read_at=read_at)
    shown = [{"name": n.name, "state": n.state_text, "reason": n.reason,
              "holds": [h.as_dict() for h in holds[n.name]]} for n in nodes if holds[n.name]]
    return {"count": len(shown), "nodes": shown}


@router.get("/nodes/holds", dependencies=[_READ], response_model=None,
            responses={200: {"model": NodeHoldsResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def nodes_holds(request: Request, services: ServicesDep, nodes: NodesParam = None) -> JSONResponse:
    """Who holds each node out of service (drain holds): every owner's hold, oldest first.

    Several owners can hold one node (a person, a health check, a rule); it resumes only when
    every hold is released. Read from the same snapshot as ``/nodes`` (whose bytes stay
    cached: holds are joined here, per request, from slurmtower's store), reconciled with it:
    a node in service has no hold, an out-of-service node is held by the holders its reason
    names (a reason set outside slurmtower: ``user:<who set it>``)."""
    params = strict_query(request, ("nodes",))
    node_set = _node_set(params)
    cache = _cache(services)
    snap = await cache.get("nodes")
    store = HoldStore(services.action_catalogue().store.engine)
    body = await asyncio.to_thread(_holds_body, store, snap.value, node_set, snap.fetched_at)
    return _live_json(cache, snap, body)


@router.get("/partitions", dependencies=[_READ], response_model=None,
            responses={200: {"model": PartitionsResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def partitions(request: Request, services: ServicesDep) -> Response:
    """Every partition with its nodes and limits."""
    strict_query(request, ())
    cache = _cache(services)
    snap = await cache.get("partitions")
    return respond(request, await cache.render("partitions", [snap], _partitions, _hidden(services)))


@router.get("/stats", dependencies=[_READ], response_model=None,
            responses={200: {"model": StatsResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def stats(request: Request, services: ServicesDep) -> Response:
    """slurmctld statistics (sdiag): scheduler cycles, job counters, RPCs by type and user."""
    strict_query(request, ())
    cache = _cache(services)
    snap = await cache.get("stats")
    return respond(request, await cache.render("stats", [snap], _stats))


def _usage(nodes: NodeTable, jobs: JobTable, partitions: list[Partition], hidden: frozenset[str]) -> dict[str, Any]:
    return build_usage(nodes.nodes(), jobs.active(), partitions, hidden)


@router.get("/usage", dependencies=[_READ], response_model=None,
            responses={200: {"model": UsageResponse}, **problems(400, *READ_PROBLEMS, 503)})
async def usage(request: Request, services: ServicesDep) -> Response:
    """For each partition, its nodes and the CPUs and memory its running jobs use, with totals."""
    strict_query(request, ())
    cache = _cache(services)
    snaps = await cache.get_all("nodes", "jobs", "partitions")
    return respond(request, await cache.render("usage", snaps, _usage, _hidden(services)))
