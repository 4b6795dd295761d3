"""/history and /users from slurmdbd's database (:mod:`slurmtower.accounting`).

``/history`` parses the *raw* query string (``/history?jobid<=987654&user=alice``): see
:mod:`slurmtower.accounting.query` for every filter. Database reads run in worker threads so
a slow or dead database never blocks the event loop; when it does not answer the routes
give a 503 problem while the live routes keep working.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from slurmtower.accounting import NAME, check_names, parse_history_query
from slurmtower.accounting.query import CURSOR_RE, JOB_STATE_RE, MAX_LIMIT, NAME_RE
from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import READ_PROBLEMS, TIME_SCHEMA, problems
from slurmtower.api.query import checked
from slurmtower.api.reads import strict_query
from slurmtower.api.security import Perm, Principal, require
from slurmtower.errors import InvalidInput
from slurmtower.models.accounting import AccountingUser, HistoryPage
from slurmtower.visibility import Visibility

__all__ = ["router"]

router = APIRouter(tags=["accounting"])


# Declared for the OpenAPI document (and checked by FastAPI where a type says more than text):
# the route parses the raw query string (``jobid<=5`` is no key=value pair), which also refuses
# unknown, repeated and malformed filters (400). Each text is declared with the grammar its
# parser applies (slurmtower.accounting.query).
_Name = Annotated[str | None, checked("A name (exact match).", NAME_RE)]
_Text = Annotated[str | None, Query(min_length=1, max_length=256, description="Exact job name.")]
_Time = Annotated[str | None, checked("ISO 8601 (naive = UTC) or Unix seconds; `*_after` is inclusive, "
                                      "`*_before` exclusive.", TIME_SCHEMA)]
_UINT32 = 2**32 - 1


@router.get("/history", response_model=HistoryPage, responses=problems(400, *READ_PROBLEMS, 503))
async def history(
    request: Request,
    services: ClusterDep,
    principal: Annotated[Principal, require(Perm.READ)],
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="Jobs per page, 1-1000 (default 10).")]
    = None,
    offset: Annotated[int | None, Query(ge=0, le=2**31 - 1, description="Rows to skip (after `cursor` when "
                                        "both are given; prefer `cursor`).")] = None,
    cursor: Annotated[str | None, checked("`next_cursor` of the previous page (of any query: it is the "
                                          "position of a row).", CURSOR_RE)] = None,
    user: Annotated[str | None, checked("User name (or uid when no such name).", NAME_RE)] = None,
    partition: _Name = None,
    account: _Name = None,
    jobname: _Text = None,
    associd: Annotated[int | None, Query(ge=0, le=_UINT32, description="Association id.")] = None,
    state: Annotated[str | None, checked("Job state: 0-11 or a name (`FAILED`, `failed`, `JOB_FAILED`, "
                                         "`F` ...).", JOB_STATE_RE)] = None,
    jobid: Annotated[int | None, Query(ge=0, le=_UINT32, description="Job id; also `jobid>N`, `jobid<N`, "
                                       "`jobid>=N`, `jobid<=N`, repeatable to give a range.")] = None,
    submitted_after: _Time = None,
    submitted_before: _Time = None,
    started_after: _Time = None,
    started_before: _Time = None,
    ended_after: _Time = None,
    ended_before: _Time = None,
) -> HistoryPage:
    """Job history from slurmdbd's database, newest first (see the parameters for filters).

    Readers see other users' jobs without their private fields (``api.private_job_fields``)."""
    query = parse_history_query(request.scope.get("query_string", b"").decode("latin-1"))
    check_names(query)

    policy = Visibility.from_settings(services.settings)

    def read() -> HistoryPage:
        page = services.accounting_db().history(query)  # hidden partitions are left out there
        return page.model_copy(update={"jobs": [policy.redact(j, principal) for j in page.jobs]})

    return await services.accounting_threads().run(read)


@router.get("/users", dependencies=[require(Perm.READ)], response_model=list[AccountingUser],
            responses=problems(400, *READ_PROBLEMS, 503))
async def users(
    request: Request,
    services: ClusterDep,
    name: Annotated[str | None, checked("Only this user.", NAME_RE)] = None,
) -> list[AccountingUser]:
    """Users known to slurmdbd with their associations (accounts, partitions, limits)."""
    params = strict_query(request, ("name",))
    name = params.get("name")
    if name is not None and not NAME.fullmatch(name):
        raise InvalidInput(f"name is not a valid user name: {name[:60]!r}", param="name")

    policy = Visibility.from_settings(services.settings)

    def read() -> list[AccountingUser]:
        found = services.accounting_db().users(name)
        if not policy.hidden_partitions:
            return found
        # associations limited to a hidden partition are hidden like the partition itself
        return [u.model_copy(update={"associations": [a for a in u.associations
                                                      if policy.shows_partition(a.partition)]})
                for u in found]

    return await services.accounting_threads().run(read)
