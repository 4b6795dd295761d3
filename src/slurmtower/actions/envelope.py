"""The result envelope every action returns, and the audit record of every mutation."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PARTIAL", "PARTIAL_EXIT_CODE", "UNRECORDED_EXIT_CODE", "AuditOutcome", "AuditRecord", "Envelope"]

#: ``intent`` is written before a mutating action acts; its outcome follows as a second
#: record of the same execution. An intent without one: the outcome is unknown (the action
#: may have changed Slurm, then failed to record it).
AuditOutcome = Literal["intent", "succeeded", "partial", "failed", "dry_run", "refused", "rejected"]

#: The status of an execution that changed part of what it was asked to: some nodes
#: changed and others did not, or Slurm reported an error for a call that changed nodes.
#: ``result["outcome"]`` names the nodes of each outcome; the audit has each node's state
#: before and after.
PARTIAL = "partial"
#: The exit code of ``slurmtower run`` for a partial outcome (HTTP stays 200: the envelope's
#: ``status`` and ``exit_code`` say it).
PARTIAL_EXIT_CODE = 4
#: The exit code of ``slurmtower run`` when the action ran but its outcome could not be
#: recorded (the store failed after Slurm changed): ``recorded`` is false, ``stderr`` says so.
UNRECORDED_EXIT_CODE = 5


class Envelope(BaseModel):
    """One execution of one action, the same for the CLI, the HTTP API and rules.

    ``status``, ``result``, ``exit_code``, ``stdout`` and ``stderr`` are the StackStorm pack's
    fields; ``exit_code`` is 0 on success, else the exit code the CLI ends with
    (:data:`PARTIAL_EXIT_CODE` for ``partial``, with ``stderr`` saying what did not change).
    """

    model_config = ConfigDict(frozen=True)

    execution_id: str
    action: str
    status: Literal["succeeded", "partial", "failed"]
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The parameters used, defaults filled in."""
    result: Any = None
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    start_time: datetime
    end_time: datetime
    principal: str
    via: Literal["cli", "api", "rule", "mcp"]
    dry_run: bool = False
    error: dict[str, Any] | None = None
    """The problem body (RFC 9457) of a failed execution."""
    recorded: bool = True
    """False when the action ran (Slurm may have changed) but its outcome could not be
    written to the store: the audit log holds only its ``intent`` record."""
    http_status: int = Field(default=200, exclude=True)
    cluster: str | None = None
    """The cluster acted on (``[[clusters]]``); ``None`` in a one-cluster deployment."""
    request_id: int | None = None
    """The request this execution ran for (``GET /requests/{id}``): ``principal`` is its
    requester, the owner of what it made."""
    approved_by: str | None = None
    """Who approved that request."""


class AuditRecord(BaseModel):
    """One mutating action as the audit store keeps it (append-only)."""

    model_config = ConfigDict(frozen=True)

    seq: int
    """Position in the log (keyset pagination: ``before=seq``)."""
    execution_id: str
    at: datetime
    who: str
    via: str
    action: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    nodes: str | None = None
    """The node set acted on, folded."""
    before: dict[str, Any] = Field(default_factory=dict)
    after: dict[str, Any] = Field(default_factory=dict)
    outcome: AuditOutcome
    message: str = ""
    cluster: str | None = None
    """The cluster acted on (its name; ``None`` in a one-cluster deployment)."""
    request_id: int | None = None
    """The request the execution ran for (``who`` is its requester)."""
    approved_by: str | None = None
    """Who approved that request: an approved act's records name both people."""
