"""Usage reports from slurmdbd's database: who used what, how efficiently, how long jobs
waited, how available the nodes were (issue 24).

::

    reports = Reports(AccountingDB.from_settings(settings))
    month = reports.usage(UsageQuery(start=datetime(2026, 11, 1, tzinfo=UTC),
                                     end=datetime(2026, 12, 1, tzinfo=UTC),
                                     period="day", group_by="account", tres=("cpu", "gres/gpu")))

Read-only SQLAlchemy Core over :class:`~slurmtower.accounting.AccountingDB`'s engine (the same
read-only sessions and statement timeout). Each question is read where it is cheapest and
right, and the answer names its ``source``:

=====================  =============================================  ==============================
question               source                                         as
=====================  =============================================  ==============================
group_by=cluster       ``<c>_usage_{hour,day,month}_table``           ``sreport cluster Utilization``
account, user,         ``<c>_assoc_usage_{hour,day,month}_table``     ``sreport cluster
account+user           joined to ``<c>_assoc_table``                  AccountUtilizationByUser``,
                                                                      ``sreport user TopUsage``
partition, qos         ``<c>_job_table`` (``tres_alloc``, run time    ``sacct`` sums
                       clipped to the range)
efficiency             job + step tables                              ``seff``
waits, job sizes       job table                                      ``sreport job SizesByAccount``
availability           ``<c>_event_table``                            ``sacctmgr show event``
=====================  =============================================  ==============================

Rollup tables are picked as sreport's ``set_usage_information`` (``common_as.c``) does: the
month table when start and end are first-of-month midnights more than a day apart, the day
table when both are midnights at least a day apart, else the hour table; never a coarser table
when the range ends in the future (slurmdbd has not rolled those days up yet). Midnights and
months are those of ``tz``, the zone slurmdbd runs in (it rolls up in its local time). A
``period`` finer than the table is refused; ``rollup=`` forces a table.

Decisions:

* **Accounts count their own associations only.** slurmdbd rolls usage up per association
  (a user in an account); sreport's AccountUtilizationByUser adds every sub-account's usage
  to its parent (``root`` is the whole cluster). Here an account's figure is the usage charged
  to that account itself, so the groups partition the total and the shares add up to 1; for
  an account without sub-accounts (the usual leaf) it is sreport's figure.
* **Hidden partitions** are left out where the source names the partition: the job table
  (partition, QOS, efficiency, waits). Rollups cannot say the partition: their figures include
  the hidden partitions' usage (said in ``notes``).
* **The job table** counts each job's allocated TRES x its run time clipped to the range,
  running jobs up to now, each suspension clipped to the range taken off (as Slurm's rollup
  and ``sacct`` do, from ``<c>_suspend_table``).

Indexes each query uses (EXPLAIN on the devcluster's MariaDB 10.11, 22.05's schema; a small
database; at 1,000,000 jobs: bench/results/reports-2026-12-03.md), none created here:

* cluster rollups: ``PRIMARY (id_tres, time_start)``, a range per TRES;
* association rollups: ``<c>_assoc_table`` read first (it is small), then
  ``PRIMARY (id, id_tres, time_start)`` of the rollup table per association, a range on
  ``time_start`` (the ``time_start`` index is the other plan);
* job-table usage and waits: ``rollup2 (time_end, time_eligible)``, range on ``time_end``
  (``FORCE INDEX``: on its own MariaDB scanned the table at 300,000 jobs and more), under
  slurmdbd's own rollup condition; usage reads only the jobs whose ``tres_alloc`` names a
  TRES asked, then the suspensions of those with a suspended time by ``PRIMARY (job_db_inx,
  time_start)`` of ``<c>_suspend_table``, 1,000 jobs a query;
* efficiency: ``rollup2 (time_end, time_eligible)``, range on ``time_end`` (``FORCE INDEX``),
  the steps joined by ``PRIMARY (job_db_inx, id_step, ...)``, grouped by job in a derived
  table (a temporary table; ``LIMIT`` the job bound), then by association: MariaDB adds the
  figures up and one row per association leaves the server (correlated subqueries per job
  instead: ~1.8x slower at 1,000,000 jobs);
* availability: ``time_start_end (time_start, time_end)``, range on ``time_start`` (a scan
  while the event table is a few rows);
* names: ``PRIMARY`` of ``<c>_assoc_table``; ``tres_table`` and ``qos_table`` are read whole.

Every query is bounded: the range (at most :attr:`Reports.max_range`), the periods (at most
:attr:`Reports.max_periods`) and the job rows read (at most :attr:`Reports.max_job_rows`;
beyond, the answer is an :class:`InvalidInput` asking for a shorter range).
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Integer,
    MetaData,
    Numeric,
    SmallInteger,
    Table,
    Text,
    and_,
    case,
    cast,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from slurmtower.accounting.db import AccountingDB, _partition_member, parse_tres
from slurmtower.accounting.query import parse_time
from slurmtower.errors import ConfigError, InvalidInput
from slurmtower.models.partition import Partition
from slurmtower.models.reports import (
    GROUP_BY,
    PERIODS,
    ROLLUPS,
    AvailabilityReport,
    AvailabilityRow,
    ClusterUtilization,
    DownReason,
    EfficiencyReport,
    EfficiencyRow,
    SizeBucket,
    UsageCell,
    UsageGroup,
    UsagePeriod,
    UsageReport,
    WaitReport,
    WaitRow,
)
from slurmtower.nodeset import NodeSet

__all__ = [
    "DEFAULT_SIZE_BUCKETS",
    "AvailabilityQuery",
    "EfficiencyQuery",
    "ReportTables",
    "Reports",
    "UsageQuery",
    "WaitQuery",
    "build_report_tables",
]

DEFAULT_SIZE_BUCKETS = (50, 250, 500, 1000)
"""sreport job SizesByAccount's default ``grouping``: 0-49, 50-249, 250-499, 500-999, >= 1000 CPUs."""
_MEM_PER_CPU = 1 << 63  # mem_req's flag: the value is per CPU, not per node (slurm.h MEM_PER_CPU)
_EFFICIENCY_SUMS = ("jobs", "cpu_alloc", "cpu_usec", "mem_req", "mem_used")
_NODE_STATE_DRAIN = 1 << 9
_NODE_STATE_FAIL = 1 << 13
_MAX_NAMES = 100
_HOUR = 3600
_DAY = 86400


