"""The /history query language, compatible with the Flask "Slurm RestAPI" it replaces.

A query string is ``&``-separated ``<name><op><value>`` terms. It must be parsed from the
*raw* query string: ``jobid<=987654`` and ``jobid<5`` are not ``key=value`` pairs.

=================  ======================  =============================================
filter             comparators             value
=================  ======================  =============================================
limit              =                       1..1000, default 10
offset             =                       rows to skip (seed compatible; prefer cursor)
cursor             =                       ``next_cursor`` of the previous page (any query's)
user               =                       user name (or uid when no such name)
partition          =                       partition name
account            =                       account name
jobname            =                       exact job name
associd            =                       association id
state              =                       0-11 or a name: FAILED, failed, JOB_FAILED, F ...
jobid              = > < >= <=             job id; may repeat to give a range
submitted_after    =                       ISO 8601 (naive = UTC) or Unix seconds;
submitted_before   =                       ``*_after`` is inclusive, ``*_before`` exclusive,
started_after ...  =                       ``started_*``/``ended_*`` skip jobs that never
ended_before       =                       started/ended
=================  ======================  =============================================

Order: newest submission first (``job_db_inx DESC``, slurmdbd's primary key, so keyset
paging is exact even across requeues and ``--fresh`` job id restarts). When a ``jobid``
filter is given the order is ``id_job DESC, time_submit DESC`` instead: that is the
``id_job`` unique index, so a range like ``jobid<=700000`` reads only matching rows.
A cursor is the last row's position in both orders, so it continues any query; with
``offset`` too, that many rows after it are skipped.

Every malformed term raises :class:`InvalidInput` naming the parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import unquote_plus

from slurmtower.errors import InvalidInput
from slurmtower.models.accounting import JOB_STATE_NAMES

__all__ = [
    "CURSOR_RE",
    "DEFAULT_LIMIT",
    "JOB_STATE_RE",
    "MAX_LIMIT",
    "NAME",
    "NAME_RE",
    "UNIX_SECONDS",
    "Comparator",
    "Cursor",
    "HistoryOrder",
    "HistoryQuery",
    "check_names",
    "parse_history_query",
    "parse_job_state",
    "parse_time",
]

DEFAULT_LIMIT = 10
MAX_LIMIT = 1000
_MAX_VALUE_LEN = 256
_UINT32 = 2**32 - 1
_UINT64 = 2**64 - 1
#: A ``/history`` cursor (:class:`Cursor`).
CURSOR_RE = re.compile(r"^[0-9]{1,20}\.[0-9]{1,10}\.[0-9]{1,20}$")

Comparator = Literal["=", ">", "<", ">=", "<="]
HistoryOrder = Literal["submit", "jobid"]

_DIGITS = re.compile(r"[0-9]{1,20}")
_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(>=|<=|>|<|=)(.*)$", re.S)
_TIME_FILTERS = (
    "submitted_after",
    "submitted_before",
    "started_after",
    "started_before",
    "ended_after",
    "ended_before",
)
_EQUALITY_ONLY = frozenset(
    {
        "limit",
        "offset",
        "cursor",
        "user",
        "partition",
        "account",
        "jobname",
        "associd",
        "state",
        *_TIME_FILTERS,
    }
)

_STATE_ALIASES: dict[str, int] = {}
for _code, _name in enumerate(JOB_STATE_NAMES):
    _STATE_ALIASES[_name] = _code
    _STATE_ALIASES[f"JOB_{_name}"] = _code
_STATE_ALIASES.update(
    {
        # the seed's table says JOB_COMPLETE; sacct's short codes
        "COMPLETE": 3,
        "JOB_COMPLETE": 3,
        "CANCELED": 4,
        "OOM": 11,
        "PD": 0,
        "R": 1,
        "S": 2,
        "CD": 3,
        "CA": 4,
        "F": 5,
        "TO": 6,
        "NF": 7,
        "PR": 8,
        "BF": 9,
        "DL": 10,
    }
)


@dataclass(frozen=True)
class Cursor:
    """Keyset position: the last row of the previous page, by every key either order sorts on
    (``job_db_inx``; ``id_job``, ``time_submit``), so that any cursor continues any query.

    Its text is those three numbers, ``<job_db_inx>.<id_job>.<time_submit>``
    (:data:`CURSOR_RE`); a number past what the column holds is its largest value (a position
    after every row).
    """

    inx: int
    job_id: int
    submit: int

    def encode(self) -> str:
        return f"{self.inx}.{self.job_id}.{self.submit}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Raises :class:`InvalidInput` (param ``cursor``) for text :data:`CURSOR_RE` refuses."""
        if not CURSOR_RE.match(text):
            raise InvalidInput(f"cursor is not a cursor from a previous page (<row>.<job id>.<submit time>), "
                               f"not {text[:60]!r}", param="cursor")
        inx, job_id, submit = (int(part) for part in text.split("."))
        # slurmdbd's job_db_inx is a bigint unsigned: from 26.05 on it is the run's sluid,
        # e.g. 15913056731698157568, above 2**63
        return cls(inx=min(inx, _UINT64), job_id=min(job_id, _UINT32), submit=min(submit, _UINT64))


