"""Models of the usage reports built from slurmdbd's accounting database (issue 24).

Pure pydantic: :mod:`slurmtower.accounting.reports` reads the rollup, job, step and event
tables and answers with these. Amounts are TRES-seconds in Slurm's own unit for each TRES
(``cpu``: CPU-seconds, ``mem``: MiB-seconds, ``energy``: joules, ``gres/gpu``: GPU-seconds),
as ``sreport -t seconds`` prints them; ``*_hours`` are the same divided by 3600.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "GROUP_BY",
    "PERIODS",
    "ROLLUPS",
    "AvailabilityReport",
    "AvailabilityRow",
    "ClusterUtilization",
    "DownReason",
    "EfficiencyReport",
    "EfficiencyRow",
    "ReportPeriod",
    "ReportRollup",
    "SizeBucket",
    "UsageCell",
    "UsageGroup",
    "UsageGroupBy",
    "UsagePeriod",
    "UsageReport",
    "WaitReport",
    "WaitRow",
]

ReportPeriod = Literal["hour", "day", "week", "month", "range"]
PERIODS: tuple[str, ...] = ("hour", "day", "week", "month", "range")
"""How a report's range is cut: calendar hours, days, ISO weeks (from Monday), calendar months,
or the whole range as one period."""

UsageGroupBy = Literal["cluster", "account", "user", "account+user", "partition", "qos"]
GROUP_BY: tuple[str, ...] = ("cluster", "account", "user", "account+user", "partition", "qos")

ReportRollup = Literal["auto", "hour", "day", "month"]
ROLLUPS: tuple[str, ...] = ("auto", "hour", "day", "month")
"""Which rollup table a rollup report reads: ``auto`` picks it as sreport does."""


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")


class ClusterUtilization(_Model):
    """One TRES of the cluster over a period, as ``sreport cluster Utilization`` splits it."""

    count: int
    """The TRES's count on the cluster (CPUs, MiB ...), averaged over the rollup rows as sreport does."""
    allocated_seconds: int
    down_seconds: int
    planned_down_seconds: int
    """sreport's "PLND Down": down in a maintenance reservation."""
    idle_seconds: int
    reserved_seconds: int
    """sreport's "Reserved" (slurmdbd's ``plan_secs``): idle in a reservation, or held for a pending job."""
    over_seconds: int
    """sreport's "Over Comm": allocated beyond what was registered."""
    reported_seconds: int
    """allocated + down + planned down + idle + reserved, as sreport's "Reported"."""


class UsagePeriod(_Model):
    start: datetime
    end: datetime
    """Exclusive."""


class UsageCell(_Model):
    """One group's usage in one period."""

    start: datetime
    end: datetime
    tres_seconds: dict[str, int]
    tres_hours: dict[str, float]
    utilization: dict[str, ClusterUtilization] | None = None
    """``group_by=cluster`` only: the split of each TRES (``tres_seconds`` holds the allocated part)."""


class UsageGroup(_Model):
    """One row of a usage report: a cluster, account, user, account and user, partition or QOS."""

    name: str
    """``physics``, ``alice``, ``physics/alice``, ``debug``, ``normal`` or the cluster's name."""
    account: str | None = None
    user: str | None = None
    partition: str | None = None
    qos: str | None = None
    cells: list[UsageCell]
    """One per period of the report, in order (periods without usage hold zeros)."""
    total_seconds: dict[str, int]
    total_hours: dict[str, float]
    share: dict[str, float]
    """This group's part of the report's total per TRES, 0-1 (``group_by=cluster``: allocated over reported)."""
    utilization: dict[str, ClusterUtilization] | None = None
    """``group_by=cluster`` only: the whole range's split per TRES."""


class UsageReport(_Model):
    """Who used what, per group and period: ``GET /reports/usage``."""

    cluster: str
    source: str
    """The table that served it: ``usage_hour``/``_day``/``_month`` (cluster rollups),
    ``assoc_usage_hour``/``_day``/``_month`` (association rollups) or ``job_table``."""
    start: datetime
    end: datetime
    period: ReportPeriod
    group_by: UsageGroupBy
    tres: list[str]
    periods: list[UsagePeriod]
    groups: list[UsageGroup]
    """The largest groups first (by the first TRES asked), at most ``top``."""
    omitted_groups: int = 0
    """Groups left out by ``top`` (the totals and shares still count them)."""
    total_seconds: dict[str, int]
    total_hours: dict[str, float]
    notes: list[str] = []
    """What the figures include and leave out (sub-accounts, hidden partitions, running jobs)."""