# -- queries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageQuery:
    """What :meth:`Reports.usage` answers. ``start``/``end``: UTC datetimes, ISO 8601 text or
    Unix seconds; hour-aligned for the rollup sources. ``tres``: names as ``tres_table`` has
    them (``cpu``, ``mem``, ``energy``, ``gres/gpu`` ...). ``top``: the N largest groups.
    ``users``/``accounts``: only those (not for ``group_by=cluster``)."""

    start: datetime | str | int
    end: datetime | str | int
    period: str = "range"
    group_by: str = "account"
    tres: Sequence[str] = ("cpu",)
    top: int | None = None
    users: Sequence[str] = ()
    accounts: Sequence[str] = ()
    rollup: str = "auto"


@dataclass(frozen=True)
class EfficiencyQuery:
    """Jobs that ended in ``[start, end)``, grouped by ``user``, ``account`` or ``account+user``."""

    start: datetime | str | int
    end: datetime | str | int
    group_by: str = "user"
    top: int | None = None
    users: Sequence[str] = ()
    accounts: Sequence[str] = ()


@dataclass(frozen=True)
class WaitQuery:
    """Jobs that ran in ``[start, end)`` by partition and account; ``size_buckets`` are the
    lower bounds of the CPU-count buckets after the first (sreport's ``grouping=``)."""

    start: datetime | str | int
    end: datetime | str | int
    size_buckets: Sequence[int] = DEFAULT_SIZE_BUCKETS
    partitions: Sequence[str] = ()
    accounts: Sequence[str] = ()


@dataclass(frozen=True)
class AvailabilityQuery:
    """Down and drained time in ``[start, end)`` (up to now). ``partitions``: every partition
    of the cluster, hidden ones too (slurmdbd does not know which nodes each has; the caller's
    live view does; the visibility policy needs them all to know the nodes only in hidden
    ones); ``wanted``: the partitions reported (none: every visible one)."""

    start: datetime | str | int
    end: datetime | str | int
    partitions: Sequence[Partition] = ()
    top_reasons: int = 10
    wanted: Sequence[str] = ()


# -- tables ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportTables:
    job: Table
    usage: Mapping[str, Table]
    """``hour``/``day``/``month``: ``<c>_usage_<x>_table``."""
    assoc_usage: Mapping[str, Table]
    event: Table
    qos: Table
    suspend: Table
    """``<c>_suspend_table``: one row per suspension, ``time_end`` 0 while it lasts."""


def build_report_tables(cluster: str, *, job_table: str) -> ReportTables:
    """The tables the reports read beyond :func:`~slurmtower.accounting.build_tables`'s, each
    with only the columns read (every release from 22.05 has them)."""
    md = MetaData()
    job = Table(
        job_table, md,
        Column("job_db_inx", BigInteger, primary_key=True), Column("deleted", SmallInteger),
        Column("account", Text), Column("id_assoc", BigInteger), Column("id_qos", BigInteger),
        Column("id_user", BigInteger), Column("partition", Text), Column("mem_req", BigInteger),
        Column("nodes_alloc", BigInteger), Column("time_submit", BigInteger), Column("time_eligible", BigInteger),
        Column("time_start", BigInteger), Column("time_end", BigInteger), Column("time_suspended", BigInteger),
        Column("tres_alloc", Text),
    )
    usage = {
        grain: Table(
            f"{cluster}_usage_{grain}_table", md,
            Column("id_tres", Integer, primary_key=True), Column("time_start", BigInteger, primary_key=True),
            Column("deleted", SmallInteger), Column("count", BigInteger), Column("alloc_secs", BigInteger),
            Column("down_secs", BigInteger), Column("pdown_secs", BigInteger), Column("idle_secs", BigInteger),
            Column("plan_secs", BigInteger), Column("over_secs", BigInteger),
        )
        for grain in ("hour", "day", "month")
    }
    assoc_usage = {
        grain: Table(
            f"{cluster}_assoc_usage_{grain}_table", md,
            Column("id", BigInteger, primary_key=True), Column("id_tres", Integer, primary_key=True),
            Column("time_start", BigInteger, primary_key=True), Column("deleted", SmallInteger),
            Column("alloc_secs", BigInteger),
        )
        for grain in ("hour", "day", "month")
    }
    event = Table(
        f"{cluster}_event_table", md,
        Column("node_name", Text, primary_key=True), Column("time_start", BigInteger, primary_key=True),
        Column("time_end", BigInteger), Column("state", BigInteger), Column("reason", Text),
    )
    qos = Table("qos_table", md, Column("id", Integer, primary_key=True), Column("deleted", SmallInteger),
                Column("name", Text))
    suspend = Table(
        f"{cluster}_suspend_table", md,
        Column("job_db_inx", BigInteger, primary_key=True), Column("time_start", BigInteger, primary_key=True),
        Column("time_end", BigInteger),
    )
    return ReportTables(job=job, usage=usage, assoc_usage=assoc_usage, event=event, qos=qos, suspend=suspend)


# -- helpers ---------------------------------------------------------------------------------


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _hours(seconds: Mapping[str, int | float]) -> dict[str, float]:
    return {k: v / _HOUR for k, v in seconds.items()}


def _names(values: Sequence[str], param: str) -> list[str]:
    if isinstance(values, str):
        values = [v for v in values.split(",") if v]
    names = list(dict.fromkeys(values))
    if len(values) > _MAX_NAMES:  # counted as given: a name twice is two of the list's
        raise InvalidInput(f"{param}: at most {_MAX_NAMES} names", param=param)
    for name in names:
        if not isinstance(name, str) or not name or len(name) > 256 or any(c in name for c in "\0\n"):
            raise InvalidInput(f"{param}: {str(name)[:60]!r} is not a name", param=param)
    return names


def _tres_value(column: Any, tres_id: int) -> ColumnElement[Any]:
    """``tres_id``'s count in a TRES string (``"1=2,2=1000"``) as MariaDB reads it, 0 when absent
    (``parse_tres``'s: the value after the last ``,<id>=``; values at or above 2**63 dropped)."""
    text = func.substring_index(func.substring_index(func.concat(",", column), f",{tres_id}=", -1), ",", 1)
    value = cast(text, Numeric(20, 0))
    return case((value < literal_column(str(2**63)), value), else_=0)


