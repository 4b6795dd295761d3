"""Every reason Slurm gives for a job that waits (squeue's ``NODELIST(REASON)``, the job's
``Reason=``), in plain words, with what kind of thing blocks the job and, for a limit, which
limit: :data:`REASONS` and :func:`reason_info`.

The codes are those of Slurm's ``job_state_reason_string()`` on 23.11 to 26.05 (22.05's are
a subset); tests/data/slurm-reason-codes.txt lists them with the releases that have each, and
a test checks every one is here. A code not here (a newer release) is described as itself
(:func:`reason_info`: category ``unknown``), never an error.

Sentences may name ``{qos}``, ``{account}``, ``{partition}`` and ``{user}``; :meth:`ReasonInfo.sentence`
fills them from what is known of the job (or says "its QOS" ...).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["CATEGORIES", "REASONS", "LimitOf", "ReasonInfo", "reason_info", "split_reason"]

Category = Literal[
    "waiting", "priority", "resources", "held", "dependency", "begin_time", "nodes", "reservation", "partition",
    "limit", "licenses", "burst_buffer", "account", "qos", "array", "scheduler", "power", "ended", "unknown",
]
#: Every category, with what it means.
CATEGORIES: dict[str, str] = {
    "waiting": "not yet looked at by the scheduler",
    "priority": "other jobs are ahead of it",
    "resources": "the resources it asks for are in use",
    "held": "held: it starts only once released",
    "dependency": "waits for other jobs",
    "begin_time": "waits for its begin time",
    "nodes": "asks for nodes that are not available",
    "reservation": "waits for its reservation",
    "partition": "its partition does not let it start (state or limits)",
    "limit": "a QOS or association limit",
    "licenses": "waits for licenses",
    "burst_buffer": "waits for its burst buffer",
    "account": "its account does not let it run",
    "qos": "its QOS does not let it run",
    "array": "its array's throttle",
    "scheduler": "the scheduler's own state",
    "power": "power management",
    "ended": "why it ended (or was requeued)",
    "unknown": "a reason this slurmtower does not know (a newer Slurm release)",
}

LimitKey = str
"""The name ``scontrol show assoc_mgr`` gives a limit: ``GrpJobs``, ``GrpTRES``, ``MaxJobsPU`` ..."""


@dataclass(frozen=True)
class LimitOf:
    """Which limit a limit reason is about: where it is set, its ``assoc_mgr`` name, its TRES."""

    scope: Literal["qos", "association"]
    key: LimitKey
    tres: str | None = None
    """``cpu``, ``mem``, ``node``, ``energy``, ``billing``; ``gres``, ``license`` and ``bb``
    name a family (``gres/gpu``); None for counts of jobs and wall time."""
    per: Literal["all", "user", "account", "job", "node"] = "all"
    """Whose use is counted: the QOS's or association's jobs together (``all``), the user's,
    the account's, or what one job (or one node of it) asks for."""


@dataclass(frozen=True)
class ReasonInfo:
    """One reason code: what kind of thing blocks the job, a sentence in plain words, and
    for a limit reason the limit."""

    code: str
    category: Category
    text: str
    limit: LimitOf | None = None
    known: bool = True

    def sentence(self, values: Mapping[str, str | None] | None = None) -> str:
        """:attr:`text` with ``{qos}``, ``{account}``, ``{partition}``, ``{user}`` filled
        from ``values`` (a missing one reads "its QOS", "its account" ...)."""
        given = {k: v for k, v in (values or {}).items() if v}
        filled = {"qos": f"QOS {given['qos']}" if "qos" in given else "its QOS",
                  "account": f"account {given['account']}" if "account" in given else "its account",
                  "partition": f"partition {given['partition']}" if "partition" in given else "its partition",
                  "user": f"user {given['user']}" if "user" in given else "its user"}
        text = string.Formatter().vformat(self.text, (), filled)
        return text[:1].upper() + text[1:]


# -- the limit reasons, read from their names -------------------------------------------------

_TRES_WORDS = {"bb": "burst buffer", "billing": "billing units", "cpu": "CPUs", "energy": "energy",
               "gres": "generic resources (GRES)", "license": "licenses", "mem": "memory", "node": "nodes",
               None: "of an unknown resource"}
#: A TRES as the first half of "<x>-minutes".
_MINUTE_WORDS = {"bb": "burst-buffer", "billing": "billing", "cpu": "CPU", "energy": "energy", "gres": "GRES",
                 "license": "license", "mem": "memory", "node": "node", None: "resource"}
