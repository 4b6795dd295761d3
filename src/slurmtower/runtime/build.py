"""Services built in one function from the settings, started and stopped in one place.

A process runs *parts* (:data:`PARTS`): ``serve`` all of them, ``slurmtower sensor`` only
``events``. :func:`assemble` fills each part's services that are not given (tests pass their
own client or store) and declares the process's periodic work
(:func:`~slurmtower.runtime.tasks.periodic_tasks`); :func:`start` and :func:`stop` are the
lifespan of any adapter (the HTTP app, the sensor alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from datetime import datetime

from slurmtower.accounting import AccountingDB
from slurmtower.errors import ConfigError
from slurmtower.events.feed import EventFeed
from slurmtower.events.store import EventStore
from slurmtower.live import malloc
from slurmtower.live.archive import LoadArchive
from slurmtower.live.budget import PollPace, RpcMeter, poll_load, sdiag_totals
from slurmtower.live.cache import SnapshotCache
from slurmtower.live.keep import SnapshotKeeper
from slurmtower.live.states import NodeStateOverlay
from slurmtower.live.worker import RefreshWorker
from slurmtower.models import Node
from slurmtower.runtime.sensor import LazyDispatcher, build_sensor
from slurmtower.runtime.services import Services
from slurmtower.runtime.tasks import periodic_tasks
from slurmtower.settings import Settings
from slurmtower.slurm import make_client
from slurmtower.slurm.observe import slurm_call_observer
from slurmtower.store.deployment import deployment_value

__all__ = ["PARTS", "assemble", "build_services", "running", "start", "stop"]

#: What a process can run: the live snapshots (and their refresh worker), job history
#: (slurmdbd's database), the load archive, the event log with the sensor and its rules,
#: the event store alone (alert hooks), the action catalogue (and its periodic work).
PARTS = frozenset({"live", "accounting", "archive", "events", "event-store", "actions"})
#: What each of a deployment's other clusters runs in a process (the default cluster runs the
#: process's parts): its snapshots, its accounting reads, its catalogue.
CLUSTER_PARTS = frozenset({"live", "accounting", "actions", "events", "archive"})
#: Of a cluster's periodic work, what runs for each cluster (the rest runs once per process:
#: the event feed and the forwarders read every cluster's events).
#: The live resources whose first read starts with the service (the queue and the nodes: what
#: the dashboard and most clients ask for first).
LIVE_AT_START = ("jobs", "nodes")
_PER_CLUSTER_TASKS = ("shared-snapshot", "snapshot-keeper", "sensor", "callback-refusals", "load-archiver",
                      "maintenance")


def build_services(settings: Settings, parts: Collection[str] = PARTS) -> Services:
    """The services of a process running ``parts``, from ``settings``."""
    return assemble(Services.from_settings(settings), parts)


def assemble(services: Services, parts: Collection[str] = PARTS) -> Services:
    """Fill the services of ``parts`` that ``services`` does not have yet, and declare the
    periodic work (once: calling it again adds what new parts need)."""
    unknown = set(parts) - PARTS
    if unknown:
        raise ValueError(f"unknown runtime parts: {', '.join(sorted(unknown))}")
    settings = services.settings
    services.parts = frozenset(services.parts | set(parts))
    if "live" in parts or "archive" in parts:
        cache = services.live_cache()
        if "live" in parts and services.keeper is None and settings.api.keep_snapshots_interval > 0:
            services.keeper = SnapshotKeeper(settings.state_dir / "snapshots", cache,
                                             interval=settings.api.keep_snapshots_interval,
                                             max_age=settings.api.keep_snapshots_max_age)
    if "accounting" in parts and services.accounting is None and settings.accounting.url is not None \
            and (settings.accounting.cluster or settings.cluster_name):
        # Building the engine does not connect; a missing cluster name is resolved on first use.
        services.accounting = AccountingDB.from_settings(settings)
    if ("events" in parts or "event-store" in parts) and services.event_store is None:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        # Events read back name their cluster once several are served (the default's rows
        # carry none: ``cluster = ''``).
        services.event_store = EventStore(
            settings.effective_store_url(),
            default_cluster=services.name_or_default() if settings.deployment().clusters else None)
    if "events" in parts and services.event_store is not None:
        if services.sensor is None:
            # Rules act through the process's one catalogue (its store, its accounting reader),
            # built lazily: a sensor without rules never builds it.
            dispatcher = LazyDispatcher(services) if settings.events.rules_dir is not None else None
            services.sensor = build_sensor(settings, services.client, services.event_store, dispatcher=dispatcher)
        role = services.role_name("sensor")
        services.sensor.leading = lambda: services.leads(role)
        if services.poll_pace is None:
            client = services.client
            services.poll_pace = PollPace(base=settings.events.poll_interval,
                                          share=settings.api.refresh_controller_share,
                                          max_interval=settings.events.max_poll_interval,
                                          meter=RpcMeter(lambda: sdiag_totals(client)))
        if services.event_feed is None:
            services.event_feed = EventFeed(services.event_store)
    if "actions" in parts:
        services.action_catalogue()
    if "archive" in parts and services.load_archive is None:
        services.load_archive = LoadArchive(engine=services.store_engine(), cluster=settings.cluster_key())
    known = {task.name for task in services.background}
    services.background.extend(t for t in periodic_tasks(services, parts) if t.name not in known)
    _assemble_clusters(services, parts)
    return services


def _assemble_clusters(services: Services, parts: Collection[str]) -> None:
    """The services of the deployment's other clusters: each its own client, snapshots and
    refresh worker, accounting reader and catalogue (their audit in the one store); the event
    store, metrics and elections are the default cluster's. Their snapshot tasks join the
    process's list, named ``<task>@<cluster>``."""
    wanted = set(parts) & CLUSTER_PARTS
    if not wanted or services.name_or_default() != services.cluster_names()[0]:
        return  # nothing per cluster, or these are one of the other clusters' own
    deployment = services.settings.deployment()
    for name in services.cluster_names()[1:]:
        child = services.clusters.get(name)
        if child is None:
            settings = deployment.for_cluster(name)
            child = Services(settings=settings, client=make_client(settings, observers=[slurm_call_observer]),
                             client_from_settings=True, name=name, parent=services)
            services.clusters[name] = child
        child.metrics, child.authenticate_other, child.event_feed, child.sensor_external = (
            services.metrics, services.authenticate_other, services.event_feed, services.sensor_external)
        if services.event_store is not None:
            child.event_store = services.event_store.scoped(child.settings.cluster_key())
        child.settings.state_dir.mkdir(parents=True, exist_ok=True)
        assemble(child, wanted)
        known = {task.name for task in services.background}
        for task in child.background:
            if task.name in _PER_CLUSTER_TASKS and f"{task.name}@{name}" not in known:
                task.name = f"{task.name}@{name}"
                services.background.append(task)
        child.background.clear()


