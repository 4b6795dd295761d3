"""The scale lab bench: slurmtower vs slurmrestd at 5,000 nodes and up to 100,000 jobs.

Usage (root, loopback only; the lab is its own devcluster instance beside the default one)::

    .venv/bin/python bench/scale.py                    # 5,000 nodes; 1k, 10k, 50k, 100k jobs
    .venv/bin/python bench/scale.py --quick            # 1,000 and 5,000 jobs, short windows
    .venv/bin/python bench/scale.py --sizes 1000,20000 --duration 10 --window 30
    .venv/bin/python bench/scale.py --slurm-prefix debian --slurm-prefix /opt/slurm-26.05   # side by side
    .venv/bin/python bench/scale.py --slurm-prefix /opt/slurm-26.05 --sizes 100000 --runs 3  # median, worst

It brings up (or reuses) the scale lab (``/var/lib/slurmtower/scalelab``, name ``scale``,
port base 20000: ``devcluster up --nodes N``), fills its queue step by step to each size
(single jobs and arrays, users alice/bob/carol/dave in four accounts, seven partitions, a few
names; held, waiting for a begin time or for nodes that never come, and 8 running on n1-n4)
and at each size starts ``slurmtower serve`` as users run it (the lab's slurmtower.toml:
authentication on, requests with the demo reader token, sensor and archiver on, access log
on unless ``--no-access-log``) and measures, beside the lab's slurmrestd (JWT):

* start-up: until ``/ready`` answers 200 and until the first ``/queue`` 200, on an empty
  state and again after a restart (the snapshots the first run kept are served at once);
* with one client polling ``/queue?limit=100`` every 2 s for ``--window`` s: the CPU of the
  service's process tree (serve, its refresh worker, their children; /proc) per wall second
  as % of one core, its RSS (summed), ``X-Data-Age`` against ``api.refresh_interval``, and
  slurmctld's time in RPCs (``sdiag`` total_time deltas by message type, the nodes' own
  and sdiag's RPCs left out) as % of wall time;
* p99 with 50 clients (``wrk -t2``, ``--duration`` s, Authorization header) of
  ``/queue?limit=100`` and the filtered reads; a route that answers an error is a row
  "n/a (status N)";
* what each read of the service costs slurmctld alone (sdiag around three runs of each): the
  full queue (``REQUEST_JOB_INFO``), the job states alone (23.11+: ``REQUEST_JOB_STATE``), the
  node states the sensor polls (``sinfo``) and the nodes;
* ``X-State-Age`` (the job states: 23.11+ reads them alone between full reads) beside
  ``X-Data-Age``, and the first answer that is not a kept snapshot (``stale`` false);
* full ``/queue`` (gzip) size and requests/s against slurmrestd ``/slurm/<newest>/jobs``
  (``--rest-clients`` clients: one slurmrestd request at 100k jobs holds GBs), and the
  RSS peak of slurmrestd meanwhile;
* a drain of a fifth of the lab's nodes (``--drain``; 1,000 at 5,000) by one ``scontrol
  update``: ``slurm.node.state`` events on ``/events`` within 5 s (then the nodes are resumed).

It prints a markdown table (figures x release and size; with ``--runs N`` each size is
measured N times on the same queue, a column each) and the targets of issue 43 met or missed
(with several runs, their median and worst), and writes them to ``bench/results/scale-<date>.md``.
At the end every job it submitted is cancelled, the nodes it drained resumed, serve stopped,
and the lab stopped again if the bench started it. The load generator and Slurm share the
machine's cores with the service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jwt

from slurmtower.devcluster import DevCluster, find_slurm_installs
from slurmtower.nodeset import NodeSet
from slurmtower.settings import load_settings
from slurmtower.slurm.adapters import queue_format, state_format

LAB_DIR = Path("/var/lib/slurmtower/scalelab")
LAB_NAME = "scale"
LAB_PORT_BASE = 20000


def lab_port_base(nodes: int) -> int:
    """The lab's port base: its nodes take PORT_BASE..PORT_BASE+100+nodes, clear of the default
    cluster (26800-26904) and the tests' lab (14000-15100): 20000 up to 6,700 nodes, else 15200
    (10,000 nodes: 15200-25300)."""
    return LAB_PORT_BASE if LAB_PORT_BASE + 100 + nodes < 26800 else 15200

RESULTS = Path(__file__).resolve().parent / "results"
TICK = os.sysconf("SC_CLK_TCK")

# Who submits where (accounts as in the lab's sacctmgr setup).
USERS = {"alice": ["physics", "astro"], "bob": ["physics", "chemistry"], "carol": ["biology"],
         "dave": ["biology", "astro"]}
USER_WEIGHTS = [0.4, 0.3, 0.2, 0.1]  # alice submits most: ?user=alice is a big slice
PARTITIONS = {"debug": 0.25, "compute": 0.25, "bigmem": 0.1, "gpu": 0.15, "long": 0.15, "batch": 0.05,
              "short": 0.05}
SMALL_PARTITIONS = {"batch", "short"}  # two nodes: a 64-node job would be refused
NAMES = {"sb-sim": 0.4, "sb-md-relax": 0.3, "sb-train": 0.2, "sb-post": 0.1}
ARRAY_NAME = "sb-sweep"
RUN_NAME = "sb-run"
ALL_NAMES = [*NAMES, ARRAY_NAME, RUN_NAME]

# RPCs the service does not cause: the nodes' own traffic, submissions, sdiag itself.
BACKGROUND_RPCS = {"REQUEST_STATS_INFO", "MESSAGE_NODE_REGISTRATION_STATUS", "REQUEST_PING",
                   "MESSAGE_EPILOG_COMPLETE", "REQUEST_COMPLETE_BATCH_SCRIPT", "REQUEST_SUBMIT_BATCH_JOB",
                   "REQUEST_CANCEL_JOB_STEP", "REQUEST_KILL_JOB", "REQUEST_FED_INFO",
                   "REQUEST_COMPLETE_PROLOG", "REQUEST_NODE_REGISTRATION_STATUS"}


def log(msg: str) -> None:
    print(msg, flush=True)


# -- the queue --------------------------------------------------------------------------
@dataclass
class Queue:
    """What the bench submitted: job ids (an array is one id) and counts as Slurm counts them."""

    ids: list[int] = field(default_factory=list)
    jobs: int = 0  # every array task counts (MaxJobCount, squeue -r)
    records: int = 0  # squeue lines: a pending array is one
    submit_s: float = 0.0
    calls: int = 0
    errors: int = 0


def _weighted(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def plan(n: int, array_share: float, rng: random.Random) -> list[tuple[list[str], int]]:
    """``n`` more jobs as sbatch argument lists, each with the number of jobs it makes."""
    array_jobs = round(n * array_share)
    sizes: list[int] = []
    while array_jobs > 0:
        k = min(rng.randint(100, 1000), array_jobs)
        sizes.append(k)
        array_jobs -= k
    singles = n - sum(sizes)
    out: list[tuple[list[str], int]] = []
    for count in [1] * singles + sizes:
        user = rng.choices(list(USERS), weights=USER_WEIGHTS)[0]
        account = rng.choice(USERS[user])
        part = _weighted(rng, PARTITIONS)
        name = ARRAY_NAME if count > 1 else _weighted(rng, NAMES)
        kind = rng.random()
        if kind < 0.5:
            extra = ["--hold"]
        elif kind < 0.75 or part in SMALL_PARTITIONS:
            extra = ["--begin=now+7days"]  # waiting: reason BeginTime
        else:
            extra = ["-N", "64"]  # waiting for nodes that never respond: reason Resources
        if count > 1:
            extra.append(f"--array=0-{count - 1}")
        out.append(([f"--uid={user}", "-A", account, "-p", part, "-J", name, "-t", "60", *extra,
                     "--wrap", "sleep 60"], count))
    rng.shuffle(out)
    return out


_FAILURES: list[str] = []


def sbatch(env: dict[str, str], args: list[str]) -> int | None:
    argv = ["sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args]  # noqa: S108
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    if proc.returncode != 0:
        # e.g. a response timeout under load: slurmctld may have made the job all the same
        # (cancel_leftovers finds it by name at the end)
        _FAILURES.append(proc.stderr.strip())
        return None
    return int(proc.stdout.strip().split(";")[0])


def fill(queue: Queue, target: int, env: dict[str, str], *, array_share: float, workers: int,
         rng: random.Random) -> tuple[float, float]:
    """Submit until ``queue.jobs == target``; returns (sbatch calls/s, jobs/s) of this step."""
    todo = plan(target - queue.jobs, array_share, rng)
    if not todo:
        return float("nan"), float("nan")
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda item: (sbatch(env, item[0]), item[1]), todo))
    took = time.perf_counter() - t
    made = 0
    for job_id, count in results:
        if job_id is None:
            queue.errors += 1
            continue
        queue.ids.append(job_id)
        queue.jobs += count
        queue.records += 1
        made += count
    queue.submit_s += took
    queue.calls += len(todo)
    if queue.errors > max(10, queue.calls // 100):
        raise SystemExit(f"{queue.errors} of {queue.calls} sbatch calls failed: see the lab's slurmctld.log")
    return len(todo) / took, made / took


def submit_running(queue: Queue, env: dict[str, str]) -> None:
    """Eight 1-CPU jobs on n1-n4 (2 CPUs each) that run for the whole bench."""
    users = list(USERS)
    for i in range(8):
        user = users[i % len(users)]
        job = sbatch(env, [f"--uid={user}", "-A", USERS[user][0], "-p", "debug", "-w", f"n{i % 4 + 1}", "-n", "1",
                           "-J", RUN_NAME, "-t", "600", "--wrap", "sleep 36000"])
        if job is not None:
            queue.ids.append(job)
            queue.jobs += 1
            queue.records += 1


def cancel(ids: list[int], env: dict[str, str]) -> None:
    for i in range(0, len(ids), 2000):
        subprocess.run(["scancel", *map(str, ids[i:i + 2000])], capture_output=True, env=env, check=False,
                       timeout=600)


def bench_job_ids(env: dict[str, str], *, check: bool) -> list[int]:
    """The ids of the jobs of the bench's names in the lab's queue (an array's once)."""
    out = subprocess.run(["squeue", "-h", "-n", ",".join(ALL_NAMES), "-o", "%F"], capture_output=True,
                         text=True, env=env, check=check, timeout=120).stdout
    return sorted({int(x) for x in out.split() if x.isdigit()})


def cancel_leftovers(env: dict[str, str]) -> int:
    """Jobs an interrupted earlier run left (the bench's job names only)."""
    ids = bench_job_ids(env, check=False)
    cancel(ids, env)
    return len(ids)


def adopt_leftovers(queue: Queue, env: dict[str, str]) -> None:
    """``--keep-queue``: the jobs an earlier ``--keep-queue`` run left become this run's (its
    sizes count them; they stay queued at the end again)."""
    queue.ids = bench_job_ids(env, check=True)
    queue.jobs, queue.records = squeue_count(env, "-r"), squeue_count(env)


def squeue_count(env: dict[str, str], *flags: str) -> int:
    for attempt in range(3):
        done = subprocess.run(["squeue", "-h", *flags, "-n", ",".join(ALL_NAMES), "-o", "%i"], capture_output=True,
                              text=True, env=env, check=False, timeout=300)
        if done.returncode == 0:
            return len(done.stdout.splitlines())
        log(f"  squeue failed ({done.stderr.strip()[:200]}): again ({attempt + 2}/3)")
        time.sleep(5)
    raise SystemExit("squeue failed three times")


# -- processes ------------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def tree(pid: int) -> list[int]:
    kids = _children()
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 10_000:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _proc_mib(pids: list[int], file: str, field: str) -> float:
    """The sum over ``pids`` of one kB field of a /proc/<pid>/ file, in MiB (a process gone
    meanwhile counts nothing)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
                if line.startswith(field):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def rss_mib(pids: list[int]) -> float:
    return _proc_mib(pids, "status", "VmRSS:")


def own_processes(pids: list[int]) -> list[int]:
    """The service's own processes of a tree (serve, its refresh worker, the sensor ...): the
    Slurm commands it runs at the moment (squeue reading 80,000 records holds 130-180 MiB
    while it runs) left out."""
    own = []
    for pid in pids:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if not comm.startswith(("squeue", "sinfo", "scontrol", "sdiag", "sacct", "sprio", "sshare")):
            own.append(pid)
    return own


def pss_mib(pids: list[int]) -> float:
    """The tree's proportional set size: each shared page (the interpreter, libraries) counted
    once across the processes, where summed RSS counts it in each."""
    return _proc_mib(pids, "smaps_rollup", "Pss:")


def cpu_s(pids: list[int]) -> float:
    """utime+stime of each process plus its reaped children's (squeue, sinfo ...)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(x) for x in fields[11:15])
    return ticks / TICK


class RssSampler:
    """The peak summed RSS of a process tree, sampled every 0.2 s in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, rss_mib(tree(self.pid)))

    def __enter__(self) -> RssSampler:
        self.peak = rss_mib(tree(self.pid))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# -- slurmctld's view ---------------------------------------------------------------------
_RPC = re.compile(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", re.M)


def rpc_times(env: dict[str, str]) -> dict[str, tuple[int, int]]:
    """``{message type: (count, total µs)}`` from sdiag."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, env=env, check=True, timeout=60).stdout
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    return {m[1]: (int(m[2]), int(m[3])) for m in _RPC.finditer(section)}


def rpc_by_type(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """``{message type: (RPC count, controller µs)}`` added between two sdiag readings,
    background left out."""
    out = {}
    for name, (c, t) in after.items():
        if name in BACKGROUND_RPCS:
            continue
        c0, t0 = before.get(name, (0, 0))
        out[name] = (c - c0, t - t0)
    return out


def rpc_delta(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> tuple[int, float]:
    """(RPC count, controller seconds) added between two sdiag readings, background left out."""
    added = rpc_by_type(before, after).values()
    return sum(c for c, _t in added), sum(t for _c, t in added) / 1e6


# -- HTTP -----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_WRK_LAT = re.compile(r"^\s*(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.M)


@dataclass
class Load:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int


def wrk(url: str, headers: dict[str, str], clients: int, duration: float) -> Load:
    argv = ["wrk", "-t2", f"-c{clients}", f"-d{max(1, int(duration))}s", "--timeout", "30s", "--latency", url]
    for k, v in headers.items():
        argv += ["-H", f"{k}: {v}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=duration + 120).stdout
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    lat = {m[1]: float(m[2]) * unit[m[3]] for m in _WRK_LAT.finditer(out)}
    m = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", out)
    if m is None:
        raise RuntimeError(f"unexpected wrk output: {out}")
    secs = float(m[2]) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m[3]]
    errors = 0
    for pat in (r"Non-2xx or 3xx responses: (\d+)",
                r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"):
        e = re.search(pat, out)
        if e:
            errors += sum(int(x) for x in e.groups())
    return Load(int(m[1]) / secs, lat.get("50", float("nan")), lat.get("99", float("nan")), errors, int(m[1]))


def httpx_load(url: str, headers: dict[str, str], clients: int, duration: float, timeout: float) -> Load:
    """A closed loop of ``clients`` for big, slow bodies (slurmrestd): every request completes."""
    latencies: list[float] = []
    errors = 0

    async def main() -> float:
        nonlocal errors
        async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:
            end = time.perf_counter() + duration

            async def worker() -> None:
                nonlocal errors
                while not latencies or time.perf_counter() < end:
                    t = time.perf_counter()
                    try:
                        r = await http.get(url)
                        if r.status_code >= 400:
                            errors += 1
                    except httpx.HTTPError:
                        errors += 1
                    latencies.append(time.perf_counter() - t)
                    if len(latencies) > 100_000:
                        return

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(clients)))
            return time.perf_counter() - start

    secs = asyncio.run(main())
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 2 else [max(latencies)] * 99
    return Load(len(latencies) / secs, q[49] * 1000, q[98] * 1000, errors, len(latencies))


def body_size(url: str, headers: dict[str, str], timeout: float) -> tuple[int, int, float]:
    """(status, bytes on the wire, seconds) of one GET with ``Accept-Encoding: gzip``."""
    t = time.perf_counter()
    with httpx.stream("GET", url, headers={**headers, "Accept-Encoding": "gzip"}, timeout=timeout) as r:
        for _ in r.iter_raw():
            pass
        return r.status_code, r.num_bytes_downloaded, time.perf_counter() - t


# -- the service ------------------------------------------------------------------------
_ENTRY = "import sys; from slurmtower.cli import main; sys.argv[0] = 'slurmtower'; sys.exit(main())"


class Serve:
    """``slurmtower serve`` as users run it, against the lab (own state dir, own port)."""

    def __init__(self, cluster: DevCluster, state_dir: Path, *, access_log: bool, stripped: bool = False,
                 config: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(state_dir, 0o755)  # noqa: S103 - the sensor's notify program runs as SlurmUser
        env = cluster.command_env()
        env["SLURMTOWER_STATE_DIR"] = str(state_dir)
        if config is not None:  # another configuration than the cluster's (bench/clusters.py: [[clusters]])
            env["SLURMTOWER_CONFIG"] = str(config)
        if stripped:
            env.update({"SLURMTOWER_AUTH__ANONYMOUS_READ": "true", "SLURMTOWER_EVENTS__SENSOR_ENABLED": "false",
                        "SLURMTOWER_ARCHIVER__ARCHIVE_USAGE_LOAD": "false"})
        # The console script's entry point, started so that its command line does not read
        # "slurmtower serve": on a shared machine, other sessions stop such processes by name.
        argv = [sys.executable, "-c", _ENTRY, "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        if not access_log:
            argv.append("--no-access-log")
        self.log_path = state_dir / "serve.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,  # noqa: S603
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def first_fresh(self, headers: dict[str, str], timeout: float = 180) -> float:
        """Seconds from the start to the first /queue answer read in this run (not the kept
        snapshot of an earlier one, marked stale)."""
        end = self.started + timeout
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while time.perf_counter() < end:
                try:
                    r = http.get("/queue", params={"limit": 1}, headers=headers)
                    if r.status_code == 200 and r.json().get("stale") is False:
                        return time.perf_counter() - self.started
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        return float("nan")

    def wait_ready(self, headers: dict[str, str], timeout: float = 180,
                   more: Sequence[str] = ()) -> tuple[float, float]:
        """Seconds from the start to /ready 200 and to the first /queue 200 (then ``more``
        paths answer 200 too)."""
        ready = first_queue = float("nan")
        end = self.started + timeout
        with httpx.Client(base_url=self.url, timeout=30) as http:
            for path in ("/ready", "/queue", *more):
                while True:
                    if self.proc.poll() is not None:
                        raise SystemExit(f"slurmtower serve exited ({self.proc.returncode}): see {self.log_path}")
                    if time.perf_counter() > end:
                        raise SystemExit(f"slurmtower serve: no 200 from {path} in {timeout:g} s: {self.log_path}")
                    try:
                        if http.get(path, headers=headers).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)
                took = time.perf_counter() - self.started
                if path == "/ready":
                    ready = took
                elif path == "/queue":
                    first_queue = took
        return ready, first_queue

    def stop(self) -> None:
        if self._log.closed:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


class ServeDied(RuntimeError):
    """serve exited under the bench (a SIGTERM from outside, on a shared machine): measure again."""


@contextmanager
def serving(cluster: DevCluster, state_dir: Path, **kw: bool) -> Iterator[Serve]:
    shutil.rmtree(state_dir, ignore_errors=True)
    serve = Serve(cluster, state_dir, **kw)
    try:
        yield serve
    except BaseException as exc:
        exited = serve.proc.poll()
        if exited is None and isinstance(exc, httpx.HTTPError):
            try:  # a reset connection: serve may be shutting down on a signal from outside
                exited = serve.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        serve.stop()
        kept = Path(f"/tmp/slurmtower-scale-serve-{os.getpid()}.log")  # noqa: S108
        shutil.copyfile(serve.log_path, kept)
        tail = kept.read_text(errors="replace").splitlines()[-15:]
        log(f"slurmtower serve {'exited ' + str(exited) if exited is not None else 'was running'}; "
            f"its log: {kept}\n" + "\n".join(tail))
        if exited is not None:
            raise ServeDied(f"slurmtower serve exited ({exited}) during the measurement") from None
        raise
    finally:
        serve.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


def poll_window(serve: Serve, headers: dict[str, str], env: dict[str, str], window: float,
                profile: str = "", every: float = 1.5) -> dict[str, Any]:
    """One client on /queue?limit=100 every ``every`` s from the service's first answer on:
    CPU, RSS, the state and data ages, and controller time."""
    ages: list[float] = []
    state_ages: list[float] = []
    statuses: list[int] = []
    pids = tree(serve.proc.pid)
    rpc0 = rpc_times(env)
    cpu0, t0 = cpu_s(pids), time.perf_counter()
    with RssSampler(serve.proc.pid) as rss, httpx.Client(base_url=serve.url, timeout=30, headers=headers) as http, \
            Profile(serve, profile, window, bool(profile)):
        for i in range(max(1, int(window / every))):
            r = http.get("/queue", params={"limit": 100})
            statuses.append(r.status_code)
            if "x-data-age" in r.headers:
                ages.append(float(r.headers["x-data-age"]))
                state_ages.append(float(r.headers.get("x-state-age", r.headers["x-data-age"])))
            time.sleep(max(0.0, t0 + every * (i + 1) - time.perf_counter()))
        cpu1, t1 = cpu_s(tree(serve.proc.pid)), time.perf_counter()
        pids_now = tree(serve.proc.pid)
        own = own_processes(pids_now)
        rss_now, pss_now, own_now = rss_mib(pids_now), pss_mib(pids_now), rss_mib(own)
        slurm_children = len(pids_now) - len(own)
        scrape = http.get("/metrics").text
    rpc1 = rpc_times(env)
    rpcs, ctld_s = rpc_delta(rpc0, rpc1)
    wall = t1 - t0
    by_type = sorted(((us, n) for n, (_c, us) in rpc_by_type(rpc0, rpc1).items()), reverse=True)
    reads = rpc1.get("REQUEST_JOB_INFO", (0, 0))[0] - rpc0.get("REQUEST_JOB_INFO", (0, 0))[0]
    read_us = rpc1.get("REQUEST_JOB_INFO", (0, 0))[1] - rpc0.get("REQUEST_JOB_INFO", (0, 0))[1]
    return {
        "job_reads": float(reads),
        "job_read_ms": read_us / 1000 / reads if reads else float("nan"),
        "wall": wall,
        "cpu_pct": 100 * (cpu1 - cpu0) / wall,
        "rss_mib": rss_now,
        "pss_mib": pss_now,
        "own_rss_mib": own_now,
        "slurm_children": float(slurm_children),
        "rss_peak_mib": rss.peak,
        "age_p50": statistics.median(ages) if ages else float("nan"),
        "age_max": max(ages) if ages else float("nan"),
        "state_p50": statistics.median(state_ages) if state_ages else float("nan"),
        "state_max": max(state_ages) if state_ages else float("nan"),
        "state_reads": float(rpc1.get("REQUEST_JOB_STATE", (0, 0))[0] - rpc0.get("REQUEST_JOB_STATE", (0, 0))[0]),
        "bad_status": float(sum(1 for s in statuses if s != 200)),
        "ctld_pct": 100 * ctld_s / wall,
        "ctld_top": ", ".join(f"{n.removeprefix('REQUEST_')} {us / 1000:,.0f}" for us, n in by_type[:3] if us > 0),
        "rpcs_per_s": rpcs / wall,
        "adapted": adapted_interval(scrape),
    }


def adapted_interval(scrape: str) -> str:
    """The refresh interval in force at the window's end and what set it: each resource's CPU
    and slurmctld seconds per round (moving averages), from the service's /metrics."""
    def gauge(name: str) -> dict[str, float]:
        return {m[1] or "": float(m[2]) for m in re.finditer(
            rf'^{name}(?:{{resource="([^"]*)"}})? (\S+)$', scrape, re.M)}
    interval = gauge("slurmtower_refresh_interval_seconds").get("")
    if interval is None:
        return "n/a (no refresh gauges in /metrics)"
    cpu, ctld = gauge("slurmtower_refresh_cpu_seconds"), gauge("slurmtower_refresh_controller_seconds")
    per = ", ".join(f"{r} {cpu.get(r, 0):.2f} / {ctld.get(r, 0):.3f}" for r in sorted(set(cpu) | set(ctld))
                    if cpu.get(r, 0) or ctld.get(r, 0))
    states = gauge("slurmtower_state_refresh_interval_seconds").get("")
    poll = gauge("slurmtower_sensor_poll_interval_seconds").get("")
    poll_s = gauge("slurmtower_sensor_poll_controller_seconds").get("")
    paced = (f"; state reads every {states:.1f} s" if states is not None else "") + (
        f"; sensor polls every {poll:.1f} s, {1000 * (poll_s or 0):.0f} ms each" if poll is not None else "")
    return f"{interval:.1f} s; per round, CPU s / slurmctld s: {per}{paced}"


@dataclass
class Route:
    label: str
    path: str


def routes_for(nodes: int) -> list[Route]:
    return [
        Route("/queue?limit=100", "/queue?limit=100"),
        Route("/queue?user=alice", "/queue?user=alice"),
        Route("/queue?partition=gpu", "/queue?partition=gpu"),
        Route("/queue?state=PENDING", "/queue?state=PENDING"),
        Route("/queue?name=sb-md-relax", "/queue?name=sb-md-relax"),
        Route("/nodes?state=idle", "/nodes?state=idle"),
        Route("/nodes?partition=gpu", "/nodes?partition=gpu"),
    ]


def route_p99(serve: Serve, route: Route, headers: dict[str, str], clients: int, duration: float,
              profile: str = "") -> str:
    status, _size, _secs = body_size(serve.url + route.path, headers, 60)
    if status >= 400:
        return f"n/a (status {status})"
    # as HTTP clients do (httpx, requests, browsers): a 5,000-node list is 4 MB uncompressed
    with Profile(serve, profile, duration, bool(profile)):
        load = wrk(serve.url + route.path, {**headers, "Accept-Encoding": "gzip"}, clients, duration)
    if not load.requests:
        return f"n/a (no answer in {duration:g} s)"
    err = f", {load.errors} errors" if load.errors else ""
    return f"{load.p99_ms:.1f} ms ({load.rps:,.0f}/s{err})"


# -- where the time goes ----------------------------------------------------------------
PROFILES: list[str] = []


class Profile:
    """py-spy sampling the service's processes (serve and its refresh worker, each with a
    py-spy of its own) while a load runs.

    ``--profile``: the samples of non-idle threads, summarised per process as the functions
    with the most samples at the top of the stack (self) and the project's own functions with
    the most samples anywhere on it (inclusive), written below the table.
    """

    def __init__(self, serve: Serve, what: str, seconds: float, enabled: bool) -> None:
        self.what = what
        self.spies: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
        if not enabled:
            return
        spy = Path(sys.executable).with_name("py-spy")
        if not spy.exists():
            raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
        for pid in tree(serve.proc.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            name = "refresh worker" if "spawn_main" in argv else "serve" if pid == serve.proc.pid else None
            if name is None:
                continue  # the resource tracker, Slurm commands of the moment
            out = serve.log_path.with_name(f"profile-{len(PROFILES)}-{pid}.txt")
            self.spies.append((name, out, subprocess.Popen(  # noqa: S603
                [str(spy), "record", "--nonblocking", "-r", "97", "-d", str(int(seconds) + 1), "-f", "raw",
                 "-o", str(out), "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.spies:
            return
        raws: dict[str, str] = {}
        for name, out, proc in self.spies:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if out.exists():
                raws[name] = out.read_text(errors="replace")
        if raws:
            PROFILES.append(summarise_profile(self.what, raws))


def summarise_profile(what: str, raws: dict[str, str], top: int = 8) -> str:
    """Per process: the functions at the top of the stack most often (self), and slurmtower's
    own functions anywhere on it (inclusive), as shares of the process's samples."""
    def fn(frame: str) -> str:
        name, _, where = frame.partition(" (")
        return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else name

    out = [f"**{what}**", ""]
    for name, raw in raws.items():
        total, own, incl = 0, dict[str, int](), dict[str, int]()
        for line in raw.splitlines():
            stack, _, n = line.rpartition(" ")
            if not stack or not n.isdigit():
                continue
            frames = [f for f in stack.split(";") if " (" in f]
            if not frames:
                continue
            total += int(n)
            leaf = fn(frames[-1])
            own[leaf] = own.get(leaf, 0) + int(n)
            for f in {fn(f) for f in frames if "slurmtower/" in f}:
                incl[f] = incl.get(f, 0) + int(n)
        if not total:
            out.append(f"- {name}: no samples (idle)")
            continue
        out.append(f"- {name}: {total:,} samples (97/s, non-idle threads)")
        out.append("  - self: " + "; ".join(
            f"{k} {100 * v / total:.0f} %" for k, v in sorted(own.items(), key=lambda kv: -kv[1])[:top]))
        out.append("  - inclusive (slurmtower): " + "; ".join(
            f"{k} {100 * v / total:.0f} %" for k, v in sorted(incl.items(), key=lambda kv: -kv[1])[:top]))
    return "\n".join(out) + "\n"


# -- the drain ------------------------------------------------------------------------
def drain_events(serve: Serve, headers: dict[str, str], env: dict[str, str], nodes: NodeSet,
                 within: float = 5.0) -> tuple[int, float, int]:
    """Drain ``nodes`` in one scontrol call; (events within ``within`` s, time of the last, total by 15 s)."""
    start = datetime.now(UTC).isoformat()
    wanted = set(nodes)
    seen: dict[str, float] = {}
    last_id: int | None = None
    t0 = time.perf_counter()
    subprocess.run(["scontrol", "update", f"nodename={nodes}", "state=drain", "reason=scale-bench"],
                   capture_output=True, env=env, check=True, timeout=60)
    with httpx.Client(base_url=serve.url, headers=headers, timeout=30) as http:
        while time.perf_counter() - t0 < 15 and len(seen) < len(wanted):
            params: dict[str, str | int] = {"type": "slurm.node.state", "start": start, "limit": 1000}
            if last_id is not None:
                params["since"] = last_id
            r = http.get("/events", params=params)
            if r.status_code != 200:
                raise RuntimeError(f"/events answered {r.status_code}: {r.text[:200]}")
            page = r.json()
            now = time.perf_counter() - t0
            for event in page:
                last_id = max(last_id or 0, int(event["id"]))
                if event.get("node") in wanted:
                    seen.setdefault(event["node"], now)
            if len(page) < 1000:
                time.sleep(0.1)
    in_time = [t for t in seen.values() if t <= within]
    return len(in_time), max(in_time, default=float("nan")), len(seen)


def resume(nodes: NodeSet, env: dict[str, str]) -> None:
    """Clear the drain (22.05's RESUME refuses never-registered nodes but clears it; UNDRAIN too)."""
    for state in ("resume", "undrain"):
        subprocess.run(["scontrol", "update", f"nodename={nodes}", f"state={state}"], capture_output=True, env=env,
                       check=False, timeout=60)
    for _ in range(100):
        out = subprocess.run(["sinfo", "-h", "-n", str(nodes), "-t", "drain,drained,draining", "-o", "%N"],
                             capture_output=True, text=True, env=env, check=False, timeout=60).stdout
        if not out.strip():
            return
        time.sleep(0.2)
    log(f"warning: {out.strip()} still drained")


_SDIAG_GAUGE = re.compile(r"^(Server thread count|Agent queue size|Agent count|Agent thread count):\s+(\d+)", re.M)


def settle(nodes: NodeSet, env: dict[str, str], *, after: float = 25.0, still: float = 10.0,
           most: float = 300.0) -> tuple[float, dict[str, int]]:
    """Wait until slurmctld is done with ``nodes`` (drained and resumed by the run before):
    at least ``after`` s (22.05 turns a resumed never-registered node down* 20 s later),
    then for ``still`` s their states unchanged and slurmctld idle (sdiag: no agent queued
    or running, at most 3 server threads), at most ``most`` s. Without a wait, in a first
    try of --runs 3, the runs after the first counted 76-149 % of wall in slurmctld's RPCs
    (22.05: full queue reads of 2.3-3.8 s, not 0.3 s) and a squeue right after the node
    states settled failed. On the 5,000-node lab slurmctld's agent stays busy (1-2 agents,
    12-18 threads: the nodes have no slurmd) and the wait ends at ``most``; the runs after
    it measured as the first did (bench/results/scale-2026-12-07-5k-nodes-runs.md).
    Returns the wait and the most of each sdiag gauge seen meanwhile."""
    t0 = time.monotonic()
    last, since = "", t0
    peak: dict[str, int] = {}
    gauges: dict[str, int] = {}
    while time.monotonic() - t0 < most:
        now = subprocess.run(["sinfo", "-h", "-N", "-n", str(nodes), "-o", "%N %T"], capture_output=True, text=True,
                             env=env, check=False, timeout=60).stdout
        diag = subprocess.run(["sdiag"], capture_output=True, text=True, env=env, check=False, timeout=60)
        gauges = {m[1]: int(m[2]) for m in _SDIAG_GAUGE.finditer(diag.stdout)}
        for name, value in gauges.items():
            peak[name] = max(peak.get(name, 0), value)
        quiet = (diag.returncode == 0 and len(gauges) == 4 and gauges["Server thread count"] <= 3
                 and gauges["Agent queue size"] == gauges["Agent count"] == gauges["Agent thread count"] == 0)
        if now != last or not quiet:
            last, since = now, time.monotonic()
        elif time.monotonic() - t0 >= after and time.monotonic() - since >= still:
            return time.monotonic() - t0, peak
        time.sleep(2)
    log(f"  warning: slurmctld not quiet {most:.0f} s after {nodes} were resumed (sdiag: {gauges})")
    return time.monotonic() - t0, peak


# -- the run ----------------------------------------------------------------------------
def rest_headers(settings_file: Path) -> dict[str, str]:
    settings = load_settings(settings_file, environ={})
    headers = {"X-SLURM-USER-NAME": settings.slurm.rest_user}
    if settings.slurm.rest_jwt_key_file is None:
        raise SystemExit("the lab's slurmtower.toml names no rest_jwt_key_file")
    now = int(time.time())
    key = settings.slurm.rest_jwt_key_file.read_bytes()
    headers["X-SLURM-USER-TOKEN"] = jwt.encode({"iat": now, "exp": now + 6 * 3600, "sun": settings.slurm.rest_user},
                                               key, "HS256")
    return headers


def fmt_ratio(a: float, b: float) -> str:
    return f"x{a / b:,.0f}" if b else "n/a"


#: What each read of the service costs slurmctld: (label, argv, the RPC it makes).
READS = (
    ("full queue", ["squeue", "-h", "--states=all", "-O", queue_format()], "REQUEST_JOB_INFO"),
    ("job states", ["squeue", "--only-job-state", "-h", "--states=all", "-O", "JobID,State"], "REQUEST_JOB_STATE"),
    ("node states", ["sinfo", "-h", "--all", "-O", state_format()], "REQUEST_NODE_INFO"),
    ("nodes", ["scontrol", "-o", "show", "node"], "REQUEST_NODE_INFO"),
)


def read_costs(env: dict[str, str], repeat: int = 3) -> str:
    """slurmctld's ms per RPC of each of :data:`READS` (sdiag's total time around ``repeat``
    runs of it; the service is not running meanwhile), "-" where the release has no such read."""
    shown = []
    for _label, argv, rpc in READS:
        before = rpc_times(env)
        ok = all(subprocess.run(argv, capture_output=True, env=env, check=False, timeout=600).returncode == 0
                 for _ in range(repeat))
        after = rpc_times(env)
        n = after.get(rpc, (0, 0))[0] - before.get(rpc, (0, 0))[0]
        us = after.get(rpc, (0, 0))[1] - before.get(rpc, (0, 0))[1]
        shown.append(f"{us / 1000 / n:,.1f}" if ok and n else "-")
    return " / ".join(shown)


#: Per column: the figures the targets are checked on (issue 43).
TARGETS: dict[str, dict[str, float]] = {}


def measure_size(cluster: DevCluster, queue: Queue, args: argparse.Namespace, reader: dict[str, str],
                 rest: dict[str, str], drain_set: NodeSet, column_key: str = "") -> dict[str, str]:
    env = cluster.command_env()
    col: dict[str, str] = {}
    col["jobs / records (squeue -r / squeue)"] = (f"{squeue_count(env, '-r'):,} / {squeue_count(env):,}")
    interval = load_settings(cluster.tower_conf, environ={}).api.refresh_interval
    state_dir = cluster.root / "bench-serve"
    col["slurmctld ms per read (sdiag): full queue / job states / node states (sinfo) / nodes (scontrol)"] = \
        read_costs(env)
    with serving(cluster, state_dir, access_log=args.access_log) as serve:
        ready, first = serve.wait_ready(reader)
        fresh = serve.first_fresh(reader)
        col["start-up: /ready, first /queue 200, first fresh /queue (s)"] = f"{ready:.2f}, {first:.2f}, {fresh:.2f}"
        w = poll_window(serve, reader, env, args.window,
                        f"{queue.jobs:,} jobs: one poller, {args.window:g} s" if args.profile else "",
                        every=args.poll_every)
        col[f"X-State-Age p50 / max (s; one poller every {args.poll_every:g} s)"] = (
            f"{w['state_p50']:.1f} / {w['state_max']:.1f}")
        col["job state reads in that window: every ... s (REQUEST_JOB_STATE)"] = (
            f"{w['wall'] / w['state_reads']:.1f} s" if w["state_reads"] else "none (no such read on this release)")
        col["RSS of the service's processes (MiB, idle / peak)"] = f"{w['rss_mib']:.0f} / {w['rss_peak_mib']:.0f}"
        col["PSS of the service's processes, idle (MiB: shared pages counted once)"] = f"{w['pss_mib']:.0f}"
        col["RSS idle without the Slurm commands it runs at that moment (MiB)"] = (
            f"{w['own_rss_mib']:.0f} ({w['slurm_children']:.0f} running then)")
        col["refresh CPU, one poller (% of a core)"] = f"{w['cpu_pct']:.1f}"
        col[f"X-Data-Age p50 / max (s; interval {interval:g} s)"] = (
            f"{w['age_p50']:.1f} / {w['age_max']:.1f} (x{w['age_max'] / interval:.1f})")
        TARGETS.setdefault(column_key, {}).update(w)
        TARGETS[column_key]["fresh"] = fresh
        col["slurmctld time in RPCs, one poller (% of wall)"] = f"{w['ctld_pct']:.2f} ({w['rpcs_per_s']:.2f} RPC/s)"
        col["slurmctld ms in that window by message type (the three most; sdiag, lock waits included)"] = (
            w["ctld_top"] or "none")
        col["queue reads in that window: every ... s, slurmctld ms each (REQUEST_JOB_INFO)"] = (
            f"{w['wall'] / w['job_reads']:.1f} s, {w['job_read_ms']:,.0f} ms" if w["job_reads"] else "none")
        col["refresh interval in force at the window's end (api.refresh_cpu_share, refresh_controller_share)"] = (
            w["adapted"])
        p99s = []
        for route in routes_for(cluster.node_count):
            log(f"  wrk {route.label} ...")
            col[f"p99 {route.label}, {args.clients} clients"] = shown = route_p99(
                serve, route, reader, args.clients, args.duration,
                f"{queue.jobs:,} jobs: {route.label}, {args.clients} clients" if args.profile else "")
            p99s.append(float(shown.split()[0].replace(",", "")) if shown[0].isdigit() else float("inf"))
        TARGETS[column_key]["p99_max"] = max(p99s, default=float("nan"))
        # the full lists against slurmrestd (its /jobs past --rest-max-jobs would hold more
        # memory than the machine has: 8 GiB at 50,000 jobs)
        api = rest_api(cluster)
        lists = [("/queue", f"/slurm/{api}/jobs"), ("/nodes", f"/slurm/{api}/nodes")]
        if queue.jobs > args.rest_max_jobs:
            lists = lists[1:]
            col["full /queue on the wire (gzip) vs slurmrestd"] = (
                f"slurmrestd not asked past {args.rest_max_jobs:,} jobs (--rest-max-jobs)")
        with RssSampler(serve.proc.pid) as rss_t:
            for full, rest_path in lists:
                status_t, size_t, _ = body_size(serve.url + full, reader, 120)
                status_r, size_r, secs_r = body_size(cluster_rest(cluster) + rest_path, rest, 600)
                col[f"full {full} on the wire (gzip) vs slurmrestd"] = (
                    f"{size_t / 1024:,.0f} KiB vs {size_r / 1024:,.0f} KiB ({fmt_ratio(size_r, size_t)} smaller)"
                    if status_t == 200 and status_r == 200 else f"n/a (status {status_t} / {status_r})")
                if status_t != 200 or status_r != 200:
                    continue
                log(f"  full {full}: wrk {args.clients} clients, slurmrestd {args.rest_clients} ...")
                t_load = wrk(serve.url + full, {**reader, "Accept-Encoding": "gzip"}, args.clients, args.duration)
                rest_pid = rest_pid_of(cluster)
                rpc0 = rpc_times(env)
                with RssSampler(rest_pid) as rss_r:
                    r_load = httpx_load(cluster_rest(cluster) + rest_path, rest, args.rest_clients,
                                        max(args.duration, 2 * secs_r), 600)
                n_rpc, ctld_s = rpc_delta(rpc0, rpc_times(env))
                col[f"full {full} req/s: slurmtower vs slurmrestd"] = (
                    f"{t_load.rps:,.0f} vs {r_load.rps:.3g} ({fmt_ratio(t_load.rps, r_load.rps)}); "
                    f"p99 {t_load.p99_ms:,.0f} vs {r_load.p99_ms:,.0f} ms")
                col[f"slurmrestd {rest_path.rsplit('/', 1)[1]}: RSS peak, controller ms/request"] = (
                    f"{rss_r.peak:,.0f} MiB, {1000 * ctld_s / max(1, r_load.requests):,.1f} ms "
                    f"({n_rpc / max(1, r_load.requests):.1f} RPC/request)")
        col["RSS of the service's processes, peak under load (MiB)"] = f"{max(rss_t.peak, w['rss_peak_mib']):.0f}"
        TARGETS[column_key]["rss_load"] = max(rss_t.peak, w["rss_peak_mib"])
        count, last, total = drain_events(serve, reader, env, drain_set)
        TARGETS[column_key]["drain_last"] = last if count == len(drain_set) else float("inf")
        resume(drain_set, env)
        col[f"drain of {len(drain_set):,} nodes: events within 5 s"] = (
            f"{count:,} (last at {last:.2f} s; {total:,} by 15 s)")
        # A restart on the same state: the snapshots the run above kept (api.keep_snapshots_interval)
        # are served at once, marked stale, until the first read of Slurm (live/keep.py).
        serve.stop()
        kept = sorted(p.name for p in (state_dir / "snapshots").glob("*.snap"))
        again = Serve(cluster, state_dir, access_log=args.access_log)
        try:
            ready, first = again.wait_ready(reader)
            fresh = again.first_fresh(reader)
            col["restart with kept snapshots: /ready, first /queue 200, first fresh /queue (s)"] = (
                f"{ready:.2f}, {first:.2f}, {fresh:.2f} (kept: {', '.join(kept) or 'none'})")
            TARGETS[column_key]["fresh_restart"] = fresh
        finally:
            again.stop()
    if args.stripped:
        with serving(cluster, state_dir, access_log=False, stripped=True) as serve:
            ready, first = serve.wait_ready({})
            w = poll_window(serve, {}, env, args.window)
            p99 = route_p99(serve, Route("/queue?limit=100", "/queue?limit=100"), {}, args.clients, args.duration)
            col["stripped (anonymous, no sensor/archiver/access log): CPU %, RSS MiB, p99 limit=100"] = (
                f"{w['cpu_pct']:.1f}, {w['rss_mib']:.0f}, {p99}")
    return col


def rest_api(cluster: DevCluster) -> str:
    """The newest slurmrestd API version the lab's release offers (v0.0.38 on 22.05, v0.0.45 on 26.05)."""
    from slurmtower.slurm import RestSlurmClient

    rest = RestSlurmClient(cluster_rest(cluster), user="root", jwt_key_file=cluster.jwt_key)
    try:
        return rest.capabilities().rest_api_versions[-1]
    finally:
        rest.close()


def cluster_rest(cluster: DevCluster) -> str:
    return f"http://127.0.0.1:{cluster.rest_port}"


def rest_pid_of(cluster: DevCluster) -> int:
    pid = cluster.status()["daemons"]
    assert isinstance(pid, dict)
    value = pid.get("slurmrestd")
    if not isinstance(value, int):
        raise SystemExit("the lab's slurmrestd is not running")
    return value


def table(columns: dict[str, dict[str, str]], header: list[str]) -> str:
    rows: list[str] = []
    for col in columns.values():
        rows += [k for k in col if k not in rows]
    keys = list(columns)
    out = [*header, "", "| figure | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    out += ["| " + row + " | " + " | ".join(columns[k].get(row, "") for k in keys) + " |" for row in rows]
    return "\n".join(out) + "\n"


CHECKS = (("job-state age p50 <= 2 s", "state_p50", 2.0), ("job-state age max <= 4 s", "state_max", 4.0),
          ("full-record age max <= 15 s", "age_max", 15.0), ("first fresh answer <= 5 s", "fresh", 5.0),
          ("first fresh answer, restart with kept snapshots <= 5 s", "fresh_restart", 5.0),
          ("slurmctld time in slurmtower's RPCs <= 5 %", "ctld_pct", 5.0),
          ("RSS <= 450 MiB under 50 clients", "rss_load", 450.0), ("filters p99 <= 50 ms", "p99_max", 50.0),
          ("drain -> every event <= 2 s", "drain_last", 2.0))
"""Issue 43's targets: (label, figure, limit); every figure is better lower."""


def verdicts() -> list[str]:
    """Issue 43's targets against each column's figures: met or missed, by how much; with
    several runs of a size (--runs), their median and worst beside."""
    out = ["", "## Targets (issue 43)", "", "| target | " + " | ".join(TARGETS) + " |",
           "|---|" + "---|" * len(TARGETS)]
    for label, key, limit in CHECKS:
        cells = []
        for figures in TARGETS.values():
            value = figures.get(key, float("nan"))
            cells.append("n/a" if math.isnan(value) else
                         f"{value:,.2f} {'met' if value <= limit else 'MISSED'}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    runs: dict[str, list[dict[str, float]]] = {}
    for name, figures in TARGETS.items():
        runs.setdefault(name.split(" #")[0], []).append(figures)
    several = {name: figs for name, figs in runs.items() if len(figs) > 1}
    if several:
        out += ["", "### Median and worst of the runs", "",
                "| target | " + " | ".join(f"{name} ({len(figs)} runs): median / worst"
                                          for name, figs in several.items()) + " |",
                "|---|" + "---|" * len(several)]
        for label, key, limit in CHECKS:
            cells = []
            for figs in several.values():
                values = [v for f in figs if not math.isnan(v := f.get(key, float("nan")))]
                if not values:
                    cells.append("n/a")
                    continue
                mid, worst = statistics.median(values), max(values)
                verdict = "met" if worst <= limit else "median met, worst MISSED" if mid <= limit else "MISSED"
                cells.append(f"{mid:,.2f} / {worst:,.2f} ({verdict})")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def run_release(args: argparse.Namespace, prefix: Path | None, sizes: list[int], columns: dict[str, dict[str, str]],
                header: list[str]) -> Queue:
    """Every size on the lab of one release (``prefix``; None: Debian's 22.05): the lab brought
    up (or reused), filled, measured, emptied and stopped as found."""
    lab_dir, lab_name = LAB_DIR, LAB_NAME
    if prefix is not None:
        found = [i for i in find_slurm_installs({'SLURMTOWER_TEST_SLURM_PREFIXES': str(prefix)})
                 if i.prefix == prefix.resolve()]
        if not found:
            raise SystemExit(f"--slurm-prefix {prefix}: no Slurm install there (make slurm-releases)")
        lab_dir, lab_name = LAB_DIR.with_name(f"scalelab-{found[0].tag}"), f"scale{found[0].tag}"
    earlier = DevCluster(root=lab_dir, cluster_name=lab_name, slurm_prefix=prefix)
    was_nodes = earlier.node_count
    if earlier.is_up() and lab_port_base(was_nodes) != lab_port_base(args.nodes):
        earlier.down()  # its ports move: stop it first
    cluster = DevCluster(root=lab_dir, cluster_name=lab_name, port_base=lab_port_base(args.nodes), nodes=args.nodes,
                         slurm_prefix=prefix, log=lambda m: log(f"  {m}"))
    was_up = cluster.is_up()
    log(f"scale lab: {args.nodes} nodes in {lab_dir} ({'reused' if was_up else 'starting it'})")
    took = cluster.up()
    env = cluster.command_env()
    queue = Queue()
    if args.keep_queue:
        adopt_leftovers(queue, env)
        log(f"  --keep-queue: {queue.jobs:,} jobs in {queue.records:,} records an earlier run left are this run's")
    else:
        leftovers = cancel_leftovers(env)
        if leftovers:
            log(f"  cancelled {leftovers} jobs an earlier run left")
    tokens = cluster.demo_tokens()
    reader = {"Authorization": f"Bearer {tokens['reader']}"}
    rest = rest_headers(cluster.tower_conf)
    # --drain nodes without slurmd per size, a fresh set each time (all of them in a smaller lab):
    # 22.05 turns a drained and resumed never-registered node down* 20 s later
    span = args.drain or max(1000, args.nodes // 5)
    drain_sets = [NodeSet(f"n[{a}-{a + span - 1}]") for a in range(span + 1, args.nodes - span + 2, span)] or [
        NodeSet(f"n[5-{min(args.nodes, span + 4)}]")]
    drained = NodeSet()

    rng = random.Random(10)  # noqa: S311 - a reproducible queue, not a secret
    release = subprocess.run(["sinfo", "-V"], capture_output=True, text=True, env=env, check=True,
                             timeout=60).stdout.split()[1]
    header.append(f"Slurm {release} ({prefix or 'Debian'}): {args.nodes:,} nodes in {lab_dir}, up in {took:.1f} s.")
    try:
        running = subprocess.run(["squeue", "-h", "-n", RUN_NAME, "-t", "running", "-o", "%i"], capture_output=True,
                                 text=True, env=env, check=True, timeout=60).stdout.split()
        if not running:
            submit_running(queue, env)
        for step, size in enumerate(sizes):
            log(f"filling the queue to {size:,} jobs ...")
            calls_rate, jobs_rate = fill(queue, size, env, array_share=args.array_share,
                                         workers=args.submit_workers, rng=rng)
            log(f"  {queue.jobs:,} jobs in {queue.records:,} records; this step {calls_rate:,.0f} sbatch/s, "
                f"{jobs_rate:,.0f} jobs/s")
            for run in range(args.runs):
                if run > 0:  # the run before drained and resumed a set: its states settle first
                    before = drain_sets[(step * args.runs + run - 1) % len(drain_sets)]
                    waited, peak = settle(before, env)
                    log(f"  waited {waited:.0f} s for {before} and slurmctld to settle (sdiag's most: {peak})")
                # each run on the same queue drains a set of its own (see drain_sets above)
                drain_set = drain_sets[(step * args.runs + run) % len(drain_sets)]
                drained = drained | drain_set
                key = f"{release} {size:,}" + (f" #{run + 1}" if args.runs > 1 else "")
                log(f"measuring at {size:,} jobs{f' (run {run + 1} of {args.runs})' if args.runs > 1 else ''} ...")
                for attempt in range(1, 4):
                    try:
                        col = measure_size(cluster, queue, args, reader, rest, drain_set, key)
                        break
                    except ServeDied as exc:
                        if attempt == 3:
                            raise
                        log(f"  {exc}: measuring again ({attempt + 1}/3)")
                        resume(drain_set, env)
                if run == 0 and not math.isnan(calls_rate):  # nan: nothing submitted (--keep-queue)
                    col["submit rate this step (sbatch calls/s, jobs/s)"] = f"{calls_rate:,.0f}, {jobs_rate:,.0f}"
                columns[key] = col
                log(json.dumps(col, indent=1))
    finally:
        if args.keep_queue:
            log(f"--keep-queue: {queue.jobs:,} jobs left queued for the next run (a run without it cancels them)")
        else:
            log(f"cleaning up: cancelling {len(queue.ids):,} job ids ...")
            cancel(queue.ids, env)
        if _FAILURES:
            log(f"  {len(_FAILURES)} sbatch calls failed, the first with: {_FAILURES[0]}")
        leftovers = 0 if args.keep_queue else cancel_leftovers(env)  # an sbatch that reported a failure
        if leftovers:
            log(f"  cancelled {leftovers} more jobs of the bench's names")
        if drained:
            resume(drained, env)
            if was_up:
                log(f"  {drained} back to unknown*: slurmctld restarted without its node states")
                cluster.reset_node_states()
        if not was_up and args.keep_queue:
            log(f"--keep-queue: the lab stays up (devcluster down --dir {lab_dir} stops it)")
        elif not was_up:
            cluster.down()
            cluster.forget_node_states()
        elif was_nodes != args.nodes:
            log(f"  the lab had {was_nodes} nodes: bringing it back")
            DevCluster(root=lab_dir, cluster_name=lab_name, port_base=lab_port_base(was_nodes), nodes=was_nodes,
                       slurm_prefix=prefix, log=lambda m: log(f"  {m}")).up()
    return queue


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--drain", type=int, default=0,
                    help="nodes drained at once per size (default: a fifth of the lab, at least 1,000)")
    ap.add_argument("--sizes", default="1000,10000,50000,100000", help="queue sizes (jobs), ascending")
    ap.add_argument("--quick", action="store_true", help="sizes 1000,5000, 5 s per route, a 10 s window")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of wrk per route")
    ap.add_argument("--window", type=float, default=30.0, help="seconds of the one-poller window")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rest-clients", type=int, default=1, help="concurrent slurmrestd /jobs requests")
    ap.add_argument("--rest-max-jobs", type=int, default=100_000,
                    help="past this queue size slurmrestd's /jobs is not asked (its memory grows past the machine's)")
    ap.add_argument("--array-share", type=float, default=0.2, help="share of the jobs in arrays (100-1,000 tasks)")
    ap.add_argument("--submit-workers", type=int, default=4, help="parallel sbatch processes")
    ap.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True,
                    help="serve's access log (on by default, as users run it)")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy the service during the poller window and each route (below the table)")
    ap.add_argument("--keep-queue", action="store_true",
                    help="leave the submitted jobs queued at the end, and start from those an earlier "
                         "--keep-queue run left (measure again without refilling; a run without it cancels them)")
    ap.add_argument("--out", default="", help="results file name under bench/results/ (default: by date)")
    ap.add_argument("--stripped", action="store_true", help="an extra row: anonymous, sensor and archiver off")
    ap.add_argument("--slurm-prefix", action="append", default=[],
                    help="run on the Slurm installed there (e.g. /opt/slurm-26.05; 'debian' for Debian's 22.05); "
                         "repeat it to run the releases one after the other, their columns side by side")
    ap.add_argument("--poll-every", type=float, default=1.5, help="seconds between the one poller's requests")
    ap.add_argument("--runs", type=int, default=1,
                    help="measure each size this many times on the same queue (a column each, then the "
                         "targets' median and worst)")
    args = ap.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs: at least 1")
    if args.quick:
        args.sizes, args.duration, args.window = "1000,5000", 5.0, 10.0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if os.geteuid() != 0:
        raise SystemExit("bench/scale.py runs as root (it brings up the lab and submits as its users)")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    prefixes = [None if p in ("debian", "/usr") else Path(p) for p in args.slurm_prefix] or [None]
    columns: dict[str, dict[str, str]] = {}
    header = [f"# slurmtower scale lab, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
              f"{args.nodes:,} nodes (n1-n4 with slurmd); {os.cpu_count()} cores shared by Slurm, the service and "
              f"the load generator. slurmtower serve: the lab's slurmtower.toml (auth on, reader token, sensor and "
              f"archiver on, access log {'on' if args.access_log else 'off'}); wrk -t2 -c{args.clients} "
              f"-d{args.duration:g}s; slurmrestd with {args.rest_clients} client(s); one poller every "
              f"{args.poll_every:g} s for {args.window:g} s from the first answer on; "
              f"{args.runs} run{'s' if args.runs > 1 else ''} per size.", ""]
    queues: list[Queue] = []
    for prefix in prefixes:
        queues.append(run_release(args, prefix, sizes, columns, header))
        write_results(args, columns, header, queues)  # each release's columns kept as it ends


def write_results(args: argparse.Namespace, columns: dict[str, dict[str, str]], header: list[str],
                  queues: list[Queue]) -> None:
    header = list(header)
    if columns:
        submitted = [q for q in queues if q.submit_s > 0]
        for q in submitted:
            header.append(f"Submission: {q.calls:,} sbatch calls ({args.submit_workers} in parallel, "
                          f"{args.array_share:.0%} of the jobs in arrays) in {q.submit_s:.0f} s: "
                          f"{q.calls / q.submit_s:,.0f} calls/s, {q.jobs / q.submit_s:,.0f} "
                          f"jobs/s; {q.errors} failed.")
        if not submitted:
            header.append("Submission: none in this run (--keep-queue: the queue an earlier run left).")
        text = table(columns, header) + "\n".join(verdicts()) + "\n"
        if PROFILES:
            text += "\n## Where the time goes (py-spy, --profile)\n\n" + "\n".join(PROFILES)
        print("\n" + text)
        RESULTS.mkdir(exist_ok=True)
        lab = f"-{args.nodes // 1000}k-nodes" if args.nodes != 5000 else ""
        out = RESULTS / (args.out or f"scale-{datetime.now(UTC):%Y-%m-%d}{lab}.md")
        out.write_text(text)
        log(f"written to {out}")


if __name__ == "__main__":
    main()
