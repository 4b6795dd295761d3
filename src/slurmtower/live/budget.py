"""slurmctld's share: what a read costs the controller, and how often the sensor may poll.

``api.refresh_controller_share`` bounds the time slurmctld spends in all of a deployment's
reads. The refresh planner (:class:`~slurmtower.live.cache.SnapshotCache`) splits it: the
sensor's node polls first (at most :data:`POLL_PART` of it), the job state reads next (at
most half), the full reads of the queue, nodes and partitions what is left (at least a
quarter). This module holds the two pieces the planner and the sensor share:

* :class:`RpcMeter`: the controller seconds one call of each RPC type costs now, from
  sdiag's per-type totals read after each read (the mean of the calls since the reading
  before), lock waits included, as sdiag counts them;
* :class:`PollPace`: the sensor's poll interval, ``events.poll_interval`` or longer when one
  poll (a ``sinfo``: a node and a partition read) costs more than its part of the share over
  it, at most ``events.max_poll_interval``. At 10,000 nodes on 26.05, with 200,000 jobs, one
  poll cost 10-12 ms on a quiet controller and 0.1-1 s while the scheduler held its locks: a
  poll every second took 5.8 % alone. Slurm runs its triggers every 15 s at most, so a node
  event sooner than that comes from the poll: hence its upper bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurmtower.errors import SlurmtowerError

__all__ = ["POLL_PART", "POLL_RPCS", "PollPace", "RpcMeter", "pace", "poll_load", "sdiag_totals"]

#: A reading at most this many seconds old starts the window the next read is costed over.
WINDOW = 60.0
#: A read that cost slurmctld less than this (seconds) is measured again only after
#: :data:`CHEAP_EVERY` seconds: at a few nodes and jobs, an sdiag call after every poll and
#: every state read would cost more CPU than the reads themselves.
CHEAP = 0.005
CHEAP_EVERY = 20.0
#: The share of ``api.refresh_controller_share`` the sensor's polls may take.
POLL_PART = 0.25
#: The RPCs one poll of the sensor makes (``sinfo``: nodes, then partitions).
POLL_RPCS = ("REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO")

Totals = dict[str, tuple[int, int]]


def sdiag_totals(client: Any) -> Totals | None:
    """sdiag's (count, total_time_us) per RPC type now, read by ``client``; None when sdiag
    does not answer."""
    try:
        stats = client.stats()
    except SlurmtowerError:
        return None
    return {r.name: (r.count, r.total_time_us) for r in stats.rpcs_by_type if r.total_time_us is not None}


@dataclass
class RpcMeter:
    """The time (seconds) one call of each RPC type costs slurmctld now, from sdiag's
    per-type (count, total_time_us), read once after each read: the mean of the type's
    calls since the meter's previous reading (the read's own and any others' meanwhile),
    or, when that is more than :data:`WINDOW` seconds old (or none), of those between a
    reading just before the read and one just after it. Not sdiag's average since its last
    reset (midnight), which a queue grown since makes too low; and not a sample every 20
    s: a busy scheduler's lock waits come and go within seconds, and at 200,000 jobs on
    10,000 nodes a measurement 20 s old let the sensor poll every 1.8 s at 60-150 ms of
    slurmctld each while it said every 14 s.

    Args:
        totals: sdiag's ``{type: (count, total µs)}`` now; None when sdiag does not answer.
    """

    totals: Callable[[], Totals | None]
    clock: Callable[[], float] = time.monotonic
    seconds: dict[str, float] = field(default_factory=dict)
    measured: set[str] = field(default_factory=set)
    last: float = -1e9
    """When the last reading was taken."""
    reads: int = 0
    """sdiag readings taken."""
    window: Totals | None = None
    """The last reading (taken at :attr:`last`)."""

    def before(self, rpcs: tuple[str, ...]) -> Totals | None:
        """Where the next read of ``rpcs`` is measured from: the last reading while it is
        at most :data:`WINDOW` seconds old (no sdiag call: each read costs one reading,
        after it), else sdiag's totals now; None (not measured: the last figure kept) for a
        read of no RPC, or a cheap one measured less than :data:`CHEAP_EVERY` s ago."""
        if not rpcs:
            return None
        age = self.clock() - self.last
        if self.measured.issuperset(rpcs) and self.cost(rpcs) < CHEAP and age < CHEAP_EVERY:
            return None  # a cheap read (a small cluster's): its last figure, no sdiag call
        if self.window is not None and age <= WINDOW:
            return self.window
        self.reads += 1
        return self.totals()

    def after(self, rpcs: tuple[str, ...], before: Totals | None) -> float:
        """slurmctld seconds one read of ``rpcs`` costs: the mean time of each of its RPC
        types' calls from ``before`` to now (the last figure for a type that made none;
        0 before the first); nothing read for ``before`` None."""
        if before is not None:
            now = self.totals()
            self.last, self.reads = self.clock(), self.reads + 1
            self.window = now or None
            for name in rpcs:
                b, a = before.get(name), (now or {}).get(name)
                if b is not None and a is not None and a[0] > b[0] and a[1] >= b[1]:
                    self.seconds[name] = (a[1] - b[1]) / (a[0] - b[0]) / 1e6
                    self.measured.add(name)
        return self.cost(rpcs)

    def cost(self, rpcs: tuple[str, ...]) -> float:
        """slurmctld seconds one read of ``rpcs`` cost when last measured (0 before that)."""
        return sum(self.seconds.get(r, 0.0) for r in rpcs)

    def measure(self, rpcs: tuple[str, ...], read: Callable[[], object]) -> float:
        """Run ``read`` (a read of ``rpcs``); its cost as :meth:`after`."""
        before = self.before(rpcs)
        read()
        return self.after(rpcs, before)


@dataclass
class PollPace:
    """The sensor's poll interval, within its part of slurmctld's share.

    Args:
        base: ``events.poll_interval``, the shortest interval.
        share: ``api.refresh_controller_share`` (0: not bounded).
        max_interval: the longest (``events.max_poll_interval``): a transition no trigger
            reports is seen within it.
        meter: measures the polls (one sdiag reading after each).
    """

    base: float
    share: float
    max_interval: float
    meter: RpcMeter | None = None
    cost: float = 0.0
    """slurmctld seconds one poll costs (0 before the first measurement)."""

    def poll(self, read: Callable[[], object]) -> None:
        """Run one poll, measuring what it costs slurmctld when due."""
        if self.meter is None:
            read()
            return
        self.cost = self.meter.measure(POLL_RPCS, read)

    @property
    def interval(self) -> float:
        """Seconds to the next poll."""
        return pace(self.base, self.cost, self.share * POLL_PART, self.max_interval)

    @property
    def load(self) -> float:
        """slurmctld seconds per second the polls take at :attr:`interval`."""
        return poll_load(self.cost, self.base, self.share, self.max_interval)


def pace(base: float, cost: float, part: float, max_interval: float) -> float:
    """The interval at which reads costing ``cost`` controller seconds take at most ``part``
    of slurmctld's time: ``base`` or longer, at most ``max_interval``."""
    if part <= 0 or cost <= 0:
        return base
    return min(max(max_interval, base), max(base, cost / part))


def poll_load(cost: float, base: float, share: float, max_interval: float) -> float:
    """slurmctld seconds per second a sensor polling at ``base`` paced by :class:`PollPace`
    takes when one poll costs ``cost``: what a process that does not run the sensor counts
    for it (the nodes' read makes the same RPCs)."""
    return cost / pace(base, cost, share * POLL_PART, max_interval) if cost > 0 else 0.0
