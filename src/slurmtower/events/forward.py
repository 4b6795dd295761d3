"""Events out: the event log forwarded as CloudEvents, or to StackStorm's webhook API.

Each ``[[hooks.forward]]`` target has a :class:`Forwarder`, run as a background task of the
sensor's leader (so one process of a deployment forwards, whichever leads, and never inside
the sensor's own rounds). A forwarder follows the event log from a cursor kept in the store
(``event_cursors``, named ``forward:<target>``), the way the rule engine does:

* **at least once**: the cursor moves past an event only once the receiver took it (2xx),
  and is saved after every batch and before every wait; after a crash or a change of
  leader the events after the saved cursor are sent again (at most one batch of
  duplicates: receivers drop them by the CloudEvents ``id``, the event's id);
* **in order**, one event at a time per target; a receiver that does not take an event
  (connection error, timeout, 408, 429, 5xx, or any other non-2xx answer but the ones
  below) gets it again after a back-off doubling from 1 s up to ``hooks.forward_max_backoff``,
  and the events behind it wait: nothing is lost while the receiver is down;
* an event the receiver **refuses** for what it is (400, 409, 413, 415, 422) is not sent
  again (counted ``rejected``, logged);
* **bounded**: memory holds one batch per target; an event older than the target's
  ``max_age`` when its turn comes (a receiver down for a day) is dropped, counted;
* a new target starts after the newest event in the log (not with the whole history).

Every outcome is counted in ``slurmtower_forward_events_total{target, outcome}``
(``delivered``, ``failed`` attempts, ``rejected``, ``dropped``) and failures are logged with
the target's name and the receiver's scheme, host and path (never its query, credentials,
API key, token or secret).

Formats:

``cloudevents``
    CloudEvents 1.0, structured mode (``Content-Type: application/cloudevents+json``):
    ``specversion``, ``id`` (the event id), ``source`` (``hooks.cloudevents_source``, default
    ``/slurmtower/<cluster>``), ``type`` (the event type), ``time``, ``subject`` (the node, when
    the event has one), ``datacontenttype: application/json``, ``data`` (the payload), and the
    extension ``slurmtowersource`` (the event's own source: ``trigger``, ``poll``,
    ``alertmanager`` ...).
``st2``
    StackStorm's webhook API with the ``St2-Api-Key`` header. To a named webhook
    (``.../api/v1/webhooks/<name>``, a ``core.st2.webhook`` rule) the body is the event as
    ``GET /events`` shows it; to StackStorm's generic one (``.../api/v1/webhooks/st2``) it is
    ``{"trigger": <event type>, "payload": <event payload>}``, which dispatches the trigger of
    that name (the pack's ``slurm.*`` triggers keep working).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from sqlalchemy import select

from slurmtower import __version__
from slurmtower.events.store import EventStore
from slurmtower.models.event import Event
from slurmtower.rules.builtin import webhook_signature
from slurmtower.settings import ForwardTarget, Settings
from slurmtower.store.schema import event_cursors

__all__ = [
    "CURSOR_PREFIX",
    "OUTCOMES",
    "PERMANENT_STATUSES",
    "Delivery",
    "ForwardMetrics",
    "Forwarder",
    "cloudevent",
    "cloudevents_source",
    "forwarders",
    "metrics_for",
    "safe_url",
    "st2_body",
]

log = logging.getLogger(__name__)

CURSOR_PREFIX = "forward:"
#: Answers that refuse the event itself: sending it again would not help.
PERMANENT_STATUSES = frozenset({400, 409, 413, 415, 422})
OUTCOMES = ("delivered", "failed", "rejected", "dropped")
BATCH = 200
_SAVE_EVERY = 50
CLOUDEVENTS_TYPE = "application/cloudevents+json; charset=utf-8"


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def cloudevents_source(settings: Settings) -> str:
    """The CloudEvents ``source`` of this deployment's events."""
    return settings.hooks.cloudevents_source or f"/slurmtower/{settings.cluster_name or 'slurm'}"


