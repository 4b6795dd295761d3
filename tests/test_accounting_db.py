"""AccountingDB against the real local MariaDB, with slurmdbd's real DDL and realistic rows.

A scratch database is built once per module from ``tests/data/slurmdbd_schema.sql`` (for the
cluster ``tc``) by root over the unix socket; every test then reads through a user that holds
``SELECT`` only, as the documented deployment does. Skipped only when no MariaDB answers.
Override the admin URL with ``SLURMTOWER_TEST_MARIADB_URL``.
"""

from __future__ import annotations

import gc
import os
import pwd
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from slurmtower.accounting import AccountingDB, parse_history_query
from slurmtower.errors import AccountingUnavailable, ConfigError, InvalidInput
from slurmtower.models.accounting import HistoryJob
from slurmtower.settings import Settings

SOCKET = "/run/mysqld/mysqld.sock"
ADMIN_URL = os.environ.get(
    "SLURMTOWER_TEST_MARIADB_URL", f"mysql+pymysql://root@localhost/?unix_socket={SOCKET}"
)
DB_NAME = "slurmtower_test_acct"
RO_USER, RO_PASSWORD = "slurmtower_ro", "ro-test-pw"
SCHEMA = Path(__file__).parent / "data" / "slurmdbd_schema.sql"
CLUSTER = "tc"
HIDDEN = "secret"
T = 1_795_990_000  # submit times are T + n seconds

# -- the rows ------------------------------------------------------------------------------

USERS = [("root", 3, 0), ("alice", 1, 0), ("bob", 2, 0), ("ghost", 1, 0), ("carol", 1, 1)]
"""(name, admin_level, deleted). ghost has no passwd entry; carol was removed from slurmdbd."""

ASSOCS: list[dict[str, Any]] = [
    dict(id_assoc=1, user="", acct="root", parent_acct="", lft=1, rgt=20),
    dict(id_assoc=2, user="root", acct="root", is_def=1, lft=18, rgt=19),
    dict(id_assoc=3, user="", acct="physics", parent_acct="root", lft=6, rgt=13),
    dict(id_assoc=4, user="", acct="chemistry", parent_acct="root", lft=2, rgt=5),
    dict(
        id_assoc=5,
        user="alice",
        acct="physics",
        is_def=1,
        lft=11,
        rgt=12,
        max_jobs=10,
        max_submit_jobs=20,
        max_wall_pj=60,
        grp_tres="1=8,2=16000",
        max_tres_pj="1001=2",
    ),
    dict(id_assoc=6, user="bob", acct="chemistry", is_def=1, lft=3, rgt=4),
    dict(id_assoc=7, user="bob", acct="physics", lft=9, rgt=10, shares=5),
    dict(id_assoc=8, user="root", acct="physics", lft=7, rgt=8),
    dict(id_assoc=9, user="ghost", acct="physics", is_def=1, lft=14, rgt=15),
    dict(id_assoc=10, user="carol", acct="physics", is_def=1, lft=16, rgt=17, deleted=1),
]
UIDS = {"root": 0, "alice": 1001, "bob": 1002, "ghost": 2001, "carol": 2002}
ASSOC_USER = {a["id_assoc"]: a["user"] for a in ASSOCS}
GHOST_UID = 4242  # a deleted user: no passwd entry, association id 99 does not exist


def _job(
    inx: int, job_id: int, name: str, assoc: int, state: int, part: str = "debug", **kw: Any
) -> dict[str, Any]:
    user = ASSOC_USER.get(assoc)
    submit = kw.pop("time_submit", T + inx * 10)
    started = state not in (0,)
    row = dict(
        job_db_inx=inx,
        id_job=job_id,
        job_name=name,
        id_assoc=assoc,
        state=state,
        partition=part,
        id_user=UIDS.get(user or "", GHOST_UID),
        account={2: "root", 6: "chemistry"}.get(assoc, "physics"),
        cpus_req=1,
        nodes_alloc=1 if started else 0,
        nodelist="n1" if started else "None assigned",
        timelimit=5,
        time_submit=submit,
        time_eligible=submit,
        time_start=submit + 1 if started else 0,
        time_end=submit + 5 if state not in (0, 1) else 0,
        exit_code=0,
        derived_ec=0,
        id_array_job=0,
        id_array_task=4294967294,
        tres_req="1=1,2=100,4=1,5=1",
        tres_alloc="1=1,2=100,3=18446744073709551614,4=1,5=1" if started else "",
        deleted=0,
        work_dir=f"/home/{user or 'ghost'}",
        submit_line=f"sbatch {name}.sh",
        mem_req=100,
    )
    row.update(kw)
    return row


