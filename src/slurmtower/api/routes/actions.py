"""/actions, /executions and /audit: the action catalogue over HTTP.

``POST /actions/{name}`` returns the same envelope as ``slurmtower run``. Reads need the
``reader`` role, node and reservation actions ``operator``, triggers ``admin`` (and their
program must be in ``auth.trigger_program_allowlist``); job actions ``operator``, or the
``user`` role on its own jobs (:mod:`slurmtower.actions.jobs`). Where the approval policy says
the caller may only ask (a ``user``'s reservation, a two-person act), the answer is 202 with a
request (:mod:`slurmtower.actions.approvals`, ``/requests``). The caller's principal is the owner
in drain tags and the ``who`` of the audit log.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from typing import Annotated, Any

from fastapi import APIRouter, Body, FastAPI, Header, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from slurmtower.actions import AuditRecord, Catalogue, Envelope, st2
from slurmtower.actions.catalogue import MAX_KEY_LENGTH
from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import MAX_ID, READ_PROBLEMS, problems
from slurmtower.api.routes.planning import shown_request
from slurmtower.api.security import Perm, Principal, require
from slurmtower.models.request import ActionRequest
from slurmtower.runtime import Services
from slurmtower.visibility import Hidden, Visibility

__all__ = ["AuditPage", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["actions"])
ActionName = Annotated[str, Path(description="An action name, e.g. `slurm.node.drain` (see `GET /actions`).")]
Format = Annotated[str, Query(
    description="`st2`: the execution as the StackStorm slurm pack gives it (`id`, `status`, `parameters`, "
                "`result: {exit_code, result, stderr, stdout}`, the pack's field names; docs/stackstorm.md); "
                "`slurmtower` (the default): slurmtower's envelope.",
    json_schema_extra={"enum": list(st2.FORMATS)})]


class AuditPage(BaseModel):
    records: list[AuditRecord]
    next_before: int | None = None
    """Pass as ``before`` for the next (older) page."""


def _catalogue(services: Services) -> Catalogue:
    return services.action_catalogue()


def setup(_services: Services, app: FastAPI) -> None:
    """Document every action as its own operation (:func:`document_actions`)."""
    document = app.openapi

    def openapi() -> dict[str, Any]:
        return document_actions(document())

    app.openapi = openapi  # type: ignore[method-assign]


def document_actions(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI document with every action as operations of its own path
    (``/actions/slurm.node.drain`` ..., under ``/clusters/{cluster}`` too) in place of
    ``/actions/{name}``: ``GET`` describes it, ``POST`` runs it with its parameters (their JSON
    Schema, as ``GET`` gives it) as the body; only an action that changes something takes
    ``dry_run``, ``Idempotency-Key`` and ``request_reason``. (One route serves them all; a
    name that is no action is a 404, as any path that is not in the document.) An execution
    that failed in Slurm or a database is answered with its envelope (``application/json``)
    and the failure's status (400 Slurm refused, 502, 503, 504), other refusals with a
    problem. Idempotent."""
    paths: dict[str, Any] = schema.get("paths", {})
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for prefix in ("", "/clusters/{cluster}"):
        generic = paths.get(f"{prefix}/actions/{{name}}", {})
        run, show = generic.get("post"), generic.get("get")
        if run is None or show is None:
            continue
        del paths[f"{prefix}/actions/{{name}}"]
        envelope = run["responses"]["200"]["content"]["application/json"]
        for status in _FAILED_EXECUTION:
            run["responses"].setdefault(str(status), copy.deepcopy(problems(status)[status]))
            run["responses"][str(status)]["content"]["application/json"] = envelope
            run["responses"][str(status)]["description"] += " Or the failed execution's envelope."
        for name in Catalogue.names():
            spec = Catalogue.spec(name)
            body = spec.schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            for key, prop in list(body.get("properties", {}).items()):  # the CLI's alone (maintain's wait)
                if prop.get("x-slurmtower-cli-only"):
                    del body["properties"][key]
            # No body (or null) is {}: a body is needed where {} is not enough.
            needed = bool(body.get("required")) or "oneOf" in body
            post = copy.deepcopy(run)
            post["operationId"] = f"{run.get('operationId', 'run_action')}_{name.replace('.', '_')}"
            post["summary"] = spec.description
            post["parameters"] = [p for p in post.get("parameters", []) if p["name"] != "name" and (
                spec.mutating or p["name"] not in _MUTATING_ONLY)]
            post["requestBody"] = {"required": needed, "content": {"application/json": {
                "schema": body if needed else {"anyOf": [body, {"type": "null"}]}}}}
            get = copy.deepcopy(show)
            get["operationId"] = f"{show.get('operationId', 'show_action')}_{name.replace('.', '_')}"
            get["parameters"] = [p for p in get.get("parameters", []) if p["name"] != "name"]
            paths[f"{prefix}/actions/{name}"] = {"get": get, "post": post}
    return schema


#: The statuses of an execution that failed in Slurm or a database (SlurmError, StoreError,
#: AccountingUnavailable): answered with the envelope, which names the error.
_FAILED_EXECUTION = (400, 502, 503, 504)


#: An idempotency key as the catalogue takes it (1-255 printable ASCII characters) once it has
#: come as a header (spaces around a header's value are the header's, not the key's).
IDEMPOTENCY_KEY_RE = re.compile(rf"^[\x21-\x7e](?:[\x20-\x7e]{{0,{MAX_KEY_LENGTH - 2}}}[\x21-\x7e])?$")
#: What only an action that changes something takes (a read-only one refuses ``dry_run``).
_MUTATING_ONLY = frozenset({"dry_run", "idempotency-key", "request_reason"})


