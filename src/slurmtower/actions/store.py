"""The action store: every execution's envelope, and the append-only audit log of mutations.

SQLAlchemy Core over any URL; the default is SQLite under ``state_dir``
(:meth:`Settings.effective_store_url`). Two tables of :mod:`slurmtower.store.schema`:

* ``action_executions``: one row per execution (``GET /executions/{id}``): a mutating one
  written ``running`` before it acts (:meth:`ActionStore.record_intent`) and completed after
  (:meth:`ActionStore.record_outcome`); read-only ones only when ``actions.record_reads``;
  purged after ``actions.retention_days`` (:meth:`ActionStore.purge_executions`). Each row
  is its cluster's: a store reads back (an execution by id, a principal's idempotency key)
  only the rows of its own cluster, as it does the audit log;
* ``action_audit``: append-only; per mutating action an ``intent`` record before it acts and
  its outcome after (dry runs, refusals and failures included); a rejected one (bad input)
  has only its outcome. Each record's parameters are bounded (:func:`bounded_parameters`);
  records are purged after ``actions.audit_retention_days`` (:meth:`ActionStore.purge_audit`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Engine, delete, insert, literal, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from slurmtower.actions.envelope import AuditOutcome, AuditRecord, Envelope
from slurmtower.actions.hold_store import HoldStore
from slurmtower.errors import Conflict, InvalidInput, KeyTaken, StoreError
from slurmtower.store.engine import make_store_engine
from slurmtower.store.revision import ensure_current
from slurmtower.store.schema import action_audit as audit
from slurmtower.store.schema import action_executions as executions

__all__ = ["RUNNING", "ActionStore", "KeyTaken", "KeyedExecution", "StoreError"]

#: The ``status`` of an execution row written before acting and not completed since: the
#: action is running, or it ran and its outcome could not be recorded.
RUNNING = "running"

log = logging.getLogger(__name__)


def _aware(value: datetime) -> datetime:
    # SQLite gives naive datetimes back; everything is stored in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


#: The most an audit record keeps of one parameter's value and of all of them (JSON bytes).
MAX_AUDIT_VALUE = 4096
MAX_AUDIT_PARAMETERS = 16384
#: The key that lists the parameters an audit record cut, with their sizes.
CUT_KEY = "_cut"


def bounded_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` as the audit keeps them: a value over :data:`MAX_AUDIT_VALUE` bytes of
    JSON, or past :data:`MAX_AUDIT_PARAMETERS` in all, is left out and named in ``_cut``
    with its size (a refused call may carry anything; the log must not grow with it)."""
    kept: dict[str, Any] = {}
    cut: dict[str, int] = {}
    total = 0
    for key, value in parameters.items():
        text = json.dumps(value, default=str)
        name = str(key)[:200]
        if name == CUT_KEY or len(text) > MAX_AUDIT_VALUE or total + len(text) > MAX_AUDIT_PARAMETERS:
            cut[name] = len(text)
            continue
        kept[name] = json.loads(text)
        total += len(text) + len(name)
    if cut:
        if len(cut) > 50:  # a call with thousands of keys: their number, not their names
            cut = {"(parameters)": len(cut)}
        kept[CUT_KEY] = cut
    return kept


@dataclass(frozen=True)
class KeyedExecution:
    """The execution an idempotency key was first used for."""

    execution_id: str
    params_digest: str | None
    envelope: Envelope | None
    """``None`` while the row is ``running`` (no outcome recorded)."""


