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
import time
import uuid as uuid_mod
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse

from slurmtower.api.cache import read_capped, shared_cache
from slurmtower.api.params import MAX_ID, READ_PROBLEMS, problems
from slurmtower.api.security import Perm, Principal, require
from slurmtower.api.services import BackgroundTask, Services, get_services
from slurmtower.errors import ConfigError, InvalidInput, PayloadTooLarge
from slurmtower.events.callback import MAX_BODY_BYTES
from slurmtower.events.feed import EventFeed, Subscription
from slurmtower.events.sensor import Sensor
from slurmtower.events.store import EventStore
from slurmtower.models.event import Event, RuleRun
from slurmtower.settings import Settings
from slurmtower.slurm import SlurmClient
from slurmtower.visibility import Visibility

__all__ = [
    "build_rule_engine",
    "build_sensor",
    "forward_tasks",
    "hidden_nodes",
    "router",
    "rules_config",
    "sensor_task",
    "setup",
]

log = logging.getLogger(__name__)

router = APIRouter(tags=["events"])
callback_router = APIRouter(tags=["events"])
"""The trigger callback: included by :func:`setup` only where the sensor runs."""
ServicesDep = Annotated[Services, Depends(get_services)]

STREAM_POLL_SECONDS = 0.5
STREAM_HEARTBEAT_SECONDS = 15.0
#: Events read from the store per query while a stream catches up.
STREAM_BATCH = 500
#: The last message of a stream whose credential expired (EventSource then reconnects).
EXPIRED = b"event: slurmtower.stream.expired\ndata: {\"reason\": \"credential expired\"}\n\n"
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


def rules_config(settings: Settings) -> dict[str, Any]:
    """The ``config`` mapping rules see: slurmtower's keys, then ``events.rules_config``.

    Raises :class:`ConfigError` when ``events.rules_config`` sets one of slurmtower's keys
    (a rule must not be able to point the notify program elsewhere by configuration typo).
    """
    from slurmtower.events.sensor import callback_url, notify_program_file

    own: dict[str, Any] = {
        "notify_program": str(notify_program_file(settings)),
        "python": str(settings.events.notify_python),
        "callback_url": callback_url(settings),
        "key_file": str(settings.effective_key_file()),
        "cluster_name": settings.cluster_name,
    }
    clash = sorted(set(own) & set(settings.events.rules_config))
    if clash:
        raise ConfigError(f"events.rules_config: {', '.join(clash)} is set by slurmtower itself",
                          key=f"events.rules_config.{clash[0]}")
    return {**own, **settings.events.rules_config}


