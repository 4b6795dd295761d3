"""slurmctld's share: what a read costs the controller, and how often the sensor may poll.

``api.refresh_controller_share`` bounds the time slurmctld spends in all of a deployment's
reads. The refresh planner (:class:`~slurmtower.live.cache.SnapshotCache`) splits it: the
sensor's node polls first (at most :data:`POLL_PART` of it), the job state reads next (at
most half), the full reads of the queue, nodes and partitions what is left (at least a
quarter). This module holds the two pieces the planner and the sensor share:

* :class:`RpcMeter`: the controller seconds one call of each RPC type costs now, read from
  sdiag's per-type totals just before and just after a read (the first reads, then at most
  every :data:`MEASURE_EVERY` seconds), lock waits included, as sdiag counts them;
* :class:`PollPace`: the sensor's poll interval, ``events.poll_interval`` or longer when one
  poll (a ``sinfo``: a node and a partition read) costs more than its part of the share over
  it. At 10,000 nodes on 26.05, with 200,000 jobs, one poll cost 8 ms on a quiet controller
  and ~55 ms while the scheduler held its locks: a poll every second took 5.8 % alone.
  Node events do not wait for the poll: Slurm's triggers call the sensor back at once, and
  each callback reads the nodes then.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurmtower.errors import SlurmtowerError

__all__ = ["MEASURE_EVERY", "POLL_PART", "POLL_RPCS", "PollPace", "RpcMeter", "pace", "poll_load", "sdiag_totals"]

#: Seconds between two measurements of an RPC type once it is measured.
MEASURE_EVERY = 20.0
#: A reading at most this old starts the window the next measurement averages over.
WINDOW = 3 * MEASURE_EVERY
#: While a type is unmeasured (its count did not move during a read), measure again at the
#: next read, at most this many times (a type sdiag never shows must not cost two reads a round).
FIRST_READS = 5
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
    """The time (seconds) one call of each RPC type costs slurmctld, from sdiag's per-type
    (count, total_time_us): the calls since this meter's last reading, when that was at
    most :data:`WINDOW` seconds ago (every state read of the last 20 s, not one: the lock
    waits a busy scheduler causes come and go, and one sample every 20 s put a state read
    at half of its mean at 200,000 jobs), else the calls between a reading just before a
    read and one just after it. Not sdiag's average since its last reset (midnight), which
    a queue grown since makes too low.

    Args:
        totals: sdiag's ``{type: (count, total µs)}`` now; None when sdiag does not answer.
    """

    totals: Callable[[], Totals | None]
    clock: Callable[[], float] = time.monotonic
    seconds: dict[str, float] = field(default_factory=dict)
    measured: set[str] = field(default_factory=set)
    last: float = -1e9
    reads: int = 0
    window: Totals | None = None
    """The last reading (taken at :attr:`last`)."""
    walls: dict[tuple[str, ...], tuple[float, float]] = field(default_factory=dict)
    """Per set of RPCs: (slurmctld seconds, wall seconds) of the last measured read."""

    def due(self, rpcs: tuple[str, ...]) -> bool:
        """Whether the next read of ``rpcs`` is to be measured (sdiag around it)."""
        if not rpcs:
            return False
        unmeasured = not self.measured.issuperset(rpcs) and self.reads < FIRST_READS
        return unmeasured or self.clock() - self.last >= MEASURE_EVERY

    def before(self, rpcs: tuple[str, ...]) -> Totals | None:
        """sdiag's totals before a read of ``rpcs`` when it is to be measured, else None."""
        return self.totals() if self.due(rpcs) else None

    def after(self, rpcs: tuple[str, ...], before: Totals | None, wall: float | None = None) -> float:
        """slurmctld seconds one read of ``rpcs`` costs: measured from ``before`` (None: not
        measured this time) to now, else the last measurement (0 before the first), moved
        by how much longer or shorter than the measured read this one took (``wall``: its
        seconds from asking to the answer). A busy scheduler's lock waits come and go
        within seconds: they lengthen a read and its RPCs' time in sdiag alike, and twenty
        seconds between two measurements let a poll every second cost 5 % of slurmctld at
        10,000 nodes while the last measurement said 1 %."""
        if before is not None:
            since = self.window if self.clock() - self.last <= WINDOW else None
            self.last = self.clock()
            self.reads += 1
            now = self.totals() or {}
            for name in rpcs:
                a = now.get(name)
                for start in (since, before):
                    b = start.get(name) if start is not None else None
                    if b is not None and a is not None and a[0] > b[0] and a[1] >= b[1]:
                        self.seconds[name] = (a[1] - b[1]) / (a[0] - b[0]) / 1e6
                        self.measured.add(name)
                        break
            self.window = now or None
        cost = sum(self.seconds.get(r, 0.0) for r in rpcs)
        if wall is None:
            return cost
        if before is not None or rpcs not in self.walls:
            if cost > 0:
                self.walls[rpcs] = (cost, wall)
            return cost
        measured, measured_wall = self.walls[rpcs]
        return max(0.0, measured + wall - measured_wall)

    def measure(self, rpcs: tuple[str, ...], read: Callable[[], object]) -> float:
        """Run ``read`` (a read of ``rpcs``), measured when due; its cost as :meth:`after`."""
        before = self.before(rpcs)
        started = self.clock()
        read()
        return self.after(rpcs, before, self.clock() - started)


@dataclass
class PollPace:
    """The sensor's poll interval, within its part of slurmctld's share.

    Args:
        base: ``events.poll_interval``, the shortest interval.
        share: ``api.refresh_controller_share`` (0: not bounded).
        max_interval: the longest (``api.max_refresh_interval``): a transition no trigger
            reports is seen within it.
        meter: measures the polls (sdiag around one every :data:`MEASURE_EVERY` s).
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
        return self.cost / self.interval


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
