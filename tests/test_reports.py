"""Usage reports (slurmtower.accounting.reports) against the local cluster's own accounting
database, with rollups slurmdbd itself made (``DevCluster.roll_up``: ``sacctmgr rollup``),
compared with what sreport and sacct say for the same range.

One module fixture runs a few jobs of different users, accounts and partitions, waits for
them to end and has slurmdbd roll their hours (and, nothing running, the rest of the month:
the day and month tables too) up once. Every comparison is in seconds (``sreport -t
seconds``), exact where both read the same rows.

What keeps both sides on the same rows, on a cluster earlier tests and runs used too:

* Nothing runs, starts or ends while the module compares: the fixture cancels what earlier
  tests left queued (a pending job that starts later changes the job table under sacct and
  the report, and each job record slurmdbd hears of after a rollup moves its
  ``last_ran_table`` back), and the one test that runs a job rolls up again once it ended.
* The module's range is one hour, the current one. sreport ends a range that ends in the
  future at now, rounded to the hour (``slurmdb_report_set_start_end_time``): it leaves out
  an unfinished hour when the range is longer and the hour less than 30 min old. Every
  sreport answer's own range (its header) is checked to be the one asked for.
* sacct lists every run of a requeued job (``--duplicates``), as the job table has them and
  sreport's job reports count them (``JOBCOND_FLAG_DUP``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slurmtower.accounting import AccountingDB
from slurmtower.accounting.reports import (
    AvailabilityQuery,
    EfficiencyQuery,
    Reports,
    UsageQuery,
    WaitQuery,
)
from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster, RollUp
from slurmtower.errors import InvalidInput, PermissionDenied
from slurmtower.models.event import NODE_STATE, Event
from slurmtower.models.reports import AvailabilityReport, EfficiencyReport, UsageReport, WaitReport
from slurmtower.principal import Principal
from slurmtower.settings import Settings, TokenEntry
from slurmtower.slurm import CliSlurmClient
from slurmtower.visibility import Visibility
from tests.auth_helpers import ADMIN, OPERATOR, READER, bearer, module_app_settings
from tests.conftest import sh, submit, wait_for

pytestmark = pytest.mark.release  # run again on every Slurm install (scripts/test.sh)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

SCRIPT = str(Path(sys.executable).with_name("slurmtower"))

#: The machine's zone: slurmdbd rolls days and months up at its local midnights.
ZONE = Path("/etc/timezone").read_text().strip() if Path("/etc/timezone").exists() else "UTC"
TRES = ("cpu", "mem")


@dataclass(frozen=True)
class Rolled:
    start: datetime
    end: datetime
    """The hours the jobs ran in, [start, end), rolled up by slurmdbd."""
    jobs: list[int]
    rollup: RollUp


def _local(t: datetime) -> str:
    return t.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _idle() -> bool:
    return not sh("squeue", "-h", "-t", "R,CG,S", "-o", "%A").split()


def _ended(jobs: list[int]) -> bool:
    out = sh("sacct", "-a", "-n", "-X", "-P", "-o", "JobIDRaw,End", "-j", ",".join(map(str, jobs)))
    ends = dict(line.split("|") for line in out.splitlines() if line)
    return all(ends.get(str(j), "Unknown") not in ("Unknown", "") for j in jobs)


def _queue_cleared() -> None:
    """No job queued, running or ending, and accounting told of every end. The suite owns the
    devcluster (tests/conftest.py ``_start_clean``): jobs earlier tests left pending (held,
    waiting for a node) would start or end while the module compares."""
    left = [int(j) for j in sh("squeue", "-h", "-o", "%A").split() if j.isdigit()]
    if left:
        subprocess.run(["scancel", *map(str, left)], capture_output=True, check=False)
    wait_for(lambda: not sh("squeue", "-h", "-o", "%A").split(), 150, 0.5, what="the queue to empty")
    if left:
        wait_for(lambda: _ended(left), 60, 0.5, what="accounting to hold the cancelled jobs' ends")


def _run_report_jobs() -> list[int]:
    common = ("-t", "2", "-o", "/dev/null")
    jobs = [
        submit("alice", "-J", "st-report-a", "-A", "physics", "-p", "batch", "-c", "2", *common,
               "--wrap", "timeout 3 sh -c 'while :; do :; done'; true"),
        submit("bob", "-J", "st-report-b", "-A", "chemistry", "-p", "debug", "-c", "1", *common,
               "--wrap", "sleep 2"),
        submit("bob", "-J", "st-report-c", "-A", "physics", "-p", "short", "-c", "2", *common,
               "--wrap", "sleep 1"),
        submit("root", "-J", "st-report-d", "-A", "physics", "-p", "debug", "-c", "1", *common,
               "--wrap", "srun -n 1 sleep 1"),
    ]
    # One job suspended for 2 s while it runs: sacct and Slurm's rollup take that time off
    # (the job-table reports must too; a suspension left by test_job_actions in the same hour
    # once made them 1 cpu-s apart).
    paused = submit("bob", "-J", "st-report-e", "-A", "chemistry", "-p", "debug", "-c", "1", *common,
                    "--wrap", "sleep 3")
    jobs.append(paused)
    wait_for(lambda: sh("squeue", "-h", "-j", str(paused), "-o", "%T").strip() == "RUNNING", 60, 0.2,
             what=f"job {paused} to run")
    sh("scontrol", "suspend", str(paused))
    time.sleep(2)  # the suspension's length is what is measured, not a wait for an event
    sh("scontrol", "resume", str(paused))
    wait_for(lambda: _ended(jobs) and _idle(), 90, 0.5, what="the report jobs to end")
    return jobs


@pytest.fixture(scope="module")
def rolled(devcluster: DevCluster) -> Rolled:
    # Jobs still running would be counted by the rollup up to the hour's end and by sacct up
    # to now; and later hours are rolled only with nothing running (DevCluster.roll_up).
    _queue_cleared()
    for _attempt in range(2):
        # The jobs take ~10 s: in one hour, the current one (see the module's docstring).
        hour = _hour(datetime.now(UTC))
        if hour + timedelta(hours=1) - datetime.now(UTC) < timedelta(seconds=45):
            wait_for(lambda h=hour: _hour(datetime.now(UTC)) > h, 60, 0.5, what="the next hour")
        jobs = _run_report_jobs()
        out = sh("sacct", "-a", "-n", "-X", "-P", "-o", "Start", "-j", ",".join(map(str, jobs)))
        start = _hour(min(datetime.fromisoformat(s).astimezone(UTC) for s in out.split()))
        if start == _hour(datetime.now(UTC)):
            break
    else:
        raise AssertionError("the report jobs ran across an hour's end twice")
    end = start + timedelta(hours=1)
    done = devcluster.roll_up(start=start, through="month")
    assert done.start == start and done.hours >= 1
    return Rolled(start=start, end=end, jobs=jobs, rollup=done)


@pytest.fixture(scope="module")
def reports(devcluster: DevCluster, cluster_settings: Settings) -> Iterator[Reports]:
    db = AccountingDB.from_settings(cluster_settings)
    yield Reports(db, tz=ZONE)
    db.close()


_SREPORT_RANGE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) - (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def sreport(start: datetime, end: datetime, *args: str) -> list[list[str]]:
    """sreport's rows for [start, end), checked against the range its header says it read
    (it moves an end in the future to now, rounded to the hour)."""
    out = sh("sreport", "-t", "seconds", "-P", *args, *_range(start, end))
    span = _SREPORT_RANGE.search(out)
    assert span, out
    assert span.groups() == (_local(start), _local(end - timedelta(seconds=1))), f"sreport read {span.group(0)}"
    rows = [line.split("|") for line in out.splitlines() if "|" in line]
    return rows[1:]  # after the column names


def user_lines(rows: list[list[str]]) -> dict[tuple[str, str, str], int]:
    """``sreport cluster AccountUtilizationByUser``'s usage per (account, login, TRES).

    A user with an association per partition too (alice in physics and physics/short) has
    several lines. 22.05 prints one per association, adding up. From 23.11 on (associations in
    a ``lineage`` tree) the user's first line already counts the partition associations below
    it: 26.05 prints that line alone, 24.11 the partition association's own line after it
    (counted twice if added up), so there the first line is the user's."""
    release = tuple(int(x) for x in sh("sinfo", "-V").split()[1].split(".")[:2])
    found: dict[tuple[str, str, str], int] = {}
    for r in rows:
        if not r[2]:
            continue
        key = (r[1], r[2], r[4])
        if key not in found:
            found[key] = int(r[5])
        elif release < (23, 11):
            found[key] += int(r[5])
    return found


