"""May do, may ask, and the requests that wait for a person: the one place that decides.

Every adapter runs an action through :meth:`Approvals.submit` (HTTP's ``POST /actions/{name}``,
``slurmtower run``, the rules; the agent endpoint too): the policy (``[approvals]``,
:class:`Policy`) says whether its caller may *do* it, may only *ask* for it, or neither:

* **do**: the caller's role grants the action's permission (operators node and reservation
  actions, admins triggers; a ``user`` its own jobs), or it is the CLI (Slurm's own rights)
  or a rule (the rule file's): the action runs, as before;
* **ask**: the role may not run it but ``approvals.requestable`` lets it ask (by default a
  ``user`` asks for ``slurm.reservation.create``, for itself or its accounts), or a
  two-person rule (``approvals.two_person``) covers the act (a drain of more than N nodes, a
  cancel of more than N jobs, a trigger change ...), whoever asks: the action's dry run
  makes the plan (its checks run: a conflict, the breaker or bad input refuse the request
  as they would the act), and a request is stored, pending, changing nothing. HTTP answers
  202 with it, the CLI prints it and exits 6;
* **neither**: a 403 naming the permission the action needs.

A dry run is open to whoever may do or ask. A request is decided by someone of at least
``approvals.approver_role`` (a two-person rule's ``approver_role``), never its requester, and
not by a rule; the requester may withdraw it; it expires after ``approvals.request_ttl_hours``
(the expiry sweep, :meth:`Approvals.expire`, and any read of it). Approving runs the action
then, as the requester (the owner of what it makes: owner tags, reservations) with the
approver named in the envelope, every audit record (``request_id``, ``approved_by``) and
Slurm's reason or comment tag; its checks run again at that moment: a conflict or the
breaker refuses the approval (409) and the request stays pending. Each step is an event
(``slurmtower.request.created``, ``.approved``, ``.failed``, ``.denied``, ``.withdrawn``,
``.expired``) rules and hooks can mail or page on. Requests are their cluster's; a caller
below ``operator`` sees only its own.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from slurmtower.actions.envelope import Envelope
from slurmtower.actions.ownership import Via
from slurmtower.actions.registry import REGISTRY, ActionSpec
from slurmtower.errors import (
    ConfigError,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    SlurmtowerError,
)
from slurmtower.models.event import (
    REQUEST_APPROVED,
    REQUEST_CREATED,
    REQUEST_DENIED,
    REQUEST_EXPIRED,
    REQUEST_FAILED,
    REQUEST_WITHDRAWN,
    Event,
)
from slurmtower.models.request import ActionRequest, RequestPage
from slurmtower.nodeset import NodeSet
from slurmtower.principal import ACTION_PERM, ADMIN, USER, Perm, role_perm
from slurmtower.settings import ApprovalSettings, Settings, TwoPersonRule

if TYPE_CHECKING:
    from slurmtower.actions.catalogue import Catalogue
    from slurmtower.actions.request_store import RequestStore

__all__ = ["REQUESTED_EXIT_CODE", "Approvals", "Need", "Policy"]

log = logging.getLogger(__name__)

#: The exit code of ``slurmtower run`` when the act became a request (nothing done yet).
REQUESTED_EXIT_CODE = 6


@dataclass(frozen=True)
class Need:
    """Why an act waits for a person, and who may decide it."""

    why: str
    approver_role: str
    two_person: bool = False


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _role_text(role: str | None) -> str:
    return role if role is not None else "the CLI"


class Policy:
    """``[approvals]``: who may ask for what, who decides, which acts need two people.

    Raises :class:`ConfigError` naming the key of an action pattern that names no action.
    """

    def __init__(self, settings: ApprovalSettings) -> None:
        self.settings = settings
        for role, patterns in settings.requestable.items():
            for i, pattern in enumerate(patterns):
                if not fnmatch.filter(REGISTRY, pattern):
                    raise ConfigError(f"approvals.requestable.{role}[{i}]: no action is {pattern!r}",
                                      key=f"approvals.requestable.{role}")
        for i, rule in enumerate(settings.two_person):
            if not fnmatch.filter(REGISTRY, rule.action):
                raise ConfigError(f"approvals.two_person[{i}].action: no action is {rule.action!r}",
                                  key=f"approvals.two_person.{i}.action")

    @property
    def _requestable(self) -> dict[str, list[str]]:
        return cast(dict[str, list[str]], self.settings.requestable)

    @classmethod
    def from_settings(cls, settings: Settings | None) -> Policy:
        return cls(settings.approvals if settings is not None else ApprovalSettings())

    @staticmethod
    def may_do(spec: ActionSpec, role: str | None) -> bool:
        """The role grants the action's permission (``None``: the CLI or a rule, which may)."""
        if role is None:
            return True
        return role_perm(role) >= ACTION_PERM[spec.permission] or (spec.own_jobs and role == USER)

    def may_ask(self, spec: ActionSpec, role: str | None) -> bool:
        """``approvals.requestable`` lets this role ask for the action."""
        return role is not None and _matches(spec.name, self._requestable.get(role, []))

    def may_ask_anything(self, role: str | None) -> bool:
        """The role may ask for some action (or do some mutating one): it may have requests."""
        if role is None or role_perm(role) >= Perm.OPERATE or role == USER:
            return True
        return bool(self._requestable.get(role))

    def refusal(self, spec: ActionSpec, principal: str, role: str | None) -> PermissionDenied:
        needed = ACTION_PERM[spec.permission]
        return PermissionDenied(f"{principal} ({_role_text(role)}) may not run {spec.name}: needs "
                                f"{needed.name.lower()}" + (" (or the user role, on its own jobs)" if spec.own_jobs
                                                            else ""))

    def rules_for(self, name: str) -> list[TwoPersonRule]:
        return [r for r in self.settings.two_person if fnmatch.fnmatchcase(name, r.action)]

    def two_person(self, spec: ActionSpec, model: Any, plan: Callable[[], Envelope]) -> Need | None:
        """The two-person rule the act falls under (``plan``: its dry run, run when a rule
        counts jobs), or ``None``."""
        for rule in self.rules_for(spec.name):
            sizes: list[str] = []
            if rule.more_than_nodes is not None:
                nodes = getattr(model, "nodes", None)
                count = len(NodeSet(nodes)) if nodes else int(getattr(model, "node_count", None) or 0)
                if count <= rule.more_than_nodes:
                    continue
                sizes.append(f"{count} nodes, more than {rule.more_than_nodes}")
            if rule.more_than_jobs is not None:
                result = plan().result
                affected = result.get("affected") if isinstance(result, dict) else None
                if not isinstance(affected, int) or affected <= rule.more_than_jobs:
                    continue
                sizes.append(f"{affected} jobs, more than {rule.more_than_jobs}")
            size = f" of {' and '.join(sizes)}" if sizes else ""
            return Need(f"two-person rule: {spec.name}{size} needs a second {rule.approver_role} to approve",
                        rule.approver_role, two_person=True)
        return None

    def asked(self, spec: ActionSpec, principal: str, role: str | None) -> Need:
        """The need of a request made because the role may only ask."""
        return Need(f"{principal} ({_role_text(role)}) may ask for {spec.name}; an {self.settings.approver_role} "
                    "decides", self.settings.approver_role)

    @staticmethod
    def may_decide(role: str | None, approver_role: str) -> bool:
        """The role decides requests that need ``approver_role`` (``None``: the CLI, as an admin)."""
        return role_perm(role if role is not None else ADMIN) >= role_perm(approver_role)

    @staticmethod
    def sees_all(role: str | None) -> bool:
        """The role reads every request (operators and admins, the CLI); others their own."""
        return role is None or role_perm(role) >= Perm.OPERATE