@router.get("/actions", dependencies=[require(Perm.READ)], responses=problems(*READ_PROBLEMS))
async def list_actions() -> list[dict[str, Any]]:
    """Every action with its permission and the JSON Schema of its parameters."""
    return [Catalogue.spec(n).describe() for n in Catalogue.names()]


@router.get("/actions/{name}", dependencies=[require(Perm.READ)], responses=problems(*READ_PROBLEMS, 404))
async def show_action(name: ActionName) -> dict[str, Any]:
    """One action with the JSON Schema of its parameters."""
    return Catalogue.spec(name).describe()


@router.post("/actions/{name}", response_model=Envelope | st2.St2Execution,
             responses={**problems(400, *READ_PROBLEMS, 404, 409, 413, 503), 202: {
                 "model": ActionRequest,
                 "description": "The caller may only ask for this act (or it needs a second person): a "
                                "request, pending, nothing changed (`GET /requests/{id}`)."}})
async def run_action(
    name: ActionName,
    services: ClusterDep,
    principal: Annotated[Principal, require(Perm.READ)],
    parameters: Annotated[dict[str, Any] | None, Body()] = None,
    dry_run: Annotated[bool | None, Query(description="Same as the dry_run parameter.")] = None,
    idempotency_key: Annotated[str | None, Header(
        description="A retry with the same key and parameters returns the first execution's envelope "
                    "without acting again (other parameters: 409). Keys are per principal: 1-255 printable "
                    "ASCII characters; read-only actions ignore it.",
        json_schema_extra={"pattern": IDEMPOTENCY_KEY_RE.pattern})] = None,
    request_reason: Annotated[str | None, Query(max_length=10_000, description=(
        "Why, when the act becomes a request (the caller may only ask for it, or it needs a second "
        "person): the request keeps it for whoever decides."))] = None,
    format: Format = "slurmtower",  # noqa: A002 - the query parameter's name
) -> JSONResponse:
    """Run an action with JSON parameters (or ask for it: 202, a request); the envelope of ``slurmtower run``."""
    shape = st2.check_format(format)
    catalogue = _catalogue(services)
    spec = catalogue.spec(name)
    approvals = catalogue.approvals()
    if not approvals.policy.may_do(spec, principal.role) and not approvals.policy.may_ask(spec, principal.role):
        raise approvals.policy.refusal(spec, principal.name, principal.role)
    given = parameters or {}
    if shape == "st2":  # the pack's names of config items and job fields
        parameters = st2.pack_params(name, given)
    if not spec.mutating:
        Visibility.from_settings(services.settings).check_search(parameters, principal)
    # Read before acting: an answer that could not be cut must not follow a change in Slurm.
    hidden = await services.live().hiding()
    done = await asyncio.to_thread(approvals.submit, name, parameters or {}, principal=principal.name,
                                   role=principal.role, via="api", dry_run=dry_run, idempotency_key=idempotency_key,
                                   reason=request_reason)
    if isinstance(done, ActionRequest):
        return JSONResponse(await shown_request(services, done, principal), status_code=202)
    body = _shown(services, done, principal, hidden)
    return JSONResponse(st2.execution(body, given) if shape == "st2" else body, status_code=done.http_status)


def _shown(services: Services, env: Envelope, principal: Principal, hidden: Hidden) -> dict[str, Any]:
    """The envelope as ``principal`` may see it (:mod:`slurmtower.visibility`): jobs in its
    result without the private fields of other users' jobs for readers, and no name of a
    hidden node or partition but the nodes the principal named in its own execution."""
    body = env.model_dump(mode="json")
    body["result"] = Visibility.from_settings(services.settings).records(body.get("result"), principal)
    if env.principal == principal.name:
        nodes = env.parameters.get("nodes")
        hidden = hidden.but(nodes if isinstance(nodes, str) else None)
    shown: dict[str, Any] = hidden.scrub(body)
    return shown


@router.get("/executions/{execution_id}", response_model=Envelope | st2.St2Execution,
            responses=problems(400, *READ_PROBLEMS, 404))
async def get_execution(
    execution_id: Annotated[str, Path(description="The envelope's execution_id.")], services: ClusterDep,
    principal: Annotated[Principal, require(Perm.READ)],
    format: Format = "slurmtower",  # noqa: A002 - the query parameter's name
) -> JSONResponse:
    """One execution's envelope."""
    shape = st2.check_format(format)
    env = await asyncio.to_thread(_catalogue(services).get_execution, execution_id)
    body = _shown(services, env, principal, await services.live().hiding())
    return JSONResponse(st2.execution(body) if shape == "st2" else body)


@router.get("/audit", dependencies=[require(Perm.READ)], responses=problems(*READ_PROBLEMS))
async def list_audit(
    services: ClusterDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many records (1-1000).")] = 50,
    before: Annotated[int | None, Query(ge=0, le=MAX_ID, description="seq of the last record seen (keyset).")] = None,
    who: Annotated[str | None, Query(description="Only records of this principal.")] = None,
    action: Annotated[str | None, Query(description="Only records of this action.")] = None,
    execution_id: Annotated[str | None, Query(description="Only records of this execution.")] = None,
) -> AuditPage:
    """The audit log of mutating actions, newest first."""
    store = _catalogue(services).store
    hidden = await services.live().hiding()
    records = await asyncio.to_thread(store.list_audit, limit=limit, before=before, who=who, action=action,
                                      execution_id=execution_id)
    # Records about hidden nodes only are left out, the others lose their names (node states
    # and reasons, a refusal's message); the page's bound is the store's, so paging goes on.
    shown = [r for r in map(hidden.item, records) if r is not None]
    return AuditPage(records=shown, next_before=records[-1].seq if len(records) == limit else None)
