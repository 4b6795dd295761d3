"""Compact snapshot tables: 100,000 jobs or 5,000 nodes kept as bytes plus a few columns.

A pydantic :class:`~slurmtower.models.Job` costs about 4 KB of memory; 100,000 of them
(a real queue) would take 400 MB and over a second to build. A snapshot table keeps, per
row, its JSON (the model's shape, default fields left out) and the handful of columns the
live filters need (user, account, partition, state, name, nodes), so:

* a page or a filtered list is the join of the rows' bytes (no serialization per request);
* a filter is a lookup in an index built once per snapshot (value -> row numbers);
* readers that need models (``/usage``, the load archiver, the dashboard) build them only
  for the rows they use (:meth:`JobTable.jobs`, :meth:`JobTable.active`).

Rows are kept in a stable order (job id; node name in natural order) so that keyset
paging (``cursor`` = the last key of the previous page) stays correct across refreshes.
Nothing here does I/O.
"""

from __future__ import annotations

import bisect
import operator
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_core import from_json, to_json

from slurmtower.models.job import Job, JobState
from slurmtower.models.node import Node, node_sort_key
from slurmtower.nodeset import NodeSet

__all__ = ["JobTable", "NodeTable", "QueueDelta", "StateDelta", "job_fragment", "node_fragment"]


def job_fragment(job: Job) -> bytes:
    """The JSON of one job as tables store it (fields at their default are left out)."""
    return Job.__pydantic_serializer__.to_json(job, exclude_defaults=True)


def node_fragment(node: Node) -> bytes:
    """The JSON of one node as tables store it (fields at their default are left out)."""
    return Node.__pydantic_serializer__.to_json(node, exclude_defaults=True)


