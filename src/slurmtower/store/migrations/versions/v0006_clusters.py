"""Several clusters behind one tower: every row that belongs to one cluster says which.

``cluster`` on ``events``, ``node_states``, ``action_executions``, ``action_audit``,
``load_samples`` and ``node_holds``: ``''`` for the deployment's default cluster (every row
written before this revision, and every row of a one-cluster deployment), the cluster's name
for the others (``[[clusters]]``). ``node_states`` and ``node_holds`` are keyed by cluster too
(two clusters may both have an ``n1``). ``deployment`` keeps the default cluster's name
(``default_cluster``) once several are served, so that a changed default is refused rather
than served the old default's rows. ``web_sessions.groups``: the groups of a signed-on person
that give a role on some cluster (``[[clusters]] roles``, ``group:<name>``).

Revision ID: 0006_clusters
Revises: 0005_sessions_tokens
Create Date: 2026-12-04
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_clusters"
down_revision: str | None = "0005_sessions_tokens"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: As schema.py's CLUSTER_KEY when this revision was made.
_LEN = 40


def _schema() -> str | None:
    # As in 0003: a store in a PostgreSQL schema runs with schema_translate_map {None: schema},
    # which Alembic's ALTER TABLE does not go through.
    translate = op.get_bind().get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def _cluster() -> sa.Column[str]:
    return sa.Column("cluster", sa.String(_LEN), nullable=False, server_default="")


def upgrade() -> None:
    schema = _schema()
    for table in ("events", "action_executions", "action_audit", "load_samples"):
        op.add_column(table, _cluster(), schema=schema)
    op.create_index("ix_events_cluster_id", "events", ["cluster", "id"], schema=schema)
    op.create_index("ix_action_audit_cluster_seq", "action_audit", ["cluster", "seq"], schema=schema)
    # the groups of a signed-on person that give a role on some cluster
    op.add_column("web_sessions", sa.Column("groups", sa.JSON(), nullable=True), schema=schema)
    # The keyed tables: the cluster joins the primary key.
    _rekey("node_states", ["cluster", "node"], add=True)
    _rekey("node_holds", ["cluster", "node", "holder"], add=True)


def _rekey(table: str, key: list[str], *, add: bool) -> None:
    """``table``'s primary key made ``key``, its ``cluster`` column added first (``add``) or
    dropped after. SQLite rebuilds the table (its primary key has no name to drop);
    PostgreSQL alters it in place (``<table>_pkey``, the name it gave the key)."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    with warnings.catch_warnings(), op.batch_alter_table(table, schema=_schema(),
                                                         recreate="always" if sqlite else "auto") as batch:
        # SQLite's copy of the table names the new key's columns before the old key is
        # dropped: SQLAlchemy warns that it takes the new key, which is what is asked.
        warnings.filterwarnings("ignore", r"Table '_alembic_tmp_\w+' specifies columns", sa.exc.SAWarning)
        if add:
            batch.add_column(_cluster())
        elif sqlite:
            batch.drop_column("cluster")  # before the key is made: it names the columns kept
        if not sqlite:
            batch.drop_constraint(f"{table}_pkey", type_="primary")
        batch.create_primary_key(f"{table}_pkey", key)
        if not add and not sqlite:
            batch.drop_column("cluster")


def downgrade() -> None:
    _rekey("node_holds", ["node", "holder"], add=False)
    _rekey("node_states", ["node"], add=False)
    schema = _schema()
    with op.batch_alter_table("web_sessions", schema=schema) as batch:
        batch.drop_column("groups")
    op.drop_index("ix_action_audit_cluster_seq", "action_audit", schema=schema)
    op.drop_index("ix_events_cluster_id", "events", schema=schema)
    for table in ("load_samples", "action_audit", "action_executions", "events"):
        with op.batch_alter_table(table, schema=schema) as batch:
            batch.drop_column("cluster")