class EfficiencyRow(_Model):
    """CPU and memory efficiency of one user, account or account and user, as seff counts them."""

    name: str
    account: str | None = None
    user: str | None = None
    jobs: int
    cpu_allocated_seconds: int
    """Sum over the jobs of allocated CPUs x elapsed seconds (seff's core-walltime)."""
    cpu_used_seconds: float
    """Sum over the jobs' steps of user + system CPU time (seff's "CPU Utilized")."""
    cpu_efficiency: float | None
    """used / allocated, 0-1 (above 1 for jobs that ran more threads than CPUs); None: nothing allocated."""
    memory_requested_bytes: int
    """Sum over the jobs of the memory asked for (per node x nodes, or per CPU x CPUs)."""
    memory_used_bytes: int
    """Sum over the jobs of seff's "Memory Utilized": the largest step's max RSS x its tasks."""
    memory_efficiency: float | None
    """used / requested, 0-1; None when no memory was requested."""


class EfficiencyReport(_Model):
    cluster: str
    source: str
    """``job_table+step_table``."""
    start: datetime
    end: datetime
    group_by: Literal["user", "account", "account+user"]
    rows: list[EfficiencyRow]
    """The largest CPU allocations first, at most ``top``."""
    omitted_rows: int = 0
    total: EfficiencyRow
    notes: list[str] = []


class SizeBucket(_Model):
    """Jobs of ``min_cpus``-``max_cpus`` CPUs, as one column of ``sreport job SizesByAccount``."""

    min_cpus: int
    max_cpus: int | None
    """Inclusive; None: no upper bound."""
    jobs: int
    cpu_seconds: int
    """Their allocated CPU-seconds within the range."""


class WaitRow(_Model):
    """Jobs of one partition and account: how long they waited and how big they were."""

    partition: str
    account: str
    jobs: int
    """Jobs that ran in the range (the size buckets count them)."""
    started: int
    """Jobs that started in the range (the wait figures are theirs)."""
    wait_mean_seconds: float | None
    wait_median_seconds: float | None
    wait_p90_seconds: float | None
    wait_max_seconds: int | None
    sizes: list[SizeBucket]


class WaitReport(_Model):
    cluster: str
    source: str
    start: datetime
    end: datetime
    rows: list[WaitRow]
    """By partition, then account."""
    size_buckets: list[int] = []
    """The lower bounds (CPUs) of the size buckets after the first (0): each row's ``sizes``,
    and the CSV's ``jobs_<min>-<max>_cpus`` columns, even when no row is there."""
    notes: list[str] = []


class DownReason(_Model):
    reason: str
    """As Slurm recorded it (``Not responding``, ``disk swap [slurmtower:root@cli]`` ...)."""
    node_seconds: int
    nodes: list[str]


class AvailabilityRow(_Model):
    """Down and drained time of one partition's nodes (or of one node: ``partition`` None)."""

    partition: str | None
    node: str | None
    nodes: int
    total_node_seconds: int
    """nodes x the range's length."""
    down_seconds: int
    """Node-seconds DOWN (not drained): failed, not responding ..."""
    drained_seconds: int
    """Node-seconds DRAIN (draining or drained, and down while drained)."""
    available: float
    """1 - (down + drained) / total."""
    reasons: list[DownReason]
    """The reasons that cost most first."""
    recorded_transitions: int | None = None
    """A node's state changes in the range that slurmtower's sensor recorded in its own event
    store (``slurm.node.state`` events), beside slurmdbd's view; None where it was not asked."""


class AvailabilityReport(_Model):
    cluster: str
    source: str
    """``event_table``."""
    start: datetime
    end: datetime
    partitions: list[AvailabilityRow]
    nodes: list[AvailabilityRow]
    """Every node with down or drained time, the most first."""
    reasons: list[DownReason]
    """The whole cluster's, the most costly first."""
    notes: list[str] = []
