"""The explanation bench (issue 44): ``GET /jobs/{id}/why`` latency on the scale lab at 100,000 jobs.

Usage (root; the lab is its own devcluster instance beside the default one)::

    .venv/bin/python bench/why.py                                   # 5,000 nodes, 100,000 jobs, 300 jobs asked
    .venv/bin/python bench/why.py --jobs 2000 --nodes 100 --lab-dir /var/lib/slurmtower/why-lab \\
        --lab-name whylab --port-base 32400                         # a small run on a lab of its own

It brings up (or reuses) the lab (``bench/scale.py``'s: ``devcluster up --nodes N``, priority/
multifactor, QOS and association limits enforced), fills its queue to ``--jobs`` as
``bench/scale.py`` does (single jobs and arrays of alice/bob/carol/dave in seven partitions:
held, waiting for a begin time, or for 64 nodes that never come: reasons JobHeldUser,
BeginTime, Resources and Priority), starts ``slurmtower serve`` on the lab's settings and asks
``GET /jobs/{id}/why`` (the demo operator's token: names shown, every fact) of ``--requests``
pending jobs picked at random, one client, one after the other:

* **first pass**: each job asked once (its ``sprio`` and ``squeue --start`` not yet kept: the
  per-request cost the budget is about); the first request of a snapshot also ranks every
  partition's waiting jobs (once per snapshot): its time is shown apart;
* **second pass**: the same jobs again within the 10 s their scheduler answers are kept.

For each pass: p50, p95, p99 and max in ms, and slurmctld's RPCs per request by message type
(``sdiag`` before and after; the snapshot's own refreshes are counted too and named). The
budget: one explanation <= 50 ms p99 at 100,000 jobs, no other Slurm RPC per request than
``squeue --start`` (``REQUEST_JOB_INFO_SINGLE``, and ``REQUEST_PARTITION_INFO``: squeue loads the
partitions to order jobs by tier) and ``sprio`` (``REQUEST_PRIORITY_FACTORS``) for that job.
Half of the jobs asked are one-CPU jobs waiting for batch's CPUs (``--waiting`` of them are
submitted): those need both commands. The table goes to ``bench/results/why-<date>.md`` and is printed; the jobs are
cancelled and the lab stopped at the end if the bench started it.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
from scale import (
    LAB_DIR,
    LAB_NAME,
    RESULTS,
    USERS,
    Queue,
    cancel,
    cancel_leftovers,
    fill,
    lab_port_base,
    log,
    rpc_times,
    sbatch,
    serving,
    submit_running,
)

from slurmtower.devcluster import DevCluster

#: The RPCs of the lab itself (its nodes, sdiag's own, the bench's submissions): not counted.
BACKGROUND = {"REQUEST_STATS_INFO", "MESSAGE_NODE_REGISTRATION_STATUS", "REQUEST_PING", "MESSAGE_EPILOG_COMPLETE",
              "REQUEST_COMPLETE_BATCH_SCRIPT", "REQUEST_SUBMIT_BATCH_JOB", "REQUEST_FED_INFO",
              "REQUEST_COMPLETE_PROLOG", "REQUEST_NODE_REGISTRATION_STATUS"}
#: What one explanation may cost slurmctld (the budget): squeue --start (the job, and the partitions:
#: squeue loads them to order jobs by priority tier) and sprio.
PER_JOB = {"REQUEST_JOB_INFO_SINGLE", "REQUEST_PARTITION_INFO", "REQUEST_PRIORITY_FACTORS"}


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]
    return {"p50": statistics.median(ordered), "p95": at(0.95), "p99": at(0.99), "max": ordered[-1]}


def pending_ids(env: dict[str, str]) -> list[int]:
    out = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%A"], capture_output=True, text=True, env=env,
                         check=True, timeout=300).stdout
    return sorted({int(x) for x in out.split() if x.isdigit()})


def rpc_counts(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, int]:
    return {name: c - before.get(name, (0, 0))[0] for name, (c, _t) in after.items()
            if name not in BACKGROUND and c > before.get(name, (0, 0))[0]}


def ask(http: httpx.Client, headers: dict[str, str], ids: list[int]) -> tuple[list[tuple[float, str]], dict[str, int]]:
    """(seconds, reason code) per answer (200s only), and the statuses of the others."""
    took: list[tuple[float, str]] = []
    others: dict[str, int] = {}
    for job_id in ids:
        t = time.perf_counter()
        resp = http.get(f"/jobs/{job_id}/why", headers=headers)
        elapsed = time.perf_counter() - t
        if resp.status_code == 200:
            took.append((elapsed, resp.json().get("reason") or "None"))
        else:
            key = f"{resp.status_code}"
            others[key] = others.get(key, 0) + 1
    return took, others


def submit_waiting(queue: Queue, env: dict[str, str], n: int, workers: int, rng: random.Random) -> list[int]:
    """``n`` one-CPU jobs in batch (n1-n2, whose CPUs the running jobs hold): they wait for
    resources (``Resources``, ``Priority``), each ranked against the others."""
    users = ["alice", "bob", "carol", "dave"]
    argvs = [[f"--uid={u}", "-A", USERS[u][0], "-p", "batch", "-n", "1", "-J", "sb-sim", "-t", str(rng.randint(5, 60)),
              f"--nice={rng.randint(0, 1000)}", "--wrap", "sleep 60"] for u in rng.choices(users, k=n)]
    with ThreadPoolExecutor(workers) as pool:
        made = [j for j in pool.map(lambda a: sbatch(env, a), argvs) if j is not None]
    queue.ids += made
    queue.jobs += len(made)
    queue.records += len(made)
    return made


def machine() -> str:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.node()}: {os.cpu_count()} cores ({model or 'unknown CPU'}), Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--jobs", type=int, default=100_000, help="jobs in the queue (array tasks counted)")
    ap.add_argument("--requests", type=int, default=300, help="pending jobs asked, each once per pass (half of "
                    "them waiting for resources)")
    ap.add_argument("--waiting", type=int, default=2000, help="of --jobs, one-CPU jobs waiting for batch's CPUs")
    ap.add_argument("--array-share", type=float, default=0.3)
    ap.add_argument("--workers", type=int, default=4, help="parallel sbatch processes")
    ap.add_argument("--lab-dir", type=Path, default=LAB_DIR)
    ap.add_argument("--lab-name", default=LAB_NAME)
    ap.add_argument("--port-base", type=int, default=None, help="default: bench/scale.py's for --nodes")
    ap.add_argument("--keep-lab", action="store_true", help="leave the lab up (and its queue) at the end")
    ap.add_argument("--seed", type=int, default=44)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    cluster = DevCluster(root=args.lab_dir, cluster_name=args.lab_name,
                         port_base=args.port_base or lab_port_base(args.nodes), nodes=args.nodes,
                         log=lambda m: log(f"  {m}"))
    was_up = cluster.is_up()
    log(f"lab: {args.nodes} nodes in {args.lab_dir} ({'reused' if was_up else 'starting it'})")
    cluster.up()
    env = cluster.command_env()
    queue = Queue()
    try:
        if (gone := cancel_leftovers(env)):
            log(f"  cancelled {gone} jobs an earlier run left")
        submit_running(queue, env)
        t = time.perf_counter()
        fill(queue, args.jobs - args.waiting, env, array_share=args.array_share, workers=args.workers, rng=rng)
        waiting = submit_waiting(queue, env, args.waiting, args.workers, rng)
        log(f"  {queue.jobs:,} jobs in {queue.records:,} records submitted in {time.perf_counter() - t:.0f} s "
            f"({len(waiting):,} of them waiting for batch's CPUs)")
        operator = {"Authorization": f"Bearer {cluster.demo_tokens()['operator']}"}
        state_dir = Path(f"/tmp/slurmtower-why-bench-{os.getpid()}")  # noqa: S108
        with serving(cluster, state_dir, access_log=False) as serve:
            ready, first_queue = serve.wait_ready(operator, timeout=600)
            log(f"  serve: /ready after {ready:.1f} s, first /queue after {first_queue:.1f} s")
            others = sorted(set(pending_ids(env)) - set(waiting))
            half = args.requests // 2
            chosen = rng.sample(waiting, min(half, len(waiting)))
            chosen += rng.sample(others, min(args.requests - len(chosen), len(others)))
            rng.shuffle(chosen)
            with httpx.Client(base_url=serve.url, timeout=120) as http:
                first = ask(http, operator, chosen[:1])[0]  # the snapshot's ranking is made here
                before = rpc_times(env)
                t = time.perf_counter()
                cold, cold_other = ask(http, operator, chosen[1:])
                cold_wall = time.perf_counter() - t
                middle = rpc_times(env)
                warm, warm_other = ask(http, operator, chosen[1:])
                after = rpc_times(env)
        queued = {"Priority", "Resources", "None"}
        rows = [("first request (ranks every partition once per snapshot)", [t for t, _r in first], {}, {}, 0.0)]
        rows.append(("first pass: each job once", [t for t, _r in cold], cold_other, rpc_counts(before, middle),
                     cold_wall))
        rows.append(("first pass, jobs waiting for resources (sprio + squeue --start each)",
                     [t for t, r in cold if r in queued], {}, {}, 0.0))
        rows.append(("second pass: the same jobs (their answers kept)", [t for t, _r in warm], warm_other,
                     rpc_counts(middle, after), 0.0))
        reasons: dict[str, int] = {}
        for _t, reason in cold:
            reasons[reason] = reasons.get(reason, 0) + 1
        log("  reasons of the jobs asked: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items())))
        report = render(args, queue, rows)
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"why-{datetime.now(UTC):%Y-%m-%d}-{queue.jobs}.md"
        out.write_text(report)
        log(report)
        log(f"written to {out}")
    finally:
        if not args.keep_lab:
            cancel(queue.ids, env)
            if not was_up:
                cluster.down()


def render(args: argparse.Namespace, queue: Queue,
           rows: list[tuple[str, list[float], dict[str, int], dict[str, int], float]]) -> str:
    lines = [f"# GET /jobs/{{id}}/why at {queue.jobs:,} jobs ({queue.records:,} records), {args.nodes:,} nodes",
             "", f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {machine()}; `{' '.join(sys.argv)}`", "",
             "| pass | answers | p50 ms | p95 ms | p99 ms | max ms | not 200 | slurmctld RPCs per answer |",
             "|---|---|---|---|---|---|---|---|"]
    for label, took, other, rpcs, _wall in rows:
        if not took:
            lines.append(f"| {label} | 0 | | | | | {other} | |")
            continue
        p = {k: v * 1000 for k, v in percentiles(took).items()}
        n = len(took)
        per = ", ".join(f"{name} {count / n:.2f}" for name, count in sorted(rpcs.items())) or "none"
        lines.append(f"| {label} | {n} | {p['p50']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} | {p['max']:.1f} | "
                     f"{other or ''} | {per} |")
    extra = {name for _l, _t, _o, rpcs, _w in rows for name in rpcs} - PER_JOB
    lines += ["", "Per answer, the budget allows squeue --start (`REQUEST_JOB_INFO_SINGLE`, and "
              "`REQUEST_PARTITION_INFO`: squeue loads the partitions to order jobs by tier) and sprio "
              "(`REQUEST_PRIORITY_FACTORS`) for that job; the others listed are the service's own rounds "
              "(the queue's and nodes' snapshots, the limits and reservations kept 15 s): "
              + (", ".join(sorted(extra)) or "none") + ".",
              "Jobs held, waiting for a begin time, a node or a partition need no sprio; a job waiting for "
              "resources needs both commands (run at once)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
