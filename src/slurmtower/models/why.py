"""Why a job waits, as slurmtower answers it (``slurm.job.why``, ``GET /jobs/{id}/why``,
``slurmtower why``, the job page's panel): the reason code, one sentence in plain words, the
facts that block the job, each typed and linked to the page that shows it, and what the
job's owner can change.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AheadJob",
    "BeginTimeFact",
    "DependencyFact",
    "Fact",
    "HoldFact",
    "JobWhy",
    "LimitFact",
    "NodeFact",
    "NoteFact",
    "PartitionFact",
    "PriorityFact",
    "RankFact",
    "ReservationFact",
    "ResourcesFact",
    "StartFact",
]


class _Fact(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    text: str
    """The fact in plain words."""
    link: str | None = None
    """The dashboard page that shows the thing (``/ui/jobs/6``, ``/ui/nodes/n4`` ...)."""


class DependencyFact(_Fact):
    """A job this one depends on, the condition, and where that job is."""

    kind: Literal["dependency"] = "dependency"
    job_id: int | None = None
    """None for ``singleton`` (the user's other jobs of that name)."""
    condition: str
    """``afterok``, ``afterany``, ``afternotok``, ``after``, ``aftercorr``, ``singleton`` ..."""
    state: str | None = None
    """That job's state now (slurmctld's, else accounting's); None when neither knows it."""
    satisfied: bool | None = None
    """Slurm's own word on this condition (``unfulfilled``, ``fulfilled``, ``failed``)."""


class BeginTimeFact(_Fact):
    kind: Literal["begin_time"] = "begin_time"
    begin_time: datetime | None
    """When the job may start, at the earliest."""
    wait: timedelta | None = None
    """How long from the answer's time."""


class HoldFact(_Fact):
    kind: Literal["hold"] = "hold"
    held_by: Literal["user", "admin", "requeue"]
    """``user``: its owner (or ``sbatch -H``); ``admin``: an operator or admin;
    ``requeue``: requeued held (too many requeues)."""
    release_by: list[str]
    """Who may release it: ``owner``, ``operator``, ``admin``."""


class NodeFact(_Fact):
    kind: Literal["node"] = "node"
    node: str
    state: str | None = None
    """``IDLE+DRAIN``, ``DOWN+NOT_RESPONDING`` ... as scontrol prints it; None: not known."""
    reason: str | None = None
    set_by: str | None = None
    """The Unix user Slurm says set the reason."""
    since: datetime | None = None
    holders: list[str] = Field(default_factory=list)
    """Who holds it out of service: slurmtower's owner tags (``slurmtower:alice@cli``), or
    ``user:<name>`` for a reason set outside slurmtower."""


class ReservationFact(_Fact):
    kind: Literal["reservation"] = "reservation"
    name: str
    exists: bool = True
    active: bool | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    nodes: str | None = None
    users: list[str] = Field(default_factory=list)
    accounts: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)


class PartitionFact(_Fact):
    kind: Literal["partition"] = "partition"
    partition: str
    state: str | None = None
    max_time: timedelta | None = None
    """None: no limit (or the partition is not known)."""
    max_nodes: int | None = None
    min_nodes: int | None = None
    asked_time: timedelta | None = None
    asked_nodes: int | None = None
    allow_accounts: list[str] | None = None
    allow_qos: list[str] | None = None


class LimitFact(_Fact):
    """A QOS or association limit: its value, what is used of it now, what the job asks."""

    kind: Literal["limit"] = "limit"
    scope: Literal["qos", "association"]
    owner: str
    """The QOS's name, or the association's (``account`` or ``account/user``)."""
    per: Literal["all", "user", "account", "job", "node"]
    name: str
    """Slurm's name of the limit (``MaxJobsPU``, ``GrpJobs``, ``GrpTRES``, ``MaxWallPJ`` ...)."""
    tres: str | None = None
    value: int | None = None
    """The limit (minutes for wall limits; MiB for memory); None: not known."""
    used: float | None = None
    """What is used of it now (the user's, the account's, the QOS's ...); None for per-job limits."""
    asked: float | None = None
    """What the job asks for, against a per-job limit."""
    reached: bool | None = None


class ResourcesFact(_Fact):
    """What the job asks for against what its partition has free now."""

    kind: Literal["resources"] = "resources"
    partition: str
    asked_cpus: int | None = None
    asked_nodes: int | None = None
    asked_memory_mib: int | None = None
    asked_time: timedelta | None = None
    total_cpus: int | None = None
    idle_cpus: int | None = None
    total_nodes: int | None = None
    idle_nodes: int | None = None
    """Nodes with every CPU free and in service."""
    out_nodes: int | None = None
    """Nodes down, drained or not responding."""


class PriorityFact(_Fact):
    """The job's priority and what each factor adds (``sprio``), with the weights."""

    kind: Literal["priority"] = "priority"
    priority: int | None
    weighted: dict[str, int] = Field(default_factory=dict)
    normalized: dict[str, float] = Field(default_factory=dict)
    weights: dict[str, int] = Field(default_factory=dict)
    nice: int = 0
    tres: dict[str, int] = Field(default_factory=dict)


class AheadJob(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    job_id: int
    user_name: str | None = None
    priority: int | None = None
    reason: str | None = None


class RankFact(_Fact):
    """Where the job stands among the jobs waiting for resources in its partition."""

    kind: Literal["rank"] = "rank"
    partition: str
    rank: int
    """1: next in line."""
    waiting: int
    """Jobs waiting for resources there (reason ``Priority``, ``Resources`` or ``None``)."""
    ahead: int
    ahead_jobs: list[AheadJob] = Field(default_factory=list)
    """The first jobs ahead (at most 10), highest priority first, as the caller may see them
    (others' jobs only where the visibility policy shows them)."""
    unnamed_ahead: int = 0
    """The jobs ahead not in :attr:`ahead_jobs`: other users' the caller may not see named, and
    those past the first ten."""


class StartFact(_Fact):
    kind: Literal["start"] = "start"
    start_time: datetime | None
    """The scheduler's expected start (``squeue --start``); None: it gives none."""
    scheduled_nodes: str | None = None


class NoteFact(_Fact):
    """Something the answer could not tell (a source that did not answer) or a general remark."""

    kind: Literal["note"] = "note"


Fact = Annotated[
    DependencyFact | BeginTimeFact | HoldFact | NodeFact | ReservationFact | PartitionFact | LimitFact
    | ResourcesFact | PriorityFact | RankFact | StartFact | NoteFact,
    Field(discriminator="kind"),
]


class JobWhy(BaseModel):
    """Why one job (one queue record: a job, an array task, an array's pending tasks) waits."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    job_id: int
    job_key: str
    """``123``, ``123_4``, ``123_[5-9]``: the record as squeue names it."""
    user_name: str | None = None
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    state: str
    pending: bool
    reason: str | None
    """The reason code as Slurm gives it (``ReqNodeNotAvail``)."""
    reason_detail: str | None = None
    """What Slurm adds to it (``UnavailableNodes:n4``)."""
    known: bool
    """The code is one slurmtower knows; an unknown one is shown as itself."""
    category: str
    """What kind of thing blocks it (:data:`slurmtower.models.reasons.CATEGORIES`)."""
    summary: str
    """One sentence in plain words."""
    facts: list[Fact] = Field(default_factory=list)
    owner_can: list[str] = Field(default_factory=list)
    """What the job's owner can change to start it sooner."""
    read_at: datetime
