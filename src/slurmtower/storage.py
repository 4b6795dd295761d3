"""slurmtower's own store: one way to open it, whatever keeps it.

Events, the audit log, executions and the load archive live in one SQLAlchemy database
(``settings.effective_store_url()``: SQLite under ``state_dir`` by default, any URL). The
CLI, several API workers and the sensor write to it concurrently, so SQLite gets WAL, a
busy timeout and ``BEGIN IMMEDIATE`` (a deferred transaction that later writes can
deadlock against another writer; two workers racing for the archiver lease must not both
read then write).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from slurmtower.errors import ConfigError

__all__ = ["make_store_engine"]


def make_store_engine(url: str) -> Engine:
    """An engine on slurmtower's own store. Raises :class:`ConfigError` for a bad URL."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"store_url is not a database URL: {exc}", key="store_url") from exc
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    memory = parsed.database in (None, "", ":memory:")
    if not memory:
        Path(str(parsed.database)).parent.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
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
            cur.execute("PRAGMA journal_mode=WAL")
            # one fsync per checkpoint, not per record: a crash may lose the last records,
            # never corrupt the file
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
