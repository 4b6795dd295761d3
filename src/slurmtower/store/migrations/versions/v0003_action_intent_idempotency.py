"""Executions written before acting: an idempotency key per principal, retention by start time.

``action_executions`` gains ``idempotency_key`` (a client's ``Idempotency-Key``, unique per
principal) and ``params_digest`` (the action and parameters it was first used with), and an
index on ``started_at`` for the retention purge.

Revision ID: 0003_action_intent_idempotency
Revises: 0002_deployment_login_failures
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_action_intent_idempotency"
down_revision: str | None = "0002_deployment_login_failures"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    # A store in a PostgreSQL schema runs with schema_translate_map {None: schema}, which
    # Alembic's ALTER TABLE does not go through.
    translate = op.get_bind().get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def upgrade() -> None:
    schema = _schema()
    op.add_column("action_executions", sa.Column("idempotency_key", sa.String(255), nullable=True), schema=schema)
    op.add_column("action_executions", sa.Column("params_digest", sa.String(64), nullable=True), schema=schema)
    op.create_index("ix_action_executions_key", "action_executions", ["principal", "idempotency_key"],
                    unique=True, schema=schema)
    op.create_index("ix_action_executions_started_at", "action_executions", ["started_at"], schema=schema)


def downgrade() -> None:
    schema = _schema()
    op.drop_index("ix_action_executions_started_at", "action_executions", schema=schema)
    op.drop_index("ix_action_executions_key", "action_executions", schema=schema)
    with op.batch_alter_table("action_executions", schema=schema) as batch:
        batch.drop_column("params_digest")
        batch.drop_column("idempotency_key")
