"""``/ui``: the server-rendered dashboard (node map, queue, load chart, live event feed).

Pages are Jinja2 templates with autoescaping; the only JavaScript is the page's own small
script and the vendored uPlot (``dashboard/static``, MIT, version in ``VENDORED``), served from
this process: no CDN, no Node build. The browser authenticates with the same bearer tokens as
the API: the login page keeps the token in a ``SameSite=Strict`` cookie, and the drain and
resume buttons post to ``/actions/...`` with the CSRF header the security module requires.
The drain and resume buttons are rendered only for callers who may operate.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from slurmtower import __version__
from slurmtower.api.security import (
    CSRF_HEADER,
    TOKEN_COOKIE,
    LoginRateLimited,
    Perm,
    Principal,
    require,
)
from slurmtower.api.services import Services, get_services
from slurmtower.dashboard.data import cluster_view, node_view
from slurmtower.errors import AuthenticationError, NotFound, SlurmtowerError
from slurmtower.models import JobState

__all__ = ["VENDORED", "router", "setup"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
ServicesDep = Annotated[Services, Depends(get_services)]
Reader = Annotated[Principal, require(Perm.READ)]

#: Files under dashboard/static that may be served, with their media types.
_STATIC = {
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "uPlot.LICENSE": "text/plain",
}
#: Third-party files shipped in dashboard/static: name -> (package, version, licence).
VENDORED = {"uPlot.iife.min.js": ("uplot", "1.6.32", "MIT"), "uPlot.min.css": ("uplot", "1.6.32", "MIT")}

_QUEUE_STATES = (JobState.RUNNING, JobState.PENDING, JobState.COMPLETING, JobState.SUSPENDED)
_QUEUE_LIMIT = 200

_env = Environment(loader=PackageLoader("slurmtower.dashboard", "templates"),
                   autoescape=select_autoescape(("html",), default=True), trim_blocks=True,
                   lstrip_blocks=True)


def _render(name: str, **context: Any) -> HTMLResponse:
    html = _env.get_template(name).render(version=__version__, csrf_header=CSRF_HEADER,
                                          token_cookie=TOKEN_COOKIE, **context)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


async def _fragments(services: Services, principal: Principal) -> dict[str, Any]:
    view = await cluster_view(services)
    nodes = sorted((node_view(n) for n in view.nodes), key=lambda n: _natural(n.name))
    table = view.jobs
    running = table.select(state={JobState.RUNNING.value})
    others = table.select(state={s.value for s in _QUEUE_STATES if s is not JobState.RUNNING})
    # Only the rows shown become models: a queue of 100,000 jobs stays cheap to draw.
    queue = table.jobs([*running, *others][:_QUEUE_LIMIT])
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.css] = counts.get(n.css, 0) + 1
    return {
        "nodes": nodes,
        "node_counts": counts,
        "queue": queue,
        "queue_total": len(running) + len(others),
        "fetched_at": view.fetched_at.astimezone(UTC).strftime("%H:%M:%S UTC"),
        "stale": view.stale,
        "can_operate": principal.may_operate,
    }


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


@router.get("", response_class=HTMLResponse)
async def page(services: ServicesDep, principal: Reader) -> HTMLResponse:
    """The dashboard page."""
    context = await _fragments(services, principal)
    return _render("ui.html", principal=principal, cluster=services.settings.cluster_name or "slurm",
                   now=datetime.now(UTC), **context)


@router.get("/fragments/nodes", response_class=HTMLResponse)
async def nodes_fragment(services: ServicesDep, principal: Reader) -> HTMLResponse:
    """The node map, re-rendered (the page swaps it in every few seconds)."""
    return _render("_nodes.html", **await _fragments(services, principal))


@router.get("/fragments/queue", response_class=HTMLResponse)
async def queue_fragment(services: ServicesDep, principal: Reader) -> HTMLResponse:
    """The queue table, re-rendered."""
    return _render("_queue.html", **await _fragments(services, principal))


@router.get("/whoami")
async def whoami(principal: Reader) -> dict[str, Any]:
    """The caller's name and role (the login page checks a token with it)."""
    return {"name": principal.name, "role": principal.role, "via": principal.via,
            "may_operate": principal.may_operate}


@router.get("/login", response_class=HTMLResponse, dependencies=[require(Perm.PUBLIC)])
async def login(request: Request) -> HTMLResponse:
    """The login page: paste a token; it is kept in a SameSite=Strict cookie."""
    return _render("login.html", secure=request.url.scheme == "https")


@router.get("/static/{name}", dependencies=[require(Perm.PUBLIC)])
async def static(name: str) -> Response:
    """The dashboard's own script and style and the vendored uPlot."""
    media = _STATIC.get(name)
    if media is None:
        raise NotFound(f"no static file {name!r}")
    body = resources.files("slurmtower.dashboard").joinpath("static", name).read_bytes()
    return Response(body, media_type=media, headers={"Cache-Control": "public, max-age=3600"})


def setup(_services: Services, app: FastAPI) -> None:
    """Send browsers that are not logged in from /ui to the login page (401 with a link)."""
    fallback = app.exception_handlers.get(SlurmtowerError)

    async def unauthenticated(request: Request, exc: Exception) -> Response:
        wants_html = "text/html" in request.headers.get("accept", "")
        if (request.url.path == "/ui" and wants_html and isinstance(exc, AuthenticationError)
                and not isinstance(exc, LoginRateLimited)):
            page = _render("redirect.html", message=exc.message, target="/ui/login")
            page.status_code = 401
            page.headers["WWW-Authenticate"] = "Bearer"
            return page
        assert fallback is not None
        response = fallback(request, exc)
        return await response if inspect.isawaitable(response) else response

    app.add_exception_handler(AuthenticationError, unauthenticated)