JOBS: list[dict[str, Any]] = [
    _job(
        1,
        1,
        "hostname",
        2,
        3,
        timelimit=4294967295,
        tres_alloc="1=4,2=8000,4=4,5=4",
        nodelist="n[1-4]",
        nodes_alloc=4,
    ),
    _job(2, 2, "ok-alice", 5, 3, "batch"),
    _job(3, 3, "fail-bob", 6, 5, exit_code=768),
    _job(4, 4, "cancel-bob", 7, 4, exit_code=15),
    _job(5, 5, "timeout-alice", 5, 6, "short", timelimit=1),
    _job(6, 7, "array-alice", 5, 3, id_array_job=6, id_array_task=1),
    _job(7, 8, "array-alice", 5, 3, id_array_job=6, id_array_task=2),
    _job(8, 6, "array-alice", 5, 3, id_array_job=6, id_array_task=3),
    _job(9, 9, "held-root", 8, 0, time_eligible=0),
    _job(10, 10, "nodefail-root", 8, 7, "batch"),
    _job(11, 10, "nodefail-root", 8, 3, "batch"),  # the requeue: same id, new time_submit
    _job(12, 11, "oom-alice", 5, 11, exit_code=125, derived_ec=125),
    _job(13, 12, "ghost-job", 99, 3, "batch", account="gone"),
    _job(14, 13, "secret-job", 8, 3, HIDDEN),
    _job(15, 14, "multi-hidden", 5, 0, f"debug,{HIDDEN}"),
    _job(16, 15, "multi-public", 7, 0, "batch,short"),
    _job(17, 16, "steps-bob", 7, 3, derived_ec=256, tres_alloc="1=2,2=4000,4=2,5=2,1001=1"),
    _job(18, 17, "it's", 9, 3, "short"),  # ghost, resolved through the association only
    _job(19, 18, "purged", 5, 3, deleted=1),
    _job(20, 19, "running-bob", 6, 1),
    *[_job(21 + i, 100 + i, f"bulk-{i % 3}", 5, 3 if i % 4 else 5, "batch") for i in range(45)],
]
STEPS = [
    dict(job_db_inx=17, id_step=-5, step_name="batch", state=3, exit_code=0, task_cnt=1),
    dict(job_db_inx=17, id_step=-4, step_name="extern", state=3, exit_code=0, task_cnt=2),
    dict(
        job_db_inx=17,
        id_step=0,
        step_name="hostname",
        state=3,
        exit_code=0,
        task_cnt=2,
        user_sec=3,
        user_usec=500000,
    ),
    dict(job_db_inx=17, id_step=1, step_name="false", state=5, exit_code=256, task_cnt=1),
    dict(job_db_inx=10, id_step=-5, step_name="batch", state=4, exit_code=-2, task_cnt=1),
]


def _visible(row: dict[str, Any]) -> bool:
    return not row["deleted"] and HIDDEN not in row["partition"].split(",")


VISIBLE = sorted((r for r in JOBS if _visible(r)), key=lambda r: -r["job_db_inx"])


# -- fixtures ------------------------------------------------------------------------------


def _admin() -> pymysql.connections.Connection[Any]:
    u = make_url(ADMIN_URL)
    kwargs: dict[str, Any] = {"user": u.username or "root", "autocommit": True, "connect_timeout": 3}
    if u.password:
        kwargs["password"] = u.password
    if u.query.get("unix_socket"):
        kwargs["unix_socket"] = u.query["unix_socket"]
    else:
        kwargs["host"], kwargs["port"] = u.host or "localhost", u.port or 3306
    return pymysql.connect(**kwargs)


