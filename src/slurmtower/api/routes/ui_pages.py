"""``/ui/partitions`` and ``/ui/reservations``: what an admin checks before a maintenance.

Partitions come from the shared snapshots (no Slurm query of their own): each partition's
state, limits, nodes by state and CPUs allocated / idle / other / total as ``sinfo -o %C``
counts them. Reservations are read from Slurm when the page is asked for (``scontrol show
reservation``: a few records, not refreshed in the background). Hidden partitions are left
out, and so are reservations confined to them.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from slurmtower.api.deps import ClusterDep
from slurmtower.api.routes.dashboard import overview
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard.jobs_view import duration_text
from slurmtower.dashboard.render import page_context, render
from slurmtower.models import Reservation
from slurmtower.nodeset import NodeSet
from slurmtower.runtime import Services
from slurmtower.visibility import Visibility

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


def _reservation_shown(resv: Reservation, policy: Visibility, hidden_nodes: frozenset[str]) -> bool:
    if resv.partition and not policy.shows_partition(resv.partition):
        return False
    if hidden_nodes and resv.nodes:
        return not set(NodeSet(resv.nodes)) <= hidden_nodes
    return True


@router.get("/reservations", response_class=HTMLResponse)
async def reservations_page(services: ClusterDep, principal: Reader) -> HTMLResponse:
    """Every reservation: active now or when it starts, its nodes, flags, who may use it."""
    policy = Visibility.from_settings(services.settings)
    found = await asyncio.to_thread(services.client.reservations)
    hidden = await services.live().hidden_nodes()
    now = datetime.now(UTC)
    shown = sorted((r for r in found if _reservation_shown(r, policy, hidden)),
                   key=lambda r: (r.start_time or now, r.name))
    rows = [{"resv": r, "active": r.is_active_at(now),
             "starts_in": duration_text(r.start_time - now) if r.start_time and r.start_time > now else "",
             "ends_in": duration_text(r.end_time - now) if r.end_time and r.end_time > now else "",
             "duration": duration_text(r.duration)} for r in shown]
    return _page(services, principal, "reservations.html", "/ui/reservations", rows=rows,
                 now=now.strftime("%Y-%m-%d %H:%M:%S UTC"))
