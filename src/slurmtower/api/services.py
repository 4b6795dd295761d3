"""The objects a running slurmtower shares between routes and background tasks.

One typed container, built once at start-up from the settings (never at import): each
service is an explicit field, set by the route module that owns it in its ``setup`` (a
field left ``None`` is a part not configured). Routes get it through :data:`ServicesDep`.
The periodic work is :attr:`Services.background`: each :class:`BackgroundTask` says whether
it needs the deployment's leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request

from slurmtower.settings import Settings
from slurmtower.slurm import SlurmClient, make_client

if TYPE_CHECKING:
    from slurmtower.accounting import AccountingDB
    from slurmtower.accounting.pool import AccountingPool
    from slurmtower.actions import Catalogue
    from slurmtower.api.cache import SnapshotCache
    from slurmtower.api.routes.health import Readiness
    from slurmtower.api.routes.load import LoadArchive
    from slurmtower.api.routes.metrics import AppMetrics
    from slurmtower.events import EventStore
    from slurmtower.events.feed import EventFeed
    from slurmtower.events.sensor import Sensor
    from slurmtower.store.leader import Leadership

__all__ = ["BackgroundTask", "Services", "ServicesDep", "get_services"]

log = logging.getLogger(__name__)


@dataclass
class BackgroundTask:
    """Periodic work declared in one place and run inside the service's lifespan.

    ``run`` is one round; it returns the seconds to wait before the next round. A round
    that raises is logged and retried after an exponential back-off (never a hot loop).
    """

    name: str
    run: Callable[[], Awaitable[float]]
    max_backoff: float = 300.0
    on_stop: Callable[[], Awaitable[None]] | None = None
    needs_leader: bool = True
    """Runs once per deployment (sensor, archiver, rules, purge), not once per process."""
    role: str = "leader"
    """Which election a leader's task belongs to: the tasks of one role run in the process
    that leads it. The sensor (with its rules and purge) and the archiver are separate
    roles, so a ``slurmtower sensor`` process and ``serve`` processes with the sensor off
    each lead what they run."""
    _task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        failures = 0
        while True:
            try:
                delay = await self.run()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                failures += 1
                delay = min(self.max_backoff, 2.0 ** min(failures, 12))
                log.exception("background task %s failed (%d in a row); next try in %.0f s",
                              self.name, failures, delay)
            await asyncio.sleep(max(delay, 0.05))

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.name)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Cancel the loop and run ``on_stop`` (nothing when it was never started)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self._task = None
        if self.on_stop is not None:
            await self.on_stop()


@dataclass
class Services:
    """What one slurmtower process runs on. Route modules set their part in ``setup``."""

    settings: Settings
    client: SlurmClient
    client_from_settings: bool = False
    """The client is the one these settings make (a refresh worker may build its twin)."""
    background: list[BackgroundTask] = field(default_factory=list)
    snapshots: SnapshotCache | None = None
    """The live snapshot cache (``api.cache.shared_cache``)."""
    metrics: AppMetrics | None = None
    accounting: AccountingDB | None = None
    accounting_pool: AccountingPool | None = None
    """The threads database reads run in (bounded, their own)."""
    event_store: EventStore | None = None
    event_feed: EventFeed | None = None
    """This process's tail of the event log, fanned out to its SSE clients (every process)."""
    sensor: Sensor | None = None
    sensor_external: bool = False
    """The sensor runs elsewhere (``slurmtower sensor``): don't start it here."""
    load_archive: LoadArchive | None = None
    catalogue: Catalogue | None = None
    """The action catalogue: the API's and the rule engine's (one store, one accounting)."""
    authenticate_other: Callable[[str], Any] | None = None
    """A hook for other credentials (tests, plugins): ``hook(token)`` -> principal or None."""
    readiness: Readiness | None = None
    """``/ready``'s checks, cached for every caller."""
    elections: dict[str, Leadership] = field(default_factory=dict)
    """One election per role of this process's leader's tasks (``BackgroundTask.role``)."""
    _election: asyncio.Task[None] | None = field(default=None, repr=False)
    _leading: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Services:
        from slurmtower.api.metrics_hook import slurm_call_observer

        return cls(settings=settings, client=make_client(settings, observers=[slurm_call_observer]),
                   client_from_settings=True)

    # -- background work and the deployment's leader --------------------------------------

    def leadership(self, role: str = "leader") -> Leadership:
        """The election of the leader of ``role`` (on the event store's database)."""
        if role not in self.elections:
            from slurmtower.storage import make_store_engine
            from slurmtower.store.leader import Leadership

            store = self.event_store
            engine = store.engine if store is not None else make_store_engine(self.settings.effective_store_url())
            identity = next(iter(self.elections.values())).identity if self.elections else None
            self.elections[role] = Leadership(engine, name=role, identity=identity,
                                              schema=store.schema if store is not None else None)
        return self.elections[role]

    def leads(self, role: str) -> bool:
        """This process runs the tasks of ``role`` now."""
        return role in self._leading

    @property
    def leading(self) -> bool:
        """This process leads at least one role."""
        return bool(self._leading)

    def _roles(self) -> list[str]:
        return list(dict.fromkeys(t.role for t in self.background if t.needs_leader))

    async def start_background(self) -> None:
        """Start every process's tasks, elect, and start the leader's if this process leads."""
        for task in self.background:
            if not task.needs_leader:
                task.start()
        roles = self._roles()
        for role in roles:
            self.leadership(role)
        if roles:
            await self._elect()
            self._election = asyncio.create_task(self._election_loop(), name="leader-election")

    async def _election_loop(self) -> None:
        interval = self.settings.api.leader_interval
        while True:
            await asyncio.sleep(interval)
            try:
                await self._elect()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("leader election round failed")

    async def _elect(self) -> None:
        for role in self._roles():
            leader = self.leadership(role)
            tasks = [t for t in self.background if t.needs_leader and t.role == role]
            if role in self._leading:
                if not await asyncio.to_thread(leader.still_leading):
                    log.warning("%s no longer leads %s: stopping its tasks", leader.identity, role)
                    self._leading.discard(role)
                    for task in reversed(tasks):
                        await task.stop()
            elif await asyncio.to_thread(leader.try_lead):
                self._leading.add(role)
                for task in tasks:
                    task.start()

    async def stop_background(self) -> None:
        """Stop every task (the leader's first, while it still leads), then resign."""
        if self._election is not None:
            self._election.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._election
            self._election = None
        for task in reversed(self.background):
            if not task.needs_leader or task.role in self._leading:
                await task.stop()
        self._leading.clear()
        for leader in self.elections.values():
            await asyncio.to_thread(leader.resign)

    def action_catalogue(self) -> Catalogue:
        """The action catalogue, built on first use and shared by the routes and the rules."""
        if self.catalogue is None:
            from slurmtower.actions import ActionStore, Catalogue

            self.catalogue = Catalogue.from_settings(
                self.settings, client=self.client, store=ActionStore(self.settings.effective_store_url()))
        return self.catalogue


async def get_services(request: Request) -> Services:
    """The app's :class:`Services` (an async dependency: a sync one costs a thread hop)."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
