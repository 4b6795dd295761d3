"""/jobs/{job_id}/why and /fairshare: why a job waits, and the fair-share tree.

``GET /jobs/{job_id}/why`` explains one job of the queue (:mod:`slurmtower.actions.why`),
read from the live snapshots (the queue, the nodes, the partitions: what ``/queue``,
``/nodes`` and ``/partitions`` serve) and the scheduler's view kept a few seconds
(``sprio`` and ``squeue --start`` for that job, the limits and reservations of the cluster):
no other Slurm call per request. The ``user`` role asks about its own jobs only (another's
is a 403 naming it); readers see the jobs ahead counted, not named, unless the visibility
policy shows them other users' private fields.

``GET /fairshare`` is the association tree of ``sshare``: shares, usage, fair-share factor,
TRES-minutes. What a caller sees of it is the usage reports' policy
(:meth:`~slurmtower.visibility.Visibility.report_access`): operators and admins the whole
tree; ``own`` (the ``user`` role by default) the caller's own lines and their accounts';
``totals`` (readers by default) the accounts' lines only; ``none`` a 403.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel

from slurmtower.actions.schemas import uint_pattern
from slurmtower.actions.why import SnapshotSources, why_from_snapshot
from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.reads import strict_query
from slurmtower.api.security import Perm, Principal, require
from slurmtower.errors import InvalidInput, PermissionDenied
from slurmtower.models.scheduling import ShareRow
from slurmtower.models.why import JobWhy
from slurmtower.runtime import Services
from slurmtower.slurm.scheduling import cached_scheduling
from slurmtower.visibility import Viewer, Visibility

__all__ = ["FairshareResponse", "fairshare_view", "job_why_view", "router", "shown_shares"]

router = APIRouter(tags=["scheduling"])
Reader = Annotated[Principal, require(Perm.READ)]
JobId = Annotated[str, Path(description="A job id (a whole number: an array task's own id, or the array's).",
                            json_schema_extra={"pattern": f"^{uint_pattern(2**32 - 1)}$"})]


class FairshareResponse(BaseModel):
    read_at: datetime
    access: Literal["all", "own", "totals"]
    """What the caller sees: the whole tree, their own lines and their accounts', or the
    accounts' lines only (``api.reports_for_readers`` / ``api.reports_for_users``)."""
    count: int
    shares: list[ShareRow]
    """In sshare's order: each account before the lines below it."""


async def job_why_view(services: Services, job_id: int, principal: Principal) -> JobWhy:
    """The explanation of ``job_id`` for ``principal`` (the route's and the job page's)."""
    live = services.live()
    jobs, nodes, partitions = await live.cache.get_all("jobs", "nodes", "partitions")
    policy = Visibility.from_settings(services.settings)
    src = SnapshotSources(services.client, jobs.value, nodes.value, partitions.value, visibility=policy)
    return await asyncio.to_thread(why_from_snapshot, job_id, src, policy=policy, viewer=principal,
                                   role=principal.role, name=principal.name)


@router.get("/jobs/{job_id}/why", response_model=JobWhy, responses=problems(400, *READ_PROBLEMS, 404, 503))
async def job_why(job_id: JobId, request: Request, services: ClusterDep, principal: Reader) -> JobWhy:
    """Why a job waits: its reason in plain words, the facts that block it, what its owner can change."""
    strict_query(request, ())
    if not (job_id.isascii() and job_id.isdigit()) or not 0 < int(job_id) < 2**32:
        raise InvalidInput(f"{job_id[:40]!r} is not a job id (a whole number from 1)", param="job_id")
    return await job_why_view(services, int(job_id), principal)


def shown_shares(rows: list[ShareRow], access: str, viewer: Viewer, policy: Visibility) -> list[ShareRow]:
    """The lines of the tree ``viewer`` sees with ``access`` (:meth:`Visibility.report_access`)."""
    rows = [r for r in rows if policy.shows_partition(r.partition)]
    if access == "all":
        return rows
    if access == "totals":
        return [r for r in rows if r.user is None]
    mine = {r.account for r in rows if r.user == viewer.name}
    return [r for r in rows if r.user == viewer.name or (r.user is None and r.account in mine)]


async def fairshare_view(services: Services, principal: Principal) -> FairshareResponse:
    """The fair-share tree as ``principal`` may see it (the route's and the dashboard page's).

    Raises:
        PermissionDenied: the caller's role sees no usage (``none``).
    """
    policy = Visibility.from_settings(services.settings)
    access = policy.report_access(principal)
    if access == "none":
        setting = "api.reports_for_users" if principal.role == "user" else "api.reports_for_readers"
        raise PermissionDenied(f"the fair-share tree is not open to {principal.role}s ({setting})")
    sched = cached_scheduling(services.client)
    rows = await asyncio.to_thread(sched.shares)
    shown = shown_shares(rows, access, principal, policy)
    return FairshareResponse(read_at=datetime.now(UTC), access=access,  # type: ignore[arg-type]
                             count=len(shown), shares=shown)


@router.get("/fairshare", response_model=FairshareResponse, responses=problems(400, *READ_PROBLEMS, 501, 503))
async def fairshare(request: Request, services: ClusterDep, principal: Reader) -> FairshareResponse:
    """The fair-share tree (sshare): shares, usage and fair-share factor of every account and user."""
    strict_query(request, ())
    return await fairshare_view(services, principal)
