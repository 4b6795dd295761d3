"""A dashboard session remembers the credential it was made from.

``web_sessions.credential_sha256``: the SHA-256 of the static token (``auth.tokens``) a
session was made from by the login form (None for a single sign-on, a JWT or a plugin's
credential): that token's revocation, expiry or removal from the config ends the session.
``web_sessions.credential_expires_at``: when the credential a session was made from expires
(unix seconds: a static token's ``expires``, a JWT's or Slurm token's ``exp`` plus the allowed
clock skew; None: it does not, or a single sign-on); the session ends then. Sessions made
before this revision have neither and keep their own ends.

Revision ID: 0007_session_credentials
Revises: 0006_clusters
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_session_credentials"
down_revision: str | None = "0006_clusters"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    # As in 0003: a store in a PostgreSQL schema runs with schema_translate_map {None: schema},
    # which Alembic's ALTER TABLE does not go through.
    translate = op.get_bind().get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def upgrade() -> None:
    schema = _schema()
    op.add_column("web_sessions", sa.Column("credential_sha256", sa.String(64), nullable=True), schema=schema)
    op.add_column("web_sessions", sa.Column("credential_expires_at", sa.Float(), nullable=True), schema=schema)


def downgrade() -> None:
    with op.batch_alter_table("web_sessions", schema=_schema()) as batch:
        batch.drop_column("credential_expires_at")
        batch.drop_column("credential_sha256")
