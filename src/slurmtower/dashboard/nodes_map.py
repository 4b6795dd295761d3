"""The node map of ``/ui/nodes``: nodes grouped by partition, one small cell each, filtered.

Built from the nodes snapshot (no Slurm query). At 5,000 nodes the work per page is one
pass over the nodes and a join of prebuilt strings: each node's cell (a link coloured by
its condition, its name and state in the title, which is also the link's accessible name)
is made once per node state (:func:`node_entries`) and reused in every partition it belongs
to and by every page view until the node changes.

Grouping rule: a node in several partitions appears under each of them (a node in none
under "(no partition)"); the overall counts count each node once.
"""

from __future__ import annotations

import fnmatch
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from slurmtower.dashboard.data import NodeView, node_view
from slurmtower.dashboard.nodes_timeline import CONDITIONS
from slurmtower.errors import InvalidInput
from slurmtower.models import Node
from slurmtower.models.node import node_sort_key
from slurmtower.nodeset import NodeSet

__all__ = [
    "NO_PARTITION",
    "Group",
    "MapEntry",
    "MapFilter",
    "NodeMap",
    "OutOfService",
    "build_map",
    "node_entries",
    "parse_filter",
]

NO_PARTITION = "(no partition)"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-\[\],*?]*$")


@dataclass(frozen=True)
class MapFilter:
    """What ``?q=&state=&partition=`` ask for (empty: everything)."""

    q: str = ""
    states: frozenset[str] = frozenset()
    partition: str = ""
    match_name: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def active(self) -> bool:
        return bool(self.q or self.states or self.partition)


def _terms(q: str) -> list[str]:
    """``q`` split at the commas outside brackets (``n[1-3,7],gpu*`` -> two terms)."""
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in q:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t.strip() for t in terms if t.strip()]


def _name_matcher(q: str) -> Callable[[str], bool] | None:
    """Names (``n17``), hostlists (``n[1-100]``) and shell patterns (``n1*``, ``gpu?``) joined
    by commas: a name matches any term."""
    if not q:
        return None
    if len(q) > 400 or not _NAME_RE.match(q):
        raise InvalidInput("q: node names, hostlists such as n[1-100] or patterns such as n1* "
                           f"(letters, digits, _ . - [ ] , * ?), not {q[:60]!r}", param="q")
    terms = _terms(q)
    globs = [t for t in terms if "*" in t or "?" in t]
    plain = [t for t in terms if t not in globs]
    names: frozenset[str] = frozenset()
    if plain:
        try:
            names = frozenset(NodeSet(",".join(plain), param="q"))
        except InvalidInput as exc:
            raise InvalidInput(f"q: {exc.message}", param="q") from exc
    pattern = re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None
    if pattern is None:
        return names.__contains__
    return lambda name: name in names or pattern.match(name) is not None


def parse_filter(q: str | None, states: Iterable[str], partition: str | None) -> MapFilter:
    """The filter of the map's form; ``states`` may be repeated or comma-separated.

    Raises:
        InvalidInput: naming the parameter (``q``, ``state``).
    """
    q = (q or "").strip()
    wanted: set[str] = set()
    for raw in states:
        for word in raw.split(","):
            word = word.strip().lower()
            if not word:
                continue
            if word not in CONDITIONS:
                raise InvalidInput(f"state: {word[:40]!r} is not one of {', '.join(CONDITIONS)}", param="state")
            wanted.add(word)
    part = (partition or "").strip()
    if len(part) > 200:
        raise InvalidInput("partition: too long", param="partition")
    return MapFilter(q=q, states=frozenset(wanted), partition=part, match_name=_name_matcher(q))


@dataclass(frozen=True)
class Group:
    """One partition of the map."""

    name: str
    anchor: str
    size: int
    """Nodes in the partition (visible ones)."""
    shown: int
    """Nodes shown (after the filter)."""
    counts: dict[str, int]
    """Condition -> shown nodes in it."""
    cells: Markup


@dataclass(frozen=True)
class OutOfService:
    """Nodes sharing a condition, state, reason and holder (``sinfo -R``'s folding)."""

    nodes: str
    count: int
    first: str
    css: str
    state_text: str
    reason: str | None
    owner: str | None


