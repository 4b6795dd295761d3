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

Changes are made under one lock per store (:meth:`HoldStore.lock`: a PostgreSQL advisory
lock, an ``flock`` beside a SQLite file), held from reading the nodes until their holds are
written, so two owners draining one node at once both keep their hold.

Where holds show: ``slurm.node.get`` (``holds`` per node), ``GET /nodes/holds``, the
dashboard's node boxes (their holders, from the reason). Another page reads them with::

    holds = node_holds(HoldStore(engine), nodes, read_at=when_the_nodes_were_read)
    [h.as_dict() for h in holds["n2"]]
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, and_, delete, insert, or_, select, text
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.actions.ownership import OwnerTag, ReasonPart, holds_node, outside_holder, reason_holders
from slurmtower.errors import Conflict, SlurmtowerError
from slurmtower.models import Node, NodeFlag, NodeState
from slurmtower.store.engine import READ_ONLY, sqlite_file
from slurmtower.store.schema import node_holds as _table

__all__ = ["LOCK_TIMEOUT", "Hold", "HoldStore", "HoldsBusy", "held_nodes", "node_holds", "out_since", "reconcile"]

log = logging.getLogger(__name__)

#: How long a drain, down or resume waits for another one changing holds of the same store.
LOCK_TIMEOUT = 60.0
# One advisory lock key for every slurmtower store of a PostgreSQL database.
_PG_KEY = 0x51A7_4D01
# Past this many nodes, read the whole table (it holds only held nodes) instead of an IN list.
_IN_LIMIT = 200
_MEMORY_LOCKS: dict[str, threading.Lock] = {}
_MEMORY_LOCKS_GUARD = threading.Lock()


def _now() -> datetime:
    return datetime.now(UTC)


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


class HoldStore:
    """The ``node_holds`` table of slurmtower's store (the action store's engine)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- reading ------------------------------------------------------------------------
    def rows(self, names: Collection[str] | None = None) -> dict[str, dict[str, Hold]]:
        """The stored holds, by node and holder (of ``names`` only, when given)."""
        stmt = select(_table)
        if names is not None:
            if not names:
                return {}
            if len(names) <= _IN_LIMIT:
                stmt = stmt.where(_table.c.node.in_(sorted(names)))
        out: dict[str, dict[str, Hold]] = {}
        with self.engine.connect() as conn:
            conn.execution_options(**READ_ONLY)
            with conn.begin():
                found = conn.execute(stmt).mappings().all()
        wanted = set(names) if names is not None else None
        for r in found:
            if wanted is not None and r["node"] not in wanted:
                continue
            out.setdefault(r["node"], {})[r["holder"]] = Hold(
                node=r["node"], holder=r["holder"], reason=r["reason"], since=_aware(r["since"]), state=r["state"],
                execution_id=r["execution_id"], recorded=True)
        return out

    def nodes(self) -> set[str]:
        """The nodes with a stored hold."""
        with self.engine.connect() as conn:
            conn.execution_options(**READ_ONLY)
            with conn.begin():
                return set(conn.execute(select(_table.c.node).distinct()).scalars())

    # -- writing ------------------------------------------------------------------------
    def replace(self, holds: Mapping[str, Sequence[Hold]], *, now: datetime | None = None) -> None:
        """Make the stored holds of each node given exactly ``holds[node]`` (``[]``: none)."""
        if not holds:
            return
        at = now or _now()
        names = sorted(holds)
        rows = [{"node": h.node, "holder": h.holder, "state": h.state, "reason": h.reason,
                 "since": h.since or at, "execution_id": h.execution_id, "updated_at": at}
                for name in names for h in holds[name]]
        with self.engine.begin() as conn:
            for start in range(0, len(names), _IN_LIMIT):
                conn.execute(delete(_table).where(_table.c.node.in_(names[start:start + _IN_LIMIT])))
            if rows:
                conn.execute(insert(_table), rows)

    def forget(self, stale: Mapping[str, Collection[str]], *, read_at: datetime) -> int:
        """Delete the rows ``stale`` names that were last written before ``read_at`` (when the
        Slurm data that made them stale was read); returns how many went."""
        pairs = [(node, holder) for node, holders in stale.items() for holder in holders]
        if not pairs:
            return 0
        gone = 0
        with self.engine.begin() as conn:
            for start in range(0, len(pairs), _IN_LIMIT):
                chunk = pairs[start:start + _IN_LIMIT]
                cond = or_(*(and_(_table.c.node == n, _table.c.holder == h) for n, h in chunk))
                result = conn.execute(delete(_table).where(cond, _table.c.updated_at < read_at))
                gone += int(result.rowcount or 0)
        return gone

    # -- the lock -----------------------------------------------------------------------
    @contextmanager
    def lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        """Hold the store's holds lock (every process of the deployment: PostgreSQL's
        advisory lock, an ``flock`` beside a SQLite file, a thread lock for an in-memory
        store). :class:`HoldsBusy` after ``timeout`` seconds."""
        url = self.engine.url
        deadline = time.monotonic() + timeout
        if url.get_backend_name() == "postgresql":
            with self._pg_lock(deadline, timeout):
                yield
            return
        database = sqlite_file(url)
        if database is not None:
            with _file_lock(Path(f"{database}.holds-lock"), deadline, timeout):
                yield
            return
        key = url.render_as_string(hide_password=False) + f"#{id(self.engine.pool)}"
        with _MEMORY_LOCKS_GUARD:
            mem = _MEMORY_LOCKS.setdefault(key, threading.Lock())
        if not mem.acquire(timeout=timeout):
            raise _busy(timeout)
        try:
            yield
        finally:
            mem.release()

    @contextmanager
    def _pg_lock(self, deadline: float, timeout: float) -> Iterator[None]:
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            while not conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": _PG_KEY}).scalar():
                if time.monotonic() > deadline:
                    raise _busy(timeout)
                time.sleep(0.05)
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _PG_KEY})


def _busy(timeout: float) -> HoldsBusy:
    return HoldsBusy(f"another drain, down or resume has been changing node holds for {timeout:g} s: try again")


@contextmanager
def _file_lock(path: Path, deadline: float, timeout: float) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _busy(timeout) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def held_nodes(store: HoldStore) -> set[str]:
    """The nodes with a stored hold; none when the store cannot be read (logged), as
    :func:`node_holds` then takes the holds from Slurm's reasons alone."""
    try:
        return store.nodes()
    except SQLAlchemyError as exc:
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
    except SQLAlchemyError as exc:
        log.warning("node holds: the store cannot be read (%s): holds from Slurm's reasons only", exc)
        return reconcile(nodes, {})[0]
    holds, stale = reconcile(nodes, rows)
    if stale:
        try:
            gone = store.forget(stale, read_at=read_at)
        except (SQLAlchemyError, SlurmtowerError) as exc:
            log.warning("node holds: stale rows not deleted (%s)", exc)
        else:
            if gone:
                log.info("node holds: %d stored hold(s) Slurm no longer shows forgotten: %s", gone,
                         ", ".join(f"{n} {sorted(h)}" for n, h in sorted(stale.items())))
    return holds
