"""The store's schema revision: the start-up check, and upgrades (``slurmtower db upgrade``).

The schema is versioned by Alembic (``store/migrations``, run programmatically: users need
no ``alembic.ini``), its revision kept in the table :data:`VERSION_TABLE`. At start every
store (:class:`~slurmtower.events.store.EventStore`,
:class:`~slurmtower.actions.store.ActionStore`, the load archive) calls
:func:`check_or_create`:

* a store without any of slurmtower's tables is created at the head revision (a fresh
  ``state_dir`` or an empty PostgreSQL database needs no set-up);
* a store at the head revision opens;
* a store at an older revision, including one made by slurmtower 0.1 (its tables and no
  version table: revision ``0001_released_schema``), is refused with a
  :class:`~slurmtower.errors.StoreSchemaError` naming ``slurmtower db upgrade``;
* a store at a revision this slurmtower does not know (upgraded by a newer one) is refused:
  upgrade slurmtower.

Creating and upgrading take a lock first, so two processes starting on one empty store do
not both create it: PostgreSQL's transaction-level advisory lock (the DDL runs in that
transaction), an ``flock`` on ``<database>.migrate-lock`` for a SQLite file. Everything
runs in one transaction: a failed upgrade leaves the store as it was.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine, MetaData, inspect, text
from sqlalchemy.engine import Connection

from slurmtower.errors import StoreSchemaError
from slurmtower.store.engine import make_store_engine, sqlite_file
from slurmtower.store.schema import TABLE_NAMES, VERSION_TABLE, metadata, schema_options

__all__ = [
    "BASELINE_REVISION",
    "MIGRATIONS_DIR",
    "UPGRADE_COMMAND",
    "VERSION_TABLE",
    "StoreState",
    "check_or_create",
    "check_store_url",
    "current_state",
    "head_revision",
    "store_state",
    "upgrade",
]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
"""Alembic's version table, named for slurmtower: a database it shares keeps its own."""
BASELINE_REVISION = "0001_released_schema"
"""The schema of slurmtower 0.1, whose stores have no version table."""
UPGRADE_COMMAND = "slurmtower db upgrade"

# One key for every slurmtower store of a database (schemas included): upgrades of two
# scratch schemas wait for each other, which costs nothing.
_LOCK_KEY = int.from_bytes(hashlib.sha256(b"slurmtower.store.migrate").digest()[:8], "big", signed=True)


@dataclass(frozen=True)
class StoreState:
    """Where a store's schema stands."""

    revision: str | None
    """The store's revision; ``None`` when it holds none of slurmtower's tables."""
    head: str
    """This slurmtower's head revision."""
    versioned: bool
    """The store has a version table (``False``: empty, or made by slurmtower 0.1)."""
    known: bool
    """This slurmtower knows ``revision`` (``False``: a newer slurmtower upgraded it)."""

    @property
    def empty(self) -> bool:
        return self.revision is None

    @property
    def up_to_date(self) -> bool:
        return self.revision == self.head


@functools.cache
def _script() -> ScriptDirectory:
    return ScriptDirectory(str(MIGRATIONS_DIR))


def head_revision() -> str:
    """The head revision of this slurmtower's migrations."""
    head = _script().get_current_head()
    assert head is not None
    return head


def _released() -> MetaData:
    baseline = _script().get_revision(BASELINE_REVISION)
    assert baseline is not None
    released: MetaData = baseline.module.RELEASED
    return released


def _where(bind: Connection | Engine, schema: str | None) -> str:
    url = bind.engine.url.render_as_string(hide_password=True)
    return f"{url} (schema {schema})" if schema else url


def _migration_context(conn: Connection, schema: str | None) -> MigrationContext:
    return MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
    )


def store_state(conn: Connection, *, schema: str | None = None) -> StoreState:
    """Read where the store behind ``conn`` stands (no change made).

    Raises :class:`StoreSchemaError` for a store slurmtower cannot place: several revisions
    at once, or slurmtower tables without a version table that slurmtower 0.1 did not make.
    """
    head = head_revision()
    heads = _migration_context(conn, schema).get_current_heads()
    if len(heads) > 1:
        raise StoreSchemaError(
            f"slurmtower's store {_where(conn, schema)} records several schema revisions "
            f"({', '.join(heads)}); it was not migrated by slurmtower",
            revision=list(heads), head=head,
        )
    if heads:
        try:
            known = _script().get_revision(heads[0]) is not None
        except CommandError:
            known = False
        return StoreState(revision=heads[0], head=head, versioned=True, known=known)
    insp = inspect(conn)
    present = set(insp.get_table_names(schema=schema)) & TABLE_NAMES
    if not present:
        return StoreState(revision=None, head=head, versioned=False, known=True)
    released = _released()
    unknown = present - set(released.tables)
    if unknown:
        raise StoreSchemaError(
            f"slurmtower's store {_where(conn, schema)} holds the tables {', '.join(sorted(unknown))} "
            f"but no schema revision (no {VERSION_TABLE} table): it was not made by slurmtower",
            head=head,
        )
    for name in sorted(present):
        columns = {c["name"] for c in insp.get_columns(name, schema=schema)}
        expected = set(released.tables[name].columns.keys())
        if columns != expected:
            raise StoreSchemaError(
                f"slurmtower's store {_where(conn, schema)} has no schema revision and its table "
                f"{name} has the columns {', '.join(sorted(columns))}, not those of slurmtower 0.1 "
                f"({', '.join(sorted(expected))}): slurmtower cannot upgrade it",
                head=head,
            )
    return StoreState(revision=BASELINE_REVISION, head=head, versioned=False, known=True)


