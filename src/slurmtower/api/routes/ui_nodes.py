"""Dashboard pages (see :mod:`slurmtower.api.routes.dashboard`): the node map and node pages.

``/ui/nodes``
    every visible node as a small cell coloured by its condition, grouped by partition (a node
    in several partitions under each), counts per condition per partition, the nodes out of
    service folded as ``sinfo -R`` does, and a filter form: ``?q=`` names, hostlists
    (``n[1-100]``) or shell patterns (``n1*``), ``?state=`` conditions (idle, mixed,
    allocated, draining, drained, down, unknown; repeated or comma-separated), ``?partition=``.
``/ui/nodes/{name}``
    one node: its state, the current reason and who holds it, resources, its running jobs,
    its timeline of ``slurm.node.state`` events over ``?days=`` (1-366, default 7) with the
    time spent in each condition, time drained, time down and time to repair
    (:mod:`slurmtower.dashboard.nodes_timeline`), and drain / resume buttons for operators.

Both read the shared snapshots (no Slurm query of their own); the visibility policy is the
API's: hidden partitions are already out of the nodes and jobs snapshots (the refresh
worker's transform, as for ``/nodes`` and ``/queue``) and are applied once more here; a node
in hidden partitions only is a 404, and so are its events, as ``/events`` hides them.
"""

from __future__ import annotations

import asyncio
import gzip
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from slurmtower.api.deps import ClusterDep
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard.data import node_view
from slurmtower.dashboard.nodes_map import build_map, node_entries, parse_filter
from slurmtower.dashboard.nodes_timeline import CONDITIONS, build_timeline, describe_owner, human_duration
from slurmtower.dashboard.render import page_context, render
from slurmtower.errors import InvalidInput, NotFound, SlurmtowerError
from slurmtower.events.store import MAX_QUERY_LIMIT, EventStore
from slurmtower.models import JobState, Node
from slurmtower.models.event import NODE_STATE, Event
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.runtime import Services
from slurmtower.visibility import Visibility

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]

#: The timeline's window choices (days); any whole number from 1 to MAX_DAYS is accepted.
WINDOWS = (1, 7, 30, 90)
DEFAULT_DAYS = 7
MAX_DAYS = 366
#: Jobs in these states are listed on a node page.
_ON_NODE = frozenset({JobState.RUNNING.value, JobState.SUSPENDED.value, JobState.COMPLETING.value})
#: How often an open page fetches its live part again (seconds): the map, a node's page.
MAP_LIVE_SECONDS = 15
NODE_LIVE_SECONDS = 10
#: Pages bigger than this are sent gzipped to clients that take it (the map at 5,000 nodes).
_GZIP_OVER = 32 * 1024


def _common(services: Services, principal: Principal, **context: Any) -> dict[str, Any]:
    return {**page_context(principal, services, "/ui/nodes"),
            "conditions": CONDITIONS, "duration": human_duration,
            "describe_owner": describe_owner, "live_seconds": MAP_LIVE_SECONDS,
            **context}


