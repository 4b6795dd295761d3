"""Live reads and the sensor at a real cluster's size, on the 1,000-node scale lab.

The oracles are Slurm's own commands: ``squeue`` with the same filters for ``/queue``,
``sinfo -N`` for ``/nodes``; a 1,000-node drain in one ``scontrol update`` must give 1,000
``slurm.node.state`` events, and its resume 1,000 more.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.nodeset import NodeSet
from slurmtower.settings import Settings, load_settings
from tests.api_server import api_for
from tests.conftest import scale_sh
from tests.sensor_helpers import SensorProcess

pytestmark = pytest.mark.cluster

JOBS = 2100
USERS = ("alice", "bob", "carol", "dave")
ACCOUNTS = {"alice": "physics", "bob": "chemistry", "carol": "biology", "dave": "astro"}
PARTITIONS = ("batch", "short", "compute", "bigmem,long", "gpu")
NAME = "live-scale"


#: The ids of the jobs this module submitted. The lab is shared: jobs an earlier module
#: cancelled stay in ``squeue -t all`` for MinJobAge (60 s) and may leave it between the
#: oracle's read and the API's, so both sides are compared on these jobs only.
OURS: set[int] = set()


def _submit(cluster: DevCluster, index: int) -> int:
    user = USERS[index % len(USERS)]
    argv = ["sbatch", "--parsable", "-H", f"--uid={user}", f"--account={ACCOUNTS[user]}",
            f"--partition={PARTITIONS[index % len(PARTITIONS)]}", f"--job-name={NAME}-{index % 7}",
            "--output=/dev/null", "--wrap", "true"]
    res = subprocess.run(argv, capture_output=True, check=True, env=cluster.command_env(), timeout=60, text=True)
    return int(res.stdout.strip().split(";")[0])


@pytest.fixture(scope="module")
def queue(scale_cluster: DevCluster) -> Iterator[DevCluster]:
    """At least 2,000 held jobs of four users, four accounts, several partitions and names,
    plus one running job on n1."""
    with ThreadPoolExecutor(6) as pool:
        OURS.update(pool.map(lambda i: _submit(scale_cluster, i), range(JOBS)))
    run = scale_sh(scale_cluster, "sbatch", "--parsable", f"--job-name={NAME}-run", "-w", "n1", "-p", "debug",
                   "--output=/dev/null", "--wrap", "sleep 600")
    OURS.add(int(run.strip().split(";")[0]))
    assert len(OURS) == JOBS + 1
    yield scale_cluster
    scale_sh(scale_cluster, "scancel", f"--name={','.join(f'{NAME}-{i}' for i in range(7))},{NAME}-run",
             check=False)


@pytest.fixture(scope="module")
def scale_settings(scale_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    s = load_settings(scale_cluster.tower_conf, environ={})
    s.state_dir = tmp_path_factory.mktemp("scale-live")
    return s


def _squeue_ids(cluster: DevCluster, *flags: str) -> set[int]:
    """The ids of this module's jobs that ``squeue`` with ``flags`` lists."""
    out = scale_sh(cluster, "squeue", "-h", "-o", "%A", *flags)
    return {int(x) for x in out.split()} & OURS


def _walk(http: httpx.Client, path: str, item: str, key: str, limit: int) -> list[Any]:
    """Every item of ``path`` by following ``next_cursor`` pages of ``limit``."""
    seen: list[Any] = []
    cursor: str | None = None
    for _ in range(10_000):
        sep = "&" if "?" in path else "?"
        url = f"{path}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        body = http.get(url).json()
        assert body["returned"] == len(body[item]) <= limit
        seen.extend(x[key] for x in body[item])
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("paging never ended")


@pytest.mark.parametrize(("query", "flags"), [
    ("user=alice", ("-t", "all", "-u", "alice")),
    ("user=bob,carol", ("-t", "all", "-u", "bob,carol")),
    ("account=physics", ("-t", "all", "-A", "physics")),
    ("partition=short", ("-t", "all", "-p", "short")),
    ("partition=long", ("-t", "all", "-p", "long")),
    ("state=PENDING", ("-t", "PD")),
    ("state=R", ("-t", "R")),
    (f"name={NAME}-3", ("-t", "all", "-n", f"{NAME}-3")),
    ("nodes=n1", ("-t", "all", "-w", "n1")),
    ("user=dave&partition=gpu", ("-t", "all", "-u", "dave", "-p", "gpu")),
], ids=lambda v: v if isinstance(v, str) else "")
def test_queue_filters_match_squeue(queue: DevCluster, scale_settings: Settings, query: str,
                                    flags: tuple[str, ...]) -> None:
    wanted = _squeue_ids(queue, *flags)
    assert wanted, f"the oracle found no job for {query}"
    with api_for(scale_settings) as http:
        body = http.get(f"/queue?{query}").json()
    got = [j["job_id"] for j in body["jobs"]]
    assert set(got) & OURS == wanted
    assert body["count"] == len(got) == body["returned"]
    assert body["next_cursor"] is None


