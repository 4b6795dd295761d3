"""One leader per deployment, elected through slurmtower's own store.

Every process of a deployment (``serve --workers N`` on one host, several hosts behind a
proxy) serves the API; exactly one of them, the leader, runs what must run once: the
sensor (triggers armed once), the rule engine, the load archiver, the purge. The election
uses what the deployment already runs, its store:

* **PostgreSQL**: a session-level advisory lock (``pg_try_advisory_lock``) held on one
  dedicated connection. When the leader dies, even by ``kill -9``, its connection closes
  and PostgreSQL frees the lock at once; the next follower to try (every
  ``interval`` seconds) leads. The leader checks its connection every round and steps down
  when it is gone (a database restart, a network cut: then the server frees the lock too,
  after its TCP keepalive for a cut; see docs/deployment.md).
* **SQLite** (one host): an exclusive ``flock`` on ``<database>.leader``, which the kernel
  releases when the process dies.
* An in-memory SQLite store lives in one process: that process leads.

:class:`Leadership` only elects; :class:`~slurmtower.runtime.Services` starts and
stops the leader's background tasks (``BackgroundTask.needs_leader``) when it changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import threading
import uuid
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.errors import ConfigError
from slurmtower.store.engine import sqlite_file

__all__ = ["Leadership", "process_identity"]

log = logging.getLogger(__name__)


def process_identity() -> str:
    """``host:pid:random``: names this process in events, leases and metrics."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _lock_key(name: str) -> int:
    """A signed 64-bit advisory lock key for ``name`` (stable across processes and hosts)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class Leadership:
    """Whether this process leads its deployment.

    Args:
        engine: the store's engine (the election's medium).
        name: what is led; one lock per name and PostgreSQL schema (tests run several
            deployments on one database, each in its own schema).
        schema: the store's PostgreSQL schema, if not the default.
        identity: this process's name (default :func:`process_identity`).

    :meth:`try_lead` and :meth:`still_leading` block (database, file): call them from a
    thread, not the event loop.
    """

    def __init__(self, engine: Engine, *, name: str = "leader", schema: str | None = None,
                 identity: str | None = None) -> None:
        self.engine = engine
        self.name = name
        self.identity = identity or process_identity()
        self.is_leader = False
        self.elections = 0
        """How often this process became the leader (for metrics and tests)."""
        self._lock = threading.Lock()
        url = engine.url
        self.kind: str
        self._conn: Connection | None = None
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        if url.get_backend_name() == "postgresql":
            self.kind = "postgresql"
            self._key = _lock_key(f"slurmtower:{name}:{schema or ''}")
        elif (database := sqlite_file(url)) is not None:
            self.kind = "file"
            self._path = Path(f"{database}.{name}")
        elif url.get_backend_name() == "sqlite":
            self.kind = "process"
        else:

            raise ConfigError(f"leader election needs PostgreSQL or SQLite as the store, not "
                              f"{url.get_backend_name()}", key="store_url")

    def describe(self) -> dict[str, Any]:
        return {"identity": self.identity, "leader": self.is_leader, "election": self.kind}

    def try_lead(self) -> bool:
        """Become the leader if nobody is; True when this process leads (now or already)."""
        with self._lock:
            if self.is_leader:
                return True
            if self.kind == "process":
                won = True
            elif self.kind == "file":
                won = self._try_file()
            else:
                won = self._try_pg()
            if won:
                self.is_leader = True
                self.elections += 1
                log.info("%s leads the deployment (%s election)", self.identity, self.kind)
            return won

    def still_leading(self) -> bool:
        """Check that the lock is still held; steps down (False) when it is not."""
        with self._lock:
            if not self.is_leader:
                return False
            if self.kind == "postgresql":
                # A session-level advisory lock lives as long as its session: the
                # connection answering is the lock being held.
                try:
                    assert self._conn is not None
                    self._conn.execute(text("SELECT 1")).scalar_one()
                    return True
                except SQLAlchemyError:
                    log.warning("%s lost its election connection: stepping down", self.identity)
                    self._drop_pg()
                    self.is_leader = False
                    return False
            return True

    def resign(self) -> None:
        """Give up leadership (a clean stop): the next follower leads at its next try."""
        with self._lock:
            if self.kind == "postgresql":
                if self._conn is not None and self.is_leader:
                    with contextlib.suppress(SQLAlchemyError):
                        self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
                self._drop_pg()
            elif self.kind == "file" and self._file is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(self._file, fcntl.LOCK_UN)
                self._file.close()
                self._file = None
            self.is_leader = False

    # -- PostgreSQL ---------------------------------------------------------------------

    def _try_pg(self) -> bool:
        try:
            if self._conn is None:
                conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                self._conn = conn
            won = bool(self._conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key}).scalar_one())
        except SQLAlchemyError as exc:
            log.warning("leader election: the store does not answer (%s)", type(exc).__name__)
            self._drop_pg()
            return False
        if not won:
            # Keep no idle connection per follower: a try costs one connection checkout.
            self._drop_pg()
        return won

    def _drop_pg(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.invalidate()  # never back to the pool: it may hold the lock
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    # -- file ---------------------------------------------------------------------------

    def _try_file(self) -> bool:
        assert self._path is not None
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        handle = os.fdopen(fd, "r+b")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{self.identity}\n".encode())
        handle.flush()
        self._file = handle
        return True

    def holder(self) -> str | None:
        """Who leads, when the medium tells (the lock file's content); else ``None``."""
        if self.is_leader:
            return self.identity
        if self.kind == "file" and self._path is not None:
            try:
                return self._path.read_text().strip() or None
            except OSError:
                return None
        return None