def cloudevent(event: Event, *, source: str) -> dict[str, Any]:
    """``event`` as a CloudEvents 1.0 structured-mode JSON document."""
    doc: dict[str, Any] = {
        "specversion": "1.0",
        "id": str(event.id),
        "source": source,
        "type": event.type,
        "time": _iso(event.time),
        "datacontenttype": "application/json",
        "slurmtowersource": event.source,
        "data": event.payload,
    }
    if event.node is not None:
        doc["subject"] = event.node
    if event.cluster is not None:
        doc["slurmtowercluster"] = event.cluster  # several clusters: whose event (an extension attribute)
    return doc


def _st2_generic(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("/webhooks/st2")


def st2_body(event: Event, url: str) -> dict[str, Any]:
    """The body StackStorm's webhook at ``url`` takes for ``event``."""
    if _st2_generic(url):
        return {"trigger": event.type, "payload": event.payload}
    body: dict[str, Any] = event.model_dump(mode="json")
    return body


def safe_url(url: str) -> str:
    """``url`` without credentials, query or fragment: what may be logged."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class ForwardMetrics:
    """``slurmtower_forward_events_total{target, outcome}`` in one app's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.events = PromCounter("slurmtower_forward_events",
                                  "Events forwarded to hooks.forward targets, by target and outcome (delivered; "
                                  "failed: an attempt to be retried; rejected: refused by the receiver, not "
                                  "retried; dropped: older than the target's max_age)",
                                  ["target", "outcome"], registry=registry)


_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, ForwardMetrics] = weakref.WeakKeyDictionary()


def metrics_for(registry: CollectorRegistry) -> ForwardMetrics:
    """The forwarding counters of ``registry`` (made once per registry)."""
    found = _METRICS.get(registry)
    if found is None:
        found = _METRICS[registry] = ForwardMetrics(registry)
    return found


@dataclass(frozen=True)
class Delivery:
    """What one attempt at sending an event came to."""

    outcome: Literal["delivered", "retry", "rejected"]
    detail: str


