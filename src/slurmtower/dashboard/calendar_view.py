"""The reservation calendar as the dashboard draws it: lanes (each partition, each node a
reservation touches, each pending request apart) of bars over a range of days, from the
library's :class:`~slurmtower.models.request.Calendar`. Pure layout: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slurmtower.actions.reservations import spans
from slurmtower.models.request import Calendar, CalendarEntry
from slurmtower.nodeset import NodeSet

__all__ = ["Bar", "Lane", "Tick", "calendar_lanes", "day_ticks"]


@dataclass(frozen=True)
class Bar:
    """One occurrence of a reservation (or a request) on a lane, in percent of the range."""

    name: str
    kind: str
    left: float
    width: float
    maintenance: bool
    active: bool
    title: str
    request_id: int | None = None


@dataclass
class Lane:
    """One row of the timeline."""

    label: str
    group: str
    """``partition``, ``node`` or ``request``."""
    bars: list[Bar] = field(default_factory=list)


@dataclass(frozen=True)
class Tick:
    label: str
    left: float


def _when(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M") if value is not None else "?"


def _title(entry: CalendarEntry) -> str:
    who = ", ".join([*entry.users, *entry.accounts]) or "-"
    parts = [f"{entry.name}: {_when(entry.start_time)} to {_when(entry.end_time)}",
             f"nodes {entry.nodes or (str(entry.node_count) + ' node(s)' if entry.node_count else '-')}",
             f"for {who}"]
    if entry.flags:
        parts.append("flags " + ",".join(entry.flags))
    if entry.owner:
        parts.append(f"owner {entry.owner}" + (f", approved by {entry.approved_by}" if entry.approved_by else ""))
    if entry.kind == "request":
        parts.append(f"request {entry.request_id}, pending, expires {_when(entry.expires_at)}")
    return "; ".join(parts)


def _bars(entry: CalendarEntry, start: datetime, end: datetime) -> list[Bar]:
    if entry.start_time is None:
        return []
    total = (end - start).total_seconds()
    until = entry.end_time or entry.start_time + timedelta(days=3650)
    out = []
    for s, e in spans(entry.start_time, until, entry.flags, end):
        if e <= start or s >= end:
            continue
        left = max(0.0, (s - start).total_seconds() / total * 100)
        right = min(100.0, (e - start).total_seconds() / total * 100)
        out.append(Bar(entry.name, entry.kind, round(left, 3), round(max(right - left, 0.3), 3), entry.maintenance,
                       entry.active, _title(entry), entry.request_id))
    return out


def calendar_lanes(calendar: Calendar, start: datetime, end: datetime) -> list[Lane]:
    """The partitions' lanes, then one per node some reservation holds in the range, then one
    per pending request (drawn apart)."""
    lanes: list[Lane] = []
    for name in sorted(calendar.partitions):
        lane = Lane(name, "partition")
        for entry in calendar.reservations:
            if name in entry.partitions or entry.partition == name:
                lane.bars += _bars(entry, start, end)
        lanes.append(lane)
    by_node: dict[str, list[Bar]] = {}
    for entry in calendar.reservations:
        if not entry.nodes:
            continue
        bars = _bars(entry, start, end)
        if bars:
            for node in NodeSet(entry.nodes):
                by_node.setdefault(node, []).extend(bars)
    if by_node:
        for node in NodeSet(sorted(by_node)):
            lanes.append(Lane(node, "node", by_node[node]))
    for entry in calendar.requests:
        label = f"#{entry.request_id} {entry.nodes or entry.partition or ''}".strip()
        lanes.append(Lane(label, "request", _bars(entry, start, end)))
    return lanes


def day_ticks(start: datetime, end: datetime) -> list[Tick]:
    """A tick at each local midnight in the range (at most 60: every few days beyond)."""
    total = (end - start).total_seconds()
    local = start.astimezone()
    day = local.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    days = max(1, int(total // 86400))
    step = 1 if days <= 31 else 7
    ticks: list[Tick] = []
    while day < end and len(ticks) < 60:
        ticks.append(Tick(day.strftime("%a %d %b"), round((day - start).total_seconds() / total * 100, 3)))
        day += timedelta(days=step)
    return ticks
