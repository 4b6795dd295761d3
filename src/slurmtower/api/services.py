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
    from slurmtower.actions import Catalogue
    from slurmtower.api.cache import SnapshotCache
    from slurmtower.api.routes.load import LoadArchive
    from slurmtower.api.routes.metrics import AppMetrics
    from slurmtower.events import EventStore
    from slurmtower.events.sensor import Sensor

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

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
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
    event_store: EventStore | None = None
    sensor: Sensor | None = None
    sensor_external: bool = False
    """The sensor runs elsewhere (``slurmtower sensor``): don't start it here."""
    load_archive: LoadArchive | None = None
    catalogue: Catalogue | None = None
    """The action catalogue: the API's and the rule engine's (one store, one accounting)."""
    authenticate_other: Callable[[str], Any] | None = None
    """A hook for other credentials (tests, plugins): ``hook(token)`` -> principal or None."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Services:
        from slurmtower.api.metrics_hook import slurm_call_observer

        return cls(settings=settings, client=make_client(settings, observers=[slurm_call_observer]),
                   client_from_settings=True)

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
