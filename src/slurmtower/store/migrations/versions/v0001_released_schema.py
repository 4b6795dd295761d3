"""The store as slurmtower 0.1 made it: event store, action store, load archive.

Nine tables, exactly what ``create_all`` of that release's three MetaData objects made
(``events.store``, ``actions.store``, ``api.routes.load``). That release created them
when each store first opened (the load archive's only once the archiver or ``/load`` ran),
so a store it made may hold only some of them: this revision creates those missing and
leaves the others as they are. A store without a version table that holds only these
tables is at this revision (:func:`slurmtower.store.migrate.store_state`).

:data:`RELEASED` is a frozen copy of those definitions: never import them from
``store.schema``, which moves on.

Revision ID: 0001_released_schema
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_released_schema"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# events.store's _UTCDateTime was a TypeDecorator over DateTime(timezone=True): same DDL.
_UTC = sa.DateTime(timezone=True)

RELEASED = sa.MetaData()
"""The nine tables of slurmtower 0.1, as its ``create_all`` made them."""

sa.Table(
    "events",
    RELEASED,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("type", sa.String(200), nullable=False),
    sa.Column("time", _UTC, nullable=False),
    sa.Column("source", sa.String(32), nullable=False),
    sa.Column("node", sa.String(255), nullable=True),
    sa.Column("payload", sa.JSON(), nullable=False),
    sa.Index("ix_events_time", "time"),
    sa.Index("ix_events_type_id", "type", "id"),
    sa.Index("ix_events_node_id", "node", "id"),
    sqlite_autoincrement=True,
)
sa.Table(
    "node_states",
    RELEASED,
    sa.Column("node", sa.String(255), primary_key=True),
    sa.Column("state", sa.String(64), nullable=False),
    sa.Column("flags", sa.JSON(), nullable=False),
    sa.Column("reason", sa.Text(), nullable=True),
    sa.Column("reason_owner", sa.String(255), nullable=True),
    sa.Column("observed_at", _UTC, nullable=False),
)
sa.Table(
    "callback_nonces",
    RELEASED,
    sa.Column("nonce", sa.String(128), primary_key=True),
    sa.Column("expires_at", _UTC, nullable=False),
    sa.Index("ix_callback_nonces_expires_at", "expires_at"),
)
sa.Table(
    "rule_runs",
    RELEASED,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("rule", sa.String(255), nullable=False),
    sa.Column("event_id", sa.BigInteger(), nullable=True),
    sa.Column("node", sa.String(255), nullable=True),
    sa.Column("action_ref", sa.String(255), nullable=False),
    sa.Column("started_at", _UTC, nullable=False),
    sa.Column("ended_at", _UTC, nullable=False),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("envelope", sa.JSON(), nullable=False),
    sa.Index("ix_rule_runs_rule_started", "rule", "started_at"),
    sa.Index("ix_rule_runs_event_id", "event_id"),
    sqlite_autoincrement=True,
)
sa.Table(
    "event_cursors",
    RELEASED,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("last_id", sa.BigInteger(), nullable=False),
    sa.Column("updated_at", _UTC, nullable=False),
)
sa.Table(
    "action_executions",
    RELEASED,
    sa.Column("execution_id", sa.String(64), primary_key=True),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("principal", sa.String(255), nullable=False),
    sa.Column("via", sa.String(8), nullable=False),
    sa.Column("dry_run", sa.Boolean(), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("envelope", sa.Text(), nullable=False),
)
sa.Table(
    "action_audit",
    RELEASED,
    sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("execution_id", sa.String(64), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("who", sa.String(255), nullable=False),
    sa.Column("via", sa.String(8), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("parameters", sa.JSON(), nullable=False),
    sa.Column("nodes", sa.Text(), nullable=True),
    sa.Column("before", sa.JSON(), nullable=False),
    sa.Column("after", sa.JSON(), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("message", sa.Text(), nullable=False),
    sa.Index("ix_action_audit_who", "who"),
    sa.Index("ix_action_audit_action", "action"),
)
sa.Table(
    "load_samples",
    RELEASED,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("ts", sa.Float(), nullable=False),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("sample", sa.Text(), nullable=False),
    sa.Index("ix_load_samples_ts", "ts"),
    sqlite_autoincrement=True,
)
sa.Table(
    "leases",
    RELEASED,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("expires_at", sa.Float(), nullable=False),
)


def _schema() -> str | None:
    # A store in a PostgreSQL schema runs with schema_translate_map {None: schema}.
    translate = op.get_bind().get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def upgrade() -> None:
    bind = op.get_bind()
    present = set(sa.inspect(bind).get_table_names(schema=_schema()))
    for table in RELEASED.sorted_tables:
        if table.name not in present:
            table.create(bind)


def downgrade() -> None:
    bind = op.get_bind()
    for table in reversed(RELEASED.sorted_tables):
        table.drop(bind)
