"""Two ``slurmtower serve`` replicas, two workers each, on one PostgreSQL store, against the
real local cluster: one leader for the deployment, triggers armed once, every transition
recorded once across a ``kill -9`` of the leader, the leader's events streamed by the others.

Replica B stands in for a second host: its own state dir (its own notify program and key
file), the same store. Both tell Slurm to call back replica A's port, as a deployment's
triggers call its proxy. The configuration is the users' one: token auth, sensor, archiver.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.events.callback import sign_request
from slurmtower.events.store import EventStore
from slurmtower.models.event import NODE_STATE, SECURITY, SENSOR_TRIGGERED, SENSOR_UP, Event
from slurmtower.slurm import CliSlurmClient
from slurmtower.store.deployment import deployment_value
from tests.conftest import sh, wait_for
from tests.sensor_helpers import cluster_state_dir, free_port, serve_env
from tests.serve_helpers import ServeProcess

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOKEN = "stw_replicas_reader_token"
NODE = "n1"


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Replica:
    """``slurmtower serve --workers 2`` of the deployment, on the shared store."""

    name: str
    cluster: DevCluster
    store_url: str
    callback_port: int | None = None
    server: ServeProcess = field(init=False)
    state_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.state_dir = cluster_state_dir(self.cluster, f"replica-{self.name}")
        port = free_port()
        env = serve_env(
            self.cluster, self.state_dir,
            SLURMTOWER_STORE_URL=self.store_url,
            SLURMTOWER_EVENTS__CALLBACK_PORT=str(self.callback_port or port),
            SLURMTOWER_EVENTS__POLL_INTERVAL="0.5",
            SLURMTOWER_AUTH__TOKENS=json.dumps([{"name": "rita", "role": "reader", "sha256": hash_token(TOKEN)}]),
        )
        self.server = ServeProcess(env, self.state_dir / "serve.log", ("--workers", "2", "--no-access-log"), port)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.server.start(what=f"replica {self.name}")

    def workers(self) -> set[int]:
        pid = self.server.pid
        return {int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == pid}

    def stop(self) -> None:
        self.server.stop()


class Oracle(threading.Thread):
    """``sinfo`` every 0.2 s: the sequence of drained / not drained states of one node."""

    def __init__(self, node: str) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.seen: list[bool] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            state = sh("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).strip().splitlines()
            if state:
                drained = "drain" in state[0]
                if not self.seen or self.seen[-1] != drained:
                    self.seen.append(drained)
            time.sleep(0.2)


class Stream(threading.Thread):
    """An SSE client of one replica: every event with the wall time it arrived."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.got: list[tuple[float, Event]] = []
        self.connected = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.stream("GET", f"{self.url}/events/stream", headers=headers, timeout=None) as resp:
            self.connected.set()
            data = None
            for line in resp.iter_lines():
                if self.stop.is_set():
                    return
                if line.startswith("data: "):
                    data = line[6:]
                elif line == "" and data is not None:
                    self.got.append((time.time(), Event.model_validate_json(data)))
                    data = None


def _read_stream(url: str, headers: dict[str, str], count: int, timeout: float = 15.0) -> list[int]:
    """The ids of the first ``count`` events ``/events/stream`` sends with ``headers``."""
    ids: list[int] = []
    deadline = time.monotonic() + timeout
    with httpx.stream("GET", f"{url}/events/stream", headers={"Authorization": f"Bearer {TOKEN}", **headers},
                      timeout=httpx.Timeout(5.0, read=timeout)) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("id: "):
                ids.append(int(line[4:]))
            if len(ids) >= count or time.monotonic() > deadline:
                break
    return ids


def _ups(store: EventStore) -> list[Event]:
    return store.query(types=[SENSOR_UP], limit=1000)


def _ours(client: CliSlurmClient, sensor_uuid: str) -> list[int]:
    return [t.trigger_id for t in client.triggers() if f"--sensor-uuid {sensor_uuid} " in t.program]


