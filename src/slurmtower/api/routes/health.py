"""/health, /ready and the route index."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute

from slurmtower import __version__
from slurmtower.api.security import Perm, require
from slurmtower.api.services import Services, get_services
from slurmtower.api.shared import ALONE
from slurmtower.errors import NotFound

__all__ = ["Readiness", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["service"])
ServicesDep = Annotated[Services, Depends(get_services)]


@router.get("/health", dependencies=[require(Perm.PUBLIC)])
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok", "version": __version__}


#: How long one readiness answer is reused, and how long each check may take.
READY_TTL = 5.0
READY_TIMEOUT = 3.0


@dataclass
class Readiness:
    """The readiness checks, run at most once per :data:`READY_TTL` for every caller (a
    public route must not let anyone make slurmtower ping slurmctld and the database at
    will), both at once, each bounded by :data:`READY_TIMEOUT`. Only ok / not ok leaves the
    process; why a check failed goes to the log."""

    services: Services
    checked_at: float = -1e9
    checks: dict[str, bool] = field(default_factory=dict)
    _running: asyncio.Task[dict[str, bool]] | None = None

    async def get(self) -> dict[str, bool]:
        loop = asyncio.get_running_loop()
        if loop.time() - self.checked_at < READY_TTL:
            return self.checks
        if self._running is None:
            self._running = loop.create_task(self._check())
        task = self._running
        try:
            self.checks = await asyncio.shield(task)
            self.checked_at = loop.time()
        finally:
            if task.done():
                self._running = None
        return self.checks

    async def _check(self) -> dict[str, bool]:
        probes: dict[str, Any] = {"slurmctld": self.services.client.ping}
        accounting = self.services.accounting
        if accounting is not None:
            probes["accounting"] = accounting.ping

        async def one(name: str, probe: Any) -> bool:
            try:
                result = await asyncio.wait_for(asyncio.to_thread(probe), READY_TIMEOUT)
            except TimeoutError:
                log.warning("readiness: %s did not answer within %g s", name, READY_TIMEOUT)
                return False
            except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
                log.warning("readiness: %s failed: %s", name, exc)
                return False
            return result is not False

        names = list(probes)
        results = await asyncio.gather(*(one(n, probes[n]) for n in names))
        return dict(zip(names, results, strict=True))


@router.get("/ready", dependencies=[require(Perm.PUBLIC)])
async def ready(services: ServicesDep) -> JSONResponse:
    """Readiness: slurmctld answers (and the accounting DB, when configured), checked at most
    every 5 s; which snapshot this process serves (``snapshot``: shared as the refresher or a
    follower, or its own); which roles it leads (``leads``)."""
    if services.readiness is None:
        services.readiness = Readiness(services)
    checks = await services.readiness.get()
    ok = all(checks.values())
    # Which snapshot this process serves: the mode only (never Redis's error text).
    shared = services.snapshots.shared if services.snapshots is not None else None
    snapshot = shared.mode if shared is not None else ALONE
    leads = sorted(role for role in services.elections if services.leads(role))
    return JSONResponse({"ready": ok, **checks, "snapshot": snapshot, "leads": leads},
                        status_code=200 if ok else 503)


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
