"""The event store on SQLite and on the real local PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError, StatementError

from slurmtower.errors import ConfigError, InvalidInput, NotFound
from slurmtower.events.store import EventStore
from slurmtower.events.transitions import NodeSnapshot
from slurmtower.models.event import NODE_STATE, SENSOR_UP, Event, RuleRun

PG_URL = "postgresql+psycopg://postgres@127.0.0.1/test"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def pg_schema() -> Iterator[str]:
    """A scratch schema in the local PostgreSQL, dropped afterwards (skip if none answers)."""
    try:
        engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.begin() as conn:
            schema = f"st_events_{uuid.uuid4().hex[:12]}"
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {PG_URL}: {exc.orig}")
    yield schema
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()


def _pg_store(schema: str) -> EventStore:
    # A fresh store for each test (its schema revision included) in the module's scratch schema.
    engine = create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    return EventStore(engine, schema=schema)


@pytest.fixture(params=["sqlite-memory", "sqlite-file", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "sqlite-memory":
        s = EventStore("sqlite://")
    elif request.param == "sqlite-file":
        s = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    else:
        s = _pg_store(request.getfixturevalue("pg_schema"))
    yield s
    s.close()


def ev(node: str | None = "n1", *, type: str = NODE_STATE, time: datetime = T0, **payload: object) -> Event:
    return Event(type=type, time=time, source="poll", node=node, payload=dict(payload))


def test_append_assigns_increasing_ids(store: EventStore) -> None:
    assert store.last_id() is None
    first = store.append([ev("n1"), ev("n2")])
    second = store.append([ev("n3")])
    ids = [e.id for e in first + second]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3
    assert store.last_id() == ids[-1]
    assert [e.node for e in store.query()] == ["n1", "n2", "n3"]


def test_events_round_trip_with_utc_times_and_json_payload(store: EventStore) -> None:
    (stored,) = store.append([ev("n1", flags=["DRAIN"], nested={"a": [1, 2]}, reason=None)])
    assert stored.id is not None
    loaded = store.get(stored.id)
    assert loaded == stored
    assert loaded.time.tzinfo is not None
    assert loaded.time.utcoffset() == timedelta(0)
    with pytest.raises(NotFound):
        store.get(stored.id + 1000)


def test_query_filters_and_keyset_pagination(store: EventStore) -> None:
    store.append(
        [
            ev("n1", time=T0),
            ev("n2", time=T0 + timedelta(minutes=1)),
            ev(None, type=SENSOR_UP, time=T0 + timedelta(minutes=2), uuid="u"),
            ev("n1", time=T0 + timedelta(minutes=3)),
        ]
    )
    all_ids = [e.id for e in store.query()]
    assert [e.node for e in store.query(node="n1")] == ["n1", "n1"]
    assert [e.type for e in store.query(types=[SENSOR_UP])] == [SENSOR_UP]
    window = store.query(start=T0 + timedelta(minutes=1), end=T0 + timedelta(minutes=3))
    assert [e.id for e in window] == all_ids[1:3]
    page1 = store.query(limit=2)
    page2 = store.query(since_id=page1[-1].id, limit=2)
    assert [e.id for e in page1 + page2] == all_ids
    newest = store.query(descending=True, limit=1)
    assert newest[0].id == all_ids[-1]
    assert [e.id for e in store.query(before_id=all_ids[2], descending=True)] == all_ids[1::-1]


def test_query_refuses_bad_limits_and_naive_times(store: EventStore) -> None:
    with pytest.raises(InvalidInput):
        store.query(limit=0)
    with pytest.raises(InvalidInput):
        store.query(start=datetime(2026, 1, 1))


def test_purge_removes_old_events_and_ids_are_never_reused(store: EventStore) -> None:
    old = store.append([ev("n1", time=T0), ev("n2", time=T0)])
    recent = store.append([ev("n3", time=T0 + timedelta(days=100))])
    result = store.purge(timedelta(days=90), now=T0 + timedelta(days=100))
    assert result.events == 2
    assert [e.id for e in store.query()] == [recent[0].id]
    store.purge(timedelta(days=0), now=T0 + timedelta(days=200))
    assert store.query() == []
    (after,) = store.append([ev("n4")])
    assert after.id is not None and recent[0].id is not None
    assert after.id > recent[0].id > max(e.id or 0 for e in old)


def test_node_states_are_saved_with_events_in_one_transaction(store: EventStore) -> None:
    states = {"n1": NodeSnapshot("DOWN", frozenset({"NOT_RESPONDING"}), "gone", "root")}
    store.append([ev("n1")], node_states=states)
    assert store.load_node_states() == states
    # A failing append (naive datetime rejected at bind time) must not save the states.
    bad = Event.model_construct(
        type=NODE_STATE, time=datetime(2026, 1, 1), source="poll", node="n2", payload={}
    )
    with pytest.raises(StatementError, match="naive datetime"):
        store.append([ev("n2"), bad], node_states={"n2": NodeSnapshot("IDLE")})
    assert "n2" not in store.load_node_states()
    assert [e.node for e in store.query()] == ["n1"]


def test_save_node_states_replace_and_forget(store: EventStore) -> None:
    store.save_node_states({"n1": NodeSnapshot("IDLE"), "n2": NodeSnapshot("IDLE")})
    store.save_node_states({"n2": None})
    assert set(store.load_node_states()) == {"n1"}
    store.save_node_states({"n3": NodeSnapshot("MIXED")}, replace=True)
    assert store.load_node_states() == {"n3": NodeSnapshot("MIXED")}


def test_record_snapshot_emits_each_transition_exactly_once(store: EventStore) -> None:
    first = store.record_snapshot({"n1": NodeSnapshot("IDLE"), "n2": NodeSnapshot("IDLE")}, source="startup")
    assert [e.payload["change"] for e in first] == ["appeared", "appeared"]
    down = {"n1": NodeSnapshot("DOWN", reason="dead"), "n2": NodeSnapshot("IDLE")}
    second = store.record_snapshot(down, source="poll")
    again = store.record_snapshot(down, source="poll")
    assert [(e.node, e.payload["state"]) for e in second] == [("n1", "DOWN")]
    assert again == []
    # Reason changes are saved though they are no event.
    store.record_snapshot({"n1": NodeSnapshot("DOWN", reason="dead, PSU")}, source="poll", partial=True)
    assert store.load_node_states()["n1"].reason == "dead, PSU"
    gone = store.record_snapshot({"n1": NodeSnapshot("DOWN", reason="dead, PSU")}, source="poll")
    assert [(e.node, e.payload["change"]) for e in gone] == [("n2", "disappeared")]
    assert set(store.load_node_states()) == {"n1"}


def test_a_whole_clusters_first_snapshot_is_recorded_node_by_node_in_one_batch(store: EventStore) -> None:
    """A first start on 5,000 nodes (and then a drain of 1,000 of them): one event per node,
    ids in natural node order, every state saved; each stored event is what the query reads."""
    nodes = {f"n{i}": NodeSnapshot("IDLE") for i in range(1, 5001)}
    first = store.record_snapshot(nodes, source="startup")
    assert [e.node for e in first] == [f"n{i}" for i in range(1, 5001)]
    ids = [e.id for e in first]
    assert ids == sorted(ids) and len(set(ids)) == 5000 and all(i is not None for i in ids)
    assert store.load_node_states() == nodes
    read = store.query(limit=10000)
    assert [(e.id, e.node, e.payload["change"]) for e in read] == [(e.id, e.node, "appeared") for e in first]
    drained = {**nodes, **{f"n{i}": NodeSnapshot("IDLE", frozenset({"DRAIN"}), reason="rack") for i in range(2, 1002)}}
    second = store.record_snapshot(drained, source="poll")
    assert [e.node for e in second] == [f"n{i}" for i in range(2, 1002)]
    assert all(e.payload["flags_added"] == ["DRAIN"] for e in second) and second[0].id > ids[-1]
    assert store.load_node_states() == drained
    assert store.record_snapshot(drained, source="poll") == []


def test_record_snapshot_appends_extra_events_first(store: EventStore) -> None:
    payload = {"uuid": "u", "class": "node", "type": "down", "argument": "n1"}
    extra = Event(type="slurm.sensor.trigger.triggered", time=T0, source="trigger", payload=payload)
    stored = store.record_snapshot({"n1": NodeSnapshot("DOWN")}, source="trigger", extra_events=[extra])
    assert [e.type for e in stored] == ["slurm.sensor.trigger.triggered", NODE_STATE]
    assert stored[0].id is not None and stored[1].id is not None
    assert stored[0].id < stored[1].id


def test_concurrent_snapshots_record_a_transition_once(
    store: EventStore, request: pytest.FixtureRequest
) -> None:
    if "memory" in request.node.callspec.id:
        pytest.skip("one shared in-memory connection: nothing concurrent to test")
    store.record_snapshot({f"n{i}": NodeSnapshot("IDLE") for i in range(20)}, source="startup")
    down = {f"n{i}": NodeSnapshot("DOWN") for i in range(20)}
    # Separate stores (separate connection pools) on the same database, like two processes.
    url = store.engine.url.render_as_string(hide_password=False)
    schema = store.schema
    others = [EventStore(url, schema=schema) for _ in range(4)]
    results: list[int] = []
    barrier = threading.Barrier(len(others))

    def record(s: EventStore) -> None:
        barrier.wait()
        results.append(len(s.record_snapshot(down, source="poll")))

    threads = [threading.Thread(target=record, args=(s,)) for s in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in others:
        s.close()
    assert sorted(results) == [0, 0, 0, 20]
    assert len(store.query(types=[NODE_STATE])) == 40


def test_nonces_are_remembered_until_they_expire(store: EventStore) -> None:
    assert store.remember_nonce("a" * 32, expires_at=T0 + timedelta(seconds=60), now=T0)
    assert not store.remember_nonce(
        "a" * 32, expires_at=T0 + timedelta(seconds=60), now=T0 + timedelta(seconds=30)
    )
    # Once expired it is dropped (the callback timestamp check refuses it by then).
    assert store.remember_nonce(
        "a" * 32, expires_at=T0 + timedelta(seconds=200), now=T0 + timedelta(seconds=61)
    )


def test_rule_runs_are_recorded_and_counted(store: EventStore) -> None:
    (event,) = store.append([ev("n1")])

    def run(outcome: str, minutes: int, node: str | None = "n1") -> RuleRun:
        start = T0 + timedelta(minutes=minutes)
        return RuleRun(
            rule="r",
            event_id=event.id,
            node=node,
            action_ref="webhook",
            started_at=start,
            ended_at=start + timedelta(seconds=1),
            outcome=outcome,  # type: ignore[arg-type]
            envelope={"status": outcome, "result": {"x": [1]}},
        )

    stored = store.record_rule_run(run("succeeded", 0))
    assert stored.id is not None
    store.record_rule_run(run("failed", 5, node="n2"))
    store.record_rule_run(run("skipped_cooldown", 6))
    executed = ("succeeded", "failed")
    assert store.count_rule_runs("r", since=T0, outcomes=executed) == 2
    assert store.count_rule_runs("r", since=T0, outcomes=executed, node="n1") == 1
    assert store.count_rule_runs("r", since=T0 + timedelta(minutes=1), outcomes=executed) == 1
    assert store.last_rule_run_start("r", outcomes=executed) == T0 + timedelta(minutes=5)
    assert store.last_rule_run_start("r", outcomes=executed, node="n1") == T0
    assert store.last_rule_run_start("other", outcomes=executed) is None
    runs = store.rule_runs(event_id=event.id)
    assert [r.outcome for r in runs] == ["succeeded", "failed", "skipped_cooldown"]
    assert runs[0].envelope == {"status": "succeeded", "result": {"x": [1]}}
    assert runs[0].started_at == T0
    purged = store.purge(T0 + timedelta(minutes=5, seconds=30))
    assert purged.rule_runs == 2


def test_cursors_start_at_zero_and_persist(store: EventStore) -> None:
    assert store.get_cursor("rules") == 0
    store.set_cursor("rules", 7)
    store.set_cursor("rules", 9)
    assert store.get_cursor("rules") == 9


def test_state_survives_a_process_killed_mid_work(tmp_path: Path) -> None:
    """Events and node states written by a process that is then kill -9'd are both there."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    script = f"""