def _insert(cur: Any, table: str, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        cols = ", ".join(f"`{c}`" for c in row)
        cur.execute(
            f"INSERT INTO `{table}` ({cols}) VALUES ({', '.join(['%s'] * len(row))})", list(row.values())
        )


@pytest.fixture(scope="module")
def ro_url() -> Iterator[str]:
    """URL of the scratch slurmdbd database for a SELECT-only user."""
    try:
        admin = _admin()
    except pymysql.err.MySQLError as exc:
        pytest.skip(f"no MariaDB answers at {ADMIN_URL}: {exc}")
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DB_NAME}`")
        cur.execute(f"CREATE DATABASE `{DB_NAME}`")
        cur.execute(f"USE `{DB_NAME}`")
        ddl = SCHEMA.read_text().replace("`tc_", f"`{CLUSTER}_")
        for stmt in re.split(r";\s*\n", ddl):
            if "CREATE TABLE" in stmt:
                cur.execute(stmt)
        now = T
        _insert(
            cur,
            "user_table",
            [dict(creation_time=now, name=n, admin_level=lvl, deleted=d) for n, lvl, d in USERS],
        )
        _insert(
            cur,
            "tres_table",
            [
                dict(creation_time=now, id=i, type=t, name=n)
                for i, t, n in [
                    (1, "cpu", ""),
                    (2, "mem", ""),
                    (3, "energy", ""),
                    (4, "node", ""),
                    (5, "billing", ""),
                    (1001, "gres", "gpu"),
                ]
            ],
        )
        _insert(cur, f"{CLUSTER}_assoc_table", [dict(creation_time=now, **a) for a in ASSOCS])
        base = dict(
            id_resv=0,
            id_wckey=0,
            id_group=100,
            het_job_id=0,
            het_job_offset=4294967294,
            state_reason_prev=0,
            priority=1,
        )
        _insert(cur, f"{CLUSTER}_job_table", [{**base, **j} for j in JOBS])
        _insert(
            cur,
            f"{CLUSTER}_step_table",
            [dict(nodelist="n1", nodes_alloc=1, time_start=T, time_end=T + 5, **s) for s in STEPS],
        )
        cur.execute("CREATE USER IF NOT EXISTS %s@'localhost' IDENTIFIED BY %s", (RO_USER, RO_PASSWORD))
        cur.execute(f"GRANT SELECT ON `{DB_NAME}`.* TO %s@'localhost'", (RO_USER,))
    u = make_url(ADMIN_URL)
    url = u.set(username=RO_USER, password=RO_PASSWORD, database=DB_NAME).render_as_string(
        hide_password=False
    )
    yield url
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DB_NAME}`")
        cur.execute("DROP USER IF EXISTS %s@'localhost'", (RO_USER,))
    admin.close()


@pytest.fixture(scope="module")
def db(ro_url: str) -> Iterator[AccountingDB]:
    acct = AccountingDB(
        ro_url, cluster=CLUSTER, hidden_partitions=[HIDDEN], connect_timeout=2, query_timeout=5
    )
    yield acct
    acct.close()


def history(db: AccountingDB, raw: str) -> list[HistoryJob]:
    return db.history(parse_history_query(raw)).jobs


def inxs(jobs: list[HistoryJob]) -> list[int]:
    return [j.job_db_inx for j in jobs]


def expect(pred: Any, limit: int = 1000) -> list[int]:
    return [r["job_db_inx"] for r in VISIBLE if pred(r)][:limit]


# -- history: order, limit, filters --------------------------------------------------------


def test_default_page_is_the_ten_newest_submissions(db: AccountingDB) -> None:
    page = db.history(parse_history_query(""))
    assert inxs(page.jobs) == expect(lambda r: True, 10)
    assert (page.limit, page.offset) == (10, 0)
    assert page.next_cursor is not None


def test_hidden_partitions_and_deleted_rows_never_appear(db: AccountingDB) -> None:
    everything = history(db, "limit=1000")
    assert inxs(everything) == expect(lambda r: True)
    assert not any(HIDDEN in j.partition for j in everything)
    assert history(db, f"partition={HIDDEN}") == []
    assert history(db, "jobname=secret-job") == []
    assert history(db, "jobname=purged") == []


