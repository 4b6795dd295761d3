"""The dashboard's job pages (see :mod:`slurmtower.api.routes.dashboard`): the live queue
(``/ui/jobs``), one job (``/ui/jobs/{id}``) and the accounting history (``/ui/history``).

Server-rendered, no script: filters are GET forms, sorting and paging are links. Every page
applies the one visibility policy (:mod:`slurmtower.visibility`): the queue snapshot and the
accounting reader leave hidden partitions out, and private job fields are shown only to whom
the API shows them (a reader: on the reader's own jobs). A bad filter gives the page again
with the API's message (400), never a stack trace.
"""

from __future__ import annotations

import asyncio
import bisect
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from slurmtower.accounting import check_names
from slurmtower.actions.why import SnapshotSources, check_access, explain, names_shown
from slurmtower.api.deps import ClusterDep
from slurmtower.api.reads import strict_query
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard import jobs_view as v
from slurmtower.dashboard.render import page_context, render
from slurmtower.errors import AccountingUnavailable, InvalidInput, PermissionDenied, SlurmtowerError
from slurmtower.models import Job, JobState, JobStep
from slurmtower.models.accounting import HistoryJob, HistoryPage, HistoryStep
from slurmtower.models.node import node_sort_key
from slurmtower.models.table import JobTable
from slurmtower.models.why import JobWhy
from slurmtower.runtime import Services
from slurmtower.visibility import Visibility

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]

#: Private fields as the job page labels them, in the order shown.
_PRIVATE_LABELS = {"work_dir": "work dir", "command": "command", "submit_line": "submit line",
                   "standard_output": "stdout", "standard_error": "stderr"}


def _page(template: str, services: Services, principal: Principal, active: str, *, status_code: int = 200,
          **context: Any) -> HTMLResponse:
    return render(template, status_code=status_code, v=v,
                  **page_context(principal, services, active), **context)


# -- /ui/jobs ------------------------------------------------------------------------------------
@router.get("/jobs", response_class=HTMLResponse)
async def jobs_page(request: Request, services: ClusterDep, principal: Reader) -> HTMLResponse:
    """The live queue: every job slurmctld holds, filtered, searched, sorted and paged."""
    error: InvalidInput | None = None
    query = v.QueueQuery()
    try:
        query = v.parse_queue_query(strict_query(request, v.QUEUE_PARAMS))
    except InvalidInput as exc:
        error = exc
        query = v.QueueQuery(form={k: val for k, val in request.query_params.items() if k in v.QUEUE_PARAMS})
    snap = await services.live().jobs()  # slurmctld down: the dashboard's error page (routes/dashboard.py)
    table: JobTable = snap.value
    policy = Visibility.from_settings(services.settings)
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    page = None
    if error is None:
        page = await asyncio.to_thread(v.page_queue, table, query)
        # Only the rows shown become models (the snapshot holds no hidden partition; the
        # policy is applied again on the models, it costs nothing for a page).
        for job in policy.jobs(table.jobs(page.rows)):
            elapsed, left = v.job_times(job, now)
            rows.append({"job": policy.redact(job, principal), "elapsed": v.duration_text(elapsed),
                         "left": v.duration_text(left) if left is not None else
                         ("UNLIMITED" if elapsed is not None and job.time_limit is None
                          and job.state is JobState.RUNNING else ""),
                         "nodes": v.node_links(job.nodes)})
    choices = {c: sorted((k for k in table.index(c) if k), key=node_sort_key)[:200]
               for c in ("user", "account")}
    choices["partition"] = sorted({p for k in table.index("partition") if k for p in k.split(",")})
    return _page("jobs.html", services, principal, "/ui/jobs", status_code=400 if error else 200,
                 query=query, page=page, rows=rows, error=error, total=len(table), choices=choices,
                 states=[s.value for s in JobState if s.is_base] + ["COMPLETING"],
                 fetched_at=v.time_text(snap.fetched_at), stale=snap.stale, now=v.time_text(now))


# -- /ui/jobs/{id} ---------------------------------------------------------------------------------
def _snapshot_rows(table: JobTable, job_id: int) -> list[Job]:
    at = bisect.bisect_left(table.keys, job_id)
    return table.jobs([at]) if at < len(table.keys) and table.keys[at] == job_id else []