def _now() -> datetime:
    return datetime.now(UTC)


class Approvals:
    """Requests over one cluster's catalogue: submit, ask, decide, withdraw, expire, read.

    Library errors: :class:`PermissionDenied` (403), :class:`NotFound` (404), :class:`Conflict`
    (409: decided already, expired, or the act's checks refuse it now), :class:`InvalidInput`.
    """

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.policy = Policy.from_settings(catalogue.settings)
        self._store: RequestStore | None = None

    @property
    def store(self) -> RequestStore:
        """This cluster's requests, on the action store's engine (opened on first use)."""
        if self._store is None:
            from slurmtower.actions.request_store import RequestStore  # deferred: SQLAlchemy, first use

            actions = self.catalogue.store
            self._store = RequestStore(actions.engine, cluster=actions.cluster, cluster_name=actions.cluster_name)
        return self._store

    @property
    def _settings(self) -> ApprovalSettings:
        return self.policy.settings

    # -- running or asking ------------------------------------------------------------------
    def submit(self, name: str, params: dict[str, Any] | None, *, principal: str, role: str | None, via: str,
               dry_run: bool | None = None, idempotency_key: str | None = None,
               reason: str | None = None) -> Envelope | ActionRequest:
        """Run action ``name`` for ``principal`` (``role``: its role where it calls, ``None`` for
        the CLI and rules) if the policy lets it, or store a request if it may only ask (see the
        module docstring). Raises :class:`PermissionDenied` when it may neither."""
        catalogue = self.catalogue
        spec = catalogue.spec(name)
        does = self.policy.may_do(spec, role)
        channel = cast(Via, via)

        def run(**extra: Any) -> Envelope:
            return catalogue.execute(name, params, principal=principal, via=channel, role=role,
                                     idempotency_key=idempotency_key, **extra)

        if not spec.mutating:
            if not does:
                raise self.policy.refusal(spec, principal, role)
            return run(dry_run=dry_run)
        asks = self.policy.may_ask(spec, role)
        if not does and not asks:
            raise self.policy.refusal(spec, principal, role)
        wants_dry = dry_run if dry_run is not None else isinstance(params, dict) and params.get("dry_run") is True
        if wants_dry:
            return run(dry_run=True)
        if does and not self.policy.rules_for(name):
            return run(dry_run=dry_run)
        try:
            _spec, model = catalogue.validate(name, params)
        except SlurmtowerError:
            if does:  # the catalogue records the rejection, then raises it
                return run(dry_run=dry_run)
            raise
        plans: list[Envelope] = []

        def plan() -> Envelope:
            if not plans:
                plans.append(self._plan(name, params, principal=principal, role=role, via=channel))
            return plans[0]

        need = self.policy.two_person(spec, model, plan)
        if need is None and does:
            return run(dry_run=dry_run)
        return self.request(name, params, principal=principal, role=role, via=via, reason=reason,
                            need=need or self.policy.asked(spec, principal, role), plan=plan())

    def _plan(self, name: str, params: dict[str, Any] | None, *, principal: str, role: str | None,
              via: Via) -> Envelope:
        return self.catalogue.execute(name, params, principal=principal, via=via, role=role, dry_run=True)

    def request(self, name: str, params: dict[str, Any] | None, *, principal: str, role: str | None, via: str,
                reason: str | None = None, need: Need | None = None, plan: Envelope | None = None) -> ActionRequest:
        """Store a request of ``principal`` for action ``name`` with ``params`` (the library call
        every adapter makes: HTTP, the CLI, rules, the agent endpoint): ``plan`` is the action's
        dry run (run here when not given: its refusal is the request's), ``need`` why it waits
        (by default: the role may ask, an ``approvals.approver_role`` decides). Emits
        ``slurmtower.request.created``. Raises :class:`PermissionDenied` when the policy lets
        the role neither ask nor do the action."""
        spec = self.catalogue.spec(name)
        if not spec.mutating:
            raise InvalidInput(f"{name} changes nothing: run it, there is nothing to request", param="action")
        if not self.policy.may_ask(spec, role) and not self.policy.may_do(spec, role):
            raise self.policy.refusal(spec, principal, role)
        reason = self._text(reason, "reason")
        if plan is None:
            plan = self._plan(name, params, principal=principal, role=role, via=cast(Via, via))
        if plan.status == "failed":
            raise InvalidInput(f"{name}: its dry run failed, no request made: {plan.stderr or 'see the execution'} "
                               f"(execution {plan.execution_id})", param="parameters")
        need = need or self.policy.asked(spec, principal, role)
        parameters = {k: v for k, v in plan.parameters.items() if k != "dry_run"}
        result = plan.result if isinstance(plan.result, dict) else {"result": plan.result}
        nodes = result.get("nodes") if isinstance(result.get("nodes"), str) else parameters.get("nodes")
        partition = parameters.get("partition")
        now = _now()
        stored = self.store.add(
            action=name, parameters=parameters, requester=principal, requester_role=role, via=via, reason=reason,
            plan={"result": plan.result, "stdout": plan.stdout, "execution_id": plan.execution_id},
            plan_execution_id=plan.execution_id, nodes=str(nodes) if nodes else None,
            partition=partition if isinstance(partition, str) else None, why=need.why,
            approver_role=need.approver_role, two_person=need.two_person, state="pending", created_at=now,
            expires_at=now + timedelta(hours=self._settings.request_ttl_hours))
        self._event(REQUEST_CREATED, stored, source=via)
        return stored

    # -- deciding ---------------------------------------------------------------------------
    def approve(self, request_id: int, *, principal: str, role: str | None, via: str,
                comment: str | None = None) -> tuple[ActionRequest, Envelope]:
        """Approve a pending request and run its action now, as its requester (its checks run
        again: a refusal leaves it pending and is raised). Returns the request as it ends
        (``approved``, or ``failed`` when the action ran and failed) and the execution."""
        req = self._decidable(request_id, principal=principal, role=role, via=via, verb="approve")
        comment = self._text(comment, "comment")
        claimed = self.store.move(req.id, ["pending"], state="running", decided_by=principal, decided_via=via,
                                  decided_at=_now(), comment=comment)
        if claimed is None:
            raise self._taken(req.id)
        try:
            env = self.catalogue.execute(req.action, dict(req.parameters), principal=req.requester,
                                         via=cast(Via, req.via), role=req.requester_role,
                                         approval=(req.id, principal))
        except BaseException:
            # The act's checks refused it now (a conflict, the breaker, a start gone by): the
            # request waits again, undecided.
            self.store.move(req.id, ["running"], state="pending", decided_by=None, decided_via=None, decided_at=None,
                            comment=None)
            raise
        state = "approved" if env.status in ("succeeded", "partial") else "failed"
        done = self.store.move(req.id, ["running"], state=state, execution_id=env.execution_id)
        final = done or claimed
        self._event(REQUEST_APPROVED if state == "approved" else REQUEST_FAILED, final, source=via)
        return final, env

    def deny(self, request_id: int, *, principal: str, role: str | None, via: str,
             comment: str | None = None) -> ActionRequest:
        """Deny a pending request: nothing runs."""
        req = self._decidable(request_id, principal=principal, role=role, via=via, verb="deny")
        comment = self._text(comment, "comment")
        done = self.store.move(req.id, ["pending"], state="denied", decided_by=principal, decided_via=via,
                               decided_at=_now(), comment=comment)
        if done is None:
            raise self._taken(req.id)
        self._event(REQUEST_DENIED, done, source=via)
        return done

    def withdraw(self, request_id: int, *, principal: str, role: str | None, via: str,
                 comment: str | None = None) -> ActionRequest:
        """The requester takes its pending request back."""
        req = self._pending(request_id, principal=principal, role=role)
        if req.requester != principal:
            raise PermissionDenied(f"only its requester ({req.requester}) withdraws request {req.id}; an "
                                   f"{req.approver_role} may deny it", param="request_id")
        comment = self._text(comment, "comment")
        done = self.store.move(req.id, ["pending"], state="withdrawn", decided_by=principal, decided_via=via,
                               decided_at=_now(), comment=comment)
        if done is None:
            raise self._taken(req.id)
        self._event(REQUEST_WITHDRAWN, done, source=via)
        return done

    def expire(self, now: datetime | None = None) -> list[ActionRequest]:
        """Expire every pending request past its time (an event each); the requests expired."""
        now = now or _now()
        out = []
        for req in self.store.overdue(now):
            done = self._expire(req, now)
            if done is not None:
                out.append(done)
        return out

    def _expire(self, req: ActionRequest, now: datetime) -> ActionRequest | None:
        done = self.store.move(req.id, ["pending"], state="expired", decided_at=now)
        if done is not None:
            self._event(REQUEST_EXPIRED, done, source="approvals")
        return done

    # -- reading ----------------------------------------------------------------------------
    def get(self, request_id: int, *, principal: str, role: str | None) -> ActionRequest:
        """One request as ``principal`` may see it (another's is unknown to a caller below
        operator); a pending one past its time is expired first."""
        req = self.store.get(request_id)
        if req is None or not (self.policy.sees_all(role) or req.requester == principal):
            raise NotFound(f"unknown request {request_id}", param="request_id")
        if req.state == "pending" and req.expires_at <= _now():
            req = self._expire(req, _now()) or self.store.get(request_id) or req
        return req

    def find(self, *, principal: str, role: str | None, states: Sequence[str] = (), requester: str | None = None,
             action: str | None = None, limit: int = 50, before: int | None = None) -> RequestPage:
        """A page of requests, newest first (a caller below operator: its own only)."""
        self.expire()
        if not self.policy.sees_all(role):
            if requester is not None and requester != principal:
                raise PermissionDenied(f"{principal} ({_role_text(role)}) reads its own requests only",
                                       param="requester")
            requester = principal
        found = self.store.find(states=states, requester=requester, action=action, limit=limit, before=before)
        pending = self.store.count(requester=None if self.policy.sees_all(role) else principal)
        return RequestPage(requests=found, next_before=found[-1].id if len(found) == limit else None,
                           pending=pending)

    # -- helpers ----------------------------------------------------------------------------
    def _text(self, text: str | None, param: str) -> str | None:
        if text is None or not text.strip():
            return None
        text = text.strip()
        most = self._settings.max_reason_length
        if len(text) > most:
            raise InvalidInput(f"{param} is longer than {most} characters", param=param)
        if any(not c.isprintable() and c not in "\n\t" for c in text):
            raise InvalidInput(f"{param} holds control characters", param=param)
        return text

    def _pending(self, request_id: int, *, principal: str, role: str | None) -> ActionRequest:
        req = self.get(request_id, principal=principal, role=role)
        if req.state == "expired":
            raise Conflict(f"request {req.id} expired at {req.expires_at:%Y-%m-%d %H:%M:%S} UTC: nothing was done",
                           param="request_id", state=req.state)
        if req.state != "pending":
            by = f" by {req.decided_by}" if req.decided_by else ""
            raise Conflict(f"request {req.id} is already {req.state}{by}", param="request_id", state=req.state)
        return req

    def _decidable(self, request_id: int, *, principal: str, role: str | None, via: str, verb: str) -> ActionRequest:
        if via == "rule":
            raise PermissionDenied("a rule does not decide requests: a person does", param="request_id")
        if not self.policy.sees_all(role):
            raise PermissionDenied(f"{principal} ({_role_text(role)}) may not {verb} requests: needs "
                                   f"{self._settings.approver_role}", param="request_id")
        req = self._pending(request_id, principal=principal, role=role)
        if req.requester == principal:
            raise PermissionDenied(f"{principal} asked for request {req.id}: the requester never decides its own "
                                   "request" + (" (withdraw it instead)" if verb == "deny" else ""),
                                   param="request_id")
        if not self.policy.may_decide(role, req.approver_role):
            raise PermissionDenied(f"{principal} ({_role_text(role)}) may not {verb} request {req.id}: it needs an "
                                   f"{req.approver_role}", param="request_id")
        return req

    def _taken(self, request_id: int) -> Conflict:
        now = self.store.get(request_id)
        state = now.state if now is not None else "gone"
        return Conflict(f"request {request_id} was decided meanwhile: it is {state}", param="request_id",
                        state=state)

    def _event(self, kind: str, req: ActionRequest, *, source: str) -> None:
        """The request's step as an event; a failure is logged, never raised (the request
        stands)."""
        from slurmtower.events.store import EventStore  # deferred: SQLAlchemy, on a request's step only

        payload = {
            "request_id": req.id, "action": req.action, "state": req.state, "requester": req.requester,
            "via": req.via, "reason": req.reason, "why": req.why, "approver_role": req.approver_role,
            "two_person": req.two_person, "nodes": req.nodes, "partition": req.partition,
            "parameters": req.parameters, "expires_at": req.expires_at.isoformat(), "decided_by": req.decided_by,
            "comment": req.comment, "execution_id": req.execution_id,
        }
        node = req.nodes if req.nodes and len(NodeSet(req.nodes)) == 1 else None
        try:
            store = self.catalogue.store
            EventStore(store.engine, create=False).scoped(store.cluster).append(
                [Event(type=kind, time=_now(), source=source[:32], node=node, payload=payload)])
        except Exception:  # the log says the event is missing
            log.exception("cannot record the event %s of request %s", kind, req.id)
