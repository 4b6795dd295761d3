"""The objects a running slurmtower shares between routes and background tasks.

Built once at start-up from the settings (never at import). Routes get them through
``Annotated[Services, Depends(get_services)]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from slurmtower.settings import Settings
from slurmtower.slurm import SlurmClient, make_client

__all__ = ["BackgroundTask", "Services", "get_services"]

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
    settings: Settings
    client: SlurmClient
    background: list[BackgroundTask] = field(default_factory=list)
    #: Optional parts, set by their modules' ``setup(services)`` hooks.
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> Services:
        from slurmtower.api.metrics_hook import slurm_call_observer

        services = cls(settings=settings, client=make_client(settings, observers=[slurm_call_observer]))
        # The client is the one these settings make (a refresh worker may build its twin).
        services.extras["client_from_settings"] = True
        return services


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services
