"""/actions, /executions and /audit: the action catalogue over HTTP.

``POST /actions/{name}`` returns the same envelope as ``slurmtower run``. Reads need the
``reader`` role, node and reservation actions ``operator``, triggers ``admin`` (and their
program must be in ``auth.trigger_program_allowlist``). The caller's principal is the owner
in drain tags and the ``who`` of the audit log.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from slurmtower.actions import AuditRecord, Catalogue, Envelope
from slurmtower.api.security import Perm, Principal, require
from slurmtower.api.services import Services, get_services
from slurmtower.errors import PermissionDenied

__all__ = ["AuditPage", "router", "setup", "shutdown"]

router = APIRouter(tags=["actions"])
ServicesDep = Annotated[Services, Depends(get_services)]
_PERM = {"read": Perm.READ, "operate": Perm.OPERATE, "admin": Perm.ADMIN}


class AuditPage(BaseModel):
    records: list[AuditRecord]
    next_before: int | None = None
    """Pass as ``before`` for the next (older) page."""


def setup(services: Services, _app: Any = None) -> None:
    """Build the catalogue (once: the rule engine shares it)."""
    services.action_catalogue()


async def shutdown(services: Services) -> None:
    if services.catalogue is not None:
        services.catalogue.store.close()


def _catalogue(services: Services) -> Catalogue:
    return services.action_catalogue()


@router.get("/actions", dependencies=[require(Perm.READ)])
async def list_actions() -> list[dict[str, Any]]:
    """Every action with its permission and the JSON Schema of its parameters."""
    return [Catalogue.spec(n).describe() for n in Catalogue.names()]


@router.get("/actions/{name}", dependencies=[require(Perm.READ)])
async def show_action(name: str) -> dict[str, Any]:
    """One action with the JSON Schema of its parameters."""
    return Catalogue.spec(name).describe()


@router.post("/actions/{name}", response_model=Envelope,
             responses={400: {"description": "bad input"}, 403: {"description": "role too low"},
                        404: {"description": "unknown action or node"},
                        409: {"description": "refused: node held by another owner"}})
async def run_action(
    name: str,
    services: ServicesDep,
    principal: Annotated[Principal, require(Perm.READ)],
    parameters: Annotated[dict[str, Any] | None, Body()] = None,
    dry_run: Annotated[bool | None, Query(description="Same as the dry_run parameter.")] = None,
) -> JSONResponse:
    """Run an action with JSON parameters; the same envelope as ``slurmtower run``."""
    catalogue = _catalogue(services)
    spec = catalogue.spec(name)
    needed = _PERM[spec.permission]
    if principal.perm < needed:
        raise PermissionDenied(f"{principal.name} ({principal.role}) may not run {name}: needs "
                               f"{needed.name.lower()}")
    env = await asyncio.to_thread(catalogue.execute, name, parameters or {}, principal=principal.name,
                                  via="api", dry_run=dry_run)
    return JSONResponse(env.model_dump(mode="json"), status_code=env.http_status)


@router.get("/executions/{execution_id}", dependencies=[require(Perm.READ)], response_model=Envelope)
async def get_execution(execution_id: str, services: ServicesDep) -> Envelope:
    """One execution's envelope."""
    return await asyncio.to_thread(_catalogue(services).get_execution, execution_id)


@router.get("/audit", dependencies=[require(Perm.READ)])
async def list_audit(
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: Annotated[int | None, Query(description="seq of the last record seen (keyset).")] = None,
    who: str | None = None,
    action: str | None = None,
    execution_id: str | None = None,
) -> AuditPage:
    """The audit log of mutating actions, newest first."""
    store = _catalogue(services).store
    records = await asyncio.to_thread(store.list_audit, limit=limit, before=before, who=who, action=action,
                                      execution_id=execution_id)
    return AuditPage(records=records, next_before=records[-1].seq if len(records) == limit else None)
