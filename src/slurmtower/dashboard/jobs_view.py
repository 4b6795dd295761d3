"""The view logic of the dashboard's job pages (``/ui/jobs``, ``/ui/jobs/{id}``, ``/ui/history``).

Nothing here does I/O: the routes (:mod:`slurmtower.api.routes.ui_jobs`) read the snapshot,
slurmctld and the accounting database, and hand the results to these functions.

* The queue page selects, searches, sorts and pages over a :class:`JobTable`'s columns and
  indexes; models are built only for the rows of the page shown. Its filters are ``/queue``'s
  (the same helpers parse them, so they mean the same), its cursor says where a page ends.
* Job times are computed at render: a running job's elapsed time is ``now - start_time``, its
  time left the limit minus that (the queue's text form carries neither: both would change
  every second).
* A finished run's CPU and memory efficiency are ``seff``'s: the steps' user + system CPU
  time over elapsed x allocated CPUs, the largest step MaxRSS over the allocated memory.
* The history form is turned into a ``/history`` query string and parsed by
  :func:`~slurmtower.accounting.parse_history_query`, so its filters and errors are the API's.
"""

from __future__ import annotations

import base64
import bisect
import json
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote_plus, unquote_plus, urlencode

from slurmtower.accounting.query import HistoryQuery, parse_history_query
from slurmtower.dashboard.reports_view import usage_link
from slurmtower.errors import InvalidInput
from slurmtower.live.filters import JOB_STATE_WORDS, QueueFilter, encode_cursor
from slurmtower.models import Job, JobState
from slurmtower.models.accounting import JOB_STATE_NAMES, HistoryJob, HistoryStep
from slurmtower.models.job import step_label
from slurmtower.models.node import node_sort_key
from slurmtower.models.table import JobTable
from slurmtower.nodeset import NodeSet

__all__ = [
    "HISTORY_DEFAULT_LIMIT",
    "JOB_STATE_WORDS",
    "PAGE_SIZES",
    "QUEUE_PARAMS",
    "SORTS",
    "Efficiency",
    "HistoryForm",
    "JobPage",
    "QueueQuery",
    "RunView",
    "criterias_json",
    "duration_text",
    "efficiency",
    "history_form",
    "job_times",
    "node_links",
    "page_queue",
    "parse_queue_query",
    "runs_of",
    "step_label",
    "usage_link",
]

#: The queue page's filters: ``/queue``'s, with its meaning (comma-separated: any matches).
QUEUE_FILTERS = ("user", "account", "partition", "state", "name", "nodes")
#: Every parameter of ``/ui/jobs``.
QUEUE_PARAMS = (*QUEUE_FILTERS, "q", "sort", "order", "limit", "after", "before")
#: Sort keys: the table's columns (and the job id, the table's own order); ``activity`` (the
#: default) is the state by what a person opens the page for: running, then pending, then the
#: rest, then the finished jobs slurmctld still holds, each by job id.
SORTS: dict[str, str] = {"activity": "running and pending first", "id": "job id", "user": "user",
                         "account": "account", "partition": "partition", "state": "state", "name": "name"}
DEFAULT_SORT = "activity"
#: The order of states under ``activity`` (those not named come after, before the finished).
ACTIVITY = ("RUNNING", "COMPLETING", "SUSPENDED", "PENDING", "REQUEUED", "CONFIGURING")
_FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                       "DEADLINE", "OUT_OF_MEMORY"})


def _activity_rank(state: str | None) -> int:
    if state in ACTIVITY:
        return ACTIVITY.index(state)
    return len(ACTIVITY) + (1 if state in _FINISHED else 0)
PAGE_SIZES = (25, 50, 100, 200, 500)
DEFAULT_PAGE = 50
#: The job state words ``state=`` takes on the queue page (as ``/queue``: names or squeue's codes).
#: Links to at most this many nodes of a job; beyond, the folded node set is shown as text.
NODE_LINKS = 16