class _Table:
    """Rows of JSON bytes with parallel columns and lazily built indexes."""

    __slots__ = ("__weakref__", "_indexes", "_lock", "_positions", "columns", "fragments", "keys")
    _COLUMNS: tuple[str, ...] = ()

    def __init__(self, keys: Sequence[Any], fragments: Sequence[bytes], columns: Mapping[str, Sequence[Any]]) -> None:
        if set(columns) != set(self._COLUMNS):
            raise ValueError(f"columns must be {self._COLUMNS}, not {tuple(columns)}")
        if any(len(c) != len(keys) for c in columns.values()) or len(fragments) != len(keys):
            raise ValueError("every column needs one value per row")
        self.keys: tuple[Any, ...] = tuple(keys)
        self.fragments: tuple[bytes, ...] = tuple(fragments)
        self.columns: dict[str, tuple[Any, ...]] = {k: tuple(v) for k, v in columns.items()}
        self._indexes: dict[str, dict[Any, Sequence[int]]] = {}
        self._lock = threading.Lock()
        self._positions: dict[Any, int] | None = None

    # pickling: the indexes are rebuilt on the other side when asked (they are derived).
    def __getstate__(self) -> dict[str, Any]:
        return {"keys": self.keys, "fragments": self.fragments, "columns": self.columns}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.keys, self.fragments, self.columns = state["keys"], state["fragments"], state["columns"]
        self._indexes, self._lock, self._positions = {}, threading.Lock(), None

    def __len__(self) -> int:
        return len(self.keys)

    def positions(self) -> dict[Any, int]:
        """``key -> row number`` (built once per table)."""
        found = self._positions
        if found is None:
            found = self._positions = {k: i for i, k in enumerate(self.keys)}
        return found

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and isinstance(other, _Table) and self.keys == other.keys
                and self.fragments == other.fragments)

    def __hash__(self) -> int:
        return hash((type(self), self.keys))

    #: Columns whose values are sets (a row is indexed under each member).
    _SET_COLUMNS: frozenset[str] = frozenset()
    #: Columns whose values are comma-separated lists (``"batch,short"``: indexed under each).
    _LIST_COLUMNS: frozenset[str] = frozenset()

    def index(self, column: str) -> dict[Any, Sequence[int]]:
        """``value -> sorted row numbers`` for ``column``, built once per table (the row
        numbers in 4-byte arrays: a list of 100,000 ints costs ten times as much)."""
        found = self._indexes.get(column)
        if found is not None:
            return found
        with self._lock:
            found = self._indexes.get(column)
            if found is None:
                lists: dict[Any, list[int]] = {}
                values = self.columns[column]
                if column in self._SET_COLUMNS:
                    for row, members in enumerate(values):
                        for value in members:
                            lists.setdefault(value, []).append(row)
                elif column in self._LIST_COLUMNS:
                    for row, value in enumerate(values):
                        for part in (value.split(",") if value and "," in value else (value,)):
                            lists.setdefault(part, []).append(row)
                else:
                    for row, value in enumerate(values):
                        lists.setdefault(value, []).append(row)
                found = {value: array("I", rows) for value, rows in lists.items()}
                self._indexes[column] = found
        return found

    def rows_where(self, column: str, values: Collection[Any]) -> list[int]:
        """Sorted row numbers whose ``column`` holds any of ``values``."""
        index = self.index(column)
        if len(values) == 1:
            return list(index.get(next(iter(values)), ()))
        merged: set[int] = set()
        for value in values:
            merged.update(index.get(value, ()))
        return sorted(merged)

    def select(self, **filters: Collection[Any] | None) -> Sequence[int]:
        """Sorted row numbers matching every given filter (a filter is a set of accepted
        values for one column; ``None`` or absent: no filter)."""
        rows: list[int] | None = None
        # The most selective filter first, then intersect.
        wanted = sorted(((c, v) for c, v in filters.items() if v is not None),
                        key=lambda cv: sum(len(self.index(cv[0]).get(x, ())) for x in cv[1]))
        for column, values in wanted:
            if rows is not None and not rows:
                break
            found = self.rows_where(column, values)
            rows = found if rows is None else sorted(set(rows).intersection(found))
        return range(len(self.keys)) if rows is None else rows

    def after(self, rows: Sequence[int], key: Any) -> int:
        """Position in ``rows`` of the first row whose key sorts after ``key``."""
        sort_key = self.sort_key
        if key is None:
            return 0
        return bisect.bisect_right(rows, sort_key(key), key=lambda r: sort_key(self.keys[r]))

    @staticmethod
    def sort_key(key: Any) -> Any:
        return key

    def json_array(self, rows: Iterable[int]) -> bytes:
        """``[row, row, ...]`` as JSON bytes."""
        frags = self.fragments
        return b"[" + b",".join(frags[r] for r in rows) + b"]"

    def all_json(self) -> bytes:
        return b"[" + b",".join(self.fragments) + b"]"


@dataclass(frozen=True)
class QueueDelta:
    """The queue as it changed since the previous read: every job id, in order, and the rows
    of the jobs that are new or changed (all rows when ``full``).

    What crosses from the refresh worker to the serving process: at 100,000 held jobs a
    read that changed one job sends 100,000 ids and one row, not 45 MB of JSON.
    """

    keys: tuple[int, ...]
    rows: dict[int, tuple[bytes, tuple[Any, ...]]]
    """job id -> (JSON, columns in :attr:`JobTable._COLUMNS` order)."""
    full: bool = False
    unchanged: bool = False
    """Slurm printed exactly what it printed last time (``keys`` and ``rows`` are empty)."""
    seq: int = 0
    """This read's number; :attr:`base` is the one it is relative to."""
    base: int = 0


@dataclass(frozen=True)
class StateDelta:
    """Job states read alone (23.11+: ``squeue --only-job-state``), as they changed since the
    reader's previous read (every job when ``full``): job id -> squeue's state text
    (``RUNNING``, ``COMPLETING`` ...). What a state read sends to the process that holds the
    queue; ids are the queue table's keys (a pending array's record is its array job id)."""

    states: dict[int, str]
    full: bool = False
    count: int = 0
    """Jobs in this read."""


