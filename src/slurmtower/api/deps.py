"""The runtime's :class:`~slurmtower.runtime.Services` as a FastAPI dependency."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from slurmtower.runtime import Services

__all__ = ["ServicesDep", "get_services", "services_of"]


def services_of(request: Request) -> Services:
    """The app's :class:`Services`."""
    services: Services = request.app.state.services
    return services


async def get_services(request: Request) -> Services:
    """The app's :class:`Services` (an async dependency: a sync one costs a thread hop)."""
    return services_of(request)


ServicesDep = Annotated[Services, Depends(get_services)]