# -- times -----------------------------------------------------------------------------------
def duration_text(value: timedelta | None) -> str:
    """A duration as squeue prints it (``4:05``, ``1:02:03``, ``2-01:02:03``); "" for None."""
    if value is None:
        return ""
    seconds = max(0, int(value.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def job_times(job: Job, now: datetime) -> tuple[timedelta | None, timedelta | None]:
    """(elapsed, time left) of a job slurmctld holds, at ``now``.

    Running: elapsed since its start, left = its limit minus that (None: no limit). Ended
    (completing, or finished and not yet purged): end minus start, nothing left. Pending
    (its start time is an estimate) and suspended (slurmctld's suspended time is not in the
    queue): neither.
    """
    if job.start_time is None or job.state in (JobState.PENDING, JobState.SUSPENDED):
        return None, None
    if job.state is JobState.RUNNING and "COMPLETING" not in job.state_flags:
        elapsed = max(timedelta(0), now - job.start_time)
        left = None if job.time_limit is None else max(timedelta(0), job.time_limit - elapsed)
        return elapsed, left
    end = job.end_time if job.end_time is not None and job.end_time >= job.start_time else None
    return (end - job.start_time if end is not None else None), None


def time_text(value: datetime | None) -> str:
    """``2026-12-01 16:19:34`` in UTC; "" for None."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""


def mib_text(mib: int | float | None) -> str:
    """``512 MiB``, ``1.95 GiB``; "" for None."""
    if mib is None:
        return ""
    if mib >= 1024 * 1024:
        return f"{mib / 1024 / 1024:.2f} TiB"
    if mib >= 1024:
        return f"{mib / 1024:.2f} GiB"
    return f"{mib:.0f} MiB" if float(mib).is_integer() else f"{mib:.1f} MiB"


def node_links(nodes: str | None, limit: int = NODE_LINKS) -> list[str] | None:
    """The node names of a folded set when there are at most ``limit`` (the page links each
    to ``/ui/nodes/{name}``); None when there are more (or the set does not parse)."""
    if not nodes:
        return []
    try:
        names = list(NodeSet(nodes))
    except InvalidInput:
        return None
    return names if len(names) <= limit else None


# -- the queue page ----------------------------------------------------------------------------
def criterias_json(form: Mapping[str, str]) -> str:
    """The page's filters as a job action's ``criterias`` (JSON; ``{}`` without a filter)."""
    return json.dumps({k: form[k] for k in QUEUE_FILTERS if form.get(k)}, sort_keys=True)



@dataclass(frozen=True)
class QueueQuery:
    """A parsed ``/ui/jobs`` query."""

    filters: dict[str, frozenset[str]] = field(default_factory=dict)
    """Table column -> accepted values (``/queue``'s filters)."""
    search: str | None = None
    sort: str = DEFAULT_SORT
    descending: bool = False
    limit: int = DEFAULT_PAGE
    after: Any = None
    """The sort key (job id, or [value, job id]) the page starts after; or ``before`` it."""
    before: Any = None
    form: dict[str, str] = field(default_factory=dict)
    """The non-empty parameters as given (the form is filled with them again)."""

    def link(self, **changes: str | None) -> str:
        """``?...``: this query with ``changes`` (None drops a parameter); paging cursors are
        dropped unless given."""
        params = {k: v for k, v in self.form.items() if k not in ("after", "before")}
        for key, value in changes.items():
            if value is None:
                params.pop(key, None)
            else:
                params[key] = value
        return "?" + urlencode(params) if params else "?"

    def sort_link(self, sort: str) -> str:
        """The link of a column header: sorted by it, ascending, or reversed when it is already."""
        order = "desc" if self.sort == sort and not self.descending else None
        return self.link(sort=None if sort == DEFAULT_SORT else sort, order=order)


def _cursor_kind(sort: str) -> str:
    # A job-id cursor is /queue's own ("j", job id); others carry the sorted value too.
    return "j" if sort == "id" else f"s:{sort}"


def _decode_cursor(raw: str, sort: str, param: str) -> Any:
    try:
        got = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except ValueError:
        got = None
    ok = isinstance(got, list) and len(got) == 2
    if ok and got[0] != _cursor_kind(sort):
        raise InvalidInput(f"{param}: this page link belongs to another sort order (start from the first page)",
                           param=param)
    key = got[1] if ok else None
    if ok and sort == "id":
        ok = type(key) is int and 0 <= key < 2**63
    elif ok:
        ok = (isinstance(key, list) and len(key) == 2 and (key[0] is None or isinstance(key[0], str))
              and type(key[1]) is int and 0 <= key[1] < 2**63)
    if not ok:
        raise InvalidInput(f"{param} is not a page link this service gave (start from the first page)", param=param)
    return key


def parse_queue_query(params: Mapping[str, str]) -> QueueQuery:
    """``/ui/jobs``'s parameters (unknown and repeated ones already refused); empty values
    (a form's blank fields) are no filter.

    Raises:
        InvalidInput: a filter ``/queue`` would refuse, an unknown sort, a bad page size or link.
    """
    given = {k: v.strip() for k, v in params.items() if v.strip()}
    filters = QueueFilter.from_params(given).columns()
    search = given.get("q")
    if search is not None and (len(search) > 200 or any(ord(c) < 32 for c in search)):
        raise InvalidInput("q: a search is at most 200 printable characters", param="q")
    sort = given.get("sort", DEFAULT_SORT)
    if sort not in SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(SORTS)}, not {sort[:40]!r}", param="sort")
    order = given.get("order", "asc")
    if order not in ("asc", "desc"):
        raise InvalidInput(f"order must be asc or desc, not {order[:40]!r}", param="order")
    raw_limit = given.get("limit", str(DEFAULT_PAGE))
    if not (raw_limit.isascii() and raw_limit.isdigit()) or not 1 <= int(raw_limit) <= max(PAGE_SIZES):
        raise InvalidInput(f"limit must be a whole number from 1 to {max(PAGE_SIZES)}, not {raw_limit[:40]!r}",
                           param="limit")
    if "after" in given and "before" in given:
        raise InvalidInput("give after or before, not both", param="before")
    after = _decode_cursor(given["after"], sort, "after") if "after" in given else None
    before = _decode_cursor(given["before"], sort, "before") if "before" in given else None
    return QueueQuery(filters=filters, search=search, sort=sort, descending=order == "desc", limit=int(raw_limit),
                      after=after, before=before, form=given)


@dataclass(frozen=True)
class JobPage:
    """One page of the queue."""

    rows: list[int]
    """Table rows, in the page's order."""
    matching: int
    """Jobs that match the filters and search (over every page)."""
    position: int
    """Index of the page's first row among the matching ones."""
    next_cursor: str | None
    prev_cursor: str | None
    states: list[tuple[str, int]]
    """(state, jobs) of the matching jobs, most first."""


def _value_key(value: str | None, sort: str = "") -> Any:
    if sort == "activity":
        return (_activity_rank(value), value or "")
    return node_sort_key(value or "")


def _column(table: JobTable, sort: str) -> Sequence[Any] | None:
    """The column a sort orders by (None: the job id, the table's own order)."""
    if sort == "id":
        return None
    return table.columns["state" if sort == "activity" else sort]


def _search(table: JobTable, rows: Sequence[int], text: str) -> list[int]:
    """Rows whose job id is ``text``, or whose name, user or account holds it (any case)."""
    needle = text.casefold()
    hits: set[int] = set()
    for column in ("name", "user", "account"):
        for value, found in table.index(column).items():
            if value and needle in value.casefold():
                hits.update(found)
    if text.isascii() and text.isdigit():
        at = bisect.bisect_left(table.keys, int(text))
        if at < len(table.keys) and table.keys[at] == int(text):
            hits.add(at)
    return [r for r in rows if r in hits]


#: (id(table), what was asked) -> (table, matching rows in ascending sort order): the pages
#: of one query of the newest snapshot share their selection (older snapshots are dropped,
#: so no old table is kept alive).
_ORDERED: dict[tuple[int, Any], tuple[JobTable, list[int], list[tuple[str, int]]]] = {}
_ordered_lock = threading.Lock()


def _ordered(table: JobTable, query: QueueQuery) -> tuple[list[int], list[tuple[str, int]]]:
    """The matching rows in ascending sort order, and their counts by state (most first)."""
    asked = (tuple(sorted((k, tuple(sorted(v))) for k, v in query.filters.items())), query.search, query.sort)
    memo_key = (id(table), asked)
    with _ordered_lock:
        found = _ORDERED.get(memo_key)
    if found is not None and found[0] is table:
        return found[1], found[2]
    rows: Sequence[int] = table.select(**{k: set(v) for k, v in query.filters.items()})
    if query.search:
        rows = _search(table, rows, query.search)
    column = _column(table, query.sort)
    if column is None:
        ordered = list(rows)
    else:
        groups: dict[Any, list[int]] = {}
        for row in rows:
            groups.setdefault(column[row], []).append(row)  # each group in job id order
        ordered = [r for value in sorted(groups, key=lambda v: _value_key(v, query.sort)) for r in groups[value]]
    state = table.columns["state"]
    states = Counter(state[r] for r in ordered).most_common()
    with _ordered_lock:
        for key in [k for k, (t, _rows, _states) in _ORDERED.items() if t is not table]:
            del _ORDERED[key]
        _ORDERED[memo_key] = (table, ordered, states)
        while len(_ORDERED) > 16:
            _ORDERED.pop(next(iter(_ORDERED)))
    return ordered, states


def page_queue(table: JobTable, query: QueueQuery) -> JobPage:
    """The page of ``table`` that ``query`` asks for (keyset paging on the sort key and job id:
    a page link stays right while jobs come and go)."""
    ascending, states = _ordered(table, query)
    total = len(ascending)
    column = _column(table, query.sort)
    keys = table.keys

    def sort_key(row: int) -> Any:
        return keys[row] if column is None else (_value_key(column[row], query.sort), keys[row])

    def cursor_key(raw: Any) -> Any:
        return raw if column is None else (_value_key(raw[0], query.sort), raw[1])

    def cursor(row: int) -> str:
        return encode_cursor(_cursor_kind(query.sort), keys[row] if column is None else [column[row], keys[row]])

    start = 0
    if query.after is not None:
        ck = cursor_key(query.after)
        start = (total - bisect.bisect_left(ascending, ck, key=sort_key) if query.descending
                 else bisect.bisect_right(ascending, ck, key=sort_key))
    elif query.before is not None:
        ck = cursor_key(query.before)
        end = (total - bisect.bisect_right(ascending, ck, key=sort_key) if query.descending
               else bisect.bisect_left(ascending, ck, key=sort_key))
        start = max(0, end - query.limit)
    if query.descending:  # the listed order is ascending's reverse: slice it without a copy
        rows = ascending[max(0, total - start - query.limit):max(0, total - start)][::-1]
    else:
        rows = ascending[start:start + query.limit]
    return JobPage(
        rows=rows, matching=total, position=start,
        next_cursor=cursor(rows[-1]) if rows and start + len(rows) < total else None,
        prev_cursor=cursor(rows[0]) if rows and start > 0 else None,
        states=states,
    )


# -- one job: its runs, steps and efficiency ------------------------------------------------------
@dataclass(frozen=True)
class Efficiency:
    """A finished run's use of what it was given, as ``seff`` computes it."""

    cpu_seconds: float
    """User + system CPU time of its steps."""
    core_seconds: float | None
    """Elapsed x allocated CPUs (None: no start, end or CPU count)."""
    max_rss_bytes: int | None
    """The largest MaxRSS of its steps (None: none recorded)."""
    memory_bytes: int | None
    """Memory allocated to the job (its TRES ``mem``)."""

    @property
    def cpu(self) -> float | None:
        return self.cpu_seconds / self.core_seconds if self.core_seconds else None

    @property
    def memory(self) -> float | None:
        if self.max_rss_bytes is None or not self.memory_bytes:
            return None
        return self.max_rss_bytes / self.memory_bytes


_LIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "REQUEUED"})


