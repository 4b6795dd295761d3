"""/clusters: the clusters this deployment serves, and each one's readiness.

Every live, history, report and action route is also served under ``/clusters/{cluster}``
(:data:`slurmtower.api.app.CLUSTER_ROUTE_MODULES`), and takes ``?cluster=`` on its own path;
without either it answers for the default cluster.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from slurmtower.api.deps import ClusterDep, ServicesDep, services_of
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.security import Perm, authenticate, require
from slurmtower.errors import AuthenticationError, NotFound
from slurmtower.principal import ANONYMOUS
from slurmtower.runtime import Services
from slurmtower.settings import CLUSTER_NAME

__all__ = ["ClusterInfo", "ClustersResponse", "cluster_path", "router"]

log = logging.getLogger(__name__)
router = APIRouter(tags=["clusters"])

#: How long ``/clusters`` waits for one cluster's release (its Slurm asked once, then kept).
RELEASE_WAIT = 3.0


async def cluster_path(request: Request, cluster: Annotated[str, Path(
        description="The cluster's name, as `GET /clusters` lists it.", pattern=CLUSTER_NAME)]) -> str:
    """The ``{cluster}`` of ``/clusters/{cluster}/...``: documented, checked as a name and as a
    cluster this deployment serves (404 naming it), before any route of it runs. A caller who
    could not read the route learns nothing of which clusters exist: 401 first."""
    services = services_of(request)
    try:
        services.cluster(cluster)
    except NotFound:
        principal = await authenticate(request)  # a bad credential is a 401, whatever the path
        if principal is ANONYMOUS and not services.settings.auth.anonymous_read:
            raise AuthenticationError("authentication required") from None
        raise
    return cluster


class ClusterInfo(BaseModel):
    name: str
    label: str | None = None
    default: bool
    release: str | None
    """The Slurm release slurmctld runs (``None``: not known yet, the cluster did not answer)."""
    ready: bool
    """slurmctld answers (and the accounting database, when configured): ``/clusters/{name}/ready``."""
    backend: str
    accounting: bool
    """Job history and reports are configured (``accounting.url``)."""
    sensor: bool
    """Node events are sensed on this cluster."""


class ClustersResponse(BaseModel):
    count: int
    default: str
    clusters: list[ClusterInfo]


async def _release(services: Services) -> str | None:
    try:
        version = await asyncio.wait_for(asyncio.to_thread(services.client.version), RELEASE_WAIT)
    except Exception as exc:  # noqa: BLE001 - a cluster that does not answer is listed, not an error
        log.info("cluster %s: release not known: %s", services.name_or_default(), exc)
        return None
    return str(version)


async def _info(services: Services, default: str) -> ClusterInfo:
    settings = services.settings
    entry = settings.cluster_entry()
    checks, release = await asyncio.gather(services.ready_checks(), _release(services))
    return ClusterInfo(
        name=services.name_or_default(), label=entry.label if entry is not None else None,
        default=services.name_or_default() == default, release=release, ready=all(checks.values()),
        backend=settings.slurm.backend, accounting=settings.accounting.url is not None,
        sensor=services.sensor is not None and settings.events.sensor_enabled)


@router.get("/clusters", dependencies=[require(Perm.READ)], response_model=ClustersResponse,
            responses=problems(*READ_PROBLEMS))
async def clusters(services: ServicesDep) -> ClustersResponse:
    """The clusters this deployment serves, the default first: each one's release, readiness
    and what is configured for it. A cluster that does not answer is listed with
    ``ready: false`` (each is asked within a few seconds, all at once)."""
    default = services.name_or_default()
    infos = await asyncio.gather(*(_info(each, default) for each in services.every_cluster()))
    return ClustersResponse(count=len(infos), default=default, clusters=list(infos))


@router.get("/clusters/{cluster}", dependencies=[require(Perm.READ), Depends(cluster_path)],
            response_model=ClusterInfo, responses=problems(404, *READ_PROBLEMS))
async def cluster(services: ClusterDep) -> ClusterInfo:
    """One cluster, as ``GET /clusters`` lists it (404 naming a cluster not served)."""
    return await _info(services, services.cluster_names()[0])


@router.get("/clusters/{cluster}/ready", dependencies=[require(Perm.PUBLIC), Depends(cluster_path)],
            responses=problems(404, *READ_PROBLEMS))  # an unknown cluster: 401 for a caller who is not known
async def cluster_ready(services: ClusterDep) -> JSONResponse:
    """Readiness of one cluster: its slurmctld (and accounting database) answer, checked at
    most every 5 s; 503 when not (the process's ``/ready`` stays the default cluster's)."""
    checks = await services.ready_checks()
    ok = all(checks.values())
    body: dict[str, Any] = {"cluster": services.name_or_default(), "ready": ok, **checks}
    if services.snapshots is not None:
        body["restored"] = services.snapshots.restored()
    return JSONResponse(body, status_code=200 if ok else 503)