def _private(policy: Visibility, principal: Principal, job: Job | HistoryJob) -> dict[str, Any]:
    """Private fields of ``job`` (label -> value), None for a value the viewer may not see."""
    shown = policy.sees_private(principal, job.user_name)
    return {label: (getattr(job, name) if shown else None) for name, label in _PRIVATE_LABELS.items()
            if name in type(job).model_fields and name in policy.private_job_fields}


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(job_id: str, services: ClusterDep, principal: Reader) -> HTMLResponse:
    """One job: slurmctld's record while it holds it, and every run accounting recorded, with
    steps, exit codes, nodes and (once ended) CPU and memory efficiency."""
    active = "/ui/jobs"
    if not (job_id.isascii() and job_id.isdigit()) or int(job_id) >= 2**32:
        raise InvalidInput(f"{job_id[:40]!r} is not a job id (a whole number)", param="job_id")
    jid = int(job_id)
    policy = Visibility.from_settings(services.settings)
    client = services.client
    live_note: str | None = None
    try:
        found = await asyncio.to_thread(client.jobs, [jid])
    except SlurmtowerError as exc:
        live_note = f"slurmctld did not answer ({exc.message}): shown from the last snapshot"
        try:
            found = _snapshot_rows((await services.live().jobs()).value, jid)
        except SlurmtowerError:
            found = []
    live = policy.jobs(found)
    main = next((j for j in live if j.job_id == jid), live[0] if live else None)
    live_steps: list[JobStep] | None = None
    steps_note: str | None = None
    if main is not None and main.state in (JobState.RUNNING, JobState.SUSPENDED):
        try:
            live_steps = [s for s in await asyncio.to_thread(client.job_steps, [jid]) if s.job_id == jid]
        except SlurmtowerError as exc:
            steps_note = f"steps not available: {exc.message}"

    runs: list[v.RunView] | None = None
    acct_note: str | None = None
    acct_failed: AccountingUnavailable | None = None
    if services.settings.accounting.url is None:
        acct_note = "accounting is not configured (accounting.url): finished jobs are not kept"
    else:
        def read() -> tuple[dict[int, list[HistoryJob]], dict[int, list[HistoryStep]]]:
            db = services.accounting_db()  # hidden partitions are left out there
            return db.jobs_by_id([jid]), db.steps_for_jobs([jid])

        try:
            records, steps = await services.accounting_threads().run(read)
            runs = v.runs_of([policy.redact(r, principal) for r in records.get(jid, [])], steps.get(jid, []))
        except AccountingUnavailable as exc:
            acct_failed = exc
            acct_note = f"accounting did not answer: {exc.message}"
    if main is None and not runs:
        if acct_failed is not None:
            raise AccountingUnavailable(f"slurmctld does not hold job {jid} and the accounting database did not "
                                        f"answer ({acct_failed.message})")
        where = "slurmctld does not hold it and accounting has no record of it" if runs is not None else \
            "slurmctld does not hold it (accounting is not configured)"
        return _page("job.html", services, principal, active, status_code=404, job_id=jid, missing=where,
                     now=v.time_text(datetime.now(UTC)))

    why, why_note = await _why(services, principal, main)
    now = datetime.now(UTC)
    times = v.job_times(main, now) if main is not None else (None, None)
    shown: Job | HistoryJob | None = main or (runs[0].record if runs else None)
    return _page(
        "job.html", services, principal, active, job_id=jid, missing=None,
        job=policy.redact(main, principal) if main is not None else None,
        tasks=[policy.redact(j, principal) for j in live if j is not main],
        live_note=live_note, live_steps=live_steps, steps_note=steps_note,
        elapsed=times[0], left=times[1], runs=runs, acct_note=acct_note,
        private=_private(policy, principal, shown) if shown is not None else {},
        sees_private=shown is not None and policy.sees_private(principal, shown.user_name),
        why=why, why_note=why_note, now=v.time_text(now),
    )


async def _why(services: Services, principal: Principal, job: Job | None) -> tuple[JobWhy | None, str | None]:
    """The "Why is it waiting" panel of a pending job: its explanation (the one ``GET
    /jobs/{id}/why`` gives, from the same snapshots), or why there is none."""
    if job is None or job.state is not JobState.PENDING:
        return None, None
    try:
        check_access(principal.role, principal.name, [job])
    except PermissionDenied:
        return None, "shown to the job's owner, operators and admins"
    policy = Visibility.from_settings(services.settings)
    try:
        jobs, nodes, partitions = await services.live().cache.get_all("jobs", "nodes", "partitions")
        src = SnapshotSources(services.client, jobs.value, nodes.value, partitions.value, visibility=policy)
        why = await asyncio.to_thread(explain, job, src, show=names_shown(policy, principal))
    except SlurmtowerError as exc:
        return None, f"not available: {exc.message}"
    return why, None


# -- /ui/history -------------------------------------------------------------------------------------
@router.get("/history", response_class=HTMLResponse)
async def history_page(request: Request, services: ClusterDep, principal: Reader) -> HTMLResponse:
    """Accounting history with ``/history``'s filters, newest first, a page at a time."""
    form = v.history_form(request.scope.get("query_string", b"").decode("latin-1"))
    active = "/ui/history"
    error: SlurmtowerError | None = form.error
    page: HistoryPage | None = None
    if error is None and form.query is not None:
        query = form.query
        try:
            check_names(query)
        except InvalidInput as exc:
            error = exc
        else:
            policy = Visibility.from_settings(services.settings)

            def read() -> HistoryPage:
                found = services.accounting_db().history(query)  # hidden partitions are left out there
                return found.model_copy(update={"jobs": [policy.redact(j, principal) for j in found.jobs]})

            try:
                page = await services.accounting_threads().run(read)
            except AccountingUnavailable as exc:
                error = exc
    status = error.http_status if error is not None else 200
    return _page("history.html", services, principal, active, status_code=status, form=form, page=page,
                 error=error, bad_param=getattr(error, "param", None) if isinstance(error, InvalidInput) else None,
                 states=v.HISTORY_STATES, limits=(10, 25, 50, 100, 200, 500, 1000))
