"""One tower over one cluster and over two: what the second cluster costs, and what a frozen
cluster does to the other's answers.

Usage (root, loopback only)::

    .venv/bin/python bench/clusters.py                 # 30 s windows, 10 s of wrk per row
    .venv/bin/python bench/clusters.py --window 60 --duration 20

It brings up (or reuses) the default devcluster and a second one of its own
(``/var/lib/slurmtower/bench-second``, name ``benchsecond``, port base 28400; Debian's 22.05
too: no other release is installed here), puts a few hundred held jobs in each, and starts
``slurmtower serve`` as users run it (the demo reader token, the sensor and the archiver on,
access log on), first over the default cluster alone (its own slurmtower.toml), then over both
(``[[clusters]]``, the default first). For each it measures, with one client polling the
default cluster's ``/queue?limit=100`` every 2 s (and, with two clusters, a second polling the
second cluster's) for ``--window`` s: the CPU of the service's process tree per wall second,
its RSS, and each slurmctld's RPCs and time in them (``sdiag`` deltas, the nodes' own RPCs left
out); then p99 of the default cluster's ``/queue?limit=100`` under 50 clients (wrk) and,
with two clusters, the same again while the second cluster's slurmctld is stopped (SIGSTOP),
and how long the second cluster's ``/queue`` takes to answer meanwhile.

It prints a markdown table and writes ``bench/results/clusters-<date>.md``; at the end the
jobs it submitted are cancelled, serve stopped and the second cluster stopped when it started it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import LAB_DIR, LAB_NAME, RESULTS, Serve, cpu_s, lab_port_base, rpc_delta, rpc_times, rss_mib, tree, wrk  # noqa: E402

from slurmtower.devcluster import DevCluster  # noqa: E402
from slurmtower.devcluster.several import write_clusters_config  # noqa: E402

SECOND_DIR = Path("/var/lib/slurmtower/bench-second")
SECOND_NAME = "benchsecond"
SECOND_PORT_BASE = 28400
NAME = "bench-clusters"


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", flush=True)


def hold_jobs(cluster: DevCluster, count: int) -> None:
    env = cluster.command_env()
    for _ in range(count // 50):
        subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "-H", "-J", NAME, "--array", "1-50",
                        "-o", "/dev/null", "-D", "/tmp", "--wrap", "sleep 600"],
                       capture_output=True, env=env, check=True, timeout=60)


def cancel(cluster: DevCluster) -> None:
    subprocess.run(["scancel", "-n", NAME], capture_output=True, env=cluster.command_env(), check=False)


def window(serve: Serve, headers: dict[str, str], clusters: list[DevCluster], polled: list[str],
           seconds: float) -> dict[str, Any]:
    time.sleep(3)  # the first rounds and the sensor's first polls
    pids = tree(serve.proc.pid)
    rpc0 = [rpc_times(c.command_env()) for c in clusters]
    cpu0, t0 = cpu_s(pids), time.perf_counter()
    peak = 0.0
    with httpx.Client(base_url=serve.url, timeout=30, headers=headers) as http:
        for i in range(max(1, int(seconds / 2))):
            for path in polled:
                assert http.get(path, params={"limit": 100}).status_code == 200
            peak = max(peak, rss_mib(tree(serve.proc.pid)))
            time.sleep(max(0.0, t0 + 2 * (i + 1) - time.perf_counter()))
    wall = time.perf_counter() - t0
    cpu = cpu_s(tree(serve.proc.pid)) - cpu0
    rpcs = [rpc_delta(before, rpc_times(c.command_env())) for before, c in zip(rpc0, clusters, strict=True)]
    return {"cpu_pct": 100 * cpu / wall, "rss": rss_mib(tree(serve.proc.pid)), "rss_peak": peak,
            "rpcs": [(n / wall, 100 * s / wall) for n, s in rpcs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--jobs", type=int, default=500, help="held jobs in each cluster")
    ap.add_argument("--lab", action="store_true", help="the second cluster is the 5,000-node scale lab "
                    "(bench/scale.py's), not a 4-node one")
    args = ap.parse_args()
    first = DevCluster(log=lambda _m: None)
    second = (DevCluster(root=LAB_DIR, cluster_name=LAB_NAME, port_base=lab_port_base(5000), nodes=5000,
                         log=lambda _m: None) if args.lab else
              DevCluster(root=SECOND_DIR, cluster_name=SECOND_NAME, port_base=SECOND_PORT_BASE, nodes=4,
                         log=lambda _m: None))
    first.up()
    was_up = second.is_up()
    second.up()
    headers = {"Authorization": f"Bearer {first.demo_tokens()['reader']}"}
    rows: dict[str, list[str]] = {}
    try:
        for c in (first, second):
            cancel(c)
            hold_jobs(c, args.jobs)
        for label, clusters in (("one cluster", [first]), ("two clusters", [first, second])):
            state = first.root / "slurmtower" / f"bench-clusters-{len(clusters)}"
            subprocess.run(["rm", "-rf", str(state)], check=True)
            state.mkdir(parents=True)
            config = None if len(clusters) == 1 else write_clusters_config(state / "clusters.yaml", clusters, state)
            serve = Serve(first, state, access_log=True, config=config)  # bench/scale.py's: as users run it
            try:
                polled = ["/queue"] + [f"/clusters/{c.cluster_name}/queue" for c in clusters[1:]]
                serve.wait_ready(headers, more=polled[1:])
                log(f"{label}: a {args.window:g} s window, one poller per cluster ...")
                w = window(serve, headers, clusters, polled, args.window)
                log(f"{label}: p99 of the default cluster's /queue?limit=100 ...")
                url = serve.url + "/queue?limit=100"
                load = wrk(url, {**headers, "Accept-Encoding": "gzip"}, 50, args.duration)
                col = [f"{w['cpu_pct']:.1f}", f"{w['rss']:.0f} / {w['rss_peak']:.0f}",
                       f"{w['rpcs'][0][0]:.2f} RPC/s, {w['rpcs'][0][1]:.2f} % of wall",
                       (f"{w['rpcs'][1][0]:.2f} RPC/s, {w['rpcs'][1][1]:.2f} % of wall" if len(clusters) > 1
                        else "(not served)"),
                       f"{load.p99_ms:.1f} ms ({load.rps:,.0f}/s)"]
                if len(clusters) > 1:
                    pid = int((second.run_dir / "slurmctld.pid").read_text().split()[0])
                    log("two clusters: the second cluster's slurmctld stopped (SIGSTOP) ...")
                    os.kill(pid, signal.SIGSTOP)
                    try:
                        time.sleep(3)
                        frozen = wrk(url, {**headers, "Accept-Encoding": "gzip"}, 50, args.duration)
                        t0 = time.perf_counter()
                        r = httpx.get(f"{serve.url}/clusters/{second.cluster_name}/queue", headers=headers,
                                      params={"limit": 100}, timeout=60)
                        took = time.perf_counter() - t0
                    finally:
                        os.kill(pid, signal.SIGCONT)
                    stale = " stale" if r.status_code == 200 and r.json().get("stale") else ""
                    col += [f"{frozen.p99_ms:.1f} ms ({frozen.rps:,.0f}/s)", f"{took:.2f} s, {r.status_code}{stale}"]
                else:
                    col += ["", ""]
                rows[label] = col
            finally:
                serve.stop()
    finally:
        for c in (first, second):
            cancel(c)
        if not was_up:
            second.down()
    names = ["service CPU, one poller per cluster (% of a core)", "service RSS, MiB (end / peak)",
             f"default cluster's slurmctld ({first.cluster_name}): RPCs from slurmtower",
             f"second cluster's slurmctld ({second.cluster_name}): RPCs from slurmtower",
             "p99 default /queue?limit=100, 50 clients",
             "the same, the second cluster's slurmctld stopped",
             "the second cluster's /queue meanwhile (time, status)"]
    second_size = f"{second.node_count:,} nodes" + (" (the scale lab, n1-n4 with slurmd)" if args.lab else "")
    out = [f"# One tower over one and two clusters, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
           f"Two local clusters (the default one: 4 nodes; the second: {second_size}; Debian's Slurm 22.05: "
           f"no other release installed here), "
           f"{args.jobs} held jobs in each; `slurmtower serve` as users run it (reader token, sensor and "
           f"archiver on, access log on); {args.window:g} s windows, wrk -t2 -c50 -d{args.duration:g}s; "
           f"{os.cpu_count()} cores shared by both clusters, the service and the load. "
           f"Command: `bench/clusters.py --window {args.window:g} --duration {args.duration:g}"
           f"{' --lab' if args.lab else ''}`.", "",
           "| figure | " + " | ".join(rows) + " |", "|---|" + "---|" * len(rows)]
    for i, name in enumerate(names):
        out.append(f"| {name} | " + " | ".join(col[i] for col in rows.values()) + " |")
    text = "\n".join(out) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"clusters-{datetime.now(UTC):%Y-%m-%d}{'-lab' if args.lab else ''}.md"
    path.write_text(text)
    log(f"written to {path}")


if __name__ == "__main__":
    main()
