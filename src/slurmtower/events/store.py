"""The event store: slurmtower's append-only event log and the state that must survive with it.

SQLAlchemy Core over any URL (SQLite by default, PostgreSQL tested). Five tables of
slurmtower's *own* store (never slurmdbd's), defined in :mod:`slurmtower.store.schema`:

``events``
    append-only log, integer ids that only increase (SQLite ``AUTOINCREMENT`` so ids are
    never reused after a purge; on PostgreSQL appenders are serialised with a table lock
    so ids become visible in order and a ``since_id`` reader never skips one).
``node_states``
    the last known state of each node. Written in the *same transaction* as the
    transition events derived from it (:meth:`EventStore.append` with ``node_states``,
    or :meth:`EventStore.record_snapshot`), so after a crash (even ``kill -9``) the log
    and the known states agree: the next observation neither loses nor repeats a
    transition.
``callback_nonces``
    nonces of accepted trigger callbacks until their timestamp leaves the clock-skew
    window (replay protection that survives restarts).
``rule_runs``
    one row per rule evaluation that matched: rule, event id, times, outcome, envelope.
``event_cursors``
    named "processed up to id N" markers (e.g. the rule engine's), for at-least-once
    consumers that resume after a restart.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Engine,
    Table,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError

from slurmtower.errors import InvalidInput, NotFound
from slurmtower.events.transitions import NodeSnapshot, diff_states
from slurmtower.models.event import Event, RuleRun
from slurmtower.store import schema as _schema
from slurmtower.store.engine import READ_ONLY, make_store_engine, memory_sqlite
from slurmtower.store.revision import ensure_current

__all__ = ["MAX_QUERY_LIMIT", "EventStore", "PurgeResult", "notify_channel"]

MAX_QUERY_LIMIT = 10_000


@dataclass(frozen=True)
class PurgeResult:
    """How many rows :meth:`EventStore.purge` removed, per table."""

    events: int
    rule_runs: int
    nonces: int


@dataclass(frozen=True)
class _Tables:
    events: Table
    node_states: Table
    nonces: Table
    rule_runs: Table
    cursors: Table


_TABLES = _Tables(
    _schema.events, _schema.node_states, _schema.callback_nonces, _schema.rule_runs, _schema.event_cursors
)


def _now() -> datetime:
    return datetime.now(UTC)


def notify_channel(schema: str | None) -> str:
    """The PostgreSQL NOTIFY channel of a store's new events (one per schema)."""
    return f"slurmtower_events_{schema}"[:63] if schema else "slurmtower_events"


