"""The objects a running slurmtower shares between its adapters (HTTP routes, the dashboard,
the CLI's ``sensor``) and its periodic work.

One typed container, filled once at start-up from the settings by
:func:`slurmtower.runtime.build.assemble` (never at import): each service is an explicit
field (a field left ``None`` is a part not configured). The periodic work is
:attr:`Services.background`, declared in one list (:func:`slurmtower.runtime.tasks.periodic_tasks`):
each :class:`BackgroundTask` says which role's leader runs it, or that every process does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine

from slurmtower.accounting import AccountingDB, Reports
from slurmtower.accounting.pool import AccountingPool
from slurmtower.errors import AccountingUnavailable, ConfigError, NotFound
from slurmtower.live.cache import SnapshotCache, build_cache
from slurmtower.live.keep import SnapshotKeeper
from slurmtower.live.state import LiveState
from slurmtower.settings import Settings
from slurmtower.slurm import SlurmClient, make_client
from slurmtower.slurm.observe import slurm_call_observer
from slurmtower.store.engine import make_store_engine
from slurmtower.store.leader import Leadership

if TYPE_CHECKING:
    from slurmtower.actions import Catalogue
    from slurmtower.events import EventStore
    from slurmtower.events.feed import EventFeed
    from slurmtower.events.sensor import Sensor
    from slurmtower.live.archive import LoadArchive
    from slurmtower.live.budget import PollPace

__all__ = ["READY_TIMEOUT", "READY_TTL", "BackgroundTask", "Metrics", "Readiness", "Services"]

log = logging.getLogger(__name__)
_ACCOUNTING_LOCK = threading.Lock()


class Metrics(Protocol):
    """What the runtime needs of the process's metrics
    (:class:`~slurmtower.runtime.metrics.AppMetrics`): the registry forwarders count into,
    what an answered request records (for the cached fast path), and closing them when the process stops."""

    registry: Any

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None: ...

    def close(self) -> None: ...


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
    """The live snapshot cache (:meth:`live_cache`)."""
    keeper: SnapshotKeeper | None = None
    """Keeps the snapshots on disk for the next start (``api.keep_snapshots_interval``)."""
    metrics: Metrics | None = None
    accounting: AccountingDB | None = None
    report_reader: Reports | None = None
    accounting_pool: AccountingPool | None = None
    """The threads database reads run in (bounded, their own)."""
    event_store: EventStore | None = None
    event_feed: EventFeed | None = None
    """This process's tail of the event log, fanned out to its SSE clients (every process)."""
    sensor: Sensor | None = None
    sensor_external: bool = False
    """The sensor runs elsewhere (``slurmtower sensor``): don't start it here."""
    poll_pace: PollPace | None = None
    """The sensor's poll interval within its part of slurmctld's share (with the sensor)."""
    load_archive: LoadArchive | None = None
    catalogue: Catalogue | None = None
    """The action catalogue: the API's and the rule engine's (one store, one accounting)."""
    authenticate_other: Callable[[str], Any] | None = None
    """A hook for other credentials (tests, plugins): ``hook(token)`` -> principal or None."""
    readiness: Readiness | None = None
    """``/ready``'s checks, cached for every caller."""
    parts: frozenset[str] = frozenset()
    """What this process runs (:data:`slurmtower.runtime.build.PARTS`), set by ``assemble``."""
    elections: dict[str, Leadership] = field(default_factory=dict)
    """One election per role of this process's leader's tasks (``BackgroundTask.role``)."""
    clusters: dict[str, Services] = field(default_factory=dict)
    """The deployment's other clusters (``[[clusters]]``), each with its own client, snapshots,
    refresh worker, accounting reader and catalogue, filled by ``assemble``; this object is
    the default cluster's (and holds what every cluster shares: store, metrics, elections)."""
    name: str = ""
    """The cluster these services are for (``settings.cluster_names()[0]`` for the default)."""
    parent: Services | None = field(default=None, repr=False)
    """The default cluster's services, for another cluster's: its elections are the process's."""
    _election: asyncio.Task[None] | None = field(default=None, repr=False)
    _leading: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Services:
        """The default cluster's services (the one cluster's, without ``[[clusters]]``)."""
        name = settings.cluster_names()[0]
        settings = settings.deployment().for_cluster(name)
        return cls(settings=settings, client=make_client(settings, observers=[slurm_call_observer]),
                   client_from_settings=True, name=name)

    @classmethod
    def for_cluster(cls, settings: Settings) -> Services:
        """One cluster's services on their own, ``settings`` being that cluster's
        (:meth:`Settings.for_cluster <slurmtower.settings.Settings.for_cluster>`): a command's
        for the cluster it was given (``--cluster``)."""
        name = settings.cluster_name if settings.deployment().clusters else None
        if name is None or name == settings.deployment().cluster_names()[0]:
            return cls.from_settings(settings)
        return cls(settings=settings, client=make_client(settings, observers=[slurm_call_observer]),
                   client_from_settings=True, name=name)

    # -- the deployment's clusters ----------------------------------------------------------

    def cluster_names(self) -> list[str]:
        """Every cluster served, the default first."""
        return self.settings.deployment().cluster_names()

    def cluster(self, name: str | None) -> Services:
        """The services of cluster ``name`` (``None``: the default cluster's, these).

        Raises :class:`~slurmtower.errors.NotFound` naming the cluster when it is not served.
        """
        if name is None or name == self.name_or_default():
            return self
        child = self.clusters.get(name)
        if child is None:
            raise NotFound(f"no cluster {name!r} (served: {', '.join(self.cluster_names())})", param="cluster")
        return child

    def name_or_default(self) -> str:
        return self.name or self.cluster_names()[0]

    def every_cluster(self) -> list[Services]:
        """The default cluster's services, then each other cluster's."""
        return [self, *self.clusters.values()]

    # -- background work and the deployment's leader --------------------------------------

    def store_engine(self) -> Engine:
        """The engine of slurmtower's store: the event store's when it is open (its tables
        mapped to its database schema), else the one of the settings' URL (one per process)."""
        store = self.event_store
        return store.engine if store is not None else make_store_engine(self.settings.effective_store_url())

    def role_name(self, role: str) -> str:
        """A per-cluster role's election name: ``role`` for the default cluster, ``role@name``
        for another (a deployment with three clusters has three sensor leaders)."""
        return role if self.parent is None else f"{role}@{self.name}"

    def sensor_for(self, sensor_uuid: str) -> Sensor | None:
        """The sensor (of any cluster) whose callbacks carry ``sensor_uuid``."""
        for each in self.every_cluster():
            if each.sensor is not None and each.sensor.uuid == sensor_uuid:
                return each.sensor
        return None

    def leadership(self, role: str = "leader") -> Leadership:
        """The election of the leader of ``role`` (on the event store's database)."""
        if self.parent is not None:
            return self.parent.leadership(role)
        if role not in self.elections:
            store = self.event_store
            engine = self.store_engine()
            identity = next(iter(self.elections.values())).identity if self.elections else None
            self.elections[role] = Leadership(engine, name=role, identity=identity,
                                              schema=store.schema if store is not None else None)
        return self.elections[role]

    def leads(self, role: str) -> bool:
        """This process runs the tasks of ``role`` now."""
        return self.parent.leads(role) if self.parent is not None else role in self._leading

    @property
    def leading(self) -> bool:
        """This process leads at least one role."""
        return bool(self._leading)

    def leading_roles(self) -> list[str]:
        """The roles this process leads now, sorted (``/ready``'s ``leads``)."""
        return sorted(role for role in self.elections if self.leads(role))

    async def ready_checks(self) -> dict[str, bool]:
        """The readiness checks, shared and rate-limited by one :class:`Readiness`."""
        if self.readiness is None:
            self.readiness = Readiness(self)
        return await self.readiness.get()

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

    def accounting_db(self) -> AccountingDB:
        """The process's reader of slurmdbd's database (blocking: call from a worker thread):
        built on first use, asking slurmctld for the cluster's name when the settings give none.

        Raises :class:`~slurmtower.errors.AccountingUnavailable` when no database is configured.
        """
        db = self.accounting
        if db is not None:
            return db
        settings = self.settings
        if settings.accounting.url is None:
            raise AccountingUnavailable("no accounting database is configured (accounting.url)")
        with _ACCOUNTING_LOCK:
            db = self.accounting
            if db is not None:
                return db
            cluster = settings.accounting.cluster or settings.cluster_name or self.client.config().cluster_name
            try:
                db = AccountingDB.from_settings(settings.model_copy(update={"cluster_name": cluster}))
            except ConfigError as exc:
                raise AccountingUnavailable(f"accounting database not usable: {exc.message}") from exc
            self.accounting = db
            return db

    def reports(self) -> Reports:
        """The usage reports over :meth:`accounting_db` (blocking: call from a worker thread)."""
        if self.report_reader is None:
            self.report_reader = Reports(self.accounting_db(), tz=self.settings.accounting.time_zone)
        return self.report_reader

    def accounting_threads(self) -> AccountingPool:
        """The bounded threads database reads run in (made on first use)."""
        if self.accounting_pool is None:
            acct = self.settings.accounting
            self.accounting_pool = AccountingPool(workers=acct.max_concurrency, wait=acct.request_wait)
        return self.accounting_pool

    def live_cache(self) -> SnapshotCache:
        """The process's snapshot cache (built on first use from the settings and the client)."""
        if self.snapshots is None:
            self.snapshots = build_cache(self.settings, self.client)
        return self.snapshots

    def live(self) -> LiveState:
        """Typed reads of the live snapshots (hidden partitions cut)."""
        return LiveState(self.live_cache(), frozenset(self.settings.api.hidden_partitions))

    def action_catalogue(self) -> Catalogue:
        """The action catalogue, built on first use and shared by the routes and the rules."""
        if self.catalogue is None:
            from slurmtower.actions import ActionStore, Catalogue  # deferred: the catalogue, first use only

            store = ActionStore(self.settings.effective_store_url(), **self.settings.store_cluster())
            self.catalogue = Catalogue.from_settings(self.settings, client=self.client, store=store)
        return self.catalogue


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
