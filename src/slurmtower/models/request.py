"""Requests for acts a caller may ask for but not do, and the reservation calendar's records.

Pure pydantic, no I/O. A :class:`ActionRequest` is what ``POST /actions/{name}`` answers with
202 (and ``slurmtower run`` prints, exit code 6) when the approval policy says its caller may
*ask*; ``GET /requests`` lists them. :class:`CalendarEntry` is one reservation or pending
request on ``GET /reservations``' timeline.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DECIDED",
    "REQUEST_STATES",
    "ActionRequest",
    "Calendar",
    "CalendarEntry",
    "RequestPage",
    "RequestState",
    "RequestVia",
]

#: ``pending``: waiting for a decision; ``running``: approved, its action running now;
#: ``approved``: approved and run (its ``execution_id``); ``failed``: approved, the action ran and
#: failed; ``denied``, ``withdrawn`` (by its requester), ``expired`` (nobody decided in time).
RequestState = Literal["pending", "running", "approved", "failed", "denied", "withdrawn", "expired"]
REQUEST_STATES: tuple[str, ...] = ("pending", "running", "approved", "failed", "denied", "withdrawn", "expired")
#: The states a request never leaves.
DECIDED = frozenset({"approved", "failed", "denied", "withdrawn", "expired"})
#: The channel a request came through.
RequestVia = Literal["api", "cli", "rule", "mcp"]


class ActionRequest(BaseModel):
    """One request: an act asked for, waiting for (or past) a person's decision."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: int
    action: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The action's parameters, as validated (defaults filled in)."""
    requester: str
    requester_role: str | None = None
    """The requester's role where it asked (``None``: the CLI, or a rule)."""
    via: str
    """The channel it came through: ``api``, ``cli``, ``rule`` or ``mcp``."""
    reason: str | None = None
    """The requester's free-text reason."""
    plan: dict[str, Any] = Field(default_factory=dict)
    """What the action's dry run said when it was asked (``result``, ``stdout``,
    ``execution_id``): approving checks it again."""
    nodes: str | None = None
    """The nodes the act names (folded), when it names some."""
    partition: str | None = None
    why: str
    """Why it needs a decision: the policy's words."""
    approver_role: str
    """The least role of whoever decides (``operator`` or ``admin``); never the requester."""
    two_person: bool = False
    """A second person must approve an act its requester could otherwise do."""
    state: RequestState
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    decided_via: str | None = None
    comment: str | None = None
    """The decision's comment (or the withdrawal's)."""
    execution_id: str | None = None
    """The execution an approval ran (``GET /executions/{id}``)."""
    cluster: str | None = None
    """The cluster it is for (``None`` in a one-cluster deployment)."""


class RequestPage(BaseModel):
    """A page of ``GET /requests``, newest first."""

    requests: list[ActionRequest]
    next_before: int | None = None
    """Pass as ``before`` for the next (older) page."""
    pending: int = 0
    """How many of the caller's requests (all, for operators and admins) wait for a decision."""


class CalendarEntry(BaseModel):
    """One bar of the reservation calendar: a reservation Slurm holds, or a request for one."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    kind: Literal["reservation", "request"]
    name: str
    """The reservation's name (a request for a generated one: ``request <id>``)."""
    start_time: datetime | None = None
    end_time: datetime | None = None
    nodes: str | None = None
    node_count: int | None = None
    partition: str | None = None
    """The partition the reservation takes its nodes from, when it names one."""
    partitions: list[str] = Field(default_factory=list)
    """The (visible) partitions its nodes are in: the calendar's rows."""
    flags: list[str] = Field(default_factory=list)
    users: list[str] = Field(default_factory=list)
    accounts: list[str] = Field(default_factory=list)
    maintenance: bool = False
    active: bool = False
    owner: str | None = None
    """slurmtower's owner tag (``slurmtower:alice@api``) when slurmtower made or was asked for it."""
    approved_by: str | None = None
    request_id: int | None = None
    expires_at: datetime | None = None
    """A request's expiry."""


class Calendar(BaseModel):
    """``GET /reservations``: every reservation and maintenance window, and the pending
    requests for reservations, with the partitions and nodes they are drawn against."""

    now: datetime
    reservations: list[CalendarEntry]
    requests: list[CalendarEntry]
    partitions: dict[str, str] = Field(default_factory=dict)
    """Each visible partition's nodes (a folded node set)."""
