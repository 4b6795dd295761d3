"""Drain holds: several owners can hold one node; it resumes only when the last one lets go.

A *hold* is one owner's reason to keep a node out of service: a person's drain, a health
check's, a rule's (``slurm.node.drain`` / ``slurm.node.down``, holder
``slurmtower:<who>@<via>``), or a DRAIN/DOWN made outside slurmtower (``scontrol``,
slurmctld's ``Not responding``: holder ``user:<reason_set_by_user>``).

**Slurm decides who holds a node; the store says since when, why and by which execution.**
The reason Slurm shows names every hold (``bad fan [user:root]; disk swap
[slurmtower:alice@cli]``, :mod:`slurmtower.actions.ownership`), so ``sinfo -R`` tells the
whole story and no hold lives only in slurmtower. The ``node_holds`` table keeps, per node
and holder, the reason, the time the hold began (``since``), the state asked for and the
execution that made it; slurmtower writes it after each drain, down or resume it made.

**Reconciliation, on every read** (:func:`node_holds`): a node Slurm shows in service has
no hold; a node out of service is held by exactly the holders its reason names (a reason
without slurmtower's tags: one outside hold by ``user:<reason_set_by_user>``, since Slurm's
``reason_changed_at``). A stored row that the Slurm data no longer supports (someone ran
``scontrol update state=resume``, or replaced the reason) is deleted, unless slurmtower
wrote it after Slurm was read (a cached snapshot older than a drain cannot undo it).
``slurm.node.get`` of nodes all in service answers from Slurm alone (none has a hold, whatever
the store keeps) without opening the store; their stale rows go at the next read through it.

Changes are made under one lock per store (:meth:`HoldStore.lock`: a PostgreSQL advisory
lock, an ``flock`` beside a SQLite file), held from reading the nodes until their holds are
written, so two owners draining one node at once both keep their hold.

This module is the holds' logic; their table and lock are in
:mod:`slurmtower.actions.hold_store` (SQLAlchemy, loaded only where a store is read).

Where holds show: ``slurm.node.get`` (``holds`` per node), ``GET /nodes/holds``, the
dashboard's node boxes (their holders, from the reason). Another page reads them with::

    holds = node_holds(HoldStore(engine), nodes, read_at=when_the_nodes_were_read)
    [h.as_dict() for h in holds["n2"]]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slurmtower.actions.ownership import OwnerTag, ReasonPart, holds_node, outside_holder, reason_holders
from slurmtower.errors import Conflict, SlurmtowerError, StoreError
from slurmtower.models import Node, NodeFlag, NodeState

if TYPE_CHECKING:
    from slurmtower.actions.hold_store import HoldStore

__all__ = ["LOCK_TIMEOUT", "Hold", "HoldsBusy", "any_held", "held_nodes", "node_holds", "out_since", "reconcile"]

log = logging.getLogger(__name__)

#: How long a drain, down or resume waits for another one changing holds of the same store.
LOCK_TIMEOUT = 60.0


class HoldsBusy(Conflict):
    """Another execution kept the holds lock for longer than :data:`LOCK_TIMEOUT`."""

    title = "node holds busy"


@dataclass(frozen=True)
class Hold:
    """One owner's hold of one node."""

    node: str
    holder: str
    """``slurmtower:alice@cli``, or ``user:root`` (``unknown``) for an outside hold."""
    reason: str | None
    since: datetime | None
    """When the hold began (``None``: unknown, Slurm gave no reason time)."""
    state: str
    """``DRAIN`` or ``DOWN`` (an outside hold: what the node was)."""
    execution_id: str | None = None
    recorded: bool = False
    """The store has a row for it (``False``: known from Slurm's reason only)."""

    @property
    def tag(self) -> OwnerTag | None:
        """slurmtower's tag of the holder (``None`` for an outside hold)."""
        if not self.holder.startswith("slurmtower:"):
            return None
        who, _, via = self.holder.removeprefix("slurmtower:").rpartition("@")
        return OwnerTag(who, via)

    @property
    def who(self) -> str | None:
        """The principal of a slurmtower hold (``None`` for an outside one)."""
        tag = self.tag
        return tag.who if tag is not None else None

    @property
    def outside(self) -> bool:
        return self.tag is None

    def part(self) -> ReasonPart:
        """This hold as a part of the reason Slurm shows."""
        return ReasonPart(self.reason, self.holder, self.tag)

    def as_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "reason": self.reason,
            "since": self.since.isoformat() if self.since is not None else None,
            "state": self.state,
            "execution_id": self.execution_id,
            "outside": self.outside,
        }