def test_queue_pages_give_every_job_once_in_order(queue: DevCluster, scale_settings: Settings) -> None:
    every = _squeue_ids(queue, "-t", "all")
    assert len(every) >= 2000
    with api_for(scale_settings) as http:
        full = http.get("/queue", headers={"Accept-Encoding": "gzip"})
        ids = _walk(http, "/queue", "jobs", "job_id", 250)
        alice = _walk(http, "/queue?user=alice", "jobs", "job_id", 100)
    assert full.headers["content-encoding"] == "gzip"
    assert {j["job_id"] for j in full.json()["jobs"]} & OURS == every
    assert ids == sorted(set(ids))  # each job once, by job id
    assert [i for i in ids if i in OURS] == sorted(every)
    assert [i for i in alice if i in OURS] == sorted(_squeue_ids(queue, "-t", "all", "-u", "alice"))


def test_filtered_reads_make_no_slurm_query(queue: DevCluster, scale_settings: Settings) -> None:
    scale_settings.api.refresh_interval = 30  # nothing expires during the test
    with api_for(scale_settings) as http:
        assert http.get("/queue?limit=1").status_code == 200
        assert http.get("/nodes?limit=1").status_code == 200
        before = http.get("/metrics").text
        for query in ("user=alice", "account=astro", "partition=gpu", "state=PD", f"name={NAME}-1",
                      "nodes=n[1-2]", "limit=100"):
            assert http.get(f"/queue?{query}").status_code == 200
        for query in ("state=idle", "partition=gpu", "nodes=n[1-500]", "limit=100"):
            assert http.get(f"/nodes?{query}").status_code == 200
        after = http.get("/metrics").text

    def queries(text: str, resource: str) -> float:
        line = next(x for x in text.splitlines()
                    if x.startswith("slurmtower_snapshot_queries") and f'resource="{resource}"' in x)
        return float(line.rsplit(" ", 1)[1])

    assert queries(after, "jobs") == queries(before, "jobs") == 1
    assert queries(after, "nodes") == queries(before, "nodes") == 1


def _sinfo_nodes(cluster: DevCluster, *flags: str) -> list[tuple[str, set[str]]]:
    """(node, {base state and flags}) from ``sinfo -N -O StateComplete`` (one line per node and
    partition: deduplicated)."""
    out = scale_sh(cluster, "sinfo", "-h", "-N", "--all", "-O", "NodeList: ,StateComplete: ", *flags)
    seen: dict[str, set[str]] = {}
    for line in out.splitlines():
        name, _, state = line.strip().partition(" ")
        seen[name] = {w.upper() for w in state.strip().split("+")}
    return sorted(seen.items(), key=lambda kv: int(kv[0].lstrip("n")))


@pytest.mark.parametrize(("query", "oracle"), [
    ("state=idle", lambda n, s, p: "IDLE" in s),
    ("state=not_responding", lambda n, s, p: "NOT_RESPONDING" in s),
    ("state=mixed,allocated", lambda n, s, p: bool({"MIXED", "ALLOCATED"} & s)),
    ("partition=gpu", lambda n, s, p: "gpu" in p),
    ("partition=bigmem,batch", lambda n, s, p: bool({"bigmem", "batch"} & p)),
    ("nodes=n[1-10,990-1000]", lambda n, s, p: n in NodeSet("n[1-10,990-1000]")),
    ("state=idle&partition=compute", lambda n, s, p: "IDLE" in s and "compute" in p),
], ids=lambda v: v if isinstance(v, str) else "")
def test_node_filters_match_sinfo(queue: DevCluster, scale_settings: Settings, query: str, oracle: Any) -> None:
    parts: dict[str, set[str]] = {}
    for line in scale_sh(queue, "sinfo", "-h", "-N", "--all", "-o", "%N %R").splitlines():
        name, part = line.split()
        parts.setdefault(name, set()).add(part)
    states = _sinfo_nodes(queue)
    assert len(states) >= 1000
    wanted = [n for n, s in states if oracle(n, s, parts.get(n, set()))]
    assert wanted, f"the oracle found no node for {query}"
    with api_for(scale_settings) as http:
        body = http.get(f"/nodes?{query}").json()
    assert [n["name"] for n in body["nodes"]] == wanted
    assert body["count"] == len(wanted)