def efficiency(run: HistoryJob, steps: Iterable[HistoryStep]) -> Efficiency | None:
    """CPU and memory efficiency of a run that ran and ended (None for one that did not)."""
    if run.state in _LIVE_STATES and run.end_time is None:
        return None
    if run.start_time is None or run.end_time is None:
        return None
    steps = list(steps)
    cpu = sum((s.user_cpu_time + s.system_cpu_time).total_seconds() for s in steps)
    elapsed = (run.end_time - run.start_time).total_seconds()
    core = elapsed * run.cpus if run.cpus else None
    rss = [s.max_rss_bytes for s in steps if s.max_rss_bytes is not None]
    return Efficiency(cpu_seconds=cpu, core_seconds=core or None, max_rss_bytes=max(rss) if rss else None,
                      memory_bytes=run.memory_mib * 1024 * 1024 if run.memory_mib else None)


@dataclass(frozen=True)
class RunView:
    """One run of a job (a requeue starts another) as accounting recorded it."""

    number: int
    """1 for the first run."""
    record: HistoryJob
    steps: list[HistoryStep]
    efficiency: Efficiency | None

    @property
    def elapsed(self) -> timedelta | None:
        r = self.record
        if r.start_time is None:
            return None
        end = r.end_time or datetime.now(UTC)
        return max(timedelta(0), end - r.start_time)