_TRES_OF = {"BB": "bb", "Billing": "billing", "CPU": "cpu", "Cpu": "cpu", "Energy": "energy", "GRES": "gres",
            "License": "license", "Mem": "mem", "Memory": "mem", "Node": "node", "Unknown": None}
_TRES = "BB|Billing|CPU|Cpu|Energy|GRES|License|Memory|Mem|Node|Unknown"
_GRP = re.compile(rf"^(QOS|Assoc)Grp(?P<what>{_TRES}|Jobs|SubmitJobs|Wall)(?P<span>Minutes|RunMinutes)?(?:Limit)?$")
_MAX = re.compile(rf"^(QOS|Assoc)Max(?P<what>{_TRES}|Jobs|SubmitJob|WallDuration)(?P<span>Minutes)?"
                  r"(?:Per(?P<per>Job|Node|User))?(?:Limit)?$")
_ACCOUNT = re.compile(rf"^Max(?P<what>{_TRES}|Jobs|SubmitJobs)(?P<span>RunMins)?Per(?P<per>Account|User)$")
_MIN = re.compile(rf"^QOSMin(?P<what>{_TRES})(?:NotSatisfied)?$")


Scope = Literal["qos", "association"]


def _subject(scope: Scope) -> str:
    return "{qos}" if scope == "qos" else "{account} (or an account above it)"


def _limit_reason(code: str) -> ReasonInfo | None:
    """The :class:`ReasonInfo` of a limit reason, from its name; None for other codes."""
    if m := _GRP.match(code):
        scope: Scope = "qos" if m[1] == "QOS" else "association"
        who, what, span = _subject(scope), m["what"], m["span"]
        if what == "Jobs":
            return ReasonInfo(code, "limit", f"{who} already runs as many jobs at once as it allows (GrpJobs).",
                              LimitOf(scope, "GrpJobs"))
        if what == "SubmitJobs":
            return ReasonInfo(code, "limit", f"{who} already has as many jobs queued and running as it allows "
                                             "(GrpSubmitJobs).", LimitOf(scope, "GrpSubmitJobs"))
        if what == "Wall":
            return ReasonInfo(code, "limit", f"The running jobs of {who} have used all the wall time it allows "
                                             "(GrpWall).", LimitOf(scope, "GrpWall"))
        tres = _TRES_OF[what]
        word = _TRES_WORDS[tres]
        minutes = _MINUTE_WORDS[tres]
        if span == "Minutes":
            return ReasonInfo(code, "limit", f"{who} has used all the {minutes}-minutes it is allowed (GrpTRESMins): "
                                             "what its past and running jobs used counts.",
                              LimitOf(scope, "GrpTRESMins", tres))
        if span == "RunMinutes":
            return ReasonInfo(code, "limit", f"The running jobs of {who} already hold the most {minutes}-minutes it "
                                             "allows at once (GrpTRESRunMins): more start as they end.",
                              LimitOf(scope, "GrpTRESRunMins", tres))
        return ReasonInfo(code, "limit", f"The jobs of {who} together already use the most {word} it allows at once "
                                         "(GrpTRES).", LimitOf(scope, "GrpTRES", tres))
    if m := _MAX.match(code):
        scope = "qos" if m[1] == "QOS" else "association"
        who, what, span, per = _subject(scope), m["what"], m["span"], m["per"]
        if what == "Jobs":
            if per == "User":
                return ReasonInfo(code, "limit", f"{{user}} already runs as many jobs in {who} as it allows per user "
                                                 "(MaxJobsPerUser).", LimitOf(scope, "MaxJobsPU", per="user"))
            return ReasonInfo(code, "limit", f"{{user}} already runs as many jobs under {who} as the association "
                                             "allows (MaxJobs).", LimitOf(scope, "MaxJobs", per="user"))
        if what == "SubmitJob":
            if per == "User":
                return ReasonInfo(code, "limit", f"{{user}} already has as many jobs queued and running in {who} as "
                                                 "it allows per user (MaxSubmitJobsPerUser).",
                                  LimitOf(scope, "MaxSubmitJobsPU", per="user"))
            return ReasonInfo(code, "limit", f"{{user}} already has as many jobs queued and running under {who} as "
                                             "the association allows (MaxSubmitJobs).",
                              LimitOf(scope, "MaxSubmitJobs", per="user"))
        if what == "WallDuration":
            return ReasonInfo(code, "limit", f"The job's time limit is longer than {who} allows per job (MaxWall).",
                              LimitOf(scope, "MaxWallPJ", per="job"))
        tres = _TRES_OF[what]
        word = _TRES_WORDS[tres]
        if span == "Minutes":
            return ReasonInfo(code, "limit", f"The job asks for more {_MINUTE_WORDS[tres]}-minutes (what it asks "
                                             f"for times its time limit) than {who} allows per job "
                                             "(MaxTRESMinsPerJob).",
                              LimitOf(scope, "MaxTRESMinsPJ", tres, "job"))
        if per == "Node":
            return ReasonInfo(code, "limit", f"The job asks for more {word} on a node than {who} allows per node "
                                             "(MaxTRESPerNode).", LimitOf(scope, "MaxTRESPN", tres, "node"))
        if per == "User":
            return ReasonInfo(code, "limit", f"The running jobs of {{user}} in {who} already use the most {word} it "
                                             "allows per user (MaxTRESPerUser).",
                              LimitOf(scope, "MaxTRESPU", tres, "user"))
        return ReasonInfo(code, "limit", f"The job asks for more {word} than {who} allows per job (MaxTRESPerJob).",
                          LimitOf(scope, "MaxTRESPJ", tres, "job"))
    if m := _ACCOUNT.match(code):
        what, span, per = m["what"], m["span"], m["per"]
        whose = "the account" if per == "Account" else "{user}"
        suffix = "PA" if per == "Account" else "PU"
        per_word = "per account" if per == "Account" else "per user"
        scoped: Literal["account", "user"] = "account" if per == "Account" else "user"
        if what == "Jobs":
            return ReasonInfo(code, "limit", "{account} already runs as many jobs in {qos} as it allows per "
                                             "account (MaxJobsPerAccount).", LimitOf("qos", "MaxJobsPA", per=scoped))
        if what == "SubmitJobs":
            return ReasonInfo(code, "limit", "{account} already has as many jobs queued and running in {qos} as "
                                             "it allows per account (MaxSubmitJobsPerAccount).",
                              LimitOf("qos", "MaxSubmitJobsPA", per=scoped))
        tres = _TRES_OF[what]
        word = _TRES_WORDS[tres]
        if span == "RunMins":
            return ReasonInfo(code, "limit", f"The running jobs of {whose} in {{qos}} already hold the most "
                                             f"{_MINUTE_WORDS[tres]}-minutes it allows {per_word} "
                                             f"(MaxTRESRunMins{suffix}).",
                              LimitOf("qos", f"MaxTRESRunMins{suffix}", tres, scoped))
        return ReasonInfo(code, "limit", f"The running jobs of {whose} in {{qos}} already use the most {word} it "
                                         f"allows {per_word} (MaxTRESPerAccount).",
                          LimitOf("qos", f"MaxTRES{suffix}", tres, scoped))
    if m := _MIN.match(code):
        tres = _TRES_OF[m["what"]]
        return ReasonInfo(code, "limit", f"The job asks for less {_TRES_WORDS[tres]} than {{qos}} requires per job "
                                         "(MinTRESPerJob).", LimitOf("qos", "MinTRESPJ", tres, "job"))
    return None


