"""Node state transitions: compare two observations of the cluster, emit one event per change.

What counts as a transition (and so as a ``slurm.node.state`` event):

- the **base state** changed (``IDLE`` -> ``DOWN``), or
- the **flag set** changed (``DRAIN`` added, ``NOT_RESPONDING`` removed ...), or
- the node **appeared** (not in the previous observation) or **disappeared**.

A change of ``reason`` (or its owner) alone is *not* a transition: Slurm lets an admin
re-word a drain reason without the node changing, and rules keyed on state must not fire
again for it. The event carries the reason current at ``observed_at``, so a rule still
sees why a node went down. Short-lived flags such as ``NOT_RESPONDING``, which Slurm may
set and clear within one poll interval, *are* transitions whenever an observation
catches them: each appearance and disappearance is one event, because flapping is
exactly what rate limits and cooldowns are for (and what an operator wants to see).
A flag that comes and goes between two observations is, by nature, not seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from slurmtower.models.event import NODE_STATE, Event, NodeTransition, TransitionKind
from slurmtower.models.node import node_sort_key

__all__ = ["NodeLike", "NodeSnapshot", "diff_states", "node_sort_key"]


class NodeLike(Protocol):
    """What :meth:`NodeSnapshot.from_node` needs of a node (``slurmtower.models.Node``)."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> Any: ...

    @property
    def flags(self) -> Iterable[str]: ...

    @property
    def reason(self) -> str | None: ...


@dataclass(frozen=True)
class NodeSnapshot:
    """One node's state as observed once: base state, flags and reason."""

    state: str
    flags: frozenset[str] = field(default_factory=frozenset)
    reason: str | None = None
    reason_owner: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.flags, frozenset):  # accept any iterable, store a frozenset
            object.__setattr__(self, "flags", frozenset(self.flags))

    @classmethod
    def from_node(cls, node: NodeLike) -> NodeSnapshot:
        """Build a snapshot from a parsed node (its ``state`` an enum or a string)."""
        state = node.state
        value = getattr(state, "value", state)
        owner = getattr(node, "reason_set_by_user", None) or getattr(node, "reason_owner", None)
        return cls(
            state=str(value),
            flags=frozenset(str(f) for f in node.flags),
            reason=node.reason or None,
            reason_owner=owner or None,
        )


def _kind(before: NodeSnapshot | None, after: NodeSnapshot | None) -> TransitionKind | None:
    if before is None and after is None:
        return None
    if before is None:
        return "appeared"
    if after is None:
        return "disappeared"
    if before.state != after.state:
        return "state"
    if before.flags != after.flags:
        return "flags"
    return None


def diff_states(
    previous: Mapping[str, NodeSnapshot],
    current: Mapping[str, NodeSnapshot],
    *,
    source: str,
    observed_at: datetime,
    partial: bool = False,
    include_appeared: bool = True,
) -> list[Event]:
    """Events for every node whose base state or flags differ between two observations.

    Args:
        previous: last known snapshot per node (e.g. :meth:`EventStore.load_node_states`).
        current: the new observation.
        source: recorded in each event (``poll``, ``trigger``, ``startup`` ...).
        observed_at: when ``current`` was taken (timezone-aware); the events' time.
        partial: ``current`` covers only some nodes (e.g. those a trigger named), so a
            node missing from it has not disappeared.
        include_appeared: emit ``appeared`` events for nodes absent from ``previous``
            (turn off for a first start with an empty store if those are noise).

    Returns one ``slurm.node.state`` event per changed node, in natural node order, with
    ``id=None`` (the store assigns ids).

    Raises ``ValueError`` if ``observed_at`` is naive.
    """
    if observed_at.tzinfo is None:
        raise ValueError("observed_at must be timezone-aware")
    names = set(current) if partial else set(previous) | set(current)
    events: list[Event] = []
    for name in sorted(names, key=node_sort_key):
        before = previous.get(name)
        after = current.get(name)
        kind = _kind(before, after)
        if kind is None or (kind == "appeared" and not include_appeared):
            continue
        before_flags = before.flags if before else frozenset()
        after_flags = after.flags if after else frozenset()
        latest = after or before
        assert latest is not None  # _kind returned None when both are missing
        transition = NodeTransition(
            node=name,
            change=kind,
            previous_state=before.state if before else None,
            previous_flags=sorted(before_flags),
            state=after.state if after else None,
            flags=sorted(after_flags),
            flags_added=sorted(after_flags - before_flags),
            flags_removed=sorted(before_flags - after_flags),
            reason=latest.reason,
            reason_owner=latest.reason_owner,
            observed_at=observed_at,
            source=source,
        )
        events.append(
            Event(
                type=NODE_STATE,
                time=observed_at,
                source=source,
                node=name,
                payload=transition.model_dump(mode="json"),
            )
        )
    return events
