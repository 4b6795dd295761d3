"""The FastAPI application: thin routes over the library.

Route modules live in :mod:`slurmtower.api.routes`; each exposes ``router`` and may expose
``setup(services, app)`` for HTTP-only wiring (middleware, extra routers). What the routes
read is built by the runtime (:func:`slurmtower.runtime.assemble`, from the parts the
chosen route modules need: :data:`ROUTE_PARTS`) and started and stopped in the app's
lifespan. Library errors become HTTP problems in exactly one place, :func:`slurmtower.api.problems.slurmtower_problem`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from slurmtower import __version__
from slurmtower.api.params import add_problem_schema, problems
from slurmtower.api.problems import http_problem, problem_response, slurmtower_problem
from slurmtower.api.query import single_values
from slurmtower.api.reads import FastReads, read_capped
from slurmtower.api.routes.clusters import cluster_path
from slurmtower.errors import ConfigError, InvalidInput, PayloadTooLarge, SlurmtowerError
from slurmtower.runtime import Services, assemble, running
from slurmtower.settings import Settings

__all__ = ["CLUSTER_ROUTE_MODULES", "ROUTE_MODULES", "ROUTE_PARTS", "create_app"]

log = logging.getLogger(__name__)

#: Every route module, in the order their routes appear in the OpenAPI document.
ROUTE_MODULES = (
    "health",
    "clusters",  # /clusters, /clusters/{cluster}, /clusters/{cluster}/ready
    "live",
    "history",
    "why",  # /jobs/{job_id}/why, /fairshare
    "reports",  # /reports/{usage,efficiency,waits,availability}
    "load",
    "events",
    "actions",
    "planning",  # /requests, /reservations
    "hooks",  # /hooks/alertmanager, /hooks/generic (after events: its store)
    "mcp",  # /mcp: the agent endpoint (Model Context Protocol)
    "metrics",
    "dashboard",
    "login",  # /ui/login, /ui/login/oidc, /ui/logout
    "ui_jobs",  # /ui/jobs, /ui/jobs/{id}, /ui/history
    "ui_nodes",  # /ui/nodes, /ui/nodes/{name}
    "ui_pages",  # /ui/partitions
    "ui_planning",  # /ui/reservations, /ui/requests
    "ui_reports",  # /ui/reports
    "ui_fairshare",  # /ui/fairshare
)

#: The route modules also served per cluster, under ``/clusters/{cluster}`` (their routes take
#: ``?cluster=`` on their own paths too): what reads or acts on one cluster's Slurm or accounting.
CLUSTER_ROUTE_MODULES = ("live", "history", "why", "reports", "load", "actions", "planning", "events", "hooks")

#: The runtime parts (:data:`slurmtower.runtime.PARTS`) each route module reads.
ROUTE_PARTS: dict[str, tuple[str, ...]] = {
    "health": (),
    "clusters": (),
    "live": ("live",),
    "history": ("accounting",),
    "why": ("live",),
    "reports": ("accounting", "live"),
    "load": ("live", "archive"),
    "events": ("events",),
    "actions": ("actions",),
    "planning": ("actions", "live"),
    "hooks": ("event-store",),
    "mcp": ("actions", "live", "event-store"),
    "metrics": ("live",),
    "dashboard": ("live",),
    "login": ("event-store",),
    "ui_jobs": ("live", "accounting"),
    "ui_nodes": ("live",),
    "ui_pages": ("live",),
    "ui_planning": ("actions", "live"),
    "ui_reports": ("accounting", "live"),
    "ui_fairshare": ("live",),
}


async def _validation_problem(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("query", "body", "path", "header")]
    param = ".".join(loc) or None
    # A bad value is a 400 like every other bad input (FastAPI's default would be 422).
    return problem_response(400, {
        "type": "https://slurmtower.dev/problems/InvalidInput",
        "title": "invalid input",
        "status": 400,
        "detail": f"{param or 'request'}: {first.get('msg', 'invalid')}",
        "param": param,
    })


def _nul_param(scope: Scope) -> str | None:
    """The first parameter (or ``path``) of a request that carries a NUL character."""
    if "\x00" in scope.get("path", ""):
        return "path"
    raw: bytes = scope.get("query_string", b"")
    if b"%00" not in raw.lower() and b"\x00" not in raw:
        return None
    for name, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return name.replace("\x00", "")[:60] or "query"
    return "query"


class _RefuseNul:
    """A NUL character is in no name, id or time, and PostgreSQL refuses it in any text (the
    driver raises before the query runs): a request carrying one is a 400 naming the parameter."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (param := _nul_param(scope)) is not None:
            response = problem_response(
                400, InvalidInput(f"{param}: a NUL character is not allowed", param=param).to_problem())
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _CapActionBody:
    """``POST /actions/{name}`` reads at most ``api.max_action_body_bytes``
    (:func:`~slurmtower.api.reads.read_capped`: refused as soon as the Content-Length says
    so, or as soon as that many bytes came): a bigger body is a 413 problem, never parsed,
    nothing run or recorded. A body within the bound is handed on to the route as it came."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/actions/"):
            await self.app(scope, receive, send)
            return

        async def refuse() -> PayloadTooLarge:
            return PayloadTooLarge(f"body over {self.limit} bytes (api.max_action_body_bytes)", param="body")

        try:
            body = await read_capped(Request(scope, receive), self.limit, refuse)
        except PayloadTooLarge as exc:
            await problem_response(413, exc.to_problem())(scope, receive, send)
            return
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()  # only a disconnect can come now
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


#: What every answer says to the browser: scripts and styles only from this service (no
#: inline script; inline style attributes, which the dashboard's bars use, are allowed), no
#: framing, no MIME sniffing, no Referer to other sites.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
#: FastAPI's own /docs and /redoc load their scripts from jsDelivr and start them inline.
DOCS_CSP = ("default-src 'self'; script-src 'self' https://cdn.jsdelivr.net 'unsafe-inline'; "
            "style-src 'self' https://cdn.jsdelivr.net 'unsafe-inline'; "
            "img-src 'self' data: https://fastapi.tiangolo.com; worker-src blob:; object-src 'none'; "
            "base-uri 'none'; frame-ancestors 'none'")
_SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin"),
                     (b"x-frame-options", b"DENY")]
_HSTS = (b"strict-transport-security", b"max-age=31536000")


class _SecurityHeaders:
    """Every answer carries :data:`CSP` (``frame-ancestors 'none'``), ``nosniff``,
    ``Referrer-Policy`` and, behind TLS (the connection's scheme or a trusted proxy's
    ``X-Forwarded-Proto``), HSTS. Outermost of the middleware; the cached fast path, in front
    of it, adds :meth:`of` itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    #: (a docs page, behind TLS) -> the headers, made once: every answer adds them.
    _EXTRA = {(docs, tls): [(b"content-security-policy", (DOCS_CSP if docs else CSP).encode()),
                            *_SECURITY_HEADERS, *([_HSTS] if tls else [])]
              for docs in (False, True) for tls in (False, True)}

    @classmethod
    def of(cls, scope: Scope) -> list[tuple[bytes, bytes]]:
        """The security headers of the answer to ``scope``."""
        return cls._EXTRA[scope["path"] in ("/docs", "/redoc"), scope.get("scheme") == "https"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = self.of(scope)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _Tower(FastAPI):
    """The application, with the cached fast path (:class:`~slurmtower.api.reads.FastReads`,
    set by the live routes' ``setup``) in front of its middleware stack and routing."""

    fast_reads: FastReads | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.fast_reads
        if fast is not None and scope["type"] == "http" and scope["method"] == "GET":
            scope["app"] = self  # as Starlette sets it: the permission reads the app's state
            if await fast.answer(scope, receive, send):
                return
        await super().__call__(scope, receive, send)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class _Allow:
    """``OPTIONS`` answers 204 with every method the path takes (``Allow``), and a 405 names
    them all: Starlette's own would name only the first route matching the path's (``Allow:
    GET`` on ``/actions/{name}``, which also takes POST)."""

    def __init__(self, app: ASGIApp, routes: list[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    def _allowed(self, scope: Scope) -> list[str]:
        found = []
        for method in _METHODS:
            probe = {**scope, "method": method}
            if any(route.matches(probe)[0] is Match.FULL for route in self.routes):
                found.append(method)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            allowed = self._allowed(scope)
            if allowed:
                await Response(status_code=204, headers={"Allow": ", ".join([*allowed, "OPTIONS"])})(
                    scope, receive, send)
                return
            await self.app(scope, receive, send)
            return

        async def send_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allowed = ", ".join([*self._allowed(scope), "OPTIONS"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message = {**message, "headers": [*headers, (b"allow", allowed.encode())]}
            await send(message)

        await self.app(scope, receive, send_allow)


def _route_modules(names: tuple[str, ...]) -> list[Any]:
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(f"slurmtower.api.routes.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"slurmtower.api.routes.{name}":
                raise
            raise ConfigError(f"unknown route module {name!r} (known: {', '.join(ROUTE_MODULES)})",
                              key="route_modules") from None
    return modules


def create_app(
    settings: Settings | None = None,
    *,
    services: Services | None = None,
    route_modules: tuple[str, ...] = ROUTE_MODULES,
    title: str = "slurmtower",
) -> FastAPI:
    """Build the application. Pass ``services`` to share objects with tests; ``route_modules``
    picks a subset of :data:`ROUTE_MODULES`."""
    if services is None:
        if settings is None:
            raise ValueError("create_app needs settings or services")
        services = Services.from_settings(settings)
    services.settings.auth.check()
    modules = _route_modules(route_modules)
    assemble(services, {part for name in route_modules for part in ROUTE_PARTS.get(name, ())})

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with running(services):
            yield

    app = _Tower(
        title=title,
        version=__version__,
        description="A control tower for Slurm clusters: live state, job history, actions, node events.",
        lifespan=lifespan,
        dependencies=[Depends(single_values)],  # a declared parameter given twice is refused
    )
    app.state.services = services

    def openapi() -> dict[str, Any]:
        return add_problem_schema(FastAPI.openapi(app))  # cached by FastAPI; idempotent

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(_CapActionBody, limit=services.settings.api.max_action_body_bytes)
    app.add_middleware(_RefuseNul)
    app.add_middleware(_Allow, routes=app.router.routes)  # the router's list: routes added below count
    app.add_exception_handler(SlurmtowerError, slurmtower_problem)
    app.add_exception_handler(RequestValidationError, _validation_problem)
    app.add_exception_handler(StarletteHTTPException, http_problem)
    for module in modules:
        setup = getattr(module, "setup", None)
        if setup is not None:
            setup(services, app)
        app.include_router(module.router)
    for name, module in zip(route_modules, modules, strict=True):
        if name in CLUSTER_ROUTE_MODULES:
            app.include_router(module.router, prefix="/clusters/{cluster}", dependencies=[Depends(cluster_path)],
                               responses=problems(404))
    app.add_middleware(_SecurityHeaders)  # last: outermost, around every other layer
    if app.fast_reads is not None:
        app.fast_reads.headers = _SecurityHeaders.of
        if services.metrics is not None:
            app.fast_reads.observe = services.metrics.observe_request
    return app