@pytest.mark.parametrize(
    ("raw", "pred"),
    [
        ("user=alice", lambda r: r["id_user"] == 1001),
        ("user=root", lambda r: r["id_user"] == 0),
        ("user=bob", lambda r: r["id_user"] == 1002),
        ("partition=batch", lambda r: "batch" in r["partition"].split(",")),
        ("partition=short", lambda r: "short" in r["partition"].split(",")),
        ("jobname=array-alice", lambda r: r["job_name"] == "array-alice"),
        ("jobname=it%27s", lambda r: r["job_name"] == "it's"),
        ("associd=7", lambda r: r["id_assoc"] == 7),
        ("account=chemistry", lambda r: r["account"] == "chemistry"),
        ("state=5", lambda r: r["state"] == 5),
        ("state=FAILED", lambda r: r["state"] == 5),
        ("state=0", lambda r: r["state"] == 0),
        ("state=pending", lambda r: r["state"] == 0),
        ("state=11", lambda r: r["state"] == 11),
        ("state=7", lambda r: r["state"] == 7),
        ("jobid=10", lambda r: r["id_job"] == 10),
        ("jobid>100", lambda r: r["id_job"] > 100),
        ("jobid<5", lambda r: r["id_job"] < 5),
        ("jobid>=140", lambda r: r["id_job"] >= 140),
        ("jobid<=3", lambda r: r["id_job"] <= 3),
        ("jobid>=5&jobid<=9", lambda r: 5 <= r["id_job"] <= 9),
        (
            "user=alice&partition=batch&state=5",
            lambda r: r["id_user"] == 1001 and r["partition"] == "batch" and r["state"] == 5,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_each_filter_selects_exactly_its_rows(db: AccountingDB, raw: str, pred: Any) -> None:
    got = history(db, raw + "&limit=1000")
    if "jobid" in raw:
        want = sorted((r for r in VISIBLE if pred(r)), key=lambda r: (-r["id_job"], -r["time_submit"]))
        assert inxs(got) == [r["job_db_inx"] for r in want]
    else:
        assert inxs(got) == expect(pred)
    assert got, "each case should match some rows"


def test_user_without_passwd_entry_is_found_through_its_association(db: AccountingDB) -> None:
    if any(p.pw_name == "ghost" for p in pwd.getpwall()):
        pytest.skip("this host has a user ghost")
    jobs = history(db, "user=ghost")
    assert [(j.name, j.user_name, j.user_id) for j in jobs] == [("it's", "ghost", 2001)]


def test_unknown_user_gives_an_empty_page_not_an_error(db: AccountingDB) -> None:
    page = db.history(parse_history_query("user=nobody-here"))
    assert page.jobs == [] and page.next_cursor is None


def test_a_deleted_user_shows_its_uid_without_a_name(db: AccountingDB) -> None:
    assert GHOST_UID not in {p.pw_uid for p in pwd.getpwall()}
    (ghost,) = history(db, "jobname=ghost-job")
    assert (ghost.user_id, ghost.user_name, ghost.account) == (GHOST_UID, None, "gone")


@pytest.mark.parametrize(
    ("raw", "pred"),
    [
        (f"submitted_after={T + 200}", lambda r: r["time_submit"] >= T + 200),
        (f"submitted_before={T + 200}", lambda r: r["time_submit"] < T + 200),
        (
            f"submitted_after={T + 100}&submitted_before={T + 150}",
            lambda r: T + 100 <= r["time_submit"] < T + 150,
        ),
        (f"started_after={T + 300}", lambda r: r["time_start"] >= T + 300),
        (f"started_before={T + 100}", lambda r: 0 < r["time_start"] < T + 100),
        (f"ended_after={T + 400}", lambda r: r["time_end"] >= T + 400),
        (f"ended_before={T + 100}", lambda r: 0 < r["time_end"] < T + 100),
        ("submitted_after=2026-11-30T12:00:00Z", lambda r: r["time_submit"] >= 1796040000),
    ],
    ids=[
        "submitted-after",
        "submitted-before",
        "submitted-window",
        "started-after",
        "started-before",
        "ended-after",
        "ended-before",
        "iso",
    ],
)
def test_time_filters(db: AccountingDB, raw: str, pred: Any) -> None:
    assert inxs(history(db, raw + "&limit=1000")) == expect(pred)


def test_never_started_jobs_are_not_started_before_anything(db: AccountingDB) -> None:
    jobs = history(db, f"started_before={T + 10_000}&limit=1000")
    assert all(j.start_time is not None for j in jobs)
    assert "held-root" not in {j.name for j in jobs}


# -- decoded fields ------------------------------------------------------------------------


def by_name(db: AccountingDB, name: str) -> HistoryJob:
    (job,) = history(db, f"jobname={name}")
    return job


def test_failed_job_decodes_exit_code_3(db: AccountingDB) -> None:
    job = by_name(db, "fail-bob")
    assert (job.state, job.state_code, job.exit_code, job.exit_signal) == ("FAILED", 5, 3, 0)
    assert (job.user_name, job.account, job.association_id) == ("bob", "chemistry", 6)


def test_cancelled_job_decodes_its_signal(db: AccountingDB) -> None:
    job = by_name(db, "cancel-bob")
    assert (job.state, job.exit_code, job.exit_signal) == ("CANCELLED", 0, 15)


def test_out_of_memory_is_state_11_not_deadline(db: AccountingDB) -> None:
    job = by_name(db, "oom-alice")
    assert (job.state, job.state_code, job.exit_signal, job.derived_exit_signal) == (
        "OUT_OF_MEMORY",
        11,
        125,
        125,
    )


def test_timeout_and_limits(db: AccountingDB) -> None:
    job = by_name(db, "timeout-alice")
    assert job.state == "TIMEOUT"
    assert job.time_limit is not None and job.time_limit.total_seconds() == 60
    assert by_name(db, "hostname").time_limit is None  # INFINITE


def test_pending_held_job_has_no_start_nodes_or_allocation(db: AccountingDB) -> None:
    job = by_name(db, "held-root")
    assert (job.state, job.start_time, job.end_time, job.eligible_time, job.nodes, job.node_count) == (
        "PENDING",
        None,
        None,
        None,
        None,
        0,
    )
    assert (job.cpus, job.memory_mib) == (1, 100)  # from tres_req
    assert job.submit_time is not None and job.submit_time.tzinfo is not None


def test_allocation_comes_from_tres_alloc(db: AccountingDB) -> None:
    job = by_name(db, "hostname")
    assert (job.cpus, job.memory_mib, job.nodes, job.node_count) == (4, 8000, "n[1-4]", 4)
    steps = by_name(db, "steps-bob")
    assert steps.tres["gres/gpu"] == 1
    assert "energy" not in by_name(db, "fail-bob").tres  # NO_VAL64 energy dropped
    assert (steps.derived_exit_code, steps.derived_exit_signal) == (1, 0)


def test_array_tasks_and_plain_jobs(db: AccountingDB) -> None:
    tasks = history(db, "jobname=array-alice")
    assert sorted((j.job_id, j.array_job_id, j.array_task_id) for j in tasks) == [
        (6, 6, 3),
        (7, 6, 1),
        (8, 6, 2),
    ]
    plain = by_name(db, "fail-bob")
    assert (plain.array_job_id, plain.array_task_id) == (None, None)


def test_times_are_utc_aware(db: AccountingDB) -> None:
    job = by_name(db, "ok-alice")
    assert job.submit_time is not None and job.end_time is not None
    assert job.submit_time.utcoffset() is not None
    assert int(job.submit_time.timestamp()) == T + 20
    assert (job.work_dir, job.submit_line) == ("/home/alice", "sbatch ok-alice.sh")


# -- paging ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "filters", ["", "user=alice", "partition=batch", "jobid>=3", "state=3", "jobid<=120&user=alice"]
)
def test_cursor_pages_have_no_duplicates_and_no_gaps(db: AccountingDB, filters: str) -> None:
    whole = inxs(history(db, f"{filters}&limit=1000"))
    seen: list[int] = []
    cursor = ""
    for _ in range(100):
        page = db.history(parse_history_query(f"{filters}&limit=7{cursor}"))
        assert len(page.jobs) <= 7
        seen += inxs(page.jobs)
        if page.next_cursor is None:
            break
        cursor = f"&cursor={page.next_cursor}"
    assert seen == whole
    assert len(whole) > 7


def test_offset_paging_matches_the_seed(db: AccountingDB) -> None:
    whole = inxs(history(db, "limit=1000"))
    assert inxs(history(db, "limit=25&offset=25")) == whole[25:50]
    page = db.history(parse_history_query("limit=25&offset=25"))
    # an OFFSET page also hands out a cursor, so a client can switch to keyset paging
    assert page.next_cursor is not None
    assert inxs(history(db, f"limit=25&cursor={page.next_cursor}")) == whole[50:75]


def test_the_last_page_has_no_cursor(db: AccountingDB) -> None:
    n = len(VISIBLE)
    assert db.history(parse_history_query(f"limit={n}")).next_cursor is None
    assert db.history(parse_history_query(f"limit={n - 1}")).next_cursor is not None


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "limit=25",
        "limit=25&offset=25",
        "user=galaxy",
        "partition=high",
        "jobid<=987654",
        "jobname=g12345_bcftools",
        "state=1",
    ],
)
def test_every_seed_example_url_answers(db: AccountingDB, raw: str) -> None:
    page = db.history(parse_history_query(raw))
    assert len(page.jobs) <= page.limit
    if raw == "state=1":
        assert [j.name for j in page.jobs] == ["running-bob"]
    if raw == "jobid<=987654":
        assert len(page.jobs) == 10