class ActionStore:
    """Executions and audit records in one SQLAlchemy database.

    Raises :class:`ConfigError` for a malformed URL, :class:`StoreSchemaError` (a
    ``ConfigError``) for a store at another schema revision
    (:func:`slurmtower.store.migrate.check_or_create`); database failures raise an error
    of the slurmtower tree (503 / exit 69).
    """

    def __init__(self, url: str, *, cluster: str = "", cluster_name: str | None = None) -> None:
        #: The ``cluster`` column of this store's rows: ``''`` for the deployment's default
        #: cluster, a name for the others (``[[clusters]]``); ``cluster_name`` is what the
        #: records read back say (``None`` in a one-cluster deployment).
        self.cluster = cluster
        self.cluster_name = cluster_name
        self.engine: Engine = make_store_engine(url)
        try:
            ensure_current(self.engine)
        except SQLAlchemyError as exc:
            # The database's own text (paths, SQL) is for the log; the problem says what failed.
            log.warning("cannot open the action store: %s: %s", type(exc).__name__, exc)
            raise StoreError(f"cannot open the action store: {type(exc).__name__} (the log has the details)") from exc

    def close(self) -> None:
        self.engine.dispose()

    def holds(self) -> HoldStore:
        """This cluster's drain holds, on this store's engine."""
        return HoldStore(self.engine, cluster=self.cluster)

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
            "cluster": self.cluster,
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(executions).values(**row))
                if audit_record is not None:
                    conn.execute(insert(audit).values(**self._audit_row(**audit_record)))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot record execution: {exc.__class__.__name__}") from exc

    def record_intent(
        self,
        *,
        execution_id: str,
        action: str,
        principal: str,
        via: str,
        dry_run: bool,
        started_at: datetime,
        audit_record: dict[str, Any],
        idempotency_key: str | None = None,
        params_digest: str | None = None,
    ) -> None:
        """Before a mutating action acts: its ``running`` execution row and its ``intent``
        audit record, in one transaction.

        Raises :class:`KeyTaken` when this principal's ``idempotency_key`` is already used on
        this cluster, :class:`StoreError` when the store cannot be written (the caller must not act).
        """
        row = {
            "execution_id": execution_id, "action": action, "status": RUNNING, "principal": principal,
            "via": via, "dry_run": dry_run, "started_at": started_at, "ended_at": started_at, "envelope": "",
            "idempotency_key": idempotency_key, "params_digest": params_digest, "cluster": self.cluster,
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(executions).values(**row))
                conn.execute(insert(audit).values(**self._audit_row(**audit_record)))
        except IntegrityError as exc:
            if idempotency_key is not None and self.find_by_key(principal, idempotency_key) is not None:
                raise KeyTaken(f"idempotency key {idempotency_key!r} is already in use",
                               param="idempotency_key") from None
            raise StoreError(f"cannot record the intent: {exc.__class__.__name__}") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot record the intent: {exc.__class__.__name__}") from exc

    def record_outcome(self, envelope: Envelope, *, audit_record: dict[str, Any] | None) -> None:
        """After acting: complete the execution row :meth:`record_intent` wrote, and append
        the outcome's audit record, in one transaction (:class:`StoreError` when it fails:
        the intent stays, the outcome unknown)."""
        values = {"status": envelope.status, "ended_at": envelope.end_time,
                  "envelope": envelope.model_dump_json()}
        try:
            with self.engine.begin() as conn:
                done = conn.execute(update(executions).where(executions.c.execution_id == envelope.execution_id)
                                    .values(**values))
                if done.rowcount != 1:
                    raise StoreError(f"execution {envelope.execution_id} has no intent row")
                if audit_record is not None:
                    conn.execute(insert(audit).values(**self._audit_row(**audit_record)))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot record the outcome: {exc.__class__.__name__}") from exc

    def find_by_key(self, principal: str, idempotency_key: str) -> KeyedExecution | None:
        """The execution ``principal`` first ran with ``idempotency_key`` on this cluster, if any."""
        stmt = select(executions.c.execution_id, executions.c.params_digest, executions.c.status,
                      executions.c.envelope).where(executions.c.cluster == self.cluster,
                                                   executions.c.principal == principal,
                                                   executions.c.idempotency_key == idempotency_key)
        try:
            with self.engine.connect() as conn:
                row = conn.execute(stmt).first()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read executions: {exc.__class__.__name__}") from exc
        if row is None:
            return None
        envelope = None if row.status == RUNNING else Envelope.model_validate_json(row.envelope)
        return KeyedExecution(execution_id=row.execution_id, params_digest=row.params_digest, envelope=envelope)

    def purge_executions(self, *, older_than: datetime) -> int:
        """Delete the executions started before ``older_than``; returns how many."""
        return self._purge(executions, executions.c.started_at, older_than, "executions")

    def purge_audit(self, *, older_than: datetime) -> int:
        """Delete the audit records written before ``older_than``; returns how many."""
        return self._purge(audit, audit.c.at, older_than, "the audit log")

    def _purge(self, table: Any, column: Any, older_than: datetime, what: str) -> int:
        try:
            with self.engine.begin() as conn:
                result = conn.execute(delete(table).where(column < older_than))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot purge {what}: {exc.__class__.__name__}") from exc
        return int(result.rowcount or 0)

    def get_execution(self, execution_id: str) -> Envelope | None:
        """The envelope of one of this cluster's executions (``None``: none of this id here);
        :class:`Conflict` for one that has no recorded outcome (running, or its outcome could
        not be recorded)."""
        try:
            with self.engine.connect() as conn:
                row = conn.execute(
                    select(executions.c.status, executions.c.envelope)
                    .where(executions.c.execution_id == execution_id, executions.c.cluster == self.cluster)
                ).first()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read executions: {exc.__class__.__name__}") from exc
        if row is None:
            return None
        if row.status == RUNNING:
            raise Conflict(f"execution {execution_id} has no recorded outcome: it is running, or it ran and "
                           "its outcome could not be recorded (see its intent in the audit log)",
                           param="execution_id")
        return Envelope.model_validate_json(row.envelope)

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
        request_id: int | None = None,
        approved_by: str | None = None,
    ) -> int:
        """Append one record; returns its ``seq``."""
        row = self._audit_row(execution_id=execution_id, at=at, who=who, via=via, action=action,
                              parameters=parameters, nodes=nodes, before=before, after=after, outcome=outcome,
                              message=message, request_id=request_id, approved_by=approved_by)
        try:
            with self.engine.begin() as conn:
                result = conn.execute(insert(audit).values(**row))
                key = result.inserted_primary_key
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot append to the audit log: {exc.__class__.__name__}") from exc
        return int(key[0]) if key else 0

    def _audit_row(
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
        request_id: int | None = None,
        approved_by: str | None = None,
    ) -> dict[str, Any]:
        return {
            "execution_id": execution_id,
            "at": at,
            "who": who,
            "via": via,
            "action": action,
            "parameters": bounded_parameters(parameters),
            "nodes": nodes[:MAX_AUDIT_PARAMETERS] if nodes else nodes,
            "before": _jsonable(before),
            "after": _jsonable(after),
            "outcome": outcome,
            "message": message[:4000],
            "cluster": self.cluster,
            "request_id": request_id,
            "approved_by": approved_by,
        }

    def jobs_acted_since(self, since: datetime, actions: Sequence[str]) -> tuple[int, dict[str, int]]:
        """How many jobs the job actions ``actions`` changed since ``since``, in all and by
        owner (their audit records' ``after.acted`` and ``after.acted_by_user``): what the job
        breaker counts."""
        stmt = (select(audit.c.after).where(audit.c.at >= since, audit.c.action.in_(list(actions)),
                                            audit.c.outcome.in_(["succeeded", "partial"]),
                                            audit.c.cluster == self.cluster))
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(stmt).scalars().all()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the audit log: {exc.__class__.__name__}") from exc
        total = 0
        by_user: dict[str, int] = {}
        for after in rows:
            if not isinstance(after, dict):
                continue
            total += int(after.get("acted", 0))
            for user, n in (after.get("acted_by_user") or {}).items():
                by_user[str(user)] = by_user.get(str(user), 0) + int(n)
        return total, by_user

    def list_audit(
        self,
        *,
        limit: int = 50,
        before: int | None = None,
        who: str | None = None,
        action: str | None = None,
        execution_id: str | None = None,
    ) -> list[AuditRecord]:
        """This cluster's records, newest first; ``before`` is the ``seq`` of the last record
        of the previous page."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000", param="limit")
        stmt = select(audit).where(audit.c.cluster == self.cluster).order_by(audit.c.seq.desc()).limit(limit)
        if before is not None:
            # seq is a 32-bit integer on PostgreSQL: the keyset bound goes as a 64-bit one (a
            # bound past every seq is no bound, not an "integer out of range" DataError).
            stmt = stmt.where(audit.c.seq < literal(before, BigInteger()))
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
            AuditRecord.model_validate({**dict(r), "at": _aware(r["at"]), "cluster": self.cluster_name})
            for r in rows
        ]
