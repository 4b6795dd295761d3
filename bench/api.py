"""Benchmark slurmtower's live routes against slurmrestd on the same cluster, in one run.

Usage (against your devcluster instance; loopback only)::

    export SLURMTOWER_DEVCLUSTER_DIR=... ; slurmtower devcluster up ; eval "$(slurmtower devcluster env)"
    python bench/api.py                      # 50 clients, 30 s per target, 2000 held jobs
    python bench/api.py --duration 10 --jobs 500 --clients 50

For each of /queue (vs slurmrestd ``GET /slurm/v0.0.38/jobs``) and /nodes (vs ``/nodes``) it
runs the same closed-loop load (``wrk`` when installed: ``apt-get install wrk``; else an
httpx async generator) against ``slurmtower serve`` (one uvicorn worker, started here) and
against the devcluster's slurmrestd, and prints requests/s, p50, p99 and the slurmctld RPCs
each target caused (``sdiag`` RPC counters before and after; sdiag's own RPC excluded), with
the ratios slurmtower/slurmrestd. The held jobs are submitted first and cancelled at the end.
Both targets get ``Accept-Encoding: gzip`` (slurmrestd ignores it; slurmtower serves its
pre-compressed bytes). The load generator shares the machine's cores with the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt

from slurmtower.settings import load_settings

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_WRK_LAT = re.compile(r"^\s*(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.M)


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(url: str, headers: dict[str, str], clients: int, duration: float) -> tuple[int, float, float,
                                                                                    float, int]:
    argv = ["wrk", "-t2", f"-c{clients}", f"-d{int(duration)}s", "--timeout", "60s", "--latency", url]
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


def run_httpx(url: str, headers: dict[str, str], clients: int, duration: float) -> tuple[int, float, float,
                                                                                      float, int]:
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


def start_slurmtower(port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update({"SLURMTOWER_AUTH__ANONYMOUS_READ": "true", "SLURMTOWER_EVENTS__SENSOR_ENABLED": "false",
                "SLURMTOWER_ARCHIVER__ARCHIVE_USAGE_LOAD": "false"})
    exe = str(Path(sys.executable).with_name("slurmtower"))
    proc = subprocess.Popen([exe, "serve", "--host", "127.0.0.1", "--port", str(port), "--no-access-log"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("slurmtower serve did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=30.0, help="seconds per target and route")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2000, help="held jobs in the queue during the run")
    ap.add_argument("--loadgen", choices=("auto", "wrk", "httpx"), default="auto")
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
    tower_headers = {"Accept-Encoding": "gzip"}

    print(f"load generator: {'wrk -t2' if use_wrk else 'httpx async'}, {args.clients} clients, "
          f"{args.duration:g} s per target", flush=True)
    print(f"submitting {args.jobs} held jobs ...", flush=True)
    t = time.monotonic()
    held = submit_held(args.jobs)
    print(f"  done in {time.monotonic() - t:.1f} s", flush=True)
    port = free_port()
    proc = start_slurmtower(port)
    rows: list[tuple[str, str, Result]] = []
    try:
        for route, rest_path in (("/queue", "/slurm/v0.0.38/jobs"), ("/nodes", "/slurm/v0.0.38/nodes")):
            tower_url = f"http://127.0.0.1:{port}{route}"
            rest_url = f"{settings.slurm.rest_url.rstrip('/')}{rest_path}"
            size_t = httpx.get(tower_url, headers=tower_headers).num_bytes_downloaded
            size_r = httpx.get(rest_url, headers=rest_headers, timeout=120).num_bytes_downloaded
            print(f"{route}: slurmtower body {size_t / 1024:.1f} KiB gzipped on the wire, "
                  f"slurmrestd {size_r / 1024:.1f} KiB", flush=True)
            for name, url, headers in (("slurmtower", tower_url, tower_headers),
                                       ("slurmrestd", rest_url, rest_headers)):
                res = measure(url, headers, args.clients, args.duration, use_wrk)
                rows.append((route, name, res))
                print(f"  {name:<10} {res.rps:9.1f} req/s  p50 {res.p50_ms:8.1f} ms  p99 {res.p99_ms:8.1f} ms"
                      f"  errors {res.errors}  RPCs {res.rpcs} ({res.rpcs_per_request:.4f}/req) "
                      f"{res.rpc_detail}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"cancelling {len(held)} held jobs ...", flush=True)
        cancel(held)

    print("\nratios (slurmtower / slurmrestd), targets: throughput >= 20x, RPCs <= 1/50, p99 <= 50 ms")
    for route in ("/queue", "/nodes"):
        t_res = next(r for ro, n, r in rows if ro == route and n == "slurmtower")
        r_res = next(r for ro, n, r in rows if ro == route and n == "slurmrestd")
        thr = t_res.rps / r_res.rps if r_res.rps else float("inf")
        rpc = (t_res.rpcs / r_res.rpcs) if r_res.rpcs else float("nan")
        print(f"{route:<7} throughput x{thr:,.1f}  total RPCs {t_res.rpcs} vs {r_res.rpcs} (ratio {rpc:.5f})  "
              f"slurmtower p99 {t_res.p99_ms:.1f} ms  "
              f"[{'ok' if thr >= 20 else 'MISS'} throughput, {'ok' if rpc <= 1 / 50 else 'MISS'} RPCs, "
              f"{'ok' if t_res.p99_ms <= 50 else 'MISS'} p99]")


if __name__ == "__main__":
    main()
