"""The view logic of the reports page (``/ui/reports``): its form, the chart and table of a
usage report, the links to it.

Nothing here does I/O: the route (:mod:`slurmtower.api.routes.ui_reports`) runs the report
with :mod:`slurmtower.runtime.reports`, as ``/reports/<kind>`` does, and hands it to these
functions.

* The form is one GET form for the four reports: its fields are the union of their parameters
  (:data:`~slurmtower.runtime.reports.REPORT_PARAMS`); a field that does not apply to the
  report asked for is left out of the query (and listed as ignored), empty fields mean the
  default. ``start`` and ``end`` default to the last seven days and today, up to the end of
  the current hour (UTC). The query the page runs is what the CSV link sends to
  ``/reports/<kind>``, so the download is the table's report.
* A usage report's chart stacks, per period, the :data:`CHART_GROUPS` largest groups of the
  report and "others" (the report's groups after them, summed), one chart per TRES asked for,
  in TRES-hours. Groups ``top`` left out are in no chart (the table's total counts them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from slurmtower.errors import InvalidInput
from slurmtower.models.reports import GROUP_BY, PERIODS, ROLLUPS, UsagePeriod, UsageReport
from slurmtower.principal import USER, Principal
from slurmtower.runtime.reports import REPORT_KINDS, REPORT_PARAMS, AnyReport, report_rows

__all__ = [
    "CHART_GROUPS",
    "FIELD_KINDS",
    "FORM_PARAMS",
    "GROUP_BY",
    "PERIODS",
    "ROLLUPS",
    "TABLE_PERIODS",
    "ReportForm",
    "UsageSection",
    "cell_text",
    "default_range",
    "hours_text",
    "period_label",
    "report_form",
    "rows_of",
    "tres_unit",
    "usage_link",
    "usage_sections",
]

#: The groups a usage chart draws one by one; the others are summed into one band.
CHART_GROUPS = 8
#: A usage table shows a column per period up to this many (the CSV has them all).
TABLE_PERIODS = 31
#: Each form field -> the reports that take it (``kind``: every one).
FIELD_KINDS: dict[str, tuple[str, ...]] = {}
for _kind, _params in REPORT_PARAMS.items():
    for _param in _params:
        FIELD_KINDS.setdefault(_param, ())
        FIELD_KINDS[_param] = (*FIELD_KINDS[_param], _kind)
#: Every parameter of ``/ui/reports``.
FORM_PARAMS: tuple[str, ...] = ("kind", *FIELD_KINDS)
#: The page's defaults beside the range (``group_by=account`` for both: totals any reader sees).
_DEFAULTS: dict[str, dict[str, str]] = {
    "usage": {"period": "day", "group_by": "account", "tres": "cpu"},
    "efficiency": {"group_by": "account"},
}
_UNITS = {"cpu": "CPU-hours", "gres/gpu": "GPU-hours", "mem": "MiB-hours", "energy": "joule-hours"}


def _minute(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M")


def default_range(now: datetime) -> tuple[str, str]:
    """``start``, ``end`` of the page's default report: seven days and today, to the end of
    the current hour (UTC, naive: as the API reads them)."""
    now = now.astimezone(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)
    midnight = hour.replace(hour=0) - timedelta(days=7)
    return _minute(midnight.replace(tzinfo=None)), _minute((hour + timedelta(hours=1)).replace(tzinfo=None))


@dataclass
class ReportForm:
    """A parsed ``/ui/reports`` query: what the form shows and what the report is asked."""

    kind: str = "usage"
    values: dict[str, str] = field(default_factory=dict)
    """Every field as the form shows it (what was given, or the default)."""
    params: dict[str, str] = field(default_factory=dict)
    """The report's parameters (its own, non-empty), as :func:`~slurmtower.runtime.reports.parse_report` takes them."""
    ignored: list[str] = field(default_factory=list)
    """Fields given that the report does not take."""
    error: InvalidInput | None = None

    def link(self) -> str:
        """This report's page (``/ui/reports?kind=...``)."""
        return "/ui/reports?" + urlencode({"kind": self.kind, **self.params})

    def api_link(self, fmt: str = "csv") -> str:
        """The same report from the API (``/reports/<kind>?...&format=csv``)."""
        return f"/reports/{self.kind}?" + urlencode({**self.params, "format": fmt})

    def applies(self, name: str) -> bool:
        return self.kind in FIELD_KINDS.get(name, ())

    def time_input(self, name: str) -> str | None:
        """``start``/``end`` as a ``datetime-local`` input's value (UTC), None when it is not a time."""
        text = self.values.get(name, "").strip()
        try:
            if text.isdigit():
                when = datetime.fromtimestamp(int(text), UTC)
            else:
                when = datetime.fromisoformat(text)
                when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        except (ValueError, OverflowError, OSError):
            return None
        return when.strftime("%Y-%m-%dT%H:%M:%S" if when.second else "%Y-%m-%dT%H:%M")