class Forwarder:
    """Forwards the event log to one target (see the module's docstring).

    Args:
        target: the ``[[hooks.forward]]`` entry.
        store: the event store (the log and the cursor).
        source: the CloudEvents ``source``.
        interval: seconds between reads of the log when it has nothing new.
        max_backoff: the longest wait between two attempts.
        registry: returns the registry to count in (``None``: not counted).
        transport: an httpx transport (unix sockets, tests).
    """

    def __init__(self, target: ForwardTarget, store: EventStore, *, source: str, interval: float = 1.0,
                 max_backoff: float = 60.0, registry: Callable[[], CollectorRegistry | None] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.target = target
        self.store = store
        self.source = source
        self.interval = interval
        self.max_backoff = max_backoff
        self._registry = registry
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._cursor: int | None = None
        self._metrics: ForwardMetrics | None = None
        self._patterns = list(target.types)
        #: Attempts failed in a row (the back-off grows with them).
        self.failures = 0
        self.counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.last_error: str | None = None

    @property
    def cursor_name(self) -> str:
        return CURSOR_PREFIX + self.target.name

    @property
    def cursor(self) -> int | None:
        """The last event id the receiver took or that needs no sending (``None``: not read yet)."""
        return self._cursor

    def wants(self, event: Event) -> bool:
        return any(fnmatch.fnmatchcase(event.type, p) for p in self._patterns)

    # -- what is sent ---------------------------------------------------------------------

    def request(self, event: Event) -> tuple[bytes, dict[str, str]]:
        """The body and headers of ``event``'s request (signed now, when the target has a secret)."""
        target = self.target
        headers = {"User-Agent": f"slurmtower-forward/{__version__}", "X-Slurmtower-Event-Id": str(event.id)}
        doc: dict[str, Any]
        if target.format == "cloudevents":
            doc = cloudevent(event, source=self.source)
            headers["Content-Type"] = CLOUDEVENTS_TYPE
        else:
            doc = st2_body(event, target.url)
            headers["Content-Type"] = "application/json"
            if target.api_key is not None:
                headers["St2-Api-Key"] = target.api_key.get_secret_value()
        body = json.dumps(doc, separators=(",", ":"), default=str).encode()
        if target.bearer_token is not None:
            headers["Authorization"] = f"Bearer {target.bearer_token.get_secret_value()}"
        if target.secret is not None:
            ts = str(int(time.time()))
            headers["X-Slurmtower-Timestamp"] = ts
            headers["X-Slurmtower-Signature"] = webhook_signature(target.secret.get_secret_value().encode(),
                                                                  ts, body)
        return body, headers

    async def send(self, event: Event) -> Delivery:
        """One attempt at delivering ``event``."""
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport, follow_redirects=False,
                                             timeout=self.target.timeout)
        body, headers = self.request(event)
        try:
            response = await self._client.post(self.target.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return Delivery("retry", f"{type(exc).__name__}: {str(exc)[:200] or 'no detail'}")
        if response.is_success:
            return Delivery("delivered", f"HTTP {response.status_code}")
        if response.status_code in PERMANENT_STATUSES:
            return Delivery("rejected", f"HTTP {response.status_code}")
        return Delivery("retry", f"HTTP {response.status_code}")

    # -- the background task --------------------------------------------------------------

    def _find_metrics(self) -> None:
        if self._metrics is None and self._registry is not None:
            registry = self._registry()
            if registry is not None:
                self._metrics = metrics_for(registry)
                for name in OUTCOMES:  # every outcome exported from the start, 0 until it happens
                    self._metrics.events.labels(self.target.name, name)

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self._metrics is not None:
            self._metrics.events.labels(self.target.name, outcome).inc()

    def _load_cursor(self) -> int:
        t = event_cursors

        with self.store.engine.connect() as conn:
            found = conn.execute(select(t.c.last_id).where(t.c.name == self.cursor_name)).scalar()
        if found is not None:
            return int(found)
        start = self.store.last_id() or 0
        self.store.set_cursor(self.cursor_name, start)
        log.info("forwarding to %s (%s) starts after event %d", self.target.name, safe_url(self.target.url), start)
        return start

    async def _save(self, position: int) -> None:
        if position != self._cursor:
            await asyncio.to_thread(self.store.set_cursor, self.cursor_name, position)
            self._cursor = position

    async def round(self) -> float:
        """Send what the log holds after the cursor; returns the seconds to the next round."""
        self._find_metrics()
        if self._cursor is None:
            self._cursor = await asyncio.to_thread(self._load_cursor)
        events = await asyncio.to_thread(self.store.query, since_id=self._cursor, limit=BATCH)
        position = self._cursor
        since_save = 0
        try:
            for event in events:
                assert event.id is not None
                if not self.wants(event):
                    position = event.id
                    continue
                age = (datetime.now(UTC) - event.time).total_seconds()
                if age > self.target.max_age:
                    self._count("dropped")
                    log.warning("forwarding to %s: event %d (%s) is %.0f s old, over max_age: dropped",
                                self.target.name, event.id, event.type, age)
                    position = event.id
                    continue
                result = await self.send(event)
                if result.outcome == "retry":
                    self.failures += 1
                    self.last_error = result.detail
                    self._count("failed")
                    wait = min(self.max_backoff, 2.0 ** min(self.failures - 1, 30))
                    log.warning("forwarding to %s (%s): event %d not delivered (%s; %d failed in a row); "
                                "next try in %.0f s", self.target.name, safe_url(self.target.url), event.id,
                                result.detail, self.failures, wait)
                    return wait
                if result.outcome == "rejected":
                    self._count("rejected")
                    log.warning("forwarding to %s (%s): event %d (%s) refused with %s: not sent again",
                                self.target.name, safe_url(self.target.url), event.id, event.type, result.detail)
                else:
                    self._count("delivered")
                    if self.failures:
                        log.info("forwarding to %s: delivered again after %d failed attempts",
                                 self.target.name, self.failures)
                    self.failures = 0
                    self.last_error = None
                position = event.id
                since_save += 1
                if since_save >= _SAVE_EVERY:
                    await self._save(position)
                    since_save = 0
        finally:
            await self._save(position)
        return 0.0 if len(events) == BATCH else self.interval

    async def close(self) -> None:
        """Drop the HTTP connections (the cursor is already saved)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._cursor = None  # a new leader's cursor may have moved meanwhile


def forwarders(settings: Settings, store: EventStore, *,
               registry: Callable[[], CollectorRegistry | None] | None = None) -> list[Forwarder]:
    """One :class:`Forwarder` per ``hooks.forward`` target."""
    hooks = settings.hooks
    source = cloudevents_source(settings)
    return [Forwarder(target, store, source=source, interval=hooks.forward_interval,
                      max_backoff=hooks.forward_max_backoff, registry=registry)
            for target in hooks.forward]
