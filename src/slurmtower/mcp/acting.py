"""An agent's acts: the dry run's plan first, then the act it confirms, as a person would ask.

Every catalogue action is a tool. A read-only one runs as over HTTP. A mutating one runs in
two calls, the same arguments both times:

1. **plan**: without ``confirmation`` the tool runs the action's dry run (the catalogue's:
   its checks, holds and the breaker refuse there as they would the act) and answers with the
   plan and a confirmation id, the dry run's execution id, recorded and audited ``via=mcp``;
2. **act**: with ``confirmation`` it checks that id is a plan of this principal's for this
   action, made less than ``mcp.confirm_seconds`` ago, for the same parameters (each checked
   against the store's record of the dry run, whichever process made it), and takes it once
   (the store's single-use nonces: a replay in any process is refused); any failure of these
   is a :class:`~slurmtower.errors.Conflict` naming ``confirmation``, and nothing is done.
   Then the act becomes a request a person approves (:meth:`Approvals.request
   <slurmtower.actions.approvals.Approvals.request>`: the operator sees the agent, the plan
   and the ``request_reason`` it gave), unless ``mcp.act_directly`` lets this principal's
   agent run this action at once (:meth:`Approvals.submit
   <slurmtower.actions.approvals.Approvals.submit>`: a two-person rule still applies).

Who may call what is the approval policy's (:class:`~slurmtower.actions.approvals.Policy`):
a role that may neither do nor ask for an action is refused at the plan, before its dry run.
These functions block (the catalogue, the store): run them in a thread.
"""

from __future__ import annotations

import fnmatch
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from slurmtower.actions import Approvals, Envelope
from slurmtower.actions.approvals import Need
from slurmtower.actions.registry import ActionSpec
from slurmtower.errors import Conflict, InvalidInput, NotFound
from slurmtower.events.store import EventStore
from slurmtower.models.request import ActionRequest
from slurmtower.settings import McpSettings

__all__ = ["CONFIRMATION_RE", "VIA", "Plan", "act", "direct", "plan", "run_read"]

#: The channel an agent's executions, audit records and requests name.
VIA: Final = "mcp"
#: A confirmation id: the dry run's execution id.
CONFIRMATION_RE = re.compile(r"^[0-9a-f]{32}$")
#: The nonces of taken confirmations (the store's single-use table) start with this.
_NONCE = "mcp-confirmation:"


class Plan:
    """A mutating tool's first answer: the dry run and the id that confirms it."""

    def __init__(self, envelope: Envelope, expires_at: datetime, direct: bool) -> None:
        self.envelope = envelope
        self.expires_at = expires_at
        self.direct = direct

    @property
    def confirmation(self) -> str:
        return self.envelope.execution_id


def direct(settings: McpSettings, principal: str, action: str) -> bool:
    """``mcp.act_directly`` lets ``principal``'s agent run ``action`` once confirmed."""
    return any(fnmatch.fnmatchcase(action, p) for p in settings.act_directly.get(principal, ()))


def _checked_role(approvals: Approvals, spec: ActionSpec, principal: str, role: str) -> None:
    policy = approvals.policy
    if not policy.may_do(spec, role) and not policy.may_ask(spec, role):
        raise policy.refusal(spec, principal, role)


def run_read(approvals: Approvals, name: str, params: dict[str, Any], *, principal: str, role: str) -> Envelope:
    """A read-only action, as ``POST /actions/{name}`` runs it for this caller."""
    done = approvals.submit(name, params, principal=principal, role=role, via=VIA)
    assert isinstance(done, Envelope)  # a read is never a request
    return done


def plan(approvals: Approvals, spec: ActionSpec, params: dict[str, Any], *, principal: str, role: str,
         settings: McpSettings) -> Plan:
    """The dry run of a mutating action and its confirmation (see the module docstring).

    Raises :class:`PermissionDenied` for a role that may neither do nor ask for it, and what
    the dry run raises (bad input, a conflict, the breaker).
    """
    _checked_role(approvals, spec, principal, role)
    env = approvals.submit(spec.name, params, principal=principal, role=role, via=VIA, dry_run=True)
    assert isinstance(env, Envelope)  # a dry run is never a request
    return Plan(env, env.start_time + timedelta(seconds=settings.confirm_seconds),
                direct(settings, principal, spec.name) and approvals.policy.may_do(spec, role))


