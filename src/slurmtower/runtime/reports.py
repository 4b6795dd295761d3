"""The usage reports as every adapter asks for them: query parameters parsed once (the API's
query string, the dashboard's form, the CLI's options), narrowed to what the caller may see
(:meth:`~slurmtower.visibility.Visibility.report_filters`), run on slurmdbd's database
(:class:`~slurmtower.accounting.reports.Reports`) and flattened to rows for CSV and tables.

::

    report = await read_report(services, "usage", {"start": "2026-11-01", "end": "2026-12-01"}, principal)
    text = report_csv(report)

    # where no event loop runs (the CLI): the same steps, blocking
    query = parse_report("availability", params)
    report = run_report(reports, query, principal, policy, own_accounts=list, partitions=live_partitions,
                        wanted_partitions=wanted_partitions(params))
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, get_args

from slurmtower.accounting.reports import (
    DEFAULT_SIZE_BUCKETS,
    AvailabilityQuery,
    EfficiencyQuery,
    Reports,
    UsageQuery,
    WaitQuery,
)
from slurmtower.errors import InvalidInput
from slurmtower.events.store import MAX_QUERY_LIMIT, EventStore
from slurmtower.models import Partition
from slurmtower.models.event import NODE_STATE
from slurmtower.models.reports import (
    AvailabilityReport,
    AvailabilityRow,
    EfficiencyReport,
    EfficiencyRow,
    UsageReport,
    WaitReport,
    WaitRow,
)
from slurmtower.runtime.services import Services
from slurmtower.visibility import Viewer, Visibility

__all__ = [
    "NAMES_RE",
    "REPORT_KINDS",
    "REPORT_PARAMS",
    "SIZE_BUCKETS_RE",
    "AnyReport",
    "ReportKind",
    "parse_report",
    "read_report",
    "report_columns",
    "report_csv",
    "report_rows",
    "run_report",
    "wanted_partitions",
]

ReportKind = Literal["usage", "efficiency", "waits", "availability"]
REPORT_KINDS: tuple[str, ...] = get_args(ReportKind)

AnyQuery = UsageQuery | EfficiencyQuery | WaitQuery | AvailabilityQuery
AnyReport = UsageReport | EfficiencyReport | WaitReport | AvailabilityReport

#: Each report's parameters (``start`` and ``end`` are required), as the API, the dashboard and
#: the CLI take them; list parameters are comma-separated.
REPORT_PARAMS: dict[str, tuple[str, ...]] = {
    "usage": ("start", "end", "period", "group_by", "tres", "top", "users", "accounts", "rollup"),
    "efficiency": ("start", "end", "group_by", "top", "users", "accounts"),
    "waits": ("start", "end", "size_buckets", "partitions", "accounts"),
    "availability": ("start", "end", "partitions", "top_reasons"),
}
_MAX_PARAM = 4096  # a longer value is no name list anyone means
_MAX_NAMES = 100
_NAME = r"[^\x00\n, ](?:[^\x00\n,]{0,254}[^\x00\n, ])?"
#: A list parameter (``users``, ``accounts``, ``partitions``, ``tres``): 1-100 comma-separated
#: names of 1-256 characters, no NUL or newline (spaces around a name and empty items ignored).
NAMES_RE = re.compile(rf"^[ ,]*{_NAME}(?: *,[ ,]*{_NAME}){{0,{_MAX_NAMES - 1}}}[ ,]*$")
_BUCKET = "|".join(f"0{{{z}}}[1-9][0-9]{{0,{8 - z}}}" for z in range(9))
#: ``size_buckets``: 1-20 comma-separated whole numbers from 1 (up to 9 digits); they must
#: also increase, which the report checks.
SIZE_BUCKETS_RE = re.compile(rf"^[ ,]*(?:{_BUCKET})(?: *,[ ,]*(?:{_BUCKET})){{0,19}}[ ,]*$")


def _list(params: Mapping[str, str], name: str) -> tuple[str, ...]:
    value = params.get(name, "")
    if name in params and not (SIZE_BUCKETS_RE if name == "size_buckets" else NAMES_RE).match(value):
        what = "at most 20 whole numbers from 1" if name == "size_buckets" else f"1-{_MAX_NAMES} names"
        raise InvalidInput(f"{name} must be {what}, comma-separated, not {value[:60]!r}", param=name)
    return tuple(v.strip(" ") for v in value.split(",") if v.strip(" "))


def _int(params: Mapping[str, str], name: str) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    if not (text.isascii() and text.strip().isdigit()) or len(text) > 9:  # int("²") raises
        raise InvalidInput(f"{name} must be a whole number, not {text[:60]!r}", param=name)
    return int(text)


def parse_report(kind: str, params: Mapping[str, str]) -> AnyQuery:
    """The query of report ``kind`` from its parameters (strings, as a query string has them).

    Raises :class:`InvalidInput` naming the parameter: an unknown report or parameter, a
    missing ``start``/``end``, an empty value, a number that is none, a list :data:`NAMES_RE`
    or :data:`SIZE_BUCKETS_RE` refuses, a value over 4,096 characters. The values themselves
    (a group, a period, a range) are checked by :class:`Reports`.
    """
    if kind not in REPORT_PARAMS:
        raise InvalidInput(f"unknown report {kind[:60]!r} (known: {', '.join(REPORT_KINDS)})", param="report")
    known = REPORT_PARAMS[kind]
    for name, value in params.items():
        if name not in known:
            raise InvalidInput(f"unknown parameter {name[:60]!r} of the {kind} report (known: {', '.join(known)})",
                               param=name[:60])
        if len(value) > _MAX_PARAM:
            raise InvalidInput(f"{name} is longer than {_MAX_PARAM} characters", param=name)
        if not value and name not in ("start", "end"):
            raise InvalidInput(f"{name} is empty (leave it out for its default)", param=name)
    for name in ("start", "end"):
        if not params.get(name):
            raise InvalidInput(f"{name} is required (ISO 8601, e.g. 2026-11-01T00:00:00Z, or Unix seconds)",
                               param=name)
    start, end = params["start"], params["end"]
    if kind == "usage":
        return UsageQuery(start=start, end=end, period=params.get("period") or "range",
                          group_by=params.get("group_by") or "account", tres=_list(params, "tres") or ("cpu",),
                          top=_int(params, "top"), users=_list(params, "users"), accounts=_list(params, "accounts"),
                          rollup=params.get("rollup") or "auto")
    if kind == "efficiency":
        return EfficiencyQuery(start=start, end=end, group_by=params.get("group_by") or "user",
                               top=_int(params, "top"), users=_list(params, "users"),
                               accounts=_list(params, "accounts"))
    if kind == "waits":
        buckets = _list(params, "size_buckets")
        return WaitQuery(start=start, end=end,
                         size_buckets=tuple(int(b) for b in buckets) if buckets else DEFAULT_SIZE_BUCKETS,
                         partitions=_list(params, "partitions"), accounts=_list(params, "accounts"))
    top_reasons = _int(params, "top_reasons")
    return AvailabilityQuery(start=start, end=end, partitions=(),  # the live partitions: run_report's
                             top_reasons=10 if top_reasons is None else top_reasons)


def wanted_partitions(params: Mapping[str, str]) -> tuple[str, ...]:
    """Availability's ``partitions`` parameter: the partitions asked for (none: every one)."""
    return _list(params, "partitions")


