"""Requests and approvals; who owns each reservation slurmtower made.

``action_requests``: one row per request for an act its caller may ask for but not do (or an
act that needs a second person): the action, its parameters, who asked and through what,
why, the dry run's plan, its state (pending, running, approved, failed, denied, withdrawn,
expired), when it expires, who decided, with what comment, and the execution an approval ran.
``reservation_owners``: per cluster and reservation name, the owner tag of who made it (or
asked for it), who approved it, the request and execution. ``action_audit`` gains
``request_id`` and ``approved_by``: an approved request's records name both people (every
row written before this revision: null, null).

Revision ID: 0009_requests_reservations
Revises: 0008_executions_per_cluster
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_requests_reservations"
down_revision: str | None = "0008_executions_per_cluster"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Types as in schema.py when this revision was made (UTCDateTime's DDL is DateTime(timezone=True)).
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_LEN = 40


def _schema() -> str | None:
    # As in 0003: a store in a PostgreSQL schema runs with schema_translate_map {None: schema},
    # which Alembic's ALTER TABLE does not go through.
    translate = op.get_bind().get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def upgrade() -> None:
    schema = _schema()
    op.create_table(
        "action_requests",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(_LEN), nullable=False, server_default=""),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("requester", sa.String(255), nullable=False),
        sa.Column("requester_role", sa.String(16), nullable=True),
        sa.Column("via", sa.String(8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("plan_execution_id", sa.String(64), nullable=True),
        sa.Column("nodes", sa.Text(), nullable=True),
        sa.Column("partition", sa.String(255), nullable=True),
        sa.Column("why", sa.Text(), nullable=False),
        sa.Column("approver_role", sa.String(16), nullable=False),
        sa.Column("two_person", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(255), nullable=True),
        sa.Column("decided_via", sa.String(8), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("execution_id", sa.String(64), nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_action_requests_cluster_state", "action_requests", ["cluster", "state", "id"])
    op.create_index("ix_action_requests_requester", "action_requests", ["requester", "id"])
    op.create_index("ix_action_requests_expires_at", "action_requests", ["state", "expires_at"])
    op.create_table(
        "reservation_owners",
        sa.Column("cluster", sa.String(_LEN), primary_key=True, server_default=""),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("approved_by", sa.String(255), nullable=True),
        sa.Column("request_id", sa.BigInteger(), nullable=True),
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.add_column("action_audit", sa.Column("request_id", sa.BigInteger(), nullable=True), schema=schema)
    op.add_column("action_audit", sa.Column("approved_by", sa.String(255), nullable=True), schema=schema)


def downgrade() -> None:
    schema = _schema()
    with op.batch_alter_table("action_audit", schema=schema) as batch:
        batch.drop_column("approved_by")
        batch.drop_column("request_id")
    op.drop_table("reservation_owners")
    op.drop_index("ix_action_requests_expires_at", "action_requests")
    op.drop_index("ix_action_requests_requester", "action_requests")
    op.drop_index("ix_action_requests_cluster_state", "action_requests")
    op.drop_table("action_requests")
