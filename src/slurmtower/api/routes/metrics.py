"""``/metrics``: the Prometheus scrape of :class:`~slurmtower.runtime.metrics.AppMetrics`,
and the middleware that counts and times every request by route template."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from slurmtower.api.deps import ServicesDep
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.security import Perm, require
from slurmtower.runtime import Services
from slurmtower.runtime.metrics import MULTIPROCESS_VARIABLE, AppMetrics
from slurmtower.slurm.observe import register_slurm_call_sink

__all__ = ["router", "setup"]

router = APIRouter(tags=["service"])
_UNMATCHED = "<unmatched>"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _RequestMetrics:
    """ASGI middleware: counts every request and times it to the response headers, by route
    template (``/executions/{id}``), so that label values stay bounded."""

    def __init__(self, app: ASGIApp, metrics: AppMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500, "done": False}

        def observe() -> None:
            if status["done"]:
                return
            status["done"] = True
            route = scope.get("route")
            path = getattr(route, "path", None) or _UNMATCHED
            self.metrics.observe_request(scope.get("method", "GET"), path, int(status["code"]),
                                         time.perf_counter() - start)

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                observe()
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            observe()


def setup(services: Services, app: FastAPI) -> None:
    found = os.environ.get(MULTIPROCESS_VARIABLE)
    metrics = AppMetrics(services, multiprocess_dir=Path(found) if found else None)
    services.metrics = metrics
    metrics.observe_cache(services.snapshots)
    register_slurm_call_sink(metrics.slurm_call)
    app.add_middleware(_RequestMetrics, metrics=metrics)


async def shutdown(services: Services) -> None:
    if services.metrics is not None:
        services.metrics.close()


@router.get("/metrics", dependencies=[require(Perm.READ)], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **problems(*READ_PROBLEMS)})
async def metrics(request: Request, services: ServicesDep) -> Response:
    """Prometheus metrics: cluster gauges, event and rule-run counts, API and Slurm call latency."""
    app_metrics = services.metrics
    assert isinstance(app_metrics, AppMetrics)  # set by setup()
    await app_metrics.refresh(services)
    body = await asyncio.to_thread(app_metrics.collect_text)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