def _range(start: datetime, end: datetime) -> tuple[str, str]:
    return f"start={_local(start)}", f"end={_local(end)}"


# -- the rollup ----------------------------------------------------------------------------------


def test_roll_up_leaves_slurmdbds_own_last_ran_alone(devcluster: DevCluster, rolled: Rolled) -> None:
    table = f"`{devcluster.db_name}`.`{devcluster.cluster_name}_last_ran_table`"
    for _attempt in range(2):
        hour = _hour(datetime.now(UTC))
        before = devcluster._sql(f"SELECT hourly_rollup FROM {table}")
        again = devcluster.roll_up(start=rolled.start)
        after = devcluster._sql(f"SELECT hourly_rollup FROM {table}")
        if _hour(datetime.now(UTC)) == hour:
            break  # else slurmdbd's own hourly rollup may have run in between: once more
    assert again.hours >= 1 and again.seconds < 10
    assert after == before
    now = int(time.time())
    assert not before.strip() or int(before) <= now  # never moved into the future


def test_roll_up_refuses_later_hours_while_a_job_runs(devcluster: DevCluster, rolled: Rolled) -> None:
    job = submit("alice", "-J", "st-report-run", "-A", "physics", "-p", "debug", "-t", "1", "--wrap", "sleep 60")
    try:
        wait_for(lambda: not _idle(), 30, 0.2, what=f"job {job} to run")
        # two hours ahead (through="day" in a day's last hour is the current hour: allowed)
        with pytest.raises(Exception, match="running"):
            devcluster.roll_up(end=datetime.now(UTC) + timedelta(hours=2))
    finally:
        subprocess.run(["scancel", str(job)], capture_output=True, check=False)
        # ended in accounting too: the reports and sacct below must read the same rows
        wait_for(lambda: _idle() and _ended([job]), 60, 0.5, what=f"job {job} to end")
        # and in every rollup the comparisons below read (hour, day and month alike)
        devcluster.roll_up(start=rolled.start, through="month")


# -- rollup sources against sreport ---------------------------------------------------------------


