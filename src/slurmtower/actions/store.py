"""The action store: every execution's envelope, and the append-only audit log of mutations.

SQLAlchemy Core over any URL; the default is SQLite under ``state_dir``
(:meth:`Settings.effective_store_url`). Two tables, created when missing:

* ``action_executions``: one row per execution (``GET /executions/{id}``);
* ``action_audit``: one row per mutating action, including dry runs, refusals and failures.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    insert,
    select,
)
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.actions.envelope import AuditOutcome, AuditRecord, Envelope
from slurmtower.errors import InvalidInput, SlurmtowerError
from slurmtower.storage import make_store_engine

__all__ = ["ActionStore", "StoreError"]

metadata = MetaData()

executions = Table(
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
)

audit = Table(
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
    Index("ix_action_audit_who", "who"),
    Index("ix_action_audit_action", "action"),
)


def _aware(value: datetime) -> datetime:
    # SQLite gives naive datetimes back; everything is stored in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class StoreError(SlurmtowerError):
    http_status = 503
    exit_code = 69
    title = "action store unavailable"


class ActionStore:
    """Executions and audit records in one SQLAlchemy database.

    Raises :class:`ConfigError` for a malformed URL; database failures raise an error of
    the slurmtower tree (503 / exit 69).
    """

    def __init__(self, url: str) -> None:
        self.engine: Engine = make_store_engine(url)
        try:
            metadata.create_all(self.engine)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the action store: {exc.__class__.__name__}: {exc}") from exc

    def close(self) -> None:
        self.engine.dispose()

    def record_execution(self, envelope: Envelope, *, audit_record: dict[str, Any] | None = None) -> None:
        """Keep the envelope for ``GET /executions/{id}`` (and its audit record, in the same
        transaction, when given: the keyword arguments of :meth:`append_audit`)."""
        row = {
            "execution_id": envelope.execution_id,
            "action": envelope.action,
            "status": envelope.status,
            "principal": envelope.principal,
            "via": envelope.via,
            "dry_run": envelope.dry_run,
            "started_at": envelope.start_time,
            "ended_at": envelope.end_time,
            "envelope": envelope.model_dump_json(),
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(executions).values(**row))
                if audit_record is not None:
                    conn.execute(insert(audit).values(**self._audit_row(**audit_record)))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot record execution: {exc.__class__.__name__}") from exc

    def get_execution(self, execution_id: str) -> Envelope | None:
        try:
            with self.engine.connect() as conn:
                text = conn.execute(
                    select(executions.c.envelope).where(executions.c.execution_id == execution_id)
                ).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read executions: {exc.__class__.__name__}") from exc
        return Envelope.model_validate_json(text) if text is not None else None

    def append_audit(
        self,
        *,
        execution_id: str,
        at: datetime,
        who: str,
        via: str,
        action: str,
        parameters: dict[str, Any],
        nodes: str | None,
        before: dict[str, Any],
        after: dict[str, Any],
        outcome: AuditOutcome,
        message: str = "",
    ) -> int:
        """Append one record; returns its ``seq``."""
        row = self._audit_row(execution_id=execution_id, at=at, who=who, via=via, action=action,
                              parameters=parameters, nodes=nodes, before=before, after=after, outcome=outcome,
                              message=message)
        try:
            with self.engine.begin() as conn:
                result = conn.execute(insert(audit).values(**row))
                key = result.inserted_primary_key
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot append to the audit log: {exc.__class__.__name__}") from exc
        return int(key[0]) if key else 0

    @staticmethod
    def _audit_row(
        *,
        execution_id: str,
        at: datetime,
        who: str,
        via: str,
        action: str,
        parameters: dict[str, Any],
        nodes: str | None,
        before: dict[str, Any],
        after: dict[str, Any],
        outcome: AuditOutcome,
        message: str = "",
    ) -> dict[str, Any]:
        return {
            "execution_id": execution_id,
            "at": at,
            "who": who,
            "via": via,
            "action": action,
            "parameters": _jsonable(parameters),
            "nodes": nodes,
            "before": _jsonable(before),
            "after": _jsonable(after),
            "outcome": outcome,
            "message": message[:4000],
        }

    def list_audit(
        self,
        *,
        limit: int = 50,
        before: int | None = None,
        who: str | None = None,
        action: str | None = None,
        execution_id: str | None = None,
    ) -> list[AuditRecord]:
        """Newest first; ``before`` is the ``seq`` of the last record of the previous page."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000", param="limit")
        stmt = select(audit).order_by(audit.c.seq.desc()).limit(limit)
        if before is not None:
            stmt = stmt.where(audit.c.seq < before)
        if who:
            stmt = stmt.where(audit.c.who == who)
        if action:
            stmt = stmt.where(audit.c.action == action)
        if execution_id:
            stmt = stmt.where(audit.c.execution_id == execution_id)
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(stmt).mappings().all()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the audit log: {exc.__class__.__name__}") from exc
        return [
            AuditRecord.model_validate({**dict(r), "at": _aware(r["at"])})
            for r in rows
        ]
