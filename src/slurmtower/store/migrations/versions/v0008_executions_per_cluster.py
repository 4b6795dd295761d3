"""An idempotency key is a principal's on one cluster.

``ix_action_executions_key`` (unique) becomes (``cluster``, ``principal``,
``idempotency_key``): a key a principal used on one cluster is free on another (it was a 409
naming an execution of the other cluster, which that cluster's ``/executions`` does not show).
Every row is kept: the old keys were unique per principal, so they are per cluster too.

Revision ID: 0008_executions_per_cluster
Revises: 0007_session_credentials
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008_executions_per_cluster"
down_revision: str | None = "0007_session_credentials"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    # As in 0003: a store in a PostgreSQL schema runs with schema_translate_map {None: schema},
    # which Alembic's DDL does not go through.
    translate = op.get_bind().get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def upgrade() -> None:
    schema = _schema()
    op.drop_index("ix_action_executions_key", "action_executions", schema=schema)
    op.create_index("ix_action_executions_key", "action_executions", ["cluster", "principal", "idempotency_key"],
                    unique=True, schema=schema)


def downgrade() -> None:
    # Refused by the database (a unique violation) when a principal used one key on two clusters.
    schema = _schema()
    op.drop_index("ix_action_executions_key", "action_executions", schema=schema)
    op.create_index("ix_action_executions_key", "action_executions", ["principal", "idempotency_key"],
                    unique=True, schema=schema)