def _availability_partitions(query: AvailabilityQuery, wanted: Sequence[str], partitions: Sequence[Partition],
                             policy: Visibility) -> AvailabilityQuery:
    names = {p.name for p in policy.partitions(partitions)}
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise InvalidInput(f"no partition {unknown[0][:60]!r} (known: {', '.join(sorted(names))})",
                           param="partitions")
    # Every partition goes in, hidden ones too: the report leaves out the nodes only in them.
    return replace(query, partitions=list(partitions), wanted=tuple(wanted))


def run_report(reports: Reports, query: AnyQuery, viewer: Viewer, policy: Visibility, *,
               own_accounts: Any, partitions: Sequence[Partition] = (),
               wanted_partitions: Sequence[str] = (), events: EventStore | None = None) -> AnyReport:
    """Run ``query`` for ``viewer`` (blocking: the database is read in this thread).

    Args:
        reports: the reader.
        query: from :func:`parse_report`.
        viewer: who asks; the users and accounts the report covers are narrowed by ``policy``.
        own_accounts: ``() -> the viewer's accounts``, asked only when the policy needs them.
        partitions: every live partition, as Slurm gives them (availability reads their
            nodes; ``policy`` leaves out hidden ones and the nodes only in them).
        wanted_partitions: availability's ``partitions`` parameter (none: every one).
        events: slurmtower's event store: availability's node rows then say how many state
            changes its sensor recorded for each node (``recorded_transitions``).

    Raises:
        InvalidInput: a bad value (400); PermissionDenied: more than the viewer may see (403).
    """
    if isinstance(query, AvailabilityQuery):
        policy.report_filters(viewer, group_by="cluster", users=(), accounts=(), own_accounts=own_accounts)
        found = reports.availability(_availability_partitions(query, wanted_partitions, partitions, policy))
        return found if events is None else _with_recorded(found, events)
    if isinstance(query, WaitQuery):
        hidden = [p for p in query.partitions if not policy.shows_partition(p)]
        if hidden:
            raise InvalidInput(f"no partition {hidden[0][:60]!r}", param="partitions")
        _, accounts = policy.report_filters(viewer, group_by="account", users=(), accounts=query.accounts,
                                            own_accounts=own_accounts)
        return reports.waits(replace(query, accounts=accounts))
    users, accounts = policy.report_filters(viewer, group_by=query.group_by, users=query.users,
                                            accounts=query.accounts, own_accounts=own_accounts)
    if isinstance(query, UsageQuery):
        return reports.usage(replace(query, users=users, accounts=accounts))
    return reports.efficiency(replace(query, users=users, accounts=accounts))


