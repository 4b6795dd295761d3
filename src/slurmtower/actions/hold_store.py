"""The ``node_holds`` table of slurmtower's store and the holds lock (see
:mod:`slurmtower.actions.holds` for what a hold is and how reads reconcile it with Slurm)."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, and_, delete, insert, or_, select, text
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.actions.holds import LOCK_TIMEOUT, Hold, HoldsBusy
from slurmtower.errors import StoreError
from slurmtower.store.engine import READ_ONLY, sqlite_file
from slurmtower.store.schema import node_holds as _table

__all__ = ["HoldStore"]

log = logging.getLogger(__name__)

# One advisory lock key for every slurmtower store of a PostgreSQL database.
_PG_KEY = 0x51A7_4D01
# Past this many nodes, read the whole table (it holds only held nodes) instead of an IN list.
_IN_LIMIT = 200
_MEMORY_LOCKS: dict[str, threading.Lock] = {}
_MEMORY_LOCKS_GUARD = threading.Lock()


def _now() -> datetime:
    return datetime.now(UTC)


class HoldStore:
    """The ``node_holds`` table of slurmtower's store (the action store's engine)."""

    def __init__(self, engine: Engine, *, cluster: str = "") -> None:
        self.engine = engine
        #: The cluster whose holds these are (the ``cluster`` column: ``''`` for the default).
        self.cluster = cluster

    # -- reading ------------------------------------------------------------------------
    def rows(self, names: Collection[str] | None = None) -> dict[str, dict[str, Hold]]:
        """The stored holds, by node and holder (of ``names`` only, when given)."""
        stmt = select(_table).where(_table.c.cluster == self.cluster)
        if names is not None:
            if not names:
                return {}
            if len(names) <= _IN_LIMIT:
                stmt = stmt.where(_table.c.node.in_(sorted(names)))
        out: dict[str, dict[str, Hold]] = {}
        with _guard("read the node holds"), self.engine.connect() as conn:
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
        with _guard("read the held nodes"), self.engine.connect() as conn:
            conn.execution_options(**READ_ONLY)
            with conn.begin():
                return set(conn.execute(select(_table.c.node).where(_table.c.cluster == self.cluster)
                                        .distinct()).scalars())

    # -- writing ------------------------------------------------------------------------
    def replace(self, holds: Mapping[str, Sequence[Hold]], *, now: datetime | None = None) -> None:
        """Make the stored holds of each node given exactly ``holds[node]`` (``[]``: none)."""
        if not holds:
            return
        at = now or _now()
        names = sorted(holds)
        rows = [{"cluster": self.cluster, "node": h.node, "holder": h.holder, "state": h.state, "reason": h.reason,
                 "since": h.since or at, "execution_id": h.execution_id, "updated_at": at}
                for name in names for h in holds[name]]
        with self.engine.begin() as conn:
            for start in range(0, len(names), _IN_LIMIT):
                conn.execute(delete(_table).where(_table.c.cluster == self.cluster,
                                                  _table.c.node.in_(names[start:start + _IN_LIMIT])))
            if rows:
                conn.execute(insert(_table), rows)

    def forget(self, stale: Mapping[str, Collection[str]], *, read_at: datetime) -> int:
        """Delete the rows ``stale`` names that were last written before ``read_at`` (when the
        Slurm data that made them stale was read); returns how many went."""
        pairs = [(node, holder) for node, holders in stale.items() for holder in holders]
        if not pairs:
            return 0
        gone = 0
        with _guard("forget stale node holds"), self.engine.begin() as conn:
            for start in range(0, len(pairs), _IN_LIMIT):
                chunk = pairs[start:start + _IN_LIMIT]
                cond = or_(*(and_(_table.c.node == n, _table.c.holder == h) for n, h in chunk))
                result = conn.execute(delete(_table).where(_table.c.cluster == self.cluster, cond,
                                                           _table.c.updated_at < read_at))
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


@contextmanager
def _guard(what: str) -> Iterator[None]:
    """A database failure as the store's error (:class:`StoreError`), its text for the log."""
    try:
        yield
    except SQLAlchemyError as exc:
        log.warning("cannot %s: %s: %s", what, type(exc).__name__, exc)
        raise StoreError(f"cannot {what}: {type(exc).__name__}") from exc


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
