"""The dashboard's server-side sessions, the sign-ons under way, the static tokens' state.

``web_sessions``: one row per session (the SHA-256 of its opaque id, who, which role, how
they logged in, when it began, was last used and ends, the provider's ID token for logout).
``login_states``: one row per OpenID Connect sign-on under way (the SHA-256 of its ``state``
and of the browser's login cookie, the PKCE verifier, the nonce), taken once.
``token_state``: per static token (its SHA-256), when it was revoked and last used, and from where.

Revision ID: 0005_sessions_tokens
Revises: 0004_node_holds
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_sessions_tokens"
down_revision: str | None = "0004_node_holds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("id_token", sa.Text(), nullable=True),
    )
    op.create_index("ix_web_sessions_expires_at", "web_sessions", ["expires_at"])
    op.create_table(
        "login_states",
        sa.Column("state_hash", sa.String(64), primary_key=True),
        sa.Column("browser_hash", sa.String(64), nullable=False),
        sa.Column("verifier", sa.String(128), nullable=False),
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_login_states_created_at", "login_states", ["created_at"])
    op.create_table(
        "token_state",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.Column("last_address", sa.String(255), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("token_state")
    op.drop_index("ix_login_states_created_at", "login_states")
    op.drop_table("login_states")
    op.drop_index("ix_web_sessions_expires_at", "web_sessions")
    op.drop_table("web_sessions")
