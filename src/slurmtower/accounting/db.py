"""Read-only access to slurmdbd's database.

slurmtower reads slurmdbd's tables directly because a round trip through slurmdbd costs
~85 ms per call (and ``sacct --json`` ~380 ms) where an indexed SELECT takes a few ms
(research/slurm-lab.md §6). It never writes: no DDL, no DML, sessions are put in read-only
mode where the server supports it, and the documented deployment uses a SELECT-only user.

Queries are written for slurmdbd's own indexes (research/perf-anchors.md):

* history pages are ordered by the primary key (``job_db_inx DESC``, newest submission
  first) and paged by keyset: ``job_db_inx < <last>``, so page 50,000 costs what page 1 does;
  with a ``jobid`` filter the order is the ``id_job (id_job, time_submit)`` unique index;
* ``limit + 1`` rows are read to know whether a next page exists: no ``COUNT(*)``;
* ``OFFSET`` is still accepted for the seed's clients (it scans the skipped rows);
* no index hints: measured on 1M rows, MariaDB already picks the primary key range for a
  common uid and ``sacct_def`` for a rare one, and ``FORCE INDEX (sacct_def)`` made the
  common case 8x slower with this order (the hint pays off only when ordering by
  ``time_start``, which this API does not do).
"""

from __future__ import annotations

import logging
import pwd
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    and_,
    create_engine,
    event,
    false,
    inspect,
    literal,
    or_,
    select,
    text,
)
from sqlalchemy.engine import Connection, Row, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry

from slurmtower.accounting.query import Cursor, HistoryQuery, parse_job_state
from slurmtower.accounting.tables import OPTIONAL_COLUMNS, AccountingTables, build_tables
from slurmtower.errors import AccountingUnavailable, ConfigError, InvalidInput
from slurmtower.models.accounting import (
    JOB_STATE_NAMES,
    AccountingUser,
    AdminLevel,
    Association,
    AssociationLimits,
    HistoryJob,
    HistoryPage,
    HistoryStep,
)
from slurmtower.settings import AccountingSettings, Settings
from slurmtower.visibility import Visibility

__all__ = ["FIND_JOBS_CRITERIA", "SLUID_MIN", "AccountingDB", "decode_wait_status", "parse_tres", "run_sluid",
           "sluid_text"]

log = logging.getLogger(__name__)

_NO_VAL = 0xFFFFFFFE  # NO_VAL: "not set" in uint32 columns (e.g. id_array_task of a plain job)
_INFINITE = 0xFFFFFFFF
_JOB_STATE_BASE = 0xFF
#: State flags slurmdbd keeps in a record that sacct prints instead of the base state, in the
#: order Slurm's job_state_string() tests them (slurm.h's JOB_* bits): a run that ended by a
#: requeue is REQUEUED (base PENDING, flag 1 << 10), not PENDING.
_STATE_FLAG_NAMES: tuple[tuple[int, str], ...] = (
    (1 << 15, "COMPLETING"), (1 << 23, "STAGE_OUT"), (1 << 14, "CONFIGURING"), (1 << 13, "RESIZING"),
    (1 << 10, "REQUEUED"), (1 << 20, "REQUEUE_FED"), (1 << 11, "REQUEUE_HOLD"), (1 << 12, "SPECIAL_EXIT"),
    (1 << 16, "STOPPED"), (1 << 19, "REVOKED"), (1 << 21, "RESV_DEL_HOLD"), (1 << 22, "SIGNALING"),
)
_STATE_NAME_FLAGS = sum(bit for bit, _name in _STATE_FLAG_NAMES)
_TRES_DEFAULT = {
    1: "cpu",
    2: "mem",
    3: "energy",
    4: "node",
    5: "billing",
    6: "fs/disk",
    7: "vmem",
    8: "pages",
}
_ADMIN_LEVELS: dict[int, AdminLevel] = {2: "operator", 3: "administrator"}
_ID_CHUNK = 1000

FIND_JOBS_CRITERIA = (
    "job_id",
    "array_job_id",
    "user",
    "user_id",
    "account",
    "partition",
    "name",
    "state",
    "association_id",
)
"""Keys :meth:`AccountingDB.find_jobs` accepts (equality)."""


