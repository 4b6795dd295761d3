"""The dashboard's page rendering, shared by every ``/ui`` route module: the Jinja2
environment (autoescaping on), the pages of the navigation bar, and what every page is told."""

from __future__ import annotations

from typing import Any, Protocol

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import HTMLResponse

from slurmtower import __version__
from slurmtower.principal import CSRF_HEADER, USER, Principal

__all__ = ["NAV", "env", "page_context", "render"]

#: The navigation bar: (path, label), in order.
NAV: tuple[tuple[str, str], ...] = (
    ("/ui", "Overview"),
    ("/ui/jobs", "Jobs"),
    ("/ui/nodes", "Nodes"),
    ("/ui/history", "History"),
    ("/ui/partitions", "Partitions"),
    ("/ui/reservations", "Reservations"),
    ("/ui/requests", "Requests"),
    ("/ui/reports", "Reports"),
    ("/ui/fairshare", "Fair share"),
)

env = Environment(loader=PackageLoader("slurmtower.dashboard", "templates"),
                  autoescape=select_autoescape(("html",), default=True), trim_blocks=True, lstrip_blocks=True)


def render(name: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Template ``name`` as a no-store HTML response; every page gets the version, the CSRF
    header and cookie names, and the navigation (``active``: the current page's path)."""
    html = env.get_template(name).render(version=__version__, csrf_header=CSRF_HEADER,
                                         nav=NAV, **context)
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


class ClusterPage(Protocol):
    """What a page knows of the cluster it is drawn for (the runtime's services of it)."""

    name: str

    def cluster_names(self) -> list[str]: ...


def page_context(principal: Principal, cluster: ClusterPage, active: str) -> dict[str, Any]:
    """What a page's header needs: who reads it, the cluster's name and the deployment's
    clusters (the switcher, when there are several; the default first), the current page's
    path, whether the reader may act (drain, resume ...) and act on jobs (operators, admins,
    and a ``user`` on its own: the API checks whose they are)."""
    clusters = cluster.cluster_names()
    return {"principal": principal, "cluster": cluster.name or clusters[0] or "slurm", "clusters": clusters,
            "active": active, "can_operate": principal.may_operate,
            "can_act_jobs": principal.may_operate or principal.role == USER}
