"""The store's one schema and its migrations, on real SQLite files and real PostgreSQL schemas.

A store made by slurmtower 0.1 (built here from a frozen copy of that release's table
definitions) is refused at start until ``slurmtower db upgrade`` (the real CLI) upgrades
it, keeping every row; a store newer than this slurmtower is refused; an empty store is
created at the head; concurrent upgrades make one schema; the migrations' head is exactly
:data:`slurmtower.store.schema.metadata`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    insert,
    inspect,
    text,
    update,
)
from sqlalchemy.exc import OperationalError
from sqlalchemy.types import TypeDecorator

from slurmtower.actions.store import ActionStore
from slurmtower.api import create_app
from slurmtower.errors import StoreSchemaError
from slurmtower.events.store import EventStore
from slurmtower.live.archive import LoadArchive
from slurmtower.models.event import NODE_STATE, Event
from slurmtower.settings import Settings
from slurmtower.store import migrate
from slurmtower.store.engine import make_store_engine
from slurmtower.store.revision import HEAD_REVISION
from slurmtower.store.schema import TABLE_NAMES, metadata

PG_URL = "postgresql+psycopg://postgres@127.0.0.1/test"
SLURMTOWER = str(Path(sys.executable).with_name("slurmtower"))
HEAD = "0009_requests_reservations"
PREVIOUS = "0004_node_holds"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# -- slurmtower 0.1's schema, frozen: its three create_all, copied from that release -------


class _ReleasedUTCDateTime(TypeDecorator[datetime]):
    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value


def released_metadata() -> list[MetaData]:
    """The three MetaData objects of slurmtower 0.1 (events.store, actions.store, routes.load)."""
    _id = BigInteger().with_variant(Integer(), "sqlite")
    ev = MetaData()
    Table("events", ev,
          Column("id", _id, primary_key=True, autoincrement=True),
          Column("type", String(200), nullable=False),
          Column("time", _ReleasedUTCDateTime(), nullable=False),
          Column("source", String(32), nullable=False),
          Column("node", String(255), nullable=True),
          Column("payload", JSON(), nullable=False),
          Index("ix_events_time", "time"),
          Index("ix_events_type_id", "type", "id"),
          Index("ix_events_node_id", "node", "id"),
          sqlite_autoincrement=True)
    Table("node_states", ev,
          Column("node", String(255), primary_key=True),
          Column("state", String(64), nullable=False),
          Column("flags", JSON(), nullable=False),
          Column("reason", Text(), nullable=True),
          Column("reason_owner", String(255), nullable=True),
          Column("observed_at", _ReleasedUTCDateTime(), nullable=False))
    Table("callback_nonces", ev,
          Column("nonce", String(128), primary_key=True),
          Column("expires_at", _ReleasedUTCDateTime(), nullable=False),
          Index("ix_callback_nonces_expires_at", "expires_at"))
    Table("rule_runs", ev,
          Column("id", _id, primary_key=True, autoincrement=True),
          Column("rule", String(255), nullable=False),
          Column("event_id", BigInteger(), nullable=True),
          Column("node", String(255), nullable=True),
          Column("action_ref", String(255), nullable=False),
          Column("started_at", _ReleasedUTCDateTime(), nullable=False),
          Column("ended_at", _ReleasedUTCDateTime(), nullable=False),
          Column("outcome", String(32), nullable=False),
          Column("envelope", JSON(), nullable=False),
          Index("ix_rule_runs_rule_started", "rule", "started_at"),
          Index("ix_rule_runs_event_id", "event_id"),
          sqlite_autoincrement=True)
    Table("event_cursors", ev,
          Column("name", String(100), primary_key=True),
          Column("last_id", BigInteger(), nullable=False),
          Column("updated_at", _ReleasedUTCDateTime(), nullable=False))
    act = MetaData()
    Table("action_executions", act,
          Column("execution_id", String(64), primary_key=True),
          Column("action", String(64), nullable=False),
          Column("status", String(16), nullable=False),
          Column("principal", String(255), nullable=False),
          Column("via", String(8), nullable=False),
          Column("dry_run", Boolean, nullable=False, default=False),
          Column("started_at", DateTime(timezone=True), nullable=False),
          Column("ended_at", DateTime(timezone=True), nullable=False),
          Column("envelope", Text, nullable=False))
    Table("action_audit", act,
          Column("seq", Integer, primary_key=True, autoincrement=True),
          Column("execution_id", String(64), nullable=False),
          Column("at", DateTime(timezone=True), nullable=False),
          Column("who", String(255), nullable=False),
          Column("via", String(8), nullable=False),
          Column("action", String(64), nullable=False),
          Column("parameters", JSON, nullable=False),
          Column("nodes", Text, nullable=True),
          Column("before", JSON, nullable=False),
          Column("after", JSON, nullable=False),
          Column("outcome", String(16), nullable=False),
          Column("message", Text, nullable=False, default=""),
          Index("ix_action_audit_who", "who"),
          Index("ix_action_audit_action", "action"))
    load = MetaData()
    Table("load_samples", load,
          Column("id", Integer, primary_key=True, autoincrement=True),
          Column("ts", Float, nullable=False, index=True),
          Column("holder", String(200), nullable=False),
          Column("sample", Text, nullable=False),
          sqlite_autoincrement=True)
    Table("leases", load,
          Column("name", String(100), primary_key=True),
          Column("holder", String(200), nullable=False),
          Column("expires_at", Float, nullable=False))
    return [ev, act, load]


def sample_json(ts: float) -> str:
    return json.dumps({
        "time": datetime.fromtimestamp(ts, UTC).isoformat(), "timestamp": ts, "cpus_total": 8, "cpus_used": 1,
        "memory_total_mib": 8000, "memory_used_mib": 100, "jobs_running": 1, "jobs_pending": 0,
        "nodes_total": 4, "nodes_by_state": {"IDLE": 4}, "partitions": {}, "archiver": "old",
    })


def make_released_store(engine: Engine, *, with_load: bool = True) -> dict[str, list[dict[str, object]]]:
    """A store as slurmtower 0.1 left it, with events, audit rows and load samples.

    ``with_load=False``: the load archive's tables were never made (that release created
    them when the archiver or ``/load`` first ran). Returns the rows written, by table.
    """
    parts = released_metadata()
    if not with_load:
        parts = parts[:2]
    for md in parts:
        md.create_all(engine)
    ev, act = parts[0], parts[1]
    events = [
        {"type": NODE_STATE, "time": T0, "source": "poll", "node": f"n{i}",
         "payload": {"state": "DOWN", "flags": ["DRAIN"], "i": i, "nested": {"a": [1, 2]}}}
        for i in range(1, 6)
    ]
    audit = [
        {"execution_id": f"x{i}", "at": T0, "who": "alice", "via": "cli", "action": "slurm.node.drain",
         "parameters": {"nodes": "n1", "reason": "test"}, "nodes": "n1", "before": {"n1": "IDLE"},
         "after": {"n1": "DRAIN"}, "outcome": "succeeded", "message": ""}
        for i in range(3)
    ]
    samples = [{"ts": T0.timestamp() + i, "holder": "old", "sample": sample_json(T0.timestamp() + i)}
               for i in range(4)]
    with engine.begin() as conn:
        for row in events:
            conn.execute(insert(ev.tables["events"]).values(**row))
        conn.execute(insert(ev.tables["event_cursors"]).values(name="rules", last_id=3, updated_at=T0))
        for row in audit:
            conn.execute(insert(act.tables["action_audit"]).values(**row))
        if with_load:
            for row in samples:
                conn.execute(insert(parts[2].tables["load_samples"]).values(**row))
    return {"events": events, "action_audit": audit, "load_samples": samples if with_load else []}


# -- stores --------------------------------------------------------------------------------


@dataclass
class Store:
    """One store: how this process opens it (engine + schema) and how the CLI does (URL)."""

    engine: Engine
    schema: str | None
    cli_url: str
    kind: str

    def compare_engine(self) -> Engine:
        """An engine whose default schema is the store's (what autogenerate reflects)."""
        if self.schema is None:
            return self.engine
        return create_engine(PG_URL, connect_args={"options": f"-csearch_path={self.schema}"})


