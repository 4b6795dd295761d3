"""The job queue read and rendered by a worker process (``api.refresh_in_subprocess``): same
answers as squeue, the worker's Slurm calls in the parent's metrics, a dead or hung worker
fails one round (503 or stale) and is replaced, and shutdown leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.live import worker as refresh_worker
from slurmtower.live.budget import CHEAP, CHEAP_EVERY, WINDOW, RpcMeter
from slurmtower.live.cache import SnapshotCache
from slurmtower.settings import Settings
from slurmtower.slurm import make_client

from .api_server import running
from .conftest import sh, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture()
def held(devcluster: DevCluster) -> Iterator[list[int]]:
    ids = [int(sh("sbatch", "--parsable", "--hold", "-J", f"offload-{i}", "-o", "/dev/null", "-D", "/tmp",
                  "--wrap", "true").strip().split(";")[0]) for i in range(3)]
    yield ids
    subprocess.run(["scancel", *map(str, ids)], capture_output=True, check=False)


def configure(settings: Settings, *, interval: float = 0.5, stale: bool = False, worker: bool = True,
              ahead: bool = True) -> Settings:
    settings.api.refresh_in_subprocess = worker  # what this module tests (conftest turns it off)
    settings.api.refresh_ahead = ahead
    settings.api.refresh_interval = interval
    settings.api.serve_stale = stale
    settings.auth.anonymous_read = True
    settings.archiver.archive_usage_load = False
    settings.events.sensor_enabled = False
    return settings


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (reaped by its parent's executor later). It can also be
    # reaped between the signal and the read: /proc then answers ENOENT or ESRCH.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def worker_pid(cache: SnapshotCache) -> int:
    assert cache.worker is not None
    return wait_for(lambda: cache.worker.pid if cache.worker is not None else None, 30,
                    what="the refresh worker to run")


def names_once_renamed(http: httpx.Client, job_id: int, name: str) -> dict[int, str]:
    """/queue's job names, once ``job_id`` shows as ``name`` there and /queue lists the same
    jobs as squeue."""
    def renamed() -> dict[int, str] | None:
        jobs = {j["job_id"]: j["name"] for j in http.get("/queue").json()["jobs"]}
        listed = {int(x) for x in sh("squeue", "-h", "-t", "all", "-o", "%A").split()}
        return jobs if jobs.get(job_id) == name and set(jobs) == listed else None

    return wait_for(renamed, 20, step=0.3, what=f"{name} in /queue, and the same jobs as squeue")


def test_queue_is_read_by_the_worker_and_matches_squeue(settings: Settings, held: list[int]) -> None:
    app = create_app(configure(settings, interval=30))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        pid = worker_pid(cache)
        assert pid != os.getpid()
        queue = http.get("/queue")
        usage = http.get("/usage").json()  # built in the parent from the worker's (pickled) jobs
        scrape = http.get("/metrics").text
    assert queue.status_code == 200
    assert cache.worker is None  # lifespan shutdown
    body = queue.json()
    ids = {j["job_id"] for j in body["jobs"]}
    assert set(held) <= ids
    assert ids == {int(x) for x in sh("squeue", "-h", "-t", "all", "-o", "%A").split()}
    assert body["count"] == len(body["jobs"]) and body["stale"] is False
    assert queue.headers["etag"].startswith('W/"')
    assert usage["totals"]["cpus_total"] == 8
    # The parent never runs squeue itself here: these calls are the worker's, replayed.
    squeue_calls = re.search(r'^slurmtower_slurm_calls_total\{kind="squeue",outcome="ok"\} (\S+)$', scrape, re.M)
    assert squeue_calls is not None and float(squeue_calls[1]) >= 1
    assert cache.queries["jobs"] >= 1
    assert not alive(pid)


def test_etag_stays_while_the_queue_does_not_change(settings: Settings, held: list[int]) -> None:
    app = create_app(configure(settings, interval=0.3))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        worker_pid(cache)
        first = http.get("/queue")
        time.sleep(0.8)
        http.get("/queue")  # starts a refresh ahead
        wait_for(lambda: cache.queries["jobs"] >= 2 and cache.peek("jobs") is not None
                 and cache.peek("jobs").generation >= 2, 20, what="a second refresh")  # type: ignore[union-attr]
        second = http.get("/queue", headers={"If-None-Match": first.headers["etag"]})
    assert first.status_code == 200
    assert second.status_code == 304


@pytest.mark.parametrize("serve_stale", [False, True], ids=["503", "stale"])
def test_a_worker_dying_mid_round_fails_that_round_then_is_replaced(settings: Settings, held: list[int],
                                                                    serve_stale: bool) -> None:
    # A request that waits for its round: no round planned ahead (the next test has them).
    app = create_app(configure(settings, interval=0.5, stale=serve_stale, ahead=False))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        pid = worker_pid(cache)
        assert cache.worker is not None
        assert http.get("/queue").status_code == 200
        rounds = cache.worker.rounds
        time.sleep(1.1)  # past two intervals: the next request waits for the next round
        os.kill(pid, signal.SIGSTOP)  # freeze it so that it dies in the middle of the round
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(http.get, "/queue")
            wait_for(lambda: cache.worker is not None and cache.worker.rounds > rounds, 10,
                     what="the round to start")
            os.kill(pid, signal.SIGKILL)
            failed = pending.result(30)
        if serve_stale:
            assert failed.status_code == 200
            assert failed.json()["stale"] is True and failed.headers["x-data-stale"] == "true"
            assert "died" in failed.json()["stale_reason"]
        else:
            assert failed.status_code == 503
            assert failed.headers["content-type"] == "application/problem+json"
            assert "died" in failed.json()["detail"]
        time.sleep(0.6)  # the failed round is not retried within the interval
        recovered = wait_for(lambda: (r := http.get("/queue")).status_code == 200
                             and not r.json()["stale"] and r, 30, what="a fresh queue")
        new_pid = worker_pid(cache)
    assert set(held) <= {j["job_id"] for j in recovered.json()["jobs"]}
    assert new_pid != pid
    assert not alive(pid) and not alive(new_pid)


def test_a_worker_killed_between_rounds_planned_ahead_is_replaced(settings: Settings, held: list[int]) -> None:
    """With rounds started on a timer while the queue is read, a worker killed under them is
    replaced by a timer's round or the next request's, and a poller sees fresh data again."""
    app = create_app(configure(settings, interval=0.5))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        pid = worker_pid(cache)
        assert http.get("/queue").status_code == 200
        queries = cache.queries["jobs"]
        wait_for(lambda: http.get("/queue") and cache.queries["jobs"] >= queries + 2, 20, step=0.2,
                 what="rounds started ahead")
        os.kill(pid, signal.SIGKILL)
        held_ids = set(held)

        def fresh_from_a_new_worker() -> httpx.Response | None:
            r = http.get("/queue")
            new = cache.worker.pid if cache.worker is not None else None
            return r if (new not in (None, pid) and r.status_code == 200 and not r.json()["stale"]
                         and held_ids <= {j["job_id"] for j in r.json()["jobs"]}) else None

        recovered = wait_for(fresh_from_a_new_worker, 30, step=0.2, what="a fresh queue from a new worker")
        new_pid = worker_pid(cache)
        assert float(recovered.headers["x-data-age"]) < 5
    assert not alive(pid) and not alive(new_pid)


def test_a_hung_worker_is_killed_and_the_round_fails(settings: Settings, held: list[int]) -> None:
    app = create_app(configure(settings, interval=0.5))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        pid = worker_pid(cache)
        assert cache.worker is not None
        cache.worker.timeout = 1.5
        time.sleep(1.1)
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            hung = http.get("/queue")
            waited = time.monotonic() - started
        finally:
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
        assert hung.status_code == 503 and "took more than" in hung.json()["detail"]
        assert waited < 5
        wait_for(lambda: not alive(pid), 10, what="the hung worker to be killed")
        time.sleep(0.6)
        wait_for(lambda: http.get("/queue").status_code == 200, 30, what="a new worker's answer")
        assert worker_pid(cache) != pid


def test_the_setting_off_keeps_the_refresh_in_process(settings: Settings, held: list[int]) -> None:
    app = create_app(configure(settings, interval=30, worker=False))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        assert cache.worker is None
        body = http.get("/queue").json()
    assert set(held) <= {j["job_id"] for j in body["jobs"]}
    assert cache.queries["jobs"] == 1


def test_a_recycled_worker_goes_on_from_the_line_hashes(settings: Settings, held: list[int]) -> None:
    """After a whole queue was read once, the worker is replaced (its memory stays high
    otherwise); the new one knows the lines by their hashes: it sends only what changed,
    and the answers still match squeue."""
    app = create_app(configure(settings, interval=0.3))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        first = worker_pid(cache)
        assert {j["job_id"] for j in http.get("/queue").json()["jobs"]} >= set(held)
        assert cache.full_reads["jobs"] == 1
        entry = cache._entries["jobs"]
        assert cache.worker is not None
        cache.worker.recycle(entry.table.line_memo(), entry.seq)
        # replaced once the round it may be running (the nodes', read from the start) is answered
        wait_for(lambda: worker_pid(cache) != first, 30, what="the new worker")
        assert not alive(first)
        sh("scontrol", "release", str(held[0]))
        sh("scontrol", "update", f"jobid={held[1]}", "name=offload-renamed")

        jobs = names_once_renamed(http, held[1], "offload-renamed")
        assert cache.full_reads["jobs"] == 1  # the new worker did not read everything again
        assert jobs[held[2]] == "offload-2"


def test_a_worker_recycled_from_an_older_table_is_told_the_current_one(settings: Settings, held: list[int]) -> None:
    """A recycle asked while a queue round is in flight starts the new worker from the table
    as it was before that round: the two sides differ by one delta. The worker is then told
    the current table's lines (not asked for every row), and the answers still match squeue
    (CI saw this race once as a second full read)."""
    app = create_app(configure(settings, interval=0.3))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        first = worker_pid(cache)
        assert set(held) <= {j["job_id"] for j in http.get("/queue").json()["jobs"]}
        entry = cache._entries["jobs"]
        assert entry.table is not None and cache.worker is not None
        older, older_seq = entry.table.line_memo(), entry.seq
        sh("scontrol", "update", f"jobid={held[0]}", "name=offload-before")
        wait_for(lambda: {j["job_id"]: j["name"] for j in http.get("/queue").json()["jobs"]}.get(held[0])
                 == "offload-before", 20, step=0.2, what="the first rename in /queue")
        assert entry.seq > older_seq
        cache.worker.recycle(older, older_seq)
        wait_for(lambda: worker_pid(cache) != first, 30, what="the new worker")
        sh("scontrol", "update", f"jobid={held[1]}", "name=offload-after")

        jobs = names_once_renamed(http, held[1], "offload-after")
        assert jobs[held[0]] == "offload-before" and jobs[held[2]] == "offload-2"
        assert cache.full_reads["jobs"] == 1


_ORPHAN_SCRIPT = """
import asyncio, multiprocessing.resource_tracker as rt, sys, time
from slurmtower.live.worker import RefreshWorker
from slurmtower.settings import Settings

