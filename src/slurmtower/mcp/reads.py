"""What an agent reads: the live queue, nodes, partitions, reservations, recent events, a
node's timeline and its own requests, as the API gives them to the same caller.

Each read takes the API's filters, checked by the same code (:mod:`slurmtower.live.filters`:
squeue's words, node sets, cursors), and answers one page with its counts (``count`` matching,
``returned`` in this page, ``next_cursor`` or ``next_before`` for the next), never more than
``mcp.max_page_size`` items: an agent's context is not flooded. What the caller sees is the
visibility policy's (:class:`~slurmtower.visibility.Visibility`): hidden partitions and their
nodes are already cut from the snapshots, records about them are scrubbed on the way out
(:class:`~slurmtower.visibility.Hidden`), other users' private job fields are left out for
readers. Library errors are raised (:class:`~slurmtower.errors.InvalidInput` naming the
argument, :class:`~slurmtower.errors.NotFound`); the agent endpoint translates them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from slurmtower.actions.planning import build_calendar
from slurmtower.dashboard.nodes_timeline import Timeline, build_timeline, describe_owner
from slurmtower.errors import ConfigError, InvalidInput, NotFound
from slurmtower.events.store import MAX_QUERY_LIMIT, EventStore
from slurmtower.live.cache import Snapshot
from slurmtower.live.filters import (
    NODE_STATE_WORDS,
    QueueFilter,
    decode_cursor,
    mapped,
    node_set,
    page,
    words,
)
from slurmtower.live.hidden import visible_partitions
from slurmtower.models import Node
from slurmtower.models.event import NODE_STATE, Event
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.principal import Principal
from slurmtower.runtime import Services
from slurmtower.settings import McpSettings
from slurmtower.visibility import Visibility

__all__ = [
    "READS",
    "EventsArgs",
    "NodesArgs",
    "PartitionsArgs",
    "QueueArgs",
    "RequestArgs",
    "RequestsArgs",
    "ReservationsArgs",
    "TimelineArgs",
    "page_limit",
]

#: The longest window of a node's timeline (days), as the node page's.
MAX_DAYS = 366
#: The most transitions and outages a timeline answer lists (the newest; the counts say how many).
TIMELINE_ITEMS = 50
#: The longest range of the reservations read, as ``GET /reservations``'.
MAX_RANGE = timedelta(days=400)

_Names = Field(default=None, max_length=400, description="Comma-separated names (any matches).")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str | None = Field(default=None, max_length=40, description=(
        "Which cluster (default: the deployment's default cluster)."))


class _Paged(_Args):
    limit: int | None = Field(default=None, ge=1, le=100_000, description=(
        "At most this many items (default: mcp.page_size; never more than mcp.max_page_size)."))


class QueueArgs(_Paged):
    """squeue's filters, as ``GET /queue`` takes them."""

    user: str | None = _Names
    account: str | None = _Names
    partition: str | None = _Names
    state: str | None = Field(default=None, max_length=400,
                              description="Job states (PENDING, RUNNING ... or squeue's PD, R ...), comma-separated.")
    name: str | None = Field(default=None, max_length=400,
                             description="Job names, comma-separated.")
    nodes: str | None = Field(default=None, max_length=4000, description="A node set (n[1-4]): jobs on these nodes.")
    cursor: str | None = Field(default=None, max_length=20,
                               description="next_cursor of the previous page: the job id the page starts after.")


class NodesArgs(_Paged):
    """``GET /nodes``' filters."""

    state: str | None = Field(default=None, max_length=400,
                              description="Base states or flags (idle, down, drain, not_responding ...), "
                                          "comma-separated: any matches.")
    partition: str | None = _Names
    nodes: str | None = Field(default=None, max_length=4000, description="A node set (n[1-4]).")
    cursor: str | None = Field(default=None, max_length=200,
                               description="next_cursor of the previous page: the node name the page starts after.")


class PartitionsArgs(_Paged):
    cursor: str | None = Field(default=None, max_length=200, description=(
        "next_cursor of the previous page: the partition name the page starts after."))


class ReservationsArgs(_Paged):
    """``GET /reservations``' range."""

    start: datetime | None = Field(default=None, description="From (ISO 8601 with a time zone; default: a day ago).")
    end: datetime | None = Field(default=None, description="To (ISO 8601 with a time zone; default: two weeks on).")