# -- hostile input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "user=x' OR 1=1--",
        "user=x%27%20OR%20%271%27%3D%271",
        "jobname=x' OR '1'='1",
        "partition=debug' OR 1=1 -- ",
        "account=%22%29%20OR%201%3D1%23",
        "jobname=%",
        "partition=%25",
        "user=_",
        "partition=deb_g",
    ],
)
def test_injection_strings_match_nothing(db: AccountingDB, raw: str) -> None:
    assert history(db, raw + "&limit=1000") == []


def test_hidden_partition_names_are_not_like_patterns(ro_url: str) -> None:
    db = AccountingDB(ro_url, cluster=CLUSTER, hidden_partitions=["%"])
    try:
        assert len(history(db, "limit=1000")) == len([r for r in JOBS if not r["deleted"]])
    finally:
        db.close()


# -- read-only -----------------------------------------------------------------------------


def test_the_reader_cannot_write(db: AccountingDB) -> None:
    with db.engine.connect() as conn, pytest.raises(Exception, match=r"denied|READ ONLY"):
        conn.execute(text(f"DELETE FROM {CLUSTER}_job_table"))
    assert len(history(db, "limit=1000")) == len(VISIBLE)


def test_sessions_are_read_only_even_for_a_user_who_could_write() -> None:
    try:
        _admin().close()
    except pymysql.err.MySQLError as exc:
        pytest.skip(f"no MariaDB answers: {exc}")
    url = make_url(ADMIN_URL).set(database=DB_NAME).render_as_string(hide_password=False)
    root_db = AccountingDB(url, cluster=CLUSTER, query_timeout=3)
    try:
        with root_db.engine.connect() as conn:
            assert conn.execute(text("SELECT @@session.tx_read_only")).scalar() == 1
            assert conn.execute(text("SELECT @@session.max_statement_time")).scalar() == 3
            with pytest.raises(Exception, match="READ ONLY"):
                conn.execute(text(f"UPDATE {CLUSTER}_job_table SET state = 4"))
    finally:
        root_db.close()


