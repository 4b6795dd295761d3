"""Two speeds of freshness for the queue: the job states read alone, between two full reads.

A full read of the queue (``REQUEST_JOB_INFO``: every field of every record) costs slurmctld
what the queue's size costs (0.3-0.9 s at 100,000-200,000 records), so within its share of
slurmctld's time it runs every 10-20 s at that size. 23.11 added a read of the states alone
(``squeue --only-job-state``, ``REQUEST_JOB_STATE``: each job's id and state), a small share of
that cost: read every ``api.state_refresh_interval`` seconds while clients read the queue, it
keeps the states seconds old whatever the full records' age.

:class:`StateOverlay` holds what the state reads found that the last full read does not say:
job id -> the state read since. It is applied to the full read's table
(:meth:`~slurmtower.models.table.JobTable.with_states`): those rows show their new state, marked
``state_as_of``. The rules keep it right whichever read is newer:

* a state read's changes (relative to the previous state read) update the overlay: a job
  whose state now equals the table's leaves it, one that differs enters it;
* a full read that started after the last state read is newer for every row: the overlay
  empties; one that started before it keeps the entries that still differ from its rows.

:class:`StateClock` says when the states of a snapshot were last confirmed: a state read that
changed nothing moves it, so every view of that snapshot tells the new age (``X-State-Age``)
without being rendered again. On releases without the read (22.05, the REST backend) the clock
is the full read's: ``X-State-Age`` equals ``X-Data-Age``.

The nodes have the same two speeds where the sensor runs in the serving process: its poll
(``sinfo``'s state lines, every ``events.poll_interval``) is read anyway, and
:class:`NodeStateOverlay` puts what it found in the nodes' rows (no read of its own). Where the
sensor runs elsewhere, the nodes' states are their full read's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from slurmtower.models.job import parse_job_state
from slurmtower.models.node import Node
from slurmtower.models.table import JobTable, NodeTable, StateDelta

__all__ = ["NodeStateOverlay", "StateClock", "StateOverlay", "apply", "apply_nodes"]


@dataclass
class StateClock:
    """When the job (or node) states of one snapshot were last read: ``mono`` on the cache's
    clock, ``at`` in wall time. Mutable: a read that found them unchanged moves it."""

    mono: float
    at: datetime


@dataclass
class StateOverlay:
    """The states read since the last full read that differ from it (see the module)."""

    states: dict[int, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """job id -> (base state, flags) as the state reads give them."""
    read_mono: float = float("-inf")
    """When Slurm answered the last state read applied (the cache's clock)."""
    read_at: datetime | None = None
    _parsed: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict, repr=False)

    def _parse(self, text: str) -> tuple[str, tuple[str, ...]]:
        found = self._parsed.get(text)
        if found is None:
            base, flags = parse_job_state(text)
            found = self._parsed[text] = (base.value, tuple(sorted(flags)))
        return found

    def read(self, delta: StateDelta, table: JobTable, answered: float, at: datetime) -> bool:
        """Take a state read (Slurm answered at ``answered``) against ``table``, the last full
        read's rows; True when the overlay changed (the snapshot's rows must be made again)."""
        states = self.states
        before = dict(states) if delta.full else None
        if delta.full:
            states.clear()
        where = table.positions()
        column = table.columns["state"]
        changed = False
        for job_id, text in delta.states.items():
            row = where.get(job_id)
            if row is None:
                # A job the full read did not see (submitted since) or no longer holds: the
                # next full read brings or drops its row.
                changed |= states.pop(job_id, None) is not None
                continue
            state = self._parse(text)
            if column[row] == state[0]:
                changed |= states.pop(job_id, None) is not None
            elif states.get(job_id) != state:
                states[job_id] = state
                changed = True
        self.read_mono, self.read_at = answered, at
        return changed if before is None else states != before

    def full_read(self, table: JobTable, started: float) -> None:
        """A full read (Slurm asked at ``started``) replaced the table: keep what it does not
        already say, if anything (see the module)."""
        if started >= self.read_mono:
            self.states.clear()
            return
        where = table.positions()
        column = table.columns["state"]
        for job_id, state in list(self.states.items()):
            row = where.get(job_id)
            if row is None or column[row] == state[0]:
                del self.states[job_id]

    def frozen(self) -> tuple[dict[int, tuple[str, tuple[str, ...]]], str]:
        """A copy of the overlay and the ISO time of its read: what :func:`apply` takes in a
        thread while the event loop goes on reading states."""
        at = self.read_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if self.read_at is not None else ""
        return dict(self.states), at


@dataclass
class NodeStateOverlay:
    """The node states the sensor's polls (``sinfo``: state, flags, reason, every second)
    found that the last full read of the nodes does not say: name -> the polled node. Each
    poll is a whole picture, so the overlay is made anew from it; a full read that began after
    the last poll empties it (its rows are newer)."""

    states: dict[str, Node] = field(default_factory=dict)
    read_mono: float = float("-inf")
    read_at: datetime | None = None
    polled: list[Node] | None = field(default=None, repr=False)
    """The last poll's nodes (the overlay against a new full read is made from them)."""

    def read(self, nodes: list[Node], table: NodeTable, polled: float, at: datetime) -> bool:
        """Take a poll (its nodes read at ``polled``) against ``table``; True when the
        overlay changed."""
        self.polled, self.read_mono, self.read_at = nodes, polled, at
        return self._remake(table)

    def full_read(self, table: NodeTable, started: float) -> None:
        """A full read (Slurm asked at ``started``) replaced the table (see the class)."""
        if started >= self.read_mono or self.polled is None:
            self.states = {}
        else:
            self._remake(table)

    def _remake(self, table: NodeTable) -> bool:
        where = table.positions()
        column = table.columns["state"]
        fresh: dict[str, Node] = {}
        for node in self.polled or ():
            row = where.get(node.name)
            if row is not None and column[row] != frozenset({node.state.value, *node.flags}):
                fresh[node.name] = node
        changed = fresh != self.states
        self.states = fresh
        return changed

    def frozen(self) -> tuple[dict[str, Node], str]:
        at = self.read_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if self.read_at is not None else ""
        return dict(self.states), at


def apply_nodes(table: NodeTable, frozen: tuple[dict[str, Node], str]) -> NodeTable:
    """``table`` with a node overlay's states (:meth:`NodeStateOverlay.frozen`) in their rows."""
    states, at = frozen
    return table.with_states(states, at) if states else table


def apply(table: JobTable, frozen: tuple[dict[int, tuple[str, tuple[str, ...]]], str]) -> JobTable:
    """``table`` with an overlay's states (:meth:`StateOverlay.frozen`) in their rows."""
    states, at = frozen
    return table.with_states(states, at) if states else table
