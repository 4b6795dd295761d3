"""/health, /ready and the route index."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute

from slurmtower import __version__
from slurmtower.api.security import Perm, require
from slurmtower.api.services import Services, get_services
from slurmtower.errors import NotFound

__all__ = ["router"]

router = APIRouter(tags=["service"])
ServicesDep = Annotated[Services, Depends(get_services)]


@router.get("/health", dependencies=[require(Perm.PUBLIC)])
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok", "version": __version__}


@router.get("/ready", dependencies=[require(Perm.PUBLIC)])
async def ready(services: ServicesDep) -> JSONResponse:
    """Readiness: slurmctld answers (and the accounting DB, when configured)."""
    checks: dict[str, Any] = {}
    try:
        checks["slurmctld"] = await asyncio.wait_for(asyncio.to_thread(services.client.ping), 10)
    except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
        checks["slurmctld"] = False
        checks["slurmctld_error"] = str(exc)
    accounting = services.accounting
    if accounting is not None:
        try:
            await asyncio.wait_for(asyncio.to_thread(accounting.ping), 10)
            checks["accounting"] = True
        except Exception as exc:  # noqa: BLE001
            checks["accounting"] = False
            checks["accounting_error"] = str(exc)
    ok = all(v for k, v in checks.items() if not k.endswith("_error"))
    return JSONResponse({"ready": ok, **checks}, status_code=200 if ok else 503)


@router.get("/", dependencies=[require(Perm.PUBLIC)], response_class=HTMLResponse, include_in_schema=False)
async def index(request: Request, services: ServicesDep) -> HTMLResponse:
    """Every GET route and whether it answers now (when ``api.serve_index`` is on)."""
    if not services.settings.api.serve_index:
        raise NotFound("the route index is off (api.serve_index)")
    import httpx

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