def _plain(parameters: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in parameters.items() if k != "dry_run"}


def _confirmed(approvals: Approvals, spec: ActionSpec, params: dict[str, Any], confirmation: str, *,
               principal: str, settings: McpSettings, now: datetime) -> None:
    """Check ``confirmation`` for this act and take it (once); :class:`Conflict` otherwise."""
    if not CONFIRMATION_RE.match(confirmation):
        raise InvalidInput("confirmation: not a confirmation id (32 hex digits, as the plan gave it)",
                           param="confirmation")
    catalogue = approvals.catalogue
    fresh = f"call {spec.name} without a confirmation for a new plan"
    try:
        planned = catalogue.get_execution(confirmation)
    except NotFound:
        raise Conflict(f"confirmation {confirmation} is unknown here: nothing was done; {fresh}",
                       param="confirmation") from None
    if (not planned.dry_run or planned.via != VIA or planned.principal != principal or planned.action != spec.name
            or planned.status == "failed"):
        raise Conflict(f"confirmation {confirmation} is no plan of {principal}'s for {spec.name}: nothing was done; "
                       f"{fresh}", param="confirmation")
    expires = planned.start_time + timedelta(seconds=settings.confirm_seconds)
    if now >= expires:
        raise Conflict(f"confirmation {confirmation} expired at {expires:%Y-%m-%d %H:%M:%S} UTC "
                       f"(mcp.confirm_seconds = {settings.confirm_seconds:g}): nothing was done; {fresh}",
                       param="confirmation", expired_at=expires.isoformat())
    _spec, model = catalogue.validate(spec.name, {**params, "dry_run": True})
    given, was = _plain(model.model_dump(mode="json")), _plain(planned.parameters)
    if given != was:
        differ = sorted(k for k in set(given) | set(was) if given.get(k) != was.get(k))
        raise Conflict(f"confirmation {confirmation} was given for other parameters ({', '.join(differ)} differ): "
                       f"nothing was done; {fresh}", param="confirmation", differ=differ)
    store = catalogue.store
    if not EventStore(store.engine, create=False).remember_nonce(_NONCE + confirmation, expires_at=expires, now=now):
        raise Conflict(f"confirmation {confirmation} was already used (replayed): nothing was done again; {fresh}",
                       param="confirmation")


def act(approvals: Approvals, spec: ActionSpec, params: dict[str, Any], confirmation: str, *, principal: str,
        role: str, settings: McpSettings, reason: str | None, now: datetime | None = None) -> Envelope | ActionRequest:
    """The confirmed act: a request a person approves (the default), or the execution when
    ``mcp.act_directly`` lets this principal's agent run the action (a two-person rule may
    still make it a request). Raises :class:`Conflict` naming ``confirmation`` when the
    confirmation does not hold, and whatever the act's checks raise."""
    _checked_role(approvals, spec, principal, role)
    _confirmed(approvals, spec, params, confirmation, principal=principal, settings=settings,
               now=now or datetime.now(UTC))
    policy = approvals.policy
    if direct(settings, principal, spec.name) and policy.may_do(spec, role):
        return approvals.submit(spec.name, params, principal=principal, role=role, via=VIA, reason=reason)
    _spec, model = approvals.catalogue.validate(spec.name, params)
    plans: list[Envelope] = []

    def dry_run() -> Envelope:  # the request's plan, made now: its checks run again
        if not plans:
            plans.append(approvals.catalogue.execute(spec.name, params, principal=principal, via=VIA, role=role,
                                                     dry_run=True))
        return plans[0]

    need = policy.two_person(spec, model, dry_run) or Need(
        f"{principal} ({role}) acts through the agent endpoint (mcp): a person approves its acts "
        f"(mcp.act_directly does not let it run {spec.name} itself)", policy.settings.approver_role)
    return approvals.request(spec.name, params, principal=principal, role=role, via=VIA, reason=reason, need=need,
                             plan=dry_run())