def _refusal(state: StoreState, where: str) -> StoreSchemaError:
    if not state.known:
        return StoreSchemaError(
            f"slurmtower's store {where} is at schema revision {state.revision}, which this "
            f"slurmtower (head {state.head}) does not know: a newer slurmtower upgraded it; "
            "upgrade slurmtower",
            revision=state.revision, head=state.head, remedy="upgrade slurmtower",
        )
    made_by = "" if state.versioned else " (no version table: made by slurmtower 0.1)"
    return StoreSchemaError(
        f"slurmtower's store {where} is at schema revision {state.revision}{made_by}, this "
        f"slurmtower needs {state.head}: back it up and run `{UPGRADE_COMMAND}`",
        revision=state.revision, head=state.head, remedy=UPGRADE_COMMAND,
    )


@contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    database = sqlite_file(engine.url)
    if database is None:
        yield
        return
    path = database.with_name(database.name + ".migrate-lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle: IO[bytes] = path.open("ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        handle.close()  # closing drops the flock


@contextmanager
def _locked(engine: Engine, schema: str | None) -> Iterator[Connection]:
    """A connection in a transaction that holds the store's migration lock until commit."""
    with _file_lock(engine), engine.begin() as conn:
        conn.execution_options(**schema_options(schema))
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        yield conn


def current_state(engine: Engine, *, schema: str | None = None) -> StoreState:
    """Where the store on ``engine`` (in database schema ``schema``) stands."""
    with engine.connect() as conn:
        conn.execution_options(**schema_options(schema))
        return store_state(conn, schema=schema)


def check_or_create(engine: Engine, *, schema: str | None = None) -> StoreState:
    """The start-up check: create an empty store at the head revision, open one at the head,
    refuse any other.

    Args:
        engine: the store's engine (:func:`~slurmtower.store.engine.make_store_engine`).
        schema: the database schema holding its tables (PostgreSQL), default the search path.

    Raises :class:`StoreSchemaError` for a store at an older revision (its message names
    ``slurmtower db upgrade``) or at one this slurmtower does not know.
    """
    state = current_state(engine, schema=schema)
    if state.up_to_date:
        return state
    if state.empty:
        with _locked(engine, schema) as conn:
            state = store_state(conn, schema=schema)
            if state.empty:  # nobody created it while this process waited for the lock
                # create_all then stamp, Alembic's recipe for a new database: the test
                # suite checks that the migrations' head and the metadata agree.
                metadata.create_all(conn)
                _migration_context(conn, schema).stamp(_script(), "head")
                return store_state(conn, schema=schema)
        if state.up_to_date:
            return state
    raise _refusal(state, _where(engine, schema))


def check_store_url(url: str) -> StoreState:
    """:func:`check_or_create` on the store at ``url`` (its engine opened, then disposed)."""

    engine = make_store_engine(url)
    try:
        return check_or_create(engine)
    finally:
        engine.dispose()


def _config(conn: Connection, schema: str | None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["connection"] = conn
    cfg.attributes["schema"] = schema
    return cfg


def upgrade(engine: Engine, *, schema: str | None = None) -> tuple[StoreState, StoreState]:
    """Upgrade the store in place to the head revision, under the migration lock, in one
    transaction. An empty store is created by the migrations.

    Returns the states before and after. Raises :class:`StoreSchemaError` for a store
    this slurmtower cannot upgrade (at an unknown revision, or not made by slurmtower).
    """
    with _locked(engine, schema) as conn:
        before = store_state(conn, schema=schema)
        if not before.known:
            raise _refusal(before, _where(conn, schema))
        if before.up_to_date:
            return before, before
        command.upgrade(_config(conn, schema), "head")
        after = store_state(conn, schema=schema)
    return before, after
