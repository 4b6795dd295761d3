"""What the scheduler weighs: a pending job's priority and its factors (``sprio``), the
fair-share tree (``sshare -l``), expected starts (``squeue --start``) and the QOS and
association limits with what is used of them now (``scontrol show assoc_mgr``).

Pure pydantic: :mod:`slurmtower.slurm.adapters.scheduling` parses Slurm's outputs into these.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "PRIORITY_FACTORS",
    "AssociationState",
    "Limit",
    "LimitsState",
    "PriorityFactors",
    "PriorityWeights",
    "QosState",
    "ShareRow",
    "StartEstimate",
]

#: The priority factors of priority/multifactor, as :class:`PriorityFactors` names them (sprio's
#: SITE, AGE, ASSOC, FAIRSHARE, JOBSIZE, PARTITION, QOS columns).
PRIORITY_FACTORS = ("site", "age", "association", "fairshare", "job_size", "partition", "qos")


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")


class PriorityFactors(_Model):
    """One pending job's priority in one partition and what each factor adds to it (``sprio``).

    A job that may run in several partitions has one record per partition. Held jobs
    (priority 0) have none: sprio leaves them out.
    """

    job_id: int
    partition: str | None = None
    user_name: str | None = None
    priority: int
    """The job's priority: the weighted factors summed, minus its nice value."""
    weighted: dict[str, int] = Field(default_factory=dict)
    """Factor (:data:`PRIORITY_FACTORS`) -> what it adds: its weight times its normalized value."""
    normalized: dict[str, float] = Field(default_factory=dict)
    """Factor -> its value between 0 and 1 before weighting."""
    nice: int = 0
    """The nice value, subtracted from the priority (negative: added)."""
    tres: dict[str, int] = Field(default_factory=dict)
    """What each TRES adds (``PriorityWeightTRES``): ``{"cpu": 250, "mem": 25}``."""
    tres_normalized: dict[str, float] = Field(default_factory=dict)


class PriorityWeights(_Model):
    """The configured weight of each factor (``sprio -w``): a factor's most it can add."""

    weights: dict[str, int] = Field(default_factory=dict)
    """Factor (:data:`PRIORITY_FACTORS`) -> weight."""
    tres: dict[str, int] = Field(default_factory=dict)
    """TRES -> weight (``PriorityWeightTRES``), names as sprio prints them (``CPU``, ``Mem``)."""


class ShareRow(_Model):
    """One line of the fair-share tree (``sshare -a -l``): an account's or a user's shares,
    usage and fair-share factor."""

    id: int | None = None
    """slurmdbd's association id."""
    account: str
    user: str | None = None
    """None for an account's own line."""
    partition: str | None = None
    depth: int = 0
    """How deep in the tree (root: 0; sshare indents each level by one space)."""
    parent: str | None = None
    """The account this line hangs under (an account's parent account; a user's account);
    None for root."""
    raw_shares: int | None = None
    """None: the root line, or ``parent`` (the shares of the parent account are used)."""
    shares_from_parent: bool = False
    """``RawShares=parent``."""
    normalized_shares: float | None = None
    raw_usage: int | None = None
    """TRES-seconds (billing) charged, decayed by PriorityDecayHalfLife."""
    normalized_usage: float | None = None
    effective_usage: float | None = None
    fairshare: float | None = None
    """The fair-share factor (0-1; user lines only, with the fair tree)."""
    level_fs: float | None = None
    """Shares over usage among siblings (over 1: under-served); None where sshare prints
    none or ``inf`` (no usage yet: see :attr:`level_fs_infinite`)."""
    level_fs_infinite: bool = False
    grp_tres_minutes: dict[str, int] = Field(default_factory=dict)
    """TRES-minute limits set on the association (``GrpTRESMins``)."""
    tres_usage_raw: dict[str, int] = Field(default_factory=dict)
    """TRES-minutes used by this association and its children (``GrpTRESRaw``)."""
    tres_run_minutes: dict[str, int] = Field(default_factory=dict)
    """TRES-minutes its running jobs still hold (``TRESRunMins``)."""


class StartEstimate(_Model):
    """When the scheduler expects a pending job to start (``squeue --start``) and on which nodes."""

    job_id: int
    start_time: datetime | None = None
    """None: the scheduler has no estimate (N/A)."""
    scheduled_nodes: str | None = None
    """The nodes the backfill scheduler plans it on (``SCHEDNODES``)."""
    required_nodes: str | None = None
    """The nodes the job asks for (``--nodelist``)."""
    excluded_nodes: str | None = None
    features: str | None = None
    """The features it asks for (``--constraint``)."""
    reason: str | None = None
    """The pending reason with its details (``ReqNodeNotAvail, UnavailableNodes:n4``)."""


class Limit(_Model):
    """One limit as slurmctld enforces it, and what is used of it now."""

    name: str
    """Slurm's name: ``GrpJobs``, ``GrpTRES``, ``MaxJobsPU``, ``MaxTRESPA``, ``MaxWallPJ`` ..."""
    tres: str | None = None
    """The TRES of a TRES limit (``cpu``, ``mem``, ``node``, ``gres/gpu`` ...)."""
    value: int | None = None
    """The limit; None: none set (Slurm's ``N``)."""
    used: float | None = None
    """What is used of it now; None where slurmctld keeps no use (per-job limits)."""

    @property
    def reached(self) -> bool:
        """A limit is set and the use is at or past it."""
        return self.value is not None and self.used is not None and self.used >= self.value


class QosState(_Model):
    """A QOS's limits and their use (``scontrol show assoc_mgr flags=qos``)."""

    name: str
    id: int | None = None
    priority: int | None = None
    limits: list[Limit] = Field(default_factory=list)
    """Limits on the QOS as a whole (``Grp*``) and on each job (``Max*PJ``, ``Max*PN``, ``Min*``)."""
    per_user: dict[str, list[Limit]] = Field(default_factory=dict)
    """User (uid: ``"1001"``, as 22.05-25.11 print it; 26.05 adds the name, left out here) ->
    the per-user limits (``Max*PU``) and their use."""
    per_account: dict[str, list[Limit]] = Field(default_factory=dict)
    """Account -> the per-account limits (``Max*PA``) and their use."""


class AssociationState(_Model):
    """An association's limits and their use (``scontrol show assoc_mgr flags=assoc``)."""

    id: int | None = None
    account: str
    user: str | None = None
    """None for the account's own association."""
    user_id: int | None = None
    partition: str | None = None
    parent_account: str | None = None
    """The account above an account's association; None for root's and for user associations
    (their account is :attr:`account`)."""
    limits: list[Limit] = Field(default_factory=list)


class LimitsState(_Model):
    """Every QOS and association of the cluster with its limits and their use, as slurmctld
    holds them at ``read_at``."""

    qos: dict[str, QosState] = Field(default_factory=dict)
    associations: list[AssociationState] = Field(default_factory=list)
    read_at: datetime | None = None

