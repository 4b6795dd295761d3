"""``slurmtower sensor``'s own HTTP side: the trigger callback, ``/health`` and ``/ready``.

Starlette only (no FastAPI, no route module, no OpenAPI document): the sensor process runs
the runtime's ``events`` part (the sensor, its rules and the actions they run) and takes
callbacks from the notify program. The events are read where the API runs (``slurmtower
serve`` on the same store: ``/events``, ``/events/stream``). Errors become problems through
:mod:`slurmtower.api.problems`, as in the API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from slurmtower import __version__
from slurmtower.api.callback import receive_callback
from slurmtower.api.problems import http_problem, slurmtower_problem
from slurmtower.errors import ConfigError, SlurmtowerError
from slurmtower.runtime import Services, assemble, running
from slurmtower.settings import Settings

__all__ = ["create_sensor_app"]

#: The runtime parts a sensor process runs (:data:`slurmtower.runtime.PARTS`).
SENSOR_PARTS = ("events",)


def create_sensor_app(settings: Settings) -> Starlette:
    """The sensor alone: its runtime started and stopped with the app; the callback route
    ``POST /{uuid}/{class}/{type}`` (HMAC-signed, fresh, never seen), ``/health``, ``/ready``."""
    settings.events.sensor_enabled = True
    services = Services.from_settings(settings)
    assemble(services, SENSOR_PARTS)
    sensor = services.sensor
    if sensor is None:  # assemble builds it with the event store: never None here
        raise ConfigError("the sensor is not configured")

    async def callback(request: Request) -> JSONResponse:
        # Each cluster's sensor has its own UUID (and key); an unknown one is refused by the default's.
        own = services.sensor_for(str(request.path_params["sensor_uuid"])) or sensor
        return JSONResponse(await receive_callback(request, own), status_code=202)

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "version": __version__})

    async def ready(_request: Request) -> JSONResponse:
        checks = await services.ready_checks()
        ok = all(checks.values())
        return JSONResponse({"ready": ok, **checks, "leads": services.leading_roles(), "triggers": len(sensor.armed)},
                            status_code=200 if ok else 503)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with running(services):
            yield

    app = Starlette(
        routes=[
            Route("/{sensor_uuid:uuid}/{resource_class}/{trigger_type}", callback, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
        ],
        exception_handlers={SlurmtowerError: slurmtower_problem, StarletteHTTPException: http_problem},
        lifespan=lifespan,
    )
    app.state.services = services
    return app