@dataclass(frozen=True)
class NodeMap:
    groups: list[Group]
    counts: dict[str, int]
    """Condition -> shown nodes (each counted once)."""
    total: int
    """Visible nodes."""
    shown: int
    """Nodes matching the filter (each counted once)."""
    partitions: list[str]
    """Every partition name (the filter's choices)."""
    out_of_service: list[OutOfService]
    """The shown nodes that are draining, drained or down, folded."""
    filter: MapFilter


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One node as the map needs it: its view, its partitions and its cell."""

    view: NodeView
    partitions: tuple[str, ...]
    cell: Markup


_CELL = Markup('<a href="/ui/nodes/%s" class="%s" title="%s"></a>')


def _cell(view: NodeView) -> Markup:
    """The map cell of a node (``Markup``'s ``%`` escapes the name, class and title)."""
    title = f"{view.name}: {view.css}"
    if view.state_text.lower() != view.css:
        title += f" ({view.state_text})"
    if view.reason:
        title += f", reason: {view.reason}"
        if view.owner:
            title += f", held by {view.owner}"
    return _CELL % (view.name, view.css, title)


def _entry(node: Node) -> MapEntry:
    view = node_view(node)
    return MapEntry(view=view, partitions=tuple(node.partitions), cell=_cell(view))


#: What a node's entry depends on -> the entry. The models are new with every snapshot that
#: crossed from the refresh worker, and their load and free memory change all the time, but
#: their state and reason seldom: a new snapshot costs a view only for the nodes that changed.
_ENTRIES: dict[tuple[Any, ...], MapEntry] = {}
_entries_lock = threading.Lock()


def _key(node: Node) -> tuple[Any, ...]:
    return (node.name, node.state, node.flags, node.reason, node.reason_set_by_user, tuple(node.partitions),
            node.cpus, node.alloc_cpus)


def node_entries(nodes: Sequence[Node]) -> list[MapEntry]:
    """The map entries of ``nodes`` (visible ones, in the order given)."""
    keys = [_key(n) for n in nodes]
    with _entries_lock:
        found = [_ENTRIES.get(k) for k in keys]
    made: dict[tuple[Any, ...], MapEntry] = {}
    out: list[MapEntry] = []
    for node, key, entry in zip(nodes, keys, found, strict=True):
        if entry is None:
            entry = made[key] = _entry(node)
        out.append(entry)
    if made:
        with _entries_lock:
            _ENTRIES.update(made)
            if len(_ENTRIES) > 3 * len(nodes) + 1000:  # forget states no node has any more
                keep = set(keys)
                for old in [k for k in _ENTRIES if k not in keep]:
                    del _ENTRIES[old]
    return out


def _joined(cells: list[Markup]) -> Markup:
    """Cells already escaped, joined without escaping each again (``Markup.join`` would: a
    third of the page's time at 5,000 nodes)."""
    return Markup("".join(cells))  # noqa: S704 - every part is a Markup made by _cell


def _anchor(name: str) -> str:
    return "p-" + re.sub(r"[^A-Za-z0-9_-]", "_", name)


def build_map(entries: Sequence[MapEntry], flt: MapFilter) -> NodeMap:
    """The map of ``entries`` (visible nodes, in natural name order) under ``flt``."""
    members: dict[str, list[Markup]] = {}
    sizes: dict[str, int] = {}
    per_group: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    shown = 0
    held: dict[tuple[str, str, str | None, str | None], list[str]] = {}
    match = flt.match_name
    for entry in entries:
        view, cell = entry.view, entry.cell
        parts = entry.partitions or (NO_PARTITION,)
        for p in parts:
            sizes[p] = sizes.get(p, 0) + 1
        if (flt.states and view.css not in flt.states) or (match is not None and not match(view.name)):
            continue
        if flt.partition and flt.partition not in parts:
            continue
        shown += 1
        counts[view.css] = counts.get(view.css, 0) + 1
        if view.css in ("draining", "drained", "down"):
            held.setdefault((view.css, view.state_text, view.reason, view.owner), []).append(view.name)
        for p in parts:
            if flt.partition and p != flt.partition:
                continue
            members.setdefault(p, []).append(cell)
            group = per_group.setdefault(p, {})
            group[view.css] = group.get(view.css, 0) + 1
    names = sorted(sizes, key=lambda p: (p == NO_PARTITION, node_sort_key(p)))
    groups = [Group(name=p, anchor=_anchor(p), size=sizes[p], shown=len(members[p]), counts=per_group[p],
                    cells=_joined(members[p]))
              for p in names if p in members]
    folded = []
    for (css, text, reason, owner), hosts in held.items():
        folded.append(OutOfService(nodes=str(NodeSet(hosts)), count=len(hosts), first=hosts[0], css=css,
                                   state_text=text, reason=reason, owner=owner))
    folded.sort(key=lambda o: node_sort_key(o.first))
    return NodeMap(groups=groups, counts=counts, total=len(entries), shown=shown,
                   partitions=[p for p in names if p != NO_PARTITION], out_of_service=folded, filter=flt)
