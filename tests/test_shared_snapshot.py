"""Two ``slurmtower serve`` processes of one deployment on one Redis, against the real local
cluster: the same bytes from both, one refresh per interval for the whole deployment (sdiag),
each process refreshing alone while Redis is down and sharing again when it is back, and a
follower taking over from a refresher killed with ``-9``.

Each process stands in for a host: its own port and state dir, one PostgreSQL store (so one
leader runs the sensor and the archiver, and the shared snapshot's key prefix, derived from the
store URL, is the deployment's). The users' configuration: token auth, sensor, archiver, the
default refresh interval (2 s). Redis is a private ``redis-server`` per test, so that killing it
harms no one else.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.events.store import EventStore
from slurmtower.models.event import SENSOR_UP
from slurmtower.slurm import CliSlurmClient
from tests.conftest import sh, wait_for
from tests.redis_helpers import PrivateRedis
from tests.sensor_helpers import cluster_state_dir, free_port, serve_env
from tests.serve_helpers import ServeProcess

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOKEN = "stw_shared_snapshot_reader"
INTERVAL = 2.0  # api.refresh_interval's default
REFRESHER, FOLLOWER, UNREACHABLE = "shared (refresher)", "shared (follower)", "own refresh: redis unreachable"
#: The RPCs of a snapshot refresh (squeue; scontrol show node + partitions) and of the sensor's
#: poll (sinfo: nodes + partitions). Others (sdiag, the nodes' own traffic, trigger arming,
#: other sessions' jobs and actions on the shared cluster) are left out.
COUNTED_RPCS = ("REQUEST_JOB_INFO", "REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO")


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Tower:
    """One ``slurmtower serve`` process (one worker) of the deployment."""

    name: str
    cluster: DevCluster
    store_url: str
    redis_url: str
    callback_port: int | None = None
    server: ServeProcess = field(init=False)
    state_dir: Path = field(init=False)
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.state_dir = cluster_state_dir(self.cluster, f"shared-{self.name}")
        port = free_port()
        env = serve_env(
            self.cluster, self.state_dir,
            SLURMTOWER_STORE_URL=self.store_url,
            SLURMTOWER_API__SHARED_CACHE_URL=self.redis_url,
            SLURMTOWER_EVENTS__CALLBACK_PORT=str(self.callback_port or port),
            SLURMTOWER_AUTH__TOKENS=json.dumps([{"name": "rita", "role": "reader", "sha256": hash_token(TOKEN)}]),
        )
        self.server = ServeProcess(env, self.state_dir / "serve.log", ("--no-access-log",), port)
        self.http = httpx.Client(base_url=self.server.url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"})

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start(what=f"serve {self.name}")

    def log(self) -> str:
        return self.server.log()

    def mode(self) -> str:
        body = httpx.get(f"{self.server.url}/ready", timeout=20).json()  # anonymous
        mode: str = body["snapshot"]
        return mode

    def kill(self) -> None:
        """``kill -9`` of the process and its refresh worker (its process group)."""
        self.server.kill()

    def stop(self) -> None:
        self.server.stop()
        self.http.close()


class Deployment:
    def __init__(self, cluster: DevCluster, store_url: str, redis_url: str) -> None:
        self.cluster, self.store_url, self.redis_url = cluster, store_url, redis_url
        self.towers: list[Tower] = []

    def start(self, name: str) -> Tower:
        # Slurm calls the first process back, as a deployment's triggers call its proxy.
        first = self.towers[0].port if self.towers else None
        tower = Tower(name, self.cluster, self.store_url, self.redis_url, callback_port=first)
        self.towers.append(tower)
        tower.start()
        return tower

    def modes(self, *towers: Tower) -> list[str]:
        return [t.mode() for t in towers]

    def shared(self, *towers: Tower) -> tuple[Tower, Tower]:
        """Wait until one of two towers refreshes and the other follows: (refresher, follower)."""
        def settled() -> bool:
            return sorted(self.modes(*towers)) == sorted([REFRESHER, FOLLOWER])
        wait_for(settled, 15, 0.25, what=f"one refresher and one follower ({self.modes(*towers)})")
        refresher = next(t for t in towers if t.mode() == REFRESHER)
        return refresher, next(t for t in towers if t is not refresher)

    def close(self, client: CliSlurmClient) -> None:
        for tower in self.towers:
            tower.stop()
        # The deployment's sensor leaves its triggers for a successor: this one has none.
        store = EventStore(self.store_url)
        try:
            uuids = {e.payload["uuid"] for e in store.query(types=[SENSOR_UP], limit=100)}
        finally:
            store.close()
        stale = [t.trigger_id for t in client.triggers() for u in uuids if f"--sensor-uuid {u} " in t.program]
        if stale:
            client.clear_triggers(stale)


@pytest.fixture()
def deployment(devcluster: DevCluster, client: CliSlurmClient, pg_store: str,
               redis_server: PrivateRedis) -> Iterator[Deployment]:
    deploy = Deployment(devcluster, pg_store, redis_server.url)
    try:
        yield deploy
    finally:
        deploy.close(client)


@pytest.fixture()
def held_job(devcluster: DevCluster) -> Iterator[int]:
    """A held job of this test's own, so that the queue is not empty."""
    out = sh("sbatch", "--parsable", "--hold", "-J", "st-shared-snapshot", "-o", "/dev/null", "--wrap", "sleep 1")
    job = int(out.strip().split(";")[0])
    try:
        yield job
    finally:
        subprocess.run(["scancel", str(job)], capture_output=True, check=False)


