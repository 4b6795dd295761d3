"""Job control: ``slurm.job.cancel``, ``.hold``, ``.release``, ``.requeue``, ``.suspend``,
``.resume``, ``.signal`` and ``.update``.

**Which jobs.** Each action takes ``jobids`` (``123``, an array task ``123_4``, tasks
``123_[1-5]``, a whole array by its id, a het job ``123`` or component ``123+1``) or
``criterias`` with ``/queue``'s filters (``user``, ``account``, ``partition``, ``state``,
``name``, ``nodes``; Slurm applies them itself, as ``squeue``), never both. Jobs of hidden
partitions are unknown, as everywhere. An unknown id is a one-line error naming it, nothing
done; one call acts on at most :data:`~slurmtower.slurm.jobctl.MAX_JOB_IDS` jobs.

**What it does to each.** The jobs are read, then each gets its plan (``cancel``,
``hold`` ... or ``unchanged`` with why: a hold of a job already held, a release of one not
held); a dry run answers that list and changes nothing: the act builds the same list the
same way. Then one Slurm call for the whole list (``scancel`` with every id, ``scontrol hold
1,2,3``), the jobs are read again and each is folded by outcome: ``cancelled``, ``held``,
``released``, ``requeued``, ``suspended``, ``resumed``, ``signalled``, ``updated``,
``unchanged``, ``refused`` (with Slurm's message) or ``gone`` (it ended before the act). The
execution is ``partial`` (exit code 4) when some changed and some were refused or gone,
``failed`` when none changed and some were.

**Who may.** Operators and admins act on every visible job; the ``user`` role only on its own
jobs (another user's is refused by id, nothing done; with ``criterias`` the user filter is
theirs), never an admin hold, a suspend or resume, or fields only an operator may set;
readers never. The CLI acts with Slurm's own rights (its caller's), a rule with the rule
file's. Before acting, Slurm's ``AdminComment`` of the jobs is set to who acted through
slurmtower (up to ``actions.job_admin_comment_max`` jobs a call), so ``scontrol show job``
and ``sacct`` tell it too; the audit record names the person, lists every job by outcome, and the event
``slurmtower.job.<outcome>`` is recorded for the jobs of each outcome.

**Counting jobs.** A job is what Slurm counts as one (as ``MaxJobCount`` does): each array
task, the pending ones too (squeue folds them into one record, ``123_[1-1000]``: 1,000 jobs),
and each component of a het job (``123`` names its components: 2 jobs for two). A call's count is the
jobs its ids name that its act changes (a hold counts the pending tasks not yet held, a
cancel those not ended, an update every one): each id's entry tells it (``count``), the
result sums it (``affected``), the audit records it (``after.acted``, by owner) and the
breaker counts it: one counting for all (``_affected``).

**The breaker.** Every job action counts (cancel, signal, hold, release, requeue, suspend,
resume and update: each changes jobs, and a release or resume of thousands starts them at
once as surely as an update of ``priority=0`` holds them): more jobs than
``max(actions.job_breaker_min_jobs, actions.job_breaker_share * N)`` within
``actions.breaker_window`` (this call and the job actions recorded before it), where ``N`` is
the jobs of the queue (squeue's, each task counted), or one user's jobs acted on by someone
else, is refused with ``slurmtower.breaker.tripped`` and a 409 naming the count; dry runs
too. An admin passes ``override_breaker=true``.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from slurmtower.actions.breaker import OVERRIDDEN, TRIPPED, BreakerTripped
from slurmtower.actions.params import _Mutating
from slurmtower.actions.registry import Run, action
from slurmtower.actions.schemas import (
    CRITERIAS_SCHEMA,
    JOBIDS_SCHEMA,
    ONE_WAY,
    SIGNAL_SCHEMA,
    check_criterion,
    update_fields_schema,
    whole,
)
from slurmtower.errors import InvalidInput, NotFound, PermissionDenied, Unsupported
from slurmtower.models import Job, JobState
from slurmtower.models.job import array_task_ranges
from slurmtower.nodeset import NodeSet, parse_nodeset
from slurmtower.principal import ADMIN, OPERATOR, USER
from slurmtower.slurm.jobctl import (
    JOB_UPDATE_FIELDS,
    MAX_JOB_IDS,
    JobRef,
    JobResults,
    check_signal,
    check_update_fields,
    job_control,
    parse_job_id,
    parse_job_ids,
)

if TYPE_CHECKING:
    from slurmtower.settings import ActionSettings

__all__ = ["CRITERIA", "JOB_ACTIONS", "USER_FIELDS"]

log = logging.getLogger(__name__)

#: The ``criterias`` keys: ``/queue``'s filters.
CRITERIA = ("user", "account", "partition", "state", "name", "nodes")
#: Fields of ``slurm.job.update`` the ``user`` role may set on its own jobs (Slurm lets a user
#: change these; a longer time limit, a priority, a QOS ... are an operator's).
USER_FIELDS = frozenset({"name", "comment", "dependency", "begin_time", "nice", "time_limit", "mail_user",
                         "mail_type", "features", "requeue"})
#: The job actions, every one counted by the breaker.
JOB_ACTIONS = ("slurm.job.cancel", "slurm.job.signal", "slurm.job.hold", "slurm.job.release", "slurm.job.requeue",
               "slurm.job.suspend", "slurm.job.resume", "slurm.job.update")

#: Slurm's messages for a job that ended (or never was): ``gone`` rather than ``refused``.
_GONE = ("invalid job id", "already completing or completed", "does not exist", "job has already finished",
         "already completed")
_HELD_REASONS = ("JobHeldAdmin", "JobHeldUser", "job_requeued_in_held_state")
_ENDING = frozenset({JobState.COMPLETING, JobState.CANCELLED, JobState.COMPLETED, JobState.FAILED,
                     JobState.TIMEOUT, JobState.NODE_FAIL, JobState.PREEMPTED, JobState.BOOT_FAIL,
                     JobState.DEADLINE, JobState.OUT_OF_MEMORY})
_FINAL = _ENDING - {JobState.COMPLETING}
#: The queue the breaker's shares are of: the jobs squeue lists by default (not those ended).
_ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "RESIZING",
           "SIGNALING", "STAGE_OUT", "STOPPED")
_REQUEUED = frozenset({JobState.PENDING, JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED,
                       JobState.CONFIGURING, JobState.COMPLETING})


# -- parameters ---------------------------------------------------------------------------------

_OVERRIDE = ("Go on even when the job breaker would refuse (more jobs than actions.job_breaker_share of the "
             "queue within actions.breaker_window): admin only, never from a rule.")


class _JobTarget(_Mutating):
    model_config = ConfigDict(json_schema_extra=ONE_WAY)

    jobids: list[str] | None = Field(default=None, description=(
        "Job ids: 123, an array task 123_4, tasks 123_[1-5] (ascending), a whole array or het job by its id, "
        "a het component 123+1 (a list, or one comma-separated string). Give jobids or criterias."),
        json_schema_extra=JOBIDS_SCHEMA)
    criterias: dict[str, str | list[str]] | None = Field(default=None, description=(
        "The jobs /queue's filters select, as squeue: " + ", ".join(CRITERIA) + " (a value or a list), "
        'e.g. {"partition": "debug", "state": "PENDING"}. Give jobids or criterias.'),
        json_schema_extra=CRITERIAS_SCHEMA)
    override_breaker: bool = Field(default=False, description=_OVERRIDE)

    @field_validator("jobids", mode="before")
    @classmethod
    def _ids(cls, value: Any) -> Any:
        if value is None:
            return None
        value = whole(value)
        if isinstance(value, list | tuple):
            value = [whole(v) for v in value]
        elif not isinstance(value, str | int):
            raise ValueError("job ids are a list, a number or a comma-separated string")
        refs = parse_job_ids(value)
        return [r.text for r in refs]

    @field_validator("criterias")
    @classmethod
    def _criteria(cls, value: dict[str, str | list[str]] | None) -> dict[str, str | list[str]] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one criterion (" + ", ".join(CRITERIA) + ")")
        for key, item in value.items():
            if key not in CRITERIA:
                raise ValueError(f"unknown criterion {key!r} (known: {', '.join(CRITERIA)})")
            items = item if isinstance(item, list) else [item]
            if not items or any(not v.strip() or len(v) > 200 or any(c in v for c in "\n\r") for v in items):
                raise ValueError(f"{key}: values are non-empty single lines of at most 200 characters")
            check_criterion(key, items)
        return value

    @model_validator(mode="after")
    def _one_way(self) -> _JobTarget:
        if (self.jobids is None) == (self.criterias is None):
            raise ValueError("give jobids or criterias (one of them, not both)")
        return self


class JobCancelParams(_JobTarget):
    model_config = ConfigDict(json_schema_extra={
        **ONE_WAY, "not": {"required": ["batch", "full"],
                           "properties": {"batch": {"const": True}, "full": {"const": True}}}})

    signal: str | None = Field(default=None, description="Send this signal instead of ending the job "
                                                         "(scancel --signal: a name such as USR1, or 1-64).",
                               json_schema_extra={"anyOf": [SIGNAL_SCHEMA, {"type": "null"}]})
    batch: bool = Field(default=False, description="Only the batch shell (scancel --batch).")
    full: bool = Field(default=False, description="Every step and the batch shell (scancel --full).")

    @field_validator("signal")
    @classmethod
    def _signal(cls, value: str | None) -> str | None:
        return None if value is None else check_signal(value)

    @model_validator(mode="after")
    def _shell(self) -> JobCancelParams:
        if self.batch and self.full:
            raise ValueError("batch and full exclude each other")
        return self


class JobHoldParams(_JobTarget):
    uhold: bool = Field(default=False, description="A user hold (scontrol uhold: the job's owner may release "
                                                   "it) instead of an admin hold (scontrol hold: operators and "
                                                   "admins only). The user role passes it.")


class JobReleaseParams(_JobTarget):
    pass


class JobRequeueParams(_JobTarget):
    hold: bool = Field(default=False, description="Requeue the jobs held (scontrol requeuehold).")


class JobSuspendParams(_JobTarget):
    pass


class JobResumeParams(_JobTarget):
    pass


class JobSignalParams(_JobTarget):
    signal: str = Field(description="The signal: a name such as USR1 or TERM, or a number 1-64.",
                        json_schema_extra=SIGNAL_SCHEMA)

    @field_validator("signal")
    @classmethod
    def _signal(cls, value: str) -> str:
        return check_signal(value)


class JobUpdateParams(_JobTarget):
    infos: dict[str, Any] = Field(description="Fields to set: " + ", ".join(JOB_UPDATE_FIELDS) + ".",
                                  json_schema_extra=update_fields_schema(exclude=("admin_comment",)))

    @field_validator("infos")
    @classmethod
    def _fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "admin_comment" in value:
            raise ValueError("admin_comment is slurmtower's record of who acted: it cannot be set")
        value = {k: whole(v) for k, v in value.items()}
        check_update_fields(value)
        return value


# -- selection ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One job id expression acted on and the queue's rows it covers."""

    ref: JobRef
    jobs: tuple[Job, ...]

    @property
    def users(self) -> set[str]:
        return {j.user_name or "" for j in self.jobs}

    @property
    def first(self) -> Job:
        return self.jobs[0]

    def summary(self) -> dict[str, Any]:
        job = self.first
        return {"user": job.user_name, "partition": job.partition, "state": job.state.value,
                "reason": job.state_reason, "name": job.name}


