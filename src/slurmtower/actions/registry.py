"""The action registry and the per-execution context actions run with."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel
from pydantic.json_schema import DEFAULT_REF_TEMPLATE

from slurmtower.actions.ownership import Via
from slurmtower.actions.schemas import no_nul
from slurmtower.errors import PermissionDenied
from slurmtower.models import Node
from slurmtower.models.event import Event
from slurmtower.principal import ADMIN
from slurmtower.visibility import Visibility

if TYPE_CHECKING:
    from slurmtower.accounting import AccountingDB
    from slurmtower.actions.hold_store import HoldStore
    from slurmtower.actions.store import ActionStore
    from slurmtower.settings import Settings
    from slurmtower.slurm import SlurmClient

__all__ = ["ACTION_MODULES", "REGISTRY", "ActionSpec", "Permission", "Registry", "Run", "action", "node_snapshot"]

log = logging.getLogger(__name__)

Permission = Literal["read", "operate", "admin"]
P = TypeVar("P", bound=BaseModel)


@dataclass
class Run:
    """What one execution knows and collects: who, how, and the states for the audit."""

    client: SlurmClient
    principal: str
    via: Via
    dry_run: bool
    settings: Settings | None = None
    accounting_factory: Callable[[], AccountingDB | None] | None = None
    nodes: str | None = None
    """The node set acted on (for the audit)."""
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    stdout: list[str] = field(default_factory=list)
    partial: str | None = None
    """Set by an action that changed only part of what it was asked to (why, in one line):
    the execution ends ``partial`` instead of ``succeeded``."""
    failed: str | None = None
    """Set by an action whose work ran and failed as a whole, without an error to raise (why,
    in one line): the execution ends ``failed`` (exit code 1), its result kept."""
    store_factory: Callable[[], ActionStore] | None = None
    """Opens the action store (its engine also holds the node holds and the event log) on
    first use: :attr:`store`."""
    execution_id: str | None = None
    catalogue: Any = None
    """The catalogue running this action (an action that runs others through it: maintenance)."""
    role: str | None = None
    """The caller's role over HTTP (``reader``, ``operator``, ``admin``); ``None`` for the CLI
    and rules, whose rights are Slurm's own (the CLI) or the rule file's."""
    request_id: int | None = None
    """The request this execution runs for (an approved one): ``principal`` is its requester."""
    approved_by: str | None = None
    """Who approved that request: acts name both people (owner tags' reasons, the audit)."""

    def accounting(self) -> AccountingDB | None:
        """The accounting reader, or ``None`` when none is configured."""
        return self.accounting_factory() if self.accounting_factory is not None else None

    @property
    def store(self) -> ActionStore | None:
        """The action store (``None`` without one), opened on first use."""
        return self.store_factory() if self.store_factory is not None else None

    @property
    def holds(self) -> HoldStore | None:
        """The node holds of the store (``None`` without a store)."""
        store = self.store
        if store is None:
            return None
        from slurmtower.actions.hold_store import HoldStore  # deferred: SQLAlchemy, first hold read only

        return HoldStore(store.engine, cluster=store.cluster)

    def visibility(self) -> Visibility:
        """The visibility policy (hidden partitions): applied where actions read Slurm."""
        return Visibility.from_settings(self.settings) if self.settings is not None else Visibility()

    def record_event(self, kind: str, payload: dict[str, Any], *, node: str | None = None) -> None:
        """An event in the store's log (a breaker's, a job action's); a failure is logged, never
        raised: the action's answer stands."""
        store = self.store
        if store is None:
            return
        from slurmtower.events.store import EventStore  # deferred: SQLAlchemy, actions that record only

        try:
            EventStore(store.engine, create=False).scoped(store.cluster).append(
                [Event(type=kind, time=datetime.now(UTC), source=self.via, node=node, payload=payload)])
        except Exception:  # the log says the event is missing
            log.exception("cannot record the event %s", kind)

    def check_override(self, override: bool, breaker: str) -> None:
        """``override_breaker`` only from an admin (or the CLI), never from a rule."""
        if not override:
            return
        if self.via == "rule":
            raise PermissionDenied(f"a rule cannot override the {breaker} (override_breaker): it is there to stop "
                                   "automation; an admin can", param="override_breaker")
        if self.role is not None and self.role != ADMIN:
            raise PermissionDenied(f"override_breaker needs the admin role ({self.principal} is {self.role})",
                                   param="override_breaker")


@dataclass(frozen=True)
class ActionSpec:
    name: str
    description: str
    params: type[BaseModel]
    mutating: bool
    permission: Permission
    run: Callable[[Run, Any], Any]
    own_jobs: bool = False
    """The ``user`` role may run it on its own jobs (the action checks whose they are)."""

    def schema(self, ref_template: str = DEFAULT_REF_TEMPLATE) -> dict[str, Any]:
        """The JSON Schema of the parameters (no text holds a NUL: :func:`~slurmtower.actions.schemas.no_nul`);
        ``ref_template``: where its ``$defs`` are referred to."""
        return no_nul(self.params.model_json_schema(ref_template=ref_template))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "mutating": self.mutating,
            "permission": self.permission,
            "own_jobs": self.own_jobs,
            "parameters": self.schema(),
        }