def _state_of(node: Node) -> str:
    if node.state is NodeState.DOWN:
        return "DOWN"
    return "FAIL" if NodeFlag.FAIL in node.flags else "DRAIN"


def reconcile(nodes: Sequence[Node], rows: Mapping[str, Mapping[str, Hold]]
              ) -> tuple[dict[str, list[Hold]], dict[str, set[str]]]:
    """The holds of ``nodes`` as Slurm shows them, with the stored details, and the stored
    rows Slurm no longer supports (node -> holders to forget). See the module docstring."""
    holds: dict[str, list[Hold]] = {}
    stale: dict[str, set[str]] = {}
    for node in nodes:
        stored = rows.get(node.name, {})
        if not holds_node(node):
            holds[node.name] = []
            if stored:
                stale[node.name] = set(stored)
            continue
        parts = reason_holders(node.reason, node.reason_set_by_user) or [
            ReasonPart(None, outside_holder(node.reason_set_by_user))]
        found: dict[str, Hold] = {}
        for part in parts:
            row = stored.get(part.holder)
            if row is not None:
                hold = Hold(node.name, part.holder, part.text, row.since, row.state, row.execution_id, True)
            else:
                hold = Hold(node.name, part.holder, part.text, node.reason_changed_at, _state_of(node))
            first = found.get(part.holder)
            # A holder named twice keeps its first place and time, and the latest text.
            found[part.holder] = hold if first is None else Hold(
                node.name, part.holder, part.text, first.since, first.state, first.execution_id, first.recorded)
        holds[node.name] = list(found.values())
        gone = set(stored) - set(found)
        if gone:
            stale[node.name] = gone
    return holds, stale


def out_since(holds: Sequence[Hold]) -> datetime | None:
    """When a node went out of service: its oldest hold's start (``None``: unknown)."""
    times = [h.since for h in holds if h.since is not None]
    return min(times) if times else None


def any_held(nodes: Sequence[Node]) -> bool:
    """Whether any of ``nodes`` is out of service: only then can the store add to their holds
    (a node in service has none, whatever the store keeps)."""
    return any(holds_node(n) for n in nodes)


def held_nodes(store: HoldStore) -> set[str]:
    """The nodes with a stored hold; none when the store cannot be read (logged), as
    :func:`node_holds` then takes the holds from Slurm's reasons alone."""
    try:
        return store.nodes()
    except StoreError as exc:
        log.warning("node holds: the store cannot be read (%s): holds from Slurm's reasons only", exc)
        return set()


def node_holds(store: HoldStore | None, nodes: Sequence[Node], *, read_at: datetime) -> dict[str, list[Hold]]:
    """Every node's holds (``[]`` for a node in service), reconciled with the store.

    ``read_at``: when ``nodes`` were read from Slurm (a cached snapshot's ``fetched_at``);
    stored rows the nodes no longer support are deleted if written before then. Without a
    store, or when it cannot be read, the holds come from the reasons alone (logged).
    """
    if store is None:
        return reconcile(nodes, {})[0]
    names = [n.name for n in nodes]
    try:
        rows = store.rows(names)
    except StoreError as exc:
        log.warning("node holds: the store cannot be read (%s): holds from Slurm's reasons only", exc)
        return reconcile(nodes, {})[0]
    holds, stale = reconcile(nodes, rows)
    if stale:
        try:
            gone = store.forget(stale, read_at=read_at)
        except SlurmtowerError as exc:
            log.warning("node holds: stale rows not deleted (%s)", exc)
        else:
            if gone:
                log.info("node holds: %d stored hold(s) Slurm no longer shows forgotten: %s", gone,
                         ", ".join(f"{n} {sorted(h)}" for n, h in sorted(stale.items())))
    return holds