#: The limit reasons (QOS and association limits, as Slurm names them).
LIMIT_CODES = (
    "AssocGrpBB", "AssocGrpBBMinutes", "AssocGrpBBRunMinutes", "AssocGrpBilling", "AssocGrpBillingMinutes",
    "AssocGrpBillingRunMinutes", "AssocGrpCPUMinutesLimit", "AssocGrpCPURunMinutesLimit", "AssocGrpCpuLimit",
    "AssocGrpEnergy", "AssocGrpEnergyMinutes", "AssocGrpEnergyRunMinutes", "AssocGrpGRES", "AssocGrpGRESMinutes",
    "AssocGrpGRESRunMinutes", "AssocGrpJobsLimit", "AssocGrpLicense", "AssocGrpLicenseMinutes",
    "AssocGrpLicenseRunMinutes", "AssocGrpMemLimit", "AssocGrpMemMinutes", "AssocGrpMemRunMinutes",
    "AssocGrpNodeLimit", "AssocGrpNodeMinutes", "AssocGrpNodeRunMinutes", "AssocGrpSubmitJobsLimit",
    "AssocGrpUnknown", "AssocGrpUnknownMinutes", "AssocGrpUnknownRunMinutes", "AssocGrpWallLimit",
    "AssocMaxBBMinutesPerJob", "AssocMaxBBPerJob", "AssocMaxBBPerNode", "AssocMaxBillingMinutesPerJob",
    "AssocMaxBillingPerJob", "AssocMaxBillingPerNode", "AssocMaxCpuMinutesPerJobLimit", "AssocMaxCpuPerJobLimit",
    "AssocMaxCpuPerNode", "AssocMaxEnergyMinutesPerJob", "AssocMaxEnergyPerJob", "AssocMaxEnergyPerNode",
    "AssocMaxGRESMinutesPerJob", "AssocMaxGRESPerJob", "AssocMaxGRESPerNode", "AssocMaxJobsLimit",
    "AssocMaxLicenseMinutesPerJob", "AssocMaxLicensePerJob", "AssocMaxMemMinutesPerJob", "AssocMaxMemPerJob",
    "AssocMaxMemPerNode", "AssocMaxNodeMinutesPerJob", "AssocMaxNodePerJobLimit", "AssocMaxSubmitJobLimit",
    "AssocMaxUnknownMinutesPerJob", "AssocMaxUnknownPerJob", "AssocMaxUnknownPerNode",
    "AssocMaxWallDurationPerJobLimit",
    "MaxBBPerAccount", "MaxBBRunMinsPerAccount", "MaxBBRunMinsPerUser", "MaxBillingPerAccount",
    "MaxBillingRunMinsPerAccount", "MaxBillingRunMinsPerUser", "MaxCpuPerAccount", "MaxCpuRunMinsPerAccount",
    "MaxCpuRunMinsPerUser", "MaxEnergyPerAccount", "MaxEnergyRunMinsPerAccount", "MaxEnergyRunMinsPerUser",
    "MaxGRESPerAccount", "MaxGRESRunMinsPerAccount", "MaxGRESRunMinsPerUser", "MaxJobsPerAccount",
    "MaxLicensePerAccount", "MaxLicenseRunMinsPerAccount", "MaxLicenseRunMinsPerUser", "MaxMemoryPerAccount",
    "MaxMemoryRunMinsPerAccount", "MaxMemoryRunMinsPerUser", "MaxNodePerAccount", "MaxNodeRunMinsPerAccount",
    "MaxNodeRunMinsPerUser", "MaxSubmitJobsPerAccount", "MaxUnknownPerAccount", "MaxUnknownRunMinsPerAccount",
    "MaxUnknownRunMinsPerUser",
    "QOSGrpBB", "QOSGrpBBMinutes", "QOSGrpBBRunMinutes", "QOSGrpBilling", "QOSGrpBillingMinutes",
    "QOSGrpBillingRunMinutes", "QOSGrpCPUMinutesLimit", "QOSGrpCPURunMinutesLimit", "QOSGrpCpuLimit",
    "QOSGrpEnergy", "QOSGrpEnergyMinutes", "QOSGrpEnergyRunMinutes", "QOSGrpGRES", "QOSGrpGRESMinutes",
    "QOSGrpGRESRunMinutes", "QOSGrpJobsLimit", "QOSGrpLicense", "QOSGrpLicenseMinutes", "QOSGrpLicenseRunMinutes",
    "QOSGrpMemLimit", "QOSGrpMemoryMinutes", "QOSGrpMemoryRunMinutes", "QOSGrpNodeLimit", "QOSGrpNodeMinutes",
    "QOSGrpNodeRunMinutes", "QOSGrpSubmitJobsLimit", "QOSGrpUnknown", "QOSGrpUnknownMinutes",
    "QOSGrpUnknownRunMinutes", "QOSGrpWallLimit",
    "QOSMaxBBPerJob", "QOSMaxBBPerNode", "QOSMaxBBPerUser", "QOSMaxBillingMinutesPerJob", "QOSMaxBillingPerJob",
    "QOSMaxBillingPerNode", "QOSMaxBillingPerUser", "QOSMaxCpuMinutesPerJobLimit", "QOSMaxCpuPerJobLimit",
    "QOSMaxCpuPerNode", "QOSMaxCpuPerUserLimit", "QOSMaxEnergyMinutesPerJob", "QOSMaxEnergyPerJob",
    "QOSMaxEnergyPerNode", "QOSMaxEnergyPerUser", "QOSMaxGRESMinutesPerJob", "QOSMaxGRESPerJob",
    "QOSMaxGRESPerNode", "QOSMaxGRESPerUser", "QOSMaxJobsPerUserLimit", "QOSMaxLicenseMinutesPerJob",
    "QOSMaxLicensePerJob", "QOSMaxLicensePerUser", "QOSMaxMemoryMinutesPerJob", "QOSMaxMemoryPerJob",
    "QOSMaxMemoryPerNode", "QOSMaxMemoryPerUser", "QOSMaxNodeMinutesPerJob", "QOSMaxNodePerJobLimit",
    "QOSMaxNodePerUserLimit", "QOSMaxSubmitJobPerUserLimit", "QOSMaxUnknownMinutesPerJob", "QOSMaxUnknownPerJob",
    "QOSMaxUnknownPerNode", "QOSMaxUnknownPerUser", "QOSMaxWallDurationPerJobLimit",
    "QOSMinBB", "QOSMinBilling", "QOSMinCpuNotSatisfied", "QOSMinEnergy", "QOSMinGRES", "QOSMinLicense",
    "QOSMinMemory", "QOSMinNode", "QOSMinUnknown",
)