@dataclass(frozen=True)
class HistoryQuery:
    """A parsed /history query. Build with :func:`parse_history_query` or directly."""

    limit: int = DEFAULT_LIMIT
    offset: int = 0
    cursor: Cursor | None = None
    user: str | None = None
    partition: str | None = None
    account: str | None = None
    jobname: str | None = None
    associd: int | None = None
    state: int | None = None
    jobid: tuple[tuple[Comparator, int], ...] = ()
    submitted_after: datetime | None = None
    submitted_before: datetime | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    ended_after: datetime | None = None
    ended_before: datetime | None = None

    @property
    def order(self) -> HistoryOrder:
        return "jobid" if self.jobid else "submit"

    def after(self, cursor: Cursor) -> HistoryQuery:
        """The same query, continuing after ``cursor`` (the next page)."""
        return replace(self, cursor=cursor, offset=0)


def _any_case(words: list[str]) -> str:
    """An alternation of ``words`` (upper case) in any case, ASCII letters only."""
    return "|".join("".join(f"[{c}{c.lower()}]" if c.isalpha() else re.escape(c) for c in w)
                    for w in sorted(words, key=lambda w: (-len(w), w)))


#: A job state as ``state`` takes it (:func:`parse_job_state`): a code 0-11 or a name.
JOB_STATE_RE = re.compile(rf"^(?:0{{0,19}}[0-9]|0{{0,18}}1[01]|{_any_case(list(_STATE_ALIASES))})$")


def parse_job_state(value: str, *, param: str = "state") -> int:
    """A job state code from a number 0-11 or a name (FAILED, failed, JOB_FAILED, F):
    :data:`JOB_STATE_RE`.

    Raises :class:`InvalidInput` naming ``param``.
    """
    if not JOB_STATE_RE.match(value):
        if _DIGITS.fullmatch(value):
            raise InvalidInput(
                f"state must be 0-{len(JOB_STATE_NAMES) - 1} or a state name, not {value!r}", param=param
            )
        raise InvalidInput(f"unknown job state {value[:60]!r}", param=param)
    return int(value) if value.isdigit() else _STATE_ALIASES[value.upper()]


def _int(value: str, param: str, *, minimum: int, maximum: int) -> int:
    if not _DIGITS.fullmatch(value):
        raise InvalidInput(f"{param} must be a whole number, not {value!r}", param=param)
    number = int(value)
    if not minimum <= number <= maximum:
        raise InvalidInput(f"{param} must be between {minimum} and {maximum}, not {number}", param=param)
    return number


#: Unix seconds as the time filters take them (an ISO 8601 time is the other form).
UNIX_SECONDS = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,9})?$")
_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)