class EventStore:
    """Event log, known node states, callback nonces, rule runs and cursors.

    Args:
        url: SQLAlchemy URL (``sqlite:///path.db``, ``postgresql+psycopg://...``) or an
            :class:`~sqlalchemy.Engine`. ``sqlite://`` is an in-memory store.
        schema: database schema to hold the tables (PostgreSQL), default the search path;
            the store's tables are mapped to it with ``schema_translate_map``.
        create: check the store's schema revision at start, creating an empty store
            (:func:`slurmtower.store.migrate.check_or_create`; only ever on slurmtower's own
            store). ``False`` trusts the caller to have done so.

    Raises :class:`ConfigError` for a malformed URL, :class:`StoreSchemaError` (a
    ``ConfigError``) for a store at another schema revision (``slurmtower db upgrade``).
    """

    def __init__(
        self, url: str | Engine = "sqlite://", *, schema: str | None = None, create: bool = True,
        default_cluster: str | None = None,
    ) -> None:
        #: The ``cluster`` column this store writes and whose node states it keeps: ``''`` for
        #: the deployment's default cluster, a name for the others (:meth:`scoped`).
        self.cluster = ""
        #: The default cluster's name as events read back show it (``None``: one cluster).
        self.default_cluster = default_cluster
        self._base_engine = url if isinstance(url, Engine) else make_store_engine(url)
        self._schema = schema
        self._engine = self._base_engine.execution_options(**_schema.schema_options(schema))
        self._t = _TABLES
        # SQLite's in-memory store shares one connection between threads: serialise its use.
        # Any other store has a connection per thread: a slow reader (an SSE catch-up) must
        # not hold up the sensor's recording, so nothing is serialised in Python there.
        shared = memory_sqlite(self._engine.url)
        self._lock: AbstractContextManager[Any] = threading.RLock() if shared else nullcontext()
        if create:
            ensure_current(self._base_engine, schema=schema)

    def scoped(self, cluster: str) -> EventStore:
        """This store (its engine, tables and lock) writing for cluster ``cluster`` (its
        :meth:`~slurmtower.settings.Settings.cluster_key`): its events carry it, its node
        states are that cluster's."""
        if cluster == self.cluster:
            return self
        other = copy.copy(self)
        other.cluster = cluster
        return other

    def cursor_name(self, name: str) -> str:
        """A cursor of this store's cluster (``rules`` for the default, ``rules@gpu`` ...)."""
        return f"{name}@{self.cluster}" if self.cluster else name

    def cluster_key(self, name: str | None) -> str:
        """The ``cluster`` column for cluster ``name`` (``''`` for the default cluster)."""
        return "" if name is None or self.default_cluster is None or name == self.default_cluster else name

    @property
    def engine(self) -> Engine:
        """The store's engine (its connections map the tables to :attr:`schema`)."""
        return self._engine

    @property
    def schema(self) -> str | None:
        """The database schema holding the tables (``None``: the default)."""
        return self._schema

    def close(self) -> None:
        """Release the connection pool."""
        self._base_engine.dispose()

    # -- transactions -------------------------------------------------------------------

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        with self._lock, self._engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read-only transaction: on SQLite a deferred ``BEGIN``, which takes no write lock
        (readers never wait for the sensor's writes, thanks to WAL, nor block them)."""
        with self._lock, self._engine.connect() as conn:
            conn.execution_options(**READ_ONLY)
            with conn.begin():
                yield conn

    def _lock_tables(self, conn: Connection, *tables: Table) -> None:
        """On PostgreSQL, serialise writers of ``tables`` until commit (readers unaffected).

        Sequence values are handed out before commit, so two concurrent appenders could
        commit ids out of order and a ``since_id`` reader would skip the smaller one.
        SQLite needs nothing: ``BEGIN IMMEDIATE`` already admits one writer at a time.
        """
        if conn.dialect.name != "postgresql":
            return
        prep = conn.dialect.identifier_preparer
        # schema_translate_map does not reach into text(): qualify the name here.
        qualifier = f"{prep.quote_schema(self._schema)}." if self._schema else ""
        for table in tables:
            conn.execute(text(f"LOCK TABLE {qualifier}{prep.quote(table.name)} IN SHARE ROW EXCLUSIVE MODE"))

    # -- events -------------------------------------------------------------------------

    def append(
        self,
        events: Iterable[Event],
        *,
        node_states: Mapping[str, NodeSnapshot | None] | None = None,
        replace_node_states: bool = False,
    ) -> list[Event]:
        """Append ``events`` in one transaction and return them with their new ids.

        Args:
            events: events without ids (an id already set is ignored and replaced).
            node_states: known states to save in the same transaction; ``None`` for a
                node forgets it.
            replace_node_states: ``node_states`` is the whole cluster; forget the others.
        """
        batch = list(events)
        with self._begin() as conn:
            if node_states is not None:
                self._lock_tables(conn, self._t.node_states)
            if batch:
                self._lock_tables(conn, self._t.events)
            stored = self._insert_events(conn, batch)
            if node_states is not None:
                self._save_states(conn, node_states, replace=replace_node_states, observed_at=None)
        return stored

    def _insert_events(self, conn: Connection, batch: Sequence[Event]) -> list[Event]:
        t = self._t.events
        rows = [{"type": ev.type, "time": ev.time, "source": ev.source, "node": ev.node, "payload": ev.payload,
                 "cluster": self.cluster if ev.cluster is None else self.cluster_key(ev.cluster)} for ev in batch]
        if len(rows) > 1 and conn.dialect.insert_executemany_returning_sort_by_parameter_order:
            # One statement for the batch (a first start records every node of the cluster:
            # 5,000 single INSERTs took seconds of the serving process's GIL), ids in order.
            ids = [int(i) for i in conn.execute(
                insert(t).returning(t.c.id, sort_by_parameter_order=True), rows).scalars()]
        else:
            ids = []
            for row in rows:
                pk = conn.execute(insert(t).values(**row)).inserted_primary_key
                assert pk is not None
                ids.append(int(pk[0]))
        stored = [ev.model_copy(update={"id": i, "cluster": ev.cluster or self._name(self.cluster)})
                  for ev, i in zip(batch, ids, strict=True)]
        if stored and conn.dialect.name == "postgresql":
            # Every process's event feed LISTENs: delivered at commit, with the rows.
            conn.execute(text("SELECT pg_notify(:channel, :last)"),
                         {"channel": notify_channel(self.schema), "last": str(stored[-1].id)})
        return stored

    def record_snapshot(
        self,
        current: Mapping[str, NodeSnapshot],
        *,
        source: str,
        observed_at: datetime | None = None,
        partial: bool = False,
        include_appeared: bool = True,
        extra_events: Iterable[Event] = (),
    ) -> list[Event]:
        """Diff ``current`` against the stored node states, append the transitions and save
        ``current`` as the known states, all in one transaction.

        This is the race-free way to turn an observation into events: two concurrent
        recorders (a poll and a trigger callback) are serialised, so the same transition
        is never recorded twice. ``partial`` means ``current`` covers only some nodes.
        ``extra_events`` (e.g. the ``slurm.sensor.trigger.triggered`` event that caused
        this observation) are appended first, in the same transaction.
        Returns the stored events (extras first) with their ids.
        """
        observed_at = observed_at or _now()
        extras = list(extra_events)
        with self._begin() as conn:
            self._lock_tables(conn, self._t.node_states, self._t.events)
            previous = self._read_states(conn)
            transitions = diff_states(
                previous,
                current,
                source=source,
                observed_at=observed_at,
                partial=partial,
                include_appeared=include_appeared,
            )
            stored = self._insert_events(conn, [*extras, *transitions])
            changed: dict[str, NodeSnapshot | None] = {
                name: snap for name, snap in current.items() if previous.get(name) != snap
            }
            self._save_states(conn, changed, replace=False, observed_at=observed_at)
            if not partial:
                gone = set(previous) - set(current)
                if gone:
                    conn.execute(delete(self._t.node_states).where(self._t.node_states.c.cluster == self.cluster,
                                                                   self._t.node_states.c.node.in_(gone)))
        return stored

    def get(self, event_id: int) -> Event:
        """The event with ``event_id``; raises :class:`NotFound` (purged or never existed)."""
        with self._read() as conn:
            row = conn.execute(select(self._t.events).where(self._t.events.c.id == event_id)).first()
        if row is None:
            raise NotFound(f"no event with id {event_id}", event_id=event_id)
        return self._event(row._mapping)

    def query(
        self,
        *,
        since_id: int | None = None,
        before_id: int | None = None,
        types: Sequence[str] | None = None,
        node: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 1000,
        descending: bool = False,
        cluster: str | None = None,
        own: bool = False,
    ) -> list[Event]:
        """Events matching all given filters, by id (oldest first unless ``descending``).

        Args:
            since_id: only events with a larger id (keyset pagination, tailing).
            before_id: only events with a smaller id (paging backwards).
            types: event types to include (exact names).
            node: only events about this node.
            start, end: ``start <= time < end`` (timezone-aware).
            limit: at most this many events (1 .. ``MAX_QUERY_LIMIT``).
            cluster: only events of this cluster (its name; ``None``: every cluster's).
            own: only the events of this store's cluster (:meth:`scoped`): what its rules see.

        Raises :class:`InvalidInput` for a bad limit or naive datetimes.
        """
        if not 1 <= limit <= MAX_QUERY_LIMIT:
            raise InvalidInput(f"limit must be between 1 and {MAX_QUERY_LIMIT}", param="limit")
        for name, value in (("start", start), ("end", end)):
            if value is not None and value.tzinfo is None:
                raise InvalidInput(f"{name} must be timezone-aware", param=name)
        t = self._t.events
        stmt = select(t)
        if since_id is not None:
            stmt = stmt.where(t.c.id > since_id)
        if before_id is not None:
            stmt = stmt.where(t.c.id < before_id)
        if types is not None:
            stmt = stmt.where(t.c.type.in_(list(types)))
        if node is not None:
            stmt = stmt.where(t.c.node == node)
        if cluster is not None:
            stmt = stmt.where(t.c.cluster == self.cluster_key(cluster))
        elif own and (self.cluster or self.default_cluster is not None):
            stmt = stmt.where(t.c.cluster == self.cluster)
        if start is not None:
            stmt = stmt.where(t.c.time >= start)
        if end is not None:
            stmt = stmt.where(t.c.time < end)
        stmt = stmt.order_by(t.c.id.desc() if descending else t.c.id.asc()).limit(limit)
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        return [self._event(r._mapping) for r in rows]

    def last_id(self) -> int | None:
        """The largest event id in the log, or ``None`` when it is empty."""
        with self._read() as conn:
            value = conn.execute(select(func.max(self._t.events.c.id))).scalar()
        return None if value is None else int(value)

    def _name(self, key: str) -> str | None:
        """The cluster name a row's ``cluster`` column stands for (``None``: one cluster)."""
        return key or self.default_cluster

    def _event(self, row: RowMapping) -> Event:
        return Event(
            id=int(row["id"]),
            type=row["type"],
            time=row["time"],
            source=row["source"],
            node=row["node"],
            payload=row["payload"],
            cluster=self._name(row["cluster"]),
        )

    def purge(self, older_than: datetime | timedelta, *, now: datetime | None = None) -> PurgeResult:
        """Retention: delete events and rule runs from before ``older_than`` and expired nonces.

        ``older_than`` is a cut-off time or an age (``timedelta(days=retention_days)``).
        Ids of the remaining events never change and are never reused.
        """
        now = now or _now()
        cutoff = now - older_than if isinstance(older_than, timedelta) else older_than
        if cutoff.tzinfo is None:
            raise InvalidInput("older_than must be timezone-aware", param="older_than")
        with self._begin() as conn:
            ev = conn.execute(delete(self._t.events).where(self._t.events.c.time < cutoff)).rowcount
            runs = conn.execute(
                delete(self._t.rule_runs).where(self._t.rule_runs.c.started_at < cutoff)
            ).rowcount
            nonces = conn.execute(delete(self._t.nonces).where(self._t.nonces.c.expires_at < now)).rowcount
        return PurgeResult(events=ev, rule_runs=runs, nonces=nonces)

    # -- node states --------------------------------------------------------------------

    def load_node_states(self) -> dict[str, NodeSnapshot]:
        """The last known state of every node (empty on a fresh store)."""
        with self._read() as conn:
            return self._read_states(conn)

    def _read_states(self, conn: Connection) -> dict[str, NodeSnapshot]:
        rows = conn.execute(select(self._t.node_states).where(self._t.node_states.c.cluster == self.cluster)).all()
        return {
            r.node: NodeSnapshot(
                state=r.state,
                flags=frozenset(r.flags),
                reason=r.reason,
                reason_owner=r.reason_owner,
            )
            for r in rows
        }

    def save_node_states(
        self,
        states: Mapping[str, NodeSnapshot | None],
        *,
        replace: bool = False,
        observed_at: datetime | None = None,
    ) -> None:
        """Save known node states (``None`` forgets a node); ``replace`` forgets all others.

        To record transitions, prefer :meth:`append` with ``node_states`` or
        :meth:`record_snapshot`, which save the states with the events atomically.
        """
        with self._begin() as conn:
            self._lock_tables(conn, self._t.node_states)
            self._save_states(conn, states, replace=replace, observed_at=observed_at)

    def _save_states(
        self,
        conn: Connection,
        states: Mapping[str, NodeSnapshot | None],
        *,
        replace: bool,
        observed_at: datetime | None,
    ) -> None:
        t = self._t.node_states
        when = observed_at or _now()
        mine = t.c.cluster == self.cluster
        if replace:
            keep = [n for n, s in states.items() if s is not None]
            conn.execute(delete(t).where(mine, t.c.node.not_in(keep)) if keep else delete(t).where(mine))
        existing = set(conn.execute(select(t.c.node).where(mine)).scalars())
        forget = [name for name, snap in states.items() if snap is None]
        if forget:
            conn.execute(delete(t).where(mine, t.c.node.in_(forget)))
        added: list[dict[str, Any]] = []
        changed: list[dict[str, Any]] = []
        for name, snap in states.items():
            if snap is None:
                continue
            values = {"state": snap.state, "flags": sorted(snap.flags), "reason": snap.reason,
                      "reason_owner": snap.reason_owner, "observed_at": when}
            if name in existing:
                changed.append({"key_node": name, **values})
            else:
                added.append({"cluster": self.cluster, "node": name, **values})
        # One executemany each (a first start, or a drain of 1,000 nodes, saves them all).
        if added:
            conn.execute(insert(t), added)
        if changed:
            conn.execute(update(t).where(mine, t.c.node == bindparam("key_node")), changed)

    # -- nonces -------------------------------------------------------------------------

    def remember_nonce(self, nonce: str, *, expires_at: datetime, now: datetime | None = None) -> bool:
        """Record a callback nonce; ``False`` if it was already recorded (a replay).

        Expired nonces are dropped first; keep ``expires_at`` at least as late as the end
        of the clock-skew window of the request that carried it.
        """
        now = now or _now()
        t = self._t.nonces
        try:
            with self._begin() as conn:
                conn.execute(delete(t).where(t.c.expires_at < now))
                conn.execute(insert(t).values(nonce=nonce, expires_at=expires_at))
        except IntegrityError:
            return False
        return True

    # -- rule runs ----------------------------------------------------------------------

    def record_rule_run(self, run: RuleRun) -> RuleRun:
        """Store one rule run; returns it with its id."""
        with self._begin() as conn:
            result = conn.execute(
                insert(self._t.rule_runs).values(
                    rule=run.rule,
                    event_id=run.event_id,
                    node=run.node,
                    action_ref=run.action_ref,
                    started_at=run.started_at,
                    ended_at=run.ended_at,
                    outcome=run.outcome,
                    envelope=run.envelope,
                )
            )
            pk = result.inserted_primary_key
            assert pk is not None
        return run.model_copy(update={"id": int(pk[0])})

    def rule_runs(
        self,
        *,
        rule: str | None = None,
        event_id: int | None = None,
        node: str | None = None,
        outcomes: Sequence[str] | None = None,
        since: datetime | None = None,
        limit: int = 1000,
    ) -> list[RuleRun]:
        """Recorded rule runs matching all given filters, oldest first."""
        if not 1 <= limit <= MAX_QUERY_LIMIT:
            raise InvalidInput(f"limit must be between 1 and {MAX_QUERY_LIMIT}", param="limit")
        t = self._t.rule_runs
        stmt = select(t)
        if rule is not None:
            stmt = stmt.where(t.c.rule == rule)
        if event_id is not None:
            stmt = stmt.where(t.c.event_id == event_id)
        if node is not None:
            stmt = stmt.where(t.c.node == node)
        if outcomes is not None:
            stmt = stmt.where(t.c.outcome.in_(list(outcomes)))
        if since is not None:
            stmt = stmt.where(t.c.started_at >= since)
        with self._read() as conn:
            rows = conn.execute(stmt.order_by(t.c.id).limit(limit)).all()
        return [
            RuleRun(
                id=int(r.id),
                rule=r.rule,
                event_id=r.event_id,
                node=r.node,
                action_ref=r.action_ref,
                started_at=r.started_at,
                ended_at=r.ended_at,
                outcome=r.outcome,
                envelope=r.envelope,
            )
            for r in rows
        ]

    def count_rule_runs(
        self, rule: str, *, since: datetime, outcomes: Sequence[str], node: str | None = None
    ) -> int:
        """How many runs of ``rule`` (for ``node``, if given) started at or after ``since``."""
        t = self._t.rule_runs
        stmt = (
            select(func.count())
            .select_from(t)
            .where(t.c.rule == rule, t.c.started_at >= since, t.c.outcome.in_(list(outcomes)))
        )
        if node is not None:
            stmt = stmt.where(t.c.node == node)
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def counts(self, hidden_nodes: Collection[str] = ()) -> tuple[dict[str, int], dict[str, int]]:
        """Events by type and rule runs by outcome over the whole store (``/metrics``), those
        of ``hidden_nodes`` left out (the visibility policy's nodes only in hidden partitions)."""
        events, runs = self._t.events, self._t.rule_runs
        by_type_q = select(events.c.type, func.count()).group_by(events.c.type)
        by_outcome_q = select(runs.c.outcome, func.count()).group_by(runs.c.outcome)
        if hidden_nodes:
            hidden = sorted(hidden_nodes)
            by_type_q = by_type_q.where(or_(events.c.node.is_(None), events.c.node.not_in(hidden)))
            by_outcome_q = by_outcome_q.where(or_(runs.c.node.is_(None), runs.c.node.not_in(hidden)))
        with self._read() as conn:
            by_type = conn.execute(by_type_q).all()
            by_outcome = conn.execute(by_outcome_q).all()
        return {str(t): int(c) for t, c in by_type}, {str(o): int(c) for o, c in by_outcome}

    def last_rule_run_start(
        self, rule: str, *, outcomes: Sequence[str], node: str | None = None
    ) -> datetime | None:
        """Start time of the latest run of ``rule`` (for ``node``, if given) with an outcome
        in ``outcomes``, or ``None``."""
        t = self._t.rule_runs
        stmt = select(func.max(t.c.started_at)).where(t.c.rule == rule, t.c.outcome.in_(list(outcomes)))
        if node is not None:
            stmt = stmt.where(t.c.node == node)
        with self._read() as conn:
            value = conn.execute(stmt).scalar()
        if value is None:
            return None
        # func.max() loses the column type on SQLite, so the text comes back unparsed.
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    # -- cursors ------------------------------------------------------------------------

    def get_cursor(self, name: str) -> int:
        """The last event id consumer ``name`` has processed (0 if it never ran)."""
        t = self._t.cursors
        with self._read() as conn:
            value = conn.execute(select(t.c.last_id).where(t.c.name == name)).scalar()
        return 0 if value is None else int(value)

    def set_cursor(self, name: str, last_id: int) -> None:
        """Record that consumer ``name`` has processed every event up to ``last_id``."""
        t = self._t.cursors
        with self._begin() as conn:
            found = conn.execute(select(t.c.name).where(t.c.name == name)).first()
            if found is None:
                conn.execute(insert(t).values(name=name, last_id=last_id, updated_at=_now()))
            else:
                conn.execute(update(t).where(t.c.name == name).values(last_id=last_id, updated_at=_now()))
