"""/events, /events/stream (SSE) and the trigger callback ``POST /{uuid}/{class}/{type}``.

``setup`` opens the event store, builds the sensor (and the rule engine when
``events.rules_dir`` is set) and registers the sensor as a background task, so it runs
inside ``slurmtower serve``; ``slurmtower sensor`` builds the same pieces alone.

The callback route keeps the StackStorm sensor's URL layout for compatibility, but the
``uuid`` segment only matches a UUID (Starlette's ``uuid`` convertor), so it can never
shadow another three-segment route, and only HMAC-signed, fresh, never-seen requests are
accepted (see :mod:`slurmtower.events.callback`); every refusal is a security event.
"""

from __future__ import annotations

import asyncio
import logging
import uuid as uuid_mod
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse

from slurmtower.api.security import Perm, require
from slurmtower.api.services import BackgroundTask, Services, get_services
from slurmtower.errors import ConfigError, InvalidInput
from slurmtower.events.sensor import Sensor
from slurmtower.events.store import EventStore
from slurmtower.models.event import Event, RuleRun
from slurmtower.settings import Settings
from slurmtower.slurm import SlurmClient

__all__ = [
    "build_rule_engine",
    "build_sensor",
    "router",
    "sensor_task",
    "setup",
]

log = logging.getLogger(__name__)

router = APIRouter(tags=["events"])
ServicesDep = Annotated[Services, Depends(get_services)]

STREAM_POLL_SECONDS = 0.5
STREAM_HEARTBEAT_SECONDS = 15.0
MAX_PAGE = 1000


# -- wiring -------------------------------------------------------------------------------


def _catalogue_dispatcher(settings: Settings, client: SlurmClient) -> Any:
    """The action catalogue as the rule engine's dispatcher (rules act as principal ``<rule>``,
    via ``rule``: drains they make carry ``[slurmtower:<rule>@rule]``)."""
    from slurmtower.actions import Catalogue, rule_dispatcher

    return rule_dispatcher(Catalogue.from_settings(settings, client=client))


class _LazyDispatcher:
    """The process's catalogue as the rule engine's dispatcher, built on the first rule run."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._dispatch: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._dispatch is None:
            from slurmtower.actions import rule_dispatcher

            self._dispatch = rule_dispatcher(self._services.action_catalogue())
        return self._dispatch(*args, **kwargs)


def build_rule_engine(
    settings: Settings, store: EventStore, client: SlurmClient, *, dispatcher: Any = None
) -> Any:
    """The rule engine over ``events.rules_dir`` (``None`` when no directory is set).

    Rule files with errors are logged with their file and rule name; the others load.
    """
    if settings.events.rules_dir is None:
        return None
    from slurmtower.events.sensor import callback_url, notify_program_file
    from slurmtower.rules import RuleEngine, WebhookOptions, load_rules

    rules, errors = load_rules(settings.events.rules_dir)
    for err in errors:
        log.error("rule not loaded: %s", err)
    secret = settings.events.webhook_secret
    return RuleEngine(
        rules,
        store,
        dispatcher if dispatcher is not None else _catalogue_dispatcher(settings, client),
        config={
            "notify_program": str(notify_program_file(settings)),
            "callback_url": callback_url(settings),
            "cluster_name": settings.cluster_name,
        },
        webhook=WebhookOptions(secret=secret.get_secret_value().encode() if secret else None),
    )


def build_sensor(
    settings: Settings,
    client: SlurmClient,
    store: EventStore | None = None,
    *,
    dispatcher: Any = None,
    arm_triggers: bool = True,
) -> Sensor:
    """A sensor over ``settings.effective_store_url()`` (or ``store``) with its rules."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    store = store or EventStore(settings.effective_store_url())
    engine = build_rule_engine(settings, store, client, dispatcher=dispatcher)
    return Sensor(settings, client, store, rules=engine, arm_triggers=arm_triggers)


def sensor_task(sensor: Sensor) -> BackgroundTask:
    """The sensor as a background task: start (arm triggers) once, then poll; purge daily."""
    state: dict[str, float] = {"next_purge": 0.0}

    async def run() -> float:
        loop = asyncio.get_running_loop()
        if not sensor.started:
            await asyncio.to_thread(sensor.start)
        else:
            await asyncio.to_thread(sensor.poll)
        if loop.time() >= state["next_purge"]:
            from datetime import timedelta

            days = sensor.settings.events.retention_days
            await asyncio.to_thread(sensor.store.purge, timedelta(days=days))
            state["next_purge"] = loop.time() + 3600.0
        return sensor.settings.events.poll_interval

    async def on_stop() -> None:
        await asyncio.to_thread(sensor.stop)

    return BackgroundTask(name="sensor", run=run, on_stop=on_stop, max_backoff=60.0)


def setup(services: Services, _app: FastAPI | None = None) -> None:
    """Open the store, build the sensor and run it in the background (``events.sensor_enabled``)."""
    settings = services.settings
    store = services.event_store
    if store is None:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        store = services.event_store = EventStore(settings.effective_store_url())
    sensor = services.sensor
    if sensor is None:
        # Rules act through the process's one catalogue (its store, its accounting reader),
        # built lazily: a sensor without rules never builds it.
        dispatcher = _LazyDispatcher(services) if settings.events.rules_dir is not None else None
        sensor = services.sensor = build_sensor(settings, services.client, store, dispatcher=dispatcher)
    if settings.events.sensor_enabled and not services.sensor_external:
        services.background.append(sensor_task(sensor))


