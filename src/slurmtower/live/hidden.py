"""Hidden partitions leave every live read: the snapshots are cut where they are read.

The policy itself is :class:`slurmtower.visibility.Visibility`; these apply it to the
snapshots (the queue and the node table are cut in the refresh worker, see
:func:`hide_jobs` and :func:`node_table`).
"""

from __future__ import annotations

from collections.abc import Collection

from slurmtower.models import Job, Node, Partition
from slurmtower.models.table import JobTable, NodeTable, node_fragment
from slurmtower.visibility import Visibility

__all__ = ["hide_jobs", "node_table", "visible_jobs", "visible_nodes", "visible_partitions"]


def visible_jobs(jobs: list[Job], hidden: Collection[str]) -> list[Job]:
    """Jobs outside hidden partitions (:meth:`Visibility.jobs`)."""
    return Visibility(hidden_partitions=frozenset(hidden)).jobs(jobs) if hidden else jobs


def visible_nodes(nodes: list[Node], hidden: Collection[str]) -> list[Node]:
    """Nodes without hidden partition names (:meth:`Visibility.nodes`)."""
    return Visibility(hidden_partitions=frozenset(hidden)).nodes(nodes) if hidden else nodes


def visible_partitions(partitions: list[Partition], hidden: Collection[str]) -> list[Partition]:
    return Visibility(hidden_partitions=frozenset(hidden)).partitions(partitions)


def hide_jobs(table: JobTable, hidden: frozenset[str]) -> JobTable:
    """The queue without hidden partitions (runs where the queue is read: the refresh worker)."""
    return table.hiding(hidden)


#: id(node) -> (node, its JSON): nodes whose scontrol line did not change are the same
#: objects round after round (the client's memo), so their JSON is made once.
_NODE_JSON: dict[int, tuple[Node, bytes]] = {}


def _node_json(node: Node) -> bytes:
    found = _NODE_JSON.get(id(node))
    if found is not None and found[0] is node:
        return found[1]
    fragment = node_fragment(node)
    _NODE_JSON[id(node)] = (node, fragment)
    return fragment


def node_table(nodes: list[Node], hidden: frozenset[str]) -> NodeTable:
    """The nodes as a table without hidden partitions (runs where the nodes are read: the
    refresh worker)."""
    table = NodeTable.from_nodes(visible_nodes(nodes, hidden), _node_json)
    if len(_NODE_JSON) > 2 * len(table) + 100:  # forget nodes no longer read
        keep = {id(n) for n in nodes}
        for key in [k for k in _NODE_JSON if k not in keep]:
            del _NODE_JSON[key]
    return table
