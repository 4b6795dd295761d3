"""``/ui/partitions``: what an admin checks before a maintenance (the reservations' calendar
is :mod:`slurmtower.api.routes.ui_planning`'s).

Partitions come from the shared snapshots (no Slurm query of their own): each partition's
state, limits, nodes by state and CPUs allocated / idle / other / total as ``sinfo -o %C``
counts them. Hidden partitions are left out.
"""

from __future__ import annotations

from datetime import UTC
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from slurmtower.api.deps import ClusterDep
from slurmtower.api.routes.dashboard import overview
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard.jobs_view import duration_text
from slurmtower.dashboard.render import page_context, render
from slurmtower.runtime import Services

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]


def _page(services: Services, principal: Principal, template: str, active: str, **context: Any) -> HTMLResponse:
    return render(template, **page_context(principal, services, active), **context)


@router.get("/partitions", response_class=HTMLResponse)
async def partitions_page(services: ClusterDep, principal: Reader) -> HTMLResponse:
    """Every visible partition: state, default, limits, nodes by state, CPUs by state."""
    # the overview's rows of the same snapshots (made once per snapshot set, for both pages)
    view, (nodes_snap, _jobs, parts_snap) = await overview(services)
    fetched = min(nodes_snap.fetched_at, parts_snap.fetched_at).astimezone(UTC).strftime("%H:%M:%S UTC")
    return _page(services, principal, "partitions.html", "/ui/partitions", rows=view.partition_rows,
                 fetched_at=fetched, stale=nodes_snap.stale or parts_snap.stale, duration=duration_text)
