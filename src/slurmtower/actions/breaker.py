"""The circuit breaker: no drain storm takes out more than a share of a partition or cluster.

``slurm.node.drain`` and ``slurm.node.down``, from every source (CLI, HTTP, rules, the
maintenance runs), are refused when they would leave more than ``actions.breaker_share``
of a partition (``actions.breaker_cluster_share`` of the whole cluster) out of service
*for reasons that arose within* ``actions.breaker_window`` seconds. The limit of a scope
of ``N`` nodes is ``max(actions.breaker_min_nodes, floor(share * N))`` nodes: a 4-node
partition at 25 % takes one node per window, a partition too small for its share to make
one node still takes ``breaker_min_nodes`` (1), so a storm on 8 GPU nodes stops too.

**What counts** (what an admin expects of a breaker: a storm from a bad signal stops, a node
down for days does not block an urgent drain forever):

* *already out in the window*: the scope's nodes out of service now (DOWN, DRAIN, FAIL)
  whose oldest current hold began within the window: slurmtower's drains and downs (their
  ``since`` in the holds table), and drains, downs and failures outside slurmtower (Slurm's
  ``reason_changed_at``: ``scontrol``, ``Not responding``). A node back in service no longer
  counts; a node out since before the window never counts;
* *the request*: its nodes, except those out of service since before the window (adding a
  hold to them changes nothing). A requested node already out within the window is counted
  once: a rule draining nodes that just went DOWN by themselves is stopped when too many went
  down at once (they would otherwise return to service on their own).

The request is refused when the nodes already out and those of the request, each counted
once, are more than the limit in any partition of the counted nodes, or in the cluster.
Then nothing changes in Slurm, the refusal is a
:class:`BreakerTripped` (a Conflict: HTTP 409 problem, CLI exit 3, one line naming the
partition, the share, the window and the nodes already out), and the event
``slurmtower.breaker.tripped`` is recorded with the counts (a dry run only says it would
trip). The refusal names what its caller may see (:class:`~slurmtower.visibility.Hidden`):
a scope of a hidden partition is left out, a hidden node already out is counted, not named
(the nodes asked for are the caller's own words); the event keeps every name and is cut
where it is read, as every event is. An admin passes ``override_breaker=true`` (HTTP: the admin role; the CLI: whoever
Slurm lets drain; never a rule): the drain goes on, and ``slurmtower.breaker.overridden``
is recorded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from slurmtower.actions.holds import Hold, node_holds, out_since
from slurmtower.actions.ownership import holds_node
from slurmtower.errors import Conflict
from slurmtower.models import Node
from slurmtower.nodeset import NodeSet
from slurmtower.visibility import NOTHING_HIDDEN, Hidden

if TYPE_CHECKING:
    from slurmtower.actions.registry import Run
    from slurmtower.settings import ActionSettings

__all__ = ["OVERRIDDEN", "TRIPPED", "BreakerTripped", "Scope", "evaluate", "guard", "refusal"]

log = logging.getLogger(__name__)

TRIPPED = "slurmtower.breaker.tripped"
OVERRIDDEN = "slurmtower.breaker.overridden"


class BreakerTripped(Conflict):
    """A drain or down refused by the circuit breaker."""

    title = "circuit breaker tripped"


@dataclass(frozen=True)
class Scope:
    """One partition (or the cluster) the request would take past its limit."""

    kind: str
    """``partition`` or ``cluster``."""
    name: str | None
    """The partition (``None`` for the cluster)."""
    share: float
    total: int
    limit: int
    already_out: frozenset[str]
    requested: frozenset[str]

    @property
    def would_be_out(self) -> int:
        return len(self.already_out | self.requested)

    def describe(self) -> str:
        where = f"partition {self.name}" if self.kind == "partition" else "the cluster"
        return f"{self.would_be_out} of the {self.total} nodes of {where}"

    def as_dict(self, hidden: Hidden = NOTHING_HIDDEN) -> dict[str, Any]:
        """The scope as the event and the problem give it (``hidden`` nodes counted in
        ``already_out_count``, not named in ``already_out``)."""
        return {
            "scope": self.kind,
            "partition": self.name,
            "share": self.share,
            "nodes": self.total,
            "limit": self.limit,
            "already_out": _fold(self.already_out - hidden.nodes),
            "already_out_count": len(self.already_out),
            "requested": _fold(self.requested),
            "requested_count": len(self.requested),
            "would_be_out": self.would_be_out,
        }


def _limit(share: float, total: int, min_nodes: int) -> int:
    return max(min_nodes, math.floor(share * total + 1e-9))


def evaluate(settings: ActionSettings, nodes: Sequence[Node], holds: Mapping[str, Sequence[Hold]],
             requested: Collection[str], now: datetime) -> list[Scope]:
    """The scopes the request would take past their limit (``[]``: it may go on).

    ``nodes``: every node of the cluster; ``holds``: the holds of those out of service
    (:func:`~slurmtower.actions.holds.node_holds`); ``requested``: the nodes to drain or down.
    """
    start = now - timedelta(seconds=settings.breaker_window)
    recent: set[str] = set()
    long_out: set[str] = set()
    members: dict[str, set[str]] = {}
    by_name = {n.name: n for n in nodes}
    for node in nodes:
        for part in node.partitions:
            members.setdefault(part, set()).add(node.name)
        if holds_node(node):
            began = out_since(holds.get(node.name, ()))
            (recent if began is not None and began >= start else long_out).add(node.name)
    counted = set(requested) - long_out
    if not counted:
        return []
    tripped: list[Scope] = []
    parts = sorted({p for name in counted for p in (by_name[name].partitions if name in by_name else ())})
    for part in parts:
        share = settings.breaker_partition_shares.get(part, settings.breaker_share)
        scope = Scope("partition", part, share, len(members[part]),
                      _limit(share, len(members[part]), settings.breaker_min_nodes),
                      frozenset(recent & members[part]), frozenset(counted & members[part]))
        if scope.would_be_out > scope.limit:
            tripped.append(scope)
    share = settings.breaker_cluster_share
    cluster = Scope("cluster", None, share, len(nodes), _limit(share, len(nodes), settings.breaker_min_nodes),
                    frozenset(recent), frozenset(counted))
    if cluster.would_be_out > cluster.limit:
        tripped.append(cluster)
    return tripped


def _fold(nodes: Collection[str]) -> str | None:
    return str(NodeSet(sorted(nodes))) or None


def refusal(action: str, tripped: Sequence[Scope], window: float,
            hidden: Hidden = NOTHING_HIDDEN) -> BreakerTripped:
    """The one-line refusal naming the first scope past its limit (all of them in the problem),
    as callers may see them (``hidden``: :meth:`Visibility.hiding_nodes
    <slurmtower.visibility.Visibility.hiding_nodes>` of the cluster): scopes of hidden
    partitions left out, hidden nodes already out counted but not named."""
    shown = [s for s in tripped if s.name is None or s.name not in hidden.partitions]
    ending = "nothing changed (an admin may pass override_breaker=true)"
    if not shown:  # only hidden partitions past their limits: said without naming them
        return BreakerTripped(f"circuit breaker: {action} of {_fold(tripped[0].requested)} would leave more nodes "
                              f"out of service within {window:g} s than a partition's limit; {ending}",
                              param="nodes", breaker={"window": window, "scopes": []})
    first = shown[0]
    out = _fold(first.already_out - hidden.nodes) or "none"
    unnamed = len(first.already_out & hidden.nodes)
    if unnamed:
        out = f"{out} and {unnamed} hidden" if out != "none" else f"{unnamed} hidden"
    plural = "" if first.limit == 1 else "s"
    message = (f"circuit breaker: {action} of {_fold(first.requested)} would leave {first.describe()} out of "
               f"service within {window:g} s, more than its limit of {first.share:.0%} ({first.limit} "
               f"node{plural}); already out in the window: {out} ({len(first.already_out)}); {ending}")
    return BreakerTripped(message, param="nodes", breaker={
        "window": window, "partition": first.name, "share": first.share, "limit": first.limit,
        "already_out": first.as_dict(hidden)["already_out"], "already_out_count": len(first.already_out),
        "scopes": [s.as_dict(hidden) for s in shown]})


def guard(run: Run, ns: NodeSet, action: str, *, override: bool) -> dict[str, Any] | None:
    """The breaker before an act that takes ``ns`` out of service (a drain, a down, a
    maintenance reservation starting within the window): refuse it (:class:`BreakerTripped`,
    ``slurmtower.breaker.tripped`` recorded unless a dry run), or note its ``override``
    (``slurmtower.breaker.overridden``); ``None`` when it does not trip (or is off)."""
    settings = run.settings.actions if run.settings is not None else None
    if settings is None or not settings.breaker_enabled:
        return None
    read_at = datetime.now(UTC)
    every = run.client.nodes()
    out = [n for n in every if holds_node(n)]
    tripped = evaluate(settings, every, node_holds(run.holds, out, read_at=read_at), ns, read_at)
    if not tripped:
        return None
    payload = {"action": action, "nodes": str(ns), "principal": run.principal, "via": run.via,
               "execution_id": run.execution_id, "window": settings.breaker_window,
               "scopes": [t.as_dict() for t in tripped]}
    if override:
        run.stdout.append(f"circuit breaker overridden: {tripped[0].describe()} out of service within "
                          f"{settings.breaker_window:g} s (limit {tripped[0].limit})")
        if not run.dry_run:
            run.record_event(OVERRIDDEN, payload, node=str(ns) if len(ns) == 1 else None)
        return {"overridden": True, "scopes": payload["scopes"]}
    if not run.dry_run:
        run.record_event(TRIPPED, payload, node=str(ns) if len(ns) == 1 else None)
    raise refusal(action, tripped, settings.breaker_window, run.visibility().hiding_nodes(every))
