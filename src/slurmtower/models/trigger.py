"""slurmctld event triggers (``strigger``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Trigger"]


class Trigger(BaseModel):
    """One trigger as ``strigger --get`` lists it."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    trigger_id: int
    res_type: str
    """``node``, ``job``, ``slurmctld``, ``slurmdbd``, ``database`` ..."""
    res_id: str
    """A node expression, a job id, or ``*`` for all."""
    type: str
    """The event, e.g. ``down``, ``drained``, ``up``, ``fini``, ``primary_slurmdbd_failure``."""
    offset: int = 0
    """Seconds (negative: before the event, for ``time``)."""
    user: str
    flags: list[str] = Field(default_factory=list)
    """``["PERM"]`` for a permanent trigger, empty for a one-shot one."""
    program: str
    """The whole program string as given to ``--program``, with its leading arguments."""

    @field_validator("flags")
    @classmethod
    def _upper(cls, value: list[str]) -> list[str]:
        return [v.strip().upper() for v in value if v.strip()]

    @property
    def is_permanent(self) -> bool:
        return "PERM" in self.flags
