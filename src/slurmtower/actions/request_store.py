"""The requests' store and who owns each reservation slurmtower made.

Two tables of :mod:`slurmtower.store.schema`, on the action store's engine, each row its
cluster's:

* ``action_requests`` (:class:`RequestStore`): one row per request; a state moves on only by a
  conditional update from the state it was read in (:meth:`RequestStore.move`), so two people
  deciding at once, or a decision meeting the expiry sweep, change it once;
* ``reservation_owners`` (:class:`ReservationOwners`): the owner tag of who made (or asked for)
  each reservation, who approved it: the calendar's owner (Slurm 22.05 keeps no comment on a
  reservation; later releases carry the tag in its ``Comment`` too).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Engine, delete, func, insert, literal, select, update
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.errors import InvalidInput, StoreError
from slurmtower.models.request import ActionRequest
from slurmtower.store.schema import action_requests as requests
from slurmtower.store.schema import reservation_owners as owners

__all__ = ["OwnerRecord", "RequestStore", "ReservationOwners"]


def _aware(value: datetime | None) -> datetime | None:
    return value if value is None or value.tzinfo is not None else value.replace(tzinfo=UTC)


class RequestStore:
    """One cluster's requests (``cluster``: the store's ``cluster`` column; ``cluster_name``
    what the records read back say, ``None`` in a one-cluster deployment).

    Database failures raise :class:`StoreError` (503 / exit 69).
    """

    def __init__(self, engine: Engine, *, cluster: str = "", cluster_name: str | None = None) -> None:
        self.engine = engine
        self.cluster = cluster
        self.cluster_name = cluster_name

    def _record(self, row: Any) -> ActionRequest:
        values = dict(row)
        del values["cluster"]
        for key in ("created_at", "expires_at", "decided_at"):
            values[key] = _aware(values[key])
        return ActionRequest.model_validate({**values, "cluster": self.cluster_name})

    def add(self, **values: Any) -> ActionRequest:
        """Store a new request (the columns of ``action_requests`` but ``id``); returns it."""
        try:
            with self.engine.begin() as conn:
                key = conn.execute(insert(requests).values(**values, cluster=self.cluster)).inserted_primary_key
                assert key is not None
                row = conn.execute(select(requests).where(requests.c.id == key[0])).mappings().one()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot record the request: {exc.__class__.__name__}") from exc
        return self._record(row)

    def get(self, request_id: int) -> ActionRequest | None:
        """This cluster's request ``request_id`` (``None``: none here)."""
        try:
            with self.engine.connect() as conn:
                row = conn.execute(select(requests).where(requests.c.id == literal(request_id, BigInteger()),
                                                          requests.c.cluster == self.cluster)).mappings().first()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read requests: {exc.__class__.__name__}") from exc
        return None if row is None else self._record(row)

    def move(self, request_id: int, from_states: Collection[str], **values: Any) -> ActionRequest | None:
        """Set ``values`` (a new ``state`` ...) on the request when it is in one of
        ``from_states``; the request as it is then, or ``None`` when it was not (someone else
        moved it first)."""
        stmt = (update(requests).where(requests.c.id == literal(request_id, BigInteger()),
                                       requests.c.cluster == self.cluster,
                                       requests.c.state.in_(list(from_states))).values(**values))
        try:
            with self.engine.begin() as conn:
                if conn.execute(stmt).rowcount != 1:
                    return None
                row = conn.execute(select(requests).where(requests.c.id == literal(request_id, BigInteger())))
                return self._record(row.mappings().one())
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot record the request's decision: {exc.__class__.__name__}") from exc

    def find(self, *, states: Sequence[str] = (), requester: str | None = None, action: str | None = None,
             limit: int = 50, before: int | None = None) -> list[ActionRequest]:
        """This cluster's requests, newest first; ``before`` is the ``id`` of the last request of
        the previous page."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000", param="limit")
        stmt = select(requests).where(requests.c.cluster == self.cluster).order_by(requests.c.id.desc()).limit(limit)
        if before is not None:
            stmt = stmt.where(requests.c.id < literal(before, BigInteger()))
        if states:
            stmt = stmt.where(requests.c.state.in_(list(states)))
        if requester:
            stmt = stmt.where(requests.c.requester == requester)
        if action:
            stmt = stmt.where(requests.c.action == action)
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(stmt).mappings().all()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read requests: {exc.__class__.__name__}") from exc
        return [self._record(r) for r in rows]

    def count(self, *, state: str = "pending", requester: str | None = None) -> int:
        """How many of this cluster's requests are in ``state`` (of ``requester``'s)."""
        stmt = select(func.count()).select_from(requests).where(requests.c.cluster == self.cluster,
                                                                 requests.c.state == state)
        if requester:
            stmt = stmt.where(requests.c.requester == requester)
        try:
            with self.engine.connect() as conn:
                return int(conn.execute(stmt).scalar_one())
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read requests: {exc.__class__.__name__}") from exc

    def overdue(self, now: datetime) -> list[ActionRequest]:
        """This cluster's pending requests whose expiry has passed."""
        stmt = select(requests).where(requests.c.cluster == self.cluster, requests.c.state == "pending",
                                      requests.c.expires_at <= now).order_by(requests.c.id)
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(stmt).mappings().all()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read requests: {exc.__class__.__name__}") from exc
        return [self._record(r) for r in rows]


class OwnerRecord(dict[str, Any]):
    """One reservation's owner row: ``owner``, ``approved_by``, ``request_id``, ``execution_id``,
    ``reason``, ``updated_at``."""


class ReservationOwners:
    """Who owns each reservation slurmtower made on one cluster."""

    def __init__(self, engine: Engine, *, cluster: str = "") -> None:
        self.engine = engine
        self.cluster = cluster

    def set(self, name: str, *, owner: str, execution_id: str, approved_by: str | None = None,
            request_id: int | None = None, reason: str | None = None) -> None:
        """Record (or replace) ``name``'s owner."""
        row = {"cluster": self.cluster, "name": name, "owner": owner, "approved_by": approved_by,
               "request_id": request_id, "execution_id": execution_id, "reason": reason,
               "updated_at": datetime.now(UTC)}
        try:
            with self.engine.begin() as conn:
                conn.execute(delete(owners).where(owners.c.cluster == self.cluster, owners.c.name == name))
                conn.execute(insert(owners).values(**row))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot record the reservation's owner: {exc.__class__.__name__}") from exc

    def forget(self, names: Collection[str]) -> None:
        """Drop the rows of ``names`` (deleted reservations, or gone from Slurm)."""
        if not names:
            return
        try:
            with self.engine.begin() as conn:
                conn.execute(delete(owners).where(owners.c.cluster == self.cluster, owners.c.name.in_(list(names))))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot forget reservation owners: {exc.__class__.__name__}") from exc

    def all(self) -> dict[str, OwnerRecord]:
        """Every row of this cluster, by reservation name."""
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(select(owners).where(owners.c.cluster == self.cluster)).mappings().all()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read reservation owners: {exc.__class__.__name__}") from exc
        return {r["name"]: OwnerRecord({k: v for k, v in r.items() if k not in ("cluster", "name")}) for r in rows}
