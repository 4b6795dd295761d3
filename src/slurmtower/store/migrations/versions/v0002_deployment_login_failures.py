"""Deployment-wide values and the shared failed-login limiter.

``deployment``: one row per name (the sensor's UUID, the callback key ...).
``login_failures``: one row per failed login (client address, unix seconds), read by every
process of a deployment.

Revision ID: 0002_deployment_login_failures
Revises: 0001_released_schema
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_deployment_login_failures"
down_revision: str | None = "0001_released_schema"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deployment",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "login_failures",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_login_failures_address_at", "login_failures", ["address", "at"])
    op.create_index("ix_login_failures_at", "login_failures", ["at"])


def downgrade() -> None:
    op.drop_table("login_failures")
    op.drop_table("deployment")