def _same_round(a: Tower, b: Tower, path: str) -> tuple[httpx.Response, httpx.Response]:
    """The two answers for ``path`` once both come from the same round (a round may land
    between the two requests)."""
    seen = []
    for _ in range(30):
        ra, rb = a.http.get(path), b.http.get(path)
        assert ra.status_code == rb.status_code == 200, (ra.text[:200], rb.text[:200])
        if ra.content == rb.content:
            return ra, rb
        seen.append([(r.json()["fetched_at"], r.headers["etag"], r.headers["x-data-age"]) for r in (ra, rb)])
        time.sleep(0.1)
    raise AssertionError(f"{path}: no two equal answers in 30 tries: {seen[-5:]}")


def test_both_processes_serve_the_same_bytes(deployment: Deployment, held_job: int) -> None:
    a, b = deployment.start("a"), deployment.start("b")
    refresher, follower = deployment.shared(a, b)
    for path in ("/queue", "/nodes", "/partitions", "/queue?state=PD&limit=1", "/nodes?state=idle&limit=2"):
        ra, rb = _same_round(refresher, follower, path)
        assert ra.headers["etag"] == rb.headers["etag"]
        # The same snapshot's age, told by each process when it answered: they differ by the
        # time between the two answers (sequential requests; the elapsed of each bounds it).
        between = ra.elapsed.total_seconds() + rb.elapsed.total_seconds()
        assert abs(float(ra.headers["x-data-age"]) - float(rb.headers["x-data-age"])) < between + 0.1
        assert float(rb.headers["x-data-age"]) < 2 * INTERVAL + 1
        # The refresher's ETag is good at the follower: 304, unless the payload changed meanwhile.
        again = follower.http.get(path, headers={"If-None-Match": ra.headers["etag"]})
        assert again.status_code == 304 or again.headers["etag"] != ra.headers["etag"]
    # (Another pytest session starting on the shared cluster cancels every job, ours too.)
    if sh("squeue", "-h", "-j", str(held_job), "-o", "%A", check=False).strip():
        wait_for(lambda: held_job in [j["job_id"] for j in follower.http.get("/queue").json()["jobs"]],
                 3 * INTERVAL, 0.2, what="the held job on the follower")
    page = follower.http.get("/queue", params={"state": "PD", "limit": 1}).json()
    assert page["returned"] == min(1, page["count"])
    assert follower.http.get("/nodes").json()["count"] == 4


def _rpcs() -> dict[str, int]:
    out = sh("sdiag")
    part = out.split("Remote Procedure Call statistics by message type", 1)[1]
    part = part.split("Remote Procedure Call statistics by user", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)", part, re.M)}