def decode_wait_status(status: int | None) -> tuple[int | None, int | None]:
    """(return code, signal) from a raw wait status as slurmdbd stores it (768 -> (3, 0)),
    as sacct prints them: a return code of 128 or more loses its 128 (a batch shell whose
    child died of SIGTERM exits 143, which sacct shows as ``15:0``; every release's
    ``sacct/print.c`` does so).

    Negative values (-2 for a NODE_FAIL batch step) and NO_VAL mean "no status": (None, None).
    """
    if status is None or status < 0 or status >= _NO_VAL:
        return None, None
    code = (status >> 8) & 0xFF
    return (code - 128 if code >= 128 else code), status & 0x7F


def parse_tres(text: str | None, names: Mapping[int, str] | None = None) -> dict[str, int]:
    """``"1=2,2=200,4=1"`` -> ``{"cpu": 2, "mem": 200, "node": 1}``.

    Values at or above 2**63 (NO_VAL64 markers such as energy ``18446744073709551614``) and
    malformed pairs are dropped; ids without a known name are keyed ``tres/<id>``.
    """
    names = names or _TRES_DEFAULT
    out: dict[str, int] = {}
    for pair in (text or "").split(","):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isascii() or not key.strip().isdigit() or not value.isdigit():
            continue
        number = int(value)
        if number >= 2**63:
            continue
        tres_id = int(key)
        out[names.get(tres_id, f"tres/{tres_id}")] = number
    return out