#: Each action and the module that defines it: what a one-off ``slurmtower run`` imports (that
#: module alone: the others' parameter models and implementations cost a third of a second).
#: ``tests/test_actions.py`` checks it against what the modules register.
ACTION_MODULES: dict[str, str] = {
    **dict.fromkeys(("slurm.config.get", "slurm.job.find", "slurm.job.get", "slurm.job.step.get", "slurm.node.down",
                     "slurm.node.drain", "slurm.node.get", "slurm.node.reserve", "slurm.node.resume",
                     "slurm.node.unreserve", "slurm.node.update", "slurm.trigger.set", "slurm.trigger.unset"),
                    "slurmtower.actions.impl"),
    **dict.fromkeys(("slurm.job.cancel", "slurm.job.hold", "slurm.job.release", "slurm.job.requeue",
                     "slurm.job.resume", "slurm.job.signal", "slurm.job.suspend", "slurm.job.update"),
                    "slurmtower.actions.jobs"),
    "slurm.job.why": "slurmtower.actions.why",
    "slurm.node.maintain": "slurmtower.actions.maintain",
    **dict.fromkeys(("slurm.reservation.create", "slurm.reservation.delete", "slurm.reservation.update"),
                    "slurmtower.actions.reservations"),
}


class Registry(Mapping[str, ActionSpec]):
    """The registered actions by name. Every name of :data:`ACTION_MODULES` is listed (``in``,
    iteration) without importing anything; an action's spec is read (``[name]``, ``get``) by
    importing its module first, so a process that runs one action loads that one's."""

    def __init__(self, modules: Mapping[str, str]) -> None:
        self._modules = dict(modules)
        self._specs: dict[str, ActionSpec] = {}

    def register(self, spec: ActionSpec) -> None:
        self._specs[spec.name] = spec

    def __getitem__(self, name: str) -> ActionSpec:
        found = self._specs.get(name)
        if found is None:
            module = self._modules.get(name)
            if module is None:
                raise KeyError(name)
            importlib.import_module(module)  # its @action decorators register it
            found = self._specs[name]
        return found

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._modules), **dict.fromkeys(self._specs)})

    def __len__(self) -> int:
        return len(self._modules.keys() | self._specs.keys())

    def __contains__(self, name: object) -> bool:
        return name in self._modules or name in self._specs

    def registered(self) -> dict[str, ActionSpec]:
        """What the modules imported so far registered (for the index's test)."""
        return dict(self._specs)


REGISTRY = Registry(ACTION_MODULES)


def action(
    name: str, params: type[P], *, mutating: bool, permission: Permission, own_jobs: bool = False
) -> Callable[[Callable[[Run, P], Any]], Callable[[Run, P], Any]]:
    """Register an action: its first docstring line is its description."""

    def register(func: Callable[[Run, P], Any]) -> Callable[[Run, P], Any]:
        doc = (func.__doc__ or "").strip().splitlines()
        REGISTRY.register(ActionSpec(name, doc[0] if doc else name, params, mutating, permission, func, own_jobs))
        return func

    return register


def node_snapshot(nodes: list[Node]) -> dict[str, Any]:
    """``{node: {"state": "IDLE+DRAIN", "reason": ...}}`` for the audit log."""
    return {n.name: {"state": n.state_text, "reason": n.reason} for n in nodes}
