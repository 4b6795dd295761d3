"""/health, /ready and the route index."""

from __future__ import annotations

import asyncio
import logging

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute

from slurmtower import __version__
from slurmtower.api.deps import ServicesDep
from slurmtower.api.security import Perm, require
from slurmtower.errors import NotFound
from slurmtower.live.sharing import ALONE

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["service"])


@router.get("/health", dependencies=[require(Perm.PUBLIC)])
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok", "version": __version__}


@router.get("/ready", dependencies=[require(Perm.PUBLIC)])
async def ready(services: ServicesDep) -> JSONResponse:
    """Readiness: slurmctld answers (and the accounting DB, when configured), checked at most
    every 5 s; which snapshot this process serves (``snapshot``: shared as the refresher or a
    follower, or its own); the resources still served from the snapshots kept by the last run
    (``restored``: marked stale until this run's first read of Slurm); which roles it leads
    (``leads``); with several clusters, which one this is (the default, ``cluster``) and
    whether each other one is ready (``clusters``), without changing the status."""
    checks = await services.ready_checks()
    ok = all(checks.values())
    # Which snapshot this process serves: the mode only (never Redis's error text).
    shared = services.snapshots.shared if services.snapshots is not None else None
    snapshot = shared.mode if shared is not None else ALONE
    restored = services.snapshots.restored() if services.snapshots is not None else []
    body = {"ready": ok, **checks, "snapshot": snapshot, "restored": restored, "leads": services.leading_roles()}
    if services.clusters:
        # The other clusters, each ok or not (``/clusters/{name}/ready`` has its checks): one
        # cluster down does not take the process out of a load balancer.
        others = list(services.clusters.values())
        states = await asyncio.gather(*(each.ready_checks() for each in others))
        body["cluster"] = services.name_or_default()
        body["clusters"] = {each.name: all(state.values()) for each, state in zip(others, states, strict=True)}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/", dependencies=[require(Perm.PUBLIC)], response_class=HTMLResponse, include_in_schema=False)
async def index(request: Request, services: ServicesDep) -> HTMLResponse:
    """Every GET route and whether it answers now (when ``api.serve_index`` is on)."""
    if not services.settings.api.serve_index:
        raise NotFound("the route index is off (api.serve_index)")

    # The OpenAPI paths: newer FastAPI nests included routers, so app.routes is not flat.
    paths = request.app.openapi().get("paths", {})
    routes = sorted({path for path, ops in paths.items() if "get" in ops and "{" not in path
                     and path not in ("/", "/events/stream")}
                    | {r.path for r in request.app.routes
                       if isinstance(r, APIRoute) and "GET" in (r.methods or set()) and "{" not in r.path
                       and r.path not in ("/", "/events/stream")})
    transport = httpx.ASGITransport(app=request.app)
    rows = []
    headers = {k: v for k, v in request.headers.items() if k == "authorization"}
    async with httpx.AsyncClient(transport=transport, base_url="http://index") as http:
        for path in routes:
            try:
                resp = await asyncio.wait_for(http.get(path, headers=headers), 15)
                status = str(resp.status_code)
            except Exception as exc:  # noqa: BLE001
                status = f"error: {type(exc).__name__}"
            ok = status.startswith("2")
            rows.append(f'<tr><td><a href="{path}">{path}</a></td><td class="{"ok" if ok else "bad"}">'
                        f"{status}</td></tr>")
    body = ("<!doctype html><html><head><title>slurmtower routes</title><style>"
            ".ok{color:green}.bad{color:#b00}td{padding:2px 12px;font-family:monospace}</style></head>"
            f"<body><h1>slurmtower {__version__}</h1><table><tr><th>route</th><th>status</th></tr>"
            + "".join(rows) + "</table></body></html>")
    return HTMLResponse(body)
