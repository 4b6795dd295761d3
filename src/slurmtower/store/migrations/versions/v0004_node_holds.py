"""Drain holds: who holds each drained or downed node.

``node_holds``: one row per node and holder (``slurmtower:alice@cli``, or ``user:root`` for
a hold made outside slurmtower that slurmtower kept): the state asked for, the reason, when
the hold began, the execution that made it, when slurmtower last wrote the row.

Revision ID: 0004_node_holds
Revises: 0003_action_intent_idempotency
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_node_holds"
down_revision: str | None = "0003_action_intent_idempotency"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Types as in schema.py when this revision was made (UTCDateTime's DDL is DateTime(timezone=True)).


def upgrade() -> None:
    op.create_table(
        "node_holds",
        sa.Column("node", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("execution_id", sa.String(64), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_node_holds_since", "node_holds", ["since"])


def downgrade() -> None:
    op.drop_index("ix_node_holds_since", "node_holds")
    op.drop_table("node_holds")