def build_rule_engine(
    settings: Settings, store: EventStore, client: SlurmClient, *, dispatcher: Any = None
) -> Any:
    """The rule engine over ``events.rules_dir`` (``None`` when no directory is set).

    Rule files with errors are logged with their file and rule name; the others load.
    """
    if settings.events.rules_dir is None:
        return None
    from slurmtower.rules import RuleEngine, WebhookOptions, load_rules

    rules, errors = load_rules(settings.events.rules_dir)
    for err in errors:
        log.error("rule not loaded: %s", err)
    secret = settings.events.webhook_secret
    return RuleEngine(
        rules,
        store,
        dispatcher if dispatcher is not None else _catalogue_dispatcher(settings, client),
        config=rules_config(settings),
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


def sensor_task(sensor: Sensor, leading: Any = None) -> BackgroundTask:
    """The sensor as a background task (the leader's): start (arm triggers) once, then poll;
    purge hourly. ``leading()`` tells at stop whether this process still leads: a process
    that lost the lead leaves the triggers to the new leader."""
    state: dict[str, float] = {"next_purge": 0.0}

    async def run() -> float:
        loop = asyncio.get_running_loop()
        if not sensor.started:
            await asyncio.to_thread(sensor.start)
        else:
            await asyncio.to_thread(sensor.poll)
            if sensor.rules is not None and sensor.settings.hooks.enabled:
                # Events recorded by other means (alerts posted to /hooks/*, in any process)
                # meet the rules within a round too, though no node changed.
                await asyncio.to_thread(sensor.run_rules)
        if loop.time() >= state["next_purge"]:
            from datetime import timedelta

            days = sensor.settings.events.retention_days
            await asyncio.to_thread(sensor.store.purge, timedelta(days=days))
            state["next_purge"] = loop.time() + 3600.0
        return sensor.settings.events.poll_interval

    async def on_stop() -> None:
        await asyncio.to_thread(sensor.stop, disarm=leading is None or bool(leading()))

    return BackgroundTask(name="sensor", run=run, on_stop=on_stop, max_backoff=60.0, needs_leader=True,
                          role="sensor")


def refusals_task(sensor: Sensor) -> BackgroundTask:
    """Every process: record the refused callbacks counted over minutes that are over."""

    async def run() -> float:
        await asyncio.to_thread(sensor.flush_refusals)
        return 15.0

    async def on_stop() -> None:
        from datetime import UTC, timedelta
        from datetime import datetime as dt

        await asyncio.to_thread(sensor.flush_refusals, dt.now(UTC) + timedelta(minutes=2))

    return BackgroundTask(name="callback-refusals", run=run, on_stop=on_stop, needs_leader=False)


def forward_tasks(services: Services, store: EventStore) -> list[BackgroundTask]:
    """One task per ``hooks.forward`` target, the sensor leader's (:mod:`slurmtower.events.forward`)."""
    from slurmtower.events.forward import forwarders

    def registry() -> Any:
        return services.metrics.registry if services.metrics is not None else None

    settings = services.settings
    return [BackgroundTask(name=f"forward:{fwd.target.name}", run=fwd.round, on_stop=fwd.close,
                           max_backoff=settings.hooks.forward_max_backoff, role="sensor")
            for fwd in forwarders(settings, store, registry=registry)]


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
    sensor.leading = lambda: services.leads("sensor")
    if services.event_feed is None:
        feed = services.event_feed = EventFeed(store)

        async def close_feed() -> None:
            await asyncio.to_thread(feed.close)

        services.background.append(BackgroundTask(name="event-feed", run=feed.round, on_stop=close_feed,
                                                  max_backoff=5.0, needs_leader=False))
    if settings.events.sensor_enabled and not services.sensor_external:
        services.background.append(sensor_task(sensor, lambda: services.leadership("sensor").is_leader))
        # Every process that may lead the sensor takes callbacks (the deployment's key and
        # UUID); a process whose sensor runs elsewhere serves no callback route at all.
        if _app is not None:
            _app.include_router(callback_router)
        services.background.append(refusals_task(sensor))
        services.background.extend(forward_tasks(services, store))


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


@router.get("/events", dependencies=[require(Perm.READ)], response_model=list[Event],
            responses=problems(400, *READ_PROBLEMS))
async def list_events(
    services: ServicesDep,
    since: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Only events with a larger id.")] = None,
    type_: Annotated[list[str] | None, Query(alias="type", description="Event type(s).")] = None,
    node: Annotated[str | None, Query(max_length=255, description="Only events about this node.")] = None,
    start: Annotated[datetime | None, Query(description="Only events at or after (ISO 8601).")] = None,
    end: Annotated[datetime | None, Query(description="Only events before (ISO 8601, with zone).")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"At most this many (1-{MAX_PAGE}).")] = 100,
) -> list[Event]:
    """Events oldest first; page with ``since`` = the last id you got."""
    if start is not None and end is not None and start.tzinfo and end.tzinfo and end <= start:
        raise InvalidInput("end must be after start", param="end")
    store = _store(services)
    hidden = await hidden_nodes(services)
    found = await asyncio.to_thread(
        store.query, since_id=since, types=_types(type_), node=node, start=start, end=end, limit=limit
    )
    return [ev for ev in found if ev.node not in hidden] if hidden else found


@router.get("/events/rule-runs", response_model=list[RuleRun], responses=problems(*READ_PROBLEMS))
async def list_rule_runs(
    services: ServicesDep,
    principal: Annotated[Principal, require(Perm.READ)],
    rule: Annotated[str | None, Query(max_length=255, description="Only runs of this rule.")] = None,
    event_id: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Only runs for this event.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"At most this many (1-{MAX_PAGE}).")] = 100,
) -> list[RuleRun]:
    """Recorded rule runs (the trace: rule, event id, outcome, envelope), oldest first."""
    store = _store(services)
    hidden = await hidden_nodes(services)
    found = await asyncio.to_thread(store.rule_runs, rule=rule, event_id=event_id, limit=limit)
    policy = Visibility.from_settings(services.settings)
    # An envelope's result may hold jobs (a rule running slurm.job.get): shown as the action's
    # own answer would be to this caller.
    return [run if policy.sees_all_private(principal)
            else run.model_copy(update={"envelope": policy.records(run.envelope, principal)})
            for run in found if run.node not in hidden]


@router.get("/events/sensor", dependencies=[require(Perm.READ)], responses=problems(*READ_PROBLEMS))
async def sensor_status(services: ServicesDep) -> dict[str, Any]:
    """The sensor's UUID, armed triggers and poll age."""
    return _sensor(services).status()


async def hidden_nodes(services: Services) -> frozenset[str]:
    """Nodes only in hidden partitions (:mod:`slurmtower.visibility`): their events, rule runs
    and dashboard pages are hidden. Read from the partitions snapshot, only when partitions are hidden."""
    policy = Visibility.from_settings(services.settings)
    if not policy.hidden_partitions:
        return frozenset()
    snap = await shared_cache(services).get("partitions")
    return policy.hidden_nodes(snap.value)


def _sse(event: Event) -> bytes:
    data = event.model_dump_json()
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