def report_form(items: Iterable[tuple[str, str]], *, now: datetime) -> ReportForm:
    """The form of a ``/ui/reports`` query string's ``(name, value)`` pairs.

    ``error`` (the form is still filled): an unknown or repeated parameter, an unknown report.
    The values are checked when the report runs.
    """
    given: dict[str, str] = {}
    error: InvalidInput | None = None
    for name, value in items:
        if error is not None:
            break
        if name not in FORM_PARAMS:
            error = InvalidInput(f"unknown parameter {name[:60]!r} (known: {', '.join(FORM_PARAMS)})",
                                 param=name[:60])
        elif name in given:
            error = InvalidInput(f"parameter {name!r} given twice", param=name)
        else:
            given[name] = value
    kind = given.get("kind") or "usage"
    if kind not in REPORT_KINDS and error is None:
        error = InvalidInput(f"kind must be one of {', '.join(REPORT_KINDS)}, not {kind[:60]!r}", param="kind")
    start, end = default_range(now)
    values = {"start": start, "end": end, **_DEFAULTS.get(kind, {})}
    values.update({k: v for k, v in given.items() if v.strip() and k != "kind"})
    own = REPORT_PARAMS.get(kind, ())
    params = {k: v.strip() for k, v in values.items() if k in own}
    ignored = [k for k, v in given.items() if v.strip() and k != "kind" and k not in own]
    return ReportForm(kind=kind if kind in REPORT_KINDS else "usage", values={"kind": kind, **values},
                      params=params, ignored=ignored, error=error)


# -- usage: chart and table -------------------------------------------------------------------


def hours_text(hours: float) -> str:
    """TRES-hours as a table shows them: whole above 100, else two decimals, three digits below 1."""
    if hours >= 100:
        return f"{hours:,.0f}"
    if hours >= 1 or hours == 0:
        return f"{hours:.2f}"
    return f"{hours:.3f}" if hours >= 0.001 else f"{hours:.1g}"


def tres_unit(tres: str) -> str:
    """``cpu`` -> ``CPU-hours``, ``gres/gpu`` -> ``GPU-hours`` ..."""
    return _UNITS.get(tres, f"{tres}-hours")


def period_label(period: UsagePeriod, cut: str, tz: str) -> str:
    """A period as a column or axis label, in the zone the periods are cut in."""
    zone = ZoneInfo(tz)
    s, e = period.start.astimezone(zone), period.end.astimezone(zone)
    if cut == "range":
        return f"{s:%Y-%m-%d %H:%M} to {e:%Y-%m-%d %H:%M}"
    if cut == "hour":
        return f"{s:%m-%d %H:%M}"
    if cut == "month" and s.day == 1 and not s.hour:
        return f"{s:%Y-%m}"
    return f"{s:%Y-%m-%d}" + (f" {s:%H:%M}" if s.hour or s.minute else "")


@dataclass
class UsageSection:
    """One TRES of a usage report: its chart's data and its table's columns."""

    tres: str
    unit: str
    labels: list[str]
    chart: dict[str, Any]
    """``{"unit", "labels", "series": [{"name", "hours": [per period]}]}`` for reports.js."""
    per_period: bool
    """The table has a column per period (at most :data:`TABLE_PERIODS`)."""

    @property
    def chart_json(self) -> str:
        return json.dumps(self.chart, separators=(",", ":"))

    @property
    def series(self) -> int:
        return len(self.chart["series"])


def usage_sections(report: UsageReport, tz: str) -> list[UsageSection]:
    """A chart and table per TRES of ``report``."""
    labels = [period_label(p, report.period, tz) for p in report.periods]
    sections = []
    for tres in report.tres:
        shown = report.groups[:CHART_GROUPS]
        series = [{"name": g.name, "hours": [round(c.tres_seconds.get(tres, 0) / 3600, 4) for c in g.cells]}
                  for g in shown]
        beyond = report.groups[CHART_GROUPS:]
        if beyond:
            series.append({"name": f"others ({len(beyond)})",
                           "hours": [round(sum(g.cells[i].tres_seconds.get(tres, 0) for g in beyond) / 3600, 4)
                                     for i in range(len(labels))]})
        sections.append(UsageSection(tres=tres, unit=tres_unit(tres), labels=labels,
                                     chart={"unit": tres_unit(tres), "labels": labels, "series": series},
                                     per_period=len(labels) <= TABLE_PERIODS))
    return sections


# -- the other reports: their rows ------------------------------------------------------------


def cell_text(value: Any) -> str:
    """A report row's value as a table shows it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def rows_of(report: AnyReport) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns and rows of ``report`` as its CSV has them."""
    rows = report_rows(report)
    return (list(rows[0]) if rows else []), rows


# -- links from the job pages -----------------------------------------------------------------


def usage_link(principal: Principal, *, user: str | None = None, account: str | None = None) -> str | None:
    """The usage report of ``user`` (per user, in ``account`` if given) or of ``account``; None
    when there is nothing to link. A user's figures are linked for operators and admins and for
    the user themselves (readers see totals by default: ``api.reports_for_readers``)."""
    user, account = (user or "").strip(), (account or "").strip()
    if user and (principal.may_operate or (principal.role == USER and principal.name == user)):
        params = {"kind": "usage", "group_by": "user", "users": user}
        if account:
            params["accounts"] = account
        return "/ui/reports?" + urlencode(params)
    if account:
        return "/ui/reports?" + urlencode({"kind": "usage", "group_by": "account", "accounts": account})
    return None