def check_default_cluster(services: Services) -> None:
    """The store's rows of the default cluster carry no name (``cluster = ''``): refuse to
    serve them as another cluster's. The first start that knows the default cluster's name
    records it in the store (``deployment.default_cluster``); a later one with another
    default is a :class:`ConfigError` naming both.
    """
    name = services.name_or_default()
    if services.event_store is None or (not services.clusters and not services.settings.cluster_name):
        return  # no store opened here, or a one-cluster deployment that does not know its name
    recorded = deployment_value(services.event_store.engine, "default_cluster", lambda: name,
                                schema=services.event_store.schema)
    if recorded != name:
        raise ConfigError(f"the store's default cluster is {recorded!r}, the settings' is {name!r}: its rows "
                          f"without a cluster are {recorded!r}'s. List {recorded!r} first in [[clusters]] (or "
                          f"give it default = true)", key="clusters")


async def start(services: Services) -> None:
    """Start the refresh worker (when configured), join the shared snapshot, and start the
    periodic work (elections included)."""
    await asyncio.to_thread(check_default_cluster, services)
    malloc.tune()  # before the rounds' threads make their arenas
    for each in services.every_cluster():
        await _start_snapshots(each)
    await services.start_background()


async def _start_snapshots(services: Services) -> None:
    settings = services.settings
    cache = services.snapshots
    if cache is not None:
        # Only when the client is the one the settings make: the worker builds its own twin.
        if settings.api.refresh_in_subprocess and services.client_from_settings and cache.worker is None:
            worker = RefreshWorker(settings, report=slurm_call_observer,
                                   timeout=max(60.0, 2 * settings.slurm.command_timeout))
            worker.start()
            cache.worker = worker
            if cache.states is not None:
                # A process of its own (a state read never waits behind a full read of the
                # queue), spawned once the first state read found the release has them.
                def state_worker(settings: Settings = settings) -> RefreshWorker:
                    made = RefreshWorker(settings, report=slurm_call_observer,
                                         timeout=max(30.0, settings.slurm.command_timeout))
                    made.start()
                    return made

                cache.state_worker_factory = state_worker
        # The sensor's node polls (sinfo: the node and partition RPCs a node read makes),
        # wherever it runs: part of the deployment's share of slurmctld. Measured where it
        # polls here; else what the nodes' read costs, at the pace the sensor keeps.
        pace, api = services.poll_pace, settings.api

        def polls(cache: SnapshotCache = cache) -> float:
            if pace is not None and pace.cost > 0:
                return pace.load
            return poll_load(cache.controller_cost("nodes"), settings.events.poll_interval,
                             api.refresh_controller_share, settings.events.max_poll_interval)

        cache.other_controller_load = polls
        if services.sensor is not None and cache.node_states is None:
            # ...and where it runs here, what it reads keeps the nodes' states as fresh as it.
            cache.node_states = NodeStateOverlay()
            loop = asyncio.get_running_loop()

            def polled(nodes: list[Node], at: datetime, cache: SnapshotCache = cache) -> None:
                loop.call_soon_threadsafe(cache.node_states_seen, nodes, at)

            services.sensor.poll_observers.append(polled)
        if cache.shared is not None:
            await cache.shared_round()  # know this process's part before the first request
        if services.keeper is not None:
            # The snapshots kept by the last run: served (marked stale) while the first round
            # of each reads Slurm (the queue's parsing only the lines that changed since).
            await asyncio.to_thread(services.keeper.restore)
        # The first rounds of what every client asks for start now, not at the first request:
        # a fresh first answer comes that much sooner (100,000 jobs take seconds to read).
        for resource in LIVE_AT_START if "live" in services.parts else ():
            if resource in cache.resources:
                cache.kick(resource)


async def stop(services: Services) -> None:
    """Stop the periodic work, then close what :func:`start` and :func:`assemble` opened."""
    await services.stop_background()
    if services.metrics is not None:
        services.metrics.close()
    for each in services.every_cluster():
        await _close_cluster(each)


async def _close_cluster(services: Services) -> None:
    if services.catalogue is not None:
        services.catalogue.close()
    db = services.accounting
    if db is not None:
        await asyncio.to_thread(db.close)
    if services.accounting_pool is not None:
        services.accounting_pool.close()
        services.accounting_pool = None
    cache = services.snapshots
    if cache is not None:
        cache.close()
        for worker in (cache.worker, cache.state_worker):
            if worker is not None:
                await worker.close()
        cache.worker = cache.state_worker = None


@asynccontextmanager
async def running(services: Services) -> AsyncIterator[Services]:
    """``services`` started for the block and stopped after it (an app's lifespan: the API's
    and the sensor's)."""
    await start(services)
    try:
        yield services
    finally:
        await stop(services)