@router.get("/events/stream", dependencies=[require(Perm.READ)], responses=problems(400, *READ_PROBLEMS))
async def stream_events(
    request: Request,
    services: ServicesDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", description="Resume after this event id "
                                                "(sent by browsers on reconnect).")] = None,
    since: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Start after this id (default: now).")] = None,
    type_: Annotated[list[str] | None, Query(alias="type", description="Event type(s).")] = None,
    node: Annotated[str | None, Query(max_length=255, description="Only events about this node.")] = None,
) -> StreamingResponse:
    """Server-Sent Events of new events; resumes after ``Last-Event-ID`` (or ``since``)."""
    store = _store(services)
    types = _types(type_)
    if last_event_id is not None and last_event_id.strip():
        try:
            cursor = int(last_event_id.strip())
        except ValueError as exc:
            raise InvalidInput("Last-Event-ID must be an event id", param="Last-Event-ID") from exc
        if not 0 <= cursor <= MAX_ID:
            raise InvalidInput("Last-Event-ID must be an event id", param="Last-Event-ID")
    elif since is not None:
        cursor = since
    else:
        newest: int | None = await asyncio.to_thread(store.last_id)
        cursor = newest or 0

    # The stream ends when the caller's credential does (a JWT's exp): it must not outlive it.
    principal = getattr(request.state, "slurmtower_principal", None)
    expires_at = principal.expires_at if isinstance(principal, Principal) else None

    hidden = await hidden_nodes(services)

    def wanted(ev: Event) -> bool:
        return ((types is None or ev.type in types) and (node is None or ev.node == node)
                and ev.node not in hidden)

    async def stored_after(position: int) -> tuple[int, list[bytes], bool]:
        """The next batch of stored events after ``position``: (the new position, the wanted
        ones as SSE, whether the batch was full so more may follow)."""
        events = await asyncio.to_thread(store.query, since_id=position, limit=STREAM_BATCH)
        chunks = []
        for ev in events:
            assert ev.id is not None
            position = ev.id
            if wanted(ev):
                chunks.append(_sse(ev))
        return position, chunks, len(events) == STREAM_BATCH

    async def polled(position: int) -> AsyncIterator[bytes]:
        # No feed in this process (an app without its lifespan): read the store each poll.
        loop = asyncio.get_running_loop()
        last_beat = loop.time()
        yield b"retry: 2000\n\n"
        while True:
            if await request.is_disconnected():
                return
            if expires_at is not None and time.time() >= expires_at:
                yield EXPIRED
                return
            position, chunks, more = await stored_after(position)
            for chunk in chunks:
                yield chunk
            if more:
                continue
            if loop.time() - last_beat >= STREAM_HEARTBEAT_SECONDS:
                last_beat = loop.time()
                yield b": keep-alive\n\n"
            await asyncio.sleep(STREAM_POLL_SECONDS)

    async def fed(position: int, feed: EventFeed, sub: Subscription) -> AsyncIterator[bytes]:
        # Subscribed before catching up, so nothing falls between the two; ids dedupe.
        try:
            yield b"retry: 2000\n\n"
            gap = True
            while True:
                if gap:
                    sub.lost = False
                    more = True
                    while more:
                        position, chunks, more = await stored_after(position)
                        for chunk in chunks:
                            yield chunk
                    gap = False
                left = expires_at - time.time() if expires_at is not None else STREAM_HEARTBEAT_SECONDS
                if left <= 0:
                    yield EXPIRED
                    return
                try:
                    batch = await asyncio.wait_for(sub.queue.get(), timeout=min(STREAM_HEARTBEAT_SECONDS, left))
                except TimeoutError:
                    if await request.is_disconnected():
                        return
                    if expires_at is None or time.time() < expires_at:
                        yield b": keep-alive\n\n"
                    continue
                if sub.lost:
                    gap = True
                    continue
                for ev in batch:
                    assert ev.id is not None
                    if ev.id <= position:
                        continue
                    position = ev.id
                    if wanted(ev):
                        yield _sse(ev)
        finally:
            feed.unsubscribe(sub)

    feed = services.event_feed
    running = feed is not None and any(t.name == "event-feed" and t.running for t in services.background)
    if feed is not None and running:
        body = fed(cursor, feed, feed.subscribe())
    else:
        body = polled(cursor)
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# -- the trigger callback -----------------------------------------------------------------


async def _capped_body(request: Request, sensor: Sensor, client: str | None) -> bytes:
    """The body, read up to MAX_BODY_BYTES (413 past it, never read in full); a refusal is
    recorded as the sensor records every refused callback."""
    limit = MAX_BODY_BYTES

    def record() -> PayloadTooLarge:
        exc = PayloadTooLarge(f"callback body over {limit} bytes", reason="too_large", param="body")
        sensor.record_refusal(exc, method=request.method, path=request.url.path, client_addr=client)
        return exc

    async def refuse() -> PayloadTooLarge:
        return await asyncio.to_thread(record)

    return await read_capped(request, limit, refuse)


@callback_router.post(
    "/{sensor_uuid:uuid}/{resource_class}/{trigger_type}",
    dependencies=[require(Perm.PUBLIC)],
    status_code=202,
    responses=problems(400, 401),
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
    client = request.client.host if request.client else None
    body = await _capped_body(request, sensor, client)
    stored = await asyncio.to_thread(
        sensor.handle_callback,
        method=request.method,
        path=request.url.path,
        headers=dict(request.headers),
        body=body,
        client_addr=client,
    )
    return {"accepted": True, "events": [e.id for e in stored]}

