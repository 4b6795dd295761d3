"""Models of slurmdbd's accounting records: finished and queued jobs, steps, users, associations.

Pure pydantic: the accounting reader (:mod:`slurmtower.accounting`) decodes slurmdbd's raw
columns (wait statuses, sentinels, TRES strings, Unix seconds) into these, so callers never
see ``4294967294`` or ``768``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "JOB_STATE_NAMES",
    "AccountingUser",
    "AdminLevel",
    "Association",
    "AssociationLimits",
    "HistoryJob",
    "HistoryPage",
    "HistoryStep",
]

JOB_STATE_NAMES: tuple[str, ...] = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)
"""Base job state names by code (``slurm.h``, ``state & JOB_STATE_BASE``), as sacct prints them."""

AdminLevel = Literal["none", "operator", "administrator"]


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")


class HistoryJob(_Model):
    """One row of ``<cluster>_job_table``: one submission of a job (a requeue adds a row)."""

    job_db_inx: int
    """slurmdbd's row id; unique, grows with every submission (the default sort key)."""
    job_id: int
    array_job_id: int | None = None
    """The array's job id for array tasks, else None."""
    array_task_id: int | None = None
    """Task index for array tasks; None for ordinary jobs (slurmdbd stores 4294967294)."""
    name: str
    user_id: int
    user_name: str | None = None
    """From the association (or the password database); None for a deleted user."""
    account: str | None = None
    partition: str
    association_id: int
    state: str
    """The state as sacct prints it: the base state's name (COMPLETED, FAILED, OUT_OF_MEMORY ...;
    UNKNOWN for codes Slurm does not define), or a flag's that replaces it (REQUEUED: a run
    that ended by a requeue)."""
    state_code: int
    """The base state's code (0-11): a REQUEUED run's is 0."""
    exit_code: int | None = None
    """Return code of the batch script as sacct's ExitCode shows it (``WEXITSTATUS``, less 128
    from 128 up: a shell whose child got SIGTERM, 143, is 15); None when slurmdbd stored no
    valid status."""
    exit_signal: int | None = None
    """Signal that ended it (``WTERMSIG``), 0 when none."""
    derived_exit_code: int | None = None
    """Highest exit code of the job's steps (sacct's DerivedExitCode)."""
    derived_exit_signal: int | None = None
    nodes: str | None = None
    """Allocated node set as Slurm folds it (``n[1-4]``); None before allocation."""
    node_count: int
    cpus: int | None = None
    memory_mib: int | None = None
    """From ``tres_alloc`` once allocated, else from ``tres_req``."""
    tres: dict[str, int] = Field(default_factory=dict)
    """All TRES of ``tres_alloc`` (or ``tres_req``) by name: cpu, mem, node, billing, gres/gpu ..."""
    time_limit: timedelta | None = None
    """None means unlimited (INFINITE) or not set."""
    submit_time: datetime | None = None
    eligible_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    work_dir: str | None = None
    submit_line: str | None = None
    sluid: str | None = None
    """Slurm's unique id of this run of the job (26.05+, e.g. ``sBC9M8RB4HBW00``): a requeued
    job keeps its job id, each run gets a new row and a new sluid. None before 26.05."""


class HistoryStep(_Model):
    """One row of ``<cluster>_step_table``."""

    job_db_inx: int
    """Which submission of the job (requeues share the job id) this step belongs to."""
    job_id: int
    step_id: int
    """-5 batch, -4 extern, -6 interactive, 0.. srun steps."""
    step_name: str
    """``batch``, ``extern`` or the srun step's name."""
    state: str
    state_code: int
    exit_code: int | None = None
    exit_signal: int | None = None
    nodes: str | None = None
    node_count: int
    task_count: int
    cpus: int | None = None
    memory_mib: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    user_cpu_time: timedelta
    system_cpu_time: timedelta
    max_rss_bytes: int | None = None
    """The largest resident set size of any of the step's tasks (sacct's MaxRSS, from the
    step's ``tres_usage_in_max``); None when jobacct_gather recorded none (no sample was
    taken: a step shorter than the gather frequency, or ``jobacct_gather/none``)."""


class HistoryPage(_Model):
    """One page of job history, newest first."""

    jobs: list[HistoryJob]
    next_cursor: str | None = None
    """Pass as ``cursor=`` for the next page; None when this page is the last one."""
    limit: int
    offset: int = 0


class AssociationLimits(_Model):
    """Limits set on an association; None (or an empty dict) when unset, i.e. inherited.

    Wall limits are minutes; TRES limits are ``{"cpu": 4, "mem": 1000, "gres/gpu": 1}`` with
    memory (``mem``, and ``bb``/``fs/disk``) in MiB and TRES-minute limits in unit-minutes.
    """

    max_jobs: int | None = None
    max_jobs_accrue: int | None = None
    max_submit_jobs: int | None = None
    max_wall_minutes: int | None = None
    max_tres_per_job: dict[str, int] = Field(default_factory=dict)
    max_tres_per_node: dict[str, int] = Field(default_factory=dict)
    max_tres_minutes_per_job: dict[str, int] = Field(default_factory=dict)
    grp_jobs: int | None = None
    grp_submit_jobs: int | None = None
    grp_wall_minutes: int | None = None
    grp_tres: dict[str, int] = Field(default_factory=dict)
    grp_tres_minutes: dict[str, int] = Field(default_factory=dict)


class Association(_Model):
    """A user (or account) association of the cluster: who may run under which account."""

    id: int | None = None
    """slurmdbd's ``id_assoc``; None where the source has none (``sacctmgr show assoc``'s
    default columns, 22.05's JSON)."""
    cluster: str | None = None
    user: str | None = None
    """None for an account's own association."""
    account: str
    partition: str | None = None
    parent_account: str | None = None
    """The parent account of an account's own association; None on user associations."""
    is_default: bool = False
    """The user's default account (False where the source does not say: sacctmgr's text)."""
    shares: int | None = None
    """Raw fair-share shares (``2147483647`` is ``parent``); None where the source does not
    say (the short associations listed under a user)."""
    priority: int | None = None
    qos: list[str] = Field(default_factory=list)
    """QOS names the association may use; empty when the source does not list them."""
    default_qos: str | None = None
    limits: AssociationLimits = Field(default_factory=AssociationLimits)


class AccountingUser(_Model):
    """A user known to slurmdbd, with the associations of this cluster."""

    name: str
    uid: int | None = None
    """From the password database of this host; None when the name does not resolve."""
    admin_level: AdminLevel = "none"
    default_account: str | None = None
    associations: list[Association] = Field(default_factory=list)
