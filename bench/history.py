"""Benchmark slurmtower's /history queries on >= 1,000,000 rows of slurmdbd's real schema.

Usage::

    python bench/history.py                 # 1,000,000 rows into database slurmtower_bench
    python bench/history.py --rows 200000   # smaller
    python bench/history.py --url mysql+pymysql://root@localhost/db?unix_socket=/run/mysqld/mysqld.sock

The scratch database (default ``slurmtower_bench``) is created with the DDL in
``tests/data/slurmdbd_schema.sql`` for the cluster ``--cluster`` (default ``bench``) and
filled with LOAD DATA LOCAL INFILE. The data is reused when the job table already holds
``--rows`` rows, so re-runs only measure.

For every filter it times :meth:`AccountingDB.history` (first page, a deep page through the
keyset cursor, and the same depth through OFFSET as the Flask seed paged) and prints p50/p95.

sacct column: when ``sacct`` is on PATH and ``SLURMTOWER_BENCH_SACCT_CLUSTER`` names a cluster
registered in slurmdbd whose job table is the generated one (pass ``--url`` pointing at
slurmdbd's database; ``--cluster`` defaults to that name), it also times
``sacct --json -M <cluster> ...`` answering the same question (same filter, time window of
the first page) and prints the ratio. Otherwise the column is skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

DEFAULT_URL = "mysql+pymysql://root@localhost/slurmtower_bench?unix_socket=/run/mysqld/mysqld.sock"
SCHEMA = ROOT / "tests" / "data" / "slurmdbd_schema.sql"

# Distributions chosen to match research/perf-anchors.md: one user with 14 % of the rows,
# one association with ~4 %, a partition with 12 %, 140 job names (~0.7 % each), 82 % COMPLETED.
USERS = list(range(1000, 1050))
USER_WEIGHTS = [14.0, 4.0] + [81.95 / 47] * 47 + [0.05]
PARTITIONS = ["batch", "short", "debug", "long", "gpu", "bigmem", "admin"]
PARTITION_WEIGHTS = [45, 20, 12, 10, 8, 4, 1]
HIDDEN = ("admin",)
STATES = [3, 5, 4, 6, 7, 0, 1, 11]
STATE_WEIGHTS = [82, 6, 5, 3, 1, 1, 1, 1]
JOB_NAMES = [f"job_{i:03d}" for i in range(140)]

JOB_COLUMNS = [
    "job_db_inx",
    "mod_time",
    "account",
    "cpus_req",
    "derived_ec",
    "exit_code",
    "flags",
    "job_name",
    "id_assoc",
    "id_array_job",
    "id_array_task",
    "id_job",
    "id_resv",
    "id_wckey",
    "id_user",
    "id_group",
    "het_job_id",
    "het_job_offset",
    "state_reason_prev",
    "mem_req",
    "nodelist",
    "nodes_alloc",
    "`partition`",
    "priority",
    "state",
    "timelimit",
    "time_submit",
    "time_eligible",
    "time_start",
    "time_end",
    "work_dir",
    "submit_line",
    "tres_alloc",
    "tres_req",
]


def _assoc_id(user_index: int, second_account: bool) -> int:
    return 10 + user_index * 2 + (1 if second_account else 0)


def _accounts(user_index: int) -> tuple[str, str]:
    return (f"acct{user_index % 7}", f"acct{(user_index + 3) % 7}")


def _connect(url: str, database: str | None) -> pymysql.connections.Connection[Any]:
    u = make_url(url)
    kwargs: dict[str, Any] = {"user": u.username or "root", "local_infile": True, "autocommit": True}
    if u.password:
        kwargs["password"] = u.password
    sock = u.query.get("unix_socket")
    if sock:
        kwargs["unix_socket"] = sock
    else:
        kwargs["host"] = u.host or "localhost"
        kwargs["port"] = u.port or 3306
    if database:
        kwargs["database"] = database
    return pymysql.connect(**kwargs)


def _table_rows(cur: Any, table: str) -> int:
    try:
        cur.execute(f"SELECT COALESCE(MAX(job_db_inx), 0) FROM `{table}`")
    except pymysql.err.ProgrammingError:
        return -1
    return int(cur.fetchone()[0])


def generate(url: str, cluster: str, rows: int, *, slurmdbd: bool = False) -> None:
    """Create the scratch schema and load ``rows`` job rows (reused when already there).

    With ``slurmdbd`` the database is slurmdbd's own and the cluster was registered with
    ``sacctmgr add cluster`` (so slurmdbd created its tables): only that cluster's job table
    is emptied and filled; no table is created or dropped.
    """
    database = make_url(url).database
    assert database, "the URL must name a database"
    server = _connect(url, None)
    with server.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    conn = _connect(url, database)
    cur = conn.cursor()
    job_table = f"{cluster}_job_table"
    have = _table_rows(cur, job_table)
    if have == rows:
        print(f"reusing {have:,} rows in {database}.{job_table}")
        return
    if have >= 0:
        print(f"{database}.{job_table} holds {have:,} rows, want {rows:,}: rebuilding")
    ddl = SCHEMA.read_text().replace("`tc_", f"`{cluster}_")
    if slurmdbd:
        ddl = ""
        cur.execute(f"TRUNCATE TABLE `{job_table}`")
    for stmt in [s for s in re.split(r";\s*\n", ddl) if "CREATE TABLE" in s]:
        name = re.search(r"CREATE TABLE `([^`]+)`", stmt)
        assert name
        cur.execute(f"DROP TABLE IF EXISTS `{name.group(1)}`")
        cur.execute(stmt)
    now = int(time.time())
    # Associations: root account, one per account, then one or two per user.
    assoc_rows = [] if slurmdbd else [(1, "", "root", "", 1, 2)]
    for a in range(7 if not slurmdbd else 0):
        assoc_rows.append((2 + a, "", f"acct{a}", "root", 1, 2))
    for ui, _uid in enumerate(USERS if not slurmdbd else []):
        for second in (False, True):
            assoc_rows.append((_assoc_id(ui, second), f"user{ui}", _accounts(ui)[second], "", 1, 2))
    if slurmdbd:
        assoc_rows = []
    cur.executemany(
        f"INSERT INTO `{cluster}_assoc_table` (creation_time, mod_time, id_assoc, user, acct, parent_acct, "
        "lft, rgt, is_def) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [(now, now, i, u, a, p, lft, rgt, 0 if i % 2 else 1) for i, u, a, p, lft, rgt in assoc_rows],
    )
    if not slurmdbd:
        cur.executemany(
            "INSERT INTO user_table (creation_time, mod_time, name, admin_level) VALUES (%s, %s, %s, 1)",
            [(now, now, f"user{ui}") for ui in range(len(USERS))],
        )
    rng = random.Random(42)
    t0 = now - 365 * 86400
    step = 365 * 86400 / rows
    chunk = 200_000
    cur.execute("SET SESSION unique_checks = 0")
    started = time.monotonic()
    job_id = 0
    array_id = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "jobs.tsv"
        for base in range(0, rows, chunk):
            n = min(chunk, rows - base)
            users = rng.choices(range(len(USERS)), USER_WEIGHTS, k=n)
            parts = rng.choices(PARTITIONS, PARTITION_WEIGHTS, k=n)
            states = rng.choices(STATES, STATE_WEIGHTS, k=n)
            lines = []
            for k in range(n):
                inx = base + k + 1
                ui = users[k]
                second = ui == 0 and rng.random() < 0.5
                acct = _accounts(ui)[second]
                state = states[k]
                submit = int(t0 + inx * step)
                requeue = inx % 500 == 0 and job_id > 0
                if not requeue:
                    job_id += 1
                else:
                    submit += 1
                in_array = inx % 50 < 5
                if in_array and inx % 50 == 0:
                    array_id = job_id
                arr_job, arr_task = (array_id, inx % 50) if in_array else (0, 4294967294)
                eligible = submit + rng.randrange(0, 5)
                start = 0 if state == 0 else eligible + rng.randrange(0, 600)
                end = 0 if state in (0, 1) else start + rng.randrange(60, 36000)
                cpus = rng.choice((1, 2, 4, 8, 16))
                nodes = 1 if cpus < 16 else 2
                tres = f"1={cpus},2={cpus * 2000},4={nodes},5={cpus}"
                exit_code = {5: 256 * rng.randrange(1, 4), 4: 15, 11: 9 << 8}.get(state, 0)
                lines.append(
                    f"{inx}\t{end or submit}\t{acct}\t{cpus}\t0\t{exit_code}\t20\t{JOB_NAMES[inx % 140]}\t"
                    f"{_assoc_id(ui, second)}\t{arr_job}\t{arr_task}\t{job_id}\t0\t0\t{USERS[ui]}\t100\t0\t"
                    f"4294967294\t0\t{cpus * 2000}\t"
                    f"{'None assigned' if state == 0 else f'n{inx % 64:02d}'}\t{0 if state == 0 else nodes}\t"
                    f"{parts[k]}\t{rng.randrange(1, 10000)}\t{state}\t{rng.choice((60, 600, 1440))}\t"
                    f"{submit}\t{eligible}\t{start}\t{end}\t/home/user{ui}/work\tsbatch run.sh\t"
                    f"{'' if state == 0 else tres}\t{tres}\n"
                )
            path.write_text("".join(lines))
            cur.execute(
                f"LOAD DATA LOCAL INFILE %s INTO TABLE `{job_table}` FIELDS TERMINATED BY '\\t' "
                f"LINES TERMINATED BY '\\n' ({', '.join(JOB_COLUMNS)})",
                (str(path),),
            )
            print(f"  loaded {base + n:,}/{rows:,} rows ({time.monotonic() - started:.0f} s)", flush=True)
    cur.execute(f"ANALYZE TABLE `{job_table}`")
    cur.fetchall()


def _timed(fn: Callable[[], Any], reps: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def _p(samples: list[float], q: float) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def _fmt(samples: list[float] | None) -> str:
    if not samples:
        return "-"
    return f"{_p(samples, 50):8.1f} / {_p(samples, 95):8.1f}"


def _count(url: str, cluster: str, where: str) -> int:
    conn = _connect(url, make_url(url).database)
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{cluster}_job_table` WHERE {where}")
        return int(cur.fetchone()[0])


FILTERS: list[tuple[str, str, str, list[str]]] = [
    # (label, query string, SQL for the bench's own row count, sacct arguments)
    ("none", "", "1", []),
    ("user (14 %)", "user=user0", "id_user = 1000", ["-u", "user0"]),
    # no passwd entry for 1000 here: the name path goes through the associations, the uid
    # path through the sacct_def index
    ("uid (14 %)", "user=1000", "id_user = 1000", ["-u", "1000"]),
    ("user (0.05 %)", "user=user49", "id_user = 1049", ["-u", "user49"]),
    ("partition (12 %)", "partition=debug", "`partition` = 'debug'", ["-r", "debug"]),
    ("jobname (0.7 %)", "jobname=job_007", "job_name = 'job_007'", ["--name", "job_007"]),
    ("state=3 (82 %)", "state=3", "state = 3", ["-s", "CD"]),
    ("state=0 (1 %)", "state=0", "state = 0", ["-s", "PD"]),
    ("associd (4 %)", "associd=12", "id_assoc = 12", []),
    ("account", "account=acct3", "account = 'acct3'", ["-A", "acct3"]),
    ("jobid<=700000", "jobid<=700000", "id_job <= 700000", []),
    ("submitted 30 d", "submitted_after=@30d", "time_submit >= @30d", []),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sacct_cluster = os.environ.get("SLURMTOWER_BENCH_SACCT_CLUSTER")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--url", default=os.environ.get("SLURMTOWER_BENCH_URL", DEFAULT_URL))
    ap.add_argument("--cluster", default=sacct_cluster or "bench")
    ap.add_argument("--reps", type=int, default=15, help="timed runs per cell (OFFSET cells: a third)")
    ap.add_argument("--deep", type=int, default=500_000, help="depth of the deep pages")
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument(
        "--devcluster",
        action="store_true",
        help="load the rows into the slurmdbd database of a devcluster of its own "
        "(/var/lib/slurmtower/dc-bench) as an extra cluster "
        "(sacctmgr add cluster), so that sacct --json answers the same questions on the same rows",
    )
    args = ap.parse_args()
    if args.devcluster:
        from slurmtower.devcluster import DevCluster

        # A cluster of its own: an extra cluster in slurmdbd changes what sacctmgr does on
        # every cluster of that slurmdbd (the test suite's must not see it).
        dc = DevCluster(root=Path("/var/lib/slurmtower/dc-bench"), cluster_name="benchdc", port_base=33800,
                        log=lambda _m: None)
        dc.up()
        os.environ["SLURM_CONF"] = str(dc.slurm_conf)
        sacct_cluster = sacct_cluster or "bench1m"
        args.cluster = sacct_cluster
        args.url = f"mysql+pymysql://root@localhost/{dc.db_name}?unix_socket=/run/mysqld/mysqld.sock"
        have = subprocess.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"],
                              capture_output=True, text=True, check=True).stdout.split()
        if sacct_cluster not in have:
            subprocess.run(["sacctmgr", "-i", "add", "cluster", sacct_cluster], capture_output=True, check=True)

    t = time.monotonic()
    generate(args.url, args.cluster, args.rows, slurmdbd=args.devcluster)
    print(f"data ready in {time.monotonic() - t:.0f} s")
    if args.generate_only:
        return 0
    from slurmtower.accounting import AccountingDB, parse_history_query

    db = AccountingDB(args.url, cluster=args.cluster, hidden_partitions=HIDDEN, query_timeout=60)
    sacct = shutil.which("sacct") if sacct_cluster else None
    if sacct_cluster and not sacct:
        print("SLURMTOWER_BENCH_SACCT_CLUSTER is set but sacct is not on PATH")
    thirty_days = int(time.time()) - 30 * 86400
    iso_30d = datetime.fromtimestamp(thirty_days, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    header = (
        f"{'filter':18} {'matches':>9} | {'first page p50/p95 ms':>21} | {'cursor deep p50/p95':>19} | "
        f"{'OFFSET deep p50/p95':>19} | {'sacct p50 ms':>12} | {'sacct/ours':>10}"
    )
    print(f"\n{args.rows:,} rows, limit 10, deep = min({args.deep:,}, matches/2); times in ms\n")
    print(header)
    print("-" * len(header))
    for label, qs, where, sacct_args in FILTERS:
        qs = qs.replace("@30d", iso_30d)
        matches = _count(args.url, args.cluster, where.replace("@30d", str(thirty_days)))
        depth = max(10, min(args.deep, matches // 2) // 10 * 10)
        sep = "&" if qs else ""
        first_q = parse_history_query(qs)
        first = _timed(lambda q=first_q: db.history(q), args.reps)  # type: ignore[misc]
        offset_q = parse_history_query(f"{qs}{sep}offset={depth}")
        offset_page = db.history(offset_q)
        offset_s = _timed(lambda q=offset_q: db.history(q), max(3, args.reps // 3))  # type: ignore[misc]
        deep_s: list[float] | None = None
        if offset_page.next_cursor:
            deep_q = parse_history_query(f"{qs}{sep}cursor={offset_page.next_cursor}")
            deep_s = _timed(lambda q=deep_q: db.history(q), args.reps)  # type: ignore[misc]
        sacct_cell, ratio = "skipped", "-"
        if args.devcluster:
            # the generated users have no passwd entry here: give sacct their uids
            sacct_args = [{"user0": "1000", "user49": "1049"}.get(a, a) for a in sacct_args]
        if sacct and sacct_cluster:
            page = db.history(first_q)
            if page.jobs and (label != "associd (4 %)") and "jobid" not in label:
                oldest = min(j.submit_time for j in page.jobs if j.submit_time)
                argv = [
                    sacct,
                    "--json",
                    "-M",
                    sacct_cluster,
                    "-a",
                    "-X",
                    "-S",
                    oldest.strftime("%Y-%m-%dT%H:%M:%S"),
                    "-E",
                    "now",
                    *sacct_args,
                ]
                samples = _timed(lambda a=argv: subprocess.run(a, capture_output=True, timeout=300, check=True), 3)  # type: ignore[misc]
                sacct_cell = f"{_p(samples, 50):12.1f}"
                ratio = f"{_p(samples, 50) / _p(first, 50):9.0f}x"
            else:
                sacct_cell = "n/a"
        print(
            f"{label:18} {matches:>9,} | {_fmt(first):>21} | {_fmt(deep_s):>19} | {_fmt(offset_s):>19} | "
            f"{sacct_cell:>12} | {ratio:>10}",
            flush=True,
        )
    if not sacct:
        print(
            "\nsacct column skipped: set SLURMTOWER_BENCH_SACCT_CLUSTER to a cluster registered in slurmdbd "
            "whose job table is the generated one (and sacct on PATH)."
        )
    db.close()
    _ = timedelta
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