class _FirstBy(FunctionElement[Any]):
    """``_FirstBy(value, key, *then)``: ``value`` of the row with the largest ``key``, the first
    by ``then`` among equals, as text (MariaDB/MySQL ``GROUP_CONCAT(... ORDER BY ...)``, cut at
    the first comma; only the first value matters, so ``group_concat_max_len`` does not)."""

    name = "group_concat"
    inherit_cache = True


@compiles(_FirstBy)
def _first_by(element: _FirstBy, compiler: Any, **kw: Any) -> str:
    value, key, *then = (compiler.process(c, **kw) for c in element.clauses)
    order = ", ".join([f"{key} DESC", *then])
    return f"substring_index(group_concat({value} ORDER BY {order}), ',', 1)"


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


@dataclass
class _Range:
    start: int
    end: int
    bounds: list[int] = field(default_factory=list)
    """Period starts, then the range's end: period i is [bounds[i], bounds[i+1])."""

    def index(self, t: int) -> int:
        return bisect.bisect_right(self.bounds, t) - 1

    def split(self, t0: int, t1: int) -> Iterable[tuple[int, int]]:
        """(period index, seconds) of [t0, t1) within the range."""
        t0, t1 = max(t0, self.start), min(t1, self.end)
        if t1 <= t0:
            return
        i = self.index(t0)
        while t0 < t1 and i < len(self.bounds) - 1:
            edge = min(t1, self.bounds[i + 1])
            yield i, edge - t0
            t0, i = edge, i + 1

    @property
    def periods(self) -> list[UsagePeriod]:
        return [UsagePeriod(start=_utc(a), end=_utc(b)) for a, b in zip(self.bounds, self.bounds[1:], strict=False)]


