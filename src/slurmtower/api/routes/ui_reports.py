"""``/ui/reports``: the usage reports (:mod:`slurmtower.runtime.reports`) as a page: a GET
form (so the address keeps the report), a chart per TRES stacked by group per period and a
table for a usage report, a table for the others, and a link to the same report as CSV from
``/reports/<kind>``.

The report is parsed, narrowed to what the viewer may see and read in the accounting threads
exactly as ``/reports/<kind>`` does. A bad value or a report beyond the viewer's (400, 403) is
shown on the page above its form, naming the parameter; other errors (the database not
answering) are the dashboard's error page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from slurmtower.api.deps import ClusterDep
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard import reports_view as rv
from slurmtower.dashboard.render import page_context, render
from slurmtower.errors import InvalidInput, PermissionDenied, SlurmtowerError
from slurmtower.models.reports import UsageReport
from slurmtower.runtime.reports import AnyReport, read_report

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]


@router.get("/reports", response_class=HTMLResponse)
async def reports_page(request: Request, services: ClusterDep, principal: Reader) -> HTMLResponse:
    """A usage, efficiency, wait or availability report: its form, chart, table and CSV link."""
    form = rv.report_form(request.query_params.multi_items(), now=datetime.now(UTC))
    error: SlurmtowerError | None = form.error
    report: AnyReport | None = None
    if error is None:
        try:
            report = await read_report(services, form.kind, form.params, principal)
        except (InvalidInput, PermissionDenied) as exc:  # shown with the form, to be corrected there
            error = exc
    tz = services.settings.accounting.time_zone
    usage = report if isinstance(report, UsageReport) else None
    return render("reports.html", status_code=error.http_status if error is not None else 200,
                  form=form, report=report, error=error, rv=rv, tz=tz,
                  bad_param=error.extra.get("param") if error is not None else None,
                  sections=rv.usage_sections(usage, tz) if usage is not None else [],
                  table=rv.rows_of(report) if report is not None and usage is None else None,
                  **page_context(principal, services, "/ui/reports"))
