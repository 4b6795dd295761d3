"""Partitions."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Partition"]


class Partition(BaseModel):
    """One partition. Limits that are unlimited are ``None`` (documented per field)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    state: str
    """``UP``, ``DOWN``, ``DRAIN`` or ``INACTIVE``."""
    nodes: str | None = None
    """Folded node list, ``n[1-4]``."""
    total_nodes: int | None = None
    total_cpus: int | None = None
    is_default: bool | None = None
    """``None`` when the source does not say: v0.0.40+ JSON dropped the partition flags."""
    hidden: bool | None = None
    """``None`` when the source does not say (v0.0.40+ JSON)."""
    max_time: timedelta | None = None
    """``None`` = UNLIMITED."""
    default_time: timedelta | None = None
    """``None`` = not set (the job gets ``max_time``)."""
    min_nodes: int | None = None
    max_nodes: int | None = None
    """``None`` = UNLIMITED."""
    max_cpus_per_node: int | None = None
    """``None`` = UNLIMITED."""
    default_memory_per_node_mib: int | None = None
    max_memory_per_node_mib: int | None = None
    allow_accounts: list[str] | None = None
    """``None`` = all accounts."""
    deny_accounts: list[str] = Field(default_factory=list)
    allow_groups: list[str] | None = None
    """``None`` = all groups."""
    allow_qos: list[str] | None = None
    """``None`` = all QOS."""
    deny_qos: list[str] = Field(default_factory=list)
    qos: str | None = None
    priority_tier: int | None = None
    priority_job_factor: int | None = None
    grace_time: timedelta | None = None
    tres: str | None = None

    @field_validator("nodes", "qos", "tres")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None