def _postgresql() -> Engine:
    engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {PG_URL}: {exc.orig}")
    return engine


@pytest.fixture()
def pg_schema() -> Iterator[str]:
    """A scratch schema in the local PostgreSQL, dropped afterwards (skip if none answers)."""
    engine = _postgresql()
    schema = f"st_schema_{uuid.uuid4().hex[:12]}"
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    yield schema
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty store: a SQLite file, or a scratch schema of the local PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'slurmtower.db'}"
        s = Store(make_store_engine(url), None, url, "sqlite")
    else:
        schema = request.getfixturevalue("pg_schema")
        # The CLI has no schema setting: its URL puts the scratch schema first in the search path.
        s = Store(create_engine(PG_URL), schema, f"{PG_URL}?options=-csearch_path%3D{schema}", "postgresql")
    yield s
    s.engine.dispose()


def released(s: Store, *, with_load: bool = True) -> dict[str, list[dict[str, object]]]:
    """Make ``s`` a slurmtower 0.1 store (in its schema, through the search path)."""
    if s.schema is None:
        return make_released_store(s.engine, with_load=with_load)
    engine = s.compare_engine()
    try:
        return make_released_store(engine, with_load=with_load)
    finally:
        engine.dispose()


def cli(s: Store, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``slurmtower`` command on store ``s``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMTOWER_")}
    env["SLURMTOWER_STORE_URL"] = s.cli_url
    return subprocess.run([SLURMTOWER, *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def tables(s: Store) -> set[str]:
    with s.engine.connect() as conn:
        return set(inspect(conn).get_table_names(schema=s.schema))


def differences(s: Store, md: MetaData = metadata) -> list[object]:
    """What Alembic's autogenerate finds between the store and ``md`` (empty: the same)."""
    engine = s.compare_engine()
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": migrate.VERSION_TABLE,
                                                         "compare_type": True})
            return list(compare_metadata(ctx, md))
    finally:
        if engine is not s.engine:
            engine.dispose()


def set_revision(s: Store, revision: str) -> None:
    version = Table(migrate.VERSION_TABLE, MetaData(), Column("version_num", String(32)), schema=s.schema)
    with s.engine.begin() as conn:
        conn.execute(update(version).values(version_num=revision))


# -- tests ---------------------------------------------------------------------------------


def test_head_revision_and_its_tables() -> None:
    assert migrate.head_revision() == HEAD
    expected = {
        "events", "node_states", "callback_nonces", "rule_runs", "event_cursors", "action_executions",
        "action_audit", "load_samples", "leases", "deployment", "login_failures", "node_holds",
        "web_sessions", "login_states", "token_state", "action_requests", "reservation_owners",
    }
    assert set(TABLE_NAMES) == expected


def test_a_released_store_is_refused_then_upgraded_keeping_every_row(store: Store) -> None:
    written = released(store)
    assert migrate.current_state(store.engine, schema=store.schema).revision == migrate.BASELINE_REVISION

    for open_store in (lambda: EventStore(store.engine, schema=store.schema),
                       lambda: migrate.check_or_create(store.engine, schema=store.schema)):
        with pytest.raises(StoreSchemaError, match="slurmtower db upgrade") as refused:
            open_store()
        assert "0001_released_schema" in refused.value.message
        assert refused.value.to_problem()["remedy"] == "slurmtower db upgrade"
    assert tables(store) == TABLE_NAMES - {"deployment", "login_failures", "node_holds", "web_sessions",
                                           "login_states", "token_state", "action_requests",
                                           "reservation_owners"}  # nothing created

    refused_cli = cli(store, "events", "--limit", "1")
    assert refused_cli.returncode == 78, refused_cli.stderr
    assert refused_cli.stderr.count("\n") == 1
    assert "run `slurmtower db upgrade`" in refused_cli.stderr
    current = cli(store, "db", "current")
    assert current.returncode == 0, current.stderr
    assert "0001_released_schema (no version table" in current.stdout
    assert "needs `slurmtower db upgrade`" in current.stdout

    upgraded = cli(store, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"upgraded from 0001_released_schema (no version table: made by slurmtower 0.1) to {HEAD}" \
        in upgraded.stdout
    again = cli(store, "db", "upgrade", "-o", "json")
    assert json.loads(again.stdout) | {"store": None} == {
        "store": None, "from": HEAD, "to": HEAD, "head": HEAD, "upgraded": False}

    assert tables(store) == TABLE_NAMES | {migrate.VERSION_TABLE}
    assert differences(store) == []
    events = EventStore(store.engine, schema=store.schema)
    kept = events.query()
    assert [e.id for e in kept] == [1, 2, 3, 4, 5]
    assert [(e.type, e.node, e.payload, e.time) for e in kept] == [
        (r["type"], r["node"], r["payload"], r["time"]) for r in written["events"]]
    assert events.get_cursor("rules") == 3
    (new,) = events.append([Event(type=NODE_STATE, time=T0, source="poll", node="n9", payload={"new": True})])
    assert new.id is not None and new.id > 5
    actions = ActionStore(store.cli_url)
    try:
        audit = actions.list_audit()
        assert [r.seq for r in audit] == [3, 2, 1]
        assert [r.parameters for r in audit] == [r["parameters"] for r in reversed(written["action_audit"])]
    finally:
        actions.close()
    archive = LoadArchive(engine=make_store_engine(store.cli_url), holder="new")
    try:
        samples = archive.window(0, T0.timestamp() + 10)
        assert [s.timestamp for s in samples] == [r["ts"] for r in written["load_samples"]]
    finally:
        archive.engine.dispose()


def test_a_store_of_the_previous_revision_is_upgraded_to_hold_sessions_and_tokens(store: Store) -> None:
    """A store at 0004 (the release before sessions), with executions and audit records:
    refused until ``slurmtower db upgrade``, which adds the sessions' and tokens' tables and
    keeps every row."""
    from alembic import command

    from slurmtower.store.sessions import SessionStore
    from slurmtower.store.tokens import TokenLedger

    new_tables = {"web_sessions", "login_states", "token_state", "action_requests", "reservation_owners"}
    released(store)
    with migrate._locked(store.engine, store.schema) as conn:
        command.upgrade(migrate._config(conn, store.schema), PREVIOUS)
    assert migrate.current_state(store.engine, schema=store.schema).revision == PREVIOUS
    assert not new_tables & tables(store) and "node_holds" in tables(store)
    with pytest.raises(StoreSchemaError, match=f"{PREVIOUS}.*slurmtower db upgrade"):
        migrate.check_store_url(store.cli_url)  # what every store does at start
    upgraded = cli(store, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"upgraded from {PREVIOUS} to {HEAD}" in upgraded.stdout
    assert tables(store) == TABLE_NAMES | {migrate.VERSION_TABLE}
    assert differences(store) == []
    actions = ActionStore(store.cli_url)
    try:
        assert [r.seq for r in actions.list_audit()] == [3, 2, 1]
        sessions = SessionStore(actions.engine, idle=60, lifetime=600)
        sid = sessions.create(name="rita", role="reader", via="token")
        assert sessions.get(sid).name == "rita"  # type: ignore[union-attr]
        ledger = TokenLedger(actions.engine)
        assert ledger.revoke("ab" * 32, "rita", 1.0) and not ledger.revoke("ab" * 32, "rita", 2.0)
        assert ledger.revoked() == {"ab" * 32}
    finally:
        actions.close()


def test_a_released_store_without_the_load_tables_gets_them(store: Store) -> None:
    """slurmtower 0.1 made the load archive's tables only once the archiver ran."""
    released(store, with_load=False)
    assert migrate.current_state(store.engine, schema=store.schema).revision == migrate.BASELINE_REVISION
    before, after = migrate.upgrade(store.engine, schema=store.schema)
    assert (before.revision, before.versioned, after.revision) == (migrate.BASELINE_REVISION, False, HEAD)
    assert differences(store) == []
    assert [e.id for e in EventStore(store.engine, schema=store.schema).query()] == [1, 2, 3, 4, 5]


def test_a_store_with_foreign_columns_and_no_revision_is_refused(store: Store) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE leases (name VARCHAR(100) PRIMARY KEY, owner VARCHAR(10))"
                          if store.schema is None else
                          f'CREATE TABLE "{store.schema}".leases (name VARCHAR(100) PRIMARY KEY, owner VARCHAR(10))'))
    with pytest.raises(StoreSchemaError, match="table leases has the columns name, owner"):
        migrate.upgrade(store.engine, schema=store.schema)
    with pytest.raises(StoreSchemaError, match="cannot upgrade it"):
        EventStore(store.engine, schema=store.schema)


def test_a_store_newer_than_this_slurmtower_is_refused(store: Store) -> None:
    migrate.check_or_create(store.engine, schema=store.schema)
    set_revision(store, "0099_from_the_future")
    with pytest.raises(StoreSchemaError, match="0099_from_the_future.*upgrade slurmtower") as refused:
        EventStore(store.engine, schema=store.schema)
    assert refused.value.to_problem()["remedy"] == "upgrade slurmtower"
    upgraded = cli(store, "db", "upgrade")
    assert upgraded.returncode == 78
    assert upgraded.stdout == ""
    assert upgraded.stderr.startswith("slurmtower: error: ") and upgraded.stderr.count("\n") == 1
    assert "a newer slurmtower upgraded it; upgrade slurmtower" in upgraded.stderr
    current = cli(store, "db", "current", "-o", "json")
    assert json.loads(current.stdout)["known"] is False


@pytest.mark.parametrize("opened_by", ["EventStore", "ActionStore", "LoadArchive", "serve-check"])
def test_an_empty_store_is_created_at_head(store: Store, opened_by: str) -> None:
    # EventStore maps the tables to a schema; the others open a URL (PostgreSQL: the
    # scratch schema first in its search path).
    if opened_by == "EventStore":
        EventStore(store.engine, schema=store.schema)
    elif opened_by == "ActionStore":
        ActionStore(store.cli_url).close()
    elif opened_by == "LoadArchive":
        archive = LoadArchive(engine=make_store_engine(store.cli_url), holder="h")
        assert archive.window(0, 1) == []
        archive.engine.dispose()
    else:
        migrate.check_store_url(store.cli_url)
    state = migrate.current_state(store.engine, schema=store.schema)
    assert (state.revision, state.versioned, state.up_to_date) == (HEAD, True, True)
    assert tables(store) == TABLE_NAMES | {migrate.VERSION_TABLE}
    assert differences(store) == []
    # opening it again is just the check
    assert migrate.check_or_create(store.engine, schema=store.schema) == state


def test_an_in_memory_store_is_created_at_head() -> None:
    events = EventStore("sqlite://")
    assert migrate.current_state(events.engine).revision == HEAD
    assert set(inspect(events.engine).get_table_names()) == TABLE_NAMES | {migrate.VERSION_TABLE}


def test_db_current_names_the_revision_and_the_head(store: Store) -> None:
    empty = cli(store, "db", "current")
    assert "revision: empty" in empty.stdout and f"head:     {HEAD}" in empty.stdout
    created = cli(store, "db", "upgrade")
    assert created.returncode == 0, created.stderr
    assert f"upgraded from empty to {HEAD}" in created.stdout
    current = cli(store, "db", "current", "-o", "json")
    assert json.loads(current.stdout) | {"store": None} == {
        "store": None, "revision": HEAD, "versioned": True, "head": HEAD, "up_to_date": True, "known": True}


@pytest.mark.parametrize("how", ["upgrade", "check_or_create", "both"])
def test_concurrent_starts_on_one_empty_store_make_one_schema(store: Store, how: str) -> None:
    """Four processes' worth of engines start at once on one empty store."""
    engines = [create_engine(PG_URL) if store.schema else make_store_engine(store.cli_url) for _ in range(4)]
    barrier = threading.Barrier(len(engines))
    results: list[object] = []

    def start(i: int, engine: Engine) -> None:
        barrier.wait()
        try:
            if how == "upgrade" or (how == "both" and i % 2):
                results.append(migrate.upgrade(engine, schema=store.schema)[1].revision)
            else:
                results.append(migrate.check_or_create(engine, schema=store.schema).revision)
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=start, args=(i, e)) for i, e in enumerate(engines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for engine in engines:
        engine.dispose()
    assert results == [HEAD] * 4
    version = Table(migrate.VERSION_TABLE, MetaData(), Column("version_num", String(32)), schema=store.schema)
    with store.engine.connect() as conn:
        assert conn.execute(version.select()).scalars().all() == [HEAD]
    assert differences(store) == []


def test_concurrent_upgrades_of_a_released_postgresql_store_upgrade_it_once(pg_schema: str) -> None:
    s = Store(create_engine(PG_URL), pg_schema, "", "postgresql")
    released(s)
    engines = [create_engine(PG_URL) for _ in range(3)]
    barrier = threading.Barrier(len(engines))
    results: list[object] = []

    def run(engine: Engine) -> None:
        barrier.wait()
        try:
            before, after = migrate.upgrade(engine, schema=pg_schema)
            results.append((before.revision, after.revision))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=run, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) == sorted(
        [(migrate.BASELINE_REVISION, HEAD), (HEAD, HEAD), (HEAD, HEAD)], key=str)
    assert differences(s) == []
    for engine in [*engines, s.engine]:
        engine.dispose()


