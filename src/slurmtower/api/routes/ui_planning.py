"""``/ui/reservations`` (the calendar) and ``/ui/requests``: planning reservations and deciding
requests on the dashboard.

The calendar draws every reservation and maintenance window over a range of days, a lane per
partition and per node it holds, the pending requests for reservations apart
(:func:`slurmtower.actions.planning.build_calendar`, the same data as ``GET /reservations``),
the reservations as a table below, and the form that creates one (or asks for one: a
``user``'s becomes a request): its "Check" is the action's dry run, whose conflicts are shown
before anything is submitted. ``/ui/requests`` lists requests (a caller below operator: its
own) with approve and deny for those who decide, withdraw for their requester; the API
decides again (:mod:`slurmtower.actions.approvals`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from slurmtower.actions import Catalogue
from slurmtower.actions.planning import build_calendar
from slurmtower.actions.reservations import RECURRING
from slurmtower.api.deps import ClusterDep
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard.calendar_view import calendar_lanes, day_ticks
from slurmtower.dashboard.jobs_view import duration_text
from slurmtower.dashboard.render import page_context, render
from slurmtower.errors import InvalidInput
from slurmtower.models.request import REQUEST_STATES
from slurmtower.runtime import Services

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]
#: The ranges the calendar offers, in days.
RANGES = (7, 14, 28)
#: The flags the form offers.
FORM_FLAGS = ("MAINT", "IGNORE_JOBS", "OVERLAP", "FLEX", *sorted(RECURRING))


def _page(services: Services, principal: Principal, template: str, active: str, **context: Any) -> HTMLResponse:
    return render(template, **page_context(principal, services, active), **context)


@router.get("/reservations", response_class=HTMLResponse)
async def reservations_page(
    services: ClusterDep, principal: Reader,
    start: Annotated[str | None, Query(max_length=10, description="First day, YYYY-MM-DD (default: today).")] = None,
    days: Annotated[int, Query(description="Days shown: 7, 14 or 28.")] = 14,
) -> HTMLResponse:
    """The calendar: every reservation and maintenance window over days and weeks, the pending
    requests apart, the create form."""
    if days not in RANGES:
        raise InvalidInput(f"days is one of {', '.join(map(str, RANGES))}", param="days")
    try:
        first = date.fromisoformat(start) if start else datetime.now().astimezone().date()
    except ValueError:
        raise InvalidInput(f"start {start!r} is not a day (YYYY-MM-DD)", param="start") from None
    begin = datetime.combine(first, time(), tzinfo=datetime.now().astimezone().tzinfo).astimezone(UTC)
    end = begin + timedelta(days=days)
    catalogue: Catalogue = services.action_catalogue()
    hidden = await services.live().hiding()
    calendar = await asyncio.to_thread(build_calendar, catalogue, principal=principal.name, role=principal.role,
                                       start=begin, end=end, hidden=hidden)
    now = datetime.now(UTC)
    rows = [{"resv": r, "active": r.active,
             "starts_in": duration_text(r.start_time - now) if r.start_time and r.start_time > now else "",
             "ends_in": duration_text(r.end_time - now) if r.end_time and r.end_time > now else "",
             "duration": duration_text(r.end_time - r.start_time) if r.start_time and r.end_time else ""}
            for r in calendar.reservations]
    policy = catalogue.approvals().policy
    spec = catalogue.spec("slurm.reservation.create")
    does = policy.may_do(spec, principal.role)
    asks = not does and policy.may_ask(spec, principal.role)
    return _page(services, principal, "reservations.html", "/ui/reservations", rows=rows,
                 lanes=calendar_lanes(calendar, begin, end), ticks=day_ticks(begin, end),
                 now_left=round((now - begin).total_seconds() / (end - begin).total_seconds() * 100, 3),
                 first=first.isoformat(), days=days, ranges=RANGES,
                 earlier=(first - timedelta(days=days)).isoformat(), later=(first + timedelta(days=days)).isoformat(),
                 partitions=sorted(calendar.partitions), flags=FORM_FLAGS, can_reserve=does or asks, asks=asks,
                 pending=len(calendar.requests), now=now.strftime("%Y-%m-%d %H:%M:%S UTC"))


@router.get("/requests", response_class=HTMLResponse)
async def requests_page(
    services: ClusterDep, principal: Reader,
    state: Annotated[str, Query(max_length=16, description="pending (default), all, or one state.")] = "pending",
) -> HTMLResponse:
    """Requests (below operator: the caller's own), with their decisions."""
    if state != "all" and state not in REQUEST_STATES:
        raise InvalidInput(f"state is all or one of {', '.join(REQUEST_STATES)}", param="state")
    approvals = services.action_catalogue().approvals()
    page = await asyncio.to_thread(approvals.find, principal=principal.name, role=principal.role,
                                   states=() if state == "all" else (state,), limit=200)
    hidden = await services.live().hiding()
    shown = [r for r in ((hidden.but(q.nodes) if q.requester == principal.name else hidden).item(q)
                         for q in page.requests) if r is not None]
    decides = policy_decides = approvals.policy.sees_all(principal.role)
    rows = [{"req": r,
             "can_decide": policy_decides and r.state == "pending" and r.requester != principal.name
             and approvals.policy.may_decide(principal.role, r.approver_role),
             "can_withdraw": r.state == "pending" and r.requester == principal.name} for r in shown]
    return _page(services, principal, "requests.html", "/ui/requests", rows=rows, state=state,
                 states=("pending", "all", *[s for s in REQUEST_STATES if s != "pending"]), pending=page.pending,
                 decides=decides)