async def read_report(services: Services, kind: str, params: Mapping[str, str], viewer: Viewer) -> AnyReport:
    """Report ``kind`` of ``params`` for ``viewer``, as the API and the dashboard answer it:
    parsed (:func:`parse_report`), narrowed by the settings' visibility policy (the viewer's
    accounts read from slurmdbd when the policy needs them), availability over the visible
    live partitions and beside the sensor's own events, read in the accounting threads.

    Raises :class:`InvalidInput` (400), :class:`PermissionDenied` (403), and the accounting
    reader's errors (a database that does not answer: 503).
    """
    query = parse_report(kind, params)
    policy = Visibility.from_settings(services.settings)
    partitions: list[Partition] = []
    wanted: tuple[str, ...] = ()
    if kind == "availability":
        partitions = (await services.live().partitions()).value
        wanted = wanted_partitions(params)

    def own() -> list[str]:
        return sorted({a.account for user in services.accounting_db().users(viewer.name) for a in user.associations})

    def read() -> AnyReport:
        return run_report(services.reports(), query, viewer, policy, partitions=partitions, wanted_partitions=wanted,
                          own_accounts=own, events=services.event_store)

    return await services.accounting_threads().run(read)


def _with_recorded(report: AvailabilityReport, events: EventStore) -> AvailabilityReport:
    found = events.query(types=[NODE_STATE], start=report.start, end=report.end, limit=MAX_QUERY_LIMIT,
                         own=True)
    counts = Counter(e.node for e in found if e.node)
    shown = f"the first {MAX_QUERY_LIMIT:,} of the range's" if len(found) >= MAX_QUERY_LIMIT else "every"
    return report.model_copy(update={
        "nodes": [row.model_copy(update={"recorded_transitions": counts.get(row.node or "", 0)})
                  for row in report.nodes],
        "notes": [*report.notes, f"recorded_transitions: the node state changes slurmtower's sensor recorded "
                                 f"in its own event store ({shown} {len(found)} counted)"],
    })


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6)
    return value


def report_rows(report: AnyReport) -> list[dict[str, Any]]:
    """The report as flat rows (one per group and period and TRES, per row, per partition or
    node), the columns a spreadsheet or a terminal table shows."""
    rows: list[dict[str, Any]] = []
    if isinstance(report, UsageReport):
        for group in report.groups:
            for cell in group.cells:
                for tres in report.tres:
                    rows.append({"period_start": cell.start, "period_end": cell.end, "group": group.name,
                                 "account": group.account, "user": group.user, "partition": group.partition,
                                 "qos": group.qos, "tres": tres, "tres_hours": cell.tres_hours.get(tres, 0.0),
                                 "tres_seconds": cell.tres_seconds.get(tres, 0),
                                 "share": group.share.get(tres)})
    elif isinstance(report, EfficiencyReport):
        for row in [*report.rows, report.total]:
            rows.append(row.model_dump())
    elif isinstance(report, WaitReport):
        for wait in report.rows:
            flat = wait.model_dump(exclude={"sizes"})
            for bucket in wait.sizes:
                flat[_bucket_column(bucket.min_cpus, bucket.max_cpus)] = bucket.jobs
            rows.append(flat)
    else:
        for part in [*report.partitions, *report.nodes]:
            flat = part.model_dump(exclude={"reasons"})
            flat["top_reason"] = part.reasons[0].reason if part.reasons else None
            rows.append(flat)
    return [{k: _cell(v) for k, v in row.items()} for row in rows]


def _inert(value: Any) -> Any:
    # A text cell a spreadsheet would run as a formula (a drain reason "=cmd|..."): quoted.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _bucket_column(low: int, high: int | None) -> str:
    return f"jobs_{low}-{'' if high is None else high}_cpus"


#: The columns of each report's rows (:func:`report_rows`), for the header of an empty one.
_USAGE_COLUMNS = ("period_start", "period_end", "group", "account", "user", "partition", "qos", "tres",
                  "tres_hours", "tres_seconds", "share")


def report_columns(report: AnyReport) -> list[str]:
    """The columns of :func:`report_rows` for ``report``, rows or none: a quiet week's CSV has
    its header line, so a spreadsheet import or a script that reads the columns still works."""
    if isinstance(report, UsageReport):
        return list(_USAGE_COLUMNS)
    if isinstance(report, EfficiencyReport):
        return list(EfficiencyRow.model_fields)
    if isinstance(report, WaitReport):
        lows = [0, *report.size_buckets]
        return [*(f for f in WaitRow.model_fields if f != "sizes"),
                *(_bucket_column(lo, lows[i + 1] - 1 if i + 1 < len(lows) else None) for i, lo in enumerate(lows))]
    return [*(f for f in AvailabilityRow.model_fields if f != "reasons"), "top_reason"]


def report_csv(report: AnyReport) -> str:
    """:func:`report_rows` as CSV with a header line, also when there are no rows (text that a
    spreadsheet would take for a formula starts with a quote)."""
    rows = [{k: _inert(v) for k, v in row.items()} for row in report_rows(report)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else report_columns(report),
                            extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