class Load(threading.Thread):
    """Readers of /queue and /nodes on each tower in turn, ~10 requests a second in all."""

    def __init__(self, towers: list[Tower]) -> None:
        super().__init__(daemon=True)
        self.towers = towers
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.requests = 0

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            tower = self.towers[i % len(self.towers)]
            path = ("/queue", "/nodes")[(i // len(self.towers)) % 2]
            try:
                resp = tower.http.get(path)
                if resp.status_code != 200:
                    self.errors.append(f"{tower.name} {path}: {resp.status_code}")
            except httpx.HTTPError as exc:
                self.errors.append(f"{tower.name} {path}: {exc}")
            self.requests += 1
            i += 1
            time.sleep(0.1)


def _window(towers: list[Tower], seconds: float) -> tuple[int, dict[str, int]]:
    load = Load(towers)
    load.start()
    time.sleep(2 * INTERVAL)  # every tower asked for both before the window opens
    before = _rpcs()
    time.sleep(seconds)
    after = _rpcs()
    load.stop.set()
    load.join(10)
    assert load.errors == [], load.errors[:5]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTED_RPCS}
    return sum(delta.values()), delta


def _snapshot_queries(tower: Tower) -> dict[str, float]:
    text_ = tower.http.get("/metrics").text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^slurmtower_snapshot_queries_total\{resource="(\w+)"\} (\S+)$', text_, re.M)}


#: The measuring window: about 30 RPCs from one process (the sensor's 2 a second, the queue
#: every 2 s), so a second process reading Slurm too (twice as many) is far past the bound.
WINDOW = 12


def test_two_processes_cost_slurmctld_what_one_does(deployment: Deployment) -> None:
    a = deployment.start("a")
    wait_for(lambda: a.mode() == REFRESHER, 10, 0.2, what="a refreshing")
    one, one_detail = _window([a], WINDOW)
    b = deployment.start("b")
    refresher, follower = deployment.shared(a, b)
    assert refresher is a
    before = _snapshot_queries(follower)
    two, two_detail = _window([a, b], WINDOW)
    if two > 1.1 * one + 10:
        # The cluster is shared: another session's sensor or squeue in the window adds RPCs
        # (never removes any). Measure the window once more before concluding.
        print(f"two processes: {two} RPCs {two_detail} against {one}; measuring again")
        two, two_detail = _window([a, b], WINDOW)
    after = _snapshot_queries(follower)
    print(f"slurmctld RPCs in {WINDOW} s: one process {one} {one_detail}; two processes {two} {two_detail}; "
          f"ratio {two / one:.2f}")
    assert one > 0
    assert two <= 1.1 * one + 10, (one_detail, two_detail)
    # The queue is read by the snapshot alone (the sensor polls nodes): about WINDOW / 2 s.
    assert two_detail["REQUEST_JOB_INFO"] <= 1.1 * one_detail["REQUEST_JOB_INFO"] + 2, (one_detail, two_detail)
    # The follower asked Slurm for none of it.
    assert after.get("jobs", 0) == before.get("jobs", 0) and after.get("nodes", 0) == before.get("nodes", 0)


def test_without_redis_each_process_refreshes_alone_then_shares_again(deployment: Deployment,
                                                                       redis_server: PrivateRedis) -> None:
    a, b = deployment.start("a"), deployment.start("b")
    deployment.shared(a, b)
    redis_server.stop()
    down = time.monotonic()
    wait_for(lambda: deployment.modes(a, b) == [UNREACHABLE, UNREACHABLE], 10, 0.2, what="both refreshing alone")
    fallback = time.monotonic() - down
    assert fallback < 5, fallback
    ready = httpx.get(f"http://127.0.0.1:{b.port}/ready", timeout=20)  # anonymous: no error text
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert not re.search(r"(?i)error|refused|connect|111|127\.0\.0\.1", json.dumps(ready.json()["snapshot"]))
    # Both keep answering, from data they read themselves: still fresh.
    end = time.monotonic() + 3 * INTERVAL
    while time.monotonic() < end:
        for tower in (a, b):
            for path in ("/queue", "/nodes"):
                resp = tower.http.get(path)
                assert resp.status_code == 200, resp.text[:200]
                assert float(resp.headers["x-data-age"]) < 2 * INTERVAL + 1
        time.sleep(0.5)
    redis_server.start()
    up = time.monotonic()
    refresher, follower = deployment.shared(a, b)
    back = time.monotonic() - up
    assert back < 5, back
    ra, rb = _same_round(refresher, follower, "/queue")
    assert ra.headers["etag"] == rb.headers["etag"]
    print(f"own refresh {fallback:.1f} s after Redis died; shared again {back:.1f} s after it came back")


def test_a_follower_takes_over_from_a_killed_refresher(deployment: Deployment) -> None:
    a, b = deployment.start("a"), deployment.start("b")
    refresher, follower = deployment.shared(a, b)
    assert follower.http.get("/queue").status_code == 200
    refresher.kill()
    killed = time.monotonic()
    wait_for(lambda: follower.mode() == REFRESHER, 15, 0.1, what="the follower refreshing")
    takeover = time.monotonic() - killed
    assert takeover <= 2 * INTERVAL + 1.5, takeover
    time.sleep(INTERVAL)
    for path in ("/queue", "/nodes"):
        resp = follower.http.get(path)
        assert resp.status_code == 200 and float(resp.headers["x-data-age"]) < 2 * INTERVAL + 1
    assert _snapshot_queries(follower).get("jobs", 0) >= 1  # it reads Slurm itself now
    print(f"takeover {takeover:.1f} s after kill -9 of the refresher")
