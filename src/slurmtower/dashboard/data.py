"""The node map's cells: each node as the dashboard draws it (its colour, reason and holders).

The nodes come from the live snapshots (:class:`slurmtower.live.state.LiveState`), so a
dashboard refresh adds no Slurm query beyond one per resource per ``api.refresh_interval``.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmtower.actions.ownership import holds_node, parse_reason, reason_holders, reason_owner
from slurmtower.dashboard.nodes_timeline import condition
from slurmtower.models import Node, NodeFlag, NodeState

__all__ = ["NodeView", "node_view"]


@dataclass(frozen=True)
class NodeView:
    """One node as the map shows it."""

    name: str
    state_text: str
    css: str
    """One of idle, mixed, allocated, draining, drained, down, unknown."""
    reason: str | None
    owner: str | None
    """The newest holder (``slurmtower:otto@api``)."""
    holders: tuple[str, ...]
    """Every holder, oldest first: the node resumes once each has let go (drain holds)."""
    cpus: str
    partitions: str
    drainable: bool
    resumable: bool


def _reason_and_owner(node: Node) -> tuple[str | None, str | None, tuple[str, ...]]:
    """The reason without slurmtower's owner tags, who holds it last (``slurmtower:otto@api``)
    and every holder the reason names (one per drain hold, oldest first)."""
    text, _tag = parse_reason(node.reason)
    holders = tuple(p.holder for p in reason_holders(node.reason, node.reason_set_by_user)) if holds_node(node) else ()
    return text, reason_owner(node), holders


def node_view(node: Node) -> NodeView:
    """The map cell of ``node``: a colour class, the reason and its owner for the tooltip."""
    held = NodeFlag.DRAIN in node.flags or NodeFlag.FAIL in node.flags
    css = condition(node.state.value, node.flags)
    alloc = node.alloc_cpus if node.alloc_cpus is not None else 0
    reason, owner, holders = _reason_and_owner(node)
    return NodeView(
        name=node.name,
        state_text=node.state_text,
        css=css,
        reason=reason,
        owner=owner,
        holders=holders,
        cpus=f"{alloc}/{node.cpus}" if node.cpus is not None else "?",
        partitions=",".join(node.partitions),
        drainable=not held and node.state is not NodeState.DOWN,
        resumable=held or node.state is NodeState.DOWN,
    )