import os, signal
from slurmtower.events.store import EventStore
from slurmtower.events.transitions import NodeSnapshot
s = EventStore({url!r})
s.record_snapshot({{"n1": NodeSnapshot("IDLE")}}, source="startup")
s.record_snapshot({{"n1": NodeSnapshot("DOWN")}}, source="poll")
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    store = EventStore(url)
    assert store.load_node_states() == {"n1": NodeSnapshot("DOWN")}
    assert [e.payload["change"] for e in store.query()] == ["appeared", "state"]
    assert store.record_snapshot({"n1": NodeSnapshot("DOWN")}, source="poll") == []


def test_bad_store_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        EventStore("not a url")


def test_sqlite_reads_take_no_write_lock(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A writer holding SQLite's write lock (the sensor mid-transaction) does not stall
    readers: they BEGIN deferred, only writers BEGIN IMMEDIATE."""
    import sqlite3
    import time as _time

    from slurmtower.events.store import EventStore as Store

    path = tmp_path / "store.db"
    store = Store(f"sqlite:///{path}")
    store.append([Event(type="t", time=datetime.now(UTC), source="test", payload={})])
    writer = sqlite3.connect(path, isolation_level=None, timeout=1)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO event_cursors (name, last_id, updated_at) VALUES ('x', 1, '2026-01-01')")
    try:
        t0 = _time.monotonic()
        assert len(store.query()) == 1
        assert store.last_id() == 1 and store.get_cursor("x") == 0  # the uncommitted row is not seen
        assert store.load_node_states() == {}
        assert _time.monotonic() - t0 < 2.0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        store.close()