def _time(seconds: int | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds else None


def _epoch(value: datetime) -> int:
    return int(value.timestamp())


def _state_name(code: int) -> str:
    """The state as sacct prints it: a flag's name where one is set, else the base state's."""
    for bit, name in _STATE_FLAG_NAMES:
        if code & bit:
            return name
    base = code & _JOB_STATE_BASE
    return JOB_STATE_NAMES[base] if base < len(JOB_STATE_NAMES) else "UNKNOWN"


def _max_rss(usage_max: str | None) -> int | None:
    """The step's MaxRSS in bytes from its ``tres_usage_in_max`` (TRES id 2, mem); None when
    no sample was recorded (an empty string, or no mem entry)."""
    found = parse_tres(usage_max).get("mem")
    return found if found else None


def _nodes(nodelist: str | None) -> str | None:
    if not nodelist or nodelist == "None assigned":
        return None
    return nodelist


def _limit(value: int | None) -> int | None:
    # slurmdbd stores an unset limit as NULL; -1 (INFINITE from sacctmgr) also means unset.
    return None if value is None or value < 0 else value


def _like_escape(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def _partition_member(column: Any, name: str) -> ColumnElement[bool]:
    """``column`` names partition ``name``: a pending job may list several (``debug,batch``)."""
    esc = _like_escape(name)
    return or_(
        column == name,
        column.like(f"{esc},%", escape="!"),
        column.like(f"%,{esc}", escape="!"),
        column.like(f"%,{esc},%", escape="!"),
    )


# MariaDB/MySQL character sets and the Python codec holding the same characters (MariaDB's
# latin1 is cp1252). utf8/utf8mb3 hold the Basic Multilingual Plane only.
_CHARSET_CODECS = {"latin1": "cp1252", "ascii": "ascii", "utf8mb4": "utf-8", "utf8": "utf-8", "utf8mb3": "utf-8"}


def _fits(charset: str | None, value: str) -> bool:
    """Whether a column of ``charset`` can hold ``value`` (``None``: a column of unknown
    character set, which holds any text a driver can send)."""
    try:
        value.encode("utf-8")  # no database stores a lone surrogate
    except UnicodeEncodeError:
        return False
    if charset in ("utf8", "utf8mb3") and any(ord(c) > 0xFFFF for c in value):
        return False
    codec = _CHARSET_CODECS.get(charset or "")
    if codec is None:
        return True
    try:
        value.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except (KeyError, UnicodeEncodeError, ValueError):
        return None


def _name_of(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def sluid_text(value: int | str | None) -> str | None:
    """slurmdbd's numeric sluid as Slurm prints it (``sacct -o SLUID``: ``s`` and 13 Crockford
    base-32 digits, the top one holding the last 4 bits; ``sluid.c``'s ``print_sluid``)."""
    if value is None or value == "" or int(value) == 0:
        return None
    number = int(value)
    return "s" + "".join(_CROCKFORD[(number >> (5 * i)) & 0x1F] for i in range(12, -1, -1))


#: The smallest sluid: slurmdbd's own cluster bits (``sluid_init(0x001, 0)``: 1 << 52). A job
#: index that large is a sluid; slurmdbd's auto-increment indexes never come near it.
SLUID_MIN = 1 << 52


def run_sluid(sluid: int | str | None, job_db_inx: int | None) -> str | None:
    """The sluid of one run of a job as ``sacct -o SLUID`` prints it: 26.05+'s ``sluid``
    column; on 24.11-25.11 (no such column) the job index itself, which slurmctld has made a
    sluid since 24.11 (``job_record_set_sluid``) and sacct prints as one; None before (23.11's
    indexes count up from 1 and its sacct has no SLUID)."""
    if sluid is not None:
        return sluid_text(sluid)
    if job_db_inx is not None and int(job_db_inx) >= SLUID_MIN:
        return sluid_text(job_db_inx)
    return None


class AccountingDB:
    """Read-only reader of one cluster's slurmdbd tables.

    Args:
        url: SQLAlchemy URL (``mysql+pymysql://reader:pw@host/slurm_acct_db``).
        cluster: the cluster whose ``<cluster>_*_table`` tables to read.
        job_table, assoc_table, step_table: override the per-cluster table names.
        policy: the visibility policy (:class:`~slurmtower.visibility.Visibility`): the jobs
            of its hidden partitions are left out of every query, in SQL (:meth:`_visible`).
        hidden_partitions: the same for a bare list of partitions (no policy given).
        connect_timeout: seconds to wait for a connection.
        query_timeout: seconds any statement may run (server side where supported, and as
            the client's socket read timeout).

    Every method raises :class:`AccountingUnavailable` when the database does not answer,
    refuses, or a table is missing.
    """

    def __init__(
        self,
        url: str,
        *,
        cluster: str,
        job_table: str | None = None,
        assoc_table: str | None = None,
        step_table: str | None = None,
        hidden_partitions: Iterable[str] = (),
        policy: Visibility | None = None,
        connect_timeout: float = 5.0,
        query_timeout: float = 10.0,
    ) -> None:
        self.cluster = cluster
        self.policy = policy if policy is not None else Visibility(hidden_partitions=frozenset(hidden_partitions))
        self.tables: AccountingTables = build_tables(
            cluster, job_table=job_table, assoc_table=assoc_table, step_table=step_table
        )
        self.hidden_partitions: tuple[str, ...] = tuple(sorted(self.policy.hidden_partitions))
        self.connect_timeout = connect_timeout
        self.query_timeout = query_timeout
        self._tres_names: dict[int, str] | None = None
        self._charsets: dict[str, dict[str, str]] = {}
        self._missing: frozenset[str] | None = None
        self.engine: Engine = self._make_engine(url)

    @classmethod
    def from_settings(
        cls,
        settings: Settings | AccountingSettings,
        *,
        hidden_partitions: Iterable[str] | None = None,
    ) -> AccountingDB:
        """Build from the whole :class:`Settings` (cluster name and hidden partitions included)
        or from its ``accounting`` section alone.

        Raises :class:`ConfigError` when no URL or cluster name is configured.
        """
        policy: Visibility | None = None
        if isinstance(settings, Settings):
            acct = settings.accounting
            cluster = acct.cluster or settings.cluster_name
            hidden = settings.api.hidden_partitions if hidden_partitions is None else hidden_partitions
            if hidden_partitions is None:
                policy = Visibility.from_settings(settings)
        else:
            acct, cluster, hidden = settings, settings.cluster, hidden_partitions or ()
        if acct.url is None:
            raise ConfigError("accounting.url is not set", key="accounting.url")
        if not cluster:
            raise ConfigError("no cluster name for the accounting tables", key="accounting.cluster")
        return cls(
            acct.url.get_secret_value(),
            cluster=cluster,
            job_table=acct.job_table,
            assoc_table=acct.assoc_table,
            step_table=acct.step_table,
            hidden_partitions=hidden,
            policy=policy,
            connect_timeout=acct.connect_timeout,
            query_timeout=acct.query_timeout,
        )

    # -- engine -------------------------------------------------------------------------

    def _make_engine(self, url: str) -> Engine:
        try:
            parsed = make_url(url)
        except Exception as exc:  # sqlalchemy raises ArgumentError/ValueError for bad URLs
            raise ConfigError("accounting.url is not a database URL", key="accounting.url") from exc
        backend = parsed.get_backend_name()
        connect_args: dict[str, Any] = {}
        if backend in ("mysql", "mariadb"):
            connect_args = {
                "connect_timeout": max(1, round(self.connect_timeout)),
                "read_timeout": max(1, round(self.query_timeout + self.connect_timeout)),
                "write_timeout": max(1, round(self.query_timeout)),
            }
        elif backend == "postgresql":
            connect_args = {
                "connect_timeout": max(1, round(self.connect_timeout)),
                "options": f"-c statement_timeout={int(self.query_timeout * 1000)} "
                "-c default_transaction_read_only=on",
            }
        try:
            engine = create_engine(parsed, pool_pre_ping=True, pool_recycle=3600, connect_args=connect_args)
        except Exception as exc:  # a missing DBAPI driver, an unknown dialect
            raise ConfigError(f"cannot use accounting.url: {exc}", key="accounting.url") from exc
        query_timeout = self.query_timeout

        @event.listens_for(engine, "connect")
        def _read_only_session(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
            cur = dbapi_conn.cursor()
            try:
                if backend in ("mysql", "mariadb"):
                    cur.execute("SET SESSION TRANSACTION READ ONLY")
                    info = getattr(dbapi_conn, "get_server_info", lambda: "")()
                    if "MariaDB" in str(info):
                        cur.execute(f"SET SESSION max_statement_time = {float(query_timeout):.3f}")
                    else:
                        cur.execute(f"SET SESSION max_execution_time = {int(query_timeout * 1000)}")
                elif backend == "sqlite":
                    cur.execute("PRAGMA query_only = ON")
            finally:
                cur.close()

        return engine

    @contextmanager
    def _conn(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            # The database's own text (table names, SQL, collations) is for the server log only.
            orig = getattr(exc, "orig", None) or exc
            detail = str(orig).splitlines()[0][:300] if str(orig) else type(orig).__name__
            log.warning("accounting database error (cluster %s): %s: %s", self.cluster, type(orig).__name__, detail)
            raise AccountingUnavailable(
                "the accounting database failed the query (the server log has the details)", cluster=self.cluster
            ) from exc

    def close(self) -> None:
        """Close the pooled connections."""
        self.engine.dispose()

    def ping(self) -> None:
        """Check the database answers and the cluster's job table is readable."""
        with self._conn() as conn:
            conn.execute(select(self.tables.job.c.job_db_inx).limit(1)).all()

    # -- helpers --------------------------------------------------------------------------

    def _tres(self, conn: Connection) -> dict[int, str]:
        if self._tres_names is None:
            names = dict(_TRES_DEFAULT)
            t = self.tables.tres
            try:
                with conn.begin_nested():
                    for row in conn.execute(select(t.c.id, t.c.type, t.c.name)):
                        names[int(row.id)] = f"{row.type}/{row.name}" if row.name else str(row.type)
            except SQLAlchemyError:
                pass  # a reader without access to tres_table still gets the built-in names
            self._tres_names = names
        return self._tres_names

    def _base_state_is(self, code: int) -> ColumnElement[bool]:
        """Rows sacct shows in base state ``code``: that base and none of the flags it would
        name instead (state=0 is PENDING, not the REQUEUED record of an earlier run)."""
        state = self.tables.job.c.state
        return and_(state.op("&")(literal(_JOB_STATE_BASE)) == code,
                    state.op("&")(literal(_STATE_NAME_FLAGS)) == 0)

    def _job_columns(self, conn: Connection) -> list[Any]:
        """The job table's columns this schema has: the release-specific ones (``sluid``,
        26.05+) only where slurmdbd created them; looked up once."""
        if self._missing is None:
            optional = OPTIONAL_COLUMNS["job"]
            try:
                with conn.begin_nested():
                    have = {c["name"] for c in inspect(conn).get_columns(self.tables.job.name)}
            except SQLAlchemyError:
                have = set()  # a reader that cannot inspect reads what every release has
            self._missing = frozenset(optional - have)
        return [c for c in self.tables.job.c if c.name not in self._missing]

    def _holds(self, conn: Connection, column: Any, value: str) -> bool:
        """Whether ``column`` can hold ``value``. A value it cannot hold equals no row; MariaDB
        would refuse the comparison (``Illegal mix of collations``) rather than say so."""
        table = column.table.name
        charsets = self._charsets.get(table)
        if charsets is None:
            charsets = {}
            if conn.dialect.name in ("mysql", "mariadb"):
                stmt = text("SELECT column_name, character_set_name FROM information_schema.columns "
                            "WHERE table_schema = DATABASE() AND table_name = :t AND character_set_name IS NOT NULL")
                try:
                    with conn.begin_nested():
                        charsets = {str(r[0]): str(r[1]) for r in conn.execute(stmt, {"t": table})}
                except SQLAlchemyError:
                    log.warning("cannot read the character sets of %s; assuming they hold any text", table)
            self._charsets[table] = charsets
        return _fits(charsets.get(column.name), value)

    def _visible(self) -> list[ColumnElement[bool]]:
        job = self.tables.job
        conds: list[ColumnElement[bool]] = [job.c.deleted == 0]
        for name in self.hidden_partitions:  # the policy's, as SQL
            conds.append(~_partition_member(job.c.partition, name))
        return conds

    def _user_names(self, conn: Connection, rows: Sequence[Row[Any]]) -> dict[int, str | None]:
        """Names by association id (slurmdbd keeps the user name there, not in the job row)."""
        ids = sorted({int(r.id_assoc) for r in rows})
        a = self.tables.assoc
        names: dict[int, str | None] = {}
        if ids:
            for row in conn.execute(select(a.c.id_assoc, a.c.user).where(a.c.id_assoc.in_(ids))):
                names[int(row.id_assoc)] = row.user or None
        return names

    def _jobs(self, conn: Connection, rows: Sequence[Row[Any]]) -> list[HistoryJob]:
        by_assoc = self._user_names(conn, rows)
        tres_names = self._tres(conn)
        by_uid: dict[int, str | None] = {}
        out = []
        for r in rows:
            name = by_assoc.get(int(r.id_assoc))
            uid = int(r.id_user)
            if name is None:
                if uid not in by_uid:
                    by_uid[uid] = _name_of(uid)
                name = by_uid[uid]
            tres = parse_tres(r.tres_alloc, tres_names) or parse_tres(r.tres_req, tres_names)
            code, signal = decode_wait_status(r.exit_code)
            dcode, dsignal = decode_wait_status(r.derived_ec)
            out.append(
                HistoryJob(
                    job_db_inx=r.job_db_inx,
                    job_id=r.id_job,
                    array_job_id=r.id_array_job or None,
                    array_task_id=None if r.id_array_task in (_NO_VAL, _INFINITE) else r.id_array_task,
                    name=r.job_name or "",
                    user_id=uid,
                    user_name=name,
                    account=r.account or None,
                    partition=r.partition or "",
                    association_id=r.id_assoc,
                    state=_state_name(int(r.state)),
                    state_code=int(r.state) & _JOB_STATE_BASE,
                    exit_code=code,
                    exit_signal=signal,
                    derived_exit_code=dcode,
                    derived_exit_signal=dsignal,
                    nodes=_nodes(r.nodelist),
                    node_count=r.nodes_alloc or 0,
                    cpus=tres.get("cpu"),
                    memory_mib=tres.get("mem"),
                    tres=tres,
                    time_limit=None
                    if r.timelimit in (_NO_VAL, _INFINITE)
                    else timedelta(minutes=r.timelimit),
                    submit_time=_time(r.time_submit),
                    eligible_time=_time(r.time_eligible),
                    start_time=_time(r.time_start),
                    end_time=_time(r.time_end),
                    work_dir=r.work_dir or None,
                    submit_line=r.submit_line or None,
                    sluid=run_sluid(r._mapping.get("sluid"), r.job_db_inx),
                )
            )
        return out

    def _user_condition(self, conn: Connection, user: str) -> ColumnElement[bool] | None:
        """Rows of ``user``: by uid (the ``sacct_def`` index) when the name resolves on this
        host, else through the associations that carry the name. None: no such user."""
        job, a = self.tables.job, self.tables.assoc
        uid = _uid_of(user)
        if uid is not None:
            return job.c.id_user == uid
        assoc_ids = [int(x) for x in conn.execute(select(a.c.id_assoc).where(a.c.user == user)).scalars()]
        if assoc_ids:
            return job.c.id_assoc.in_(assoc_ids)
        if user.isascii() and user.isdigit() and int(user) < _NO_VAL:
            return job.c.id_user == int(user)
        return None

    # -- public reads -----------------------------------------------------------------------

    def history(self, query: HistoryQuery) -> HistoryPage:
        """One page of job history for ``query``, newest first (see :mod:`.query` for order).

        An unknown user or a hidden partition gives an empty page, not an error.
        """
        job = self.tables.job
        empty = HistoryPage(jobs=[], next_cursor=None, limit=query.limit, offset=query.offset)
        if query.partition is not None and query.partition in self.hidden_partitions:
            return empty
        with self._conn() as conn:
            texts = ((job.c.partition, query.partition), (job.c.account, query.account),
                     (job.c.job_name, query.jobname), (self.tables.assoc.c.user, query.user))
            if not all(self._holds(conn, col, value) for col, value in texts if value is not None):
                return empty
            conds = self._visible()
            if query.user is not None:
                user_cond = self._user_condition(conn, query.user)
                if user_cond is None:
                    return empty
                conds.append(user_cond)
            if query.partition is not None:
                conds.append(_partition_member(job.c.partition, query.partition))
            if query.account is not None:
                conds.append(job.c.account == query.account)
            if query.jobname is not None:
                conds.append(job.c.job_name == query.jobname)
            if query.associd is not None:
                conds.append(job.c.id_assoc == query.associd)
            if query.state is not None:
                conds.append(self._base_state_is(query.state))
            ops = {"=": "__eq__", ">": "__gt__", "<": "__lt__", ">=": "__ge__", "<=": "__le__"}
            for op, value in query.jobid:
                conds.append(getattr(job.c.id_job, ops[op])(value))
            conds.extend(self._time_conditions(query))
            if query.order == "jobid":
                order = [job.c.id_job.desc(), job.c.time_submit.desc()]
                if query.cursor is not None:
                    last_id, last_submit = query.cursor.job_id, query.cursor.submit
                    conds.append(
                        or_(
                            job.c.id_job < last_id,
                            and_(job.c.id_job == last_id, job.c.time_submit < last_submit),
                        )
                    )
            else:
                order = [job.c.job_db_inx.desc()]
                if query.cursor is not None:
                    conds.append(job.c.job_db_inx < query.cursor.inx)
            stmt = select(*self._job_columns(conn)).where(*conds).order_by(*order).limit(query.limit + 1)
            if query.offset:
                stmt = stmt.offset(query.offset)
            rows = conn.execute(stmt).all()
            more = len(rows) > query.limit
            rows = rows[: query.limit]
            jobs = self._jobs(conn, rows)
        next_cursor = None
        if more and rows:
            last = rows[-1]
            next_cursor = Cursor(inx=int(last.job_db_inx), job_id=int(last.id_job),
                                 submit=int(last.time_submit)).encode()
        return HistoryPage(jobs=jobs, next_cursor=next_cursor, limit=query.limit, offset=query.offset)

    def _time_conditions(self, query: HistoryQuery) -> list[ColumnElement[bool]]:
        job = self.tables.job
        conds: list[ColumnElement[bool]] = []
        pairs = (
            (job.c.time_submit, query.submitted_after, query.submitted_before),
            (job.c.time_start, query.started_after, query.started_before),
            (job.c.time_end, query.ended_after, query.ended_before),
        )
        for column, after, before in pairs:
            if after is not None:
                conds.append(column >= max(1, _epoch(after)))
            if before is not None:
                # 0 means "not yet": a job that never started did not start before anything.
                conds.append(and_(column > 0, column < _epoch(before)))
        return conds

    def jobs_by_id(self, ids: Iterable[int], *, include_hidden: bool = False) -> dict[int, list[HistoryJob]]:
        """Every row of each job id, newest submission first (a requeue adds a row).

        Ids with no (visible) row are absent from the result.
        """
        job = self.tables.job
        wanted = sorted({int(i) for i in ids})
        out: dict[int, list[HistoryJob]] = {}
        with self._conn() as conn:
            for start in range(0, len(wanted), _ID_CHUNK):
                chunk = wanted[start : start + _ID_CHUNK]
                conds: list[ColumnElement[bool]] = [job.c.id_job.in_(chunk)]
                conds.extend(self._visible() if not include_hidden else [job.c.deleted == 0])
                stmt = (
                    select(*self._job_columns(conn)).where(*conds)
                    .order_by(job.c.time_submit.desc(), job.c.job_db_inx.desc())
                )
                for hj in self._jobs(conn, conn.execute(stmt).all()):
                    out.setdefault(hj.job_id, []).append(hj)
        return out

    def steps_for_jobs(
        self, ids: Iterable[int], *, include_hidden: bool = False
    ) -> dict[int, list[HistoryStep]]:
        """Steps of each job id (all its submissions), newest submission first, then by step id.

        Step ids: -5 batch, -4 extern, -6 interactive, 0.. srun steps.
        """
        job, step = self.tables.job, self.tables.step
        wanted = sorted({int(i) for i in ids})
        out: dict[int, list[HistoryStep]] = {}
        with self._conn() as conn:
            tres_names = self._tres(conn)
            for start in range(0, len(wanted), _ID_CHUNK):
                chunk = wanted[start : start + _ID_CHUNK]
                conds: list[ColumnElement[bool]] = [job.c.id_job.in_(chunk), step.c.deleted == 0]
                conds.extend(self._visible() if not include_hidden else [job.c.deleted == 0])
                stmt = (
                    select(job.c.id_job, job.c.time_submit, *step.c)
                    .select_from(step.join(job, step.c.job_db_inx == job.c.job_db_inx))
                    .where(*conds)
                    .order_by(job.c.time_submit.desc(), step.c.job_db_inx.desc(), step.c.id_step)
                )
                for r in conn.execute(stmt):
                    code, signal = decode_wait_status(r.exit_code)
                    tres = parse_tres(r.tres_alloc, tres_names)
                    out.setdefault(int(r.id_job), []).append(
                        HistoryStep(
                            job_db_inx=r.job_db_inx,
                            job_id=r.id_job,
                            step_id=r.id_step,
                            step_name=r.step_name
                            or {-5: "batch", -4: "extern"}.get(r.id_step, str(r.id_step)),
                            state=_state_name(int(r.state)),
                            state_code=int(r.state) & _JOB_STATE_BASE,
                            exit_code=code,
                            exit_signal=signal,
                            nodes=_nodes(r.nodelist),
                            node_count=r.nodes_alloc or 0,
                            task_count=r.task_cnt or 0,
                            cpus=tres.get("cpu"),
                            memory_mib=tres.get("mem"),
                            start_time=_time(r.time_start),
                            end_time=_time(r.time_end),
                            user_cpu_time=timedelta(seconds=r.user_sec or 0, microseconds=r.user_usec or 0),
                            system_cpu_time=timedelta(seconds=r.sys_sec or 0, microseconds=r.sys_usec or 0),
                            max_rss_bytes=_max_rss(r.tres_usage_in_max),
                        )
                    )
        return out

    def users(self, name: str | None = None) -> list[AccountingUser]:
        """Users known to slurmdbd (all, or the one named) with this cluster's associations.

        An unknown name gives an empty list.
        """
        u, a = self.tables.user, self.tables.assoc
        with self._conn() as conn:
            if name is not None and not (self._holds(conn, u.c.name, name) and self._holds(conn, a.c.user, name)):
                return []
            user_stmt = select(u.c.name, u.c.admin_level).where(u.c.deleted == 0)
            assoc_stmt = select(*a.c).where(a.c.deleted == 0, a.c.user != "")
            if name is not None:
                user_stmt = user_stmt.where(u.c.name == name)
                assoc_stmt = assoc_stmt.where(a.c.user == name)
            user_rows = conn.execute(user_stmt.order_by(u.c.name)).all()
            assoc_rows = conn.execute(assoc_stmt.order_by(a.c.acct, a.c.partition, a.c.id_assoc)).all()
            tres_names = self._tres(conn)
        by_user: dict[str, list[Association]] = {}
        defaults: dict[str, str] = {}
        for r in assoc_rows:
            by_user.setdefault(r.user, []).append(self._association(r, tres_names))
            if r.is_def and not r.partition:
                defaults[r.user] = r.acct
        out = []
        for r in user_rows:
            out.append(
                AccountingUser(
                    name=r.name,
                    uid=_uid_of(r.name),
                    admin_level=_ADMIN_LEVELS.get(int(r.admin_level), "none"),
                    default_account=defaults.get(r.name),
                    associations=by_user.get(r.name, []),
                )
            )
        return out

    @staticmethod
    def _association(r: Row[Any], tres_names: Mapping[int, str]) -> Association:
        return Association(
            id=r.id_assoc,
            user=r.user or None,
            account=r.acct,
            partition=r.partition or None,
            parent_account=r.parent_acct or None,
            is_default=bool(r.is_def),
            shares=r.shares,
            priority=None if r.priority in (None, _NO_VAL, _INFINITE) else r.priority,
            limits=AssociationLimits(
                max_jobs=_limit(r.max_jobs),
                max_jobs_accrue=_limit(r.max_jobs_accrue),
                max_submit_jobs=_limit(r.max_submit_jobs),
                max_wall_minutes=_limit(r.max_wall_pj),
                max_tres_per_job=parse_tres(r.max_tres_pj, tres_names),
                max_tres_per_node=parse_tres(r.max_tres_pn, tres_names),
                max_tres_minutes_per_job=parse_tres(r.max_tres_mins_pj, tres_names),
                grp_jobs=_limit(r.grp_jobs),
                grp_submit_jobs=_limit(r.grp_submit_jobs),
                grp_wall_minutes=_limit(r.grp_wall),
                grp_tres=parse_tres(r.grp_tres, tres_names),
                grp_tres_minutes=parse_tres(r.grp_tres_mins, tres_names),
            ),
        )

    def find_jobs(
        self, criteria: Mapping[str, Any], *, limit: int = 1000, include_hidden: bool = False
    ) -> list[int]:
        """Job ids whose rows equal every criterion, newest submission first, at most ``limit``.

        Keys: see :data:`FIND_JOBS_CRITERIA` (``state`` takes a code or a name, ``user`` a
        name). Raises :class:`InvalidInput` naming an unknown key or a value of the wrong type.
        """
        job = self.tables.job
        columns = {
            "job_id": job.c.id_job,
            "array_job_id": job.c.id_array_job,
            "user_id": job.c.id_user,
            "account": job.c.account,
            "partition": job.c.partition,
            "name": job.c.job_name,
            "association_id": job.c.id_assoc,
        }
        if not 1 <= limit <= 100_000:
            raise InvalidInput("limit must be between 1 and 100000", param="limit")
        with self._conn() as conn:
            conds = self._visible() if not include_hidden else [job.c.deleted == 0]
            for key, value in criteria.items():
                if key == "state":
                    code = value if type(value) is int else parse_job_state(str(value), param=key)
                    conds.append(self._base_state_is(code))
                elif key == "user":
                    if not isinstance(value, str):
                        raise InvalidInput("user must be a user name", param=key)
                    if not self._holds(conn, self.tables.assoc.c.user, value):
                        return []
                    user_cond = self._user_condition(conn, value)
                    conds.append(user_cond if user_cond is not None else false())
                elif key in columns:
                    want_int = key in {"job_id", "array_job_id", "user_id", "association_id"}
                    if want_int and type(value) is not int:
                        raise InvalidInput(f"{key} must be an integer", param=key)
                    if not want_int and not isinstance(value, str):
                        raise InvalidInput(f"{key} must be a string", param=key)
                    if want_int and not 0 <= value <= _INFINITE:
                        return []  # the id columns are unsigned 32-bit: no row has this one
                    if not want_int and not self._holds(conn, columns[key], value):
                        return []
                    if key == "partition":
                        if not include_hidden and value in self.hidden_partitions:
                            return []
                        conds.append(_partition_member(job.c.partition, value))
                    else:
                        conds.append(columns[key] == value)
                else:
                    raise InvalidInput(
                        f"unknown job criterion {key!r} (known: {', '.join(FIND_JOBS_CRITERIA)})", param=key
                    )
            stmt = select(job.c.id_job).where(*conds).order_by(job.c.job_db_inx.desc()).limit(limit * 2)
            seen: dict[int, None] = {}
            for job_id in conn.execute(stmt).scalars():
                seen.setdefault(int(job_id), None)
                if len(seen) >= limit:
                    break
        return list(seen)
