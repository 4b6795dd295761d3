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

from slurmtower.api.deps import ServicesDep
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard import reports_view as rv
from slurmtower.dashboard.render import page_context, render
from slurmtower.errors import InvalidInput, PermissionDenied, SlurmtowerError
from slurmtower.models import Partition
from slurmtower.models.reports import UsageReport
from slurmtower.runtime import Services
from slurmtower.runtime.reports import AnyReport, parse_report, run_report
from slurmtower.visibility import Visibility

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]


def _own_accounts(services: Services, name: str) -> list[str]:
    # as /reports' (routes/reports.py): the accounts of the viewer's associations in slurmdbd
    return sorted({a.account for user in services.accounting_db().users(name) for a in user.associations})


async def _run(services: Services, principal: Principal, form: rv.ReportForm) -> AnyReport:
    query = parse_report(form.kind, form.params)
    policy = Visibility.from_settings(services.settings)
    partitions: list[Partition] = []
    wanted: tuple[str, ...] = ()
    if form.kind == "availability":
        partitions = policy.partitions((await services.live().partitions()).value)
        wanted = tuple(p for p in form.params.get("partitions", "").split(",") if p)

    def read() -> AnyReport:
        return run_report(services.reports(), query, principal, policy, partitions=partitions,
                          wanted_partitions=wanted, own_accounts=lambda: _own_accounts(services, principal.name))

    return await services.accounting_threads().run(read)


@router.get("/reports", response_class=HTMLResponse)
async def reports_page(request: Request, services: ServicesDep, principal: Reader) -> HTMLResponse:
    """A usage, efficiency, wait or availability report: its form, chart, table and CSV link."""
    form = rv.report_form(request.query_params.multi_items(), now=datetime.now(UTC))
    error: SlurmtowerError | None = form.error
    report: AnyReport | None = None
    if error is None:
        try:
            report = await _run(services, principal, form)
        except (InvalidInput, PermissionDenied) as exc:  # shown with the form, to be corrected there
            error = exc
    tz = services.settings.accounting.time_zone
    usage = report if isinstance(report, UsageReport) else None
    return render("reports.html", status_code=error.http_status if error is not None else 200,
                  form=form, report=report, error=error, rv=rv, tz=tz,
                  bad_param=error.extra.get("param") if error is not None else None,
                  sections=rv.usage_sections(usage, tz) if usage is not None else [],
                  table=rv.rows_of(report) if report is not None and usage is None else None,
                  **page_context(principal, services.settings.cluster_name, "/ui/reports"))