def test_the_migrations_head_is_the_metadata(store: Store) -> None:
    """Every table change needs a migration: the migrations from empty make exactly the
    metadata (and the metadata's create_all, what check_or_create makes, is the same)."""
    before, after = migrate.upgrade(store.engine, schema=store.schema)
    assert (before.revision, after.revision) == (None, HEAD)
    assert differences(store) == []
    # the comparison does see a change made without a migration
    changed = MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["deployment"].append_column(Column("comment", Text(), nullable=True))
    Index("ix_events_source", changed.tables["events"].c.source)
    found = {d[0] for d in differences(store, changed) if isinstance(d, tuple)}
    assert found == {"add_column", "add_index"}


def test_the_api_answers_a_refused_store_as_a_problem(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'slurmtower.db'}"
    engine = make_store_engine(url)
    make_released_store(engine)
    engine.dispose()
    settings = Settings(state_dir=tmp_path)
    settings.auth.anonymous_read = True
    settings.archiver.archive_usage_load = False
    app = create_app(settings, route_modules=("load",))

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            return await http.get("/load")  # the archive opens the store on first use

    response = asyncio.run(get())
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/StoreSchemaError")
    assert problem["remedy"] == "slurmtower db upgrade"
    assert problem["revision"] == migrate.BASELINE_REVISION and problem["head"] == HEAD
    assert "run `slurmtower db upgrade`" in problem["detail"]


def test_the_pinned_head_is_the_migrations_head() -> None:
    # Stores at the head open without Alembic (store/revision.py): its pin must follow the scripts.
    assert migrate.head_revision() == HEAD_REVISION
