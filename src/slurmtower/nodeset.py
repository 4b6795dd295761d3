"""Node sets: the one module through which every node expression passes.

A thin layer over ClusterShell's :class:`~ClusterShell.NodeSet.NodeSet` that keeps zero
padding (``n[01-03]``), refuses ``@group`` syntax for user input (no group resolution
of untrusted strings), and names the bad fragment when an expression is malformed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from ClusterShell.NodeSet import NodeSet as _CSNodeSet
from ClusterShell.NodeSet import NodeSetParseError, RangeSetParseError

from slurmtower.errors import NodeSetError

__all__ = ["MAX_NODES", "SYNTAX", "NodeSet", "parse_nodeset", "split_outside_brackets"]

#: Refuse absurd expansions (``n[1-99999999]``) before they eat memory.
MAX_NODES = 100_000

_ALLOWED = re.compile(r"^[A-Za-z0-9_.\-\[\],]+$")
#: A node set expression's characters (names, ``[`` ``]`` ranges, ``,``), no item starting with
#: ``-`` (a command would read it as an option): the pattern an API declares. What else it must
#: be (brackets that match, ascending ranges, at most :data:`MAX_NODES` nodes) is checked when it
#: is parsed.
SYNTAX = re.compile(r"^[A-Za-z0-9_.\[\]][A-Za-z0-9_.\-\[\]]*(?:,[A-Za-z0-9_.\[\]][A-Za-z0-9_.\-\[\]]*)*$")


class NodeSet:
    """An immutable, set-like collection of node names that folds to ``n[1-4]``."""

    __slots__ = ("_ns",)

    def __init__(self, nodes: str | Iterable[str] | NodeSet | None = None, *, param: str = "nodes") -> None:
        if nodes is None:
            self._ns = _CSNodeSet()
        elif isinstance(nodes, NodeSet):
            self._ns = _CSNodeSet.fromlist(list(nodes._ns), resolver=_NO_RESOLVER)
        elif isinstance(nodes, str):
            self._ns = _parse(nodes, param)
        else:
            ns = _CSNodeSet(resolver=_NO_RESOLVER)
            for item in nodes:
                ns.update(_parse(str(item), param))
            self._ns = ns

    @classmethod
    def _wrap(cls, ns: _CSNodeSet) -> NodeSet:
        obj = cls.__new__(cls)
        obj._ns = ns
        return obj

    def __str__(self) -> str:
        return str(self._ns)

    def __repr__(self) -> str:
        return f"NodeSet({str(self._ns)!r})"

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._ns))

    def __len__(self) -> int:
        return len(self._ns)

    def __bool__(self) -> bool:
        return len(self._ns) > 0

    def __contains__(self, node: object) -> bool:
        return isinstance(node, str) and node in self._ns

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeSet):
            return set(self._ns) == set(other._ns)
        if isinstance(other, str):
            return set(self._ns) == set(_parse(other, "nodes"))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._ns))

    def __or__(self, other: NodeSet) -> NodeSet:
        return self.union(other)

    def __and__(self, other: NodeSet) -> NodeSet:
        return self.intersection(other)

    def __sub__(self, other: NodeSet) -> NodeSet:
        return self.difference(other)

    def union(self, other: NodeSet | str | Iterable[str]) -> NodeSet:
        ns = self._ns.copy()
        ns.update(NodeSet(other)._ns)
        return NodeSet._wrap(ns)

    def intersection(self, other: NodeSet | str | Iterable[str]) -> NodeSet:
        ns = self._ns.copy()
        ns.intersection_update(NodeSet(other)._ns)
        return NodeSet._wrap(ns)

    def difference(self, other: NodeSet | str | Iterable[str]) -> NodeSet:
        ns = self._ns.copy()
        ns.difference_update(NodeSet(other)._ns)
        return NodeSet._wrap(ns)


class _NoResolver:
    """A group resolver that resolves nothing (user input never expands groups)."""

    def group_nodes(self, *_a: object, **_k: object) -> list[str]:
        return []

    def all_nodes(self, *_a: object, **_k: object) -> list[str]:
        return []

    def grouplist(self, *_a: object, **_k: object) -> list[str]:
        return []

    def has_node_groups(self, *_a: object, **_k: object) -> bool:
        return False

    def node_groups(self, *_a: object, **_k: object) -> list[str]:
        return []


_NO_RESOLVER = _NoResolver()


def _parse(text: str, param: str) -> _CSNodeSet:
    expr = text.strip()
    if not expr:
        raise NodeSetError(f"{param}: empty node set", param=param)
    if "@" in expr or "^" in expr or "!" in expr or "&" in expr or " " in expr:
        bad = next(c for c in expr if c in "@^!& ")
        what = "group syntax" if bad == "@" else "operator"
        raise NodeSetError(
            f"{param}: {what} {bad!r} is not allowed in {expr!r}; list the nodes, e.g. n[1-4]",
            param=param,
        )
    if not _ALLOWED.match(expr):
        bad = next(c for c in expr if not _ALLOWED.match(c))
        raise NodeSetError(f"{param}: invalid character {bad!r} in {expr!r}", param=param)
    _check_brackets(expr, param)
    dashed = next((f for f in split_outside_brackets(expr) if f.startswith("-")), None)
    if dashed is not None:  # Slurm's commands would take "-x" for an option
        raise NodeSetError(f"{param}: a node name does not start with '-': {dashed!r}", param=param)
    for group in re.findall(r"\[([^\]]*)\]", expr):  # ClusterShell reads n[1,-3] as n-3 and n1
        stray = next((item for item in group.split(",") if not _RANGE.match(item)), None)
        if stray is not None:
            raise NodeSetError(f"{param}: {stray!r} is no range in {expr!r} (n[1-4,7])", param=param)
    named = _named_count(expr)
    if named > MAX_NODES:  # before expanding: n[1-99999999] would take ClusterShell many seconds
        raise NodeSetError(f"{param}: {expr!r} expands to {named} nodes (max {MAX_NODES})", param=param)
    try:
        ns = _CSNodeSet(expr, resolver=_NO_RESOLVER)
    except (NodeSetParseError, RangeSetParseError) as exc:
        fragment = _first_bad_fragment(expr) or expr
        raise NodeSetError(f"{param}: malformed node set {expr!r} near {fragment!r}", param=param) from exc
    if len(ns) > MAX_NODES:
        raise NodeSetError(f"{param}: {expr!r} expands to {len(ns)} nodes (max {MAX_NODES})", param=param)
    return ns


_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?:/(\d+))?)?$")


def _named_count(expr: str) -> int:
    """How many names ``expr`` spells out, counted from its ranges without expanding them (a
    name in two fragments counts twice); 0 where a range does not parse (the parser says why)."""
    total = 0
    for fragment in split_outside_brackets(expr):
        count = 1
        for group in re.findall(r"\[([^\]]*)\]", fragment):
            size = 0
            for item in group.split(","):
                m = _RANGE.match(item.strip())
                if m is None:
                    return 0
                lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
                size += (hi - lo) // max(step, 1) + 1 if hi >= lo else 0
            count *= size
        total += count
    return total


def _check_brackets(expr: str, param: str) -> None:
    depth = 0
    start = 0
    for i, c in enumerate(expr):
        if c == "[":
            if depth:
                raise NodeSetError(f"{param}: nested '[' in {expr!r} near {expr[start:i+1]!r}", param=param)
            depth, start = 1, i
        elif c == "]":
            if not depth:
                raise NodeSetError(f"{param}: unmatched ']' in {expr!r} at {expr[: i + 1]!r}", param=param)
            depth = 0
    if depth:
        raise NodeSetError(f"{param}: unclosed '[' in {expr!r} near {expr[start:]!r}", param=param)


def split_outside_brackets(text: str) -> list[str]:
    """``"n[1,2],n5"`` (or ``"1,2_[3,4]"``) split on the commas outside brackets."""
    depth = 0
    start = 0
    parts: list[str] = []
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _first_bad_fragment(expr: str) -> str | None:
    """Find the first comma-separated fragment that does not parse on its own."""
    for part in split_outside_brackets(expr):
        try:
            _CSNodeSet(part, resolver=_NO_RESOLVER)
        except (NodeSetParseError, RangeSetParseError):
            return part
        if not part:
            return "(empty)"
    return None


def parse_nodeset(expr: str | Iterable[str] | NodeSet, *, param: str = "nodes") -> NodeSet:
    """Parse user input into a :class:`NodeSet`; raise :class:`NodeSetError` naming the fragment."""
    ns = NodeSet(expr, param=param)
    if not ns:
        raise NodeSetError(f"{param}: empty node set", param=param)
    return ns
