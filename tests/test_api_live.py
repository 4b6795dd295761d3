"""Live routes (/queue /nodes /partitions /stats /usage) on a real HTTP server, checked against
squeue, sinfo, scontrol and sdiag in the same test; the snapshot cache's promises."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.live.budget import POLL_PART
from slurmtower.live.cache import SnapshotCache
from slurmtower.live.usage import build_usage
from slurmtower.models import Job, JobState, Node, NodeState, Partition
from slurmtower.settings import Settings, TokenEntry, load_settings

from .api_server import api_for, running
from .conftest import sh, wait_for
from .test_actions_api import Http

pytestmark = [pytest.mark.cluster, pytest.mark.release]


def sbatch(*args: str) -> int:
    out = sh("sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args)
    return int(out.strip().split(";")[0])


@pytest.fixture()
def jobs(devcluster: DevCluster) -> Iterator[list[int]]:
    """Jobs a test submits; cancelled afterwards."""
    ids: list[int] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *map(str, ids)], capture_output=True, check=False)


@pytest.fixture(scope="module")
def in_process(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Http:
    """One app for this module's request/response checks, its requests served in process
    (no server, no lifespan: nothing refreshes in the background)."""
    s = load_settings(devcluster.tower_conf, environ={})
    s.state_dir = tmp_path_factory.mktemp("live-in-process")
    s.auth.anonymous_read = True
    s.events.sensor_enabled = False
    s.archiver.archive_usage_load = False
    return Http(create_app(s))


def rpc_counts() -> dict[str, int]:
    out = sh("sdiag")
    return {m[1]: int(m[3]) for m in re.finditer(r"^\s*(\w+)\s+\(\s*(\d+)\)\s+count:(\d+)", out, re.M)}


def squeue_ids() -> set[int]:
    return {int(x) for x in sh("squeue", "-h", "-t", "all", "-o", "%A").split()}


def test_queue_matches_squeue(settings: Settings, jobs: list[int]) -> None:
    jobs += [sbatch("-J", "live-held", "--hold", "-p", "debug", "--wrap", "true") for _ in range(3)]
    before = squeue_ids()
    with api_for(settings) as http:
        resp = http.get("/queue")
    after = squeue_ids()
    assert resp.status_code == 200
    body = resp.json()
    got = {j["job_id"] for j in body["jobs"]}
    assert before & after <= got <= before | after
    assert set(jobs) <= got and body["count"] == len(body["jobs"])
    held = [j for j in body["jobs"] if j["job_id"] in jobs]
    assert all(j["state"] == "PENDING" and j["name"] == "live-held" for j in held)


def test_nodes_and_partitions_match_sinfo(settings: Settings) -> None:
    with api_for(settings) as http:
        nodes = http.get("/nodes").json()
        parts = http.get("/partitions").json()
    want_nodes: dict[str, tuple[int, int, set[str]]] = {}
    for line in sh("sinfo", "-h", "-N", "-o", "%N|%c|%m|%R").splitlines():
        name, cpus, mem, part = line.split("|")
        old = want_nodes.get(name, (int(cpus), int(mem), set()))
        want_nodes[name] = (old[0], old[1], old[2] | {part})
    got_nodes = {n["name"]: (n["cpus"], n["real_memory_mib"], set(n["partitions"])) for n in nodes["nodes"]}
    assert got_nodes == want_nodes
    assert nodes["count"] == 4
    want_parts = {}
    for line in sh("sinfo", "-h", "-o", "%R|%D|%N|%a").splitlines():
        name, count, nodelist, avail = line.split("|")
        want_parts[name] = (int(count), nodelist, avail.upper())
    got_parts = {p["name"]: (p["total_nodes"], p["nodes"], p["state"]) for p in parts["partitions"]}
    assert got_parts == want_parts
    limits = {p["name"]: p["max_time"] for p in parts["partitions"]}
    assert limits == {"debug": None, "batch": "PT1H", "short": "PT5M"}


def test_stats_match_sdiag(settings: Settings) -> None:
    with api_for(settings) as http:
        text_before = sh("sdiag")
        stats = http.get("/stats").json()["stats"]
        text_after = sh("sdiag")
    submitted = {int(re.search(r"Jobs submitted:\s+(\d+)", t)[1]) for t in (text_before, text_after)}  # type: ignore[index]
    assert stats["jobs_submitted"] in submitted
    names = {r["name"] for r in stats["rpcs_by_type"]}
    assert "REQUEST_NODE_INFO" in names and "REQUEST_JOB_INFO" in names
    assert stats["server_thread_count"] >= 1


def test_usage_matches_running_jobs(settings: Settings, jobs: list[int]) -> None:
    jobs += [sbatch("-J", "live-use", "-p", "batch", "--mem=300", "-t", "5", "--wrap", "sleep 300")]
    wait_for(lambda: sh("squeue", "-h", "-j", str(jobs[0]), "-o", "%T").strip() == "RUNNING", 30,
             what="the job to run")
    with api_for(settings) as http:
        squeue_before = sh("squeue", "-h", "-t", "R", "-o", "%A|%P|%N|%C")
        usage = http.get("/usage").json()
        squeue_after = sh("squeue", "-h", "-t", "R", "-o", "%A|%P|%N|%C")
    assert squeue_before == squeue_after, "jobs changed during the test; cannot compare"
    want: dict[tuple[str, str], int] = {}
    for line in squeue_before.splitlines():
        _jid, part, nodelist, cpus = line.split("|")
        assert "," not in nodelist and "[" not in nodelist  # single-node jobs in this test
        want[(part, nodelist)] = want.get((part, nodelist), 0) + int(cpus)
    for part, body in usage["partitions"].items():
        for node, row in body["nodes"].items():
            assert row["cpus_used"] == want.get((part, node), 0), (part, node)
            assert row["cpus_total"] == 2 and row["memory_total_mib"] == 2000
        assert body["totals"]["cpus_used"] == sum(r["cpus_used"] for r in body["nodes"].values())
    node = sh("squeue", "-h", "-j", str(jobs[0]), "-o", "%N").strip()
    row = usage["partitions"]["batch"]["nodes"][node]
    assert row["cpus_used"] >= 1 and row["memory_used_mib"] >= 300
    assert usage["totals"]["cpus_total"] == 8


def test_usage_survives_zero_nodes_deleted_users_and_hidden_partitions() -> None:
    nodes = [Node(name="z1", state=NodeState.IDLE, cpus=0, real_memory_mib=0, partitions=["p"]),
             Node(name="z2", state=NodeState.DOWN, partitions=["p", "secret"])]
    jobs = [Job(job_id=1, state=JobState.RUNNING, partition="p", nodes="z1", cpus=1, user_name=None),
            Job(job_id=2, state=JobState.RUNNING, partition="secret", nodes="z2", cpus=1,
                memory_per_cpu_mib=10),
            Job(job_id=3, state=JobState.RUNNING, partition="gone", nodes="z[1-2]", cpus=2)]
    parts = [Partition(name="p", state="UP", nodes="z[1-3]"), Partition(name="secret", state="UP", nodes="z2"),
             Partition(name="empty", state="UP", nodes=None)]
    usage = build_usage(nodes, jobs, parts, frozenset({"secret"}))
    assert set(usage["partitions"]) == {"p", "empty"}
    z1 = usage["partitions"]["p"]["nodes"]["z1"]
    assert (z1["cpus_used"], z1["cpu_usage"], z1["memory_usage"]) == (1, None, None)
    assert usage["partitions"]["p"]["nodes"]["z2"]["cpus_used"] == 0
    assert usage["partitions"]["p"]["nodes"]["z3"]["state"] is None
    assert usage["partitions"]["empty"]["nodes"] == {}


def test_hidden_partitions_are_hidden_from_every_live_route(settings: Settings, jobs: list[int]) -> None:
    jobs += [sbatch("-J", "secret-held", "--hold", "-p", "short", "--wrap", "true"),
             sbatch("-J", "secret-run", "-p", "short", "-t", "2", "--wrap", "sleep 120")]
    wait_for(lambda: sh("squeue", "-h", "-j", str(jobs[1]), "-o", "%T").strip() == "RUNNING", 30,
             what="the job to run")
    settings.api.hidden_partitions = ["short"]
    with api_for(settings) as http:
        queue = http.get("/queue").json()
        nodes = http.get("/nodes").json()
        parts = http.get("/partitions").json()
        usage = http.get("/usage").json()
    assert not {j["job_id"] for j in queue["jobs"]} & set(jobs)
    assert all("short" not in (j["partition"] or "") for j in queue["jobs"])
    assert {n["name"] for n in nodes["nodes"]} == {"n1", "n2", "n3", "n4"}  # n3, n4 are in debug too
    assert all("short" not in n["partitions"] for n in nodes["nodes"])
    assert "short" not in {p["name"] for p in parts["partitions"]} and parts["count"] == 2
    assert "short" not in usage["partitions"]
    assert "short" in sh("squeue", "-h", "-j", str(jobs[1]), "-o", "%P")  # Slurm still has it


def test_concurrent_clients_share_one_slurm_query(settings: Settings) -> None:
    settings.api.refresh_interval = 30
    settings.auth.anonymous_read = True
    settings.archiver.archive_usage_load = False
    settings.events.sensor_enabled = False
    app = create_app(settings)
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        before = rpc_counts()
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda _: http.get("/nodes").status_code, range(200)))
        after = rpc_counts()
    assert answers == [200] * 200
    assert cache.queries["nodes"] == 1
    assert after.get("REQUEST_NODE_INFO", 0) - before.get("REQUEST_NODE_INFO", 0) <= 1


def test_at_most_one_query_per_refresh_interval(settings: Settings) -> None:
    settings.api.refresh_interval = 1.0
    # The bound alone: an interval that grows with the measured cost is tested on its own.
    settings.api.refresh_cpu_share = 0
    settings.api.refresh_controller_share = 0
    settings.auth.anonymous_read = True
    settings.archiver.archive_usage_load = False
    settings.events.sensor_enabled = False
    app = create_app(settings)
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        assert http.get("/queue").status_code == 200  # the first read (the worker has started)
        first = cache.queries["jobs"]
        end = time.monotonic() + 3.5

        def poll(_: int) -> int:
            n = 0
            while time.monotonic() < end:
                assert http.get("/queue").status_code == 200
                n += 1
            return n

        with ThreadPoolExecutor(8) as pool:
            total = sum(pool.map(poll, range(8)))
    assert total > 50
    assert 2 <= cache.queries["jobs"] - first <= 4  # one per interval at most (3.5 s, 1 s interval)


def test_responses_carry_age_etag_and_gzip(settings: Settings) -> None:
    settings.api.refresh_interval = 30
    with api_for(settings) as http:
        first = http.get("/nodes", headers={"Accept-Encoding": "gzip"})
        assert first.headers["content-encoding"] == "gzip"
        raw = httpx.get(str(http.base_url.join("/nodes")), headers={"Accept-Encoding": "gzip"})
        assert raw.json() == first.json()
        time.sleep(0.6)
        second = http.get("/nodes", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in second.headers
        assert second.json()["fetched_at"] == first.json()["fetched_at"]
        assert float(second.headers["x-data-age"]) >= 0.5 > float(first.headers["x-data-age"])
        assert second.json()["stale"] is False
        etag = first.headers["etag"]
        again = http.get("/nodes", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        assert http.get("/nodes", headers={"If-None-Match": 'W/"other"'}).status_code == 200
    packed = gzip.compress(second.content)
    assert len(packed) < len(second.content)


@pytest.mark.parametrize(("url", "param"), [
    ("/queue?user=", "user"), ("/queue?limit=0", "limit"), ("/queue?state=BOGUS", "state"),
        ("/queue?cursor=abc", "cursor"), ("/queue?nodes=n[1-", "nodes"), ("/queue?users=alice", "users"),
        ("/nodes?state=idle2", "state"), ("/nodes?limit=x", "limit"), ("/nodes?nodes=n[", "nodes"), ("/partitions?x=1", "x"),
    ("/stats?all=1", "all"), ("/usage?partition=debug", "partition"), ("/load?time=abc", "time"),
    ("/load?offset=-1", "offset"), ("/load?time<=5", "time"), ("/load?time=0", "time"),
    ("/load?since=1", "since"),
], ids=lambda v: str(v))
def test_bad_live_parameters_are_a_400_naming_them(in_process: Http, url: str, param: str) -> None:
    # Refused before Slurm or the store is asked: one app for every case, requests in process.
    resp = in_process.get(url)
    assert resp.status_code == 400, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["param"] == param


def test_live_routes_need_a_reader_unless_anonymous_read(settings: Settings) -> None:
    settings.events.sensor_enabled = False
    settings.auth.tokens = [TokenEntry(name="dash", role="reader", sha256=hash_token("s3cret"))]
    with running(create_app(settings)) as http:
        assert http.get("/queue").status_code == 401
        assert http.get("/queue", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/queue", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert http.get("/health").status_code == 200


def test_openapi_docs_and_route_index(settings: Settings) -> None:
    settings.api.serve_index = True
    with api_for(settings) as http:
        spec = http.get("/openapi.json").json()
        for path in ("/queue", "/nodes", "/partitions", "/stats", "/usage", "/history", "/users", "/load"):
            assert path in spec["paths"], path
        assert "Job" in spec["components"]["schemas"]
        assert http.get("/docs").status_code == 200
        index = http.get("/").text
    for path in ("/queue", "/nodes", "/usage", "/history", "/load"):
        assert f'<a href="{path}">{path}</a></td><td class="ok">200' in index, path


def _ctld_pid(devcluster: DevCluster) -> int:
    return int(Path(devcluster.run_dir / "slurmctld.pid").read_text().split()[0])


def test_slurmctld_stopped_gives_503_or_stale_within_the_bound(devcluster: DevCluster, settings: Settings,
                                                               tmp_path: Path) -> None:
    settings.api.slurm_wait = 3
    settings.api.refresh_interval = 0.5
    settings.api.serve_stale = False
    stale_settings = settings.model_copy(deep=True)
    stale_settings.api.serve_stale = True
    stale_settings.state_dir = tmp_path / "stale"
    with api_for(settings) as strict, api_for(stale_settings) as lenient:
        assert lenient.get("/nodes").status_code == 200
        os.kill(_ctld_pid(devcluster), signal.SIGTERM)
        try:
            wait_for(lambda: "DOWN" in sh("scontrol", "ping", check=False), 20, what="slurmctld to stop")
            time.sleep(2 * settings.api.refresh_interval + 0.1)  # past the refresh-ahead window
            start = time.monotonic()
            resp = strict.get("/nodes")
            took = time.monotonic() - start
            assert resp.status_code == 503, resp.text
            assert resp.headers["content-type"].startswith("application/problem+json")
            assert took < settings.api.slurm_wait + 2
            start = time.monotonic()
            stale = lenient.get("/nodes")
            assert time.monotonic() - start < settings.api.slurm_wait + 2
            assert stale.status_code == 200
            assert stale.json()["stale"] is True and stale.json()["stale_reason"]
            assert stale.headers["x-data-stale"] == "true"
            assert len(stale.json()["nodes"]) == 4
            # the routes that do not need slurmctld keep answering
            assert strict.get("/health").status_code == 200
        finally:
            devcluster.up()
        wait_for(lambda: strict.get("/nodes").status_code == 200, 30, 0.5, what="/nodes to recover")
        wait_for(lambda: lenient.get("/nodes").json()["stale"] is False, 30, 0.5, what="fresh data")


LIVE_ROUTES = ("/queue", "/nodes", "/partitions", "/stats", "/usage", "/queue?user=root", "/nodes?state=idle",
               "/ui", "/metrics")


def test_frozen_slurmctld_every_live_route_answers_within_5_s(devcluster: DevCluster, settings: Settings,
                                                            tmp_path: Path) -> None:
    """slurmctld SIGSTOPped (it accepts connections and never answers): with the default
    settings every live route answers within 5 s, from the last snapshot marked stale; with
    serve_stale off and no snapshot at all, a 503 problem within 5 s too."""
    settings.api.refresh_interval = 0.5
    # the interval exactly that, whatever the load (beside a second worker the CPU share
    # widened it past the sleep below: a snapshot within it is fresh, rightly not stale)
    settings.api.refresh_cpu_share = settings.api.refresh_controller_share = 0
    cold = settings.model_copy(deep=True)
    cold.api.serve_stale = False
    cold.state_dir = tmp_path / "cold"
    pid = _ctld_pid(devcluster)
    with api_for(settings) as warm, api_for(cold) as strict:
        for path in LIVE_ROUTES:
            assert warm.get(path).status_code == 200, path
        os.kill(pid, signal.SIGSTOP)
        try:
            # past the refresh-ahead window, with room for a round answered just before the
            # stop and ended after it (a round in a thread dates its snapshot at its end)
            time.sleep(2 * settings.api.refresh_interval + 0.5)
            took: dict[str, float] = {}
            with ThreadPoolExecutor(4) as pool:
                def timed(path: str, http: httpx.Client = warm) -> httpx.Response:
                    start = time.monotonic()
                    resp = http.get(path)
                    took[path] = time.monotonic() - start
                    return resp

                answers = dict(zip(LIVE_ROUTES, pool.map(timed, LIVE_ROUTES), strict=True))
            for path, resp in answers.items():
                assert took[path] <= 5.0, (path, took[path])
                assert resp.status_code == 200, (path, resp.status_code, resp.text[:200])
                if path.startswith(("/queue", "/nodes", "/partitions", "/stats", "/usage")):
                    assert resp.json()["stale"] is True, path
                    assert resp.headers["x-data-stale"] == "true"
            # A second round answers at once: the hung query is not waited for again.
            start = time.monotonic()
            assert warm.get("/usage").json()["stale"] is True
            assert time.monotonic() - start < 1.0
            for path in ("/queue", "/nodes", "/usage"):  # never answered: nothing to serve
                start = time.monotonic()
                resp = strict.get(path)
                assert time.monotonic() - start <= 5.0, path
                assert resp.status_code == 503 and resp.headers["content-type"].startswith(
                    "application/problem+json"), (path, resp.text[:200])
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: warm.get("/nodes").json()["stale"] is False, 60, 0.5, what="fresh data again")


def test_openapi_documents_the_live_filters(settings: Settings) -> None:
    with api_for(settings) as http:
        doc = http.get("/openapi.json").json()
    for path, names in (("/queue", {"user", "account", "partition", "state", "name", "nodes", "limit", "cursor"}),
                        ("/nodes", {"state", "partition", "nodes", "limit", "cursor", "holds"})):
        params = {p["name"] for p in doc["paths"][path]["get"]["parameters"] if p["in"] == "query"}
        assert params == names, path
        assert "400" in doc["paths"][path]["get"]["responses"]


def test_a_restarted_service_answers_at_once_from_the_snapshots_it_kept(devcluster: DevCluster,
                                                                       settings: Settings) -> None:
    """The snapshots the service read are kept under ``<state_dir>/snapshots`` (0600); a
    restart with slurmctld frozen answers every live route at once from them, marked stale
    with their real age, says so in /ready, and goes fresh after its first read of Slurm.
    (Without them the same restart answers 503 after ``slurm_wait``: the frozen test above.)"""
    from slurmtower.live.keep import RESOURCES

    settings.api.refresh_interval = 0.5
    settings.api.keep_snapshots_interval = 0.2
    kept = settings.state_dir / "snapshots"
    with api_for(settings) as first:
        before = first.get("/queue").json()
        for path in ("/nodes", "/partitions", "/stats"):
            assert first.get(path).status_code == 200
        wait_for(lambda: all((kept / f"{r}.snap").exists() for r in RESOURCES), 10, what="the kept snapshots")
    assert {oct((kept / f"{r}.snap").stat().st_mode & 0o777) for r in RESOURCES} == {"0o600"}
    stopped_at = time.monotonic()
    pid = _ctld_pid(devcluster)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with api_for(settings) as second:
            answers = {path: second.get(path) for path in ("/queue", "/nodes", "/partitions", "/stats")}
            first_answer = time.monotonic() - t0
            assert first_answer < 5.0, first_answer
            for path, resp in answers.items():
                assert resp.status_code == 200, (path, resp.text[:200])
                body = resp.json()
                assert body["stale"] is True and body["stale_reason"].startswith("kept from before"), path
                assert resp.headers["x-data-stale"] == "true"
                assert float(resp.headers["x-data-age"]) >= time.monotonic() - stopped_at - 1, path
            assert [j["job_id"] for j in answers["/queue"].json()["jobs"]] == [j["job_id"] for j in before["jobs"]]
            assert set(second.get("/ready").json()["restored"]) >= {"jobs", "nodes"}
            os.kill(pid, signal.SIGCONT)
            wait_for(lambda: not any(second.get(p).json()["stale"] for p in answers), 60, 0.5, what="fresh data")
            assert second.get("/ready").json()["restored"] == []
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_restart_reads_only_the_queue_lines_that_changed_and_a_kept_queue_too_old_is_not_served(
        settings: Settings, jobs: list[int]) -> None:
    """The kept queue carries each squeue line's digest (the same in every run): the refresh
    worker of the next run goes on from it, so its first read parses and sends only the lines
    that changed since (a fresh first answer sooner at 100,000 jobs). Older than
    ``api.keep_snapshots_max_age``, the kept queue is not served as the live one, and still
    spares that parsing."""
    jobs += [sbatch("-J", "kept-held", "--hold", "--wrap", "true") for _ in range(3)]
    settings.api.refresh_interval = 0.5
    settings.api.keep_snapshots_interval = 0.2
    settings.api.refresh_in_subprocess = True
    kept = settings.state_dir / "snapshots" / "jobs.snap"
    with api_for(settings) as first:
        assert set(jobs) <= {j["job_id"] for j in first.get("/queue").json()["jobs"]}
        wait_for(lambda: kept.exists() and kept.stat().st_mtime > time.time() - 0.5, 10, what="the kept queue")
    jobs.append(sbatch("-J", "kept-new", "--hold", "--wrap", "true"))  # one line that changed
    for max_age, served in ((600.0, True), (0.5, False)):
        if not served:
            time.sleep(0.6)  # the kept queue is past its max age now
        settings.api.keep_snapshots_max_age = max_age
        app = create_app(settings)
        cache: SnapshotCache = app.state.services.snapshots
        with running(app) as http:
            first = http.get("/queue").json()
            assert first["stale"] is served, first.get("stale_reason")
            wait_for(lambda: not http.get("/queue").json()["stale"], 30, 0.2, what="this run's first read")
            fresh = http.get("/queue").json()
            assert {j["job_id"] for j in fresh["jobs"]} >= set(jobs)
            assert {j["job_id"] for j in fresh["jobs"]} == set(_squeue_ids())
            # primed: no read of every line (a full delta) was needed, served or not
            assert cache.full_reads["jobs"] == 0, cache.full_reads


@pytest.mark.parametrize("in_subprocess", [True, False], ids=["state-worker", "thread"])
def test_job_states_are_read_alone_between_full_reads(settings: Settings, jobs: list[int],
                                                     in_subprocess: bool) -> None:
    """23.11+: a job held, released or cancelled shows its new state within
    ``api.state_refresh_interval`` while the full records stay as old as their interval allows
    (X-State-Age beside X-Data-Age, both in the body); the row says its state is newer than its
    other fields. 22.05 (no such read): the ages are equal, the state comes with the full read."""
    release = tuple(int(x) for x in sh("sinfo", "-V").split()[1].split(".")[:2])
    settings.api.refresh_interval = 120  # no full read during the test, once the first is done
    settings.api.refresh_controller_share = 0
    settings.api.refresh_cpu_share = 0
    settings.api.state_refresh_interval = 0.5
    settings.api.refresh_in_subprocess = in_subprocess
    job = sbatch("-J", "two-speeds", "--hold", "--wrap", "sleep 300")
    jobs.append(job)

    def row(http: httpx.Client) -> tuple[dict[str, Any], dict[str, Any], httpx.Response]:
        resp = http.get("/queue")
        body = resp.json()
        return next(j for j in body["jobs"] if j["job_id"] == job), body, resp

    with api_for(settings) as http:
        wait_for(lambda: any(j["job_id"] == job for j in http.get("/queue").json()["jobs"]), 30, 0.2,
                 what="the job in the queue")
        first, body, _ = row(http)
        assert first["state"] == "PENDING" and "state_as_of" not in first
        time.sleep(1.5)  # the full records age (no full read for 120 s): the states must not
        sh("scancel", str(job))
        if release < (23, 11):
            time.sleep(1.5)  # three more state intervals: nothing reads the states alone here
            again, later, resp = row(http)
            assert again["state"] == "PENDING" and later["fetched_at"] == body["fetched_at"]
            assert later["state_fetched_at"] == later["fetched_at"]
            assert resp.headers["x-state-age"] == resp.headers["x-data-age"]
            return
        wait_for(lambda: row(http)[0]["state"] == "CANCELLED", 5, 0.1, what="the state read to show the cancel")
        now, later, resp = row(http)
        assert later["fetched_at"] == body["fetched_at"]  # the other fields: the same full read
        assert now["state_as_of"] > later["fetched_at"] and later["state_fetched_at"] > later["fetched_at"]
        assert now["name"] == first["name"] and now["state_reason"] == first["state_reason"]  # as of their read
        assert float(resp.headers["x-state-age"]) < 1.2 < 1.5 < float(resp.headers["x-data-age"])
        assert sh("squeue", "-h", "--states=all", "-j", str(job), "-o", "%T").strip() == "CANCELLED"
        # a state read that changes nothing moves the state age, not the bytes
        etag = resp.headers["etag"]
        time.sleep(1.2)
        _, _, again = row(http)
        assert again.headers["etag"] == etag and float(again.headers["x-state-age"]) < 1.5
        assert float(again.headers["x-data-age"]) > float(resp.headers["x-data-age"])


def test_node_states_come_from_the_sensors_polls_between_full_reads(settings: Settings, devcluster: DevCluster) -> None:
    """Where the sensor runs in the serving process, its poll (every events.poll_interval)
    puts a node's new state in /nodes at once, marked state_as_of, while the full records keep
    their own interval (X-State-Age beside X-Data-Age); undone the same way."""
    settings.api.refresh_interval = 120
    settings.api.refresh_controller_share = 0
    settings.api.refresh_cpu_share = 0
    settings.auth.anonymous_read = True
    settings.archiver.archive_usage_load = False
    settings.events.sensor_enabled = True
    settings.events.poll_interval = 0.5

    def n2(http: httpx.Client) -> tuple[dict[str, Any], dict[str, Any], httpx.Response]:
        resp = http.get("/nodes")
        body = resp.json()
        return next(n for n in body["nodes"] if n["name"] == "n2"), body, resp

    with running(create_app(settings)) as http:
        first, body, _ = n2(http)
        assert "DRAIN" not in first.get("flags", []) and "state_as_of" not in first
        time.sleep(1.5)  # the full records age (no full read for 120 s): the state must not
        sh("scontrol", "update", "nodename=n2", "state=drain", "reason=two speeds")
        try:
            wait_for(lambda: "DRAIN" in n2(http)[0].get("flags", []), 10, 0.1, what="the poll to show the drain")
            now, later, resp = n2(http)
            assert later["fetched_at"] == body["fetched_at"] and now["reason"] == "two speeds"
            assert now["state_as_of"] > later["fetched_at"]
            assert float(resp.headers["x-state-age"]) < 1.5 < float(resp.headers["x-data-age"])
            assert "DRAIN" in sh("scontrol", "show", "node", "n2")
        finally:
            sh("scontrol", "update", "nodename=n2", "state=resume")
        wait_for(lambda: "DRAIN" not in n2(http)[0].get("flags", []), 10, 0.1, what="the poll to show the resume")
        wait_for(lambda: "state_as_of" not in n2(http)[0], 5, 0.1, what=f"{n2(http)[0]} as in the full read")


def test_the_sensors_polls_keep_within_their_part_of_slurmctlds_share(
        settings: Settings, devcluster: DevCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sensor's polls are part of api.refresh_controller_share: measured (sdiag around a
    poll), spaced so they take at most a quarter of it, and counted by the planner of the
    full reads. A 4-node poll costs slurmctld 0.2-1 ms: in a share of 0.01 %, one poll every
    8-10 s (events.max_poll_interval) instead of events.poll_interval's 0.2 s."""
    settings.events.sensor_enabled = True
    settings.events.poll_interval = 0.2
    settings.api.refresh_controller_share = 0.0001
    settings.archiver.archive_usage_load = False
    settings.auth.anonymous_read = True
    app = create_app(settings)
    with running(app) as http:
        assert http.get("/nodes").status_code == 200
        services = app.state.services
        pace = services.poll_pace
        assert pace is not None
        wait_for(lambda: pace.cost > 0, 15, 0.1, what="a poll measured")
        assert pace.interval > 2.0, (pace.cost, pace.interval)  # 0.2 s unpaced
        assert pace.interval <= settings.events.max_poll_interval  # a node event within it, whatever
        assert services.snapshots.other_controller_load() == pytest.approx(pace.load)
        # within its quarter of the share, or max_poll_interval apart when that binds first
        assert pace.interval == pytest.approx(min(settings.events.max_poll_interval,
                                                  pace.cost / (0.0001 * POLL_PART)))
        scrape = http.get("/metrics").text  # what an admin sees
        shown = re.search(r"^slurmtower_sensor_poll_interval_seconds (\S+)$", scrape, re.M)
        assert shown is not None and float(shown[1]) > 2.0, scrape[-2000:]
        polls: list[float] = []
        sensor = services.sensor
        real = sensor.poll

        def counted() -> Any:
            polls.append(time.monotonic())
            return real()

        monkeypatch.setattr(sensor, "poll", counted)
        time.sleep(2.0)  # a window to count polls in: ten at events.poll_interval
        assert len(polls) <= 1, polls


