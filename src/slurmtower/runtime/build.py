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

from slurmtower.accounting import AccountingDB
from slurmtower.events.feed import EventFeed
from slurmtower.events.store import EventStore
from slurmtower.live import malloc
from slurmtower.live.archive import LoadArchive
from slurmtower.live.keep import SnapshotKeeper
from slurmtower.live.worker import RefreshWorker
from slurmtower.runtime.sensor import LazyDispatcher, build_sensor
from slurmtower.runtime.services import Services
from slurmtower.runtime.tasks import periodic_tasks
from slurmtower.settings import Settings
from slurmtower.slurm.observe import slurm_call_observer

__all__ = ["PARTS", "assemble", "build_services", "running", "start", "stop"]

#: What a process can run: the live snapshots (and their refresh worker), job history
#: (slurmdbd's database), the load archive, the event log with the sensor and its rules,
#: the event store alone (alert hooks), the action catalogue (and its periodic work).
PARTS = frozenset({"live", "accounting", "archive", "events", "event-store", "actions"})


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
                                             interval=settings.api.keep_snapshots_interval)
    if "accounting" in parts and services.accounting is None and settings.accounting.url is not None \
            and (settings.accounting.cluster or settings.cluster_name):
        # Building the engine does not connect; a missing cluster name is resolved on first use.
        services.accounting = AccountingDB.from_settings(settings)
    if ("events" in parts or "event-store" in parts) and services.event_store is None:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        services.event_store = EventStore(settings.effective_store_url())
    if "events" in parts and services.event_store is not None:
        if services.sensor is None:
            # Rules act through the process's one catalogue (its store, its accounting reader),
            # built lazily: a sensor without rules never builds it.
            dispatcher = LazyDispatcher(services) if settings.events.rules_dir is not None else None
            services.sensor = build_sensor(settings, services.client, services.event_store, dispatcher=dispatcher)
        services.sensor.leading = lambda: services.leads("sensor")
        if services.event_feed is None:
            services.event_feed = EventFeed(services.event_store)
    if "actions" in parts:
        services.action_catalogue()
    if "archive" in parts and services.load_archive is None:
        services.load_archive = LoadArchive(engine=services.store_engine())
    known = {task.name for task in services.background}
    services.background.extend(t for t in periodic_tasks(services, parts) if t.name not in known)
    return services


async def start(services: Services) -> None:
    """Start the refresh worker (when configured), join the shared snapshot, and start the
    periodic work (elections included)."""
    settings = services.settings
    cache = services.snapshots
    if cache is not None:
        malloc.tune()  # before the rounds' threads make their arenas
        # Only when the client is the one the settings make: the worker builds its own twin.
        if settings.api.refresh_in_subprocess and services.client_from_settings and cache.worker is None:
            worker = RefreshWorker(settings, report=slurm_call_observer,
                                   timeout=max(60.0, 2 * settings.slurm.command_timeout))
            worker.start()
            cache.worker = worker
        if cache.shared is not None:
            await cache.shared_round()  # know this process's part before the first request
        if services.keeper is not None:
            # The snapshots kept by the last run: served (marked stale) while the first round
            # of each, started now, reads Slurm.
            for resource in await asyncio.to_thread(services.keeper.restore):
                cache.kick(resource)
    await services.start_background()


async def stop(services: Services) -> None:
    """Stop the periodic work, then close what :func:`start` and :func:`assemble` opened."""
    await services.stop_background()
    if services.metrics is not None:
        services.metrics.close()
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
        worker, cache.worker = cache.worker, None
        if worker is not None:
            await worker.close()


@asynccontextmanager
async def running(services: Services) -> AsyncIterator[Services]:
    """``services`` started for the block and stopped after it (an app's lifespan: the API's
    and the sensor's)."""
    await start(services)
    try:
        yield services
    finally:
        await stop(services)