# -- jobs_by_id, steps, users, find_jobs ----------------------------------------------------


def test_jobs_by_id_returns_every_submission_newest_first(db: AccountingDB) -> None:
    got = db.jobs_by_id([10, 3, 13, 424242])
    assert set(got) == {10, 3}  # 13 is in a hidden partition, 424242 does not exist
    assert [(j.job_db_inx, j.state) for j in got[10]] == [(11, "COMPLETED"), (10, "NODE_FAIL")]
    assert db.jobs_by_id([13], include_hidden=True)[13][0].partition == HIDDEN
    assert db.jobs_by_id([]) == {}


def test_steps_for_jobs(db: AccountingDB) -> None:
    steps = db.steps_for_jobs([16, 10, 3])
    assert [(s.step_id, s.step_name, s.state, s.exit_code) for s in steps[16]] == [
        (-5, "batch", "COMPLETED", 0),
        (-4, "extern", "COMPLETED", 0),
        (0, "hostname", "COMPLETED", 0),
        (1, "false", "FAILED", 1),
    ]
    assert steps[16][2].user_cpu_time.total_seconds() == 3.5
    (nodefail_batch,) = steps[10]
    assert (nodefail_batch.job_db_inx, nodefail_batch.exit_code, nodefail_batch.exit_signal) == (
        10,
        None,
        None,
    )
    assert 3 not in steps