def runs_of(records: Sequence[HistoryJob], steps: Sequence[HistoryStep]) -> list[RunView]:
    """The runs of one job id, newest first, each with its steps (``jobs_by_id`` and
    ``steps_for_jobs`` give them newest first)."""
    by_run: dict[int, list[HistoryStep]] = {}
    for step in steps:
        by_run.setdefault(step.job_db_inx, []).append(step)
    out = []
    for i, record in enumerate(records):
        own = by_run.get(record.job_db_inx, [])
        out.append(RunView(number=len(records) - i, record=record, steps=own, efficiency=efficiency(record, own)))
    return out


def exit_text(code: int | None, signal: int | None) -> str:
    """``rc:signal`` as sacct prints it; "" when nothing was recorded."""
    if code is None and signal is None:
        return ""
    return f"{code or 0}:{signal or 0}"


# -- the history page ----------------------------------------------------------------------------
HISTORY_DEFAULT_LIMIT = 50
_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(>=|<=|>|<|=)(.*)$", re.S)
#: The form's fields for the query's jobid terms.
_JOBID_FIELDS = {"jobid_from": ">=", "jobid_to": "<="}
_JOBID_FORM = {"=": "jobid", ">=": "jobid_from", "<=": "jobid_to"}
#: The base states the form offers (``/history``'s ``state`` takes a code or a name).
HISTORY_STATES = JOB_STATE_NAMES