worker = RefreshWorker(Settings(), report=lambda *a: None, timeout=60)
assert asyncio.run(worker.wait_ready(60))
print(worker.pid, rt._resource_tracker._pid, flush=True)
time.sleep(600)
"""


def test_a_killed_parent_takes_its_worker_and_resource_tracker_with_it() -> None:
    # kill -9 (or the OOM killer) on a serving process: no refresh worker or resource
    # tracker stays behind (PR_SET_PDEATHSIG in the worker; the tracker's last writer goes).
    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    with proc.stdout:
        try:
            worker, tracker = (int(w) for w in proc.stdout.readline().split())
            assert alive(worker) and alive(tracker)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    wait_for(lambda: not alive(worker), 10, what="the worker to die with its parent")
    wait_for(lambda: not alive(tracker), 10, what="the resource tracker to exit")


def test_the_controllers_time_per_round_is_measured_around_the_rounds_own_read(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """sdiag's own average runs from its last reset: at a queue that grew since, it is far below
    what a read costs now, and a refresh interval bounded by slurmctld's share would stay too
    short. The worker reads sdiag after a round's read: the first round just before it too,
    the next ones from that reading on (one sdiag call a round; a cheap read every 20 s)."""
    monkeypatch.setattr(refresh_worker, "_client", make_client(settings))
    meter = RpcMeter(refresh_worker._rpc_totals_now)
    monkeypatch.setattr(refresh_worker, "_meter", meter)
    rpcs = ("REQUEST_JOB_INFO",)
    before = meter.before(rpcs)  # the first round: sdiag just before it
    assert before is not None and "REQUEST_JOB_INFO" in before and meter.reads == 1
    for _ in range(3):  # the round's read (three calls)
        sh("squeue", "-h")
    seconds = meter.after(rpcs, before)
    after = refresh_worker._rpc_totals_now()
    assert after is not None
    (count0, total0), (count1, total1) = before["REQUEST_JOB_INFO"], after["REQUEST_JOB_INFO"]
    assert count1 >= count0 + 3 and "REQUEST_JOB_INFO" in meter.measured and meter.reads == 2
    assert 0 < seconds <= (total1 - total0) / 3 / 1e6  # per call, from these calls only
    # A cheap read (a few jobs: under CHEAP) is measured again only after CHEAP_EVERY s, then
    # from that reading on (no sdiag call before it); a costly one at each read.
    assert seconds < CHEAP and meter.before(rpcs) is None
    assert meter.after(rpcs, None) == seconds and meter.reads == 2  # nothing read: the last figure
    meter.last -= CHEAP_EVERY
    assert meter.before(rpcs) is meter.window and meter.reads == 2
    meter.seconds["REQUEST_JOB_INFO"] = 2 * CHEAP
    meter.last += CHEAP_EVERY - 1
    assert meter.before(rpcs) is meter.window
    meter.last -= WINDOW + 1  # a reading too old to start a window: sdiag before the read again
    assert meter.before(rpcs) is not meter.window and meter.reads == 3