def test_cluster_usage_agrees_with_sreport_cluster_utilization(reports: Reports, rolled: Rolled) -> None:
    report = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="cluster", tres=TRES))
    assert report.source == "usage_hour"
    [group] = report.groups
    assert group.utilization is not None
    # The columns by their full names: sreport's default "planned" is PLND Down up to 23.11 and
    # the reserved time from 24.11 on (24.11's default header says "Planned" twice).
    rows = {r[1]: r for r in sreport(rolled.start, rolled.end, "cluster", "Utilization", "-T", "cpu,mem",
                                     "format=Cluster,TresName,Allocated,Down,PlannedDown,Idle,Reserved,Reported")}
    for name in TRES:
        # Cluster|TRES Name|Allocated|Down|PLND Down|Idle|Planned|Reported
        _cl, _t, alloc, down, pdown, idle, reserved, reported = rows[name]
        u = group.utilization[name]
        assert (u.allocated_seconds, u.down_seconds, u.planned_down_seconds, u.idle_seconds, u.reserved_seconds,
                u.reported_seconds) == tuple(map(int, (alloc, down, pdown, idle, reserved, reported))), name
        assert report.total_seconds[name] == int(alloc)
    assert report.total_seconds["cpu"] > 0


def test_account_usage_agrees_with_sreport_account_utilization_by_user(reports: Reports, rolled: Rolled) -> None:
    rows = sreport(rolled.start, rolled.end, "cluster", "AccountUtilizationByUser", "-T", "cpu,mem")
    # Cluster|Account|Login|Proper Name|TRES Name|Used
    accounts = {(r[1], r[4]): int(r[5]) for r in rows if not r[2]}
    users = user_lines(rows)
    own: dict[tuple[str, str], int] = defaultdict(int)
    for (account, _login, tres), used in users.items():
        own[(account, tres)] += used
    by_account = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account", tres=TRES))
    by_pair = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account+user", tres=TRES))
    assert by_account.source == by_pair.source == "assoc_usage_hour"
    for name in TRES:
        # an account's own usage is its users' lines (root's jobs of account root too); physics
        # and chemistry have no sub-accounts: sreport's line is theirs; root's is the total
        mine = {g.account: g.total_seconds[name] for g in by_account.groups if g.total_seconds[name]}
        assert mine == {a: s for (a, t), s in own.items() if t == name and s}, name
        for account in ("physics", "chemistry"):
            assert mine.get(account, 0) == accounts.get((account, name), 0), (account, name)
        assert by_account.total_seconds[name] == accounts[("root", name)]
        pairs = {(g.account, g.user): g.total_seconds[name] for g in by_pair.groups}
        assert pairs == {(a, u): s for (a, u, t), s in users.items() if t == name and s}, name
    assert {g.name for g in by_pair.groups} >= {"physics/alice", "chemistry/bob", "physics/bob", "physics/root"}
    assert sum(g.share["cpu"] for g in by_account.groups) == pytest.approx(1.0)


def test_user_usage_agrees_with_sreport_top_usage(reports: Reports, rolled: Rolled) -> None:
    """Each user's usage as sreport's TopUsage gives it (its ``group``: every account of a user
    on one line). 23.11-25.11's TopUsage counts a user's partition association twice (once in
    the user's own association, which holds it since the ``lineage`` tree, once on its own:
    alice 108 where her two associations hold 80 + 14, measured on 24.11; 26.05 counts it once):
    there the oracle is the same sreport's AccountUtilizationByUser, the user's lines added up
    as that release prints them (:func:`user_lines`)."""
    release = tuple(int(x) for x in sh("sinfo", "-V").split()[1].split(".")[:2])
    theirs: dict[tuple[str, str], int] = defaultdict(int)
    if (23, 11) <= release < (26, 5):
        lines = sreport(rolled.start, rolled.end, "cluster", "AccountUtilizationByUser", "-T", "cpu,mem")
        for (_account, login, tres), used in user_lines(lines).items():
            theirs[(login, tres)] += used
    else:
        rows = sreport(rolled.start, rolled.end, "user", "TopUsage", "-T", "cpu,mem", "group", "topcount=50")
        # Cluster|Login|Proper Name|Account|TRES Name|Used
        theirs.update({(r[1], r[4]): int(r[5]) for r in rows})
    report = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="user", tres=TRES))
    for name in TRES:
        assert {g.user: g.total_seconds[name] for g in report.groups if g.total_seconds[name]} == \
            {u: s for (u, t), s in theirs.items() if t == name and s}, name
    top = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="user", tres=TRES, top=1))
    assert len(top.groups) == 1 and top.omitted_groups == len(report.groups) - 1
    assert top.groups[0] == report.groups[0] and top.total_seconds == report.total_seconds


def test_hourly_periods_add_up_to_the_range(reports: Reports, rolled: Rolled) -> None:
    whole = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account", tres=TRES))
    hourly = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account", tres=TRES,
                                      period="hour"))
    assert len(hourly.periods) == (rolled.end - rolled.start) // timedelta(hours=1)
    for g, h in zip(whole.groups, hourly.groups, strict=True):
        assert g.name == h.name and len(h.cells) == len(hourly.periods)
        assert sum(c.tres_seconds["cpu"] for c in h.cells) == g.total_seconds["cpu"]
        assert h.total_hours["cpu"] == pytest.approx(g.total_seconds["cpu"] / 3600)


