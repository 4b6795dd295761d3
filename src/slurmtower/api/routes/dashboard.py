"""``/ui``: the server-rendered dashboard (node map, queue, load chart, live event feed).

Pages are Jinja2 templates with autoescaping; the only JavaScript is the page's own small
script and the vendored uPlot (``dashboard/static``, MIT, version in ``VENDORED``), served from
this process: no CDN, no Node build. The browser holds a server-kept session
(:mod:`slurmtower.api.routes.login`: a token or single sign-on at login), and the drain and
resume buttons post to ``/actions/...`` with the CSRF header the security module requires.
The drain and resume buttons are rendered only for callers who may operate.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources as package_files
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import HTMLResponse

from slurmtower.api.deps import ClusterDep, ServicesDep, cluster_of
from slurmtower.api.security import (
    LoginRateLimited,
    Perm,
    Principal,
    require,
)
from slurmtower.dashboard.data import node_view
from slurmtower.dashboard.jobs_view import duration_text, job_times
from slurmtower.dashboard.overview import (
    EventLine,
    event_line,
    job_counts,
    partition_rows,
    resources,
)
from slurmtower.dashboard.render import page_context, render
from slurmtower.errors import AuthenticationError, NotFound, SlurmtowerError
from slurmtower.live.cache import Snapshot
from slurmtower.models import JobState
from slurmtower.models.node import node_sort_key
from slurmtower.models.table import JobTable
from slurmtower.runtime import Services
from slurmtower.visibility import Visibility

__all__ = ["VENDORED", "overview", "router", "setup"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]

#: Files under dashboard/static that may be served, with their media types.
_STATIC = {
    "dashboard.js": "text/javascript",
    "common.js": "text/javascript",
    "node.js": "text/javascript",
    "reports.js": "text/javascript",
    "planning.js": "text/javascript",
    "dashboard.css": "text/css",
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "uPlot.LICENSE": "text/plain",
}
#: Third-party files shipped in dashboard/static: name -> (package, version, licence).
VENDORED = {"uPlot.iife.min.js": ("uplot", "1.6.32", "MIT"), "uPlot.min.css": ("uplot", "1.6.32", "MIT")}

_QUEUE_STATES = (JobState.RUNNING, JobState.PENDING, JobState.COMPLETING, JobState.SUSPENDED)
_QUEUE_LIMIT = 200
#: Above this many nodes the overview shows counts and links to the node map (/ui/nodes)
#: instead of a box per node.
MAP_LIMIT = 256
#: Events listed when the page opens (newer ones arrive over /events/stream).
_EVENTS = 30

_render = render


@dataclass
class _Overview:
    """What the overview shows that is the same for every viewer, made once per snapshot set."""

    key: tuple[Any, ...]
    nodes: list[Any]
    node_total: int
    node_counts: dict[str, int]
    resources: list[Any]
    job_counts: list[tuple[str, int]]
    partition_rows: list[dict[str, Any]]
    queue_rows: list[int]
    queue_total: int


_OVERVIEWS: dict[int, _Overview] = {}


def _overview(snaps: Sequence[Snapshot[Any]], policy: Visibility) -> _Overview:
    """Built off the event loop: 5,000 node models and their boxes, partition sums."""
    nodes_snap, jobs_snap, parts_snap = snaps
    node_models = policy.nodes(nodes_snap.value.nodes())
    views = sorted((node_view(n) for n in node_models), key=lambda n: node_sort_key(n.name))
    counts: dict[str, int] = {}
    for n in views:
        counts[n.css] = counts.get(n.css, 0) + 1
    table: JobTable = jobs_snap.value
    running = table.select(state={JobState.RUNNING.value})
    others = table.select(state={s.value for s in _QUEUE_STATES if s is not JobState.RUNNING})
    css = {n.name: n.css for n in views}
    return _Overview(
        key=tuple((s.resource, s.generation, s.stale) for s in snaps),
        nodes=views if len(views) <= MAP_LIMIT else [], node_total=len(views), node_counts=counts,
        resources=resources(node_models), job_counts=job_counts(table),
        partition_rows=partition_rows(policy.partitions(parts_snap.value), {n.name: n for n in node_models}, css),
        queue_rows=[*running, *others][:_QUEUE_LIMIT], queue_total=len(running) + len(others))


async def overview(services: Services) -> tuple[_Overview, Sequence[Snapshot[Any]]]:
    """The viewer-independent part of the overview (also the partitions page's rows) of the
    current snapshots, made once per snapshot set."""
    live = services.live()
    cache = live.cache
    snaps: list[Snapshot[Any]] = list(await live.load())
    key = tuple((s.resource, s.generation, s.stale) for s in snaps)
    view = _OVERVIEWS.get(id(cache))
    if view is None or view.key != key:
        view = await asyncio.to_thread(_overview, snaps, Visibility.from_settings(services.settings))
        if len(_OVERVIEWS) > 64:
            _OVERVIEWS.clear()  # caches of apps that are gone (tests): keep the newest of each cluster's
        _OVERVIEWS[id(cache)] = view
    return view, snaps


async def _fragments(services: Services, principal: Principal) -> dict[str, Any]:
    view, snaps = await overview(services)
    policy = Visibility.from_settings(services.settings)
    # Only the rows shown become models: a queue of 100,000 jobs stays cheap to draw.
    # (The snapshot holds no hidden partition: the policy applies where the queue is read.)
    now = datetime.now(UTC)
    queue = []
    for job in snaps[1].value.jobs(view.queue_rows):
        elapsed, left = job_times(job, now)
        queue.append((policy.redact(job, principal), duration_text(elapsed), duration_text(left)))
    fetched = min(s.fetched_at for s in snaps[:2])
    return {
        "nodes": view.nodes,
        "node_total": view.node_total,
        "node_counts": view.node_counts,
        "resources": view.resources,
        "job_counts": view.job_counts,
        "partition_rows": view.partition_rows,
        "queue": queue,
        "queue_total": view.queue_total,
        "fetched_at": fetched.astimezone(UTC).strftime("%H:%M:%S UTC"),
        "stale": snaps[0].stale or snaps[1].stale,
        "can_operate": principal.may_operate,
    }


async def _recent_events(services: Services) -> list[EventLine]:
    """The last events of the store, newest first, as ``/events`` shows them (those about
    hidden nodes or partitions only left out, the others without their names)."""
    store = services.event_store
    if store is None:
        return []
    hidden = await services.live().hiding()
    found = await asyncio.to_thread(store.query, limit=_EVENTS * 2 if hidden else _EVENTS, descending=True,
                                    own=True)
    return [event_line(ev) for ev in map(hidden.event, found) if ev is not None][:_EVENTS]


@router.get("", response_class=HTMLResponse)
async def page(services: ClusterDep, principal: Reader) -> HTMLResponse:
    """The dashboard page."""
    context = await _fragments(services, principal)
    return _render("ui.html", **{**page_context(principal, services, "/ui"), "now": datetime.now(UTC),
                                 "events": await _recent_events(services), "map_limit": MAP_LIMIT, **context})


@router.get("/clusters", response_class=HTMLResponse)
async def clusters_page(services: ServicesDep, principal: Reader) -> HTMLResponse:
    """Every cluster at a glance: nodes and jobs by state, CPUs and GPUs in use; each cluster
    read at once, one that does not answer shown so (within its ``api.slurm_wait``)."""

    async def row(each: Services) -> dict[str, Any]:
        entry = each.settings.cluster_entry()
        shown = {"name": each.name_or_default(), "label": entry.label if entry is not None else None,
                 "default": each is services}
        try:
            view, snaps = await overview(each)
        except SlurmtowerError as exc:
            return {**shown, "error": exc.message}
        fetched = min(s.fetched_at for s in snaps[:2])
        return {**shown, "view": view, "stale": any(s.stale for s in snaps),
                "fetched_at": fetched.astimezone(UTC).strftime("%H:%M:%S UTC")}

    rows = await asyncio.gather(*(row(each) for each in services.every_cluster()))
    return _render("clusters.html", rows=rows, **page_context(principal, services, "/ui/clusters"))


@router.get("/fragments/nodes", response_class=HTMLResponse)
async def nodes_fragment(services: ClusterDep, principal: Reader) -> HTMLResponse:
    """The node map, re-rendered (the page swaps it in every few seconds)."""
    return _render("_nodes.html", **await _fragments(services, principal))


@router.get("/fragments/summary", response_class=HTMLResponse)
async def summary_fragment(services: ClusterDep, principal: Reader) -> HTMLResponse:
    """Resources, jobs by state and the partitions' bars, re-rendered."""
    return _render("_summary.html", **await _fragments(services, principal))


@router.get("/fragments/queue", response_class=HTMLResponse)
async def queue_fragment(services: ClusterDep, principal: Reader) -> HTMLResponse:
    """The queue table, re-rendered."""
    return _render("_queue.html", **await _fragments(services, principal))


@router.get("/whoami")
async def whoami(principal: Reader) -> dict[str, Any]:
    """The caller's name, role and how they logged in (token, jwt, oidc ...)."""
    return {"name": principal.name, "role": principal.role, "via": principal.via,
            "may_operate": principal.may_operate}


@router.get("/static/{name}", dependencies=[require(Perm.PUBLIC)])
async def static(name: str) -> Response:
    """The dashboard's own script and style and the vendored uPlot."""
    media = _STATIC.get(name)
    if media is None:
        raise NotFound(f"no static file {name!r}")
    body = package_files.files("slurmtower.dashboard").joinpath("static", name).read_bytes()
    return Response(body, media_type=media, headers={"Cache-Control": "public, max-age=3600"})


def _is_page(path: str) -> bool:
    """A dashboard page a browser navigates to (not its fragments, static files or login)."""
    return path == "/ui" or (path.startswith("/ui/") and not path.startswith(
        ("/ui/static/", "/ui/fragments/", "/ui/login", "/ui/logout", "/ui/whoami")))


#: A page's section (its header's active link), its title and where to go from an error.
_SECTIONS = (
    ("/ui/jobs", "Jobs", (("/ui/jobs", "All jobs"), ("/ui/history", "History"))),
    ("/ui/history", "History", (("/ui/jobs", "All jobs"), ("/ui/history", "History"))),
    ("/ui/nodes", "Nodes", (("/ui/nodes", "All nodes"),)),
    ("/ui/partitions", "Partitions", (("/ui", "Overview"),)),
    ("/ui/reservations", "Reservations", (("/ui/reservations", "Reservations"),)),
    ("/ui/requests", "Requests", (("/ui/requests", "Requests"),)),
    ("/ui/reports", "Reports", (("/ui/reports", "Reports"),)),
)


def _error_page(request: Request, exc: SlurmtowerError) -> HTMLResponse | None:
    """The page a browser gets for a library error on a dashboard page (its status, the
    error's message, never a trace); None where the caller is not known yet."""
    principal = getattr(request.state, "slurmtower_principal", None)
    if not isinstance(principal, Principal):
        return None
    path = request.url.path
    active, title, links = next(((prefix, t, ls) for prefix, t, ls in _SECTIONS
                                 if path == prefix or path.startswith(prefix + "/")),
                                ("/ui", "Overview", (("/ui", "Overview"),)))
    services: Services = request.app.state.services
    try:
        services = services.cluster(cluster_of(request))
    except SlurmtowerError:
        pass  # a page of a cluster that is not there: drawn as the default cluster's
    return render("error.html", status_code=exc.http_status, title=title, message=exc.message,
                  status=exc.http_status, links=links,
                  **page_context(principal, services, active))


def setup(_services: Services, app: FastAPI) -> None:
    """Dashboard pages answer library errors as pages, in this one handler: a browser that is
    not logged in is sent to the login page (401 with a link), any other error (a bad filter,
    a node that is not there, slurmctld not answering) is a page with its status and message."""
    fallback = app.exception_handlers.get(SlurmtowerError)
    assert fallback is not None

    async def as_page(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SlurmtowerError)
        wants_html = "text/html" in request.headers.get("accept", "")
        if _is_page(request.url.path) and wants_html:
            if isinstance(exc, AuthenticationError) and not isinstance(exc, LoginRateLimited):
                page = _render("redirect.html", message=exc.message, target="/ui/login")
                page.status_code = 401
                page.headers["WWW-Authenticate"] = "Bearer"
                return page
            shown = _error_page(request, exc)
            if shown is not None:
                if exc.http_status == 401:
                    shown.headers["WWW-Authenticate"] = "Bearer"
                return shown
        response = fallback(request, exc)
        return await response if inspect.isawaitable(response) else response

    app.add_exception_handler(SlurmtowerError, as_page)
