"""/events, /events/stream (SSE) and the trigger callback ``POST /{uuid}/{class}/{type}``.

The event store, the sensor and its rules are the runtime's (:mod:`slurmtower.runtime.sensor`,
built by :func:`slurmtower.runtime.assemble` for ``serve`` and ``slurmtower sensor`` alike);
these routes read them.

The callback route keeps the StackStorm sensor's URL layout for compatibility, but the
``uuid`` segment only matches a UUID (Starlette's ``uuid`` convertor), so it can never
shadow another three-segment route, and only HMAC-signed, fresh, never-seen requests are
accepted (see :mod:`slurmtower.events.callback`); every refusal is a security event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid as uuid_mod
from collections.abc import AsyncGenerator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.types import Message, Send

from slurmtower.accounting.query import parse_time
from slurmtower.api.callback import receive_callback
from slurmtower.api.deps import ServicesDep, cluster_of
from slurmtower.api.params import CLUSTER_QUERY_SCHEMA, MAX_ID, READ_PROBLEMS, TIME_SCHEMA, problems
from slurmtower.api.query import checked
from slurmtower.api.security import Perm, Principal, lapsed, require
from slurmtower.errors import ConfigError, InvalidInput
from slurmtower.events.feed import EventFeed, Subscription
from slurmtower.events.sensor import Sensor
from slurmtower.events.store import EventStore
from slurmtower.models.event import Event, RuleRun
from slurmtower.runtime import Services
from slurmtower.visibility import Visibility

__all__ = ["callback_router", "router", "setup"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["events"])
callback_router = APIRouter(tags=["events"])
"""The trigger callback: included by :func:`setup` only where the sensor runs."""

STREAM_POLL_SECONDS = 0.5
STREAM_HEARTBEAT_SECONDS = 15.0
#: Events read from the store per query while a stream catches up.
STREAM_BATCH = 500
#: Seconds between two checks that a stream's credential still holds (also before each batch sent).
STREAM_RECHECK_SECONDS = 1.0
#: Seconds a write to a stream's client may wait for the client to take it (its connection's
#: buffers full) before the stream is cut off: a client that stops reading is dropped, not
#: buffered for (its subscription meanwhile holds at most feed.MAX_PENDING_EVENTS events).
STREAM_SEND_TIMEOUT = 30.0
MAX_PAGE = 1000


# -- wiring -------------------------------------------------------------------------------


def setup(services: Services, app: FastAPI) -> None:
    """Serve the trigger callback where the sensor runs: every process that may lead the
    sensor takes callbacks (the deployment's key and UUID); a process whose sensor runs
    elsewhere serves no callback route at all. The sensor itself is the runtime's
    (:func:`slurmtower.runtime.assemble`)."""
    settings = services.settings
    if settings.events.sensor_enabled and not services.sensor_external:
        app.include_router(callback_router)


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

#: ``?cluster=`` (or ``/clusters/{cluster}/events...``): one cluster's events; without it every
#: cluster's (each event names its cluster once several are served).
ClusterParam = Annotated[str | None, checked("Only this cluster's events (default: every cluster's); one not "
                                             "served is a 404.", CLUSTER_QUERY_SCHEMA, alias="cluster")]
#: ``type``: event types, comma-separated or repeated, each at most 200 characters.
_TYPES = re.compile(r"^[^\x00,]{0,200}(?:,[^\x00,]{0,200})*$")


async def _scope(request: Request, services: Services) -> tuple[str | None, Callable[[Event], Event | None] | None]:
    """The cluster the request names (``None``: every cluster) and what callers see of an
    event: :meth:`Hidden.event <slurmtower.visibility.Hidden.event>` of its cluster (None for
    an event about hidden nodes or partitions only, else its payload without their names);
    ``None`` when no cluster hides anything."""
    name = cluster_of(request)
    clusters = [services.cluster(name)] if name is not None else services.every_cluster()
    hidden = {each.name_or_default(): await each.live().hiding() for each in clusters}
    default = services.name_or_default()
    if not any(hidden.values()):
        return name, None

    def seen(ev: Event) -> Event | None:
        view = hidden.get(ev.cluster or default)
        return ev if view is None else view.event(ev)

    return name, seen


def _types(type_: list[str] | None) -> list[str] | None:
    if not type_:
        return None
    names = [t.strip() for item in type_ for t in item.split(",") if t.strip()]
    for name in names:
        if len(name) > 200:
            raise InvalidInput("event type too long", param="type")
    return names or None


@router.get("/events", dependencies=[require(Perm.READ)], response_model=list[Event],
            responses=problems(400, 404, *READ_PROBLEMS))
async def list_events(
    services: ServicesDep,
    since: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Only events with a larger id: the page "
                                       "after this one (its last id), oldest first.")] = None,
    before: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Only events with a smaller id: the "
                                        "page before this one (its first id), the newest of them.")] = None,
    type_: Annotated[list[str] | None, Query(alias="type", description="Event type(s).",
                                             json_schema_extra={"items": {"type": "string",
                                                                          "pattern": _TYPES.pattern}})] = None,
    node: Annotated[str | None, Query(max_length=255, description="Only events about this node.")] = None,
    start_text: Annotated[str | None, checked("Only events at or after (ISO 8601, naive = UTC; or Unix "
                                              "seconds).", TIME_SCHEMA, alias="start")] = None,
    end_text: Annotated[str | None, checked("Only events before (ISO 8601, naive = UTC; or Unix seconds); "
                                            "not after `start`: none.", TIME_SCHEMA, alias="end")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"At most this many (1-{MAX_PAGE}).")] = 100,
    cluster_param: ClusterParam = None,
    *,
    request: Request,
) -> list[Event]:
    """The newest ``limit`` events (as ``slurmtower events``), or those after ``since`` or from
    ``start`` on (the oldest first), or the ``limit`` before ``before``; each page oldest first:
    its last id is the next page's ``since``, its first the previous page's ``before``."""
    start = parse_time(start_text, "start") if start_text is not None else None
    end = parse_time(end_text, "end") if end_text is not None else None
    store = _store(services)
    name, seen = await _scope(request, services)  # an unknown cluster or a bad type is refused first
    types = _types(type_)
    if start is not None and end is not None and end <= start:
        return []  # an empty range holds no event
    # No lower bound (since, start): the newest of what matches, read newest first.
    newest = since is None and start is None
    found = await asyncio.to_thread(
        store.query, since_id=since, before_id=before, types=types, node=node, start=start, end=end,
        limit=limit, cluster=name, descending=newest,
    )
    if newest:
        found.reverse()
    return found if seen is None else [ev for ev in map(seen, found) if ev is not None]


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
    hidden = await services.live().hiding()
    found = await asyncio.to_thread(store.rule_runs, rule=rule, event_id=event_id, limit=limit)
    policy = Visibility.from_settings(services.settings)
    # An envelope's result may hold jobs (a rule running slurm.job.get): shown as the action's
    # own answer would be to this caller; a run about hidden nodes only is left out, the others'
    # envelopes lose their names (a drain's refusal naming a hidden partition).
    shown = [run for run in map(hidden.item, found) if run is not None]
    return [run if policy.sees_all_private(principal)
            else run.model_copy(update={"envelope": policy.records(run.envelope, principal)})
            for run in shown]


@router.get("/events/sensor", dependencies=[require(Perm.READ)], responses=problems(404, *READ_PROBLEMS))
async def sensor_status(request: Request, services: ServicesDep, cluster_param: ClusterParam = None) -> dict[str, Any]:
    """The sensor's UUID, armed triggers and poll age (the default cluster's, or ``cluster``'s)."""
    return _sensor(services.cluster(cluster_of(request))).status()


def _sse(event: Event) -> bytes:
    data = event.model_dump_json()
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


def _ended(reason: str) -> bytes:
    """The last message of a stream whose credential no longer holds (logged out, revoked,
    expired): EventSource reconnects, and is refused then."""
    return f"event: slurmtower.stream.ended\ndata: {json.dumps({'reason': reason})}\n\n".encode()


class EventStreamResponse(StreamingResponse):
    """The stream's answer, whose every write the client must take within
    :data:`STREAM_SEND_TIMEOUT` seconds. A client that takes nothing for that long is cut
    off: the response ends there, unfinished (no last chunk), and the server closes the
    connection; logged. An EventSource reconnects with ``Last-Event-ID`` and catches up from
    the store."""

    def __init__(self, events: AsyncGenerator[bytes, None], *, client: str) -> None:
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.events = events
        self.client = client

    async def stream_response(self, send: Send) -> None:
        async def sent(message: Message) -> bool:
            try:
                await asyncio.wait_for(send(message), STREAM_SEND_TIMEOUT)
            except TimeoutError:
                log.warning("event stream to %s cut off: it took nothing for %.0f s", self.client,
                            STREAM_SEND_TIMEOUT)
                return False
            return True

        try:
            if not await sent({"type": "http.response.start", "status": self.status_code,
                               "headers": self.raw_headers}):
                return
            async for chunk in self.events:
                if not await sent({"type": "http.response.body", "body": chunk, "more_body": True}):
                    return
            await sent({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.events.aclose()  # its subscription ends now, not when collected


@router.get("/events/stream", dependencies=[require(Perm.READ)], responses=problems(400, 404, *READ_PROBLEMS))
async def stream_events(
    request: Request,
    services: ServicesDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", description="Resume after this event id "
                                                "(sent by browsers on reconnect).")] = None,
    since: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Start after this id (default: now).")] = None,
    type_: Annotated[list[str] | None, Query(alias="type", description="Event type(s).")] = None,
    node: Annotated[str | None, Query(max_length=255, description="Only events about this node.")] = None,
    cluster_param: ClusterParam = None,
) -> StreamingResponse:
    """Server-Sent Events of new events; resumes after ``Last-Event-ID`` (or ``since``)."""
    store = _store(services)
    shown, seen = await _scope(request, services)
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

    # The stream ends when the caller's credential no longer holds (a logout, a revoked token,
    # a JWT's exp): checked as a new request's would be, before each batch sent and at least
    # every STREAM_RECHECK_SECONDS.

    def wanted(ev: Event) -> Event | None:
        """``ev`` as this caller sees it; None when not asked for (type, node, cluster) or hidden."""
        if not ((types is None or ev.type in types) and (node is None or ev.node == node)
                and (shown is None or (ev.cluster or services.name_or_default()) == shown)):
            return None
        return ev if seen is None else seen(ev)

    async def stored_after(position: int) -> tuple[int, list[bytes], bool]:
        """The next batch of stored events after ``position``: (the new position, the wanted
        ones as SSE, whether the batch was full so more may follow)."""
        events = await asyncio.to_thread(store.query, since_id=position, limit=STREAM_BATCH)
        chunks = []
        for ev in events:
            assert ev.id is not None
            position = ev.id
            sent = wanted(ev)
            if sent is not None:
                chunks.append(_sse(sent))
        return position, chunks, len(events) == STREAM_BATCH

    async def polled(position: int) -> AsyncGenerator[bytes, None]:
        # No feed in this process (an app without its lifespan): read the store each poll.
        loop = asyncio.get_running_loop()
        last_beat = loop.time()
        yield b"retry: 2000\n\n"
        while True:
            if await request.is_disconnected():
                return
            position, chunks, more = await stored_after(position)
            why = await lapsed(request)
            if why is not None:
                yield _ended(why)
                return
            for chunk in chunks:
                yield chunk
            if more:
                continue
            if loop.time() - last_beat >= STREAM_HEARTBEAT_SECONDS:
                last_beat = loop.time()
                yield b": keep-alive\n\n"
            await asyncio.sleep(STREAM_POLL_SECONDS)

    async def fed(position: int, feed: EventFeed, sub: Subscription) -> AsyncGenerator[bytes, None]:
        # Subscribed before catching up, so nothing falls between the two; ids dedupe.
        try:
            yield b"retry: 2000\n\n"
            gap = True
            last_beat = time.monotonic()
            while True:
                if gap:
                    sub.lost = False
                    more = True
                    while more:
                        position, chunks, more = await stored_after(position)
                        why = await lapsed(request)
                        if why is not None:
                            yield _ended(why)
                            return
                        for chunk in chunks:
                            yield chunk
                    gap = False
                try:
                    batch = await asyncio.wait_for(sub.queue.get(), timeout=STREAM_RECHECK_SECONDS)
                except TimeoutError:
                    batch = None
                why = await lapsed(request)
                if why is not None:
                    yield _ended(why)
                    return
                if batch is None:
                    if await request.is_disconnected():
                        return
                    if time.monotonic() - last_beat >= STREAM_HEARTBEAT_SECONDS:
                        last_beat = time.monotonic()
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
                    sent = wanted(ev)
                    if sent is not None:
                        yield _sse(sent)
        finally:
            feed.unsubscribe(sub)

    feed = services.event_feed
    running = feed is not None and any(t.name == "event-feed" and t.running for t in services.background)
    if feed is not None and running:
        body = fed(cursor, feed, feed.subscribe())
    else:
        body = polled(cursor)
    return EventStreamResponse(body, client=request.client.host if request.client else "unknown")


# -- the trigger callback -----------------------------------------------------------------


@callback_router.post(
    "/{sensor_uuid:uuid}/{resource_class}/{trigger_type}",
    dependencies=[require(Perm.PUBLIC)],
    status_code=202,
    responses=problems(400, 401, 404, 413),  # 404: no such sensor route (a non-UUID path, no sensor here)
)
async def trigger_callback(
    request: Request,
    services: ServicesDep,
    sensor_uuid: uuid_mod.UUID,
    resource_class: str,
    trigger_type: str,
) -> dict[str, Any]:
    """Doorbell from the notify program: HMAC-signed, else 401 (400 when malformed). The
    UUID says whose: each cluster's sensor has its own (and its own key)."""
    sensor = services.sensor_for(str(sensor_uuid)) or _sensor(services)
    return await receive_callback(request, sensor)
