"""The reservation calendar: every reservation and maintenance window Slurm holds, and the
pending requests for reservations, over a time range (``GET /reservations``, ``/ui/reservations``).

Reservations come from Slurm when asked (``scontrol show reservation`` or slurmrestd: a few
records), each with slurmtower's owner where slurmtower made it or was asked for it
(:class:`~slurmtower.actions.request_store.ReservationOwners`; rows of reservations gone from
Slurm are dropped then). What a caller sees follows :mod:`slurmtower.visibility`: a
reservation of hidden partitions only (or hidden nodes only) is left out, the others lose
those names; a caller below operator sees its own requests only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from slurmtower.actions.reservations import spans
from slurmtower.models import Reservation
from slurmtower.models.request import ActionRequest, Calendar, CalendarEntry
from slurmtower.nodeset import NodeSet
from slurmtower.visibility import NOTHING_HIDDEN, Hidden, Visibility

if TYPE_CHECKING:
    from slurmtower.actions.catalogue import Catalogue

__all__ = ["RESERVATION_ACTIONS", "build_calendar"]

#: The requests drawn on the calendar.
RESERVATION_ACTIONS = ("slurm.reservation.create", "slurm.reservation.update")


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _parts(nodes: str | None, members: dict[str, set[str]]) -> list[str]:
    if not nodes:
        return []
    names = set(NodeSet(nodes))
    return sorted(p for p, inside in members.items() if names & inside)


def _reservation_entry(resv: Reservation, owner: dict[str, Any] | None, members: dict[str, set[str]],
                       hidden: Hidden, now: datetime) -> CalendarEntry | None:
    if resv.partition and resv.partition in hidden.partitions:
        return None
    nodes = resv.nodes
    if nodes and hidden:
        nodes = hidden.node_set(nodes)
        if nodes is None:
            return None
    return CalendarEntry(kind="reservation", name=resv.name, start_time=resv.start_time, end_time=resv.end_time,
                         nodes=nodes, node_count=resv.node_count, partition=resv.partition,
                         partitions=_parts(nodes, members), flags=resv.flags, users=resv.users,
                         accounts=resv.accounts, maintenance=resv.is_maintenance, active=resv.is_active_at(now),
                         owner=owner.get("owner") if owner else None,
                         approved_by=owner.get("approved_by") if owner else None,
                         request_id=owner.get("request_id") if owner else None)


def _request_entry(req: ActionRequest, members: dict[str, set[str]], hidden: Hidden) -> CalendarEntry | None:
    result = req.plan.get("result") if isinstance(req.plan.get("result"), dict) else {}
    assert isinstance(result, dict)
    nodes = result.get("nodes") or req.nodes
    if nodes and hidden:
        nodes = hidden.node_set(str(nodes))
        if nodes is None:
            return None
    partition = result.get("partition") or req.partition
    if partition and partition in hidden.partitions:
        return None
    flags = result.get("flags") or [*req.parameters.get("add_flags", [])]
    return CalendarEntry(kind="request", name=str(result.get("name") or f"request {req.id}"),
                         start_time=_parse(result.get("start_time")), end_time=_parse(result.get("end_time")),
                         nodes=str(nodes) if nodes else None, node_count=result.get("node_count"),
                         partition=partition, partitions=_parts(str(nodes) if nodes else None, members)
                         or ([partition] if partition else []), flags=list(flags),
                         users=list(result.get("users") or []), accounts=list(result.get("accounts") or []),
                         maintenance="MAINT" in flags, owner=f"slurmtower:{req.requester}@{req.via}",
                         request_id=req.id, expires_at=req.expires_at)


def build_calendar(catalogue: Catalogue, *, principal: str, role: str | None, start: datetime, end: datetime,
                   hidden: Hidden = NOTHING_HIDDEN) -> Calendar:
    """Every reservation with an occurrence in [``start``, ``end``) and the pending requests for
    reservations ``principal`` may see, with the visible partitions' nodes (the rows)."""
    client = catalogue.client
    policy = Visibility.from_settings(catalogue.settings) if catalogue.settings is not None else Visibility()
    now = datetime.now(start.tzinfo)
    members: dict[str, set[str]] = {}
    partitions: dict[str, str] = {}
    for part in client.partitions():
        if not policy.shows_partition(part.name) or part.name in hidden.partitions:
            continue
        shown = hidden.node_set(part.nodes) if part.nodes else None
        partitions[part.name] = shown or ""
        members[part.name] = set(NodeSet(shown)) if shown else set()
    found = client.reservations()
    from slurmtower.actions.request_store import ReservationOwners  # deferred: SQLAlchemy, first calendar only

    store = catalogue.store
    owners = ReservationOwners(store.engine, cluster=store.cluster)
    rows = owners.all()
    gone = set(rows) - {r.name for r in found}
    if gone:
        owners.forget(gone)
    entries = []
    for resv in sorted(found, key=lambda r: (r.start_time or now, r.name)):
        if resv.start_time is None:
            continue
        until = resv.end_time or resv.start_time + timedelta(days=3650)
        if not any(s < end and e > start for s, e in spans(resv.start_time, until, resv.flags, end)):
            continue
        entry = _reservation_entry(resv, rows.get(resv.name), members, hidden, now)
        if entry is not None:
            entries.append(entry)
    asked = []
    approvals = catalogue.approvals()
    for action in RESERVATION_ACTIONS:
        page = approvals.find(principal=principal, role=role, states=["pending"], action=action, limit=1000)
        for req in page.requests:
            entry = _request_entry(req, members, hidden)
            if entry is None or (entry.start_time is not None and entry.end_time is not None
                                 and not (entry.start_time < end and entry.end_time > start)):
                continue
            asked.append(entry)
    return Calendar(now=now, reservations=entries, requests=asked, partitions=partitions)
