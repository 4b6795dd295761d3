"""Benchmark slurmtower's live routes against slurmrestd on the same cluster, in one run.

Usage (against your devcluster instance; loopback only)::

    export SLURMTOWER_DEVCLUSTER_DIR=... ; slurmtower devcluster up ; eval "$(slurmtower devcluster env)"
    python bench/api.py                      # 50 clients, 30 s per target, 2000 held jobs
    python bench/api.py --duration 10 --jobs 500 --clients 50 --output bench/results/api-$(date +%F).md

``slurmtower serve`` runs as users run it: authentication on (a reader token made for the run,
sent in ``Authorization: Bearer`` by every request of the "token" rows), the sensor and the load
archiver on, one uvicorn worker, its own state directory (store, sensor key and triggers, removed
at the end). ``auth.anonymous_read`` is on too, only so that the same server in the same minute
answers the "no token" rows: that pair isolates what checking a token costs (the two take
turns in ``--rounds`` rounds; their p99 is the worst round's). The stripped
configuration (anonymous, no sensor, no archiver), which earlier versions of this benchmark
measured alone, is one extra row per route from a second server started afterwards. Both run
with ``--no-access-log`` (the access log costs throughput whatever the configuration).

For each of /queue (vs slurmrestd ``GET /slurm/v0.0.38/jobs``) and /nodes (vs ``/nodes``) it
runs the same closed-loop load (``wrk`` when installed: ``apt-get install wrk``; else an
httpx async generator) and prints requests/s, p50, p99 and the slurmctld RPCs made while the
target was under load (``sdiag`` RPC counters before and after; sdiag's own RPC excluded; the
slurmtower server keeps running during the slurmrestd rows, so its sensor's polls count there
as they would at a site running both), with the ratios against slurmrestd and token / no token.
With ``--replicas N`` it measures a deployment instead of slurmrestd: N ``serve`` processes
(users' configuration each) on one Redis (``--redis``, the shared snapshot) and one store
(``--store-url``, default one SQLite file: one leader runs the sensor and the archiver), the same
load on all of them at once (clients split between them), in three phases: one process, N
sharing the snapshot, N refreshing alone. It prints each process's throughput and the
controller RPC ratio (sdiag, during the load) of N against one.
The held jobs are submitted first and cancelled at the end. Every request sends
``Accept-Encoding: gzip`` (slurmrestd ignores it; slurmtower serves its pre-compressed bytes).
The load generator shares the machine's cores with the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import jwt

from slurmtower.api.security import hash_token, new_token
from slurmtower.settings import Settings, load_settings

# RPCs that the benchmark does not cause (sdiag itself, the nodes' own traffic).
_BACKGROUND_RPCS = {"REQUEST_STATS_INFO", "MESSAGE_NODE_REGISTRATION_STATUS", "REQUEST_PING",
                    "MESSAGE_EPILOG_COMPLETE", "REQUEST_COMPLETE_BATCH_SCRIPT", "REQUEST_SUBMIT_BATCH_JOB",
                    "REQUEST_CANCEL_JOB_STEP", "REQUEST_KILL_JOB", "REQUEST_FED_INFO"}


@dataclass
class Result:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    rpcs: int
    rpc_detail: dict[str, int]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def rpcs_per_request(self) -> float:
        return self.rpcs / self.requests if self.requests else float("nan")


def rpc_counts() -> dict[str, int]:
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True, timeout=30).stdout
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", section, re.M)}


def rpc_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {k: v for k, v in delta.items() if v and k not in _BACKGROUND_RPCS}


#: The share of the perfect-cache limit the hot path should reach (with a token, users' configuration).
LIMIT_SHARE_TARGET = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_WRK_LAT = re.compile(r"^\s*(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.M)


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(url: str, headers: dict[str, str], clients: int, duration: float, threads: int = 2) -> tuple[
        int, float, float, float, int]:
    argv = ["wrk", f"-t{threads}", f"-c{clients}", f"-d{max(1, round(duration))}s", "--timeout", "60s",
            "--latency", url]
    for k, v in headers.items():
        argv += ["-H", f"{k}: {v}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=duration + 120).stdout
    lat = {m[1]: _ms(m[2], m[3]) for m in _WRK_LAT.finditer(out)}
    reqs = int(re.search(r"(\d+) requests in ([\d.]+)(s|m)", out)[1])  # type: ignore[index]
    m = re.search(r"requests in ([\d.]+)(s|m)", out)
    secs = float(m[1]) * (60 if m[2] == "m" else 1)  # type: ignore[index]
    errors = 0
    for pat in (r"Non-2xx or 3xx responses: (\d+)", r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                r"timeout (\d+)"):
        e = re.search(pat, out)
        if e:
            errors += sum(int(x) for x in e.groups())
    return reqs, secs, lat.get("50", float("nan")), lat.get("99", float("nan")), errors


def run_httpx(url: str, headers: dict[str, str], clients: int, duration: float, threads: int = 2) -> tuple[
        int, float, float, float, int]:
    latencies: list[float] = []
    errors = 0

    async def main() -> float:
        nonlocal errors
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(headers=headers, limits=limits, timeout=60) as http:
            end = time.perf_counter() + duration

            async def worker() -> None:
                nonlocal errors
                while time.perf_counter() < end:
                    t = time.perf_counter()
                    r = await http.get(url)
                    await r.aread()
                    latencies.append(time.perf_counter() - t)
                    if r.status_code >= 400:
                        errors += 1

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(clients)))
            return time.perf_counter() - start

    secs = asyncio.run(main())
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 2 else [float("nan")] * 99
    return len(latencies), secs, q[49] * 1000, q[98] * 1000, errors


def measure(url: str, headers: dict[str, str], clients: int, duration: float, use_wrk: bool) -> Result:
    before = rpc_counts()
    runner = run_wrk if use_wrk else run_httpx
    reqs, secs, p50, p99, errors = runner(url, headers, clients, duration)
    time.sleep(0.5)  # let in-flight Slurm calls finish before reading the counters
    delta = rpc_delta(before, rpc_counts())
    return Result(reqs, secs, p50, p99, errors, sum(delta.values()), delta)


def measure_many(targets: list[tuple[str, dict[str, str]]], clients: int, duration: float,
                 use_wrk: bool) -> tuple[list[Result], dict[str, int]]:
    """The same load on every target at once (``clients`` split between them), and the
    slurmctld RPCs of the whole window."""
    before = rpc_counts()
    runner = run_wrk if use_wrk else run_httpx
    each = max(1, clients // len(targets))
    threads = max(1, 2 // len(targets))
    with ThreadPoolExecutor(len(targets)) as pool:
        futures = [pool.submit(runner, url, headers, each, duration, threads) for url, headers in targets]
        outs = [f.result() for f in futures]
    time.sleep(0.5)
    delta = rpc_delta(before, rpc_counts())
    return [Result(reqs, secs, p50, p99, errors, 0, {}) for reqs, secs, p50, p99, errors in outs], delta


def submit_held(n: int) -> list[int]:
    def one(i: int) -> int:
        out = subprocess.run(["sbatch", "--parsable", "--hold", "-J", f"bench-held-{i}", "-o", "/dev/null",
                              "-D", "/tmp", "--wrap", "true"], capture_output=True, text=True, check=True,
                             timeout=60).stdout
        return int(out.strip().split(";")[0])

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def cancel(ids: list[int]) -> None:
    for i in range(0, len(ids), 500):
        subprocess.run(["scancel", *map(str, ids[i:i + 500])], capture_output=True, check=False, timeout=120)


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


_LIMIT_APP = """
import sys, uvicorn
body = open(sys.argv[1], "rb").read()
headers = [(b"content-type", sys.argv[2].encode()), (b"content-length", str(len(body)).encode())]
if sys.argv[4] == "gzip":
    headers.append((b"content-encoding", b"gzip"))
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning", access_log=False, lifespan="off")
"""


class Limit:
    """The perfect-cache limit: uvicorn (one worker, as ``serve`` runs) answering every request
    with the bytes slurmtower sent for the route (gzipped or not, as sent; the same headers that
    matter), no routing, no authentication, no cache lookup: what serving cached bytes can cost
    at best."""

    def __init__(self, body: bytes, content_type: str, state_dir: Path, *, gzipped: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.body_file = state_dir / f"limit-{self.port}.gz"
        self.body_file.write_bytes(body)
        self.proc = subprocess.Popen([sys.executable, "-c", _LIMIT_APP, str(self.body_file), content_type,
                                      str(self.port), "gzip" if gzipped else "identity"],
                                     start_new_session=True)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                if httpx.get(self.url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit("the limit server did not start")

    def stop(self) -> None:
        terminate(self.proc)
        self.body_file.unlink(missing_ok=True)


def raw_body(url: str, headers: dict[str, str], *, gzipped: bool = True) -> tuple[bytes, str]:
    """The bytes on the wire (not decoded: gzipped, or plain when ``gzipped`` is False) and the
    content type of ``url``'s answer."""
    with httpx.stream("GET", url, headers=headers, timeout=60) as resp:
        resp.raise_for_status()
        if (resp.headers.get("content-encoding") == "gzip") != gzipped:
            raise SystemExit(f"{url} did not answer {'gzipped' if gzipped else 'uncompressed'}")
        return b"".join(resp.iter_raw()), resp.headers.get("content-type", "application/json")