def test_day_and_month_tables_hold_what_the_hour_table_holds(reports: Reports, rolled: Rolled) -> None:
    """The days and month slurmdbd rolled (nothing running: through the month's end) sum the
    same hours, which sreport reads from the hour table: asked in two ranges it reads as given
    (the hours before the module's, then the module's), as it ends a longer range that ends in
    the future at now; no usage is in the hours still to come."""
    day0 = rolled.start.astimezone(reports.tz).replace(hour=0)
    day1 = (day0 + timedelta(days=1, hours=2)).replace(hour=0)
    month0 = day0.replace(day=1)
    month1 = (month0 + timedelta(days=32)).replace(day=1)
    for start, end, rollup, period in ((day0, day1, "day", "day"), (month0, month1, "month", "month")):
        total, own = 0, defaultdict(int)  # root's line; each account's own usage: its users' lines
        for a, b in ((start, rolled.start), (rolled.start, rolled.end)):
            if a < b:
                rows = sreport(a, b, "cluster", "AccountUtilizationByUser", "-T", "cpu")
                total += sum(int(r[5]) for r in rows if not r[2] and r[1] == "root")
                for (account, _login, _tres), used in user_lines(rows).items():
                    own[account] += used
        coarse = reports.usage(UsageQuery(start=start, end=end, group_by="account", rollup=rollup, period=period))
        fine = reports.usage(UsageQuery(start=start, end=end, group_by="account", period=period))
        so_far = reports.usage(UsageQuery(start=start, end=rolled.end, group_by="account"))
        assert coarse.source == f"assoc_usage_{rollup}" and fine.source == so_far.source == "assoc_usage_hour"
        assert coarse.total_seconds == fine.total_seconds == so_far.total_seconds == {"cpu": total}
        assert {g.name: g.total_seconds for g in coarse.groups} == {g.name: g.total_seconds for g in fine.groups} \
            == {g.name: g.total_seconds for g in so_far.groups}
        assert {g.name: g.total_seconds["cpu"] for g in so_far.groups if g.total_seconds["cpu"]} == \
            {a: v for a, v in own.items() if v}
        cluster = reports.usage(UsageQuery(start=start, end=end, group_by="cluster", rollup=rollup, period=period))
        assert cluster.source == f"usage_{rollup}"
        # The cluster table counts allocation only while the cluster was registered (its event
        # table): a worker's cluster made anew in the same day holds less than its associations,
        # so only its day and month tables are checked here; the exact comparison of the cluster
        # table with sreport is test_cluster_usage_agrees_with_sreport_cluster_utilization's.
        assert cluster.total_seconds["cpu"] > 0


# -- job-table sources against sacct ----------------------------------------------------------------


def _sacct_runs(start: datetime, end: datetime, *fields: str, truncate: bool = True,
                jobs: list[int] | None = None) -> list[tuple[dict[str, str], list[dict[str, str]]]]:
    """Each run's line with its steps' lines (read too: with -X, TotalCPU would be 0). Every
    run of a requeued job (``--duplicates``), as the job table has them."""
    fields = ("JobIDRaw", *fields) if "JobIDRaw" not in fields else fields
    argv = ["sacct", "-a", "-n", "-P", "-D", "-S", _local(start), "-E", _local(end), "-o", ",".join(fields)]
    if jobs:
        argv += ["-j", ",".join(map(str, jobs))]
    out = sh(*argv, *(["-T"] if truncate else []))
    runs: list[tuple[dict[str, str], list[dict[str, str]]]] = []
    for line in filter(None, out.splitlines()):
        row = dict(zip(fields, line.split("|"), strict=True))
        if "." not in row["JobIDRaw"]:
            runs.append((row, []))
        elif runs and row["JobIDRaw"].split(".")[0] == runs[-1][0]["JobIDRaw"]:
            runs[-1][1].append(row)  # sacct prints each run's steps right after it
    return runs


def _sacct_jobs(start: datetime, end: datetime, *fields: str, truncate: bool = True,
                jobs: list[int] | None = None) -> list[dict[str, str]]:
    return [job for job, _steps in _sacct_runs(start, end, *fields, truncate=truncate, jobs=jobs)]


def _ran(job: Mapping[str, str]) -> bool:
    """The run had an allocation. Not AllocCPUS: for a requeued job cancelled before it ran
    again, sacct prints the CPUs asked for (no AllocTRES, NodeList ``None assigned``). Not
    AllocTRES alone: a pending job the backfill scheduler planned keeps its plan there
    (``billing=1,cpu=1,mem=100M``, no node) though it never started (Start ``None``)."""
    return bool(job["AllocTRES"]) and job["AllocCPUS"] != "0" and job.get("Start") not in ("None", "Unknown")


def _alloc(tres: str) -> dict[str, int]:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    out = {}
    for pair in filter(None, tres.split(",")):
        key, _, value = pair.partition("=")
        out[key] = int(float(value[:-1]) * units[value[-1]]) if value[-1] in units else int(value)
    return out


@pytest.mark.parametrize("group_by,field", [("partition", "Partition"), ("qos", "QOS")])
def test_partition_and_qos_usage_agree_with_sacct(reports: Reports, rolled: Rolled, group_by: str,
                                                   field: str) -> None:
    sums: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(TRES, 0))
    for job in _sacct_jobs(rolled.start, rolled.end, field, "AllocTRES", "ElapsedRaw"):
        alloc = _alloc(job["AllocTRES"])
        for name in TRES:
            sums[job[field]][name] += alloc.get(name, 0) * int(job["ElapsedRaw"])
    report = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by=group_by, tres=TRES))
    assert report.source == "job_table"
    assert {g.name: g.total_seconds for g in report.groups} == {k: v for k, v in sums.items() if any(v.values())}
    # the range holds a suspension (the fixture's last job), taken off on both sides
    [paused] = _sacct_jobs(rolled.start, rolled.end, "Suspended", "ElapsedRaw", "Start", "End", truncate=False,
                           jobs=[rolled.jobs[-1]])
    assert paused["Suspended"] not in ("", "00:00:00"), paused
    if group_by == "partition":
        assert {"batch", "debug", "short"} <= {g.partition for g in report.groups}


