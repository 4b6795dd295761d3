"""The FastAPI application: thin routes over the library.

Route modules live in :mod:`slurmtower.api.routes`; each exposes ``router`` and may expose
``setup(services, app)`` for HTTP-only wiring (middleware, extra routers). What the routes
read is built by the runtime (:func:`slurmtower.runtime.assemble`, from the parts the
chosen route modules need: :data:`ROUTE_PARTS`) and started and stopped in the app's
lifespan. Library errors become HTTP problems in exactly one place, :func:`_problem`.
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from slurmtower import __version__
from slurmtower.api.params import PROBLEM, add_problem_schema
from slurmtower.errors import ConfigError, InvalidInput, SlurmtowerError
from slurmtower.runtime import Services, assemble, start, stop
from slurmtower.settings import Settings

__all__ = ["ROUTE_MODULES", "ROUTE_PARTS", "create_app"]

log = logging.getLogger(__name__)

#: Every route module, in the order their routes appear in the OpenAPI document.
ROUTE_MODULES = (
    "health",
    "live",
    "history",
    "load",
    "events",
    "actions",
    "hooks",  # /hooks/alertmanager, /hooks/generic (after events: its store)
    "metrics",
    "dashboard",
    "ui_jobs",  # /ui/jobs, /ui/jobs/{id}, /ui/history
    "ui_nodes",  # /ui/nodes, /ui/nodes/{name}
    "ui_pages",  # /ui/partitions, /ui/reservations
)

#: The runtime parts (:data:`slurmtower.runtime.PARTS`) each route module reads.
ROUTE_PARTS: dict[str, tuple[str, ...]] = {
    "health": (),
    "live": ("live",),
    "history": ("accounting",),
    "load": ("live", "archive"),
    "events": ("events",),
    "actions": ("actions",),
    "hooks": ("event-store",),
    "metrics": ("live",),
    "dashboard": ("live",),
    "ui_jobs": ("live", "accounting"),
    "ui_nodes": ("live",),
    "ui_pages": ("live",),
}

def _problem_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


async def _problem(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SlurmtowerError)
    if exc.http_status >= 500:
        log.warning("%s: %s", type(exc).__name__, exc.message)
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else {}
    retry_after = exc.extra.get("retry_after")
    if isinstance(retry_after, int | float) and retry_after > 0:
        headers["Retry-After"] = str(math.ceil(retry_after))  # whole seconds (RFC 9110)
    return _problem_response(exc.http_status, exc.to_problem(), headers or None)


async def _validation_problem(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("query", "body", "path", "header")]
    param = ".".join(loc) or None
    # A bad value is a 400 like every other bad input (FastAPI's default would be 422).
    return _problem_response(400, {
        "type": "https://slurmtower.dev/problems/InvalidInput",
        "title": "invalid input",
        "status": 400,
        "detail": f"{param or 'request'}: {first.get('msg', 'invalid')}",
        "param": param,
    })


async def _http_problem(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return _problem_response(exc.status_code, {
        "type": "about:blank", "title": str(exc.detail), "status": exc.status_code, "detail": str(exc.detail),
    }, getattr(exc, "headers", None))


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
            response = _problem_response(
                400, InvalidInput(f"{param}: a NUL character is not allowed", param=param).to_problem())
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


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
    picks a subset of :data:`ROUTE_MODULES` (``slurmtower sensor`` serves only ``events``)."""
    if services is None:
        if settings is None:
            raise ValueError("create_app needs settings or services")
        services = Services.from_settings(settings)
    modules = _route_modules(route_modules)
    assemble(services, {part for name in route_modules for part in ROUTE_PARTS.get(name, ())})

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await start(services)
        try:
            yield
        finally:
            await stop(services)

    app = FastAPI(
        title=title,
        version=__version__,
        description="A control tower for Slurm clusters: live state, job history, actions, node events.",
        lifespan=lifespan,
    )
    app.state.services = services

    def openapi() -> dict[str, Any]:
        return add_problem_schema(FastAPI.openapi(app))  # cached by FastAPI; idempotent

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(_RefuseNul)
    app.add_exception_handler(SlurmtowerError, _problem)
    app.add_exception_handler(RequestValidationError, _validation_problem)
    app.add_exception_handler(StarletteHTTPException, _http_problem)
    for module in modules:
        setup = getattr(module, "setup", None)
        if setup is not None:
            setup(services, app)
        app.include_router(module.router)
    return app
