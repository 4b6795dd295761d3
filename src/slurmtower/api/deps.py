"""The runtime's :class:`~slurmtower.runtime.Services` as FastAPI dependencies.

:data:`ServicesDep` is the deployment's (the default cluster's services, which hold what every
cluster shares); :data:`ClusterDep` is the services of the cluster a request is for: the
``{cluster}`` of ``/clusters/{cluster}/...``, else ``?cluster=``, else the default cluster.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Request

from slurmtower.errors import InvalidInput
from slurmtower.runtime import Services
from slurmtower.settings import CLUSTER_NAME

__all__ = ["ClusterDep", "ServicesDep", "cluster_of", "get_cluster", "get_services", "services_of"]

_NAME = re.compile(CLUSTER_NAME)


def services_of(request: Request) -> Services:
    """The app's :class:`Services`."""
    services: Services = request.app.state.services
    return services


async def get_services(request: Request) -> Services:
    """The app's :class:`Services` (an async dependency: a sync one costs a thread hop)."""
    return services_of(request)


def cluster_of(request: Request) -> str | None:
    """The cluster a request names (path, then query), checked as a name; ``None``: none named.

    Raises :class:`InvalidInput` naming ``cluster`` for a malformed name, or the path and the
    query naming two clusters.
    """
    in_path = request.path_params.get("cluster")
    in_query = request.query_params.getlist("cluster")
    if len(in_query) > 1:
        raise InvalidInput("parameter 'cluster' given twice", param="cluster")
    if in_path is not None and in_query and in_query[0] != in_path:
        raise InvalidInput(f"the path is for cluster {in_path[:40]!r}, ?cluster= for {in_query[0][:40]!r}",
                           param="cluster")
    name = in_path if in_path is not None else (in_query[0] if in_query else None)
    if name is not None and not _NAME.match(name):
        raise InvalidInput(f"cluster {name[:40]!r} is not a cluster name (lower case letters, digits, '_', '-')",
                           param="cluster")
    return name


async def get_cluster(request: Request) -> Services:
    """The services of the cluster the request is for (:func:`cluster_of`).

    Raises :class:`~slurmtower.errors.NotFound` naming a cluster this deployment does not serve.
    """
    services = services_of(request)
    return services.cluster(cluster_of(request))


ServicesDep = Annotated[Services, Depends(get_services)]
ClusterDep = Annotated[Services, Depends(get_cluster)]