class Tower:
    """One ``slurmtower serve`` process of the benchmark, with a state directory of its own."""

    def __init__(self, settings: Settings, *, users_config: bool, env_extra: dict[str, str] | None = None,
                 reader_token: str | None = None) -> None:
        self.users_config = users_config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.reader_token = reader_token or new_token()
        #: An admin's token: the uncompressed /queue row (the full view, private fields and all).
        self.admin_token = new_token()
        # SlurmUser must reach the sensor's notify program: a world-traversable directory
        # next to the configured one (not /tmp, which may be private to this user).
        self.state_dir = settings.state_dir / f"bench-api-{os.getpid()}-{self.port}"
        self.state_dir.mkdir(parents=True)
        os.chmod(self.state_dir, 0o755)
        env = dict(os.environ)
        env.update({
            "SLURMTOWER_STATE_DIR": str(self.state_dir),
            "SLURMTOWER_AUTH__ANONYMOUS_READ": "true",
            "SLURMTOWER_EVENTS__SENSOR_ENABLED": str(users_config).lower(),
            "SLURMTOWER_ARCHIVER__ARCHIVE_USAGE_LOAD": str(users_config).lower(),
            "SLURMTOWER_AUTH__TOKENS": json.dumps([{"name": "bench-reader", "role": "reader",
                                                    "sha256": hash_token(self.reader_token)},
                                                   {"name": "bench-admin", "role": "admin",
                                                    "sha256": hash_token(self.admin_token)}]
                                                  if users_config else []),
            **(env_extra or {}),
        })
        exe = str(Path(sys.executable).with_name("slurmtower"))
        self.log = (self.state_dir / "serve.log").open("wb")
        self.proc = subprocess.Popen([exe, "serve", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--no-access-log"], env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit(f"slurmtower serve did not start (see {self.state_dir / 'serve.log'})")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.reader_token}", "Accept-Encoding": "gzip"}

    def background(self) -> str:
        """What the sensor and the archiver did, as one line (proof that they ran)."""
        if not self.users_config:
            return "sensor off, archiver off"
        sensor = httpx.get(f"{self.url}/events/sensor", headers=self.headers, timeout=30).json()
        load = httpx.get(f"{self.url}/load", params={"time": 3600}, headers=self.headers, timeout=30).json()
        since = sensor.get("seconds_since_poll")
        return (f"sensor: started={sensor.get('started')}, {len(sensor.get('triggers', []))} triggers armed, "
                f"last poll {since if since is None else round(since, 1)} s ago "
                f"(every {sensor.get('poll_interval')} s); "
                f"archiver: archiving={load['archiving']}, {load['count']} load samples")

    def stop(self) -> None:
        terminate(self.proc)
        self.log.close()
        # A sensor that did not stop cleanly leaves its triggers: clear them.
        program = str(self.state_dir / "slurmtower-notify.py")
        out = subprocess.run(["strigger", "--get"], capture_output=True, text=True, check=False,
                             timeout=30).stdout
        for line in out.splitlines()[1:]:
            words = line.split()
            if program in words:
                subprocess.run(["strigger", "--clear", f"--id={words[0]}"], capture_output=True, check=False,
                               timeout=30)
        shutil.rmtree(self.state_dir, ignore_errors=True)


class Report:
    """Lines printed as they come and kept for the ``--output`` Markdown file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)


def queue_length() -> int:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True, timeout=60)
    return len(out.stdout.split())


def _cell(res: Result) -> str:
    return (f"{res.rps:,.1f} | {res.p50_ms:.1f} | {res.p99_ms:.1f} | {res.errors} | {res.rpcs} "
            f"({res.rpcs_per_request:.4f}/req)")


def snapshot_mode(tower: Tower) -> str:
    mode: str = httpx.get(f"{tower.url}/ready", timeout=30).json().get("snapshot", "?")
    return mode


def run_replicas(args: argparse.Namespace, settings: Settings, out: Report, use_wrk: bool,
                 check_queue: Callable[[str], None]) -> None:
    """``--replicas N``: one deployment of N serve processes on one Redis and one store.

    Three phases, each with the same load on /queue then /nodes (a reader token): one process
    (the refresher), then N sharing the snapshot (the first one plus N - 1 followers), then N
    processes refreshing alone (no Redis): the controller RPC ratios against one process and
    each process's throughput.
    """
    n = args.replicas
    base = settings.state_dir / f"bench-replicas-{os.getpid()}"
    base.mkdir(parents=True)
    os.chmod(base, 0o755)
    store = args.store_url or f"sqlite:///{base / 'store.db'}"
    token = new_token()
    prefix = f"slurmtower-bench:{os.getpid()}"
    towers: list[Tower] = []

    def start(count: int, shared: bool) -> None:
        env = {"SLURMTOWER_STORE_URL": store}
        if shared:
            env.update(SLURMTOWER_API__SHARED_CACHE_URL=args.redis, SLURMTOWER_API__SHARED_CACHE_PREFIX=prefix)
        for _ in range(count):
            if towers:  # Slurm calls the deployment back at one address, as it would call its proxy
                env["SLURMTOWER_EVENTS__CALLBACK_PORT"] = str(towers[0].port)
            towers.append(Tower(settings, users_config=True, env_extra=dict(env), reader_token=token))

    def settle(shared: bool) -> list[str]:
        end = time.monotonic() + 30
        while True:
            modes = [snapshot_mode(t) for t in towers]
            want_ok = (modes.count("shared (refresher)") == 1 and modes.count("shared (follower)") == len(towers) - 1
                       if shared else all(m.startswith("own refresh") for m in modes))
            if want_ok or time.monotonic() > end:
                return modes
            time.sleep(0.5)

    phases: list[tuple[str, dict[str, list[Result]], dict[str, dict[str, int]]]] = []

    def phase(label: str) -> None:
        results: dict[str, list[Result]] = {}
        rpcs: dict[str, dict[str, int]] = {}
        for route, _rest, _target in ROUTES:
            targets = [(f"{t.url}{route}", t.headers) for t in towers]
            measure_many(targets, args.clients, min(args.duration, 3.0), use_wrk)  # warm-up
            results[route], rpcs[route] = measure_many(targets, args.clients, args.duration, use_wrk)
            each = results[route]
            out(f"  {route} {label}: " + ", ".join(f"{r.rps:,.0f} req/s p99 {r.p99_ms:.1f} ms" for r in each)
                + f"; errors {sum(r.errors for r in each)}; RPCs {sum(rpcs[route].values())} {rpcs[route]}")
            check_queue(f"{route} {label}")
        phases.append((label, results, rpcs))

    try:
        out(f"deployment: store {store.split('://')[0]}, Redis {args.redis} (prefix {prefix}), users' "
            "configuration (reader token, sensor, archiver) in every process")
        start(1, shared=True)
        out(f"1 process: {settle(True)}")
        phase("1 process")
        start(n - 1, shared=True)
        modes = settle(True)
        out(f"{n} processes, shared snapshot: {modes}")
        phase(f"{n} shared")
        out(f"  {towers[0].background()}")
        for tower in towers:
            tower.stop()
        towers.clear()
        start(n, shared=False)
        out(f"{n} processes, each refreshing alone: {settle(False)}")
        phase(f"{n} alone")
    finally:
        for tower in towers:
            tower.stop()
        shutil.rmtree(base, ignore_errors=True)
        try:
            import redis

            client = redis.Redis.from_url(args.redis, socket_timeout=5)
            for key in client.scan_iter(f"{prefix}:*"):
                client.delete(key)
            client.close()
        except Exception as exc:  # noqa: BLE001 - the report matters more than the cleanup
            out(f"  (could not clear {prefix}:* on Redis: {exc})")

    out()
    out("| route | processes | snapshot | req/s per process | req/s in all | p99 ms (worst) | errors "
        "| slurmctld RPCs | of which REQUEST_JOB_INFO | RPC ratio vs 1 process |")
    out("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
    one_label, _, one_rpcs = phases[0]
    totals: dict[str, int] = {}
    for label, results, rpcs in phases:
        count, _, how = label.partition(" ")
        for route, res in results.items():
            total = sum(rpcs[route].values())
            totals[label] = totals.get(label, 0) + total
            base_rpcs = sum(one_rpcs[route].values())
            out(f"| {route} | {count} | {'shared' if how == 'shared' else 'own' if how == 'alone' else 'refresher'} | "
                f"{' / '.join(f'{r.rps:,.0f}' for r in res)} | {sum(r.rps for r in res):,.0f} | "
                f"{max(r.p99_ms for r in res):.1f} | {sum(r.errors for r in res)} | {total} | "
                f"{rpcs[route].get('REQUEST_JOB_INFO', 0)} | {total / base_rpcs if base_rpcs else float('nan'):.2f} |")
    out()
    for label, _results, _rpcs in phases[1:]:
        ratio = totals[label] / totals[one_label] if totals[one_label] else float("nan")
        out(f"- controller RPC ratio, {label} / 1 process: {ratio:.2f} ({totals[label]} / {totals[one_label]} "
            f"RPCs over both routes, {args.duration:g} s each; the leader's sensor polls in every phase)")
    out(f"- target (issue 11): {n} processes sharing the snapshot <= 1.1x the RPCs of one")


#: (route, slurmrestd path, throughput target vs slurmrestd) -- issue 10's targets.
ROUTES = (("/queue", "/slurm/v0.0.38/jobs", 3000.0), ("/nodes", "/slurm/v0.0.38/nodes", 15.0))
P99_TARGET_MS = 20.0
#: Uncompressed /queue (a client that sends no Accept-Encoding) against the same bytes from memory.
PLAIN_SHARE_TARGET = 0.5
TOKEN_TOLERANCE = 0.10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=30.0, help="seconds per target and route")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2000, help="held jobs submitted for the run")
    ap.add_argument("--loadgen", choices=("auto", "wrk", "httpx"), default="auto")
    ap.add_argument("--rounds", type=int, default=3,
                    help="with a token and without take turns in this many rounds (duration split)")
    ap.add_argument("--no-stripped", action="store_true", help="skip the stripped-configuration rows")
    ap.add_argument("--output", type=Path, help="also write the report to this Markdown file")
    ap.add_argument("--replicas", type=int, default=1,
                    help="N > 1: one deployment of N serve processes on one Redis and one store instead of "
                         "the slurmrestd comparison (the controller RPC ratio against one process)")
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="with --replicas: the shared snapshot's Redis")
    ap.add_argument("--store-url", help="with --replicas: the deployment's store (default: one SQLite file)")
    args = ap.parse_args()
    use_wrk = args.loadgen == "wrk" or (args.loadgen == "auto" and shutil.which("wrk") is not None)

    settings = load_settings()
    if not settings.slurm.rest_url:
        raise SystemExit("slurm.rest_url is not set: run against a devcluster (slurmtower devcluster env)")
    rest_headers = {"X-SLURM-USER-NAME": settings.slurm.rest_user, "Accept-Encoding": "gzip"}
    if settings.slurm.rest_token is not None:
        rest_headers["X-SLURM-USER-TOKEN"] = settings.slurm.rest_token.get_secret_value()
    elif settings.slurm.rest_jwt_key_file is not None:
        now = int(time.time())
        key = settings.slurm.rest_jwt_key_file.read_bytes()
        rest_headers["X-SLURM-USER-TOKEN"] = jwt.encode({"iat": now, "exp": now + 3600,
                                                         "sun": settings.slurm.rest_user}, key, "HS256")
    anonymous = {"Accept-Encoding": "gzip"}
    out = Report()
    out(f"# bench/api.py, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    out()
    out(f"command: `python bench/api.py {' '.join(sys.argv[1:])}`; {os.cpu_count()} cores; load generator "
        f"{'wrk -t2' if use_wrk else 'httpx async'}, {args.clients} clients, {args.duration:g} s per target")
    out(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (other work on the machine "
        "shares its cores)")
    out(f"submitting {args.jobs} held jobs ...")
    t = time.monotonic()
    held = submit_held(args.jobs)
    queued = queue_length()
    out(f"  done in {time.monotonic() - t:.1f} s; {queued} jobs in the queue")
    changed: list[str] = []

    def check_queue(row: str) -> None:
        # The devcluster is shared: a test suite starting meanwhile cancels every job.
        now = queue_length()
        if abs(now - queued) > max(2, queued // 100):
            out(f"  WARNING: {now} jobs in the queue after '{row}', {queued} at the start: someone else "
                "changed it, the /queue rows from here on do not measure the asked queue")
            changed.append(row)
    rows: dict[tuple[str, str], Result] = {}
    sizes: dict[str, tuple[float, float]] = {}

    def show(name: str, res: Result) -> None:
        out(f"  {name:<30} {res.rps:9.1f} req/s  p50 {res.p50_ms:7.1f} ms  p99 {res.p99_ms:7.1f} ms  "
            f"errors {res.errors}  RPCs {res.rpcs} ({res.rpcs_per_request:.4f}/req) {res.rpc_detail}")

    def run(route: str, name: str, url: str, headers: dict[str, str]) -> None:
        rows[route, name] = res = measure(url, headers, args.clients, args.duration, use_wrk)
        show(name, res)
        check_queue(f"{route} {name}")

    def run_pair(route: str, url: str, variants: dict[str, dict[str, str]]) -> None:
        # The variants take turns in rounds, so the other work on the machine (it varies from
        # one minute to the next) weighs on each alike; p99 is the worst round's.
        parts: dict[str, list[Result]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, headers in variants.items():
                parts[name].append(measure(url, headers, args.clients, args.duration / args.rounds, use_wrk))
        for name, results in parts.items():
            detail: dict[str, int] = {}
            for r in results:
                for k, v in r.rpc_detail.items():
                    detail[k] = detail.get(k, 0) + v
            rows[route, name] = res = Result(
                requests=sum(r.requests for r in results), seconds=sum(r.seconds for r in results),
                p50_ms=statistics.median(r.p50_ms for r in results), p99_ms=max(r.p99_ms for r in results),
                errors=sum(r.errors for r in results), rpcs=sum(r.rpcs for r in results), rpc_detail=detail)
            show(name, res)
            out(f"  {'':<30} rounds: " + ", ".join(f"{r.rps:.0f} req/s p99 {r.p99_ms:.1f} ms" for r in results))
        check_queue(f"{route} {', '.join(variants)}")

    try:
        if args.replicas > 1:
            run_replicas(args, settings, out, use_wrk, check_queue)
            return
        tower = Tower(settings, users_config=True)
        try:
            out(f"slurmtower serve (users' configuration) on {tower.url}, state in {tower.state_dir}")
            for route, rest_path, _target in ROUTES:
                tower_url = f"{tower.url}{route}"
                rest_url = f"{settings.slurm.rest_url.rstrip('/')}{rest_path}"
                size_t = httpx.get(tower_url, headers=tower.headers, timeout=60).num_bytes_downloaded
                size_r = httpx.get(rest_url, headers=rest_headers, timeout=120).num_bytes_downloaded
                sizes[route] = size_t / 1024, size_r / 1024
                out(f"{route}: slurmtower body {size_t / 1024:.1f} KiB gzipped on the wire, "
                    f"slurmrestd {size_r / 1024:.1f} KiB")
                # Warm up (first renders, the refresh worker's imports) so the token row, measured
                # first, does not pay for them.
                measure(tower_url, tower.headers, args.clients, min(args.duration, 3.0), use_wrk)
                run_pair(route, tower_url, {"slurmtower, token": tower.headers, "slurmtower, no token": anonymous})
                body, content_type = raw_body(tower_url, tower.headers)
                limit = Limit(body, content_type, tower.state_dir)
                try:
                    measure(limit.url, anonymous, args.clients, min(args.duration, 3.0), use_wrk)
                    run(route, "uvicorn, same bytes", limit.url, anonymous)
                finally:
                    limit.stop()
                if route == "/queue":
                    # A client that does not ask for gzip (curl, scripts) with an admin's token,
                    # against uvicorn serving the same uncompressed bytes.
                    plain_headers = {"Authorization": f"Bearer {tower.admin_token}", "Accept-Encoding": "identity"}
                    plain, content_type = raw_body(tower_url, plain_headers, gzipped=False)
                    out(f"{route}: the admin's view uncompressed {len(plain) / 1024:.1f} KiB")
                    measure(tower_url, plain_headers, args.clients, min(args.duration, 3.0), use_wrk)
                    run(route, "slurmtower, admin token, no gzip", tower_url, plain_headers)
                    limit = Limit(plain, content_type, tower.state_dir, gzipped=False)
                    try:
                        identity = {"Accept-Encoding": "identity"}
                        measure(limit.url, identity, args.clients, min(args.duration, 3.0), use_wrk)
                        run(route, "uvicorn, same bytes, no gzip", limit.url, identity)
                    finally:
                        limit.stop()
                run(route, "slurmrestd", rest_url, rest_headers)
            out(f"  {tower.background()}")
        finally:
            tower.stop()
        if not args.no_stripped:
            stripped = Tower(settings, users_config=False)
            try:
                out(f"slurmtower serve (stripped: anonymous, no sensor, no archiver) on {stripped.url}")
                for route, _rest_path, _target in ROUTES:
                    measure(f"{stripped.url}{route}", anonymous, args.clients, min(args.duration, 3.0), use_wrk)
                    run(route, "slurmtower stripped, no token", f"{stripped.url}{route}", anonymous)
            finally:
                stripped.stop()
    finally:
        out(f"cancelling {len(held)} held jobs ...")
        cancel(held)
        if args.replicas > 1:
            finish(out, args.output, changed)

    out(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    out()
    out("| route | target | config | credential | req/s | p50 ms | p99 ms | errors | slurmctld RPCs |")
    out("|---|---|---|---|---:|---:|---:|---:|---:|")
    labels = {"slurmtower, token": ("slurmtower", "users'", "reader token"),
              "slurmtower, no token": ("slurmtower", "users'", "none"),
              "slurmrestd": ("slurmrestd", "devcluster", "Slurm JWT"),
              "uvicorn, same bytes": ("perfect-cache limit", "uvicorn, fixed bytes", "none"),
              "slurmtower, admin token, no gzip": ("slurmtower, uncompressed", "users'", "admin token"),
              "uvicorn, same bytes, no gzip": ("perfect-cache limit, uncompressed", "uvicorn, fixed bytes",
                                               "none"),
              "slurmtower stripped, no token": ("slurmtower", "stripped", "none")}
    for (route, name), res in rows.items():
        target, config, cred = labels[name]
        out(f"| {route} | {target} | {config} | {cred} | {_cell(res)} |")
    out()
    out(f"targets: throughput with a token >= {ROUTES[0][2]:,.0f}x slurmrestd on /queue, >= {ROUTES[1][2]:,.0f}x "
        f"on /nodes; p99 <= {P99_TARGET_MS:g} ms; with a token within {TOKEN_TOLERANCE:.0%} of without")
    out()
    for route, _rest_path, target in ROUTES:
        tok, anon, rest = (rows.get((route, n)) for n in ("slurmtower, token", "slurmtower, no token",
                                                          "slurmrestd"))
        if tok is None or anon is None or rest is None:
            continue
        thr = tok.rps / rest.rps if rest.rps else float("inf")
        token_ratio = tok.rps / anon.rps if anon.rps else float("nan")
        ok = {"throughput": thr >= target, "p99": tok.p99_ms <= P99_TARGET_MS,
              "token": token_ratio >= 1 - TOKEN_TOLERANCE}
        verdict = ", ".join(f"{k} {'ok' if v else 'MISS'}" for k, v in ok.items())
        out(f"- {route}: token x{thr:,.1f} slurmrestd; token/no token throughput {token_ratio:.3f}, p99 "
            f"{tok.p99_ms:.1f} vs {anon.p99_ms:.1f} ms; RPCs {tok.rpcs} vs slurmrestd {rest.rpcs} [{verdict}]")
        limit_row = rows.get((route, "uvicorn, same bytes"))
        if limit_row is not None and limit_row.rps:
            of_limit = tok.rps / limit_row.rps
            out(f"- {route}: with a token {of_limit:.0%} of the perfect-cache limit ({tok.rps:,.0f} / "
                f"{limit_row.rps:,.0f} req/s: uvicorn serving the same bytes) "
                f"[{'ok' if of_limit >= LIMIT_SHARE_TARGET else 'MISS'}: target {LIMIT_SHARE_TARGET:.0%}]")
    plain_row, plain_limit = (rows.get(("/queue", n)) for n in ("slurmtower, admin token, no gzip",
                                                                 "uvicorn, same bytes, no gzip"))
    if plain_row is not None and plain_limit is not None and plain_limit.rps:
        of_limit = plain_row.rps / plain_limit.rps
        out(f"- /queue uncompressed (admin token): {of_limit:.0%} of uvicorn serving the same bytes "
            f"({plain_row.rps:,.0f} / {plain_limit.rps:,.0f} req/s, p99 {plain_row.p99_ms:.1f} vs "
            f"{plain_limit.p99_ms:.1f} ms) [{'ok' if of_limit >= PLAIN_SHARE_TARGET else 'MISS'}: target "
            f"{PLAIN_SHARE_TARGET:.0%}, issue 41]")
    finish(out, args.output, changed)


def finish(out: Report, output: Path | None, changed: list[str]) -> None:
    if changed:
        out(f"- WARNING: the queue changed during the run (first seen after '{changed[0]}'): run again on a "
            "cluster nobody else is using")
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("\n".join(out.lines) + "\n")
        print(f"report written to {output}")


if __name__ == "__main__":
    main()
