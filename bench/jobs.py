"""The bulk job-control bench (issue 23): cancel N pending jobs selected by a filter through the
catalogue, beside plain ``scancel`` with the same filter, on the 5,000-node scale lab, one run.

Usage (root, under the test lock so no test suite shares slurmctld and the cores)::

    flock /tmp/slurmtower-tests.lock .venv/bin/python bench/jobs.py                  # sizes 1000,10000
    flock /tmp/slurmtower-tests.lock .venv/bin/python bench/jobs.py --sizes 1000

It brings up (or reuses) the scale lab as ``bench/scale.py`` does (its helpers are imported from
there) and, for each size N:

1. submits N held single jobs of alice in one partition (``-p long --hold``, name ``jb-target``;
   parallel ``sbatch``), after ``--others`` held jobs that the filter must not match (bob's in
   the same partition, alice's in another: name ``jb-other``, submitted once for the run);
2. waits until slurmctld has purged the records of the jobs cancelled before (``MinJobAge``), so
   each measured part starts from the same queue;
3. times ``slurm.job.cancel`` with ``criterias`` ``{user: alice, state: PENDING, partition: long}``
   through :class:`~slurmtower.actions.Catalogue` (the lab's settings; the CLI's path: ``via=cli``,
   Slurm's rights; ``override_breaker`` as an admin would pass it: the breaker would refuse more
   than half the queue): first a dry run, then the act. It counts the Slurm commands it ran (an
   observer on the client's :class:`~slurmtower.slurm.runner.CommandRunner`: every subprocess
   goes through it) with the seconds of each, the time in the action store's writes, slurmctld's
   time in RPCs (``sdiag`` before and after, per message type, sdiag's own RPC and the nodes'
   registrations left out), the audit records of the execution (count and bytes of their JSON)
   and the envelope (status, counts, bytes);
4. submits the same N jobs again, waits the same way, and times ``scancel --user=alice
   --state=PENDING --partition=long`` with the same sdiag measure.

Both are timed to the command's return and to "gone from squeue" (``squeue -u alice -p long -t
PENDING`` empty, polled every 0.05 s after the return; the poll's RPCs are not in the sdiag
figure). After each part the ``jb-other`` jobs are checked untouched (state, reason and
AdminComment from ``scontrol -o show job`` as before). The table goes to
``bench/results/jobs-<date>.md`` and is printed. At the end every job it submitted is cancelled,
its temporary action store removed, and the lab stopped if the bench started it.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scale import LAB_DIR, LAB_NAME, LAB_PORT_BASE, RESULTS, USERS, cancel, log, rpc_times, sbatch

from slurmtower.actions import ActionStore, Catalogue
from slurmtower.devcluster import DevCluster
from slurmtower.settings import load_settings
from slurmtower.slurm import make_client
from slurmtower.slurm.jobctl import MAX_JOB_IDS

TARGET_NAME = "jb-target"
OTHER_NAME = "jb-other"
USER, ACCOUNT, OTHER_USER = "alice", USERS["alice"][0], "bob"
# sdiag's own RPC and what the nodes send by themselves: not caused by the commands measured.
BACKGROUND = {"REQUEST_STATS_INFO", "MESSAGE_NODE_REGISTRATION_STATUS", "REQUEST_NODE_REGISTRATION_STATUS",
              "REQUEST_PING", "MESSAGE_EPILOG_COMPLETE", "REQUEST_COMPLETE_BATCH_SCRIPT", "REQUEST_COMPLETE_PROLOG"}
STORE_WRITES = ("record_intent", "record_outcome", "record_execution", "append_audit", "jobs_acted_since")


def run(env: dict[str, str], *argv: str, timeout: float = 300) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, check=True, timeout=timeout).stdout


# -- what the catalogue ran ---------------------------------------------------------------------
@dataclass
class Calls:
    """The Slurm commands run (the runner's observer) and the store's writes, in order."""

    commands: list[tuple[str, float, bool]] = field(default_factory=list)
    store_s: float = 0.0

    def observe(self, kind: str, seconds: float, ok: bool) -> None:
        self.commands.append((kind, seconds, ok))

    def reset(self) -> None:
        self.commands, self.store_s = [], 0.0

    def summary(self) -> str:
        """``squeue 0.31 s, scontrol update 9.20 s, ...`` in the order they ran."""
        return ", ".join(f"{kind} {secs:.2f} s" + ("" if ok else " (failed)") for kind, secs, ok in self.commands)

    @property
    def slurm_s(self) -> float:
        return sum(s for _, s, _ in self.commands)


def time_store(store: ActionStore, calls: Calls) -> None:
    """Wrap the store's writes on the instance so their seconds add to ``calls.store_s``."""
    for name in STORE_WRITES:
        method: Callable[..., Any] = getattr(store, name)

        def timed(*a: Any, _m: Callable[..., Any] = method, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return _m(*a, **kw)
            finally:
                calls.store_s += time.perf_counter() - t

        setattr(store, name, timed)


# -- slurmctld's view -----------------------------------------------------------------------------
@dataclass
class Rpc:
    count: int
    ms: float
    by_type: dict[str, tuple[int, float]]

    def top(self, n: int = 4) -> str:
        rows = sorted(self.by_type.items(), key=lambda kv: -kv[1][1])[:n]
        return ", ".join(f"{name} {c:,} / {ms:,.0f} ms" for name, (c, ms) in rows)


@contextmanager
def rpcs(env: dict[str, str]) -> Iterator[list[Rpc]]:
    """slurmctld's RPCs (count, ms) between entering and leaving, background left out."""
    box: list[Rpc] = []
    before = rpc_times(env)
    yield box
    after = rpc_times(env)
    by_type: dict[str, tuple[int, float]] = {}
    for name, (c, t) in after.items():
        c0, t0 = before.get(name, (0, 0))
        if name not in BACKGROUND and c > c0:
            by_type[name] = (c - c0, (t - t0) / 1000)
    box.append(Rpc(sum(c for c, _ in by_type.values()), sum(ms for _, ms in by_type.values()), by_type))


# -- the queue ------------------------------------------------------------------------------------
def submit(env: dict[str, str], argvs: Sequence[list[str]], workers: int) -> tuple[list[int], float, int]:
    """(job ids, seconds, failed calls) of parallel ``sbatch`` calls."""
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ids = list(pool.map(lambda a: sbatch(env, a), argvs))
    took = time.perf_counter() - t
    made = [i for i in ids if i is not None]
    return made, took, len(ids) - len(made)


def job_args(user: str, account: str, partition: str, name: str) -> list[str]:
    return [f"--uid={user}", "-A", account, "-p", partition, "-J", name, "-t", "60", "--hold", "--wrap", "sleep 60"]


def matching(env: dict[str, str], partition: str) -> int:
    """squeue's count for the bench's filter (the jobs both cancels select)."""
    return len(run(env, "squeue", "-h", "-u", USER, "-p", partition, "-t", "PENDING", "-o", "%i").splitlines())


def settle(env: dict[str, str], limit: float) -> float:
    """Wait until slurmctld lists no ended record of the bench's jobs (purged after MinJobAge)."""
    t = time.perf_counter()
    while time.perf_counter() - t < limit:
        states = run(env, "squeue", "-h", "-t", "all", "-n", f"{TARGET_NAME},{OTHER_NAME}", "-o", "%T").split()
        if all(s == "PENDING" for s in states):
            return time.perf_counter() - t
        time.sleep(2)
    log(f"  warning: ended records still listed after {limit:g} s")
    return time.perf_counter() - t


def wait_gone(env: dict[str, str], partition: str, t0: float, limit: float = 300) -> float:
    while time.perf_counter() - t0 < limit:
        if matching(env, partition) == 0:
            return time.perf_counter() - t0
        time.sleep(0.05)
    raise SystemExit(f"jobs still pending {limit:g} s after the cancel")


def job_facts(env: dict[str, str], ids: set[int]) -> dict[int, tuple[str, str, str]]:
    """(JobState, Reason, AdminComment) of ``ids`` from one ``scontrol -o show job``
    (squeue -O has no AdminComment in 22.05)."""
    out: dict[int, tuple[str, str, str]] = {}
    for line in run(env, "scontrol", "-o", "show", "job").splitlines():
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        job = int(words.get("JobId", "0"))
        if job in ids:
            out[job] = (words.get("JobState", ""), words.get("Reason", ""), words.get("AdminComment", ""))
    return out


def leftovers(env: dict[str, str]) -> int:
    """Cancel the bench's jobs by name (an interrupted run, an sbatch that timed out but made its job)."""
    out = run(env, "squeue", "-h", "-t", "PENDING,RUNNING,SUSPENDED", "-n", f"{TARGET_NAME},{OTHER_NAME}",
              "-o", "%i")
    ids = sorted({int(x) for x in out.split() if x.isdigit()})
    cancel(ids, env)
    return len(ids)


# -- one size ------------------------------------------------------------------------------------
@dataclass
class Measure:
    size: int
    submit: str = ""
    row: dict[str, str] = field(default_factory=dict)
    detail: dict[str, str] = field(default_factory=dict)


def measure(size: int, cat: Catalogue, calls: Calls, env: dict[str, str], args: argparse.Namespace,
            submitted: list[int], others: dict[int, tuple[str, str, str]]) -> Measure:
    part = args.partition
    crit = {"criterias": {"user": USER, "state": "PENDING", "partition": part}, "override_breaker": True}
    m = Measure(size)
    if matching(env, part):
        raise SystemExit(f"the filter already matches {matching(env, part)} jobs before submitting")

    def fill(label: str) -> None:
        ids, took, failed = submit(env, [job_args(USER, ACCOUNT, part, TARGET_NAME)] * size, args.workers)
        submitted.extend(ids)
        waited = settle(env, args.settle)
        found = matching(env, part)
        log(f"  {label}: {len(ids):,} jobs in {took:.1f} s ({len(ids) / took:,.0f}/s, {failed} failed), "
            f"settled in {waited:.0f} s; the filter matches {found:,}")
        m.detail[f"submit ({label}): sbatch/s, settle s"] = f"{len(ids) / took:,.0f}, {waited:.0f}"
        if found != size:
            raise SystemExit(f"the filter matches {found} jobs, not {size}")

    # slurmtower: a dry run, then the act
    fill("for slurmtower")
    calls.reset()
    t = time.perf_counter()
    dry = cat.execute("slurm.job.cancel", dict(crit), principal="bench", via="cli", dry_run=True)
    dry_s = time.perf_counter() - t
    if dry.status != "succeeded" or dry.result["acting"] != size:
        raise SystemExit(f"dry run: {dry.status} {dry.stderr} {dry.result and dry.result.get('acting')}")
    m.detail["dry run: Slurm commands"] = f"{len(calls.commands)}: {calls.summary()}"
    calls.reset()
    with rpcs(env) as box:
        t0 = time.perf_counter()
        envelope = cat.execute("slurm.job.cancel", dict(crit), principal="bench", via="cli")
        tower_s = time.perf_counter() - t0
    n_commands = len(calls.commands)
    tower_gone = wait_gone(env, part, t0)
    tower_rpc = box[0]
    counts = envelope.result.get("counts", {}) if isinstance(envelope.result, dict) else {}
    audit = cat.store.list_audit(execution_id=envelope.execution_id, limit=1000)
    audit_bytes = sum(len(r.model_dump_json()) for r in audit)
    log(f"  slurmtower: {envelope.status} {counts} in {tower_s:.2f} s (gone at {tower_gone:.2f} s); "
        f"{calls.summary()}; store {calls.store_s:.2f} s")
    if envelope.status != "succeeded" or counts.get("cancelled") != size:
        raise SystemExit(f"slurmtower's cancel: {envelope.status} {counts} {envelope.stderr}")
    check_others(env, others, "after slurmtower's cancel")
    m.detail["slurmtower: Slurm commands, in order"] = f"{len(calls.commands)}: {calls.summary()}"
    m.detail["slurmtower: in Slurm commands / store writes / the rest (Python, events), s"] = (
        f"{calls.slurm_s:.2f} / {calls.store_s:.2f} / {tower_s - calls.slurm_s - calls.store_s:.2f}")
    m.detail["slurmtower: slurmctld RPCs by type (count / ms)"] = tower_rpc.top()
    m.detail["slurmtower: envelope status, counts, JSON bytes"] = (
        f"{envelope.status}, {counts}, {len(envelope.model_dump_json()):,}")
    m.detail["slurmtower: audit records (outcome), JSON bytes each"] = ", ".join(
        f"{r.outcome} {len(r.model_dump_json()):,}" for r in reversed(audit))

    # plain scancel with the same filter
    fill("for scancel")
    argv = ["scancel", f"--user={USER}", "--state=PENDING", f"--partition={part}"]
    with rpcs(env) as box:
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=600)
        scancel_s = time.perf_counter() - t0
    scancel_gone = wait_gone(env, part, t0)
    scancel_rpc = box[0]
    log(f"  scancel: exit {proc.returncode} in {scancel_s:.2f} s (gone at {scancel_gone:.2f} s) {proc.stderr[:200]}")
    check_others(env, others, "after scancel")
    m.detail["scancel: slurmctld RPCs by type (count / ms)"] = scancel_rpc.top()
    m.detail["scancel: exit code"] = str(proc.returncode)

    m.row = {
        "jobs": f"{size:,}",
        "slurmtower s (return / gone)": f"{tower_s:.2f} / {tower_gone:.2f}",
        "Slurm commands": str(n_commands),
        "slurmctld RPC ms (RPCs)": f"{tower_rpc.ms:,.0f} ({tower_rpc.count:,})",
        "audit (records, bytes)": f"{len(audit)}, {audit_bytes:,}",
        "dry run s": f"{dry_s:.2f}",
        "scancel s (return / gone)": f"{scancel_s:.2f} / {scancel_gone:.2f}",
        "scancel RPC ms (RPCs)": f"{scancel_rpc.ms:,.0f} ({scancel_rpc.count:,})",
        "ratio wall (gone) / RPC ms": (f"x{tower_gone / scancel_gone:.2f} / "
                                       f"x{tower_rpc.ms / scancel_rpc.ms:.2f}" if scancel_rpc.ms else "n/a"),
    }
    return m


def check_others(env: dict[str, str], others: dict[int, tuple[str, str, str]], when: str) -> None:
    now = job_facts(env, set(others))
    changed = [i for i, facts in others.items() if now.get(i) != facts]
    if changed:
        raise SystemExit(f"{len(changed)} jobs outside the filter changed {when}: e.g. {changed[0]} "
                         f"{others[changed[0]]} -> {now.get(changed[0])}")
    log(f"  {len(others)} jobs outside the filter untouched {when}")


# -- the report ------------------------------------------------------------------------------------
def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kib = 0
    return (f"{platform.node()}: {os.cpu_count()} cores ({model or 'unknown CPU'}), {mem_kib / 2**20:.0f} GiB, "
            f"Linux {platform.release()}, Python {platform.python_version()}")


def report(measures: list[Measure], header: list[str]) -> str:
    cols = list(measures[0].row)
    out = [*header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(m.row[c] for c in cols) + " |" for m in measures]
    rows: list[str] = []
    for m in measures:
        rows += [k for k in m.detail if k not in rows]
    out += ["", "| detail | " + " | ".join(f"{m.size:,} jobs" for m in measures) + " |",
            "|---|" + "---|" * len(measures)]
    out += ["| " + r + " | " + " | ".join(m.detail.get(r, "") for m in measures) + " |" for r in rows]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--sizes", default="1000,10000", help="jobs the filter selects, ascending")
    ap.add_argument("--partition", default="long", help="the filter's partition")
    ap.add_argument("--others", type=int, default=100, help="jobs of each kind the filter must not match")
    ap.add_argument("--workers", type=int, default=4, help="parallel sbatch processes")
    ap.add_argument("--settle", type=float, default=240.0, help="at most this long for ended records to go")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if os.geteuid() != 0:
        raise SystemExit("bench/jobs.py runs as root (it brings up the lab and submits as its users)")
    if sizes[-1] > MAX_JOB_IDS:
        raise SystemExit(f"slurm.job.cancel acts on at most {MAX_JOB_IDS} jobs per call")

    cluster = DevCluster(root=LAB_DIR, cluster_name=LAB_NAME, port_base=LAB_PORT_BASE, nodes=args.nodes,
                         log=lambda msg: log(f"  {msg}"))
    was_up = cluster.is_up()
    was_nodes = DevCluster(root=LAB_DIR, cluster_name=LAB_NAME, port_base=LAB_PORT_BASE).node_count
    log(f"scale lab: {args.nodes} nodes in {LAB_DIR} ({'reused' if was_up else 'starting it'})")
    took = cluster.up()
    env = cluster.command_env()
    store_dir = LAB_DIR / "bench-jobs"
    submitted: list[int] = []
    measures: list[Measure] = []
    settings = load_settings(cluster.tower_conf, environ={})
    calls = Calls()
    client = make_client(settings, observers=[calls.observe])
    shutil.rmtree(store_dir, ignore_errors=True)
    store_dir.mkdir(parents=True)
    store = ActionStore(f"sqlite:///{store_dir / 'actions.db'}")  # same disk as the lab's own store
    time_store(store, calls)
    cat = Catalogue.from_settings(settings, client=client, store=store)
    release = run(env, "sinfo", "--version").strip()
    header = [f"# slurmtower bulk job control, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
              f"- command: `{shlex.join(['.venv/bin/python', 'bench/jobs.py', *sys.argv[1:]])}` "
              "(as root, under `flock /tmp/slurmtower-tests.lock`)",
              f"- machine: {machine()}; the default devcluster (n1-n4) runs beside the lab",
              f"- lab: {cluster.node_count:,} nodes (n1-n4 with slurmd), {release}, settings {cluster.tower_conf} "
              f"(backend {settings.slurm.backend}); lab {'reused' if was_up else 'started'} in {took:.1f} s",
              f"- filter: `{{user: {USER}, state: PENDING, partition: {args.partition}}}`; the jobs: single held "
              f"jobs (`sbatch --hold`), and {args.others} of bob's in {args.partition} plus {args.others} of "
              f"alice's in bigmem that must not match (checked untouched after each cancel)",
              "- slurmtower: `Catalogue.execute('slurm.job.cancel', {criterias, override_breaker: true}, via='cli')` "
              "with AdminComment on (actions.job_admin_comment), a temporary SQLite action store on the lab's disk; "
              "Slurm commands counted by an observer on the client's CommandRunner",
              "- scancel: `scancel --user=alice --state=PENDING --partition=" + args.partition + "`",
              "- wall: to the call's return / to the jobs gone from `squeue -t PENDING` (polled every 0.05 s); "
              "slurmctld: sdiag's RPC total_time deltas over the call (sdiag's own and node registrations left "
              "out); ratio: slurmtower / scancel; each part starts after the previous cancel's records are purged"]
    try:
        gone = leftovers(env)
        if gone:
            log(f"  cancelled {gone} jobs an earlier run left")
        ids, took_o, failed = submit(env, [job_args(OTHER_USER, USERS[OTHER_USER][0], args.partition, OTHER_NAME)]
                                     * args.others + [job_args(USER, ACCOUNT, "bigmem", OTHER_NAME)] * args.others,
                                     args.workers)
        submitted.extend(ids)
        others = job_facts(env, set(ids))
        log(f"  {len(others)} jobs outside the filter in {took_o:.1f} s ({failed} failed)")
        for size in sizes:
            log(f"size {size:,} ...")
            try:
                m = measure(size, cat, calls, env, args, submitted, others)
            except (SystemExit, Exception) as exc:  # report the sizes measured before it
                log(f"  size {size:,} not measured: {exc}")
                header.append(f"- size {size:,} not measured: {exc}")
                break
            measures.append(m)
            log("  " + " | ".join(f"{k}: {v}" for k, v in m.row.items()))
    finally:
        log(f"cleaning up: cancelling {len(submitted):,} job ids ...")
        cancel(submitted, env)
        more = leftovers(env)
        if more:
            log(f"  cancelled {more} more jobs of the bench's names")
        store.close()
        shutil.rmtree(store_dir, ignore_errors=True)
        if not was_up:
            cluster.down()
        elif was_nodes != args.nodes:
            log(f"  the lab had {was_nodes} nodes: bringing it back")
            DevCluster(root=LAB_DIR, cluster_name=LAB_NAME, port_base=LAB_PORT_BASE, nodes=was_nodes,
                       log=lambda msg: log(f"  {msg}")).up()
    if measures:
        text = report(measures, header)
        print("\n" + text)
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"jobs-{datetime.now(UTC):%Y-%m-%d}.md"
        out.write_text(text)
        log(f"written to {out}")


if __name__ == "__main__":
    main()