def _store(services: Services) -> EventStore:
    store = services.event_store
    if store is None:
        raise ConfigError("the event store is not configured")
    return store


def _sensor(services: Services) -> Sensor:
    sensor = services.sensor
    if sensor is None:
        raise ConfigError("the sensor is not configured")
    return sensor


# -- reading ------------------------------------------------------------------------------


def _types(type_: list[str] | None) -> list[str] | None:
    if not type_:
        return None
    names = [t.strip() for item in type_ for t in item.split(",") if t.strip()]
    for name in names:
        if len(name) > 200:
            raise InvalidInput("event type too long", param="type")
    return names or None


@router.get("/events", dependencies=[require(Perm.READ)], response_model=list[Event])
async def list_events(
    services: ServicesDep,
    since: Annotated[int | None, Query(ge=0, description="Only events with a larger id.")] = None,
    type_: Annotated[list[str] | None, Query(alias="type", description="Event type(s).")] = None,
    node: Annotated[str | None, Query(max_length=255, description="Only events about this node.")] = None,
    start: Annotated[datetime | None, Query(description="Only events at or after (ISO 8601).")] = None,
    end: Annotated[datetime | None, Query(description="Only events before (ISO 8601, with zone).")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> list[Event]:
    """Events oldest first; page with ``since`` = the last id you got."""
    if start is not None and end is not None and start.tzinfo and end.tzinfo and end <= start:
        raise InvalidInput("end must be after start", param="end")
    store = _store(services)
    return await asyncio.to_thread(
        store.query, since_id=since, types=_types(type_), node=node, start=start, end=end, limit=limit
    )


@router.get("/events/rule-runs", dependencies=[require(Perm.READ)], response_model=list[RuleRun])
async def list_rule_runs(
    services: ServicesDep,
    rule: Annotated[str | None, Query(max_length=255)] = None,
    event_id: Annotated[int | None, Query(ge=0)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> list[RuleRun]:
    """Recorded rule runs (the trace: rule, event id, outcome, envelope), oldest first."""
    store = _store(services)
    return await asyncio.to_thread(store.rule_runs, rule=rule, event_id=event_id, limit=limit)


@router.get("/events/sensor", dependencies=[require(Perm.READ)])
async def sensor_status(services: ServicesDep) -> dict[str, Any]:
    """The sensor's UUID, armed triggers and poll age."""
    return _sensor(services).status()


def _sse(event: Event) -> bytes:
    data = event.model_dump_json()
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


@router.get("/events/stream", dependencies=[require(Perm.READ)])
async def stream_events(
    request: Request,
    services: ServicesDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    since: Annotated[int | None, Query(ge=0, description="Start after this id (default: now).")] = None,
    type_: Annotated[list[str] | None, Query(alias="type")] = None,
    node: Annotated[str | None, Query(max_length=255)] = None,
) -> StreamingResponse:
    """Server-Sent Events of new events; resumes after ``Last-Event-ID`` (or ``since``)."""
    store = _store(services)
    types = _types(type_)
    if last_event_id is not None and last_event_id.strip():
        try:
            cursor = int(last_event_id.strip())
        except ValueError as exc:
            raise InvalidInput("Last-Event-ID must be an event id", param="Last-Event-ID") from exc
        if cursor < 0:
            raise InvalidInput("Last-Event-ID must be an event id", param="Last-Event-ID")
    elif since is not None:
        cursor = since
    else:
        newest: int | None = await asyncio.to_thread(store.last_id)
        cursor = newest or 0

    async def gen(position: int) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        last_beat = loop.time()
        yield b"retry: 2000\n\n"
        while True:
            if await request.is_disconnected():
                return
            events = await asyncio.to_thread(store.query, since_id=position, limit=500)
            for ev in events:
                assert ev.id is not None
                position = ev.id
                if types is not None and ev.type not in types:
                    continue
                if node is not None and ev.node != node:
                    continue
                yield _sse(ev)
            if len(events) == 500:
                continue
            if loop.time() - last_beat >= STREAM_HEARTBEAT_SECONDS:
                last_beat = loop.time()
                yield b": keep-alive\n\n"
            await asyncio.sleep(STREAM_POLL_SECONDS)

    return StreamingResponse(
        gen(cursor),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# -- the trigger callback -----------------------------------------------------------------


@router.post(
    "/{sensor_uuid:uuid}/{resource_class}/{trigger_type}",
    dependencies=[require(Perm.PUBLIC)],
    status_code=202,
)
async def trigger_callback(
    request: Request,
    services: ServicesDep,
    sensor_uuid: uuid_mod.UUID,
    resource_class: str,
    trigger_type: str,
) -> dict[str, Any]:
    """Doorbell from the notify program: HMAC-signed, else 401 (400 when malformed)."""
    sensor = _sensor(services)
    body = await request.body()
    client = request.client.host if request.client else None
    stored = await asyncio.to_thread(
        sensor.handle_callback,
        method=request.method,
        path=request.url.path,
        headers=dict(request.headers),
        body=body,
        client_addr=client,
    )
    return {"accepted": True, "events": [e.id for e in stored]}

