"""The usage-reports bench (issue 24): slurmtower's :class:`~slurmtower.accounting.reports.Reports`
on a year of generated jobs in slurmdbd's own schema, beside ``sreport`` and ``sacct`` answering
the same questions on the same rows, in the same run.

Usage (root, under the test lock: generation and timing load both cores)::

    flock /tmp/slurmtower-tests.lock .venv/bin/python bench/reports.py                    # 100k, 300k, 1M jobs
    flock /tmp/slurmtower-tests.lock .venv/bin/python bench/reports.py --sizes 1000000 --output \\
        bench/results/reports-$(date -u +%F).md
    .venv/bin/python bench/reports.py --cleanup     # remove the bench cluster, its devcluster and the grant

Data (as ``bench/history.py --devcluster`` builds it, its distributions imported from there):
a devcluster of its own (``/var/lib/slurmtower/dc-reports``, cluster ``rptdc``, ports
28400-28504) whose slurmdbd gets an extra cluster ``rpt`` (``sacctmgr add cluster``: slurmdbd
creates its tables, so ``sreport -M rpt`` and ``sacct -M rpt`` answer from the generated rows),
with accounts ``acct0``-``acct6`` and users ``user0``-``user49`` added by ``sacctmgr`` (two
associations each), a cluster registration event (8,192 CPUs, 512 GPUs) and a ``gres/gpu`` TRES.
For each size N it loads N jobs submitted evenly over the year that ends 12 h before the current
hour (all ended: every question is about the past) with LOAD DATA LOCAL INFILE, each with a batch
step (and for 30 % an ``srun`` step of one task per CPU) carrying user/system CPU time and max RSS
as slurmdbd stores them (``user_sec``/``user_usec``, ``tres_usage_in_max`` ``2=<bytes>``). GPU
jobs: every job of partition ``gpu`` (1-4 GPUs) and 10 % of ``debug``'s (1 GPU).

Rollups: up to ``--slurmdbd-rollup-max`` jobs (default 100,000) slurmdbd rolls the year up
itself (``sacctmgr rollup <first month> <this hour>``, DBD_ROLL_USAGE, timed); the bench also
computes the same rollup in Python (allocated TRES-seconds per association and hour, days and
months summed in UTC, the cluster's rows with its TRES counts and idle time) and compares it
row by row with slurmdbd's. Above that size the Python rollup is loaded in place of slurmdbd's
(slurmdbd's hourly rollup scans every job eligible before each hour: thousands of hours times
the table) and said so.

Questions, each timed ``--reps`` times (p50, p99) through a SELECT-only MariaDB user
(``st_bench_reports_ro``, created here), beside the alternative timed as a whole command
(``--alt-reps`` times) with its sum in Python:

1. one year, monthly, per account (``assoc_usage_month``) | ``sreport cluster
   AccountUtilizationByUser`` once per month (12 commands);
2. 30 days per user (``assoc_usage_day``) | ``sreport user TopUsage ... group topcount=100``;
3. a month's GPU-hours per partition (job table) | ``sacct -X -o Partition,Start,End,AllocTRES``
   clipped to the month and summed;
4. a month's CPU and memory efficiency per account (job + step tables) | ``sacct`` with steps
   (TotalCPU, MaxRSS, NTasks, ReqMem) summed as seff does.

Each question's answers are compared (slurmtower's totals against the sreport / sacct sums) and
the MariaDB plan of each statement slurmtower ran is printed (EXPLAIN through the read-only
user). Everything it makes is kept for re-runs (the data is reused when the job table holds N
rows) until ``--cleanup``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import secrets
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import history
import pymysql
from sqlalchemy import event

from slurmtower.accounting import AccountingDB
from slurmtower.accounting.reports import EfficiencyQuery, Reports, UsageQuery
from slurmtower.devcluster import DevCluster

DC_DIR = Path("/var/lib/slurmtower/dc-reports")
DC_NAME, DC_PORT_BASE = "rptdc", 28400
CLUSTER = "rpt"
SCRATCH = "slurmtower_bench_reports"
RO_USER = "st_bench_reports_ro"
SOCKET = "/run/mysqld/mysqld.sock"
GPU = ("gres", "gpu")
# The cluster's TRES (its registration event): CPUs, memory MiB, nodes, billing, GPUs.
NODES = 1024
CLUSTER_TRES = {1: NODES * 8, 2: NODES * 8 * 4000, 4: NODES, 5: NODES * 8}
GPUS = 512
ACCOUNTS = [f"acct{a}" for a in range(7)]
ROLLUP_TABLES = ("assoc_usage_hour", "assoc_usage_day", "assoc_usage_month", "usage_hour", "usage_day",
                 "usage_month")
HOUR, DAY = 3600, 86400

JOB_COLUMNS = [
    "job_db_inx", "mod_time", "account", "cpus_req", "exit_code", "flags", "job_name", "id_assoc", "id_job",
    "id_resv", "id_wckey", "id_user", "id_group", "het_job_id", "het_job_offset", "state_reason_prev", "mem_req",
    "nodelist", "nodes_alloc", "`partition`", "priority", "state", "timelimit", "time_submit", "time_eligible",
    "time_start", "time_end", "work_dir", "submit_line", "tres_alloc", "tres_req",
]
STEP_COLUMNS = [
    "job_db_inx", "id_step", "nodelist", "nodes_alloc", "state", "step_name", "task_cnt", "time_start", "time_end",
    "user_sec", "user_usec", "sys_sec", "sys_usec", "tres_alloc", "tres_usage_in_max", "tres_usage_in_tot",
]


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", flush=True)


def root_conn(database: str | None = None) -> pymysql.connections.Connection[Any]:
    kw: dict[str, Any] = {"user": "root", "unix_socket": SOCKET, "local_infile": True, "autocommit": True}
    if database:
        kw["database"] = database
    return pymysql.connect(**kw)


def sql(conn: pymysql.connections.Connection[Any], stmt: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(stmt, args)
        return list(cur.fetchall())


def run(argv: Sequence[str], timeout: float = 600) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=timeout).stdout


def local(t: int) -> str:
    """sreport, sacct and sacctmgr read times in the machine's zone."""
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


