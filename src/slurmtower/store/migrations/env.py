"""Alembic's environment for slurmtower's own store.

:mod:`slurmtower.store.migrate` runs it with an open connection, already in a transaction
and under the migration lock, in ``config.attributes["connection"]`` (and the database
schema, if any, in ``config.attributes["schema"]``): every migration runs in that one
transaction. Run by the ``alembic`` command line instead (a developer's
``alembic -c ... revision``), it opens ``sqlalchemy.url``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from slurmtower.store.engine import make_store_engine
from slurmtower.store.migrate import VERSION_TABLE
from slurmtower.store.schema import metadata, schema_options


def _run(connection: Connection, schema: str | None) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    config = context.config
    if context.is_offline_mode():
        raise RuntimeError("slurmtower's store migrations run online only (no --sql)")
    schema = config.attributes.get("schema")
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection, schema)
        return

    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no sqlalchemy.url to migrate")
    engine = make_store_engine(url)
    try:
        with engine.begin() as conn:
            _run(conn.execution_options(**schema_options(schema)), schema)
    finally:
        engine.dispose()


_main()