_HELD_USER = "The job is held by its owner (or was submitted held): its owner, an operator or an admin can release it."

#: The other reasons, each in plain words.
_OTHERS: tuple[tuple[str, Category, str], ...] = (
    ("None", "waiting", "The scheduler has not looked at the job since it was submitted or changed: it will at its "
                        "next cycle."),
    ("Priority", "priority", "Jobs of a higher priority wait ahead of it in {partition} (or its reservation): they "
                             "get the resources first."),
    ("Resources", "resources", "The job is next in line in {partition}, but the resources it asks for are in use by "
                               "other jobs."),
    ("Dependency", "dependency", "The job waits for the jobs it depends on to reach the state it asked for."),
    ("DependencyNeverSatisfied", "dependency", "A job it depends on ended in a way the dependency excludes: it will "
                                               "never start unless its dependency is changed or it is cancelled."),
    ("BeginTime", "begin_time", "The job asked not to start before a time that has not come yet."),
    ("JobHeldAdmin", "held", "An operator or an admin held the job: only an operator or an admin can release it."),
    ("JobHeldUser", "held", _HELD_USER),
    ("JobHoldMaxRequeue", "held", "The job was requeued more often than the cluster allows (MaxBatchRequeue) and is "
                                  "held: an operator or an admin can release it."),
    ("ReqNodeNotAvail", "nodes", "The job asks for nodes that are not available now (down, drained, not responding, "
                                 "or reserved for others)."),
    ("Reservation", "reservation", "The job waits for its reservation to start, or for room in it."),
    ("ReservationDeleted", "reservation", "The reservation the job asked for was deleted: it cannot start as it is."),
    ("ReservationInvalid", "reservation", "The job cannot use the reservation it asked for (not one of its users "
                                          "or accounts, or the reservation ended)."),
    ("PartitionDown", "partition", "{partition} is down: no new job starts there until an operator brings it up."),
    ("PartitionInactive", "partition", "{partition} is inactive: it neither takes nor starts jobs."),
    ("PartitionTimeLimit", "partition", "The job's time limit is longer than {partition} allows."),
    ("PartitionNodeLimit", "partition", "The job asks for more (or fewer) nodes than {partition} allows per job."),
    ("PartitionConfig", "partition", "The job asks for more than the nodes of {partition} have (CPUs, memory, "
                                     "features): it cannot start there."),
    ("MaxMemPerLimit", "partition", "The job asks for more memory per CPU or per node than {partition} allows "
                                    "(MaxMemPerCPU, MaxMemPerNode)."),
    ("AccountNotAllowed", "account", "{partition} does not take jobs of {account} (AllowAccounts, DenyAccounts)."),
    ("InvalidAccount", "account", "The job's account is not valid for its user (unknown, deleted, or the user is "
                                  "not in it): it will not start."),
    ("QOSNotAllowed", "qos", "{partition} does not take jobs of {qos} (AllowQos, DenyQos), or the job's association "
                             "may not use it."),
    ("InvalidQOS", "qos", "The job's QOS is not valid for its user and account: it will not start."),
    ("QOSUsageThreshold", "qos", "The fair-share usage of {account} is past the usage threshold of {qos} "
                                 "(UsageThreshold)."),
    ("QOSJobLimit", "limit", "A job-count limit of {qos} is reached."),
    ("QOSResourceLimit", "limit", "A resource limit of {qos} is reached."),
    ("QOSTimeLimit", "limit", "A time limit of {qos} is reached."),
    ("AssociationJobLimit", "limit", "A job-count limit of {account} (or an account above it) is reached."),
    ("AssociationResourceLimit", "limit", "A resource limit of {account} (or an account above it) is reached."),
    ("AssociationTimeLimit", "limit", "A time limit of {account} (or an account above it) is reached."),
    ("AccountingPolicy", "limit", "An accounting policy (a QOS or association limit) keeps it from starting."),
    ("Licenses", "licenses", "The licenses the job asks for are all in use."),
    ("BurstBufferResources", "burst_buffer", "The burst buffer space the job asks for is in use."),
    ("BurstBufferStageIn", "burst_buffer", "The job's files are being staged in to its burst buffer."),
    ("BurstBufferOperation", "burst_buffer", "An operation on the job's burst buffer failed."),
    ("JobArrayTaskLimit", "array", "The array already runs as many tasks at once as its throttle allows (%N)."),
    ("SchedDefer", "scheduler", "The scheduler defers scheduling at submission (SchedulerParameters=defer): a "
                                "later cycle will look at the job."),
    ("Prolog", "scheduler", "The job's prolog is running on its nodes."),
    ("Cleaning", "scheduler", "The job was requeued and still cleans up from its previous run."),
    ("FedJobLock", "scheduler", "The job waits for the clusters of its federation to agree where it runs."),
    ("FrontEndDown", "nodes", "No front-end node is available to run the job."),
    ("BadConstraints", "nodes", "No node of {partition} has the features the job asks for."),
    ("Constraints", "nodes", "The features the job asks for are not available on enough nodes now."),
    ("NodeDown", "nodes", "A node the job needs (or ran on) is down."),
    ("MpiPortsBusy", "resources", "The MPI ports the job needs are all in use."),
    ("NvidiaImexChannels", "resources", "The NVIDIA IMEX channels the job needs are all in use."),
    ("PowerNotAvail", "power", "Not enough power is available to start the job (power capping)."),
    ("PowerReserved", "power", "The power the job needs is reserved for other jobs (power capping)."),
    ("MaxPoweredUpNodes", "power", "The nodes the job needs are powered down and no more may be powered up now "
                                   "(MaxPoweredUpNodes)."),
    ("DeadLine", "ended", "The job's deadline passed before it could start."),
    ("InactiveLimit", "ended", "The job reached the cluster's inactivity limit (InactiveLimit)."),
    ("JobLaunchFailure", "ended", "The job could not be launched (its batch script or its environment failed)."),
    ("NonZeroExitCode", "ended", "The job ended with a non-zero exit code."),
    ("OutOfMemory", "ended", "The job ran out of memory."),
    ("RaisedSignal", "ended", "The job was ended by a signal."),
    ("SystemFailure", "ended", "Slurm or a node failed while the job ran or started."),
    ("TimeLimit", "ended", "The job reached its time limit."),
)


