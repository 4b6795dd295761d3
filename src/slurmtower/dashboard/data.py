"""What the dashboard and ``/metrics`` read: nodes and jobs from the shared snapshot cache.

Both go through the API's :class:`~slurmtower.api.cache.SnapshotCache`, so a dashboard
refresh or a Prometheus scrape adds no Slurm query beyond one per resource per
``api.refresh_interval``, whoever else is polling.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from slurmtower.api.cache import shared_cache
from slurmtower.api.services import Services
from slurmtower.dashboard.nodes_timeline import condition
from slurmtower.models import Node, NodeFlag, NodeState
from slurmtower.models.table import JobTable

__all__ = ["ClusterView", "NodeView", "cluster_view", "node_view"]


@dataclass(frozen=True)
class ClusterView:
    nodes: list[Node]
    jobs: JobTable
    """The queue as a compact table (build models only for the rows shown)."""
    fetched_at: datetime
    stale: bool


async def cluster_view(services: Services) -> ClusterView:
    """Nodes and jobs, at most ``api.refresh_interval`` old (one shared Slurm query each)."""
    cache = shared_cache(services)
    nodes, jobs = await cache.get_all("nodes", "jobs")
    # The node models are built from the table's JSON once per snapshot: off the event loop.
    return ClusterView(nodes=list(await asyncio.to_thread(nodes.value.nodes)), jobs=jobs.value,
                       fetched_at=min(nodes.fetched_at, jobs.fetched_at), stale=nodes.stale or jobs.stale)


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
    from slurmtower.actions.ownership import holds_node, parse_reason, reason_holders, reason_owner

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