def _squeue_ids() -> list[int]:
    return [int(x) for x in sh("squeue", "-h", "--states=all", "-o", "%A").split()]


def test_a_kept_snapshot_that_does_not_decode_is_not_served(tmp_path: Path) -> None:
    from slurmtower.live.keep import MAGIC, SnapshotKeeper

    cache = SnapshotCache(refresh_interval=1, slurm_wait=1)
    cache.register("jobs", lambda: None)
    keeper = SnapshotKeeper(tmp_path, cache, interval=1)
    for junk in (b"not a snapshot", MAGIC + b"\x00" * 8 + b"STSNAP1\n", MAGIC + b"\x00\x00\x00\x00\x00\x00\xf0\x7f"):
        (tmp_path / "jobs.snap").write_bytes(junk)
        assert keeper.restore() == [] and cache.peek("jobs") is None


def test_a_big_view_asked_without_gzip_is_inflated_once() -> None:
    # A view over KEEP_PLAIN_BYTES keeps only its gzip; a client that does not take gzip used to
    # pay the inflation on every request (1.8 MB each: a sixth of the gzipped throughput).
    from slurmtower.api.reads import _answer
    from slurmtower.live.cache import KEEP_PLAIN_BYTES, Snapshot, _render

    rows = [{"job_id": i, "name": f"job-{i}", "user_name": "alice", "state": "PENDING"}
            for i in range(KEEP_PLAIN_BYTES // 40)]
    snap: Snapshot[Any] = Snapshot("jobs", None, datetime.now(UTC), time.monotonic(), 1)
    rendered = _render({"jobs": rows}, snap, False, [])
    assert rendered.body is None and rendered.gzip is not None  # big: only its gzip is kept
    _, headers, first = _answer(rendered, None, "", time.monotonic)
    assert json.loads(first)["jobs"] == rows and (b"content-encoding", b"gzip") not in headers
    _, _, second = _answer(rendered, None, "", time.monotonic)
    assert second is first  # the inflated bytes are kept with the view, not inflated again
    _, headers, packed = _answer(rendered, None, "gzip, deflate", time.monotonic)
    assert packed is rendered.gzip and (b"content-encoding", b"gzip") in headers
