"""slurmtower's own store: one way to open it, whatever keeps it.

Events, the audit log, executions and the load archive live in one SQLAlchemy database
(``settings.effective_store_url()``: SQLite under ``state_dir`` by default, any URL). The
CLI, several API workers and the sensor write to it concurrently, so SQLite gets WAL, a
busy timeout and ``BEGIN IMMEDIATE`` (a deferred transaction that later writes can
deadlock against another writer; two workers racing for the archiver lease must not both
read then write).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from slurmtower.errors import ConfigError

#: How long a new connection waits for the store's lock (SQLite's busy timeout, seconds).
_SQLITE_TIMEOUT = 30.0

#: Execution options of a read-only transaction (SQLite: a deferred BEGIN, no write lock).
READ_ONLY = {"slurmtower_read_only": True}

__all__ = ["READ_ONLY", "make_store_engine", "memory_sqlite", "sqlite_file"]


def sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL (``None``: another backend, or in memory)."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(str(url.database))


def memory_sqlite(url: URL) -> bool:
    """An in-memory SQLite database: one connection, shared by every thread."""
    return url.get_backend_name() == "sqlite" and sqlite_file(url) is None


#: The process's engine of each store (by URL): every part (events, actions, the archive, the
#: elections) shares one pool per store. In-memory SQLite is never shared (each is its own database).
_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def make_store_engine(url: str) -> Engine:
    """The process's engine on slurmtower's own store at ``url`` (one per store and process;
    an in-memory SQLite URL gets a new database each call). Raises :class:`ConfigError` for a
    bad URL."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"store_url is not a database URL: {exc}", key="store_url") from exc
    if memory_sqlite(parsed):
        return _new_engine(parsed)
    key = parsed.render_as_string(hide_password=False)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None or engine.pool is None:
            engine = _ENGINES[key] = _new_engine(parsed)
        return engine


def _new_engine(parsed: URL) -> Engine:
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    path = sqlite_file(parsed)
    memory = path is None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The store holds the callback key, the audit log and who did what: readable by
        # its owner only (SQLite gives its -wal and -shm files the same mode).
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": _SQLITE_TIMEOUT}}
    if memory:  # one shared connection, or every checkout would see a fresh empty database
        kwargs["poolclass"] = StaticPool
    engine = create_engine(parsed, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # SQLAlchemy's "begin" event below issues BEGIN itself (pysqlite's implicit BEGIN
        # is deferred).
        dbapi_conn.isolation_level = None
        if not memory:
            cur = dbapi_conn.cursor()
            _set_wal(cur)
            # one fsync per checkpoint, not per record: a crash may lose the last records,
            # never corrupt the file
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A writer takes the write lock at once (two read-then-write transactions would
        # deadlock otherwise); a reader marked READ_ONLY takes none.
        read_only = conn.get_execution_options().get("slurmtower_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _set_wal(cur: sqlite3.Cursor) -> None:
    """``PRAGMA journal_mode=WAL``, waiting out other connections. On a new file, where
    several processes open the store at once, SQLite answers "database is locked" at once,
    without calling its busy handler, while another connection switches the mode."""
    deadline = time.monotonic() + _SQLITE_TIMEOUT
    delay = 0.005
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
