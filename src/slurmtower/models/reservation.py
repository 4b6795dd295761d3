"""Reservations."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Reservation"]


class Reservation(BaseModel):
    """One reservation (``scontrol show reservation``, REST ``/reservations``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    nodes: str | None = None
    node_count: int | None = None
    core_count: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    duration: timedelta | None = None
    """``end_time - start_time``. Slurm stores ``duration=infinite`` as 365 days."""
    flags: list[str] = Field(default_factory=list)
    """Upper-case flag names: ``MAINT``, ``IGNORE_JOBS``, ``SPEC_NODES`` ..."""
    users: list[str] = Field(default_factory=list)
    accounts: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    partition: str | None = None
    features: str | None = None
    tres: str | None = None
    state: str | None = None
    """``ACTIVE`` or ``INACTIVE`` (text only; JSON has no state, see :attr:`is_active_at`)."""

    @field_validator("flags")
    @classmethod
    def _upper(cls, value: list[str]) -> list[str]:
        return [v.strip().upper() for v in value if v.strip()]

    @field_validator("partition", "features", "tres", "nodes")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None

    @property
    def is_maintenance(self) -> bool:
        return "MAINT" in self.flags

    def is_active_at(self, when: datetime) -> bool:
        """Whether the reservation covers ``when`` (by its start and end times)."""
        if self.start_time is None:
            return False
        return self.start_time <= when and (self.end_time is None or when < self.end_time)
