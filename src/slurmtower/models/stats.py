"""slurmctld statistics (``sdiag``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ControllerStats", "RpcStat", "RpcUserStat"]


class RpcStat(BaseModel):
    """RPC counts of one message type."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    type_id: int | None = None
    count: int
    average_time_us: int | None = None
    total_time_us: int | None = None


class RpcUserStat(BaseModel):
    """RPC counts of one user."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    user: str
    user_id: int | None = None
    count: int
    average_time_us: int | None = None
    total_time_us: int | None = None


class ControllerStats(BaseModel):
    """One ``sdiag`` sample. Cycle times are in microseconds, as sdiag reports them."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    slurm_time: datetime | None = None
    """When the sample was taken (sdiag's ``req_time``)."""
    data_since: datetime | None = None
    server_thread_count: int | None = None
    agent_queue_size: int | None = None
    agent_count: int | None = None
    agent_thread_count: int | None = None
    dbd_agent_queue_size: int | None = None
    jobs_submitted: int | None = None
    jobs_started: int | None = None
    jobs_completed: int | None = None
    jobs_canceled: int | None = None
    jobs_failed: int | None = None
    jobs_pending: int | None = None
    jobs_running: int | None = None
    job_states_time: datetime | None = None
    schedule_cycle_last_us: int | None = None
    schedule_cycle_max_us: int | None = None
    schedule_cycle_mean_us: int | None = None
    schedule_cycle_count: int | None = None
    schedule_cycle_mean_depth: int | None = None
    schedule_cycles_per_minute: int | None = None
    schedule_queue_length: int | None = None
    backfill_active: bool | None = None
    backfilled_jobs: int | None = None
    backfilled_jobs_since_last_cycle: int | None = None
    backfilled_het_jobs: int | None = None
    backfill_cycle_count: int | None = None
    backfill_last_cycle_time: datetime | None = None
    backfill_cycle_last_us: int | None = None
    backfill_cycle_max_us: int | None = None
    backfill_cycle_mean_us: int | None = None
    backfill_last_depth: int | None = None
    backfill_last_depth_try: int | None = None
    backfill_queue_length: int | None = None
    backfill_table_size: int | None = None
    gettimeofday_latency_us: int | None = None
    rpcs_by_type: list[RpcStat] = Field(default_factory=list)
    rpcs_by_user: list[RpcUserStat] = Field(default_factory=list)
    raw: dict[str, Any] = Field(default_factory=dict)
    """Everything sdiag reported, in the source's own names."""
