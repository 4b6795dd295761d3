"""Jobs, job steps, job states and exit codes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = [
    "ExitCode",
    "Job",
    "JobState",
    "JobStep",
    "array_task_count",
    "array_task_ranges",
    "parse_job_state",
    "step_label",
]


class JobState(StrEnum):
    """Job states. The first twelve are base states (Slurm's ``JOB_STATE_BASE``); the rest
    are flags that Slurm sometimes shows *instead of* the base state (``COMPLETING``, ...).

    :attr:`Job.state` is the base state whenever Slurm reports one; the flags go to
    :attr:`Job.state_flags`.
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    COMPLETING = "COMPLETING"
    CONFIGURING = "CONFIGURING"
    REQUEUED = "REQUEUED"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    LAUNCH_FAILED = "LAUNCH_FAILED"
    UPDATE_DB = "UPDATE_DB"
    RECONFIG_FAIL = "RECONFIG_FAIL"
    POWER_UP_NODE = "POWER_UP_NODE"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    EXPEDITING = "EXPEDITING"
    UNKNOWN = "UNKNOWN"

    @property
    def is_base(self) -> bool:
        return self in _BASE_STATES

    @property
    def is_finished(self) -> bool:
        """The job has ended (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...)."""
        return self in _BASE_STATES and self not in (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)


_BASE_STATES = frozenset(list(JobState)[:12])
_SHORT_CODES = {
    "PD": JobState.PENDING,
    "R": JobState.RUNNING,
    "S": JobState.SUSPENDED,
    "CD": JobState.COMPLETED,
    "CA": JobState.CANCELLED,
    "F": JobState.FAILED,
    "TO": JobState.TIMEOUT,
    "NF": JobState.NODE_FAIL,
    "PR": JobState.PREEMPTED,
    "BF": JobState.BOOT_FAIL,
    "DL": JobState.DEADLINE,
    "OOM": JobState.OUT_OF_MEMORY,
    "CG": JobState.COMPLETING,
    "CF": JobState.CONFIGURING,
    "RQ": JobState.REQUEUED,
    "RF": JobState.REQUEUE_FED,
    "RH": JobState.REQUEUE_HOLD,
    "RS": JobState.RESIZING,
    "RV": JobState.REVOKED,
    "SI": JobState.SIGNALING,
    "SE": JobState.SPECIAL_EXIT,
    "SO": JobState.STAGE_OUT,
    "ST": JobState.STOPPED,
}
_STATE_SPLIT = re.compile(r"[+,\s]+")


def parse_job_state(state: str | Iterable[str]) -> tuple[JobState, frozenset[str]]:
    """Split a job state into its base state and flags.

    Accepts ``"FAILED"``, ``["RUNNING", "COMPLETING"]`` (24.11+ JSON), ``"CANCELLED by 0"``
    (sacct text) and squeue's short codes (``"PD"``, ``"R"``). Without a base state the first
    known word becomes the state (``"COMPLETING"``); an unknown word gives ``UNKNOWN``.
    """
    text = state if isinstance(state, str) else " ".join(str(s) for s in state)
    # sacct prints "CANCELLED by 1001": the uid is not part of the state.
    text = re.sub(r"\bby\s+\d+\b", "", text, flags=re.IGNORECASE)
    words = [w.upper().rstrip("+") for w in _STATE_SPLIT.split(text) if w]
    base: JobState | None = None
    others: list[str] = []
    for word in words:
        known = JobState.__members__.get(word) or _SHORT_CODES.get(word)
        if known is not None and known.is_base and base is None:
            base = known
        else:
            others.append(known.value if known is not None else word)
    if base is None:
        for word in others:
            if word in JobState.__members__:
                base = JobState(word)
                others.remove(word)
                break
    return base or JobState.UNKNOWN, frozenset(others)


class ExitCode(BaseModel):
    """How a job or step ended: its return code, or the signal that killed it.

    Exactly one of the two is set for an ended process: a killed process has no return code
    (Slurm's text ``0:15`` becomes ``signal=15``, ``return_code=None``), a returned one no
    signal (``3:0`` becomes ``return_code=3``, ``signal=None``).
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    return_code: int | None = None
    signal: int | None = None
    core_dumped: bool = False

    @classmethod
    def from_wait_status(cls, status: int) -> ExitCode:
        """From a raw ``wait(2)`` status as 22.05 JSON and the accounting DB store it (768 -> 3)."""
        termsig = status & 0x7F
        if termsig == 0:
            return cls(return_code=(status >> 8) & 0xFF)
        return cls(signal=termsig, core_dumped=bool(status & 0x80))

    @classmethod
    def from_text(cls, text: str) -> ExitCode:
        """From Slurm's ``rc:signal`` text (``"3:0"``, ``"0:15"``, ``"1"``).

        Raises:
            ValueError: ``text`` is not of that form.
        """
        match = re.fullmatch(r"\s*(-?\d+)(?::(\d+))?\s*", text)
        if match is None:
            raise ValueError(f"not an exit code: {text!r}")
        return_code, signal = int(match[1]), int(match[2] or 0)
        if signal:
            return cls(signal=signal)
        return cls(return_code=return_code)

    @property
    def succeeded(self) -> bool:
        return self.return_code == 0 and self.signal is None

    def __str__(self) -> str:
        return f"{self.return_code or 0}:{self.signal or 0}"


class Job(BaseModel):
    """A job from slurmctld (squeue, scontrol, REST ``/jobs``) or from accounting
    (``from_accounting=True``: sacct, REST ``/slurmdb/jobs``). A field the source does not
    report is ``None``."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    job_id: int
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_task_str: str | None = None
    """The pending tasks of an array's meta record, e.g. ``"1-5%2"``."""
    het_job_id: int | None = None
    name: str | None = None
    user_name: str | None = None
    user_id: int | None = None
    group_name: str | None = None
    group_id: int | None = None
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    state: JobState
    state_flags: frozenset[str] = frozenset()
    state_reason: str | None = None
    state_as_of: datetime | None = None
    """Set on a live queue row whose state was read after its other fields (23.11+'s state
    read, between two full reads): when that state was read. Its other fields are as of the
    answer's ``fetched_at``. ``None``: every field is of one read."""
    nodes: str | None = None
    """Allocated nodes, folded (``n[1-2]``); ``None`` while pending."""
    node_count: int | None = None
    cpus: int | None = None
    tasks: int | None = None
    memory_per_node_mib: int | None = None
    memory_per_cpu_mib: int | None = None
    memory_mib: int | None = None
    """Memory of the whole job (its TRES ``mem``): allocated once running, asked while pending.
    Set by the compact queue read, which does not tell per-CPU from per-node requests."""
    time_limit: timedelta | None = None
    """``None`` means no limit (UNLIMITED) or not known."""
    submit_time: datetime | None = None
    eligible_time: datetime | None = None
    start_time: datetime | None = None
    """Actual start, or slurmctld's expected start for a pending job."""
    end_time: datetime | None = None
    elapsed: timedelta | None = None
    """Run time so far (accounting and text sources)."""
    exit_code: ExitCode | None = None
    derived_exit_code: ExitCode | None = None
    batch_host: str | None = None
    work_dir: str | None = None
    command: str | None = None
    submit_line: str | None = None
    comment: str | None = None
    priority: int | None = None
    reservation: str | None = None
    dependency: str | None = None
    restarts: int | None = None
    accrue_time: datetime | None = None
    """When the job began to accrue age priority (``AccrueTime``)."""
    admin_comment: str | None = None
    alloc_node: str | None = None
    """The host the job was submitted from (``AllocNode``)."""
    alloc_sid: int | None = None
    """The session id of the submitting process (``AllocNode:Sid``; the text form only)."""
    array_max_tasks: int | None = None
    """How many tasks of the array may run at once (``%N``, ``ArrayTaskThrottle``); ``None``: no limit."""
    standard_output: str | None = None
    standard_error: str | None = None
    cluster: str | None = None
    sluid: str | None = None
    """Slurm's id of this run of the job (``sBC9M8RB4JCW00``, lexicographically sortable):
    a requeued job keeps its job id, each run gets a new sluid. From slurmctld's JSON since
    25.11 (v0.0.44 ``step_id.sluid``) and from accounting's since 26.05 (v0.0.45); ``None``
    before, and in the text forms."""
    original_sluid: str | None = None
    """Accounting's ``original_sluid`` (26.05+; Slurm calls it the "Original SLUID"): equal to
    :attr:`sluid` for every job of the recordings, none of which was requeued."""
    from_accounting: bool = False

    @field_validator(
        "array_task_str",
        "name",
        "user_name",
        "group_name",
        "account",
        "partition",
        "qos",
        "state_reason",
        "nodes",
        "batch_host",
        "work_dir",
        "command",
        "submit_line",
        "comment",
        "reservation",
        "dependency",
        "standard_output",
        "standard_error",
        "cluster",
        "sluid",
        "original_sluid",
        "admin_comment",
        "alloc_node",
    )
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None

    @property
    def job_count(self) -> int:
        """How many jobs this record is, as Slurm counts them: an array's pending tasks, which
        squeue folds into one record (``123_[1-1000%10]``: 1,000), else 1 (a job, an array
        task, a het-job component: squeue lists each on its own)."""
        return array_task_count(self.array_task_str) if self.array_task_id is None else 1

    @property
    def job_key(self) -> str:
        """``"2018"``, ``"2022_3"`` for an array task, ``"2023_[1-5%2]"`` for pending tasks."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.array_job_id is not None and self.array_task_str:
            return f"{self.array_job_id}_[{self.array_task_str}]"
        return str(self.job_id)


_TASK_PART = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


def array_task_ranges(text: str) -> tuple[range, ...]:
    """The task ids of an array's pending record as Slurm prints them (``1-1000%10``,
    ``1-199:3``, ``1,5,9``, with or without ``[]``), one range per part. A part that is not a
    task id or range (the ``...`` squeue ends a list with past ``SLURM_BITSTR_LEN``) is left out."""
    found: list[range] = []
    for part in text.strip().strip("[]").split("%")[0].split(","):
        m = _TASK_PART.fullmatch(part.strip())
        if m is not None:
            lo = int(m[1])
            found.append(range(lo, int(m[2] or lo) + 1, max(1, int(m[3] or 1))))
    return tuple(found)


def array_task_count(text: str | None) -> int:
    """How many jobs a queue record whose pending tasks Slurm prints as ``text`` is: those
    tasks (:func:`array_task_ranges`; at least one), or 1 for a record without (``None``).

    Counted from the text rather than by ``squeue -r``, whose 22.05 drops the last task of
    a stepped range (``1-19:3``: 6 lines for 7 tasks).
    """
    if not text:
        return 1
    return max(1, sum(len(r) for r in array_task_ranges(text)))


#: Slurm's special step ids (``SLURM_BATCH_SCRIPT``, ``SLURM_EXTERN_CONT``,
#: ``SLURM_INTERACTIVE_STEP`` as signed numbers) by the names squeue and sacct print.
STEP_NAMES = {-5: "batch", -4: "extern", -6: "interactive"}


def step_label(step_id: int) -> str:
    """A step id as Slurm prints it: ``"0"``, ``"batch"``, ``"extern"``, ``"interactive"``."""
    return STEP_NAMES.get(step_id, str(step_id))


class JobStep(BaseModel):
    """A job step (``scontrol show steps``, sacct steps)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    job_id: int
    step_id: str
    """``"0"``, ``"1"``, ``"batch"``, ``"extern"``, ``"interactive"``."""
    het_component: int | None = None
    name: str | None = None
    state: JobState
    state_flags: frozenset[str] = frozenset()
    nodes: str | None = None
    node_count: int | None = None
    tasks: int | None = None
    cpus: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    time_limit: timedelta | None = None
    partition: str | None = None
    user_name: str | None = None
    user_id: int | None = None
    exit_code: ExitCode | None = None
    from_accounting: bool = False

    @field_validator("name", "nodes", "partition", "user_name")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None

    @property
    def full_id(self) -> str:
        """``"2024.batch"``, ``"2024.0"``."""
        return f"{self.job_id}.{self.step_id}"