def test_hidden_partitions_are_left_out_of_job_table_reports(cluster_settings: Settings, reports: Reports,
                                                             rolled: Rolled) -> None:
    shown = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="partition"))
    db = AccountingDB.from_settings(cluster_settings, hidden_partitions=["short"])
    try:
        hiding = Reports(db, tz=ZONE)
        report = hiding.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="partition"))
        assert "short" not in {g.name for g in report.groups}
        assert report.total_seconds["cpu"] == sum(g.total_seconds["cpu"] for g in shown.groups if g.name != "short")
        waits = hiding.waits(WaitQuery(start=rolled.start, end=rolled.end))
        assert "short" not in {r.partition for r in waits.rows}
        rollup = hiding.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account"))
        assert any("hidden partitions" in n for n in rollup.notes)
    finally:
        db.close()


def _bytes(text: str) -> int:
    """sacct's MaxRSS: ``3160K``, ``12.50M`` ..."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def _seconds(text: str) -> float:
    """sacct's TotalCPU: ``[D-][HH:]MM:SS[.mmm]``."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def test_efficiency_agrees_with_sacct(reports: Reports, rolled: Rolled) -> None:
    fields = ("JobIDRaw", "User", "Account", "AllocCPUS", "ElapsedRaw", "TotalCPU", "AllocTRES", "Start", "End",
              "MaxRSS", "NTasks")
    runs = [(j, steps) for j, steps in _sacct_runs(rolled.start, rolled.end, *fields, truncate=False)
            if _ran(j) and j["End"] not in ("Unknown", "")
            and rolled.start <= datetime.fromisoformat(j["End"]).astimezone(UTC) < rolled.end]
    jobs = [j for j, _steps in runs]
    assert {str(j) for j in rolled.jobs} <= {j["JobIDRaw"] for j in jobs}
    peak: dict[int, int] = defaultdict(int)  # by run
    for j, steps in runs:
        for step in steps:
            if step["MaxRSS"]:  # seff: the largest step max RSS, times its tasks
                peak[id(j)] = max(peak[id(j)], _bytes(step["MaxRSS"]) * int(step["NTasks"] or 1))
    report = reports.efficiency(EfficiencyQuery(start=rolled.start, end=rolled.end, group_by="account+user"))
    assert report.source == "job_table+step_table"
    rows = {(r.account, r.user): r for r in report.rows}
    expected: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for j in jobs:
        expected[(j["Account"], j["User"])].append(j)
    assert set(rows) == set(expected)
    for key, members in expected.items():
        row = rows[key]
        assert row.jobs == len(members)
        assert row.cpu_allocated_seconds == sum(int(j["AllocCPUS"]) * int(j["ElapsedRaw"]) for j in members)
        assert row.cpu_used_seconds == pytest.approx(sum(_seconds(j["TotalCPU"]) for j in members),
                                                     abs=0.001 * len(members) + 1e-9)
        assert row.memory_requested_bytes == sum(_alloc(j["AllocTRES"])["mem"] for j in members) * 1024 * 1024
        # sacct prints MaxRSS in KiB (rounded): within 1 KiB x tasks per job
        assert row.memory_used_bytes == pytest.approx(sum(peak[id(j)] for j in members),
                                                      abs=1024 * 4 * len(members))
    busy = rows[("physics", "alice")]
    assert busy.cpu_efficiency is not None and busy.cpu_used_seconds > 1  # the busy loop used its CPU
    assert report.total.jobs == len(jobs)


def test_waits_and_sizes_agree_with_sacct_and_sreport_sizes_by_account(reports: Reports, rolled: Rolled) -> None:
    report = reports.waits(WaitQuery(start=rolled.start, end=rolled.end, size_buckets=(2, 3)))
    assert report.source == "job_table"
    rows = sreport(rolled.start, rolled.end, "job", "SizesByAccount", "accounts=physics,chemistry",
                   "grouping=2,3", "printjobcount")
    # Cluster|Account|0-1 CPUs|2-2 CPUs|>= 3 CPUs|% of cluster
    theirs = {r[1]: [int(x) for x in r[2:5]] for r in rows}
    mine: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in report.rows:
        assert [(b.min_cpus, b.max_cpus) for b in row.sizes] == [(0, 1), (2, 2), (3, None)]
        for i, bucket in enumerate(row.sizes):
            mine[row.account][i] += bucket.jobs
    assert {a: v for a, v in mine.items() if a in ("physics", "chemistry")} == \
        {a: v for a, v in theirs.items() if any(v)}
    waits: dict[tuple[str, str], list[int]] = defaultdict(list)
    for j in _sacct_jobs(rolled.start, rolled.end, "Partition", "Account", "Submit", "Start", "AllocCPUS",
                         "AllocTRES", truncate=False):
        if j["Start"] in ("Unknown", "None", "") or not _ran(j):
            continue
        started = datetime.fromisoformat(j["Start"]).astimezone(UTC)
        if rolled.start <= started < rolled.end:
            waits[(j["Partition"], j["Account"])].append(
                int((started - datetime.fromisoformat(j["Submit"]).astimezone(UTC)).total_seconds()))
    got = {(r.partition, r.account): r for r in report.rows if r.started}
    assert set(got) == set(waits)
    for key, values in waits.items():
        assert got[key].started == len(values) and got[key].wait_max_seconds == max(values)
        assert got[key].wait_mean_seconds == pytest.approx(sum(values) / len(values))