def _catalogue() -> dict[str, ReasonInfo]:
    out = {code: ReasonInfo(code, category, text) for code, category, text in _OTHERS}
    for code in LIMIT_CODES:
        info = _limit_reason(code)
        if info is None:  # a code listed here that the grammar does not read: a bug here
            raise AssertionError(f"limit reason {code} does not parse")
        out[code] = info
    return out


#: Every reason code Slurm gives (23.11-26.05), by code.
REASONS: dict[str, ReasonInfo] = _catalogue()


def split_reason(text: str | None) -> tuple[str | None, str | None]:
    """A job's reason as squeue prints it -> (code, details): ``"ReqNodeNotAvail,
    UnavailableNodes:n4"`` -> ("ReqNodeNotAvail", "UnavailableNodes:n4"); an array's pending
    record joins its tasks' reasons (``"BeginTime,JobHeldAdmin"``): the first is the code."""
    if not text:
        return None, None
    code, _sep, rest = text.strip().partition(",")
    # scontrol -o writes the space after the comma as "_" (ReqNodeNotAvail,_UnavailableNodes:n4)
    return code.strip() or None, rest.strip(" _") or None


def reason_info(code: str | None) -> ReasonInfo:
    """What ``code`` means; a code not in :data:`REASONS` is described as itself (a newer
    release's), with the generic facts (:attr:`ReasonInfo.known` false)."""
    if code is None:
        return REASONS["None"]
    found = REASONS.get(code)
    if found is not None:
        return found
    guessed = _limit_reason(code)
    if guessed is not None:
        return ReasonInfo(code, guessed.category, guessed.text, guessed.limit, known=False)
    return ReasonInfo(code, "unknown", f"Slurm gives the reason {code}, which this slurmtower does not know "
                                       "(a newer Slurm release?): see squeue(1), JOB REASON CODES.", known=False)