class EventsArgs(_Paged):
    """``GET /events``' filters. Without ``since`` the newest events come first (page on with
    ``before``); with ``since`` the events after it, oldest first, as ``/events`` gives them."""

    since: int | None = Field(default=None, ge=0, description="Only events with a larger id (oldest first).")
    before: int | None = Field(default=None, ge=0, description="Only events with a smaller id (newest first): "
                                                               "next_before of the previous page.")
    type: list[str] | None = Field(default=None, max_length=50, description="Event types (exact names), e.g. "
                                                                             "slurm.node.state.")
    node: str | None = Field(default=None, max_length=255, description="Only events about this node.")
    start: datetime | None = Field(default=None, description="Only events at or after (ISO 8601 with a time zone).")
    end: datetime | None = Field(default=None, description="Only events before (ISO 8601 with a time zone).")


class TimelineArgs(_Args):
    node: str = Field(min_length=1, max_length=255, description="The node's name.")
    days: int = Field(default=7, ge=1, le=MAX_DAYS, description=f"The window in days (1-{MAX_DAYS}).")


class RequestArgs(_Args):
    request_id: int = Field(ge=1, description="The request's id (what an act became: its request_id).")


class RequestsArgs(_Paged):
    state: list[Literal["pending", "running", "approved", "failed", "denied", "withdrawn", "expired"]] | None = \
        Field(default=None, description="Only requests in these states.")
    before: int | None = Field(default=None, ge=0, description="next_before of the previous page.")


def page_limit(settings: McpSettings, limit: int | None) -> int:
    """The page size of a read: the agent's ``limit`` cut to ``mcp.max_page_size``, else
    ``mcp.page_size``."""
    return min(limit or settings.page_size, settings.max_page_size)