def _covers(ref: JobRef, job: Job) -> bool:
    if ref.kind == "job":
        return ref.job_id in (job.job_id, job.array_job_id, job.het_job_id)
    if ref.kind == "het":  # a component: Slurm numbers them from the leader's id (leader + offset)
        return job.het_job_id == ref.job_id and job.job_id == ref.job_id + (ref.het_offset or 0)
    if job.array_job_id != ref.job_id:
        return False
    if job.array_task_id is not None:
        return ref.overlaps([(job.array_task_id, job.array_task_id)])
    return any(_within(tasks, lo, hi) for tasks in _pending_tasks(job) for lo, hi in ref.tasks or ())


class _Rows:
    """Queue rows found by the ids a :class:`JobRef` names (its job, array or het job id), so
    matching N refs against N rows stays linear."""

    def __init__(self, rows: Iterable[Job]) -> None:
        self._by_id: dict[int, list[Job]] = {}
        for job in rows:
            for key in {job.job_id, job.array_job_id, job.het_job_id} - {None, 0}:
                self._by_id.setdefault(key, []).append(job)  # type: ignore[arg-type]

    def covered(self, ref: JobRef) -> tuple[Job, ...]:
        """The rows ``ref`` covers, in the queue's order."""
        return tuple(j for j in self._by_id.get(ref.job_id, ()) if _covers(ref, j))


