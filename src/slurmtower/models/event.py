"""Events, node transitions and rule runs: the records of slurmtower's event log.

Pure pydantic models, no I/O. An :class:`Event` is what the event store holds and what
rules match on; its ``payload`` is a plain JSON-able dict whose shape depends on
``type`` (for ``slurm.node.state`` it is a :class:`NodeTransition` dumped to JSON).

Event types keep the StackStorm pack's names so its rules translate one to one:

- ``slurm.node.state``: one node changed base state or flags.
- ``slurm.sensor.trigger.up`` / ``.down``: the sensor started / stopped (payload ``uuid``).
- ``slurm.sensor.trigger.triggered``: Slurm ran the notify program (payload ``uuid``,
  ``class``, ``type``, ``argument``).
- ``slurmtower.request.created`` / ``.approved`` / ``.failed`` / ``.denied`` / ``.withdrawn`` /
  ``.expired``: a request for an act moved on (payload: the request's ``request_id``,
  ``action``, ``state``, ``requester``, ``reason``, ``decided_by``, ``comment`` ...;
  :mod:`slurmtower.actions.approvals`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "EVENT_SOURCES",
    "NODE_STATE",
    "REQUEST_APPROVED",
    "REQUEST_CREATED",
    "REQUEST_DENIED",
    "REQUEST_EXPIRED",
    "REQUEST_FAILED",
    "REQUEST_WITHDRAWN",
    "SECURITY",
    "SENSOR_DOWN",
    "SENSOR_TRIGGERED",
    "SENSOR_UP",
    "Event",
    "NodeTransition",
    "RuleRun",
    "RuleRunOutcome",
    "TransitionKind",
]

NODE_STATE = "slurm.node.state"
SENSOR_UP = "slurm.sensor.trigger.up"
SENSOR_DOWN = "slurm.sensor.trigger.down"
SENSOR_TRIGGERED = "slurm.sensor.trigger.triggered"
SECURITY = "slurmtower.security"
"""Rejected callbacks and similar; ``source`` is ``security``."""
REQUEST_CREATED = "slurmtower.request.created"
REQUEST_APPROVED = "slurmtower.request.approved"
"""Approved, and its action ran (``execution_id``)."""
REQUEST_FAILED = "slurmtower.request.failed"
"""Approved, and its action ran and failed."""
REQUEST_DENIED = "slurmtower.request.denied"
REQUEST_WITHDRAWN = "slurmtower.request.withdrawn"
REQUEST_EXPIRED = "slurmtower.request.expired"

#: Known values of :attr:`Event.source`; others are allowed (plugins, tests).
EVENT_SOURCES = ("trigger", "poll", "startup", "sensor", "security", "rule", "api", "cli", "mcp", "approvals")

TransitionKind = Literal["appeared", "disappeared", "state", "flags"]
RuleRunOutcome = Literal[
    "succeeded",
    "failed",
    "skipped_rate_limit",
    "skipped_cooldown",
    "render_error",
]


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


class Event(BaseModel):
    """One entry of the append-only event log.

    ``id`` is ``None`` until the store assigns it; ids only ever increase.
    ``time`` is always timezone-aware and normalised to UTC.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: int | None = None
    type: str = Field(min_length=1, max_length=200)
    time: AwareDatetime
    source: str = Field(min_length=1, max_length=32)
    node: str | None = Field(default=None, max_length=255)
    payload: dict[str, Any] = Field(default_factory=dict)
    cluster: str | None = Field(default=None, max_length=40)
    """The cluster it happened on (``[[clusters]]``); ``None`` in a one-cluster deployment."""

    @field_validator("time")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return _utc(value)

    def summary(self) -> dict[str, Any]:
        """The event's metadata without its payload (the ``event`` of a rule's context)."""
        return {
            "id": self.id,
            "type": self.type,
            "time": self.time.isoformat(),
            "source": self.source,
            "node": self.node,
            "cluster": self.cluster,
        }


class NodeTransition(BaseModel):
    """Payload of a ``slurm.node.state`` event: one node's change between two observations.

    ``previous_state`` is ``None`` for a node slurmtower had not seen before
    (``change == "appeared"``); ``state`` is ``None`` for a node that left Slurm's
    configuration (``change == "disappeared"``). ``flags`` lists are sorted.
    ``reason`` and ``reason_owner`` are the node's reason at ``observed_at``.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    node: str
    change: TransitionKind
    previous_state: str | None
    previous_flags: list[str] = Field(default_factory=list)
    state: str | None
    flags: list[str] = Field(default_factory=list)
    flags_added: list[str] = Field(default_factory=list)
    flags_removed: list[str] = Field(default_factory=list)
    reason: str | None = None
    reason_owner: str | None = None
    observed_at: AwareDatetime
    source: str

    @field_validator("observed_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return _utc(value)


class RuleRun(BaseModel):
    """One evaluation of a rule that matched an event, whether its action ran or not.

    ``envelope`` is the action's result envelope (``status``, ``result``, ``exit_code``,
    ``stdout``, ``stderr``, ``execution_id`` ...) or, for skipped runs, the reason.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: int | None = None
    rule: str
    event_id: int | None
    node: str | None = None
    action_ref: str
    started_at: AwareDatetime
    ended_at: AwareDatetime
    outcome: RuleRunOutcome
    envelope: dict[str, Any] = Field(default_factory=dict)

    @field_validator("started_at", "ended_at")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return _utc(value)