def month_start(t: int, months: int = 0) -> int:
    d = datetime.fromtimestamp(t, UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    m = d.month - 1 + months
    return int(d.replace(year=d.year + m // 12, month=m % 12 + 1).timestamp())


def percentile(samples: Sequence[float], q: int) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


# -- the cluster ------------------------------------------------------------------------------------
@dataclass
class Bench:
    dc: DevCluster
    db: str
    assoc: dict[tuple[str, str], int] = field(default_factory=dict)
    """(user, account) -> id_assoc, as slurmdbd numbered them."""
    gpu_id: int = 0


def setup() -> Bench:
    if os.environ.get("TZ", "") not in ("", "UTC") or time.localtime().tm_gmtoff:
        raise SystemExit("the Python rollup cuts days and months in UTC: run on a machine in UTC")
    dc = DevCluster(root=DC_DIR, cluster_name=DC_NAME, port_base=DC_PORT_BASE, log=lambda _m: None)
    dc.up()
    os.environ["SLURM_CONF"] = str(dc.slurm_conf)
    conn = root_conn(dc.db_name)
    if CLUSTER not in run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"]).split():
        run(["sacctmgr", "-i", "add", "cluster", CLUSTER])
    now_hour = int(time.time()) // HOUR * HOUR
    # Before anything else: with no last_ran row slurmdbd's own hourly timer would roll the
    # cluster up from its first event (a year) by itself.
    if not sql(conn, f"SELECT 1 FROM `{CLUSTER}_last_ran_table`"):
        sql(conn, f"INSERT INTO `{CLUSTER}_last_ran_table` VALUES (%s, %s, %s)",
            (now_hour, now_hour // DAY * DAY, month_start(now_hour)))
    have = {tuple(line.split("|")) for line in
            run(["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={CLUSTER}", "format=account,user"]).splitlines()}
    todo = [a for a in ACCOUNTS if (a, "") not in have]
    if todo:
        run(["sacctmgr", "-i", "add", "account", ",".join(todo), f"cluster={CLUSTER}"])
    for acct in ACCOUNTS:
        users = [f"user{ui}" for ui in range(len(history.USERS)) if acct in history._accounts(ui)
                 and (acct, f"user{ui}") not in have]
        if users:
            run(["sacctmgr", "-i", "add", "user", ",".join(users), f"account={acct}", f"cluster={CLUSTER}"])
    b = Bench(dc=dc, db=dc.db_name)
    for id_assoc, user, acct in sql(conn, f"SELECT id_assoc, user, acct FROM `{CLUSTER}_assoc_table` "
                                          "WHERE user != '' AND deleted = 0"):
        b.assoc[(str(user), str(acct))] = int(id_assoc)
    gpu = sql(conn, "SELECT id FROM tres_table WHERE type = %s AND name = %s", GPU)
    if not gpu:
        # what slurmdbd does when a slurmctld registers with AccountingStorageTRES=gres/gpu
        nxt = max(1001, int(sql(conn, "SELECT MAX(id) FROM tres_table")[0][0]) + 1)
        sql(conn, "INSERT INTO tres_table (creation_time, deleted, id, type, name) VALUES (%s, 0, %s, %s, %s)",
            (int(time.time()), nxt, *GPU))
        gpu = [(nxt,)]
        # slurmdbd reads its TRES list at start: restart it so its rollups count the GPUs too
        dc.down()
        dc.up()
    b.gpu_id = int(gpu[0][0])
    # The cluster's registration (slurmctld sends it at start): its TRES counts, from which
    # slurmdbd's rollup counts the cluster's idle time. Before any generated job.
    if not sql(conn, f"SELECT 1 FROM `{CLUSTER}_event_table` WHERE node_name = ''"):
        tres = ",".join(f"{k}={v}" for k, v in sorted(cluster_tres(b).items()))
        sql(conn, f"INSERT INTO `{CLUSTER}_event_table` (time_start, time_end, node_name, cluster_nodes, reason, "
                  "state, tres) VALUES (%s, 0, '', %s, '', 0, %s)",
            (month_start(now_hour, -14), f"c[0001-{NODES:04d}]", tres))
    sql(conn, f"CREATE DATABASE IF NOT EXISTS `{SCRATCH}`")
    sql(conn, f"CREATE TABLE IF NOT EXISTS `{SCRATCH}`.meta (k VARCHAR(64) PRIMARY KEY, v TEXT)")
    return b


def cluster_tres(b: Bench) -> dict[int, int]:
    return {**CLUSTER_TRES, b.gpu_id: GPUS}


# -- data -------------------------------------------------------------------------------------------
@dataclass
class Generated:
    rows: int
    t0: int
    t_end: int
    roll_start: int
    roll_end: int
    seconds: float = 0.0
    # the rollup computed in Python: {(assoc, hour): [secs per TRES in tres order]}
    assoc_hour: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    cluster_hour: dict[int, list[int]] = field(default_factory=dict)
    plan_hour: dict[int, int] = field(default_factory=dict)
    tres: list[int] = field(default_factory=list)


def span(rows: int, now_hour: int) -> Generated:
    """The year of jobs generated at ``now_hour`` (they end 12 h before it) and its rollup range."""
    t_end = now_hour - 12 * HOUR
    t0 = t_end - 365 * DAY
    return Generated(rows=rows, t0=t0, t_end=t_end, roll_start=month_start(t0), roll_end=now_hour)


def generate(b: Bench, rows: int) -> Generated:
    """Generate ``rows`` jobs (and their steps) deterministically, load them, and compute the
    Python rollup of the same jobs."""
    g = span(rows, int(time.time()) // HOUR * HOUR)
    t0, t_end = g.t0, g.t_end
    g.tres = [1, 2, 4, 5, b.gpu_id]
    conn = root_conn(b.db)
    job_table, step_table = f"{CLUSTER}_job_table", f"{CLUSTER}_step_table"
    sql(conn, f"TRUNCATE TABLE `{job_table}`")
    sql(conn, f"TRUNCATE TABLE `{step_table}`")
    sql(conn, "SET SESSION unique_checks = 0")
    rng = random.Random(42)
    step = (t_end - 11 * HOUR - t0) / rows  # every job ends before t_end
    states = [s if s not in (0, 1) else 3 for s in history.STATES]  # all ended
    started = time.monotonic()
    gpu = b.gpu_id
    acc_a: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    acc_c: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    plan: dict[int, int] = defaultdict(int)
    chunk = 100_000
    step_inx = 0
    with tempfile.TemporaryDirectory() as tmp:
        jobs_path, steps_path = Path(tmp) / "jobs.tsv", Path(tmp) / "steps.tsv"
        for base in range(0, rows, chunk):
            n = min(chunk, rows - base)
            users = rng.choices(range(len(history.USERS)), history.USER_WEIGHTS, k=n)
            parts = rng.choices(history.PARTITIONS, history.PARTITION_WEIGHTS, k=n)
            sts = rng.choices(states, history.STATE_WEIGHTS, k=n)
            jobs: list[str] = []
            steps: list[str] = []
            for k in range(n):
                inx = base + k + 1
                ui = users[k]
                second = rng.random() < 0.3
                acct = history._accounts(ui)[second]
                assoc = b.assoc[(f"user{ui}", acct)]
                part, state = parts[k], sts[k]
                submit = int(t0 + inx * step)
                eligible = submit + rng.randrange(0, 5)
                start = eligible + rng.randrange(0, 600)
                end = start + rng.randrange(60, 36000)
                cpus = rng.choice((1, 2, 4, 8, 16))
                nodes = 1 if cpus < 16 else 2
                mem = cpus * 2000
                gpus = rng.randrange(1, 5) if part == "gpu" else (1 if part == "debug" and rng.random() < 0.1 else 0)
                tres = f"1={cpus},2={mem},4={nodes},5={cpus}" + (f",{gpu}={gpus}" if gpus else "")
                counts = (cpus, mem, nodes, cpus, gpus)
                exit_code = {5: 256 * rng.randrange(1, 4), 4: 15, 11: 9 << 8}.get(state, 0)
                first = inx % NODES + 1
                nodelist = f"c{first:04d}" if nodes == 1 else f"c[{first:04d}-{first + 1:04d}]"
                jobs.append(
                    f"{inx}\t{end}\t{acct}\t{cpus}\t{exit_code}\t0\t{history.JOB_NAMES[inx % 140]}\t{assoc}\t{inx}\t"
                    f"0\t0\t{history.USERS[ui]}\t100\t0\t4294967294\t0\t{mem // nodes}\t{nodelist}\t{nodes}\t{part}\t"
                    f"{rng.randrange(1, 10000)}\t{state}\t{rng.choice((60, 600, 1440))}\t{submit}\t{eligible}\t"
                    f"{start}\t{end}\t/home/user{ui}/work\tsbatch run.sh\t{tres}\t{tres}\n"
                )
                elapsed = end - start
                cpu_used = elapsed * cpus * rng.uniform(0.02, 1.0)
                srun = rng.random() < 0.3
                parts_cpu = ((-5, 0.1), (0, 0.9)) if srun else ((-5, 1.0),)
                for id_step, share in parts_cpu:
                    used = cpu_used * share
                    tasks = 1 if id_step == -5 else cpus
                    rss = rng.randrange(10, 1500) << 20 if id_step == -5 else rng.randrange(100, 2000) << 20
                    u_sec, s_sec = int(used * 0.9), int(used * 0.1)
                    snodes = 1 if id_step == -5 else nodes
                    stres = f"1={cpus if id_step != -5 else cpus // nodes},2={mem // nodes},4={snodes}"
                    steps.append(
                        f"{inx}\t{id_step}\t{nodelist}\t{snodes}\t3\t{'batch' if id_step == -5 else 'run.sh'}\t"
                        f"{tasks}\t"
                        f"{start}\t{end}\t{u_sec}\t{rng.randrange(0, 1000000)}\t{s_sec}\t{rng.randrange(0, 1000000)}\t"
                        f"{stres}\t1={int(used * 1000 / tasks)},2={rss},6=0,7={rss + (50 << 20)},8=0\t"
                        f"1={int(used * 1000)},2={rss * tasks}\n"
                    )
                    step_inx += 1
                # the rollup slurmdbd makes: allocated TRES-seconds per association and hour
                h = start // HOUR * HOUR
                while h < end:
                    secs = min(end, h + HOUR) - max(start, h)
                    a = acc_a[(assoc, h)]
                    c = acc_c[h]
                    for i, cnt in enumerate(counts):
                        if cnt:
                            a[i] += cnt * secs
                            c[i] += cnt * secs
                    h += HOUR
                # eligible but not started: the cluster's planned ("reserved") CPU time
                h = eligible // HOUR * HOUR
                while h < start:
                    plan[h] += cpus * (min(start, h + HOUR) - max(eligible, h))
                    h += HOUR
            jobs_path.write_text("".join(jobs))
            steps_path.write_text("".join(steps))
            with conn.cursor() as cur:
                cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE `{job_table}` FIELDS TERMINATED BY '\\t' "
                            f"LINES TERMINATED BY '\\n' ({', '.join(JOB_COLUMNS)})", (str(jobs_path),))
                cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE `{step_table}` FIELDS TERMINATED BY '\\t' "
                            f"LINES TERMINATED BY '\\n' ({', '.join(STEP_COLUMNS)})", (str(steps_path),))
            log(f"  generated {base + n:,}/{rows:,} jobs ({step_inx:,} steps) and loaded "
                f"({time.monotonic() - started:.0f} s)")
    for t in (job_table, step_table):
        sql(conn, f"ANALYZE TABLE `{t}`")
    g.assoc_hour, g.cluster_hour, g.plan_hour = dict(acc_a), dict(acc_c), dict(plan)
    g.seconds = time.monotonic() - started
    return g


def python_rollup_rows(b: Bench, g: Generated) -> dict[str, list[tuple[int, ...]]]:
    """The six rollup tables' rows (without creation/mod times) from the Python rollup.

    assoc tables: (id, id_tres, time_start, alloc_secs); cluster tables: (id_tres, time_start,
    count, alloc, down, pdown, idle, plan, over)."""
    out: dict[str, list[tuple[int, ...]]] = {t: [] for t in ROLLUP_TABLES}
    day_a: dict[tuple[int, int, int], int] = defaultdict(int)
    month_a: dict[tuple[int, int, int], int] = defaultdict(int)
    for (assoc, h), secs in g.assoc_hour.items():
        if not g.roll_start <= h < g.roll_end:
            continue
        for tres, s in zip(g.tres, secs, strict=True):
            if s:
                out["assoc_usage_hour"].append((assoc, tres, h, s))
                day_a[(assoc, tres, h // DAY * DAY)] += s
                month_a[(assoc, tres, month_start(h))] += s
    day_end = g.roll_end // DAY * DAY
    month_end = month_start(g.roll_end)
    out["assoc_usage_day"] = [(a, t, d, s) for (a, t, d), s in day_a.items() if d + DAY <= day_end]
    out["assoc_usage_month"] = [(a, t, m, s) for (a, t, m), s in month_a.items() if month_start(m, 1) <= month_end]
    counts = cluster_tres(b)
    day_c: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0] * 7)
    month_c: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0] * 7)
    for h in range(g.roll_start, g.roll_end, HOUR):
        secs = g.cluster_hour.get(h, [0] * 5)
        for tres, alloc in zip(g.tres, secs, strict=True):
            total = counts[tres] * HOUR
            planned = g.plan_hour.get(h, 0) if tres == 1 else 0
            row = (counts[tres], alloc, 0, 0, total - alloc - planned, planned, 0)
            out["usage_hour"].append((tres, h, *row))
            for key, acc in (((tres, h // DAY * DAY), day_c), ((tres, month_start(h)), month_c)):
                cell = acc[key]
                cell[0] = row[0]
                for i in range(1, 7):
                    cell[i] += row[i]
    out["usage_day"] = [(t, d, *v) for (t, d), v in day_c.items() if d + DAY <= day_end]
    out["usage_month"] = [(t, m, *v) for (t, m), v in month_c.items() if month_start(m, 1) <= month_end]
    return out


ASSOC_COLS = "id, id_tres, time_start, alloc_secs"
CLUSTER_COLS = "id_tres, time_start, count, alloc_secs, down_secs, pdown_secs, idle_secs, plan_secs, over_secs"


def load_rollup(conn: pymysql.connections.Connection[Any], schema: str, prefix: str,
                rows: dict[str, list[tuple[int, ...]]], *, create_like: str | None = None) -> None:
    """Load the Python rollup into ``<schema>.<prefix>_<table>`` (created like slurmdbd's when
    ``create_like`` names slurmdbd's database)."""
    now = int(time.time())
    with tempfile.TemporaryDirectory() as tmp, conn.cursor() as cur:
        for t, data in rows.items():
            name = f"`{schema}`.`{prefix}_{t}_table`"
            if create_like:
                cur.execute(f"DROP TABLE IF EXISTS {name}")
                cur.execute(f"CREATE TABLE {name} LIKE `{create_like}`.`{CLUSTER}_{t}_table`")
            else:
                cur.execute(f"TRUNCATE TABLE {name}")
            path = Path(tmp) / f"{t}.tsv"
            path.write_text("".join(f"{now}\t{now}\t" + "\t".join(map(str, r)) + "\n" for r in data))
            cols = ASSOC_COLS if t.startswith("assoc") else CLUSTER_COLS
            cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {name} FIELDS TERMINATED BY '\\t' "
                        f"(creation_time, mod_time, {cols})", (str(path),))
            cur.execute(f"ANALYZE TABLE {name}")
            cur.fetchall()


def slurmdbd_rollup(b: Bench, g: Generated) -> float:
    """slurmdbd rolls the year up (hours, days, months) from the generated jobs; seconds taken."""
    conn = root_conn(b.db)
    for t in ROLLUP_TABLES:
        sql(conn, f"TRUNCATE TABLE `{CLUSTER}_{t}_table`")
    t = time.monotonic()
    # DBD_ROLL_USAGE with an end: [start, end) for every cluster of this slurmdbd (DevCluster.roll_up)
    run(["sacctmgr", "-i", "rollup", local(g.roll_start), local(g.roll_end)], timeout=7200)
    return time.monotonic() - t


def compare_rollups(b: Bench, rows: dict[str, list[tuple[int, ...]]]) -> dict[str, str]:
    """The Python rollup against slurmdbd's, table by table: rows only one side has or that differ."""
    conn = root_conn(b.db)
    load_rollup(conn, SCRATCH, "py", rows, create_like=b.db)
    out = {}
    for t in ROLLUP_TABLES:
        cols = ASSOC_COLS if t.startswith("assoc") else CLUSTER_COLS
        keys = "id, id_tres, time_start" if t.startswith("assoc") else "id_tres, time_start"
        theirs = f"(SELECT {cols} FROM `{b.db}`.`{CLUSTER}_{t}_table` WHERE deleted = 0)"
        ours = f"(SELECT {cols} FROM `{SCRATCH}`.`py_{t}_table`)"
        n_theirs = int(sql(conn, f"SELECT COUNT(*) FROM {theirs} x")[0][0])
        n_ours = int(sql(conn, f"SELECT COUNT(*) FROM {ours} x")[0][0])
        same = int(sql(conn, f"SELECT COUNT(*) FROM {theirs} a JOIN {ours} b USING ({cols})")[0][0])
        same_keys = int(sql(conn, f"SELECT COUNT(*) FROM {theirs} a JOIN {ours} b USING ({keys})")[0][0])
        example = ""
        if same != n_theirs or same != n_ours:
            diff = sql(conn, f"SELECT a.*, '|', b.* FROM {theirs} a LEFT JOIN {ours} b USING ({keys}) "
                             f"WHERE NOT (a.{cols.split(', ')[-1]} <=> b.{cols.split(', ')[-1]}) LIMIT 2")
            example = f"; e.g. slurmdbd|python: {diff}"
        out[t] = (f"slurmdbd {n_theirs:,} rows, python {n_ours:,}, identical {same:,}, same keys {same_keys:,}"
                  f"{example}")
    return out


# -- the read-only grant ------------------------------------------------------------------------------
def grant(b: Bench) -> str:
    conn = root_conn()
    pw = secrets.token_hex(12)
    sql(conn, f"CREATE USER IF NOT EXISTS '{RO_USER}'@'localhost' IDENTIFIED BY %s", (pw,))
    sql(conn, f"ALTER USER '{RO_USER}'@'localhost' IDENTIFIED BY %s", (pw,))
    sql(conn, f"GRANT SELECT ON `{b.db}`.* TO '{RO_USER}'@'localhost'")
    grants = sql(conn, f"SHOW GRANTS FOR '{RO_USER}'@'localhost'")
    log("grant: " + "; ".join(re.sub(r"IDENTIFIED BY PASSWORD '[^']*'", "IDENTIFIED BY ...", str(r[0]))
                              for r in grants))
    return f"mysql+pymysql://{RO_USER}:{pw}@localhost/{b.db}?unix_socket={SOCKET}"


# -- the questions --------------------------------------------------------------------------------------
@dataclass
class Question:
    label: str
    source: str
    ours: Callable[[], Any]
    alt_label: str
    alt: Callable[[], Any]
    check: Callable[[Any, Any], str]
    target_ms: float


def _clip(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def _epoch(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp())


def _cpu_time(text: str) -> float:
    """sacct's TotalCPU: [D-][HH:]MM:SS[.mmm]."""
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = text.split(":")
    secs = float(parts[-1]) + 60 * int(parts[-2]) + (3600 * int(parts[-3]) if len(parts) > 2 else 0)
    return days * DAY + secs


def _bytes(text: str) -> int:
    if not text:
        return 0
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def questions(b: Bench, reports: Reports, g: Generated) -> list[Question]:
    m_end = month_start(g.roll_end)  # the first of this month: the last complete month ends here
    year0 = month_start(m_end, -12)
    month0 = month_start(m_end, -1)
    d_end = (m_end // DAY + 1) * DAY  # 30 days not on month bounds: both read the day table
    d0 = d_end - 30 * DAY
    gpu_name = "/".join(GPU)
    base = ["-t", "minutes", "-P", "-n", "-M", CLUSTER]

    def q1() -> Any:
        return reports.usage(UsageQuery(start=year0, end=m_end, period="month", group_by="account", tres=("cpu",)))

    def a1() -> dict[tuple[int, str], int]:
        out = {}
        for i in range(12):
            s, e = month_start(year0, i), month_start(year0, i + 1)
            txt = run(["sreport", *base, "cluster", "AccountUtilizationByUser", f"start={local(s)}",
                       f"end={local(e)}", "-T", "cpu"])
            # Cluster|Account|Login|Proper Name|TRES Name|Used
            for line in txt.splitlines():
                f = line.split("|")
                if not f[2] and f[1] != "root":
                    out[(i, f[1])] = int(f[5])
        return out

    def c1(ours: Any, theirs: dict[tuple[int, str], int]) -> str:
        mine = {(i, grp.account): c.tres_seconds["cpu"] for grp in ours.groups for i, c in enumerate(grp.cells)
                if c.tres_seconds["cpu"]}
        keys = set(mine) | set(theirs)
        worst = max((abs(mine.get(k, 0) / 60 - theirs.get(k, 0)) for k in keys), default=0.0)
        ok = worst < 1 and len(ours.periods) == 12
        return (f"{'agree' if ok else 'DIFFER'}: {len(keys)} account-months, CPU-minutes max |diff| {worst:.2f} "
                f"(sreport -t minutes truncates), total {sum(mine.values()) / 3600:,.0f} CPU-h, source {ours.source}")

    def q2() -> Any:
        return reports.usage(UsageQuery(start=d0, end=d_end, group_by="user", tres=("cpu",)))

    def a2() -> dict[str, int]:
        txt = run(["sreport", *base, "user", "TopUsage", f"start={local(d0)}", f"end={local(d_end)}", "-T", "cpu",
                   "group", "topcount=100"])
        # Cluster|Login|Proper Name|Account|TRES Name|Used
        return {f[1]: int(f[5]) for f in (line.split("|") for line in txt.splitlines())}

    def c2(ours: Any, theirs: dict[str, int]) -> str:
        mine = {grp.user: grp.total_seconds["cpu"] for grp in ours.groups if grp.total_seconds["cpu"]}
        keys = set(mine) | set(theirs)
        worst = max((abs(mine.get(k, 0) / 60 - theirs.get(k, 0)) for k in keys), default=0.0)
        return (f"{'agree' if worst < 1 else 'DIFFER'}: {len(keys)} users, CPU-minutes max |diff| {worst:.2f}, "
                f"total {sum(mine.values()) / 3600:,.0f} CPU-h, source {ours.source}")

    def q3() -> Any:
        return reports.usage(UsageQuery(start=month0, end=m_end, group_by="partition", tres=(gpu_name,)))

    def a3() -> dict[str, int]:
        txt = run(["sacct", "-a", "-X", "-n", "-P", "-M", CLUSTER, "-S", local(month0), "-E", local(m_end),
                   "-o", "Partition,Start,End,AllocTRES"])
        out: dict[str, int] = defaultdict(int)
        for line in txt.splitlines():
            part, start, end, tres = line.split("|")
            m = re.search(r"gres/gpu=(\d+)", tres)
            if m and start not in ("Unknown", "None"):
                out[part] += int(m.group(1)) * _clip(_epoch(start), _epoch(end), month0, m_end)
        return dict(out)

    def c3(ours: Any, theirs: dict[str, int]) -> str:
        mine = {grp.partition: grp.total_seconds[gpu_name] for grp in ours.groups}
        same = mine == {k: v for k, v in theirs.items() if v}
        return (f"{'agree' if same else 'DIFFER'} (GPU-seconds, exact): "
                + ", ".join(f"{k} {v / 3600:,.0f} GPU-h" for k, v in sorted(mine.items()))
                + ("" if same else f"; sacct {theirs}") + f", source {ours.source}")

    def q4() -> Any:
        return reports.efficiency(EfficiencyQuery(start=month0, end=m_end, group_by="account"))

    def a4() -> dict[str, list[float]]:
        txt = run(["sacct", "-a", "-n", "-P", "-M", CLUSTER, "-S", local(month0), "-E", local(m_end), "--noconvert",
                   "-o", "JobIDRaw,Account,End,ElapsedRaw,AllocCPUS,TotalCPU,MaxRSS,NTasks,ReqMem,NNodes"])
        jobs: dict[str, list[Any]] = {}
        for line in txt.splitlines():
            jid, acct, end, elapsed, cpus, total, rss, tasks, reqmem, _nnodes = line.split("|")
            if "." not in jid:
                e = _epoch(end) if end not in ("Unknown", "None") else 0
                if month0 <= e < m_end and int(cpus):
                    jobs[jid] = [acct, int(cpus) * int(elapsed), 0.0, 0, 0, _bytes(reqmem)]
                continue
            job = jobs.get(jid.split(".")[0])
            if job is None:
                continue
            job[2] += _cpu_time(total)
            r = _bytes(rss)
            if r > job[3]:
                job[3], job[4] = r, int(tasks or 0)
        out: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0, 0])
        for acct, alloc, used, peak, tasks, req in jobs.values():
            o = out[acct]
            o[0] += 1
            o[1] += alloc
            o[2] += used
            o[3] += peak * tasks
            o[4] += req
        return dict(out)

    def c4(ours: Any, theirs: dict[str, list[float]]) -> str:
        bad = []
        worst_cpu = 0.0
        for row in ours.rows:
            t = theirs.get(row.account)
            if t is None:
                bad.append(f"{row.account} missing in sacct")
                continue
            worst_cpu = max(worst_cpu, abs(row.cpu_used_seconds - t[2]) / max(1.0, t[2]))
            if (row.jobs, row.cpu_allocated_seconds, row.memory_used_bytes) != (t[0], t[1], t[3]):
                bad.append(f"{row.account}: ours {(row.jobs, row.cpu_allocated_seconds, row.memory_used_bytes)} "
                           f"sacct {tuple(t[:2])}, {t[3]}")
            if row.memory_requested_bytes != t[4]:
                bad.append(f"{row.account}: requested memory ours {row.memory_requested_bytes} sacct {t[4]}")
        if len(ours.rows) != len(theirs):
            bad.append(f"{len(ours.rows)} accounts vs sacct {len(theirs)}")
        tot = ours.total
        return (f"{'agree' if not bad and worst_cpu < 1e-4 else 'DIFFER'}: {tot.jobs:,} jobs, {len(ours.rows)} "
                f"accounts; jobs, CPU-s allocated, memory used (max-RSS step x tasks) exact"
                f"{'' if not bad else ' EXCEPT ' + '; '.join(bad[:3])}; CPU used rel. |diff| max {worst_cpu:.1e} "
                f"(sacct's TotalCPU drops ms past an hour); cpu eff {tot.cpu_efficiency:.3f}, "
                f"mem eff {tot.memory_efficiency:.3f}")

    return [
        Question("1. year, monthly, per account", "assoc_usage_month", q1,
                 "sreport cluster AccountUtilizationByUser x 12 months", a1, c1, 100),
        Question("2. 30 days per user", "assoc_usage_day", q2, "sreport user TopUsage group topcount=100", a2, c2,
                 100),
        Question("3. month's GPU-hours per partition", "job_table", q3,
                 "sacct -X -o Partition,Start,End,AllocTRES | sum", a3, c3, 1000),
        Question("4. month's CPU/mem efficiency per account", "job_table+step_table", q4,
                 "sacct (steps) TotalCPU,MaxRSS,NTasks,ReqMem | sum", a4, c4, 1000),
    ]


def timed(fn: Callable[[], Any], reps: int) -> tuple[list[float], Any]:
    result = fn()  # warm (and the answer checked)
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out, result


def explain(db: AccountingDB, fn: Callable[[], Any]) -> list[str]:
    """Run ``fn`` once capturing its SQL, then EXPLAIN each statement (through the same grant)."""
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", capture)
    try:
        fn()
    finally:
        event.remove(db.engine, "before_cursor_execute", capture)
    lines = []
    with db.engine.connect() as conn:
        for statement, params in seen:
            cur = conn.connection.cursor()
            cur.execute("EXPLAIN " + statement, params)
            names = [d[0] for d in cur.description]
            tables = re.findall(r"FROM (\S+)|JOIN (\S+)", statement)
            head = ", ".join(t for pair in tables for t in pair if t)[:80]
            plan = []
            for row in cur.fetchall():
                r = dict(zip(names, row, strict=True))
                plan.append(f"{r['table']}: {r['type']} key={r['key']} rows={r['rows']}"
                            + (f" ({r['Extra']})" if r.get("Extra") else ""))
            lines.append(f"{head}: " + " | ".join(plan))
    return lines


# -- the run ------------------------------------------------------------------------------------------
@dataclass
class Row:
    size: int
    question: Question
    ours: list[float]
    alt: list[float]
    check: str
    plans: list[str]


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    mem_gib = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    maria = run(["mariadb", "-N", "-e", "SELECT VERSION()"]).strip()
    return (f"{platform.node()}: {os.cpu_count()} cores ({model}), {mem_gib:.0f} GiB, Linux {platform.release()}, "
            f"Python {platform.python_version()}, MariaDB {maria}, {run(['sreport', '-V']).strip()}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cleanup() -> None:
    dc = DevCluster(root=DC_DIR, cluster_name=DC_NAME, port_base=DC_PORT_BASE, log=lambda _m: None)
    conn = root_conn()
    if dc.is_up():
        os.environ["SLURM_CONF"] = str(dc.slurm_conf)
        subprocess.run(["sacctmgr", "-i", "delete", "cluster", CLUSTER], capture_output=True, check=False)
        dc.down()
    for stmt in (f"DROP USER IF EXISTS '{RO_USER}'@'localhost'", f"DROP DATABASE IF EXISTS `{SCRATCH}`",
                 f"DROP DATABASE IF EXISTS `{dc.db_name}`"):
        sql(conn, stmt)
    subprocess.run(["rm", "-rf", str(DC_DIR)], check=True)
    log(f"removed cluster {CLUSTER}, devcluster {DC_DIR} and its database {dc.db_name}, {RO_USER}, {SCRATCH}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,300000,1000000", help="job counts, comma-separated")
    ap.add_argument("--reps", type=int, default=30, help="timed runs of each slurmtower question")
    ap.add_argument("--alt-reps", type=int, default=5, help="timed runs of each sreport / sacct command")
    ap.add_argument("--slurmdbd-rollup-max", type=int, default=100_000,
                    help="sizes up to this are rolled up by slurmdbd (and the Python rollup checked against it)")
    ap.add_argument("--output", type=Path, help="write the markdown tables here too")
    ap.add_argument("--cleanup", action="store_true", help="remove everything the bench made and exit")
    args = ap.parse_args()
    if args.cleanup:
        cleanup()
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s]
    out: list[str] = []
    log(f"load average before: {load()}")
    b = setup()
    url = grant(b)
    rows: list[Row] = []
    notes: list[str] = []
    scratch = root_conn(SCRATCH)
    for size in sizes:
        meta = dict(sql(scratch, "SELECT k, v FROM meta"))
        have = int(sql(root_conn(b.db), f"SELECT COUNT(*) FROM `{CLUSTER}_job_table`")[0][0])
        # the questions are about the last complete month: reusable within the same month
        reuse = (have == size and meta.get("rows") == str(size)
                 and month_start(int(meta.get("hour", "0")) * HOUR) == month_start(int(time.time())))
        log(f"== {size:,} jobs: {'reusing the loaded data' if reuse else 'generating'}")
        if reuse:
            g = span(size, int(meta["hour"]) * HOUR)
        else:
            g = generate(b, size)
            notes.append(f"{size:,} jobs: generated and loaded in {g.seconds:.0f} s "
                         f"({datetime.fromtimestamp(g.t0, UTC):%Y-%m-%d %H:%M} to "
                         f"{datetime.fromtimestamp(g.t_end, UTC):%Y-%m-%d %H:%M} UTC)")
        if not reuse:
            py_rows = python_rollup_rows(b, g)
            sql(scratch, "DELETE FROM meta")
            if size <= args.slurmdbd_rollup_max:
                secs = slurmdbd_rollup(b, g)
                how = (f"slurmdbd rolled up {local(g.roll_start)} to {local(g.roll_end)} "
                       f"({(g.roll_end - g.roll_start) // HOUR:,} hours) in {secs:.0f} s")
                log(how)
                for t, verdict in compare_rollups(b, py_rows).items():
                    notes.append(f"{size:,} jobs, {t}: {verdict}")
                    log(f"  {t}: {verdict}")
            else:
                t = time.monotonic()
                load_rollup(root_conn(b.db), b.db, CLUSTER, py_rows)
                how = (f"Python rollup (same arithmetic, checked against slurmdbd's at smaller sizes) loaded "
                       f"in {time.monotonic() - t:.0f} s, {sum(len(v) for v in py_rows.values()):,} rows")
                log(how)
            notes.append(f"{size:,} jobs: {how}")
            sql(scratch, "INSERT INTO meta VALUES ('rows', %s), ('hour', %s), ('rollup', %s)",
                (str(size), str(g.roll_end // HOUR), how))
        else:
            notes.append(f"{size:,} jobs: rollup as loaded before: {meta.get('rollup')}")
        db = AccountingDB(url, cluster=CLUSTER, query_timeout=300)
        reports = Reports(db, tz="UTC")
        log(f"load average before timing: {load()}")
        for q in questions(b, reports, g):
            ours, answer = timed(q.ours, args.reps)
            alt, theirs = timed(q.alt, args.alt_reps)
            verdict = q.check(answer, theirs)
            plans = explain(db, q.ours)
            rows.append(Row(size, q, ours, alt, verdict, plans))
            log(f"{q.label}: ours p50 {percentile(ours, 50):.1f} ms p99 {percentile(ours, 99):.1f} | "
                f"{q.alt_label}: p50 {percentile(alt, 50):.0f} ms p99 {percentile(alt, 99):.0f} | {verdict}")
            for p in plans:
                log(f"    EXPLAIN {p}")
        log(f"load average after timing: {load()}")
        db.close()

    out += [f"- machine: {machine()}", f"- load average at the end: {load()}", "",
            "| jobs | question | source | slurmtower p50 / p99 ms | target | alternative | alt p50 / p99 ms | "
            "alt / slurmtower (p50) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o50, o99, a50, a99 = (percentile(r.ours, 50), percentile(r.ours, 99), percentile(r.alt, 50),
                              percentile(r.alt, 99))
        met = "met" if o50 <= r.question.target_ms else "**missed**"
        out.append(f"| {r.size:,} | {r.question.label} | {r.question.source} | {o50:,.1f} / {o99:,.1f} | "
                   f"<= {r.question.target_ms:,.0f} ({met}) | `{r.question.alt_label}` | {a50:,.0f} / {a99:,.0f} | "
                   f"x{a50 / o50:,.1f} |")
    out += ["", "Answers compared:", ""]
    out += [f"- {r.size:,} jobs, {r.question.label}: {r.check}" for r in rows]
    out += ["", "Plans (EXPLAIN through the read-only user):", ""]
    out += [f"- {r.size:,} jobs, {r.question.label}: " + "; ".join(f"`{p}`" for p in r.plans) for r in rows]
    out += ["", "Data and rollups:", ""] + [f"- {n}" for n in notes]
    text = "\n".join(out)
    print("\n" + text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
