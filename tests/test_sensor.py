"""The sensor against the real cluster: real strigger, real state changes, a real process."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.events.transitions import NodeSnapshot
from slurmtower.models.event import NODE_STATE, SENSOR_DOWN, SENSOR_TRIGGERED, SENSOR_UP, Event
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient

from .conftest import sh, wait_for
from .sensor_helpers import SensorProcess, assert_chain_consistent

pytestmark = [pytest.mark.cluster, pytest.mark.release]


@pytest.fixture()
def sensor(clean_nodes: DevCluster) -> Iterator[SensorProcess]:
    proc = SensorProcess(clean_nodes)
    proc.start()
    yield proc
    proc.cleanup()


def _ours(sensor: SensorProcess) -> list[list[str]]:
    program = str(sensor.state_dir / "slurmtower-notify.py")
    out = sh("strigger", "--get")
    return [line.split() for line in out.splitlines()[1:] if program in line.split()]


def _wait_reconciled(sensor: SensorProcess, client: CliSlurmClient) -> None:
    """The stored states become what Slurm says (a resumed node may flicker NOT_RESPONDING
    for a moment, which the next poll records as one more transition)."""

    def same() -> bool:
        now = {n.name: NodeSnapshot.from_node(n) for n in client.nodes()}
        known = sensor.known_states()
        return {k: (v.state, v.flags) for k, v in known.items()} == {
            k: (v.state, v.flags) for k, v in now.items()}

    wait_for(same, 10, what="stored node states equal to Slurm's")
    assert_chain_consistent(sensor.node_events())


def _drain_added(events: list[Event], node: str) -> list[Event]:
    return [e for e in events if e.type == NODE_STATE and e.node == node and "DRAIN" in e.payload["flags_added"]]


def _drain_removed(events: list[Event], node: str) -> list[Event]:
    return [e for e in events if e.type == NODE_STATE and e.node == node
            and "DRAIN" in e.payload["flags_removed"]]


def _went(events: list[Event], node: str, state: str) -> list[Event]:
    return [e for e in events if e.type == NODE_STATE and e.node == node and e.payload["state"] == state
            and e.payload["previous_state"] != state]


def _left(events: list[Event], node: str, state: str) -> list[Event]:
    return [e for e in events if e.type == NODE_STATE and e.node == node
            and e.payload["previous_state"] == state and e.payload["state"] != state]


def test_sensor_arms_perm_triggers_as_slurm_user_and_clears_them_at_a_clean_stop(
    sensor: SensorProcess,
) -> None:
    mine = _ours(sensor)
    types = sorted(words[3] for words in mine)
    assert types == ["down", "drained", "fail", "reconfig", "up"]  # no idle: PERM idle fires every 16 s
    assert all(words[5] == "slurm" and words[6] == "PERM" for words in mine)
    uuid = sensor.current_uuid()
    assert uuid is not None and all(uuid in words for words in mine)
    key = sensor.state_dir / "sensor.key"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    import pwd

    assert pwd.getpwuid(key.stat().st_uid).pw_name == "slurm"
    assert not any(key.read_text().strip() in " ".join(words) for words in mine)  # key never on the line
    sensor.stop()
    assert _ours(sensor) == []
    downs = sensor.events(types=[SENSOR_DOWN])
    assert [e.payload["uuid"] for e in downs] == [uuid]


@pytest.mark.slow
def test_each_real_transition_is_recorded_exactly_once(sensor: SensorProcess, client: CliSlurmClient) -> None:
    cluster = sensor.cluster
    start_id = sensor.events()[-1].id

    def step(argv: list[str], check, what: str) -> None:  # type: ignore[no-untyped-def]
        sh(*argv)
        sensor.wait_events(lambda evs: check([e for e in evs if e.id > start_id]), 15, what)

    step(["scontrol", "update", "nodename=n3", "state=drain", "reason=disk"],
         lambda evs: _drain_added(evs, "n3"), "n3 drained")
    step(["scontrol", "update", "nodename=n3", "state=resume"],
         lambda evs: _drain_removed(evs, "n3"), "n3 resumed")
    step(["scontrol", "update", "nodename=n4", "state=down", "reason=psu"],
         lambda evs: _went(evs, "n4", "DOWN"), "n4 down")
    step(["scontrol", "update", "nodename=n4", "state=resume"],
         lambda evs: _left(evs, "n4", "DOWN"), "n4 back")
    step(["scontrol", "update", "nodename=n2", "state=drain", "reason=fan"],
         lambda evs: _drain_added(evs, "n2"), "n2 drained")
    step(["scontrol", "update", "nodename=n2", "state=undrain"],
         lambda evs: _drain_removed(evs, "n2"), "n2 undrained")
    cluster.fail_node("n1")  # slurmd killed: slurmctld marks it DOWN after ~SlurmdTimeout
    sensor.wait_events(lambda evs: _went([e for e in evs if e.id > start_id], "n1", "DOWN"), 40, "n1 down")
    cluster.restore_node("n1")  # slurmd restarted: ReturnToService=1 brings it back
    sensor.wait_events(lambda evs: _left([e for e in evs if e.id > start_id], "n1", "DOWN"), 40, "n1 back")
    # Let strigger's 16 s passes deliver their doorbells for all of the above.
    time.sleep(18)
    events = [e for e in sensor.events() if e.id > start_id]
    transitions = [e for e in events if e.type == NODE_STATE]

    for node in ("n3", "n2"):
        assert len(_drain_added(events, node)) == 1, transitions
        assert len(_drain_removed(events, node)) == 1, transitions
    for node in ("n4", "n1"):
        assert len(_went(events, node, "DOWN")) == 1, transitions
        assert len(_left(events, node, "DOWN")) == 1, transitions
    assert _went(events, "n4", "DOWN")[0].payload["reason"] == "psu"
    assert _drain_added(events, "n3")[0].payload["reason_owner"] in ("user:root", "root")
    assert_chain_consistent(transitions)
    # Real strigger callbacks arrived, were authenticated, and rang the doorbell.
    fired = {(e.payload["class"], e.payload["type"]) for e in events if e.type == SENSOR_TRIGGERED}
    assert ("node", "drained") in fired and ("node", "down") in fired, fired
    assert all(e.payload["uuid"] == sensor.current_uuid() for e in events if e.type == SENSOR_TRIGGERED)
    _wait_reconciled(sensor, client)


@pytest.mark.slow
def test_sigkilled_sensor_reconciles_every_node_without_duplicates(
    sensor: SensorProcess, client: CliSlurmClient
) -> None:
    first_uuid = sensor.current_uuid()
    armed_before = sorted(words[0] for words in _ours(sensor))
    sh("scontrol", "update", "nodename=n1", "state=drain", "reason=before-kill")
    sh("scontrol", "update", "nodename=n2", "state=down", "reason=before-kill")
    sensor.wait_events(lambda evs: _drain_added(evs, "n1") and _went(evs, "n2", "DOWN"), 15, "both seen")
    sensor.kill9()
    # Changes while no sensor runs; n1's drain->resume is one strigger never reports.
    sh("scontrol", "update", "nodename=n1", "state=resume")
    sh("scontrol", "update", "nodename=n2", "state=resume")
    sh("scontrol", "update", "nodename=n3", "state=drain", "reason=while-down")
    time.sleep(1)
    sensor.start()
    second_uuid = sensor.current_uuid()
    # The UUID is the deployment's (kept in the store): the restarted sensor finds the
    # killed one's triggers and keeps them, neither adding a second set nor re-arming.
    assert second_uuid == first_uuid
    mine = _ours(sensor)
    assert len(mine) == 5 and all(second_uuid in words for words in mine)
    assert sorted(words[0] for words in mine) == armed_before
    sh("scontrol", "update", "nodename=n3", "state=resume")
    sensor.wait_events(lambda evs: _drain_removed(evs, "n3"), 15, "n3 resumed after restart")
    transitions = sensor.node_events()
    assert_chain_consistent(transitions)
    startup = [e for e in transitions if e.source == "startup" and e.payload["change"] != "appeared"]
    assert {e.node for e in startup} == {"n1", "n2", "n3"}, startup
    assert len(_drain_removed(transitions, "n1")) == 1
    assert len(_left(transitions, "n2", "DOWN")) == 1
    assert len(_drain_added(transitions, "n3")) == 1
    _wait_reconciled(sensor, client)
    ups = sensor.events(types=[SENSOR_UP])
    assert [e.payload["uuid"] for e in ups] == [first_uuid, second_uuid]
    assert sensor.events(types=[SENSOR_DOWN]) == []  # SIGKILL: no clean stop was recorded


def test_an_unchanged_poll_does_not_touch_the_store(settings: Settings, client: CliSlurmClient,
                                                    clean_nodes: object) -> None:
    """The poll at 5,000 nodes is one `sinfo -O` and, when Slurm prints what was recorded
    last time, no store transaction at all; a change is still recorded by the next poll."""
    from slurmtower.events.sensor import Sensor
    from slurmtower.events.store import EventStore

    store = EventStore(f"sqlite:///{settings.state_dir / 'poll.db'}")
    sensor = Sensor(settings, client, store, arm_triggers=False)
    calls: list[object] = []
    record = store.record_snapshot

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return record(*args, **kwargs)  # type: ignore[arg-type]

    store.record_snapshot = counting  # type: ignore[method-assign]
    try:
        sensor.start()
        assert len(calls) == 1  # the start-up observation is always recorded
        assert sensor.poll() == [] and sensor.poll() == []
        assert len(calls) == 1
        sh("scontrol", "update", "nodename=n4", "state=drain", "reason=poll test")
        events = sensor.poll()
        assert len(calls) == 2
        assert [(e.node, "DRAIN" in e.payload["flags_added"]) for e in events] == [("n4", True)]
    finally:
        store.close()


class _PgSensor(SensorProcess):
    """A sensor on a PostgreSQL store (so a test can hold it inside a transaction)."""

    pg_url: str = ""

    @property
    def store_url(self) -> str:
        return self.pg_url


def test_sensor_sigkilled_inside_its_transaction_loses_and_doubles_nothing(
    clean_nodes: DevCluster, pg_store: str
) -> None:
    """The test holds the events table locked, so the sensor's next recording blocks inside its
    transaction (node_states already locked, nothing committed); SIGKILL then. The transition
    is recorded exactly once by the restarted sensor, and the known states agree with Slurm."""
    from sqlalchemy import create_engine, text

    sensor = _PgSensor(clean_nodes, extra_env={"SLURMTOWER_STORE_URL": pg_store})
    sensor.pg_url = pg_store
    blocker = create_engine(pg_store)
    try:
        sensor.start()
        before = sensor.node_events("n2")
        with blocker.connect() as conn:
            trans = conn.begin()
            # The mode the sensor's recording takes (readers still read): it waits for us.
            conn.execute(text("LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE"))
            sh("scontrol", "update", "nodename=n2", "state=drain", "reason=kill-in-transaction")

            def waiting() -> bool:
                # From another connection: pg_stat_activity is read once per transaction.
                with blocker.connect() as probe:
                    rows = probe.execute(text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND state = 'active' AND wait_event_type = 'Lock' "
                        "AND query LIKE 'LOCK TABLE events%'")).scalar_one()
                return int(rows) > 0

            wait_for(waiting, 20, 0.1, what="the sensor blocked inside its transaction")
            sensor.kill9()
            trans.rollback()
        assert sensor.node_events("n2") == before  # nothing of the killed transaction committed
        sensor.start()
        sensor.wait_events(lambda evs: _drain_added([e for e in evs if e.node == "n2"], "n2"), 15, "n2 drained")
        time.sleep(2)  # a few more polls: nothing recorded twice
        drains = _drain_added(sensor.node_events("n2"), "n2")
        assert len(drains) == 1 and drains[0].payload["reason"] == "kill-in-transaction"
        assert_chain_consistent(sensor.node_events())
        assert "DRAIN" in sensor.known_states()["n2"].flags
    finally:
        blocker.dispose()
        sensor.cleanup()