def _meta(snap: Snapshot[Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"fetched_at": snap.fetched_at.isoformat(), "stale": snap.stale}
    if snap.stale:
        meta["stale_reason"] = snap.error
    return meta


def _given(args: BaseModel, names: Sequence[str]) -> dict[str, str]:
    return {n: str(v) for n in names if (v := getattr(args, n)) is not None}


async def queue(services: Services, principal: Principal, args: QueueArgs, settings: McpSettings) -> dict[str, Any]:
    """One page of the queue (``GET /queue`` with its filters and ``limit``)."""
    params = _given(args, ("user", "account", "partition", "state", "name", "nodes", "cursor"))
    params["limit"] = str(page_limit(settings, args.limit))
    wanted = QueueFilter.from_params(params)
    decode_cursor(params, "j")  # bad paging is refused before Slurm is asked
    snap = await services.live().jobs()
    table: JobTable = snap.value
    policy = Visibility.from_settings(services.settings)

    def build() -> bytes:
        rows = wanted.rows(table)
        if policy.sees_all_private(principal):
            return page(table, rows, params, "j", "jobs")
        owner = principal.name if policy.owns_jobs(table, principal) else None
        # The private-free table has the same rows in the same order.
        return page(policy.private_free_table(table, owner), rows, params, "j", "jobs")

    return {**_meta(snap), **json.loads(await asyncio.to_thread(build))}


async def nodes(services: Services, _principal: Principal, args: NodesArgs, settings: McpSettings) -> dict[str, Any]:
    """One page of the nodes (``GET /nodes`` with its filters and ``limit``)."""
    params = _given(args, ("state", "partition", "nodes", "cursor"))
    params["limit"] = str(page_limit(settings, args.limit))
    states = mapped(params, "state", NODE_STATE_WORDS)
    parts = words(params, "partition")
    wanted = node_set(params)
    decode_cursor(params, "n")
    snap = await services.live().nodes()
    table: NodeTable = snap.value

    def build() -> bytes:
        rows = table.select(state=states, partition=set(parts) if parts is not None else None)
        if wanted is not None:
            named = set(table.rows_of(wanted))
            rows = [r for r in rows if r in named]
        return page(table, rows, params, "n", "nodes")

    return {**_meta(snap), **json.loads(await asyncio.to_thread(build))}


async def partitions(services: Services, _principal: Principal, args: PartitionsArgs,
                     settings: McpSettings) -> dict[str, Any]:
    """The visible partitions with their nodes and limits, by name, one page."""
    live = services.live()
    snap = await live.partitions()
    shown = sorted(visible_partitions(snap.value, live.hidden), key=lambda p: p.name)
    size = page_limit(settings, args.limit)
    start = 0 if args.cursor is None else next((i for i, p in enumerate(shown) if p.name > args.cursor), len(shown))
    chosen = shown[start:start + size]
    more = start + size < len(shown)
    return {**_meta(snap), "count": len(shown), "returned": len(chosen),
            "next_cursor": chosen[-1].name if more and chosen else None,
            "partitions": [p.model_dump(mode="json") for p in chosen]}


def _aware(value: datetime | None, param: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise InvalidInput(f"{param}: give the time zone (e.g. 2027-06-30T00:00:00Z)", param=param)
    return value


async def reservations(services: Services, principal: Principal, args: ReservationsArgs,
                       settings: McpSettings) -> dict[str, Any]:
    """The reservations and maintenance windows over a range and the pending requests for
    reservations (``GET /reservations``), each list cut to one page with its count."""
    now = datetime.now(UTC)
    start = _aware(args.start, "start") or now - timedelta(days=1)
    end = _aware(args.end, "end") or start + timedelta(days=15)
    if end <= start:
        raise InvalidInput("end is before start", param="end")
    if end - start > MAX_RANGE:
        raise InvalidInput(f"the range is longer than {MAX_RANGE.days} days", param="end")
    hidden = await services.live().hiding()
    calendar = await asyncio.to_thread(build_calendar, services.action_catalogue(), principal=principal.name,
                                       role=principal.role, start=start, end=end, hidden=hidden)
    size = page_limit(settings, args.limit)
    body = calendar.model_dump(mode="json")
    out: dict[str, Any] = {"now": body["now"], "start": start.isoformat(), "end": end.isoformat()}
    for key in ("reservations", "requests"):
        items = body[key]
        out[f"{key}_count"] = len(items)
        out[key] = items[:size]
    out["partitions"] = body["partitions"]
    return out


def _store(services: Services) -> EventStore:
    store = services.event_store or (services.parent.event_store if services.parent is not None else None)
    if store is None:
        raise ConfigError("the event store is not configured")
    return store


async def events(services: Services, _principal: Principal, args: EventsArgs, settings: McpSettings) -> dict[str, Any]:
    """One page of events (``GET /events``' filters; every cluster's unless ``cluster``), as
    every caller sees them (records about hidden nodes or partitions only are left out).
    ``services``: the deployment's (the default cluster's)."""
    name = args.cluster
    start, end = _aware(args.start, "start"), _aware(args.end, "end")
    if args.since is not None and args.before is not None:
        raise InvalidInput("give since or before, not both", param="before")
    types = [t.strip() for t in args.type or () if t.strip()] or None
    if types is not None and any(len(t) > 200 for t in types):
        raise InvalidInput("event type too long", param="type")
    size = page_limit(settings, args.limit)
    clusters = [services.cluster(name)] if name is not None else services.every_cluster()
    hidden = {each.name_or_default(): await each.live().hiding() for each in clusters}
    default = services.name_or_default()
    newest_first = args.since is None
    found: list[Event] = []
    if start is None or end is None or start < end:
        found = await asyncio.to_thread(_store(services).query, since_id=args.since, before_id=args.before,
                                        types=types, node=args.node, start=start, end=end, limit=size,
                                        descending=newest_first, cluster=name)
    shown = []
    for ev in found:
        view = hidden.get(ev.cluster or default)
        seen = ev if view is None else view.event(ev)
        if seen is not None:
            shown.append(seen.model_dump(mode="json"))
    last = found[-1].id if len(found) == size and found else None
    return {"order": "newest first" if newest_first else "oldest first", "returned": len(shown),
            "next_before": last if newest_first else None, "next_since": None if newest_first else last,
            "events": shown}


def _node_events(store: EventStore, name: str, start: datetime, end: datetime) -> tuple[list[Event], Event | None,
                                                                                         bool]:
    """The node's transitions in the window (the newest the store gives at most), the last one
    before it, and whether the window held more: what the node page reads."""
    found = store.query(types=[NODE_STATE], node=name, start=start, end=end, limit=MAX_QUERY_LIMIT, own=True,
                        descending=True)
    truncated = len(found) >= MAX_QUERY_LIMIT
    before = None
    if not truncated:
        earlier = store.query(types=[NODE_STATE], node=name, end=start, limit=1, descending=True, own=True)
        before = earlier[0] if earlier else None
    found.reverse()
    return found, before, truncated


def _timeline_body(node: Node, timeline: Timeline) -> dict[str, Any]:
    transitions = timeline.transitions[-TIMELINE_ITEMS:]
    outages = timeline.outages[-TIMELINE_ITEMS:]
    return {
        "node": node.name, "state": node.state_text, "reason": node.reason,
        "start": timeline.start.isoformat(), "end": timeline.end.isoformat(),
        "seconds": {k: round(v, 3) for k, v in timeline.seconds.items()},
        "drained_seconds": round(timeline.drained_seconds, 3), "down_seconds": round(timeline.down_seconds, 3),
        "unrecorded_seconds": round(timeline.unrecorded_seconds, 3),
        "mean_repair_seconds": timeline.mean_repair_seconds, "max_repair_seconds": timeline.max_repair_seconds,
        "truncated": timeline.truncated,
        "transitions_count": len(timeline.transitions),
        "transitions": [{"time": t.time.isoformat(), "condition": t.condition, "change": t.change,
                         "previous_condition": t.previous_condition, "reason": t.reason,
                         "owner": describe_owner(t.owner) if t.owner else None, "event_id": t.event_id}
                        for t in transitions],
        "outages_count": len(timeline.outages),
        "outages": [{"start": o.start.isoformat(), "end": o.end.isoformat() if o.end else None,
                     "seconds": round(o.seconds, 3), "ongoing": o.ongoing, "condition": o.first_condition,
                     "reason": o.reason, "owner": describe_owner(o.owner) if o.owner else None}
                    for o in outages],
    }


async def timeline(services: Services, _principal: Principal, args: TimelineArgs,
                   _settings: McpSettings) -> dict[str, Any]:
    """A node's state changes over the last ``days``: time in each condition, outages and
    their time to repair, the newest transitions (as ``/ui/nodes/{name}`` draws them)."""
    live = services.live()
    snap = await live.nodes()
    hidden = await live.hiding()
    table: NodeTable = snap.value
    rows = table.rows_of([args.node])
    node = Node.model_validate_json(table.fragments[rows[0]]) if rows else None
    node = Visibility.from_settings(services.settings).node(node) if node is not None else None
    if node is None or args.node in hidden.nodes:
        raise NotFound(f"there is no node named {args.node[:60]!r} in this cluster (or it is not shown to you)",
                       param="node")
    now = datetime.now(UTC)
    start = now - timedelta(days=args.days)
    store = _store(services).scoped(services.settings.cluster_key())
    found, before, truncated = await asyncio.to_thread(_node_events, store, node.name, start, now)
    body = _timeline_body(node, build_timeline(found, start=start, end=now, before=before, truncated=truncated))
    shown: dict[str, Any] = hidden.scrub(body)
    return {**_meta(snap), **shown}


async def request(services: Services, principal: Principal, args: RequestArgs,
                  _settings: McpSettings) -> dict[str, Any]:
    """One request (below operator: the caller's own), as the caller sees it."""
    approvals = services.action_catalogue().approvals()
    req = await asyncio.to_thread(approvals.get, args.request_id, principal=principal.name, role=principal.role)
    hidden = await services.live().hiding()
    if req.requester == principal.name:
        hidden = hidden.but(req.nodes)
    shown: dict[str, Any] = hidden.scrub(req.model_dump(mode="json"))
    return shown


async def requests(services: Services, principal: Principal, args: RequestsArgs,
                   settings: McpSettings) -> dict[str, Any]:
    """Requests newest first (below operator: the caller's own) and how many wait."""
    approvals = services.action_catalogue().approvals()
    found = await asyncio.to_thread(approvals.find, principal=principal.name, role=principal.role,
                                    states=list(args.state or ()), limit=page_limit(settings, args.limit),
                                    before=args.before)
    hidden = await services.live().hiding()
    shown = []
    for req in found.requests:
        item = (hidden.but(req.nodes) if req.requester == principal.name else hidden).item(req)
        if item is not None:
            shown.append(item.model_dump(mode="json"))
    return {"pending": found.pending, "returned": len(shown), "next_before": found.next_before, "requests": shown}


#: Each read tool: its arguments, what it does, and the function reading it for one cluster's
#: services (``slurmtower.events`` is given the deployment's: without ``cluster``, every
#: cluster's events, as ``GET /events``).
READS: dict[str, tuple[type[_Args], str, Any]] = {
    "slurmtower.queue": (QueueArgs, "The live job queue, one page: squeue's filters (user, account, partition, "
                                    "state, name, nodes), count, next_cursor.", queue),
    "slurmtower.nodes": (NodesArgs, "The live nodes with states, flags, reasons, CPUs and memory, one page: "
                                    "filters state, partition, nodes; count, next_cursor.", nodes),
    "slurmtower.partitions": (PartitionsArgs, "The partitions with their nodes, states and limits, one page.",
                              partitions),
    "slurmtower.reservations": (ReservationsArgs, "Reservations and maintenance windows over a range, and the "
                                                  "pending requests for reservations.", reservations),
    "slurmtower.events": (EventsArgs, "Recent events (node state changes, alerts, actions, requests), newest "
                                      "first, one page: filters type, node, start, end, since, before.", events),
    "slurmtower.node_timeline": (TimelineArgs, "A node's state changes over the last days: time drained and down, "
                                               "outages and time to repair, the newest transitions.", timeline),
    "slurmtower.request": (RequestArgs, "One request for an act (what a confirmed act became): its state, "
                                        "who decided, the execution it ran.", request),
    "slurmtower.requests": (RequestsArgs, "Requests for acts, newest first (yours, below operator), and how "
                                          "many wait for a decision.", requests),
}