class JobTable(_Table):
    """The job queue: one row per job record slurmctld holds, ordered by job id.

    Columns: ``user``, ``account``, ``partition`` (as Slurm gives it; a pending job may name
    several, ``"batch,short"``: it is indexed under each), ``state`` (the base state's
    value), ``name``, ``nodes`` (a set of node names, empty while pending) and ``line``
    (the hash of the squeue line the row was read from, so that a new refresh worker can
    tell unchanged lines without parsing them; ``None`` for rows made from models).
    """

    __slots__ = ("_active",)
    _COLUMNS = ("user", "account", "partition", "state", "name", "nodes", "line")
    _SET_COLUMNS = frozenset({"nodes"})
    _LIST_COLUMNS = frozenset({"partition"})

    def __init__(self, keys: Sequence[int], fragments: Sequence[bytes], columns: Mapping[str, Sequence[Any]]) -> None:
        super().__init__(keys, fragments, columns)
        self._active: list[Job] | None = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._active = None

    @classmethod
    def from_jobs(cls, jobs: Iterable[Job]) -> JobTable:
        """A table of ``jobs`` (any order; a job id seen twice keeps its last record)."""

        by_id = {j.job_id: j for j in jobs}
        ordered = [by_id[k] for k in sorted(by_id)]
        return cls(
            [j.job_id for j in ordered],
            [job_fragment(j) for j in ordered],
            {
                "user": [j.user_name for j in ordered],
                "account": [j.account for j in ordered],
                "partition": [j.partition for j in ordered],
                "state": [j.state.value for j in ordered],
                "name": [j.name for j in ordered],
                "nodes": [frozenset(NodeSet(j.nodes)) if j.nodes else frozenset() for j in ordered],
                "line": [None] * len(ordered),
            },
        )

    @classmethod
    def from_rows(cls, keys: Sequence[int], rows: Sequence[tuple[bytes, tuple[Any, ...]]]) -> JobTable:
        """A table of ``rows`` (JSON, columns), ``keys`` their job ids in order."""
        return cls(keys, [r[0] for r in rows],
                   {name: [r[1][i] for r in rows] for i, name in enumerate(cls._COLUMNS)})

    @classmethod
    def from_delta(cls, delta: QueueDelta) -> JobTable:
        """The table of a full delta.

        Raises:
            ValueError: ``delta`` is not full.
        """
        if not delta.full:
            raise ValueError("a table can only be made from a full delta")
        return cls.from_rows(delta.keys, [delta.rows[k] for k in delta.keys])

    def apply(self, delta: QueueDelta) -> JobTable:
        """This table brought up to ``delta`` (a full delta replaces it; unchanged is itself).

        Raises:
            ValueError: a job of ``delta.keys`` is neither in ``delta.rows`` nor here.
        """
        if delta.unchanged:
            return self
        if delta.full:
            return JobTable.from_delta(delta)
        if delta.keys == self.keys:
            # The same jobs, a few rows changed (the usual refresh): copy the columns (C
            # speed) and patch those rows, instead of a Python loop over 100,000.
            frags: list[bytes] = list(self.fragments)
            cols: dict[str, list[Any]] = {c: list(self.columns[c]) for c in self._COLUMNS}
            for key, (fragment, values) in delta.rows.items():
                i = bisect.bisect_left(self.keys, key)
                if i == len(self.keys) or self.keys[i] != key:
                    raise ValueError(f"job {key} of the delta is not in the table")
                frags[i] = fragment
                for c, value in zip(self._COLUMNS, values, strict=True):
                    cols[c][i] = value
            return JobTable(self.keys, frags, cols)
        # Jobs came and went: each column gathered by position in C (itemgetter), then the
        # new and changed rows patched: tens of ms at 80,000 rows where a row-by-row rebuild
        # held the serving process's GIL for ~200 ms.
        keys = delta.keys
        if not keys:
            return JobTable((), (), {c: () for c in self._COLUMNS})
        where = self.positions()
        at = [where.get(k, -1) for k in keys]
        for i in (i for i, p in enumerate(at) if p < 0):
            if keys[i] not in delta.rows:
                raise ValueError(f"job {keys[i]} is neither in the delta nor in the table")
            at[i] = 0  # a placeholder: the delta's row is patched in below
        if not self.keys:
            frags = [b""] * len(keys)
            cols = {c: [None] * len(keys) for c in self._COLUMNS}
        else:
            getter = operator.itemgetter(*at)
            if len(at) == 1:
                frags = [getter(self.fragments)]
                cols = {c: [getter(self.columns[c])] for c in self._COLUMNS}
            else:
                frags = list(getter(self.fragments))
                cols = {c: list(getter(self.columns[c])) for c in self._COLUMNS}
        for key, (fragment, values) in delta.rows.items():
            i = bisect.bisect_left(keys, key)
            if i == len(keys) or keys[i] != key:
                continue  # a row of a job that left the queue since
            frags[i] = fragment
            for c, value in zip(self._COLUMNS, values, strict=True):
                cols[c][i] = value
        return JobTable(keys, frags, cols)

    def hiding(self, hidden: Collection[str]) -> JobTable:
        """This table without jobs of hidden partitions; a pending job that names several
        partitions keeps the visible ones (its JSON is rewritten)."""
        if not hidden:
            return self
        keys: list[int] = []
        frags: list[bytes] = []
        cols: dict[str, list[Any]] = {c: [] for c in self._COLUMNS}
        partitions = self.columns["partition"]
        for row, key in enumerate(self.keys):
            part: str | None = partitions[row]
            parts = part.split(",") if part else []
            shown = [p for p in parts if p not in hidden]
            if parts and not shown:
                continue
            frag = self.fragments[row]
            keys.append(key)
            for c in self._COLUMNS:
                cols[c].append(self.columns[c][row])
            if len(shown) != len(parts):
                visible = ",".join(shown)
                frag = job_fragment(Job.model_validate_json(frag).model_copy(update={"partition": visible}))
                cols["partition"][-1] = visible
            frags.append(frag)
        return JobTable(keys, frags, cols)

    def with_states(self, states: Mapping[int, tuple[str, tuple[str, ...]]], as_of: str) -> JobTable:
        """This table with the state of the jobs in ``states`` (job id -> (base state, flags),
        read after the rows: a state read) put in their rows, each of those rows marked
        ``state_as_of`` (the ISO time of that read; its other fields are as of the table's
        read). Jobs not here are skipped. The columns are copied at C speed and the rows
        patched: a few ms at 100,000 rows for a few hundred changed."""
        if not states:
            return self
        where = self.positions()
        frags: list[bytes] = list(self.fragments)
        state_col: list[Any] = list(self.columns["state"])
        for job_id, (base, flags) in states.items():
            row = where.get(job_id)
            if row is None:
                continue
            doc = from_json(frags[row])
            doc["state"] = base
            if flags:
                doc["state_flags"] = list(flags)
            else:
                doc.pop("state_flags", None)
            doc["state_as_of"] = as_of
            frags[row] = to_json(doc)
            state_col[row] = base
        return JobTable(self.keys, frags, {**self.columns, "state": state_col})

    def jobs(self, rows: Iterable[int] | None = None) -> list[Job]:
        """The :class:`Job` models of ``rows`` (all rows when ``None``: costly for big queues)."""
        frags = self.fragments
        chosen: Iterable[int] = range(len(frags)) if rows is None else rows
        return [Job.model_validate_json(frags[r]) for r in chosen]

    def active(self) -> list[Job]:
        """Running and suspended jobs as models (built once per table): what ``/usage`` needs."""
        if self._active is None:
            rows = self.select(state={JobState.RUNNING.value, JobState.SUSPENDED.value})
            self._active = self.jobs(rows)
        return self._active

    def line_memo(self) -> dict[int, int]:
        """``line hash -> job id`` of the rows read from squeue lines (what a new refresh
        worker starts from)."""
        return {h: k for k, h in zip(self.keys, self.columns["line"], strict=True) if h is not None}

    def count_by(self, *columns: str) -> Counter[tuple[Any, ...]]:
        """How many rows hold each combination of ``columns``' values."""
        cols = [self.columns[c] for c in columns]
        return Counter(zip(*cols, strict=True))

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs())


