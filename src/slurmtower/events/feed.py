"""One tail of the event log per process, fanned out to its Server-Sent-Events clients.

Events are recorded by the deployment's leader (the sensor, the rules) and by whichever
process takes a trigger callback; every process streams them. Instead of one store query
per client and half-second, each process runs one :class:`EventFeed`: it waits for news,
reads what is new once, and hands the batch to every subscriber.

* On **PostgreSQL** the news is a ``NOTIFY`` that :meth:`EventStore.append` sends inside
  the transaction that stores the events (delivered at commit, never before the rows are
  visible): a follower's clients see the leader's event within milliseconds. The feed
  also reads every ``poll`` seconds in case a notification was lost with its connection.
* On **SQLite** (one host) it reads every ``poll`` seconds (an indexed ``id >`` query).

A subscriber holds at most :data:`MAX_PENDING_EVENTS` events not yet sent to its client: one
that falls further behind (a slow client, a burst of events) is marked ``lost``, its queue is
emptied, and it reads the gap from the store itself, at its client's pace, one store batch at
a time. Nothing is kept for a lost subscriber, so a client that does not read costs a bounded
amount of memory (and the stream cuts it off: :mod:`slurmtower.api.routes.events`). Resuming
with ``Last-Event-ID`` works the same on every process, since ids come from the one store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from slurmtower.events.store import EventStore, notify_channel
from slurmtower.models.event import Event

__all__ = ["MAX_PENDING_EVENTS", "EventFeed", "Subscription"]

log = logging.getLogger(__name__)

_BATCH = 500
#: The most events a subscription holds for its client (two of the store's reads): past it,
#: the client reads the gap from the store instead.
MAX_PENDING_EVENTS = 1000


class _Batches(asyncio.Queue[list[Event]]):
    """A queue of event batches that counts the events it holds (:attr:`events`)."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    # asyncio.Queue's hooks for what is stored: every put and get goes through them.
    def _put(self, item: list[Event]) -> None:
        self.events += len(item)
        super()._put(item)

    def _get(self) -> list[Event]:
        item: list[Event] = super()._get()
        self.events -= len(item)
        return item


@dataclass(eq=False)
class Subscription:
    """One client's queue of event batches, at most ``max_events`` events (:meth:`offer`)."""

    queue: _Batches = field(default_factory=_Batches)
    lost: bool = False
    """Events were dropped (the client was too slow): read the gap from the store."""
    max_events: int = MAX_PENDING_EVENTS

    @property
    def pending(self) -> int:
        """Events held for the client."""
        return self.queue.events

    def offer(self, batch: list[Event]) -> None:
        """Queue ``batch`` for the client; past ``max_events`` (or while the gap is still
        to be read) drop everything held instead, mark the subscription ``lost`` and wake its
        reader with an empty batch."""
        if self.lost:
            return  # the reader takes these from the store with the rest of the gap
        if self.queue.events + len(batch) > self.max_events:
            self.lose()
            return
        self.queue.put_nowait(batch)

    def lose(self) -> None:
        """Drop what is held; the reader reads the gap from the store."""
        self.lost = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait([])


class EventFeed:
    """Tails ``store`` and fans new events out to subscribers (one per SSE client).

    Args:
        store: the event store.
        poll: seconds between reads when no notification comes (the bound on latency on
            SQLite, the safety net on PostgreSQL).
    """

    def __init__(self, store: EventStore, *, poll: float = 0.25) -> None:
        self.store = store
        self.poll = poll
        self.position: int | None = None
        self._subs: set[Subscription] = set()
        self._listen: Any = None
        self.listening = False
        """True when PostgreSQL notifications wake the feed (else it polls)."""

    def subscribe(self) -> Subscription:
        sub = Subscription()
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """The current subscriptions (a copy: safe to read from another thread)."""
        return tuple(self._subs)

    # -- one round (a background task of every process) ----------------------------------

    async def round(self) -> float:
        """Wait for news (at most ``poll`` s), read the new events, hand them out. With no
        subscriber the feed rests (no query, no thread, no LISTEN connection)."""
        if not self._subs:
            if self.position is not None:
                self.position = None
                await asyncio.to_thread(self.close)
            return self.poll
        if self.position is None:
            # (Re)starting: every subscriber reads from the store what came before the
            # position this round starts at, so nothing falls in between.
            self.position = await asyncio.to_thread(lambda: self.store.last_id() or 0)
            for sub in list(self._subs):
                sub.lose()
        batches = await asyncio.to_thread(self._wait_and_read)
        for batch in batches:
            for sub in list(self._subs):
                sub.offer(batch)
        return 0.0

    def _wait_and_read(self) -> list[list[Event]]:
        if self.position is None:
            self.position = self.store.last_id() or 0
        self._wait()
        out: list[list[Event]] = []
        while True:
            batch = self.store.query(since_id=self.position, limit=_BATCH)
            if not batch:
                break
            last = batch[-1].id
            assert last is not None
            self.position = last
            out.append(batch)
            if len(batch) < _BATCH:
                break
        return out

    def _wait(self) -> None:
        if self.store.engine.dialect.name != "postgresql":

            time.sleep(self.poll)
            return
        try:
            conn = self._listener()
            # stop_after=1: wake on the first notification; the read then takes all news.
            for _ in conn.notifies(timeout=self.poll, stop_after=1):
                pass
        except Exception as exc:  # the listening connection broke: poll until it is back
            log.warning("event feed: LISTEN connection lost (%s); polling", type(exc).__name__)
            self.close()

            time.sleep(self.poll)

    def _listener(self) -> Any:
        if self._listen is None:
            raw = self.store.engine.raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            driver.autocommit = True
            driver.execute(f'LISTEN "{notify_channel(self.store.schema)}"')
            self._listen = raw
            self.listening = True
        return self._listen.driver_connection

    def close(self) -> None:
        """Drop the LISTEN connection (the feed reconnects at its next round)."""
        if self._listen is not None:
            with contextlib.suppress(Exception):
                self._listen.invalidate()
            with contextlib.suppress(Exception):
                self._listen.close()
            self._listen = None
        self.listening = False