def test_two_replicas_one_leader_failover_without_loss(devcluster: DevCluster, client: CliSlurmClient,
                                                       pg_store: str, clean_nodes: DevCluster) -> None:
    a = Replica("a", devcluster, pg_store)
    b = Replica("b", devcluster, pg_store, callback_port=a.port)
    replicas = [a, b]
    store: EventStore | None = None
    sensor_uuid = ""
    try:
        a.start()
        b.start()
        store = EventStore(pg_store)
        assert store is not None
        wait_for(lambda: len(_ups(store)) >= 1, 30, 0.2, what="a leader's sensor up")
        time.sleep(3 * 2.0)  # three election rounds: nobody else may lead meanwhile
        ups = _ups(store)
        assert len(ups) == 1, [u.payload for u in ups]
        sensor_uuid = ups[0].payload["uuid"]
        leader_pid = int(ups[0].payload["process"].rsplit(":", 1)[1])
        holder = next(r for r in replicas if leader_pid in r.workers())
        # Triggers armed once for the deployment: down, drained, up, fail and reconfig.
        assert len(_ours(client, sensor_uuid)) == 5, client.triggers()

        follower = b if holder is a else a
        stream = Stream(follower.url)
        stream.start()
        assert stream.connected.wait(10)
        oracle = Oracle(NODE)
        oracle.start()
        start_id = store.last_id() or 0
        killed_at = 0.0
        cycles = 4
        for i in range(cycles):
            sh("scontrol", "update", f"nodename={NODE}", "state=drain", f"reason=replica-test-{i}")
            wait_for(lambda: oracle.seen and oracle.seen[-1], 10, 0.1, what="drained in sinfo")
            if i == 1:
                os.kill(leader_pid, signal.SIGKILL)  # the leader dies between two transitions
                killed_at = time.time()
            time.sleep(2.5)
            sh("scontrol", "update", f"nodename={NODE}", "state=resume")
            wait_for(lambda: oracle.seen and not oracle.seen[-1], 10, 0.1, what="resumed in sinfo")
            time.sleep(2.5)
        # The new leader: another process, within 10 s of the kill.
        wait_for(lambda: len(_ups(store)) >= 2, 15, 0.2, what="a new leader")
        ups = _ups(store)
        assert len(ups) == 2, [u.payload for u in ups]
        new_pid = int(ups[1].payload["process"].rsplit(":", 1)[1])
        assert new_pid != leader_pid
        takeover = ups[1].time.timestamp() - killed_at
        assert takeover <= 10.0, takeover
        time.sleep(3)
        oracle.done.set()
        oracle.join(5)

        events = [e for e in store.query(since_id=start_id, limit=10000)]
        transitions = [e for e in events if e.type == NODE_STATE and e.node == NODE]
        recorded: list[bool] = []
        for e in transitions:
            drained = "DRAIN" in e.payload["flags"]
            if not recorded or recorded[-1] != drained:
                recorded.append(drained)
            else:
                # A second event with the same drain state would be a duplicate unless
                # something else changed (NOT_RESPONDING, a reason edit).
                prev = transitions[transitions.index(e) - 1]
                assert (prev.payload["state"], prev.payload["flags"], prev.payload["reason"]) != (
                    e.payload["state"], e.payload["flags"], e.payload["reason"]), "duplicate transition"
        seen = oracle.seen[1:] if oracle.seen and not oracle.seen[0] else oracle.seen
        assert recorded == seen == [True, False] * cycles, (recorded, oracle.seen)
        drains = [e for e in transitions if "DRAIN" in e.payload["flags_added"]]
        assert [e.payload["reason"] for e in drains] == [f"replica-test-{i}" for i in range(cycles)]
        # Callbacks that landed on any process were accepted: none refused.
        assert [e for e in events if e.type == SECURITY] == []
        assert any(e.type == SENSOR_TRIGGERED for e in events)
        # After the takeover: still exactly one set of triggers.
        assert len(_ours(client, sensor_uuid)) == 5, client.triggers()

        # The follower's SSE client got every event the store has, within 1 s of its time.
        stream.stop.set()
        got = {ev.id: (at, ev) for at, ev in stream.got}
        missing = [e.id for e in events if e.id not in got]
        assert missing == [], missing
        lags = sorted(at - ev.time.timestamp() for at, ev in got.values() if ev.type == NODE_STATE)
        assert lags and lags[-1] <= 1.0, lags
        print(f"takeover {takeover:.2f} s; SSE lag on the follower: median {lags[len(lags) // 2] * 1000:.0f} ms, "
              f"max {lags[-1] * 1000:.0f} ms over {len(lags)} transitions")

        # A stream cut on one replica resumes on the other: Last-Event-ID replays from the store
        # exactly what came after that id, in order, then goes on live.
        other = a if follower is b else b
        resume_from = transitions[2].id
        after = [e.id for e in store.query(since_id=resume_from, limit=10000)]
        resumed = _read_stream(other.url, {"Last-Event-ID": str(resume_from)}, len(after))
        assert resumed[: len(after)] == after, (resumed, after)

        # The callback nonces are the deployment's: a request one replica accepted is refused
        # as replayed by the other (and by the same one).
        key = deployment_value(store.engine, "sensor_key", schema=store.schema)
        assert key, "no deployment key in the store"
        path = f"/{sensor_uuid}/node/up"
        headers = sign_request(key.encode(), "POST", path, NODE.encode())
        first = httpx.post(f"{a.url}{path}", content=NODE.encode(), headers=headers, timeout=10)
        assert first.status_code == 202, first.text
        for r in (b, a):
            again = httpx.post(f"{r.url}{path}", content=NODE.encode(), headers=headers, timeout=10)
            assert again.status_code == 401 and again.json()["reason"] == "replayed", (r.name, again.text)
    finally:
        for r in replicas:
            r.stop()
        if sensor_uuid:
            stale = _ours(client, sensor_uuid)
            if stale:
                client.clear_triggers(stale)
        sh("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
        if store is not None:
            store.close()