# -- node availability ---------------------------------------------------------------------------


def test_availability_counts_a_drain_as_sacctmgr_shows_the_event(reports: Reports, clean_nodes: DevCluster,
                                                                client: CliSlurmClient) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    sh("scontrol", "update", "nodename=n2", "state=drain", "reason=st-report-drain")
    time.sleep(2)  # the drain's length is what is measured  # noqa: ASYNC251
    sh("scontrol", "update", "nodename=n2", "state=resume")

    def event() -> list[str] | None:
        out = sh("sacctmgr", "-n", "-P", "show", "event", "nodes=n2", f"start={_local(start)}",
                 "format=NodeName,Start,End,Reason")
        rows = [line.split("|") for line in out.splitlines() if "st-report-drain" in line]
        return rows[-1] if rows and rows[-1][2] not in ("Unknown", "") else None

    row = wait_for(event, 30, 0.3, what="the drain's event in accounting")
    length = int((datetime.fromisoformat(row[2]) - datetime.fromisoformat(row[1])).total_seconds())
    end = datetime.now(UTC) + timedelta(seconds=1)
    report = reports.availability(AvailabilityQuery(start=start, end=end, partitions=client.partitions()))
    assert report.source == "event_table"
    [n2] = [r for r in report.nodes if r.node == "n2"]
    assert n2.drained_seconds == length and n2.down_seconds == 0
    assert n2.reasons[0].reason == "st-report-drain" and n2.reasons[0].node_seconds == length
    parts = {p.partition: p for p in report.partitions}
    assert parts["batch"].drained_seconds == parts["debug"].drained_seconds == length
    assert parts["short"].drained_seconds == 0 and parts["short"].available == 1.0
    assert parts["batch"].nodes == 2 and parts["batch"].available < 1.0


# -- bad input ------------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("query,param", [
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), group_by="node"), "group_by"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), tres=("gres/nope",)), "tres"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), tres=()), "tres"),
    (UsageQuery(start=T0, end=T0), "end"),
    (UsageQuery(start=T0, end=T0 - timedelta(hours=1)), "end"),
    (UsageQuery(start=T0, end=T0 + timedelta(days=400)), "end"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), top=0), "top"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), top=1001), "top"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), period="year"), "period"),
    (UsageQuery(start=T0, end=T0 + timedelta(days=60), period="hour"), "period"),
    (UsageQuery(start=T0 + timedelta(minutes=5), end=T0 + timedelta(hours=1)), "start"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), rollup="day"), "end"),
    (UsageQuery(start=T0, end=T0 + timedelta(days=1), rollup="day", period="hour"), "period"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), rollup="week"), "rollup"),
    (UsageQuery(start="yesterday", end=T0), "start"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), group_by="cluster", users=("alice",)), "users"),
    (UsageQuery(start=T0, end=T0 + timedelta(hours=1), users=tuple(f"u{i}" for i in range(101))), "users"),
    (EfficiencyQuery(start=T0, end=T0 + timedelta(hours=1), group_by="partition"), "group_by"),
    (WaitQuery(start=T0, end=T0 + timedelta(hours=1), size_buckets=(50, 10)), "size_buckets"),
    (AvailabilityQuery(start=T0, end=T0 + timedelta(hours=1), top_reasons=0), "top_reasons"),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_bad_input_names_the_parameter(reports: Reports, query: object, param: str) -> None:
    call = {UsageQuery: reports.usage, EfficiencyQuery: reports.efficiency, WaitQuery: reports.waits,
            AvailabilityQuery: reports.availability}[type(query)]
    with pytest.raises(InvalidInput) as err:
        call(query)  # type: ignore[operator]
    assert err.value.param == param


def test_a_job_table_report_takes_any_second(reports: Reports, rolled: Rolled) -> None:
    start = rolled.start + timedelta(seconds=17)
    report = reports.usage(UsageQuery(start=start.isoformat(), end=int(rolled.end.timestamp()) - 3,
                                      group_by="partition"))
    assert report.start == start and report.periods[0].start == start


# -- the HTTP route, who sees what, the CLI --------------------------------------------------------

ALICE = "stw_test_alice_user_token"


@pytest.fixture(scope="module")
def api(cluster_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    s = module_app_settings(cluster_settings, tmp_path_factory.mktemp("reports-api"))
    s.accounting.time_zone = ZONE  # as the `reports` fixture's, which the answers are compared with
    s.auth.tokens = [*s.auth.tokens, TokenEntry(name="alice", role="user", sha256=hash_token(ALICE))]
    with TestClient(create_app(s)) as client:
        yield client


def _params(rolled: Rolled, **extra: str) -> dict[str, str]:
    return {"start": rolled.start.isoformat(), "end": rolled.end.isoformat(), **extra}


def test_the_usage_route_answers_as_the_library_in_json_and_csv(api: TestClient, reports: Reports,
                                                                 rolled: Rolled) -> None:
    params = _params(rolled, group_by="account+user", tres="cpu,mem", period="hour")
    got = api.get("/reports/usage", params=params, headers=bearer(OPERATOR))
    assert got.status_code == 200, got.text
    want = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account+user", tres=TRES,
                                    period="hour"))
    assert got.json() == want.model_dump(mode="json")
    assert got.json()["total_seconds"]["cpu"] > 0
    as_csv = api.get("/reports/usage", params={**params, "format": "csv"}, headers=bearer(OPERATOR))
    by_accept = api.get("/reports/usage", params=params, headers={**bearer(OPERATOR), "Accept": "text/csv"})
    assert as_csv.headers["content-type"].startswith("text/csv") and as_csv.text == by_accept.text
    assert as_csv.headers["content-disposition"].startswith('attachment; filename="slurmtower-usage-')
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    # one row per group, hour and TRES; the CPU-seconds add up to the report's total
    assert len(rows) == len(want.groups) * len(want.periods) * len(TRES)
    assert sum(int(r["tres_seconds"]) for r in rows if r["tres"] == "cpu") == want.total_seconds["cpu"]


