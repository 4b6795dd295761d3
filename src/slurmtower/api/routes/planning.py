"""/requests and /reservations: requests for acts a caller may only ask for, and the calendar.

``POST /actions/{name}`` answers 202 with a request when the approval policy says its caller
may ask but not do (:mod:`slurmtower.actions.approvals`); here they are read, decided and
withdrawn. ``GET /reservations`` is the calendar's data: every reservation and maintenance
window over a range, with the pending requests for reservations. Requests and reservations
pass the visibility filter on their way out (hidden partitions and their nodes).
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from slurmtower.actions import Approvals, Envelope
from slurmtower.actions.planning import build_calendar
from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import MAX_ID, READ_PROBLEMS, problems
from slurmtower.api.query import checked
from slurmtower.api.security import Perm, Principal, require
from slurmtower.errors import InvalidInput, NotFound, PermissionDenied
from slurmtower.models.request import REQUEST_STATES, ActionRequest, Calendar, RequestPage
from slurmtower.runtime import Services

__all__ = ["Decided", "Decision", "router"]

router = APIRouter(tags=["requests"])
RequestId = Annotated[str, Path(max_length=40, description="The request's id (a positive integer).")]
#: The longest range ``GET /reservations`` draws.
MAX_RANGE = timedelta(days=400)


class Decision(BaseModel):
    """The body of an approval, a denial or a withdrawal."""

    comment: str | None = Field(default=None, max_length=10_000, description="Why (free text).")


class Decided(BaseModel):
    """An approved request and the execution its approval ran."""

    request: ActionRequest
    execution: Envelope


def _approvals(services: Services) -> Approvals:
    return services.action_catalogue().approvals()


def setup(services: Services, _app: FastAPI) -> None:
    """An ``[approvals]`` policy naming no action stops the start (a ConfigError naming its key),
    not the first request."""
    for each in services.every_cluster():
        each.action_catalogue().approvals()


def _id(text: str) -> int:
    """A request id from the path: anything but a positive integer names no request (404, as
    an unknown execution id does)."""
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_ID:
        raise NotFound(f"unknown request {text[:40]!r}", param="request_id")
    return int(text)


async def _asker(services: ClusterDep, principal: Annotated[Principal, require(Perm.READ)]) -> Principal:
    """A caller whose role may have requests (may ask for, or do, some act): others are
    refused before anything is read."""
    if not _approvals(services).policy.may_ask_anything(principal.role):
        raise PermissionDenied(f"{principal.name} ({principal.role}) makes no requests")
    return principal


Asker = Annotated[Principal, Depends(_asker)]


async def shown_request(services: Services, req: ActionRequest, principal: Principal) -> dict[str, Any]:
    """A request as ``principal`` sees it: no hidden node or partition but those it named itself."""
    hidden = await services.live().hiding()
    if req.requester == principal.name:
        hidden = hidden.but(req.nodes)
    shown: dict[str, Any] = hidden.scrub(req.model_dump(mode="json"))
    return shown


@router.get("/requests", response_model=RequestPage, responses=problems(400, *READ_PROBLEMS))
async def list_requests(
    services: ClusterDep,
    principal: Annotated[Principal, require(Perm.READ)],
    state: Annotated[list[str] | None, Query(description="Only requests in these states (repeatable): "
                                                         + ", ".join(REQUEST_STATES) + ".",
                                             json_schema_extra={"items": {"enum": list(REQUEST_STATES)}})] = None,
    requester: Annotated[str | None, Query(max_length=255, description="Only this requester's.")] = None,
    action: Annotated[str | None, Query(max_length=64, description="Only requests for this action.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many (1-1000).")] = 50,
    before: Annotated[int | None, Query(ge=0, le=MAX_ID, description="id of the last request seen (keyset).")] = None,
) -> JSONResponse:
    """Requests, newest first (below operator: the caller's own), and how many wait for a decision."""
    bad = [s for s in state or () if s not in REQUEST_STATES]
    if bad:
        raise InvalidInput(f"unknown request state {bad[0][:40]!r} (one of {', '.join(REQUEST_STATES)})",
                           param="state")
    page = await asyncio.to_thread(_approvals(services).find, principal=principal.name, role=principal.role,
                                   states=state or (), requester=requester, action=action, limit=limit,
                                   before=before)
    hidden = await services.live().hiding()
    shown = []
    for req in page.requests:
        item = (hidden.but(req.nodes) if req.requester == principal.name else hidden).item(req)
        if item is not None:
            shown.append(item.model_dump(mode="json"))
    return JSONResponse({"requests": shown, "next_before": page.next_before, "pending": page.pending})


@router.get("/requests/{request_id}", response_model=ActionRequest, responses=problems(*READ_PROBLEMS, 404))
async def get_request(request_id: RequestId, services: ClusterDep,
                      principal: Annotated[Principal, require(Perm.READ)]) -> JSONResponse:
    """One request (below operator: the caller's own)."""
    req = await asyncio.to_thread(_approvals(services).get, _id(request_id), principal=principal.name,
                                  role=principal.role)
    return JSONResponse(await shown_request(services, req, principal))


@router.post("/requests/{request_id}/approve", response_model=Decided,
             responses=problems(400, *READ_PROBLEMS, 404, 409, 503))
async def approve_request(request_id: RequestId, services: ClusterDep,
                          principal: Annotated[Principal, require(Perm.OPERATE)],
                          body: Annotated[Decision | None, Body()] = None) -> JSONResponse:
    """Approve a pending request (never one's own): its action runs now, as its requester."""
    req, env = await asyncio.to_thread(_approvals(services).approve, _id(request_id), principal=principal.name,
                                       role=principal.role, via="api", comment=body.comment if body else None)
    hidden = (await services.live().hiding()).but(req.nodes)
    return JSONResponse(hidden.scrub({"request": req.model_dump(mode="json"),
                                      "execution": env.model_dump(mode="json")}))


@router.post("/requests/{request_id}/deny", response_model=ActionRequest,
             responses=problems(400, *READ_PROBLEMS, 404, 409))
async def deny_request(request_id: RequestId, services: ClusterDep,
                       principal: Annotated[Principal, require(Perm.OPERATE)],
                       body: Annotated[Decision | None, Body()] = None) -> JSONResponse:
    """Deny a pending request: nothing runs."""
    req = await asyncio.to_thread(_approvals(services).deny, _id(request_id), principal=principal.name,
                                  role=principal.role, via="api", comment=body.comment if body else None)
    return JSONResponse(await shown_request(services, req, principal))


@router.post("/requests/{request_id}/withdraw", response_model=ActionRequest,
             responses=problems(400, *READ_PROBLEMS, 404, 409))
async def withdraw_request(request_id: RequestId, services: ClusterDep, principal: Asker,
                           body: Annotated[Decision | None, Body()] = None) -> JSONResponse:
    """Withdraw one's own pending request."""
    req = await asyncio.to_thread(_approvals(services).withdraw, _id(request_id), principal=principal.name,
                                  role=principal.role, via="api", comment=body.comment if body else None)
    return JSONResponse(await shown_request(services, req, principal))


@router.get("/reservations", response_model=Calendar, responses=problems(400, *READ_PROBLEMS, 503))
async def reservations(
    services: ClusterDep,
    principal: Annotated[Principal, require(Perm.READ)],
    start_text: Annotated[str | None, checked("From (RFC 3339, with its time zone; default: a day ago).",
                                              _INSTANT, max_length=64, alias="start")] = None,
    end_text: Annotated[str | None, checked("To (RFC 3339, with its time zone; default: two weeks on).",
                                            _INSTANT, max_length=64, alias="end")] = None,
) -> JSONResponse:
    """Every reservation and maintenance window over a range, and the pending requests for reservations."""
    now = datetime.now(UTC)
    start = _aware(start_text, "start") or now - timedelta(days=1)
    end = _aware(end_text, "end") or start + timedelta(days=15)
    if end <= start:
        raise InvalidInput("end is before start", param="end")
    if end - start > MAX_RANGE:
        raise InvalidInput(f"the range is longer than {MAX_RANGE.days} days", param="end")
    hidden = await services.live().hiding()
    calendar = await asyncio.to_thread(build_calendar, services.action_catalogue(), principal=principal.name,
                                       role=principal.role, start=start, end=end, hidden=hidden)
    return JSONResponse(calendar.model_dump(mode="json"))


#: A calendar's bound: an RFC 3339 time, its zone given (the calendar shows local times: a naive
#: one would be read in whichever zone the server has).
_INSTANT: dict[str, Any] = {"type": "string", "format": "date-time"}
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:[Zz]|[+-]\d\d:\d\d)")


def _aware(text: str | None, param: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is not None and value.tzinfo is None:
        raise InvalidInput(f"{param}: give the time zone (e.g. 2027-06-30T00:00:00Z)", param=param)
    if value is None or not _RFC3339.fullmatch(text):
        raise InvalidInput(f"{param} must be an RFC 3339 time (e.g. 2027-06-30T00:00:00Z), not {text[:40]!r}",
                           param=param)
    return value