def parse_time(value: str, param: str) -> datetime:
    """A time from ISO 8601 (naive: UTC) or Unix seconds (:data:`UNIX_SECONDS`), in UTC.

    A time before year 1 or after year 9999 once in UTC (``0001-01-01T00:00+05:00``, 12-digit
    Unix seconds) is the first or last time there is: as a bound it keeps or leaves out
    everything, as it would. Raises :class:`InvalidInput` naming ``param`` for anything else.
    """
    text = value.strip()
    try:
        if UNIX_SECONDS.match(text):
            try:
                return datetime.fromtimestamp(float(text), UTC)
            except (OverflowError, OSError, ValueError):
                return _LAST
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            # Naive times are read as UTC: the API must not depend on the server's local zone.
            return parsed.replace(tzinfo=UTC)
        try:
            return parsed.astimezone(UTC)
        except OverflowError:  # an offset carried it past year 9999 or before year 1
            return _FIRST if parsed.year == 1 else _LAST
    except ValueError as exc:
        raise InvalidInput(
            f"{param} must be an ISO 8601 time or Unix seconds, not {value[:60]!r}", param=param,
        ) from exc


def parse_history_query(raw_query_string: str) -> HistoryQuery:
    """Parse a raw /history query string (``jobid<=987654&user=alice&limit=25``).

    Raises :class:`InvalidInput` with ``param`` set for an unknown filter, a comparator the
    filter does not allow (``user>x``), a repeated filter, a malformed or out-of-range value.
    """
    values: dict[str, object] = {}
    jobid: list[tuple[Comparator, int]] = []
    text = raw_query_string[1:] if raw_query_string.startswith("?") else raw_query_string
    for part in text.split("&"):
        if not part:
            continue
        # Split on '&' before decoding so an encoded %26 stays inside its value; decode
        # before finding the operator because clients may send jobid%3C%3D5 for jobid<=5.
        term = unquote_plus(part)
        match = _TERM.match(term)
        if match is None:
            lead = re.match(r"[A-Za-z0-9_]*", term)
            param = lead.group(0) if lead and lead.group(0) else term[:40]
            raise InvalidInput(f"malformed filter {term[:80]!r}: expected name, operator, value", param=param)
        name, op, value = match.group(1), match.group(2), match.group(3)
        if name not in _EQUALITY_ONLY and name != "jobid":
            known = ", ".join(sorted(_EQUALITY_ONLY | {"jobid"}))
            raise InvalidInput(f"unknown filter {name[:60]!r} (known: {known})", param=name[:60])
        if name in _EQUALITY_ONLY and op != "=":
            raise InvalidInput(f"filter {name!r} only allows '=', not {op!r}", param=name)
        if value == "":
            raise InvalidInput(f"filter {name!r} has an empty value", param=name)
        if len(value) > _MAX_VALUE_LEN:
            raise InvalidInput(f"value of {name!r} is too long", param=name)
        if name == "jobid":
            jobid.append((op, _int(value, name, minimum=0, maximum=_UINT32)))  # type: ignore[arg-type]
            continue
        if name in values:
            raise InvalidInput(f"filter {name!r} given twice", param=name)
        parsed: object
        if name == "limit":
            parsed = _int(value, name, minimum=1, maximum=MAX_LIMIT)
        elif name == "offset":
            parsed = _int(value, name, minimum=0, maximum=2**31 - 1)
        elif name == "associd":
            parsed = _int(value, name, minimum=0, maximum=_UINT32)
        elif name == "state":
            parsed = parse_job_state(value)
        elif name == "cursor":
            parsed = Cursor.decode(value)
        elif name in _TIME_FILTERS:
            parsed = parse_time(value, name)
        else:
            parsed = value
        values[name] = parsed
    return HistoryQuery(jobid=tuple(jobid), **values)  # type: ignore[arg-type]


#: User, account and partition names Slurm accepts (POSIX-ish names; '@' for LDAP domains).
#: Anything else (quotes, spaces, SQL) is refused rather than looked up.
NAME = re.compile(r"[A-Za-z0-9_.@][A-Za-z0-9_.@-]{0,127}")
#: :data:`NAME` as a whole value (the pattern the API declares).
NAME_RE = re.compile(rf"^{NAME.pattern}$")


def check_names(query: HistoryQuery) -> None:
    """Refuse a query whose user, partition or account is no name Slurm accepts (400)."""
    for param in ("user", "partition", "account"):
        value = getattr(query, param)
        if value is not None and not NAME.fullmatch(value):
            raise InvalidInput(f"{param} is not a valid {param} name: {value[:60]!r}", param=param)
