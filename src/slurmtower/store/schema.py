"""The one schema of slurmtower's own store: every table, in one :data:`metadata`.

The store (SQLite under ``state_dir`` by default, any SQLAlchemy URL) holds:

``events``, ``node_states``, ``callback_nonces``, ``rule_runs``, ``event_cursors``
    the event log and the state that must survive with it (:mod:`slurmtower.events.store`);
``action_executions``, ``action_audit``
    every action's envelope and the audit log (:mod:`slurmtower.actions.store`);
``load_samples``, ``leases``
    the load archive (:mod:`slurmtower.live.archive`) and the leases;
``deployment``
    deployment-wide values (the sensor's UUID, the callback key ...), one row per name;
``login_failures``
    failed logins by client address, the limiter every process of a deployment shares;
``node_holds``
    who holds each drained or downed node, why, since when, by which execution
    (:mod:`slurmtower.actions.holds`);
``web_sessions``, ``login_states``
    the dashboard's sessions and the sign-ons under way (:mod:`slurmtower.store.sessions`);
``token_state``
    the static tokens' revocations and last uses (:mod:`slurmtower.store.tokens`);
``action_requests``, ``reservation_owners``
    the requests for acts a caller may ask for but not do, and who owns each reservation
    slurmtower made (:mod:`slurmtower.actions.request_store`).

Tables have no schema of their own: a store in a PostgreSQL schema (the tests' scratch
schemas) maps ``None`` to it with SQLAlchemy's ``schema_translate_map``
(:func:`schema_options`).

Changing a table here needs a migration in :mod:`slurmtower.store.migrations`
(``tests/test_store_schema.py`` compares the migrations' head with this metadata).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.types import TypeDecorator

__all__ = [
    "ID",
    "TABLE_NAMES",
    "VERSION_TABLE",
    "UTCDateTime",
    "action_audit",
    "action_executions",
    "action_requests",
    "callback_nonces",
    "deployment",
    "event_cursors",
    "events",
    "leases",
    "load_samples",
    "login_failures",
    "login_states",
    "metadata",
    "node_holds",
    "node_states",
    "reservation_owners",
    "rule_runs",
    "schema_options",
    "token_state",
    "web_sessions",
]

#: Alembic's version table in slurmtower's store.
VERSION_TABLE = "slurmtower_alembic_version"

ID = BigInteger().with_variant(Integer(), "sqlite")
"""Autoincrement ids: 64-bit, except on SQLite where only ``INTEGER`` is the rowid."""


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite keeps naive UTC text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _now() -> datetime:
    return datetime.now(UTC)


metadata = MetaData()

#: The longest cluster name (settings' CLUSTER_NAME) a ``cluster`` column holds.
CLUSTER_KEY = 40


def _cluster() -> Column[str]:
    """Which cluster a row belongs to (revision 6): ``''`` for the deployment's default
    cluster (and every row of a one-cluster deployment), the name for the others."""
    return Column("cluster", String(CLUSTER_KEY), nullable=False, server_default="", default="")


# -- the event store ----------------------------------------------------------------------

events = Table(
    "events",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("type", String(200), nullable=False),
    Column("time", UTCDateTime(), nullable=False),
    Column("source", String(32), nullable=False),
    Column("node", String(255), nullable=True),
    Column("payload", JSON(), nullable=False),
    _cluster(),
    Index("ix_events_time", "time"),
    Index("ix_events_type_id", "type", "id"),
    Index("ix_events_node_id", "node", "id"),
    Index("ix_events_cluster_id", "cluster", "id"),
    sqlite_autoincrement=True,
)

node_states = Table(
    "node_states",
    metadata,
    Column("cluster", String(CLUSTER_KEY), primary_key=True, server_default="", default=""),
    Column("node", String(255), primary_key=True),
    Column("state", String(64), nullable=False),
    Column("flags", JSON(), nullable=False),
    Column("reason", Text(), nullable=True),
    Column("reason_owner", String(255), nullable=True),
    Column("observed_at", UTCDateTime(), nullable=False),
)

callback_nonces = Table(
    "callback_nonces",
    metadata,
    Column("nonce", String(128), primary_key=True),
    Column("expires_at", UTCDateTime(), nullable=False),
    Index("ix_callback_nonces_expires_at", "expires_at"),
)

rule_runs = Table(
    "rule_runs",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("rule", String(255), nullable=False),
    Column("event_id", BigInteger(), nullable=True),
    Column("node", String(255), nullable=True),
    Column("action_ref", String(255), nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("ended_at", UTCDateTime(), nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("envelope", JSON(), nullable=False),
    Index("ix_rule_runs_rule_started", "rule", "started_at"),
    Index("ix_rule_runs_event_id", "event_id"),
    sqlite_autoincrement=True,
)

event_cursors = Table(
    "event_cursors",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("last_id", BigInteger(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
)

# -- the action store ---------------------------------------------------------------------
# Plain DateTime(timezone=True), as released: SQLite gives these back naive (read as UTC).

action_executions = Table(
    "action_executions",
    metadata,
    Column("execution_id", String(64), primary_key=True),
    Column("action", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("principal", String(255), nullable=False),
    Column("via", String(8), nullable=False),
    Column("dry_run", Boolean, nullable=False, default=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=False),
    Column("envelope", Text, nullable=False),
    # 0003: a client's Idempotency-Key (unique per principal and, since 0008, cluster) and the
    # digest of the action and parameters it was first used with.
    Column("idempotency_key", String(255), nullable=True),
    Column("params_digest", String(64), nullable=True),
    _cluster(),
    Index("ix_action_executions_key", "cluster", "principal", "idempotency_key", unique=True),
    Index("ix_action_executions_started_at", "started_at"),
)

action_audit = Table(
    "action_audit",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("execution_id", String(64), nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("who", String(255), nullable=False),
    Column("via", String(8), nullable=False),
    Column("action", String(64), nullable=False),
    Column("parameters", JSON, nullable=False),
    Column("nodes", Text, nullable=True),
    Column("before", JSON, nullable=False),
    Column("after", JSON, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("message", Text, nullable=False, default=""),
    _cluster(),
    # Revision 9: the request an execution ran for, and who approved it (the ``who`` is the
    # requester: the owner of what it made).
    Column("request_id", BigInteger(), nullable=True),
    Column("approved_by", String(255), nullable=True),
    Index("ix_action_audit_who", "who"),
    Index("ix_action_audit_action", "action"),
    Index("ix_action_audit_cluster_seq", "cluster", "seq"),
)

# -- the load archive ---------------------------------------------------------------------

load_samples = Table(
    "load_samples",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("holder", String(200), nullable=False),
    Column("sample", Text, nullable=False),
    _cluster(),
    Index("ix_load_samples_ts", "ts"),
    sqlite_autoincrement=True,
)

leases = Table(
    "leases",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("expires_at", Float, nullable=False),
)

# -- deployment-wide state (revision 2) ---------------------------------------------------

deployment = Table(
    "deployment",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("value", Text(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False, default=_now, onupdate=_now),
)

login_failures = Table(
    "login_failures",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("address", String(255), nullable=False),
    Column("at", Float, nullable=False),
    Index("ix_login_failures_address_at", "address", "at"),
    Index("ix_login_failures_at", "at"),
    sqlite_autoincrement=True,
)

# -- drain holds (revision 4) ---------------------------------------------------------------

node_holds = Table(
    "node_holds",
    metadata,
    Column("cluster", String(CLUSTER_KEY), primary_key=True, server_default="", default=""),
    Column("node", String(255), primary_key=True),
    # slurmtower:alice@cli (who@via, as owner tags name it), or user:root for a hold made
    # outside slurmtower that slurmtower kept when it added its own.
    Column("holder", String(255), primary_key=True),
    # What the holder asked for: DRAIN or DOWN (an outside hold: the node's state then).
    Column("state", String(16), nullable=False),
    Column("reason", Text(), nullable=True),
    Column("since", UTCDateTime(), nullable=False),
    # The execution that made the hold (None: an outside hold).
    Column("execution_id", String(64), nullable=True),
    # When slurmtower last wrote the row: a read of Slurm older than that cannot drop it.
    Column("updated_at", UTCDateTime(), nullable=False),
    Index("ix_node_holds_since", "since"),
)

# -- the dashboard's sessions -------------------------------------------------------------

web_sessions = Table(
    "web_sessions",
    metadata,
    # SHA-256 of the opaque id the browser's HttpOnly cookie holds: the store never has the id.
    Column("id_hash", String(64), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("role", String(16), nullable=False),
    Column("via", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("seen_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    # The provider's ID token, for its logout (id_token_hint); at most 16 KiB.
    Column("id_token", Text, nullable=True),
    # Revision 6: the person's groups that some cluster gives a role (``[[clusters]] roles``,
    # ``group:<name>``), at most MAX_SESSION_GROUPS of at most 255 characters.
    Column("groups", JSON, nullable=True),
    # Revision 7: the credential the session was made from. The SHA-256 of its static token
    # (None: a sign-on, a JWT): revoking, expiring or removing that token ends the session.
    Column("credential_sha256", String(64), nullable=True),
    # When that credential expires (unix seconds; None: never, or a sign-on): the session ends then.
    Column("credential_expires_at", Float, nullable=True),
    Index("ix_web_sessions_expires_at", "expires_at"),
)

login_states = Table(
    "login_states",
    metadata,
    # SHA-256 of the OpenID Connect ``state`` sent to the provider; taken once.
    Column("state_hash", String(64), primary_key=True),
    # SHA-256 of the login cookie of the browser that started the sign-on.
    Column("browser_hash", String(64), nullable=False),
    Column("verifier", String(128), nullable=False),
    Column("nonce", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_login_states_created_at", "created_at"),
)

token_state = Table(
    "token_state",
    metadata,
    # The SHA-256 of an ``auth.tokens`` entry: what the config holds of the token.
    Column("sha256", String(64), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("revoked_at", Float, nullable=True),
    Column("last_used_at", Float, nullable=True),
    Column("last_address", String(255), nullable=True),
)

# -- requests and approvals (revision 9) ------------------------------------------------------

action_requests = Table(
    "action_requests",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    _cluster(),
    Column("action", String(64), nullable=False),
    Column("parameters", JSON, nullable=False),
    Column("requester", String(255), nullable=False),
    # The requester's role where it made the request (None: the CLI or a rule).
    Column("requester_role", String(16), nullable=True),
    # The channel it came through: api, cli, rule, mcp.
    Column("via", String(8), nullable=False),
    Column("reason", Text, nullable=True),
    # What the action's dry run said when the request was made, and that dry run's execution.
    Column("plan", JSON, nullable=False),
    Column("plan_execution_id", String(64), nullable=True),
    # The node set the act names (folded), for the visibility filter and the calendar.
    Column("nodes", Text, nullable=True),
    Column("partition", String(255), nullable=True),
    # Why it needs a decision (the policy's words), the least role that decides, two people.
    Column("why", Text, nullable=False),
    Column("approver_role", String(16), nullable=False),
    Column("two_person", Boolean, nullable=False, default=False),
    # pending, running (approved, the action running), approved, failed, denied, withdrawn, expired
    Column("state", String(16), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("decided_at", UTCDateTime(), nullable=True),
    Column("decided_by", String(255), nullable=True),
    Column("decided_via", String(8), nullable=True),
    Column("comment", Text, nullable=True),
    # The execution an approval ran.
    Column("execution_id", String(64), nullable=True),
    Index("ix_action_requests_cluster_state", "cluster", "state", "id"),
    Index("ix_action_requests_requester", "requester", "id"),
    Index("ix_action_requests_expires_at", "state", "expires_at"),
    sqlite_autoincrement=True,
)

reservation_owners = Table(
    "reservation_owners",
    metadata,
    Column("cluster", String(CLUSTER_KEY), primary_key=True, server_default="", default=""),
    Column("name", String(255), primary_key=True),
    # slurmtower:alice@api: the owner tag of who made (or asked for) the reservation.
    Column("owner", String(255), nullable=False),
    Column("approved_by", String(255), nullable=True),
    Column("request_id", BigInteger(), nullable=True),
    Column("execution_id", String(64), nullable=False),
    Column("reason", Text, nullable=True),
    Column("updated_at", UTCDateTime(), nullable=False),
)

TABLE_NAMES: frozenset[str] = frozenset(metadata.tables)
"""The names of every table of the store."""


def schema_options(schema: str | None) -> dict[str, Any]:
    """Execution options that put the store's tables in database schema ``schema``.

    ``None`` (the default schema, SQLite) needs none. Apply them to an engine
    (``engine.execution_options(**schema_options(s))``) or a connection.
    """
    return {} if schema is None else {"schema_translate_map": {None: schema}}
