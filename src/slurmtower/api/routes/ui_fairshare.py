"""``/ui/fairshare``: the fair-share tree (``sshare``) as ``GET /fairshare`` gives it, for
operators and admins whole, for others as the usage reports' policy shows it (a person with
the ``user`` role: their own lines and their accounts'; readers: the accounts' lines)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from slurmtower.api.deps import ClusterDep
from slurmtower.api.routes.why import fairshare_view
from slurmtower.api.security import Perm, Principal, require
from slurmtower.dashboard.render import page_context, render

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)
Reader = Annotated[Principal, require(Perm.READ)]


@router.get("/fairshare", response_class=HTMLResponse)
async def fairshare_page(services: ClusterDep, principal: Reader) -> HTMLResponse:
    """The association tree: shares, usage, fair-share factor, TRES-minutes held by running jobs."""
    view = await fairshare_view(services, principal)  # a refusal is the dashboard's error page
    return render("fairshare.html", **page_context(principal, services, "/ui/fairshare"), view=view,
                  read_at=view.read_at.strftime("%Y-%m-%d %H:%M:%S UTC"))
