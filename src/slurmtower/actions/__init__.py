"""slurmtower.actions: the action catalogue (every StackStorm ``slurm`` pack action), its
result envelope, drain ownership tags, drain holds, the circuit breaker and the audit store.

::

    from slurmtower.actions import Catalogue
    cat = Catalogue.from_settings(settings)
    env = cat.execute("slurm.node.drain", {"nodes": "n[1-2]", "reason": "disk swap"},
                      principal="alice", via="cli")
    env.status, env.result["reason"]   # "succeeded", "disk swap [slurmtower:alice@cli]"
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slurmtower.actions.approvals import REQUESTED_EXIT_CODE, Approvals, Policy
from slurmtower.actions.catalogue import (
    Catalogue,
    Dispatcher,
    cli_principal,
    parse_cli_params,
    program_allowed,
    rule_dispatcher,
)
from slurmtower.actions.envelope import PARTIAL_EXIT_CODE, AuditOutcome, AuditRecord, Envelope
from slurmtower.actions.holds import Hold, node_holds
from slurmtower.actions.ownership import OwnerTag, parse_reason, reason_owner, tag_reason
from slurmtower.actions.registry import REGISTRY, ActionSpec
from slurmtower.errors import StoreError

if TYPE_CHECKING:
    from slurmtower.actions.hold_store import HoldStore
    from slurmtower.actions.store import ActionStore

__all__ = [
    "PARTIAL_EXIT_CODE",
    "REGISTRY",
    "REQUESTED_EXIT_CODE",
    "ActionSpec",
    "ActionStore",
    "Approvals",
    "AuditOutcome",
    "AuditRecord",
    "Catalogue",
    "Dispatcher",
    "Envelope",
    "Hold",
    "HoldStore",
    "OwnerTag",
    "Policy",
    "StoreError",
    "cli_principal",
    "node_holds",
    "parse_cli_params",
    "parse_reason",
    "program_allowed",
    "reason_owner",
    "rule_dispatcher",
    "tag_reason",
]

# The two SQLAlchemy-backed stores load on first use: a CLI read never imports SQLAlchemy.
_LAZY = {"ActionStore": "slurmtower.actions.store", "HoldStore": "slurmtower.actions.hold_store"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # deferred: the stores, first use only

    return getattr(importlib.import_module(module), name)