@dataclass(frozen=True)
class HistoryForm:
    """The history page's query: the form's values and the ``/history`` query it stands for."""

    terms: list[str]
    """The raw ``/history`` terms (``jobid>=5``, ``user=alice``), cursor excluded."""
    cursor: str | None
    values: dict[str, str]
    """What each form field shows."""
    query: HistoryQuery | None = None
    """Parsed (None when it does not parse: see :attr:`error`)."""
    error: InvalidInput | None = None
    """What ``/history`` would answer about it (its message and parameter)."""

    def link(self, cursor: str | None = None) -> str:
        terms = [*self.terms, *([f"cursor={quote_plus(cursor)}"] if cursor else [])]
        return "?" + "&".join(terms) if terms else "?"

    @property
    def api_link(self) -> str:
        """The same query on ``/history`` (JSON)."""
        return "/history" + self.link(self.cursor)


def history_form(raw_query_string: str) -> HistoryForm:
    """The history page's query string as a ``/history`` one: blank fields dropped, the form's
    ``jobid_from`` / ``jobid_to`` as ``jobid>=`` / ``jobid<=``; any ``/history`` term may be given
    as is. Parsed by ``/history``'s own parser; the page's default limit is added.

    A query ``/history`` refuses comes back with its :attr:`~HistoryForm.error`.
    """
    terms: list[str] = []
    values: dict[str, str] = {}
    cursor: str | None = None
    limit_given = False
    text = raw_query_string[1:] if raw_query_string.startswith("?") else raw_query_string
    for part in text.split("&"):
        if not part:
            continue
        match = _TERM.match(unquote_plus(part))
        if match is None:
            terms.append(part)  # the parser names what is wrong with it
            continue
        name, op, value = match.group(1), match.group(2), match.group(3).strip()
        if op == "=" and not value:
            continue  # a blank field of the form
        if name in _JOBID_FIELDS and op == "=":
            op, name = _JOBID_FIELDS[name], "jobid"
            part = f"jobid{quote_plus(op)}{quote_plus(value)}"
        if name == "jobid":
            if op in (">", "<") and value.isascii() and value.isdigit():
                # shown as the inclusive bound the form has (same jobs)
                op, value = (">=", str(int(value) + 1)) if op == ">" else ("<=", str(max(0, int(value) - 1)))
            values[_JOBID_FORM.get(op, "jobid")] = value
        elif op == "=":
            values[name] = value
        if name == "cursor" and op == "=":
            cursor = value
            continue
        limit_given = limit_given or name == "limit"
        terms.append(part)
    if not limit_given:
        terms.append(f"limit={HISTORY_DEFAULT_LIMIT}")
        values["limit"] = str(HISTORY_DEFAULT_LIMIT)
    raw = "&".join([*terms, *([f"cursor={quote_plus(cursor)}"] if cursor else [])])
    try:
        query = parse_history_query(raw)
    except InvalidInput as exc:
        return HistoryForm(terms=terms, cursor=cursor, values=values, error=exc)
    return HistoryForm(terms=terms, cursor=cursor, values=values, query=query)
