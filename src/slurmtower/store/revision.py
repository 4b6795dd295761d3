"""The store's revision, checked without Alembic: a store already at this slurmtower's head
opens at once (Alembic and the migration scripts load only to create or refuse a store,
:func:`slurmtower.store.migrate.check_or_create`). The CLI opens the store for every action."""

from __future__ import annotations

from sqlalchemy import Engine, column, select, table
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.store.schema import VERSION_TABLE, schema_options

__all__ = ["HEAD_REVISION", "at_head", "ensure_current"]

#: This slurmtower's head revision (tests/test_store_schema.py checks it is the migrations' head).
HEAD_REVISION = "0009_requests_reservations"


def at_head(engine: Engine, *, schema: str | None = None) -> bool:
    """The store records exactly :data:`HEAD_REVISION` (False for anything else, or no table)."""
    version = table(VERSION_TABLE, column("version_num"), schema=schema)
    with engine.connect() as conn:  # a database that does not answer raises here, once
        conn.execution_options(**schema_options(schema))
        try:
            found = conn.execute(select(version.c.version_num)).scalars().all()
        except SQLAlchemyError:  # no version table: an empty store, or one slurmtower 0.1 made
            return False
    return found == [HEAD_REVISION]


def ensure_current(engine: Engine, *, schema: str | None = None) -> None:
    """Open a store at the head at once; create an empty one, refuse any other
    (:func:`~slurmtower.store.migrate.check_or_create`)."""
    if not at_head(engine, schema=schema):
        from slurmtower.store.migrate import check_or_create  # deferred: alembic, only off the fast path

        check_or_create(engine, schema=schema)