def _packed(request: Request, page: HTMLResponse) -> HTMLResponse:
    """``page`` gzipped when big and the client accepts it."""
    body = bytes(page.body)
    if len(body) < _GZIP_OVER or "gzip" not in request.headers.get("accept-encoding", ""):
        return page
    packed = HTMLResponse(gzip.compress(body, 5), status_code=page.status_code,
                          headers={"Cache-Control": "no-store", "Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
    return packed


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else ""


async def _visible_nodes(services: Services) -> tuple[list[Node], Any]:
    """The nodes snapshot's models with the visibility policy applied (the snapshot already
    lacks hidden partitions: this keeps the page right should it ever not)."""
    snap = await services.live().nodes()
    table: NodeTable = snap.value
    policy = Visibility.from_settings(services.settings)
    nodes = await asyncio.to_thread(lambda: policy.nodes(table.nodes()))
    return nodes, snap


@router.get("/nodes", response_class=HTMLResponse)
async def nodes_page(
    request: Request, services: ClusterDep, principal: Reader,
    q: Annotated[str | None, Query(max_length=400, description="Names, hostlists (n[1-100]) or patterns (n1*).")]
    = None,
    state: Annotated[list[str] | None, Query(description="Conditions: idle, mixed, allocated, draining, drained, "
                                             "down, unknown.")] = None,
    partition: Annotated[str | None, Query(max_length=200, description="One partition.")] = None,
) -> HTMLResponse:
    """The node map: every visible node grouped by partition, coloured by condition, filtered."""
    problem: InvalidInput | None = None
    try:
        flt = parse_filter(q, state or (), partition)
    except InvalidInput as exc:
        flt, problem = None, exc
    nodes, snap = await _visible_nodes(services)  # slurmctld down: the dashboard's error page
    context = _common(services, principal, fetched_at=_when(snap.fetched_at), stale=snap.stale,
                      q=q or "", states=set(state or ()), partition=partition or "")
    if flt is None:
        assert problem is not None
        page = render("nodes.html", status_code=400, **context, problem=problem.message, map=None,
                      partitions=sorted({p for n in nodes for p in n.partitions}))
        return page

    def build() -> HTMLResponse:
        node_map = build_map(node_entries(nodes), flt)
        return render("nodes.html", **context, problem=None, map=node_map, partitions=node_map.partitions)

    return _packed(request, await asyncio.to_thread(build))


def _events(store: EventStore, name: str, start: datetime, end: datetime) -> tuple[list[Event], Event | None, bool]:
    """The node's transitions in the window (newest ``MAX_QUERY_LIMIT`` at most), the last one
    before it, and whether the window held more."""
    found = store.query(types=[NODE_STATE], node=name, start=start, end=end, limit=MAX_QUERY_LIMIT, own=True,
                        descending=True)
    truncated = len(found) >= MAX_QUERY_LIMIT
    before = None
    if not truncated:
        earlier = store.query(types=[NODE_STATE], node=name, end=start, limit=1, descending=True, own=True)
        before = earlier[0] if earlier else None
    found.reverse()
    return found, before, truncated


def _jobs_on(table: JobTable, name: str, principal: Principal, policy: Visibility,
             now: datetime) -> list[dict[str, Any]]:
    rows = table.select(nodes={name}, state=_ON_NODE)
    out = []
    for job in table.jobs(rows):
        job = policy.redact(job, principal)
        elapsed = (now - job.start_time).total_seconds() if job.start_time is not None else None
        left = None
        if job.start_time is not None and job.time_limit is not None:
            left = (job.start_time + job.time_limit - now).total_seconds()
        out.append({"job": job, "elapsed": elapsed, "left": left, "start": _when(job.start_time)})
    return out


@router.get("/nodes/{name}", response_class=HTMLResponse)
async def node_page(
    request: Request, services: ClusterDep, principal: Reader, name: str,
    days: Annotated[str | None, Query(max_length=8, description=f"Timeline window in days (1-{MAX_DAYS}).")]
    = None,
) -> HTMLResponse:
    """One node: state, reason and holder, resources, running jobs, timeline, drain / resume."""
    if days is None or days == "":
        window = DEFAULT_DAYS
    elif days.isascii() and days.isdigit() and 1 <= int(days) <= MAX_DAYS:
        window = int(days)
    else:
        raise InvalidInput(f"days must be a whole number from 1 to {MAX_DAYS}, not {days[:20]!r}.", param="days")
    snap = await services.live().nodes()
    hidden = await services.live().hidden_nodes()
    table: NodeTable = snap.value
    policy = Visibility.from_settings(services.settings)
    rows = table.rows_of([name])
    node = Node.model_validate_json(table.fragments[rows[0]]) if rows else None
    node = policy.node(node) if node is not None else None
    if node is None or name in hidden:
        raise NotFound(f"There is no node named {name!r} in this cluster (or it is not shown to you).",
                       param="name")
    try:
        jobs_snap = await services.live().jobs()
    except SlurmtowerError:
        jobs_snap = None
    now = datetime.now(UTC)
    start = now - timedelta(days=window)
    store = services.event_store
    timeline = None
    if store is not None:
        found, before, truncated = await asyncio.to_thread(_events, store, name, start, now)
        timeline = build_timeline(found, start=start, end=now, before=before, truncated=truncated)
    jobs = (await asyncio.to_thread(_jobs_on, jobs_snap.value, name, principal, policy, now)
            if jobs_snap is not None else None)
    view = node_view(node)
    return render("node.html", **_common(
        services, principal, node=node, view=view, jobs=jobs, timeline=timeline, days=window, windows=WINDOWS,
        fetched_at=_when(snap.fetched_at), stale=snap.stale, when=_when, live_seconds=NODE_LIVE_SECONDS,
        retention_days=services.settings.events.retention_days,
        reason_set=_when(node.reason_changed_at)))