class Reports:
    """Usage, efficiency, wait and availability reports over one :class:`AccountingDB`.

    Args:
        db: the reader whose engine, tables and visibility policy the reports use.
        tz: the zone slurmdbd runs in (its day and month rollups follow its local midnights);
            periods are cut in it too.
        max_range: the longest range a report may cover.
        max_periods: the most periods a report may have (hours over a long range).
        max_job_rows: the most job (or event) rows a job-table report reads.
    """

    def __init__(self, db: AccountingDB, *, tz: str = "UTC", max_range: timedelta = timedelta(days=366),
                 max_periods: int = 1000, max_job_rows: int = 2_000_000) -> None:
        self.db = db
        try:
            self.tz = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ConfigError(f"unknown time zone {tz!r}", key="tz") from exc
        self.max_range = max_range
        self.max_periods = max_periods
        self.max_job_rows = max_job_rows
        self.tables = build_report_tables(db.cluster, job_table=db.tables.job.name)
        self._qos_names: dict[int, str] | None = None

    # -- validation ----------------------------------------------------------------------------

    def _range(self, start: datetime | str | int, end: datetime | str | int) -> tuple[int, int]:
        s, e = self._when(start, "start"), self._when(end, "end")
        if e <= s:
            raise InvalidInput("end must be after start", param="end")
        if e - s > self.max_range.total_seconds():
            raise InvalidInput(f"the range may cover at most {self.max_range.days} days", param="end")
        return s, e

    @staticmethod
    def _when(value: datetime | str | int, param: str) -> int:
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise InvalidInput(f"{param} must carry a time zone (UTC)", param=param)
            return _epoch(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            return _epoch(parse_time(value, param))
        raise InvalidInput(f"{param} must be a time", param=param)

    def _local(self, t: int) -> datetime:
        return datetime.fromtimestamp(t, self.tz)

    def _aligned(self, t: int, grain: str) -> bool:
        local = self._local(t)
        if local.minute or local.second or t % 60:
            return False
        if grain == "hour":
            return True
        if local.hour:
            return False
        return grain == "day" or local.day == 1

    def _bounds(self, start: int, end: int, period: str) -> _Range:
        rng = _Range(start, end, [start])
        if period == "range":
            rng.bounds.append(end)
            return rng
        t = start
        while t < end:
            local = self._local(t)
            if period == "hour":
                nxt = (t // _HOUR + 1) * _HOUR
            else:
                day = local.replace(hour=0, minute=0, second=0, microsecond=0)
                if period == "day":
                    edge = day + timedelta(days=1)
                elif period == "week":
                    edge = day + timedelta(days=7 - day.weekday())
                else:
                    edge = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
                # wall-clock arithmetic in the zone: a day is 23 or 25 hours across DST
                nxt = _epoch(edge)
            t = min(nxt, end)
            rng.bounds.append(t)
            if len(rng.bounds) - 1 > self.max_periods:
                raise InvalidInput(f"period={period} over this range gives more than {self.max_periods} periods",
                                   param="period")
        return rng

    @staticmethod
    def _top(top: int | None) -> int | None:
        if top is None:
            return None
        if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= 1000:
            raise InvalidInput("top must be between 1 and 1000", param="top")
        return top

    def _tres_ids(self, conn: Connection, wanted: Sequence[str]) -> dict[str, int]:
        """``{name: id}`` for the TRES asked, which must be ones the cluster tracks."""
        if isinstance(wanted, str):
            wanted = [w for w in wanted.split(",") if w]
        names = list(dict.fromkeys(w.strip() for w in wanted))
        if not names:
            raise InvalidInput("tres: name at least one TRES", param="tres")
        if len(wanted) > _MAX_NAMES:
            raise InvalidInput(f"tres: at most {_MAX_NAMES}", param="tres")
        t = self.db.tables.tres
        known: dict[str, int] = {}
        for row in conn.execute(select(t.c.id, t.c.type, t.c.name).where(t.c.deleted == 0)):
            known[f"{row.type}/{row.name}" if row.name else str(row.type)] = int(row.id)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise InvalidInput(f"tres: the cluster tracks no {unknown[0][:60]!r} (it tracks "
                               f"{', '.join(sorted(known))})", param="tres")
        return {n: known[n] for n in names}

    def _hidden(self, column: Any) -> list[ColumnElement[bool]]:
        return [~_partition_member(column, name) for name in self.db.hidden_partitions]

    def _qos(self, conn: Connection) -> dict[int, str]:
        if self._qos_names is None:
            q = self.tables.qos
            self._qos_names = {int(r.id): str(r.name) for r in conn.execute(select(q.c.id, q.c.name))}
        return self._qos_names

    def _assoc_names(self, conn: Connection, ids: Iterable[int]) -> dict[int, tuple[str, str]]:
        """``{id_assoc: (account, user)}``."""
        a = self.db.tables.assoc
        wanted = sorted(set(ids))
        out: dict[int, tuple[str, str]] = {}
        for i in range(0, len(wanted), 1000):
            stmt = select(a.c.id_assoc, a.c.acct, a.c.user).where(a.c.id_assoc.in_(wanted[i : i + 1000]))
            for r in conn.execute(stmt):
                out[int(r.id_assoc)] = (str(r.acct), str(r.user))
        return out

    def _job_rows(self, conn: Connection, stmt: Any) -> list[Any]:
        rows = conn.execute(stmt.limit(self.max_job_rows + 1)).all()
        if len(rows) > self.max_job_rows:
            raise InvalidInput(f"more than {self.max_job_rows} jobs in this range: ask for a shorter one",
                               param="start")
        return list(rows)

    def _suspensions(self, conn: Connection, rng: _Range, jobs: list[int]) -> dict[int, list[tuple[int, int]]]:
        """The suspensions of ``jobs`` (their ``time_suspended`` is not 0) that overlap the
        range, by ``PRIMARY (job_db_inx, time_start)``: (start, end), end 0 while it lasts."""
        s = self.tables.suspend
        out: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for i in range(0, len(jobs), 1000):
            stmt = select(s.c.job_db_inx, s.c.time_start, s.c.time_end).where(
                s.c.job_db_inx.in_(jobs[i : i + 1000]), s.c.time_start > 0, s.c.time_start < rng.end,
                or_(s.c.time_end >= rng.start, s.c.time_end == 0))
            for r in conn.execute(stmt):
                out[int(r.job_db_inx)].append((int(r.time_start), int(r.time_end)))
        return out

    def _job_filters(self, conn: Connection, users: list[str], accounts: list[str]) -> list[ColumnElement[bool]]:
        j, a = self.tables.job, self.db.tables.assoc
        conds: list[ColumnElement[bool]] = [j.c.deleted == 0, *self._hidden(j.c.partition)]
        if accounts:
            conds.append(j.c.account.in_(accounts))
        if users:
            ids = [int(x) for x in conn.execute(select(a.c.id_assoc).where(a.c.user.in_(users))).scalars()]
            conds.append(j.c.id_assoc.in_(ids) if ids else literal(False))
        return conds

    def _ran_in(self, start: int, end: int) -> list[ColumnElement[bool]]:
        """Jobs that ran in [start, end): slurmdbd's own rollup condition, and a start before
        the end. Read through :meth:`_by_end`."""
        j = self.tables.job
        return [j.c.time_eligible > 0, j.c.time_eligible < end, or_(j.c.time_end > start, j.c.time_end == 0),
                j.c.time_start > 0, j.c.time_start < end]

    def _by_end(self, stmt: Any) -> Any:
        """``stmt`` over the job table read by the ``rollup2 (time_end, time_eligible)`` index:
        a range on ``time_end > start OR time_end = 0``. Left alone MariaDB scans the whole
        table: it overestimates that range (twice the rows for a month of a year's 1,000,000
        jobs) and prefers a scan above ~15 % of the table; a scan is 2.0 s there, the range
        0.19 s (bench/results/reports-2026-12-03.md)."""
        hint = "FORCE INDEX (rollup2)"
        return stmt.with_hint(self.tables.job, hint, dialect_name="mysql").with_hint(
            self.tables.job, hint, dialect_name="mariadb")

    def _carries(self, tres: Mapping[str, int]) -> ColumnElement[bool]:
        """Jobs whose ``tres_alloc`` names one of ``tres`` (``"1=4,1001=2"``): the others add
        nothing to a usage figure and need not leave the server."""
        col = self.tables.job.c.tres_alloc
        return or_(*[cond for i in tres.values() for cond in (col.like(f"{i}=%"), col.like(f"%,{i}=%"))])

    # -- usage ---------------------------------------------------------------------------------

    def usage(self, query: UsageQuery) -> UsageReport:
        """Usage per group and period (see the module's table for the sources).

        Raises :class:`InvalidInput` naming the bad parameter: ``group_by``, ``period``, ``tres``
        (one the cluster does not track), ``start``/``end`` (order, alignment, length), ``top``,
        ``users``/``accounts``, ``rollup``."""
        if query.group_by not in GROUP_BY:
            raise InvalidInput(f"group_by must be one of {', '.join(GROUP_BY)}, not {str(query.group_by)[:40]!r}",
                               param="group_by")
        if query.period not in PERIODS:
            raise InvalidInput(f"period must be one of {', '.join(PERIODS)}, not {str(query.period)[:40]!r}",
                               param="period")
        if query.rollup not in ROLLUPS:
            raise InvalidInput(f"rollup must be one of {', '.join(ROLLUPS)}, not {str(query.rollup)[:40]!r}",
                               param="rollup")
        start, end = self._range(query.start, query.end)
        top = self._top(query.top)
        users, accounts = _names(query.users, "users"), _names(query.accounts, "accounts")
        if query.group_by == "cluster" and (users or accounts):
            raise InvalidInput("users and accounts do not apply to group_by=cluster", param="users" if users else
                               "accounts")
        rollups = query.group_by in ("cluster", "account", "user", "account+user")
        grain = self._grain(start, end, query.period, query.rollup) if rollups else None
        rng = self._bounds(start, end, query.period)
        with self.db._conn() as conn:
            tres = self._tres_ids(conn, query.tres)
            if query.group_by == "cluster":
                assert grain is not None
                groups, totals = self._cluster_usage(conn, rng, grain, tres)
                source = f"usage_{grain}"
            elif grain is not None:
                groups, totals = self._assoc_usage(conn, rng, grain, tres, query.group_by, users, accounts)
                source = f"assoc_usage_{grain}"
            else:
                groups, totals = self._job_usage(conn, rng, tres, query.group_by, users, accounts)
                source = "job_table"
        first = next(iter(tres))
        groups.sort(key=lambda g: (-g.total_seconds.get(first, 0), g.name))
        omitted = max(0, len(groups) - top) if top is not None else 0
        if top is not None:
            groups = groups[:top]
        return UsageReport(
            cluster=self.db.cluster, source=source, start=_utc(start), end=_utc(end), period=query.period,  # type: ignore[arg-type]
            group_by=query.group_by, tres=list(tres), periods=rng.periods, groups=groups,  # type: ignore[arg-type]
            omitted_groups=omitted, total_seconds=totals, total_hours=_hours(totals),
            notes=self._usage_notes(query.group_by),
        )

    def _usage_notes(self, group_by: str) -> list[str]:
        notes = []
        if group_by in ("account", "account+user"):
            notes.append("an account's figures are the usage charged to it, without its sub-accounts' "
                         "(sreport adds those to the parent)")
        if group_by in ("cluster", "account", "user", "account+user") and self.db.hidden_partitions:
            notes.append("rollups do not say the partition: hidden partitions' usage is included")
        if group_by in ("partition", "qos"):
            notes.append("each job's allocated TRES x its run time within the range, suspended time taken off; "
                         "running jobs up to now")
        return notes

    def _grain(self, start: int, end: int, period: str, rollup: str) -> str:
        for t, param in ((start, "start"), (end, "end")):
            if not self._aligned(t, "hour"):
                raise InvalidInput(f"{param} must be on the hour for a rollup report", param=param)
        if rollup == "auto":
            now = int(datetime.now(UTC).timestamp())
            length = end - start
            if end <= now and period in ("month", "range") and length > _DAY \
                    and self._aligned(start, "month") and self._aligned(end, "month"):
                return "month"
            if end <= now and period != "hour" and length >= _DAY \
                    and self._aligned(start, "day") and self._aligned(end, "day"):
                return "day"
            return "hour"
        if rollup == "hour":
            return "hour"
        if (rollup == "day" and period == "hour") or (rollup == "month" and period in ("hour", "day", "week")):
            raise InvalidInput(f"period={period} is finer than the {rollup} rollup", param="period")
        for t, param in ((start, "start"), (end, "end")):
            if not self._aligned(t, rollup):
                raise InvalidInput(f"{param} must be on a {'midnight' if rollup == 'day' else 'first of a month'} "
                                   f"({self.tz.key}) for the {rollup} rollup", param=param)
        return rollup

    def _bucket(self, column: Any, rng: _Range) -> Any:
        """The period index of a rollup row, in SQL (the rows are summed per period there)."""
        if len(rng.bounds) == 2:
            return literal_column("0")
        return case(*[(column < edge, i) for i, edge in enumerate(rng.bounds[1:-1])],
                    else_=len(rng.bounds) - 2)

    @staticmethod
    def _by_bucket(rng: _Range) -> list[Any]:
        # by the select's alias: MariaDB and PostgreSQL take it, and the CASE is not repeated
        return [] if len(rng.bounds) == 2 else [literal_column("bucket")]

    def _cluster_usage(self, conn: Connection, rng: _Range, grain: str,
                       tres: Mapping[str, int]) -> tuple[list[UsageGroup], dict[str, int]]:
        u = self.tables.usage[grain]
        bucket = self._bucket(u.c.time_start, rng).label("bucket")
        stmt = (
            select(u.c.id_tres, bucket, func.count().label("n"), func.sum(u.c.count).label("tres_count"),
                   *[func.sum(getattr(u.c, c)).label(c) for c in
                     ("alloc_secs", "down_secs", "pdown_secs", "idle_secs", "plan_secs", "over_secs")])
            .where(u.c.id_tres.in_(list(tres.values())), u.c.time_start >= rng.start, u.c.time_start < rng.end,
                   u.c.deleted == 0)
            .group_by(u.c.id_tres, *self._by_bucket(rng))
        )
        by_id = {v: k for k, v in tres.items()}
        cells: dict[tuple[int, str], dict[str, int]] = {}
        for r in conn.execute(stmt):
            cells[(int(r.bucket), by_id[int(r.id_tres)])] = {
                "n": int(r.n), "count": int(r.tres_count or 0), "alloc": int(r.alloc_secs or 0),
                "down": int(r.down_secs or 0), "pdown": int(r.pdown_secs or 0), "idle": int(r.idle_secs or 0),
                "plan": int(r.plan_secs or 0), "over": int(r.over_secs or 0)}

        def util(parts: Sequence[dict[str, int]]) -> ClusterUtilization:
            s = {k: sum(p[k] for p in parts) for k in ("n", "count", "alloc", "down", "pdown", "idle", "plan",
                                                       "over")}
            return ClusterUtilization(
                # sreport divides the summed count by the rows summed (cluster_reports.c)
                count=s["count"] // s["n"] if s["n"] else 0, allocated_seconds=s["alloc"], down_seconds=s["down"],
                planned_down_seconds=s["pdown"], idle_seconds=s["idle"], reserved_seconds=s["plan"],
                over_seconds=s["over"],
                reported_seconds=s["alloc"] + s["down"] + s["pdown"] + s["idle"] + s["plan"])

        out_cells = []
        for i, period in enumerate(rng.periods):
            u_cell = {name: util([cells[(i, name)]] if (i, name) in cells else []) for name in tres}
            seconds = {name: c.allocated_seconds for name, c in u_cell.items()}
            out_cells.append(UsageCell(start=period.start, end=period.end, tres_seconds=seconds,
                                       tres_hours=_hours(seconds), utilization=u_cell))
        whole = {name: util([c for (_, n), c in cells.items() if n == name]) for name in tres}
        totals = {name: c.allocated_seconds for name, c in whole.items()}
        share = {name: (c.allocated_seconds / c.reported_seconds if c.reported_seconds else 0.0)
                 for name, c in whole.items()}
        group = UsageGroup(name=self.db.cluster, cells=out_cells, total_seconds=totals, total_hours=_hours(totals),
                           share=share, utilization=whole)
        return [group], totals

    def _assoc_usage(self, conn: Connection, rng: _Range, grain: str, tres: Mapping[str, int], group_by: str,
                     users: list[str], accounts: list[str]) -> tuple[list[UsageGroup], dict[str, int]]:
        u, a = self.tables.assoc_usage[grain], self.db.tables.assoc
        bucket = self._bucket(u.c.time_start, rng).label("bucket")
        keys = {"account": [a.c.acct], "user": [a.c.user], "account+user": [a.c.acct, a.c.user]}[group_by]
        # No filter on the rows' `deleted`: slurmdbd marks an association's past usage deleted when
        # the association is removed, and that usage happened (sreport counts it in root and the
        # account's lines: an account made and removed within an hour had 12 cpu-s hidden here).
        conds: list[ColumnElement[bool]] = [
            u.c.id_tres.in_(list(tres.values())), u.c.time_start >= rng.start, u.c.time_start < rng.end]
        if users:
            conds.append(a.c.user.in_(users))
        if accounts:
            conds.append(a.c.acct.in_(accounts))
        stmt = (
            select(*keys, u.c.id_tres, bucket, func.sum(u.c.alloc_secs).label("secs"))
            .select_from(u.join(a, a.c.id_assoc == u.c.id))
            .where(*conds)
            .group_by(*keys, u.c.id_tres, *self._by_bucket(rng))
        )
        by_id = {v: k for k, v in tres.items()}
        acc: dict[tuple[str, ...], dict[tuple[int, str], int]] = defaultdict(lambda: defaultdict(int))
        for r in conn.execute(stmt):
            key = tuple(str(r._mapping[k.name]) for k in keys)
            acc[key][(int(r.bucket), by_id[int(r.id_tres)])] += int(r.secs or 0)

        def describe(key: tuple[str, ...]) -> dict[str, Any]:
            if group_by == "account":
                return {"name": key[0], "account": key[0]}
            if group_by == "user":
                return {"name": key[0], "user": key[0]}
            return {"name": f"{key[0]}/{key[1]}", "account": key[0], "user": key[1]}

        return self._groups(rng, tres, {k: (describe(k), v) for k, v in acc.items()})

    def _job_usage(self, conn: Connection, rng: _Range, tres: Mapping[str, int], group_by: str,
                   users: list[str], accounts: list[str]) -> tuple[list[UsageGroup], dict[str, int]]:
        j = self.tables.job
        now = int(datetime.now(UTC).timestamp())
        key_col = j.c.partition if group_by == "partition" else j.c.id_qos
        stmt = self._by_end(select(key_col.label("key"), j.c.job_db_inx, j.c.time_start, j.c.time_end,
                                   j.c.time_suspended, j.c.tres_alloc).where(
            *self._ran_in(rng.start, rng.end), self._carries(tres), *self._job_filters(conn, users, accounts)))
        tres_names = self.db._tres(conn)
        qos = self._qos(conn) if group_by == "qos" else {}
        rows = self._job_rows(conn, stmt)
        suspended = self._suspensions(conn, rng, [int(r.job_db_inx) for r in rows if r.time_suspended])
        acc: dict[tuple[str, ...], dict[tuple[int, str], int]] = defaultdict(lambda: defaultdict(int))
        for r in rows:
            counts = parse_tres(r.tres_alloc, tres_names)
            wanted = {name: counts[name] for name in tres if counts.get(name)}
            if not wanted:
                continue
            key = (str(r.key) if group_by == "partition" else qos.get(int(r.key), str(r.key)),)
            cell = acc[key]
            t0, t1 = int(r.time_start), int(r.time_end) or now
            for i, secs in rng.split(t0, t1):
                for name, count in wanted.items():
                    cell[(i, name)] += count * secs
            # Slurm's rollup (as_mysql_rollup.c) and sacct take each suspension off, clipped to
            # the run and the range; one still lasting (time_end 0) up to the run's end.
            for s0, s1 in suspended.get(int(r.job_db_inx), ()):
                for i, secs in rng.split(max(s0, t0), min(s1 or t1, t1)):
                    for name, count in wanted.items():
                        cell[(i, name)] -= count * secs
        field_name = "partition" if group_by == "partition" else "qos"
        return self._groups(rng, tres, {k: ({"name": k[0], field_name: k[0]}, v) for k, v in acc.items()})

    def _groups(self, rng: _Range, tres: Mapping[str, int],
                acc: Mapping[tuple[str, ...], tuple[dict[str, Any], Mapping[tuple[int, str], int]]],
                ) -> tuple[list[UsageGroup], dict[str, int]]:
        totals = dict.fromkeys(tres, 0)
        per_group: dict[tuple[str, ...], dict[str, int]] = {}
        for key, (_desc, cells) in acc.items():
            sums = dict.fromkeys(tres, 0)
            for (_i, name), secs in cells.items():
                sums[name] += secs
                totals[name] += secs
            per_group[key] = sums
        groups = []
        periods = rng.periods
        for key, (desc, cells) in acc.items():
            sums = per_group[key]
            out_cells = []
            for i, period in enumerate(periods):
                seconds = {name: cells.get((i, name), 0) for name in tres}
                out_cells.append(UsageCell(start=period.start, end=period.end, tres_seconds=seconds,
                                           tres_hours=_hours(seconds)))
            groups.append(UsageGroup(**desc, cells=out_cells, total_seconds=sums, total_hours=_hours(sums),
                                     share={n: (sums[n] / totals[n] if totals[n] else 0.0) for n in tres}))
        return groups, totals

    # -- efficiency ----------------------------------------------------------------------------

    def efficiency(self, query: EfficiencyQuery) -> EfficiencyReport:
        """CPU and memory efficiency of the jobs that ended in the range, as seff counts them.

        Raises :class:`InvalidInput` naming ``group_by``, ``start``/``end``, ``top``, ``users``/``accounts``."""
        if query.group_by not in ("user", "account", "account+user"):
            raise InvalidInput(f"group_by must be user, account or account+user, not {str(query.group_by)[:40]!r}",
                               param="group_by")
        start, end = self._range(query.start, query.end)
        top = self._top(query.top)
        users, accounts = _names(query.users, "users"), _names(query.accounts, "accounts")
        with self.db._conn() as conn:
            groups = self._efficiency_groups(conn, start, end, users, accounts)
            names = self._assoc_names(conn, (g["id_assoc"] for g in groups))
        grouped: dict[tuple[str, ...], dict[str, int]] = {}
        for g in groups:
            acct, user = names.get(g["id_assoc"], (str(g["account"] or ""), ""))
            account = str(g["account"] or acct)
            key = {"user": (user,), "account": (account,), "account+user": (account, user)}[query.group_by]
            sums = grouped.setdefault(key, dict.fromkeys(_EFFICIENCY_SUMS, 0))
            for name in _EFFICIENCY_SUMS:
                sums[name] += g[name]

        def row(key: tuple[str, ...], sums: Mapping[str, int]) -> EfficiencyRow:
            cpu_alloc, mem_req, mem_used = sums["cpu_alloc"], sums["mem_req"], sums["mem_used"]
            cpu_used = sums["cpu_usec"] / 1e6
            desc: dict[str, Any] = {"name": "/".join(key) if key else "total"}
            if query.group_by == "user" and key:
                desc["user"] = key[0]
            elif query.group_by == "account" and key:
                desc["account"] = key[0]
            elif key:
                desc.update(account=key[0], user=key[1])
            return EfficiencyRow(**desc, jobs=sums["jobs"], cpu_allocated_seconds=cpu_alloc,
                                 cpu_used_seconds=round(cpu_used, 6),
                                 cpu_efficiency=cpu_used / cpu_alloc if cpu_alloc else None,
                                 memory_requested_bytes=mem_req, memory_used_bytes=mem_used,
                                 memory_efficiency=mem_used / mem_req if mem_req else None)

        total = dict.fromkeys(_EFFICIENCY_SUMS, 0)
        for sums in grouped.values():
            for name in _EFFICIENCY_SUMS:
                total[name] += sums[name]
        rows_out = sorted((row(k, v) for k, v in grouped.items()),
                          key=lambda x: (-x.cpu_allocated_seconds, x.name))
        omitted = max(0, len(rows_out) - top) if top is not None else 0
        notes = ["jobs that ran and ended in the range; CPU time from their steps (user + system), memory "
                 "from the steps' max RSS, as seff counts them"]
        return EfficiencyReport(cluster=self.db.cluster, source="job_table+step_table", start=_utc(start),
                                end=_utc(end), group_by=query.group_by,  # type: ignore[arg-type]
                                rows=rows_out[:top] if top is not None else rows_out, omitted_rows=omitted,
                                total=row((), total), notes=notes)

    def _efficiency_groups(self, conn: Connection, start: int, end: int, users: list[str],
                           accounts: list[str]) -> list[dict[str, Any]]:
        """The efficiency figures added up by MariaDB per ``(id_assoc, account)``: one row per
        association leaves the server, not one per job x step.

        Inside, a derived table of one row per job that ended in ``[start, end)`` (``rollup2``
        range on ``time_end``, its steps joined by ``PRIMARY (job_db_inx, ...)`` and grouped by
        job; at most :attr:`max_job_rows` + 1 jobs: the bound, checked on the count), each with
        its steps' CPU time summed (in microseconds, exact) and seff's memory: the step with the
        largest max RSS, the first in step order among equals, times its tasks
        (:class:`_FirstBy`). Jobs with no CPUs (cancelled while pending: slurmdbd sets their start
        to their end) count for the bound and are left out of the figures. Job columns are read
        through ``MIN()`` (one value per job) so ``ONLY_FULL_GROUP_BY`` servers accept the statement."""
        j, s = self.tables.job, self.db.tables.step
        cpus = _tres_value(j.c.tres_alloc, 1)
        run = func.greatest(0, cast(j.c.time_end, BigInteger) - cast(j.c.time_start, BigInteger)
                            - cast(func.coalesce(j.c.time_suspended, 0), BigInteger))
        mem_req = func.coalesce(j.c.mem_req, 0)
        per = case((mem_req.op("&")(literal_column(str(_MEM_PER_CPU))) != 0, cpus),
                   else_=func.greatest(1, func.coalesce(j.c.nodes_alloc, 0)))
        mem_mib = cast(mem_req.op("&")(literal_column(str(_MEM_PER_CPU - 1))), Numeric(38, 0))
        rss = _tres_value(s.c.tres_usage_in_max, 2)
        peak = _FirstBy(rss * func.coalesce(s.c.task_cnt, 0), rss, s.c.id_step, s.c.step_het_comp)
        cpu_usec = func.sum((func.coalesce(s.c.user_sec, 0) + func.coalesce(s.c.sys_sec, 0)) * 1_000_000
                            + func.coalesce(s.c.user_usec, 0) + func.coalesce(s.c.sys_usec, 0))
        per_job = self._by_end(
            select(func.min(j.c.id_assoc).label("id_assoc"), func.min(j.c.account).label("account"),
                   func.min(cpus).label("cpus"), func.min(cpus * run).label("cpu_alloc"),
                   func.min(mem_mib * per * 1024 * 1024).label("mem_req"),
                   func.coalesce(cpu_usec, 0).label("cpu_usec"),
                   func.coalesce(cast(peak, Numeric(38, 0)), 0).label("mem_used"))
            .select_from(j.outerjoin(s, and_(s.c.job_db_inx == j.c.job_db_inx, s.c.deleted == 0)))
            .where(j.c.time_end >= start, j.c.time_end < end, j.c.time_start > 0,
                   *self._job_filters(conn, users, accounts))
            .group_by(j.c.job_db_inx)
            .order_by(null())  # no sort for the GROUP BY
            .limit(self.max_job_rows + 1)  # the bound: counted below, before any figure is used
        ).subquery("per_job")
        ran = (per_job.c.cpus > 0).label("ran")
        stmt = (select(per_job.c.id_assoc, per_job.c.account, ran, func.count().label("jobs"),
                       func.sum(per_job.c.cpu_alloc).label("cpu_alloc"), func.sum(per_job.c.cpu_usec).label("cpu_usec"),
                       func.sum(per_job.c.mem_req).label("mem_req"), func.sum(per_job.c.mem_used).label("mem_used"))
                .group_by(per_job.c.id_assoc, per_job.c.account, ran).order_by(null()))
        rows = conn.execute(stmt).all()
        if sum(int(r.jobs) for r in rows) > self.max_job_rows:
            raise InvalidInput(f"more than {self.max_job_rows} jobs in this range: ask for a shorter one",
                               param="start")
        return [{"id_assoc": int(r.id_assoc), "account": r.account,
                 **{name: int(getattr(r, name) or 0) for name in _EFFICIENCY_SUMS}}
                for r in rows if r.ran]

    # -- waits and sizes -----------------------------------------------------------------------

    def waits(self, query: WaitQuery) -> WaitReport:
        """Wait time (start - submit) and job size per partition and account.

        The jobs that ran in the range are counted in the size buckets (CPUs, as ``sreport job
        SizesByAccount``: their CPU-seconds within the range); the wait figures are those of
        the jobs that started in the range. Raises :class:`InvalidInput` naming ``start``/``end``,
        ``size_buckets``, ``partitions``/``accounts``."""
        start, end = self._range(query.start, query.end)
        buckets = list(query.size_buckets)
        if (len(buckets) > 20 or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in buckets)
                or buckets != sorted(set(buckets))):
            raise InvalidInput("size_buckets must be at most 20 increasing whole numbers from 1", param="size_buckets")
        partitions, accounts = _names(query.partitions, "partitions"), _names(query.accounts, "accounts")
        lows = [0, *buckets]
        j = self.tables.job
        now = int(datetime.now(UTC).timestamp())
        with self.db._conn() as conn:
            conds = [*self._ran_in(start, end), *self._job_filters(conn, [], accounts)]
            if partitions:
                conds.append(or_(*[_partition_member(j.c.partition, p) for p in partitions]))
            stmt = self._by_end(select(j.c.partition, j.c.account, j.c.time_submit, j.c.time_start, j.c.time_end,
                                       j.c.tres_alloc).where(*conds))
            rows = self._job_rows(conn, stmt)
            tres_names = self.db._tres(conn)
        acc: dict[tuple[str, str], dict[str, Any]] = {}
        for r in rows:
            t0, t1 = int(r.time_start), int(r.time_end) or now
            ran = _overlap(t0, t1, start, end)
            cpus = parse_tres(r.tres_alloc, tres_names).get("cpu", 0)
            started = start <= t0 < end and cpus > 0  # a job cancelled pending has no allocation
            if ran <= 0 and not started:
                continue
            slot = acc.setdefault((str(r.partition), str(r.account or "")), {
                "jobs": 0, "waits": [], "sizes": [[0, 0] for _ in lows]})
            if started:
                slot["waits"].append(max(0, t0 - int(r.time_submit)))
            if ran > 0:  # sreport leaves out jobs with no time in the range
                slot["jobs"] += 1
                b = bisect.bisect_right(lows, cpus) - 1
                slot["sizes"][b][0] += 1
                slot["sizes"][b][1] += cpus * ran
        out = []
        for (partition, account), slot in sorted(acc.items()):
            waits = sorted(slot["waits"])
            sizes = [SizeBucket(min_cpus=lo, max_cpus=(lows[i + 1] - 1 if i + 1 < len(lows) else None),
                                jobs=n, cpu_seconds=secs) for i, (lo, (n, secs)) in enumerate(zip(lows, slot["sizes"],
                                                                                                  strict=True))]
            out.append(WaitRow(
                partition=partition, account=account, jobs=slot["jobs"], started=len(waits),
                wait_mean_seconds=statistics.fmean(waits) if waits else None,
                wait_median_seconds=float(statistics.median(waits)) if waits else None,
                wait_p90_seconds=float(waits[min(len(waits) - 1, int(0.9 * len(waits)))]) if waits else None,
                wait_max_seconds=waits[-1] if waits else None, sizes=sizes))
        return WaitReport(cluster=self.db.cluster, source="job_table", start=_utc(start), end=_utc(end), rows=out,
                          size_buckets=buckets,
                          notes=["wait = start - submit of the jobs that started in the range; sizes count every "
                                 "job that ran in it, by allocated CPUs"])

    # -- availability --------------------------------------------------------------------------

    def availability(self, query: AvailabilityQuery) -> AvailabilityReport:
        """Down and drained node time per partition and node from the event table, up to now.

        A node event with DRAIN (or FAIL) counts as drained, any other as down. Raises
        :class:`InvalidInput` naming ``start``/``end`` or ``top_reasons``."""
        start, end = self._range(query.start, query.end)
        if isinstance(query.top_reasons, bool) or not isinstance(query.top_reasons, int) \
                or not 1 <= query.top_reasons <= 100:
            raise InvalidInput("top_reasons must be between 1 and 100", param="top_reasons")
        now = int(datetime.now(UTC).timestamp())
        stop = max(start, min(end, now))
        policy = self.db.policy
        shown = [p for p in policy.partitions(query.partitions) if not query.wanted or p.name in query.wanted]
        hidden_nodes = policy.hiding(query.partitions).nodes  # from every partition, hidden ones too
        e = self.tables.event
        with self.db._conn() as conn:
            stmt = (select(e.c.node_name, e.c.time_start, e.c.time_end, e.c.state, e.c.reason)
                    .where(e.c.node_name != "", e.c.time_start < stop, or_(e.c.time_end > start, e.c.time_end == 0))
                    .order_by(e.c.node_name, e.c.time_start))
            rows = self._job_rows(conn, stmt)
        per_node: dict[str, dict[str, Any]] = {}
        for r in rows:
            node = str(r.node_name)
            if node in hidden_nodes:
                continue
            secs = _overlap(int(r.time_start), int(r.time_end) or now, start, stop)
            if secs <= 0:
                continue
            slot = per_node.setdefault(node, {"down": 0, "drained": 0, "reasons": defaultdict(int)})
            drained = int(r.state or 0) & (_NODE_STATE_DRAIN | _NODE_STATE_FAIL)
            slot["drained" if drained else "down"] += secs
            slot["reasons"][str(r.reason or "")] += secs
        length = stop - start

        def reasons_of(nodes: Iterable[str]) -> list[DownReason]:
            cost: dict[str, int] = defaultdict(int)
            who: dict[str, set[str]] = defaultdict(set)
            for n in nodes:
                for reason, secs in per_node.get(n, {}).get("reasons", {}).items():
                    cost[reason] += secs
                    who[reason].add(n)
            ranked = sorted(cost.items(), key=lambda kv: (-kv[1], kv[0]))[: query.top_reasons]
            return [DownReason(reason=r, node_seconds=s, nodes=sorted(who[r], key=_node_key)) for r, s in ranked]

        def row(partition: str | None, node: str | None, nodes: Sequence[str]) -> AvailabilityRow:
            down = sum(per_node.get(n, {}).get("down", 0) for n in nodes)
            drained = sum(per_node.get(n, {}).get("drained", 0) for n in nodes)
            total = length * len(nodes)
            return AvailabilityRow(partition=partition, node=node, nodes=len(nodes), total_node_seconds=total,
                                   down_seconds=down, drained_seconds=drained,
                                   available=1 - (down + drained) / total if total else 1.0,
                                   reasons=reasons_of(nodes))

        parts = [row(p.name, None, sorted(NodeSet(p.nodes or ""), key=_node_key)) for p in shown]
        node_rows = sorted((row(None, n, [n]) for n in per_node),
                           key=lambda x: (-(x.down_seconds + x.drained_seconds), _node_key(x.node or "")))
        return AvailabilityReport(cluster=self.db.cluster, source="event_table", start=_utc(start), end=_utc(end),
                                  partitions=parts, nodes=node_rows, reasons=reasons_of(per_node),
                                  notes=["node-seconds up to now; DRAIN and FAIL count as drained, other "
                                         "node events as down"])


def _node_key(name: str) -> tuple[str, int, str]:
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1, name

