"""``/reports/{usage,efficiency,waits,availability}``: usage reports from slurmdbd's database
(:mod:`slurmtower.runtime.reports`), in JSON or CSV (``format=csv`` or ``Accept: text/csv``).

Parameters are parsed strictly (an unknown or repeated one is a 400 naming it), narrowed to
what the caller may see (operators and admins: everything; readers and users as
``api.reports_for_readers`` / ``api.reports_for_users`` say, a 403 naming the parameter
beyond that), and read in the accounting threads (a slow database answers 503, never blocks
the event loop).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import READ_PROBLEMS, TIME_SCHEMA, problems
from slurmtower.api.query import checked
from slurmtower.api.reads import strict_query
from slurmtower.api.security import Perm, Principal, require
from slurmtower.errors import InvalidInput
from slurmtower.models.reports import (
    GROUP_BY,
    PERIODS,
    ROLLUPS,
    AvailabilityReport,
    EfficiencyReport,
    UsageReport,
    WaitReport,
)
from slurmtower.runtime import Services
from slurmtower.runtime.reports import NAMES_RE, REPORT_PARAMS, SIZE_BUCKETS_RE, read_report, report_csv

__all__ = ["router"]

router = APIRouter(tags=["reports"])

_CSV = "text/csv"
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {_CSV: {"schema": {"type": "string"}}},
          "description": "The report (JSON, or CSV with `format=csv` or `Accept: text/csv`)."},
    **problems(400, *READ_PROBLEMS, 503),
}

# Each declared with the grammar its check applies (slurmtower.runtime.reports, the report's own
# checks); the route names an unknown parameter first (known_query, before FastAPI's checks).
_Time = Annotated[str, checked("ISO 8601 (naive = UTC) or Unix seconds; `end` after `start`, at most 366 days "
                               "later; hour-aligned for the rollup sources.", TIME_SCHEMA)]
_Names = Annotated[str | None, checked("Comma-separated names (1-100): only these.", NAMES_RE, max_length=4096)]
_Format = Annotated[str | None, checked("`json` (default) or `csv`.", {"enum": ["json", "csv"]})]
_Top = Annotated[int | None, Query(ge=1, le=1000, description="Only the N largest groups (1-1000).")]


def _enum(description: str, values: tuple[str, ...]) -> Any:
    return checked(description, {"enum": list(values)})


def _wants_csv(request: Request, fmt: str | None) -> bool:
    if fmt is not None:
        if fmt not in ("json", "csv"):
            raise InvalidInput(f"format must be json or csv, not {fmt[:60]!r}", param="format")
        return fmt == "csv"
    accept = request.headers.get("accept", "")
    return _CSV in accept and "application/json" not in accept


def _known(kind: str) -> Any:
    """The report's parameters, unknown and repeated ones refused: a dependency, so that a
    misspelt parameter is named before a missing ``start`` is."""
    def known(request: Request) -> dict[str, str]:
        return strict_query(request, (*REPORT_PARAMS[kind], "format"))

    return Depends(known)


async def _report(request: Request, services: Services, principal: Principal, kind: str,
                  params: dict[str, str]) -> Any:
    params = dict(params)
    csv = _wants_csv(request, params.pop("format", None))
    report = await read_report(services, kind, params, principal)
    if csv:
        name = f"slurmtower-{kind}-{report.start:%Y%m%dT%H%M}-{report.end:%Y%m%dT%H%M}.csv"
        return Response(report_csv(report), media_type=f"{_CSV}; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})
    return report


@router.get("/reports/usage", response_model=UsageReport, responses=_RESPONSES)
async def usage(
    request: Request, services: ClusterDep, principal: Annotated[Principal, require(Perm.READ)],
    params: Annotated[dict[str, str], _known("usage")], start: _Time, end: _Time,
    period: Annotated[str | None, _enum("hour, day, week, month or range (default).", PERIODS)] = None,
    group_by: Annotated[str | None, _enum("cluster, account (default), user, account+user, partition or qos.",
                                          GROUP_BY)] = None,
    tres: Annotated[str | None, checked("Comma-separated TRES (default cpu): cpu, mem, energy, gres/gpu ... as "
                                        "the cluster tracks them.", NAMES_RE, max_length=4096)] = None,
    top: _Top = None, users: _Names = None, accounts: _Names = None,
    rollup: Annotated[str | None, _enum("auto (default), hour, day or month: the rollup table.", ROLLUPS)] = None,
    format: _Format = None,
) -> Any:
    """Usage per group and period in TRES-hours, as sreport counts it (rollup tables; the job table
    for partitions and QOS), with totals, shares and the source that served it."""
    return await _report(request, services, principal, "usage", params)


@router.get("/reports/efficiency", response_model=EfficiencyReport, responses=_RESPONSES)
async def efficiency(
    request: Request, services: ClusterDep, principal: Annotated[Principal, require(Perm.READ)],
    params: Annotated[dict[str, str], _known("efficiency")], start: _Time, end: _Time,
    group_by: Annotated[str | None, _enum("user (default), account or account+user.",
                                          ("user", "account", "account+user"))] = None,
    top: _Top = None, users: _Names = None, accounts: _Names = None, format: _Format = None,
) -> Any:
    """CPU and memory efficiency (used over allocated, as seff counts it) of the jobs that ended in the range."""
    return await _report(request, services, principal, "efficiency", params)


@router.get("/reports/waits", response_model=WaitReport, responses=_RESPONSES)
async def waits(
    request: Request, services: ClusterDep, principal: Annotated[Principal, require(Perm.READ)],
    params: Annotated[dict[str, str], _known("waits")], start: _Time, end: _Time,
    size_buckets: Annotated[str | None, checked("Lower CPU bounds of the size buckets after the first, "
                                                "increasing (default 50,250,500,1000).", SIZE_BUCKETS_RE)] = None,
    partitions: _Names = None, accounts: _Names = None, format: _Format = None,
) -> Any:
    """Wait times and job sizes per partition and account (like sreport job SizesByAccount)."""
    return await _report(request, services, principal, "waits", params)


@router.get("/reports/availability", response_model=AvailabilityReport, responses=_RESPONSES)
async def availability(
    request: Request, services: ClusterDep, principal: Annotated[Principal, require(Perm.READ)],
    params: Annotated[dict[str, str], _known("availability")], start: _Time, end: _Time,
    partitions: _Names = None,
    top_reasons: Annotated[int | None, Query(ge=1, le=100, description="Reasons listed per row (1-100, "
                                             "default 10).")] = None,
    format: _Format = None,
) -> Any:
    """Down and drained node-hours per partition and node from slurmdbd's event table, the costliest reasons first."""
    return await _report(request, services, principal, "availability", params)