def test_users_with_associations_and_limits(db: AccountingDB) -> None:
    users = {u.name: u for u in db.users()}
    assert set(users) == {"root", "alice", "bob", "ghost"}  # carol is deleted
    alice = users["alice"]
    assert (alice.uid, alice.admin_level, alice.default_account) == (
        UIDS["alice"] if _has_passwd("alice") else None,
        "none",
        "physics",
    )
    (assoc,) = alice.associations
    assert (assoc.id, assoc.account, assoc.partition, assoc.is_default) == (5, "physics", None, True)
    assert (assoc.limits.max_jobs, assoc.limits.max_submit_jobs, assoc.limits.max_wall_minutes) == (
        10,
        20,
        60,
    )
    assert assoc.limits.grp_tres == {"cpu": 8, "mem": 16000}
    assert assoc.limits.max_tres_per_job == {"gres/gpu": 2}
    assert assoc.limits.grp_jobs is None
    bob = users["bob"]
    assert bob.admin_level == "operator" and users["root"].admin_level == "administrator"
    assert [(a.account, a.shares) for a in bob.associations] == [("chemistry", 1), ("physics", 5)]
    assert bob.default_account == "chemistry"


def _has_passwd(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_users_by_name(db: AccountingDB) -> None:
    (root,) = db.users("root")
    assert (root.name, root.uid, root.default_account) == ("root", 0, "root")
    assert [a.account for a in root.associations] == ["physics", "root"]
    assert db.users("nobody-here") == []
    assert db.users("carol") == []
    assert db.users("x' OR 1=1--") == []


def test_find_jobs_by_criteria(db: AccountingDB) -> None:
    assert db.find_jobs({"user": "bob", "state": "FAILED"}) == [3]
    assert db.find_jobs({"user_id": 0, "partition": "batch"}) == [10]  # requeued: one id
    assert db.find_jobs({"array_job_id": 6}) == [6, 8, 7]
    assert db.find_jobs({"partition": HIDDEN}) == []
    assert db.find_jobs({"name": "secret-job"}, include_hidden=True) == [13]
    assert db.find_jobs({"account": "chemistry", "state": 1}) == [19]
    assert len(db.find_jobs({"association_id": 5}, limit=3)) == 3
    assert db.find_jobs({"user": "nobody-here"}) == []


@pytest.mark.parametrize(
    ("criteria", "param"),
    [
        ({"colour": "red"}, "colour"),
        ({"job_id": "5"}, "job_id"),
        ({"state": "SHINY"}, "state"),
        ({"partition": 3}, "partition"),
    ],
)
def test_find_jobs_rejects_bad_criteria(db: AccountingDB, criteria: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidInput) as err:
        db.find_jobs(criteria)
    assert err.value.param == param


# -- availability and configuration --------------------------------------------------------


def test_ping(db: AccountingDB) -> None:
    db.ping()


def test_a_missing_cluster_table_is_accounting_unavailable(ro_url: str) -> None:
    other = AccountingDB(ro_url, cluster="nosuchcluster", connect_timeout=1)
    with pytest.raises(AccountingUnavailable):
        other.ping()
    with pytest.raises(AccountingUnavailable):
        other.history(parse_history_query(""))
    other.close()


@pytest.mark.parametrize(
    "url",
    [
        "mysql+pymysql://nobody:pw@localhost/slurm_acct_db?unix_socket=/nonexistent/mysqld.sock",
        "mysql+pymysql://nobody:pw@127.0.0.1:1/slurm_acct_db",
        "mysql+pymysql://slurmtower_ro:wrong@localhost/slurmtower_test_acct?unix_socket=/run/mysqld/mysqld.sock",
    ],
    ids=["no-socket", "closed-port", "bad-password"],
)
# PyMySQL 1.1/2.x leaks the socket object when connecting to a missing unix socket fails;
# collect it here so its ResourceWarning is not blamed on a later test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_unreachable_database_is_accounting_unavailable_quickly(url: str) -> None:
    db = AccountingDB(url, cluster=CLUSTER, connect_timeout=1, query_timeout=1)
    started = time.monotonic()
    with pytest.raises(AccountingUnavailable) as err:
        db.history(parse_history_query(""))
    assert time.monotonic() - started < 5
    db.close()
    gc.collect()
    assert "wrong" not in str(err.value) and "pw@" not in str(err.value)
    assert err.value.http_status == 503


def test_from_settings_takes_cluster_tables_and_hidden_partitions(ro_url: str) -> None:
    settings = Settings.model_validate(
        {"cluster_name": CLUSTER, "accounting": {"url": ro_url}, "api": {"hidden_partitions": ["batch"]}}
    )
    db = AccountingDB.from_settings(settings)
    try:
        assert db.tables.job.name == "tc_job_table"
        assert "batch" not in {j.partition for j in history(db, "limit=1000")}
    finally:
        db.close()
    override = AccountingDB.from_settings(
        Settings.model_validate({"accounting": {"url": ro_url, "cluster": "x", "job_table": "tc_job_table"}})
    )
    assert (override.tables.job.name, override.tables.assoc.name) == ("tc_job_table", "x_assoc_table")
    with pytest.raises(ConfigError):
        AccountingDB.from_settings(Settings.model_validate({"cluster_name": CLUSTER}))
    with pytest.raises(ConfigError):
        AccountingDB(ro_url, cluster="bad name; DROP TABLE x")


# -- a latin1 accounting database (sites whose MariaDB predates utf8mb4 defaults) -------------

LATIN1_DB = "slurmtower_test_acct_latin1"


@pytest.fixture(scope="module")
def latin1_db(ro_url: str) -> Iterator[AccountingDB]:
    """slurmdbd's tables in latin1, as an older MariaDB creates them, with a job named café."""
    admin = _admin()
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{LATIN1_DB}`")
        cur.execute(f"CREATE DATABASE `{LATIN1_DB}` CHARACTER SET latin1")
        cur.execute(f"USE `{LATIN1_DB}`")
        ddl = SCHEMA.read_text().replace("`tc_", f"`{CLUSTER}_")
        ddl = ddl.replace("CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci", "CHARSET=latin1 COLLATE=latin1_swedish_ci")
        for stmt in re.split(r";\s*\n", ddl):
            if "CREATE TABLE" in stmt:
                cur.execute(stmt)
        cur.execute("SET NAMES utf8mb4")
        _insert(cur, "user_table", [dict(creation_time=T, name=n, admin_level=lvl, deleted=d) for n, lvl, d in USERS])
        _insert(cur, f"{CLUSTER}_assoc_table", [dict(creation_time=T, **a) for a in ASSOCS])
        base = dict(id_resv=0, id_wckey=0, id_group=100, het_job_id=0, het_job_offset=4294967294,
                    state_reason_prev=0, priority=1)
        _insert(cur, f"{CLUSTER}_job_table", [{**base, **_job(1, 1, "café", 5, 3)}, {**base, **_job(2, 2, "x", 6, 3)}])
        cur.execute(f"GRANT SELECT ON `{LATIN1_DB}`.* TO %s@'localhost'", (RO_USER,))
    db = AccountingDB(make_url(ro_url).set(database=LATIN1_DB).render_as_string(hide_password=False),
                      cluster=CLUSTER, connect_timeout=2, query_timeout=5)
    yield db
    db.close()
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{LATIN1_DB}`")
    admin.close()


@pytest.mark.parametrize("name", ["用户", "emoji-\U0001f600", "\u0100dam"], ids=["cjk", "emoji", "latin-ext"])
def test_a_name_a_latin1_table_cannot_hold_matches_nothing(latin1_db: AccountingDB, name: str) -> None:
    # MariaDB itself refuses these comparisons: "Illegal mix of collations (latin1_swedish_ci,
    # IMPLICIT) and (utf8mb4_general_ci,COERCIBLE)".
    for field in ("jobname", "account", "partition", "user"):
        assert latin1_db.history(parse_history_query(f"{field}={name}")).jobs == []
    assert latin1_db.users(name) == []
    assert latin1_db.find_jobs({"name": name}) == []
    assert latin1_db.find_jobs({"account": name, "user": name}) == []


def test_a_latin1_table_still_finds_the_names_it_holds(latin1_db: AccountingDB) -> None:
    assert [j.name for j in latin1_db.history(parse_history_query("jobname=café")).jobs] == ["café"]
    assert latin1_db.find_jobs({"name": "café"}) == [1]


def test_database_error_text_stays_in_the_server_log(ro_url: str, caplog: pytest.LogCaptureFixture) -> None:
    other = AccountingDB(ro_url, cluster="nosuchcluster", connect_timeout=1)
    try:
        with pytest.raises(AccountingUnavailable) as err:
            other.history(parse_history_query(""))
    finally:
        other.close()
    problem = str(err.value.to_problem())
    assert "nosuchcluster_job_table" not in problem and "exist" not in problem
    assert "nosuchcluster_job_table" in caplog.text