def test_a_user_sees_their_own_usage_and_their_accounts_totals(api: TestClient, reports: Reports,
                                                               rolled: Rolled) -> None:
    mine = sorted({a.account for u in reports.db.users("alice") for a in u.associations})
    assert mine
    alice = bearer(ALICE)
    own = api.get("/reports/usage", params=_params(rolled, group_by="user"), headers=alice).json()
    assert [g["user"] for g in own["groups"]] == ["alice"]
    everyone = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="user"))
    assert len(everyone.groups) > 1  # bob and root used the cluster too: they are left out
    accounts = api.get("/reports/usage", params=_params(rolled, group_by="account"), headers=alice).json()
    assert {g["account"] for g in accounts["groups"]} <= set(mine)
    assert accounts == reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account",
                                                accounts=mine)).model_dump(mode="json")
    # the cluster's and partitions' totals are no one's own figures
    assert api.get("/reports/usage", params=_params(rolled, group_by="cluster"), headers=alice).status_code == 200
    for extra, param in (({"users": "bob"}, "users"), ({"group_by": "account", "accounts": "chemistry"}, "accounts"),
                         ({"group_by": "user", "users": "alice,bob"}, "users")):
        if extra.get("accounts") in mine:
            continue
        refused = api.get("/reports/usage", params=_params(rolled, **extra), headers=alice)
        assert refused.status_code == 403 and refused.json()["param"] == param, refused.text
    eff = api.get("/reports/efficiency", params=_params(rolled), headers=alice).json()
    assert {r["user"] for r in eff["rows"]} <= {"alice"}


def test_readers_see_totals_only(api: TestClient, rolled: Rolled) -> None:
    reader = bearer(READER)
    for group_by in ("user", "account+user"):
        refused = api.get("/reports/usage", params=_params(rolled, group_by=group_by), headers=reader)
        assert refused.status_code == 403 and refused.json()["param"] == "group_by"
    refused = api.get("/reports/usage", params=_params(rolled, group_by="partition", users="alice"), headers=reader)
    assert refused.status_code == 403 and refused.json()["param"] == "users"
    for kind, extra in (("usage", {"group_by": "account"}), ("usage", {"group_by": "partition"}),
                        ("efficiency", {"group_by": "account"}), ("waits", {}), ("availability", {})):
        assert api.get(f"/reports/{kind}", params=_params(rolled, **extra), headers=reader).status_code == 200, kind
    assert api.get("/reports/usage", params=_params(rolled)).status_code == 401


@pytest.mark.parametrize(("access", "role", "group_by", "users", "accounts", "expect"), [
    ("all", "reader", "user", [], [], ([], [])),
    ("none", "reader", "cluster", [], [], "group_by=None"),
    ("own", "user", "account+user", [], ["physics"], (["alice"], ["physics"])),
    ("own", "user", "partition", ["alice"], [], (["alice"], [])),
    ("totals", "user", "account", [], ["chemistry"], ([], ["chemistry"])),
    ("totals", "user", "user", [], [], "group_by"),
], ids=["all", "none", "own-pair", "own-partition", "totals-account", "totals-user"])
def test_what_the_site_opens_to_readers_and_users(access: str, role: str, group_by: str, users: list[str],
                                                  accounts: list[str], expect: object) -> None:
    policy = Visibility(reports_for_readers=access if role == "reader" else "totals",
                        reports_for_users=access if role == "user" else "own")
    who = Principal(name="alice", role=role)
    asked = []

    def own() -> list[str]:
        asked.append(1)
        return ["physics"]

    if isinstance(expect, str):
        with pytest.raises(PermissionDenied) as denied:
            policy.report_filters(who, group_by=group_by, users=users, accounts=accounts, own_accounts=own)
        assert denied.value.extra.get("param") == (None if expect == "group_by=None" else expect)
        return
    assert policy.report_filters(who, group_by=group_by, users=users, accounts=accounts, own_accounts=own) == expect
    operator = Principal(name="otto", role="operator")
    assert policy.report_filters(operator, group_by="user", users=["bob"], accounts=[], own_accounts=own) == (["bob"], [])
    assert not asked or access == "own"  # slurmdbd is asked for the accounts only when they matter