def test_node_pages_give_every_node_once_in_natural_order(queue: DevCluster, scale_settings: Settings) -> None:
    names = [n for n, _ in _sinfo_nodes(queue)]
    with api_for(scale_settings) as http:
        assert _walk(http, "/nodes", "nodes", "name", 128) == names


def test_the_state_and_data_ages_are_honest_against_squeue(queue: DevCluster, scale_settings: Settings) -> None:
    """A service answering while a hundred of the module's held jobs are cancelled: every
    answer whose ``X-State-Age`` says its states were read after the cancel shows them
    cancelled (squeue's state), and every one whose ``X-Data-Age`` says so too; the ages never
    claim more than the answers hold. (23.11+ reads the states alone: they come within
    ``api.state_refresh_interval``; 22.05 with the full records.)"""
    scale_settings.api.refresh_in_subprocess = True
    victims = sorted(_squeue_ids(queue, "-t", "PD"))[-100:]  # held ones (other tests end some)
    assert len(victims) == 100
    with api_for(scale_settings) as http:
        shown = {j["job_id"]: j["state"] for j in http.get("/queue", params={"state": "PD"}).json()["jobs"]}
        assert all(shown.get(j) == "PENDING" for j in victims)
        t0 = time.monotonic()
        scale_sh(queue, "scancel", *map(str, victims))
        cancelled_at = time.monotonic()  # squeue says CANCELLED from here on (checked below)
        assert set(scale_sh(queue, "squeue", "-h", "-t", "cancelled", "-o", "%A").split()) >= set(map(str, victims))
        seen_by_state = None
        while time.monotonic() - t0 < 60:
            resp = http.get("/queue", params={"state": "CANCELLED"})
            now = time.monotonic()
            shown = {j["job_id"] for j in resp.json()["jobs"]}
            state_age, data_age = float(resp.headers["x-state-age"]), float(resp.headers["x-data-age"])
            assert state_age <= data_age + 0.001
            if now - state_age > cancelled_at:  # its states were read after the cancel
                assert shown >= set(victims), (state_age, len(set(victims) - shown))
                seen_by_state = now - cancelled_at
                if now - data_age > cancelled_at:
                    break
            time.sleep(0.2)
        assert seen_by_state is not None, "no answer read the states after the cancel within 60 s"
    interval = scale_settings.api.state_refresh_interval
    release = tuple(int(x) for x in scale_sh(queue, "sinfo", "-V").split()[1].split(".")[:2])
    if release >= (23, 11):
        assert seen_by_state < 3 * interval + 2  # the states alone, not the full records' interval


@pytest.fixture()
def scale_sensor(scale_cluster: DevCluster) -> Iterator[SensorProcess]:
    sensor = SensorProcess(scale_cluster, extra_env={"SLURMTOWER_EVENTS__POLL_INTERVAL": "1"})
    try:
        yield sensor
    finally:
        sensor.cleanup()
        scale_sh(scale_cluster, "scontrol", "update", "nodename=n[1-1000]", "state=resume", check=False)


def test_a_thousand_node_drain_gives_a_thousand_events(scale_cluster: DevCluster,
                                                       scale_sensor: SensorProcess) -> None:
    scale_sensor.start()
    nodes = NodeSet("n[1-1000]")
    start = len(scale_sensor.node_events())
    began = time.monotonic()
    scale_sh(scale_cluster, "scontrol", "update", f"nodename={nodes}", "state=drain", "reason=scale drain")

    def drained(evs: list[Any]) -> bool:
        new = [e for e in evs if e.type == "slurm.node.state"][start:]
        return len({e.node for e in new if "DRAIN" in e.payload["flags"]}) >= 1000

    evs = scale_sensor.wait_events(drained, 30, "1000 drain events")
    took = time.monotonic() - began
    new = [e for e in evs if e.type == "slurm.node.state"][start:]
    drains = [e for e in new if "DRAIN" in e.payload["flags_added"]]
    assert sorted({e.node for e in drains}) == sorted(nodes)
    assert len(drains) == 1000  # one per node, none twice
    assert took <= 5, f"1000 drain events took {took:.1f} s"
    # The resume: every node gives its transition back, once.
    mark = len(scale_sensor.node_events())
    scale_sh(scale_cluster, "scontrol", "update", f"nodename={nodes}", "state=resume", check=False)

    def resumed(evs: list[Any]) -> bool:
        back = [e for e in evs if e.type == "slurm.node.state"][mark:]
        return len({e.node for e in back if "DRAIN" not in e.payload["flags"]}) >= 1000

    evs = scale_sensor.wait_events(resumed, 30, "1000 resume events")
    back = [e for e in evs if e.type == "slurm.node.state"][mark:]
    assert sorted(e.node for e in back if "DRAIN" in e.payload["flags_removed"]) == sorted(nodes)