def _pending_tasks(job: Job) -> tuple[range, ...]:
    """The task ids an array's pending record stands for (``()``: the row is not one)."""
    if job.array_job_id is None or job.array_task_id is not None or not job.array_task_str:
        return ()
    return array_task_ranges(job.array_task_str)


def _within(tasks: range, lo: int, hi: int) -> int:
    """How many of ``tasks`` are in ``lo``-``hi``."""
    first = max(lo, tasks.start)
    first += -(first - tasks.start) % tasks.step
    return len(range(first, min(tasks.stop, hi + 1), tasks.step))


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` sorted, overlapping ones joined (``1-20,15-30`` names 30 tasks, not 36)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _ref_of(job: Job) -> JobRef:
    """The id expression that names exactly this queue row."""
    if job.het_job_id:
        return parse_job_id(str(job.het_job_id))
    if job.array_job_id and job.array_task_id is not None:
        return parse_job_id(f"{job.array_job_id}_{job.array_task_id}")
    pending = _pending_tasks(job)
    if job.array_job_id and pending:
        # Built rather than parsed: Slurm's list may be longer than a caller's expression may
        # be, or stepped (1-199:3), which scontrol does not take back.
        ranges = _merged(span for r in pending if r
                         for span in ([(r.start, r[-1])] if r.step == 1 else [(n, n) for n in r]))
        text = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)
        one = len(ranges) == 1 and ranges[0][0] == ranges[0][1]
        return JobRef(f"{job.array_job_id}_{text}" if one else f"{job.array_job_id}_[{text}]", job.array_job_id,
                      tuple(ranges))
    return parse_job_id(str(job.job_id))


def _values(item: str | list[str]) -> list[str]:
    items = item if isinstance(item, list) else [item]
    return [v.strip() for part in items for v in part.split(",") if v.strip()]


def select(run: Run, p: _JobTarget) -> list[Target]:
    """The jobs ``p`` names, as the caller may see them (raises :class:`NotFound` for an
    unknown or hidden id, :class:`InvalidInput` past :data:`MAX_JOB_IDS` jobs)."""
    policy = run.visibility()
    if p.jobids is not None:
        refs = parse_job_ids(p.jobids)
        found = _Rows(policy.jobs(run.client.queue(job_ids=sorted({r.job_id for r in refs}))))
        targets: list[Target] = []
        unknown: list[str] = []
        for ref in refs:
            mine = found.covered(ref)
            if mine:
                targets.append(Target(ref, mine))
            else:
                unknown.append(ref.text)
        if unknown:
            more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            raise NotFound(f"unknown job(s): {', '.join(unknown[:10])}{more} (not in the queue)", param="jobids")
        return targets
    crit = {k: _values(v) for k, v in (p.criterias or {}).items()}
    if run.role == USER:
        others = [u for u in crit.get("user", []) if u != run.principal]
        if others:
            raise PermissionDenied(f"{run.principal} may act only on their own jobs, not on those of "
                                   f"{', '.join(others)}", param="criterias.user")
        crit["user"] = [run.principal]
    nodes: NodeSet | None = None
    if "nodes" in crit:
        nodes = parse_nodeset(",".join(crit["nodes"]))
    rows = policy.jobs(run.client.queue(users=crit.get("user", ()), accounts=crit.get("account", ()),
                                        partitions=crit.get("partition", ()),
                                        states=[s.upper() for s in crit.get("state", ())],
                                        names=crit.get("name", ()), nodes=nodes))
    if "state" not in crit:  # as squeue: the jobs slurmctld still lists after they ended are left out
        rows = [j for j in rows if j.state not in _FINAL]
    by_ref: dict[str, list[Job]] = {}
    refs_by_text: dict[str, JobRef] = {}
    for job in sorted(rows, key=lambda j: (j.array_job_id or j.het_job_id or j.job_id, j.array_task_id or 0,
                                          j.job_id)):
        ref = _ref_of(job)
        refs_by_text.setdefault(ref.text, ref)
        by_ref.setdefault(ref.text, []).append(job)
    if len(by_ref) > MAX_JOB_IDS:
        raise InvalidInput(f"criterias select {len(by_ref)} jobs, more than {MAX_JOB_IDS} in one call: narrow "
                           "the filter", param="criterias")
    return [Target(refs_by_text[text], tuple(jobs)) for text, jobs in by_ref.items()]


# -- rights -------------------------------------------------------------------------------------


def _check_rights(run: Run, name: str, targets: Sequence[Target], p: _JobTarget) -> None:
    """The HTTP caller's role against the jobs (the CLI has Slurm's rights, a rule the file's)."""
    role = run.role
    if role is None or role in (OPERATOR, ADMIN):
        return
    if role != USER:
        raise PermissionDenied(f"{run.principal} ({role}) may not run {name}")
    if name in ("slurm.job.suspend", "slurm.job.resume"):
        raise PermissionDenied(f"{name} is for operators and admins, as in Slurm ({run.principal} is a user)")
    if isinstance(p, JobHoldParams) and not p.uhold:
        raise PermissionDenied("an admin hold is for operators and admins: pass uhold=true for a user hold",
                               param="uhold")
    if isinstance(p, JobUpdateParams):
        theirs = sorted(set(p.infos) - USER_FIELDS)
        if theirs:
            raise PermissionDenied(f"job field {theirs[0]!r} is set by operators and admins (a user may set "
                                   f"{', '.join(sorted(USER_FIELDS))})", param=theirs[0])
        if "time_limit" in p.infos:
            _check_shorter(targets, p.infos["time_limit"])
        if "nice" in p.infos and int(p.infos["nice"]) < 0:
            raise PermissionDenied("a negative nice (a higher priority) is for operators and admins", param="nice")
    others = [t.ref.text for t in targets if t.users - {run.principal}]
    if others:
        more = f" and {len(others) - 10} more" if len(others) > 10 else ""
        raise PermissionDenied(f"{run.principal} may act only on their own jobs: {', '.join(others[:10])}{more} "
                               "belong to other users; nothing done", param="jobids")


def _check_shorter(targets: Sequence[Target], value: Any) -> None:
    minutes = check_update_fields({"time_limit": value})["time_limit"]
    if not isinstance(minutes, int | timedelta):
        raise PermissionDenied("an unlimited time limit is for operators and admins", param="time_limit")
    asked = minutes if isinstance(minutes, timedelta) else timedelta(minutes=minutes)
    longer = [t.ref.text for t in targets if any(j.time_limit is None or asked > j.time_limit for j in t.jobs)]
    if longer:
        raise PermissionDenied(f"a longer time limit is for operators and admins (jobs {', '.join(longer[:10])})",
                               param="time_limit")


# -- the plan -----------------------------------------------------------------------------------

Verb = Literal["cancel", "signal", "hold", "release", "requeue", "suspend", "resume", "update"]
_DONE: dict[str, str] = {"cancel": "cancelled", "signal": "signalled", "hold": "held", "release": "released",
                         "requeue": "requeued", "suspend": "suspended", "resume": "resumed", "update": "updated"}


def _held(job: Job) -> bool:
    """A held pending job: Slurm's hold reasons (squeue joins those of an array's pending tasks:
    ``BeginTime,JobHeldAdmin``), or a requeue-held one (priority 0)."""
    reason = job.state_reason or ""
    return job.state is JobState.PENDING and (any(r in reason for r in _HELD_REASONS) or job.priority == 0)


def _why_unchanged(verb: str, t: Target) -> str | None:
    """Why a job needs nothing (``None``: it gets the verb)."""
    jobs = t.jobs
    if verb in ("cancel", "signal") and all(j.state in _ENDING for j in jobs):
        return f"already {jobs[0].state.value.lower()}"
    if verb in ("hold", "release") and not any(j.state is JobState.PENDING for j in jobs):
        return f"not pending ({jobs[0].state.value.lower()}): only pending jobs are held"
    if verb in ("requeue", "signal", "suspend") and all(j.state is JobState.PENDING for j in jobs):
        return "pending: not started"
    if verb == "hold" and all(_held(j) for j in jobs):
        return "already held"
    if verb == "release" and not any(_held(j) for j in jobs):
        return "not held"
    if verb == "suspend" and all(j.state is JobState.SUSPENDED for j in jobs):
        return "already suspended"
    if verb == "resume" and not any(j.state is JobState.SUSPENDED for j in jobs):
        return "not suspended"
    return None


def _took(verb: str, before: Target, after: Sequence[Job]) -> bool:
    """Whether the queue read after the act shows the change (a job gone counts as ended)."""
    if verb in ("signal", "update"):
        return True
    if not after:
        return verb in ("cancel", "requeue")
    if verb == "cancel":
        return all(j.state in _ENDING for j in after)
    if verb == "hold":
        return all(_held(j) for j in after)
    if verb == "release":
        return not any(_held(j) for j in after)
    if verb == "requeue":
        return all(j.state in _REQUEUED for j in after)
    if verb == "suspend":
        return all(j.state is JobState.SUSPENDED for j in after)
    return not any(j.state is JobState.SUSPENDED for j in after)  # resume


# -- counting -----------------------------------------------------------------------------------


def _changes(verb: str, job: Job) -> bool:
    """Whether ``verb`` changes the queue row ``job`` (what :func:`_why_unchanged` asks of a
    whole id, asked of one row)."""
    if verb == "cancel":
        return job.state not in _ENDING
    if verb == "signal":
        return job.state not in _ENDING and job.state is not JobState.PENDING
    if verb == "hold":
        return job.state is JobState.PENDING and not _held(job)
    if verb == "release":
        return _held(job)
    if verb == "requeue":
        return job.state is not JobState.PENDING
    if verb == "suspend":
        return job.state not in (JobState.PENDING, JobState.SUSPENDED)
    if verb == "resume":
        return job.state is JobState.SUSPENDED
    return True  # update


def _jobs_in(ref: JobRef, job: Job) -> int:
    """How many jobs of the queue row ``job`` ``ref`` names: of an array's pending record,
    the tasks of ``ref``'s that it stands for (all of them when ``ref`` is the array's id);
    any other row is one job (a task, a het component, a job)."""
    pending = _pending_tasks(job)
    if not pending or ref.tasks is None:
        return job.job_count
    return sum(_within(tasks, lo, hi) for tasks in pending for lo, hi in _merged(ref.tasks))


def _affected(verb: str, target: Target) -> int:
    """How many jobs ``verb`` changes of those ``target`` names, as Slurm counts jobs (each
    array task, the pending ones too; each het-job component): the one count of the result,
    the audit and the breaker."""
    return sum(_jobs_in(target.ref, job) for job in target.jobs if _changes(verb, job))


def _owners(counted: Iterable[tuple[Target, int]]) -> dict[str, int]:
    """How many of the ``(target, jobs)`` jobs each user owns."""
    owners: Counter[str] = Counter()
    for target, jobs in counted:
        owners[target.first.user_name or ""] += jobs
    return dict(owners)


# -- the breaker --------------------------------------------------------------------------------


def _tripped(run: Run, settings: ActionSettings, counted: Sequence[tuple[Target, int]]) -> dict[str, Any] | None:
    """The first scope past its limit (the queue, then one user's jobs acted on by someone
    else), with its counts (jobs as :func:`_affected` counts them); ``None`` when none is."""
    share, floor_ = settings.job_breaker_share, settings.job_breaker_min_jobs
    store = run.store
    since = datetime.now(UTC) - timedelta(seconds=settings.breaker_window)
    earlier, earlier_by_user = store.jobs_acted_since(since, JOB_ACTIONS) if store is not None else (0, {})
    requested = sum(jobs for _, jobs in counted)

    def limit(total: int) -> int:
        return max(floor_, math.floor(share * total + 1e-9))

    if earlier + requested > floor_:
        queue = run.client.job_count(states=_ACTIVE)
        if earlier + requested > limit(queue):
            return {"scope": "queue", "user": None, "jobs": queue, "limit": limit(queue), "earlier": earlier,
                    "requested": requested}
    for user, mine in sorted(_owners(counted).items()):
        before = earlier_by_user.get(user, 0)
        if user == run.principal or before + mine <= floor_:  # a user's own jobs are theirs to end
            continue
        theirs = run.client.job_count(users=[user], states=_ACTIVE)
        if before + mine > limit(theirs):
            return {"scope": "user", "user": user, "jobs": theirs, "limit": limit(theirs), "earlier": before,
                    "requested": mine}
    return None


def _breaker(run: Run, name: str, p: _JobTarget, counted: Sequence[tuple[Target, int]]) -> dict[str, Any] | None:
    """Raise :class:`BreakerTripped` when ``counted`` (each acting target and its jobs) is past
    a limit; an admin's override answers the breaker's facts instead (``None``: within)."""
    settings = run.settings.actions if run.settings is not None else None
    if settings is None or not settings.job_breaker_enabled or not any(jobs for _, jobs in counted):
        return None
    run.check_override(p.override_breaker, "job breaker")
    scope = _tripped(run, settings, counted)
    if scope is None:
        return None
    window = settings.breaker_window
    facts = {"action": name, "principal": run.principal, "via": run.via, "execution_id": run.execution_id,
             "window": window, "share": settings.job_breaker_share, **scope}
    total = scope["earlier"] + scope["requested"]
    whose = f"{scope['user']}'s {scope['jobs']} jobs" if scope["user"] else f"the {scope['jobs']} jobs queued"
    if p.override_breaker:
        run.stdout.append(f"job breaker overridden: {total} of {whose} within {window:g} s (limit {scope['limit']})")
        if not run.dry_run:
            run.record_event(OVERRIDDEN, facts)
        return {"overridden": True, **facts}
    if not run.dry_run:
        run.record_event(TRIPPED, facts)
    raise BreakerTripped(
        f"job breaker: {name} of {scope['requested']} job(s) (each array task and het-job component is one) "
        f"would make {total} of {whose} acted on within "
        f"{window:g} s, more than its limit of {settings.job_breaker_share:.0%} ({scope['limit']}); nothing "
        "changed (an admin may pass override_breaker=true)", param="jobids" if p.jobids is not None else "criterias",
        breaker=facts)


# -- running ------------------------------------------------------------------------------------


def _admin_comment(run: Run, verb: str) -> str:
    approved = f", approved by {run.approved_by}" if run.approved_by else ""
    return f"slurmtower: {verb} by {run.principal}@{run.via}{approved} ({(run.execution_id or '')[:12]})"[:255]


def _comment(run: Run, verb: str, refs: Sequence[JobRef]) -> None:
    """Set the jobs' AdminComment to who acts (one RPC per job: up to a bound)."""
    settings = run.settings.actions if run.settings is not None else None
    most = settings.job_admin_comment_max if settings is not None else MAX_JOB_IDS
    if len(refs) > most:
        run.stdout.append(f"AdminComment not set: {len(refs)} jobs, more than actions.job_admin_comment_max "
                          f"({most}); the audit record names who acted")
        return
    if not most:
        return
    try:
        job_control(run.client).update(refs, {"admin_comment": _admin_comment(run, verb)})
    except Unsupported as exc:  # slurmrestd before 24.11: the audit still names who acted
        run.stdout.append(f"AdminComment not set: {exc.message}")


def _outcome(verb: str, t: Target, message: str | None, rows: Sequence[Job], entry: dict[str, Any]) -> str:
    """One acted-on job's outcome from Slurm's answer and the queue read after (notes in ``entry``)."""
    entry["state_after"] = rows[0].state.value if rows else None
    if message is not None:
        entry["message"] = message
        return "gone" if any(m in message.lower() for m in _GONE) else "refused"
    if _took(verb, t, rows):
        return _DONE[verb]
    entry["why"] = "Slurm accepted it but the job shows no change"
    return "unchanged"


def control(run: Run, name: str, verb: Verb, p: _JobTarget, call: Callable[[Sequence[JobRef]], JobResults],
            ) -> dict[str, Any]:
    """Select, check, plan, act once, read again and fold: the body of every job action."""
    targets = select(run, p)
    _check_rights(run, name, targets, p)
    plan = {t.ref.text: _why_unchanged(verb, t) for t in targets}
    acting = [t for t in targets if plan[t.ref.text] is None]
    count = {t.ref.text: _affected(verb, t) for t in acting}
    run.before = {"jobs": len(targets), "states": dict(Counter(t.first.state.value for t in targets))}
    breaker = _breaker(run, name, p, [(t, count[t.ref.text]) for t in acting])
    jobs: dict[str, dict[str, Any]] = {}
    for t in targets:
        why = plan[t.ref.text]
        jobs[t.ref.text] = {**t.summary(), "count": count[t.ref.text], "would": verb} if why is None else {
            **t.summary(), "count": 0, "would": "unchanged", "why": why}
    affected = sum(count.values())
    result: dict[str, Any] = {"action": verb, "selected": len(targets), "acting": len(acting), "affected": affected,
                              "jobs": jobs}
    if breaker is not None:
        result["breaker"] = breaker
    if run.dry_run:
        run.stdout.append(f"dry run: would {verb} {len(acting)} of {len(targets)} job id(s), {affected} job(s)")
        return {**result, "dry_run": True}
    answers: JobResults = {}
    if acting:
        refs = [t.ref for t in acting]
        _comment(run, verb, refs)
        answers = call(refs)
    after = _Rows(run.client.queue(job_ids=sorted({t.ref.job_id for t in acting})) if acting else [])
    outcomes: dict[str, list[str]] = {}
    for t in targets:
        entry = jobs[t.ref.text]
        del entry["would"]
        outcome = "unchanged" if plan[t.ref.text] is not None else _outcome(
            verb, t, answers.get(t.ref.text), after.covered(t.ref), entry)
        entry["outcome"] = outcome
        outcomes.setdefault(outcome, []).append(t.ref.text)
    counts = {k: len(v) for k, v in outcomes.items()}
    changed = counts.get(_DONE[verb], 0)
    missed = sum(1 for t in acting if jobs[t.ref.text]["outcome"] != _DONE[verb])
    done = [t for t in acting if jobs[t.ref.text]["outcome"] == _DONE[verb]]
    run.after = {"acted": sum(count[t.ref.text] for t in done),
                 "acted_by_user": _owners((t, count[t.ref.text]) for t in done), "counts": counts, "jobs": outcomes}
    if missed and changed:
        run.partial = f"{verb}: {changed} job(s) {_DONE[verb]}, {missed} not ({_fold_counts(counts)})"
    elif missed:
        run.failed = f"{verb}: no job {_DONE[verb]} ({_fold_counts(counts)})"
    for outcome, ids in outcomes.items():
        if outcome != "unchanged":
            run.record_event(f"slurmtower.job.{outcome}", {
                "action": name, "principal": run.principal, "via": run.via, "execution_id": run.execution_id,
                "count": len(ids), "jobs": ids})
    run.stdout.append(f"{verb}: {_fold_counts(counts)}")
    return {**result, "outcomes": outcomes, "counts": counts}


def _fold_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


# -- the actions --------------------------------------------------------------------------------


@action("slurm.job.cancel", JobCancelParams, mutating=True, permission="operate", own_jobs=True)
def job_cancel(run: Run, p: JobCancelParams) -> dict[str, Any]:
    """Cancel jobs (or send them a signal) by id or by filter, with an outcome per job."""
    return control(run, "slurm.job.cancel", "signal" if p.signal else "cancel", p,
                   lambda refs: job_control(run.client).cancel(refs, signal=p.signal, batch=p.batch, full=p.full))


@action("slurm.job.hold", JobHoldParams, mutating=True, permission="operate", own_jobs=True)
def job_hold(run: Run, p: JobHoldParams) -> dict[str, Any]:
    """Hold pending jobs (an admin hold, or a user hold with uhold), by id or by filter."""
    return control(run, "slurm.job.hold", "hold", p, lambda refs: job_control(run.client).hold(refs, user=p.uhold))


@action("slurm.job.release", JobReleaseParams, mutating=True, permission="operate", own_jobs=True)
def job_release(run: Run, p: JobReleaseParams) -> dict[str, Any]:
    """Release held jobs, by id or by filter."""
    return control(run, "slurm.job.release", "release", p, lambda refs: job_control(run.client).release(refs))


@action("slurm.job.requeue", JobRequeueParams, mutating=True, permission="operate", own_jobs=True)
def job_requeue(run: Run, p: JobRequeueParams) -> dict[str, Any]:
    """Requeue jobs (optionally held), by id or by filter."""
    return control(run, "slurm.job.requeue", "requeue", p,
                   lambda refs: job_control(run.client).requeue(refs, hold=p.hold))


@action("slurm.job.suspend", JobSuspendParams, mutating=True, permission="operate", own_jobs=True)
def job_suspend(run: Run, p: JobSuspendParams) -> dict[str, Any]:
    """Suspend running jobs (operators and admins), by id or by filter."""
    return control(run, "slurm.job.suspend", "suspend", p, lambda refs: job_control(run.client).suspend(refs))


@action("slurm.job.resume", JobResumeParams, mutating=True, permission="operate", own_jobs=True)
def job_resume(run: Run, p: JobResumeParams) -> dict[str, Any]:
    """Resume suspended jobs (operators and admins), by id or by filter."""
    return control(run, "slurm.job.resume", "resume", p, lambda refs: job_control(run.client).resume(refs))


@action("slurm.job.signal", JobSignalParams, mutating=True, permission="operate", own_jobs=True)
def job_signal(run: Run, p: JobSignalParams) -> dict[str, Any]:
    """Send a signal to jobs, by id or by filter."""
    return control(run, "slurm.job.signal", "signal", p,
                   lambda refs: job_control(run.client).signal(refs, p.signal))


@action("slurm.job.update", JobUpdateParams, mutating=True, permission="operate", own_jobs=True)
def job_update(run: Run, p: JobUpdateParams) -> dict[str, Any]:
    """Change jobs' fields (time limit, partition, QOS, account, nice, comment ...), by id or by filter."""
    return control(run, "slurm.job.update", "update", p,
                   lambda refs: job_control(run.client).update(refs, p.infos))