@pytest.mark.parametrize(("path", "extra", "param"), [
    ("/reports/usage", {"start": None}, "start"),
    ("/reports/usage", {"end": None}, "end"),
    ("/reports/usage", {"start": "yesterday"}, "start"),
    ("/reports/usage", {"group_by": "planet"}, "group_by"),
    ("/reports/usage", {"period": "fortnight"}, "period"),
    ("/reports/usage", {"tres": "cpu,unobtainium"}, "tres"),
    ("/reports/usage", {"top": "0"}, "top"),
    ("/reports/usage", {"top": "ten"}, "top"),
    ("/reports/usage", {"format": "xml"}, "format"),
    ("/reports/usage", {"color": "red"}, "color"),
    ("/reports/efficiency", {"group_by": "partition"}, "group_by"),
    ("/reports/waits", {"size_buckets": "10,x"}, "size_buckets"),
    ("/reports/availability", {"partitions": "nope"}, "partitions"),
], ids=lambda v: str(v) if not isinstance(v, dict) else ",".join(v))
def test_bad_report_input_is_a_400_naming_the_parameter(api: TestClient, rolled: Rolled, path: str,
                                                        extra: dict[str, str | None], param: str) -> None:
    params = {k: v for k, v in {**_params(rolled), **extra}.items() if v is not None}
    resp = api.get(path, params=params, headers=bearer(ADMIN))
    assert resp.status_code == 400, resp.text
    assert resp.json()["param"] == param and resp.headers["content-type"] == "application/problem+json"


def test_the_cli_prints_the_report_and_refuses_bad_input(devcluster: DevCluster, reports: Reports,
                                                         rolled: Rolled, tmp_path: Path) -> None:
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path), "SLURMTOWER_ACCOUNTING__TIME_ZONE": ZONE}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, "report", *args], capture_output=True, text=True, env=env, timeout=60,
                              check=False)

    span = ("--start", rolled.start.isoformat(), "--end", rolled.end.isoformat())
    res = cli("usage", *span, "--group-by", "account", "--tres", "cpu,mem", "-o", "json")
    assert res.returncode == 0, res.stderr
    want = reports.usage(UsageQuery(start=rolled.start, end=rolled.end, group_by="account", tres=TRES))
    assert json.loads(res.stdout) == want.model_dump(mode="json")
    res = cli("usage", *span, "--group-by", "account")
    lines = res.stdout.splitlines()
    assert res.returncode == 0 and lines[0].split()[:3] == ["period_start", "period_end", "group"]
    assert {line.split()[2] for line in lines[1:len(want.groups) + 1]} == {g.name for g in want.groups}
    assert lines[len(want.groups) + 1] == "source: assoc_usage_hour"
    res = cli("usage", *span, "--group-by", "planet")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "group_by" in res.stderr, res.stderr
    res = cli("usage", "--end", rolled.end.isoformat())
    assert res.returncode == 2 and "--start" in res.stderr
    res = cli("availability", *span, "-o", "csv")
    assert res.returncode == 0 and res.stdout.startswith("partition,node,nodes,"), res.stderr


@pytest.mark.parametrize("kind", ["usage", "efficiency", "waits", "availability"])
def test_a_quiet_range_is_a_csv_with_its_header_row(api: TestClient, devcluster: DevCluster, kind: str,
                                                    tmp_path: Path) -> None:
    """A range nothing ran in (a quiet week) is still a CSV with its columns: a spreadsheet
    import or a script reading the columns works (it was a 0-byte file), from the API and the
    CLI alike."""
    from slurmtower.runtime.reports import report_columns

    params = {"start": "2020-01-06T00:00:00+00:00", "end": "2020-01-13T00:00:00+00:00"}
    if kind == "waits":
        params["size_buckets"] = "2,8"
    as_json = api.get(f"/reports/{kind}", params=params, headers=bearer(ADMIN))
    assert as_json.status_code == 200, as_json.text
    as_csv = api.get(f"/reports/{kind}", params={**params, "format": "csv"}, headers=bearer(ADMIN))
    assert as_csv.status_code == 200 and as_csv.text.endswith("\n")
    header, *rows = as_csv.text.splitlines()
    model = {"usage": UsageReport, "efficiency": EfficiencyReport, "waits": WaitReport,
             "availability": AvailabilityReport}[kind]
    assert header.split(",") == report_columns(model.model_validate(as_json.json()))
    if kind in ("usage", "waits"):
        assert rows == []  # nothing ran: the header alone
    if kind == "waits":
        assert header.endswith("jobs_0-1_cpus,jobs_2-7_cpus,jobs_8-_cpus")
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}
    extra = ["--size-buckets", "2,8"] if kind == "waits" else []
    cli = subprocess.run([SCRIPT, "report", kind, "--start", params["start"], "--end", params["end"], *extra,
                          "-o", "csv"], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines()[0] == header


def test_availability_counts_the_transitions_slurmtower_recorded(api: TestClient, rolled: Rolled) -> None:
    """Beside slurmdbd's event table: each node row says how many state changes slurmtower's
    own event store holds for the node in the range (none outside it counted)."""
    store = api.app.state.services.event_store
    params = _params(rolled)
    before = api.get("/reports/availability", params=params, headers=bearer(OPERATOR)).json()
    assert before["nodes"], "the module's drains left no node with drained time in the range"
    node = before["nodes"][0]["node"]
    inside, outside = rolled.start + timedelta(minutes=1), rolled.start - timedelta(minutes=1)
    store.append([Event(type=NODE_STATE, time=t, source="test", node=node, payload={})
                  for t in (inside, inside, outside)])
    after = api.get("/reports/availability", params=params, headers=bearer(OPERATOR)).json()
    counts = {row["node"]: row["recorded_transitions"] for row in after["nodes"]}
    was = {row["node"]: row["recorded_transitions"] for row in before["nodes"]}
    assert counts[node] == was[node] + 2
    assert all(counts[n] == was[n] for n in counts if n != node)
    assert any("recorded_transitions" in note for note in after["notes"])
