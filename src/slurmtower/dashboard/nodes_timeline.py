"""A node's history of state changes as ``/ui/nodes/{name}`` shows it: segments and durations.

Pure functions over ``slurm.node.state`` events (no I/O): the route reads the events of one
node from the event store and hands them here.

The rules (also in the page's own text):

* A **segment** runs from one transition to the next; the last one is still going at the
  window's end ("now"). The state at the window's start is the one the last transition
  before the window left (then the first segment starts at the window's start); without
  such a transition the time before the first one in the window is *not recorded*.
* Each segment has a **condition**, the overview map's colour:
  ``down`` (base state DOWN, or NOT_RESPONDING), ``draining`` / ``drained`` (DRAIN or
  FAIL set, with / without jobs), ``idle`` / ``mixed`` / ``allocated`` (in service), or
  ``unknown`` (any other base state, or the node was not in Slurm's configuration).
* **Time drained** adds up draining and drained segments, **time down** down segments,
  both clipped to the window.
* An **outage** starts when the node enters down, draining or drained from any other
  condition and ends when it is next idle, mixed or allocated (unknown segments in between
  do not end it: a rebooting node is not back yet). Its length is the **time to repair**.
  An outage that began before the window is measured from the transition that began it when
  that one is known (the last transition before the window): its time to repair is then "at
  least" that long. One still going at the window's end is reported as ongoing, not counted
  in the mean.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slurmtower.actions.ownership import parse_reason
from slurmtower.models.event import NODE_STATE, Event
from slurmtower.models.node import state_text as node_state_text

__all__ = [
    "CONDITIONS",
    "Outage",
    "Segment",
    "Timeline",
    "Transition",
    "build_timeline",
    "condition",
    "describe_owner",
    "human_duration",
    "state_text",
    "transition_of",
]

#: Every condition, in the map's legend order.
CONDITIONS = ("idle", "mixed", "allocated", "draining", "drained", "down", "unknown")
IN_SERVICE = frozenset({"idle", "mixed", "allocated"})
OUT_OF_SERVICE = frozenset({"draining", "drained", "down"})

def condition(state: str | None, flags: Iterable[str]) -> str:
    """The map colour of a base state and flags (``None``: not in Slurm -> ``unknown``);
    :func:`slurmtower.dashboard.data.node_view` colours the map with it."""
    flags = frozenset(flags)
    if state is None:
        return "unknown"
    if state == "DOWN" or "NOT_RESPONDING" in flags:
        return "down"
    if "DRAIN" in flags or "FAIL" in flags:
        busy = state in ("ALLOCATED", "MIXED") or "COMPLETING" in flags
        return "draining" if busy else "drained"
    if state in ("IDLE", "MIXED", "ALLOCATED"):
        return state.lower()
    return "unknown"


def state_text(state: str | None, flags: Iterable[str]) -> str:
    """``IDLE+DRAIN`` as scontrol prints it; ``not in Slurm`` for a node that left the
    configuration."""
    if state is None:
        return "not in Slurm"
    return node_state_text(state, flags)


def _owner(reason: str | None, recorded_owner: str | None) -> tuple[str | None, str | None]:
    """(reason text without slurmtower's tag, who holds it): the tag's holder, else the owner
    the sensor recorded (``reason_owner``: already ``user:<name>`` for an outside drain)."""

    if not reason:
        return None, None
    text, tag = parse_reason(reason)
    if tag is not None:
        return text, tag.holder
    if not recorded_owner:
        return text, "unknown"
    # The sensor records "user:<name>" (older events, or a sensor without the parser, the
    # bare Slurm user name).
    return text, recorded_owner if ":" in recorded_owner else f"user:{recorded_owner}"


@dataclass(frozen=True)
class Transition:
    """One ``slurm.node.state`` event as the timeline reads it."""

    time: datetime
    state: str | None
    flags: frozenset[str]
    previous_state: str | None
    previous_flags: frozenset[str]
    reason: str | None
    """Without slurmtower's owner tag."""
    owner: str | None
    """``slurmtower:otto@api``, ``user:root``, ``unknown`` or ``None`` (no reason)."""
    change: str
    source: str
    event_id: int | None = None

    @property
    def condition(self) -> str:
        return condition(self.state, self.flags)

    @property
    def previous_condition(self) -> str | None:
        if self.previous_state is None and self.change == "appeared":
            return None
        return condition(self.previous_state, self.previous_flags)

    @property
    def text(self) -> str:
        return state_text(self.state, self.flags)

    @property
    def previous_text(self) -> str:
        if self.previous_state is None and self.change == "appeared":
            return "(first seen)"
        return state_text(self.previous_state, self.previous_flags)


def transition_of(event: Event) -> Transition:
    """The :class:`Transition` of a ``slurm.node.state`` event (its payload is a
    :class:`~slurmtower.models.event.NodeTransition` dumped)."""
    if event.type != NODE_STATE:
        raise ValueError(f"not a {NODE_STATE} event: {event.type}")
    p: dict[str, Any] = event.payload
    reason, owner = _owner(p.get("reason"), p.get("reason_owner"))
    return Transition(
        time=event.time,
        state=p.get("state"),
        flags=frozenset(p.get("flags") or ()),
        previous_state=p.get("previous_state"),
        previous_flags=frozenset(p.get("previous_flags") or ()),
        reason=reason,
        owner=owner,
        change=str(p.get("change") or "state"),
        source=event.source,
        event_id=event.id,
    )


@dataclass(frozen=True)
class Segment:
    """The node in one condition from ``start`` to ``end`` (both clipped to the window)."""

    start: datetime
    end: datetime
    began: datetime
    """When the transition into it happened (before ``start`` for the carried-in segment)."""
    transition: Transition

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def condition(self) -> str:
        return self.transition.condition


@dataclass(frozen=True)
class Outage:
    """Down, draining or drained until next in service: its length is the time to repair."""

    start: datetime
    end: datetime | None
    """``None``: still out of service at the window's end."""
    seconds: float
    """To ``end``, or to the window's end while ongoing."""
    began_before_window: bool
    first_condition: str
    reason: str | None
    owner: str | None

    @property
    def ongoing(self) -> bool:
        return self.end is None


@dataclass(frozen=True)
class Timeline:
    start: datetime
    end: datetime
    transitions: list[Transition]
    """In the window, oldest first."""
    segments: list[Segment]
    """Oldest first; the first may have begun before the window (carried in)."""
    outages: list[Outage]
    seconds: dict[str, float] = field(default_factory=dict)
    """Condition -> seconds spent in it within the window."""
    unrecorded_seconds: float = 0.0
    """Window time before the first known state (no transition before the window)."""
    truncated: bool = False
    """Only the newest transitions were read (the window held more than the limit)."""

    @property
    def window_seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def drained_seconds(self) -> float:
        return self.seconds.get("draining", 0.0) + self.seconds.get("drained", 0.0)

    @property
    def down_seconds(self) -> float:
        return self.seconds.get("down", 0.0)

    @property
    def in_service_seconds(self) -> float:
        return sum(self.seconds.get(c, 0.0) for c in IN_SERVICE)

    @property
    def unknown_seconds(self) -> float:
        return self.seconds.get("unknown", 0.0)

    @property
    def repairs(self) -> list[Outage]:
        """Outages that ended within the window."""
        return [o for o in self.outages if not o.ongoing]

    @property
    def mean_repair_seconds(self) -> float | None:
        done = self.repairs
        return sum(o.seconds for o in done) / len(done) if done else None

    @property
    def max_repair_seconds(self) -> float | None:
        done = self.repairs
        return max(o.seconds for o in done) if done else None

    @property
    def ongoing_outage(self) -> Outage | None:
        return self.outages[-1] if self.outages and self.outages[-1].ongoing else None


def build_timeline(events: Sequence[Event], *, start: datetime, end: datetime,
                   before: Event | None = None, truncated: bool = False) -> Timeline:
    """The timeline of one node over ``[start, end)``.

    Args:
        events: its ``slurm.node.state`` events with ``start <= time < end``, any order
            (sorted here by time, then id).
        before: the last such event before ``start`` (the state the window starts in).
        truncated: ``events`` are only the newest of the window (``before`` is then ignored:
            the state before the oldest one read is not known).
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must be timezone-aware")
    ordered = sorted(events, key=lambda e: (e.time, e.id or 0))
    window = [transition_of(e) for e in ordered if start <= e.time < end]
    carried = transition_of(before) if before is not None and not truncated and before.time < start else None

    points: list[tuple[datetime, Transition]] = []
    if carried is not None:
        points.append((carried.time, carried))
    points.extend((t.time, t) for t in window)

    segments: list[Segment] = []
    for i, (began, tr) in enumerate(points):
        seg_end = points[i + 1][0] if i + 1 < len(points) else end
        segments.append(Segment(start=max(began, start), end=min(max(seg_end, start), end), began=began,
                                transition=tr))

    seconds: dict[str, float] = {}
    for seg in segments:
        seconds[seg.condition] = seconds.get(seg.condition, 0.0) + seg.seconds
    first_known = segments[0].start if segments else end
    unrecorded = max(0.0, (first_known - start).total_seconds())

    outages: list[Outage] = []
    open_at: tuple[datetime, Transition] | None = None
    for seg in segments:
        cond = seg.condition
        if cond in OUT_OF_SERVICE and open_at is None:
            open_at = (seg.began, seg.transition)
        elif cond in IN_SERVICE and open_at is not None:
            began, tr = open_at
            outages.append(Outage(start=began, end=seg.began, seconds=(seg.began - began).total_seconds(),
                                  began_before_window=began < start, first_condition=tr.condition,
                                  reason=tr.reason, owner=tr.owner))
            open_at = None
    if open_at is not None:
        began, tr = open_at
        outages.append(Outage(start=began, end=None, seconds=max(0.0, (end - began).total_seconds()),
                              began_before_window=began < start, first_condition=tr.condition,
                              reason=tr.reason, owner=tr.owner))
    return Timeline(start=start, end=end, transitions=window, segments=segments, outages=outages,
                    seconds=seconds, unrecorded_seconds=unrecorded, truncated=truncated)


def human_duration(seconds: float | None) -> str:
    """``3 d 4 h``, ``2 h 5 min``, ``4 min 12 s``, ``12 s``, ``0 s`` (two units at most)."""
    if seconds is None:
        return "-"
    total = round(max(0.0, seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


_VIA = {"api": "the API or dashboard", "cli": "the CLI", "rule": "a rule"}


def describe_owner(owner: str | None) -> str:
    """Who holds a reason, in words: ``otto, through the API or dashboard (slurmtower's tag)``,
    ``Slurm user root (set outside slurmtower)``, ``unknown``."""
    if not owner:
        return "-"
    if owner.startswith("slurmtower:") and "@" in owner:
        who, via = owner[len("slurmtower:"):].rsplit("@", 1)
        return f"{who}, through {_VIA.get(via, via)} (slurmtower's tag)"
    if owner.startswith("user:"):
        return f"Slurm user {owner[5:]} (set outside slurmtower)"
    return owner