class NodeTable(_Table):
    """Nodes in natural name order (``n2`` before ``n10``).

    Columns: ``name``, ``state`` (a set: the base state's value and every flag, so
    ``state=DRAIN`` and ``state=IDLE`` both find an ``IDLE+DRAIN`` node) and ``partition``
    (a set of partition names).
    """

    __slots__ = ("_models",)
    _COLUMNS = ("name", "state", "partition")
    _SET_COLUMNS = frozenset({"state", "partition"})

    def __init__(self, keys: Sequence[str], fragments: Sequence[bytes], columns: Mapping[str, Sequence[Any]]) -> None:
        super().__init__(keys, fragments, columns)
        self._models: list[Node] | None = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._models = None

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node], fragment: Callable[[Node], bytes] = node_fragment) -> NodeTable:
        """A table of ``nodes``; ``fragment`` may be a memo of :func:`node_fragment`."""
        ordered = sorted({n.name: n for n in nodes}.values(), key=lambda n: NodeTable.sort_key(n.name))
        table = cls(
            [n.name for n in ordered],
            [fragment(n) for n in ordered],
            {
                "name": [n.name for n in ordered],
                "state": [frozenset({n.state.value, *n.flags}) for n in ordered],
                "partition": [frozenset(n.partitions) for n in ordered],
            },
        )
        table._models = ordered
        return table

    def with_states(self, states: Mapping[str, Node], as_of: str) -> NodeTable:
        """This table with the state, flags and reason of the nodes in ``states`` (name ->
        the node as a state poll gave it: the sensor's) put in their rows, each marked
        ``state_as_of`` (the ISO time of that poll). Nodes not here are skipped."""
        if not states:
            return self
        where = self.positions()
        frags: list[bytes] = list(self.fragments)
        state_col: list[Any] = list(self.columns["state"])
        for name, node in states.items():
            row = where.get(name)
            if row is None:
                continue
            doc = from_json(frags[row])
            doc["state"] = node.state.value
            for field_name in ("flags", "reason", "reason_set_by_user", "reason_changed_at"):
                value = getattr(node, field_name)
                if value:
                    doc[field_name] = sorted(value) if field_name == "flags" else value
                else:
                    doc.pop(field_name, None)
            doc["state_as_of"] = as_of
            frags[row] = to_json(doc)
            state_col[row] = frozenset({node.state.value, *node.flags})
        return NodeTable(self.keys, frags, {**self.columns, "state": state_col})

    def nodes(self) -> list[Node]:
        """The :class:`Node` models, in table order (built from the JSON once per table when
        the table crossed from the refresh worker, and kept with it: the pages that read
        them again and again)."""
        models = self._models
        if models is None:
            with self._lock:
                models = self._models
                if models is None:
                    models = self._models = self.fresh_nodes()
        return models

    def fresh_nodes(self) -> list[Node]:
        """The :class:`Node` models made now and not kept (those :meth:`nodes` made, if any):
        for a reader once a minute (the load archiver), whose 5,000 models (20 MB) would
        otherwise live as long as the snapshot."""
        return self._models if self._models is not None else [Node.model_validate_json(f) for f in self.fragments]

    def __getstate__(self) -> dict[str, Any]:
        return super().__getstate__()  # the models stay behind: they are rebuilt from the JSON

    @staticmethod
    def sort_key(key: Any) -> Any:
        return node_sort_key(key)

    def rows_of(self, names: Iterable[str]) -> list[int]:
        """Sorted row numbers of the nodes named (unknown names are skipped)."""
        pos = self.positions()
        return sorted({pos[n] for n in names if n in pos})
