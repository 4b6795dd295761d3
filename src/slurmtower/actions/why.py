"""Why is this job pending: ``slurm.job.why``, and the explanation ``GET /jobs/{id}/why``,
``slurmtower why`` and the job page's panel give.

:func:`explain` turns one queue record into a :class:`~slurmtower.models.why.JobWhy`: Slurm's
reason code (:mod:`slurmtower.models.reasons` says what each means), one sentence in plain
words, the facts that block the job, each typed and linked, and what its owner can change.
It reads what it needs through a :class:`WhySources`:

* :class:`ClientSources` asks Slurm (the action, from the CLI, the API or a rule): the job's
  partition's waiting jobs with ``squeue``, nodes, partitions and reservations with the
  client's reads;
* :class:`SnapshotSources` reads the live snapshots (``GET /jobs/{id}/why``, the dashboard):
  the queue, the nodes and the partitions as the API serves them; what is made of a snapshot
  (each partition's waiting jobs in priority order, each partition's free CPUs) is made once
  per snapshot and shared by every request.

Both read the scheduler's view (``sprio``, ``squeue --start``, ``scontrol show assoc_mgr``)
through :func:`~slurmtower.slurm.scheduling.cached_scheduling`: per job at most once per
10 s, the limits once per 15 s. A source that fails gives a ``note`` fact, never an error.

**Who sees what** (:func:`check_access`, the one guard): operators and admins any job; the
``user`` role its own jobs (another's is refused naming it); readers any job, as the
visibility policy shows it: the jobs ahead in the queue are named only where the viewer sees
every job's private fields (:meth:`~slurmtower.visibility.Visibility.sees_all_private`) or
they are the viewer's own, else counted. The CLI and rules see all (Slurm's own rights).
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import ConfigDict, Field, field_validator, model_validator

from slurmtower.actions.ownership import reason_holders
from slurmtower.actions.params import _Params
from slurmtower.actions.registry import Run, action
from slurmtower.actions.schemas import CRITERIAS_SCHEMA, JOBIDS_SCHEMA, ONE_WAY, check_criterion, whole
from slurmtower.errors import InvalidInput, NotFound, PermissionDenied, SlurmtowerError
from slurmtower.models import Job, JobState, Node, NodeFlag, NodeState, Partition, Reservation
from slurmtower.models.job import array_task_ranges
from slurmtower.models.reasons import LimitOf, ReasonInfo, reason_info, split_reason
from slurmtower.models.scheduling import Limit, LimitsState, PriorityFactors, StartEstimate
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.models.why import (
    AheadJob,
    BeginTimeFact,
    DependencyFact,
    Fact,
    HoldFact,
    JobWhy,
    LimitFact,
    NodeFact,
    NoteFact,
    PartitionFact,
    PriorityFact,
    RankFact,
    ReservationFact,
    ResourcesFact,
    StartFact,
)
from slurmtower.nodeset import NodeSet
from slurmtower.principal import USER
from slurmtower.slurm.jobctl import JobRef, parse_job_ids
from slurmtower.slurm.scheduling import SchedulingReads, cached_scheduling
from slurmtower.visibility import Viewer, Visibility

__all__ = [
    "AHEAD_SHOWN",
    "MAX_WHY_JOBS",
    "ClientSources",
    "JobWhyParams",
    "SnapshotSources",
    "Waiting",
    "WhySources",
    "check_access",
    "explain",
    "names_shown",
]

log = logging.getLogger(__name__)

#: At most this many jobs explained in one call (``criterias`` that select more are refused).
MAX_WHY_JOBS = 100
#: The jobs ahead listed by name (the others are counted).
AHEAD_SHOWN = 10
#: The unavailable nodes described one by one (the others are counted).
NODES_SHOWN = 20
#: Where an explanation reads Slurm meanwhile (a job's squeue --start beside its sprio).
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="why")
#: Reasons of the jobs that wait for resources in a partition (``None``: not looked at yet).
_COMPETING = frozenset({"Priority", "Resources", None})
_CRITERIA = ("user", "account", "partition", "state", "name", "nodes")


# -- parameters -------------------------------------------------------------------------------------


class JobWhyParams(_Params):
    model_config = ConfigDict(json_schema_extra=ONE_WAY)

    jobids: list[str] | None = Field(default=None, description=(
        "Job ids: 123, an array task 123_4, tasks 123_[1-5], a whole array or het job by its id (a list, or one "
        "comma-separated string). Give jobids or criterias."), json_schema_extra=JOBIDS_SCHEMA)
    criterias: dict[str, str | list[str]] | None = Field(default=None, description=(
        "The jobs /queue's filters select, as squeue: " + ", ".join(_CRITERIA) + " (a value or a list); pending "
        f"jobs unless state is given; at most {MAX_WHY_JOBS} jobs. Give jobids or criterias."),
        json_schema_extra=CRITERIAS_SCHEMA)

    @field_validator("jobids", mode="before")
    @classmethod
    def _ids(cls, value: Any) -> Any:
        if value is None:
            return None
        value = whole(value)  # JSON's 5.0 is the integer 5 (list(5.0) was a 500)
        if isinstance(value, list | tuple):
            value = [whole(v) for v in value]
        elif not isinstance(value, str | int):
            raise ValueError("job ids are a list, a number or a comma-separated string")
        return [r.text for r in parse_job_ids(value)]

    @field_validator("criterias")
    @classmethod
    def _criteria(cls, value: dict[str, str | list[str]] | None) -> dict[str, str | list[str]] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one criterion (" + ", ".join(_CRITERIA) + ")")
        for key, item in value.items():
            if key not in _CRITERIA:
                raise ValueError(f"unknown criterion {key!r} (known: {', '.join(_CRITERIA)})")
            items = item if isinstance(item, list) else [item]
            if not items or any(not v.strip() or len(v) > 200 or any(c in v for c in "\n\r") for v in items):
                raise ValueError(f"{key}: values are non-empty single lines of at most 200 characters")
            check_criterion(key, items)
        return value

    @model_validator(mode="after")
    def _one_way(self) -> JobWhyParams:
        if (self.jobids is None) == (self.criterias is None):
            raise ValueError("give jobids or criterias (one of them, not both)")
        return self


# -- who may see what ----------------------------------------------------------------------------------


def check_access(role: str | None, name: str, jobs: Iterable[Job]) -> None:
    """The one guard of every path to an explanation: the ``user`` role explains only its own
    jobs (``role`` None: the CLI or a rule, Slurm's own rights).

    Raises:
        PermissionDenied: naming the first job of another user.
    """
    if role != USER:
        return
    for job in jobs:
        if job.user_name != name:
            raise PermissionDenied(f"{name} may see why only their own jobs wait: job {job.job_key} belongs to "
                                   "another user", param="jobids")


def names_shown(policy: Visibility, viewer: Viewer | None) -> Callable[[str | None], bool]:
    """Whether the viewer may see a job of this user named among the jobs ahead (the CLI:
    ``viewer`` None, every one)."""
    if viewer is None or policy.sees_all_private(viewer):
        return lambda _user: True
    return lambda user: policy.owns(viewer, user)


# -- sources -----------------------------------------------------------------------------------------

Waiting = tuple[int, int, str | None, str | None]
"""A job waiting for resources, as ranks compare them: (-priority, job id, user, reason)."""


@dataclass(frozen=True)
class PartitionFree:
    """What a partition's nodes have free now."""

    total_cpus: int = 0
    idle_cpus: int = 0
    total_nodes: int = 0
    idle_nodes: int = 0
    out_nodes: int = 0


class WhySources(Protocol):
    """What :func:`explain` reads (each may raise a :mod:`slurmtower.errors` error: the
    explanation then carries a note instead of that fact)."""

    now: datetime

    def waiting(self, partition: str) -> Sequence[Waiting]:
        """The jobs waiting for resources in ``partition``, in the order they are served."""
        ...

    def job_state(self, job_id: int) -> str | None:
        """The state of a job slurmctld still holds (``None``: it does not)."""
        ...

    def nodes(self, nodes: NodeSet) -> list[Node]: ...

    def partitions(self) -> list[Partition]: ...

    def free(self, partition: Partition) -> PartitionFree: ...

    def reservations(self) -> list[Reservation]: ...

    def scheduling(self) -> SchedulingReads: ...


def _sorted_waiting(rows: Iterable[Waiting]) -> list[Waiting]:
    return sorted(rows)  # (-priority, job id) first: unique, so the rest never compares


def _free(nodes: Iterable[Node]) -> PartitionFree:
    total = idle = total_nodes = idle_nodes = out = 0
    for node in nodes:
        total_nodes += 1
        cpus = node.cpus or 0
        total += cpus
        unusable = node.state is NodeState.DOWN or bool(node.flags & {NodeFlag.DRAIN, NodeFlag.NOT_RESPONDING,
                                                                      NodeFlag.FAIL})
        if unusable:
            out += 1
            continue
        free = max(0, cpus - (node.alloc_cpus or 0))
        idle += free
        idle_nodes += free == cpus and cpus > 0
    return PartitionFree(total, idle, total_nodes, idle_nodes, out)


class ClientSources:
    """:class:`WhySources` over a Slurm client (what the action reads; each answer is kept for
    the call: several jobs of one partition read its queue once)."""

    def __init__(self, client: Any, *, visibility: Visibility | None = None,
                 scheduling: SchedulingReads | None = None, now: datetime | None = None) -> None:
        self.client = client
        self.policy = visibility or Visibility()
        self._scheduling = scheduling
        self.now = now or datetime.now(UTC)
        self._waiting: dict[str, list[Waiting]] = {}
        self._partitions: list[Partition] | None = None
        self._reservations: list[Reservation] | None = None
        self._free: dict[str, PartitionFree] = {}

    def waiting(self, partition: str) -> Sequence[Waiting]:
        found = self._waiting.get(partition)
        if found is None:
            jobs = self.client.queue(partitions=[partition], states=["PENDING"])
            found = self._waiting[partition] = _sorted_waiting(
                (-(j.priority or 0), j.job_id, j.user_name, split_reason(j.state_reason)[0]) for j in jobs
                if split_reason(j.state_reason)[0] in _COMPETING)
        return found

    def job_state(self, job_id: int) -> str | None:
        found = [j for j in self.client.queue(job_ids=[job_id]) if j.job_id == job_id]
        return found[0].state.value if found else None

    def nodes(self, nodes: NodeSet) -> list[Node]:
        return list(self.client.nodes(nodes))

    def partitions(self) -> list[Partition]:
        if self._partitions is None:
            self._partitions = self.policy.partitions(self.client.partitions())
        return self._partitions

    def free(self, partition: Partition) -> PartitionFree:
        found = self._free.get(partition.name)
        if found is None:
            found = self._free[partition.name] = _free(self.client.nodes(NodeSet(partition.nodes))) \
                if partition.nodes else PartitionFree()
        return found

    def reservations(self) -> list[Reservation]:
        if self._reservations is None:
            self._reservations = list(self.client.reservations())
        return self._reservations

    def scheduling(self) -> SchedulingReads:
        if self._scheduling is None:
            self._scheduling = cached_scheduling(self.client)
        return self._scheduling


# What a snapshot's rows say about ranking, found once per row (id(fragment) -> (fragment,
# priority, reason code)): unchanged rows are the same bytes from one snapshot to the next.
_PRIORITY = re.compile(rb'"priority":(\d+)')
_REASON = re.compile(rb'"state_reason":"((?:[^"\\]|\\.)*)"')
_ROWS: dict[int, tuple[bytes, int, str | None]] = {}
#: Per snapshot (by id): (weakref to it, partition -> its waiting jobs in order).
_WAITING: dict[int, tuple[weakref.ref[JobTable], dict[str, list[Waiting]]]] = {}
#: Per node snapshot (by id): (weakref to it, partition -> what its nodes have free).
_FREE: dict[int, tuple[weakref.ref[NodeTable], dict[str, PartitionFree]]] = {}
_memo_lock = threading.Lock()


def _row_rank(frag: bytes) -> tuple[int, str | None]:
    found = _ROWS.get(id(frag))
    if found is not None and found[0] is frag:
        return found[1], found[2]
    m = _PRIORITY.search(frag)
    r = _REASON.search(frag)
    priority = int(m[1]) if m else 0
    reason = split_reason(r[1].decode("utf-8", "replace"))[0] if r else None
    _ROWS[id(frag)] = (frag, priority, reason)
    return priority, reason


def _row_item(table: JobTable, row: int) -> Waiting | None:
    """The ranking item of a pending row waiting for resources (None for any other row)."""
    if table.columns["state"][row] != JobState.PENDING.value:
        return None
    priority, reason = _row_rank(table.fragments[row])
    if reason not in _COMPETING:
        return None
    return (-priority, table.keys[row], table.columns["user"][row], reason)


def _parts(table: JobTable, row: int) -> list[str]:
    return (table.columns["partition"][row] or "").split(",")


def _patched(old: JobTable, ranked: dict[str, list[Waiting]], table: JobTable) -> dict[str, list[Waiting]] | None:
    """``ranked`` (``old``'s) brought to ``table`` when both hold the same jobs and few rows
    changed (a refresh that changed a few jobs: their rows are new bytes, the others the same
    objects); None when a full ranking is cheaper."""
    if old.keys is not table.keys and old.keys != table.keys:
        return None
    changed = [i for i, (a, b) in enumerate(zip(old.fragments, table.fragments, strict=True)) if a is not b]
    if len(changed) > max(1000, len(table.keys) // 20):
        return None
    out = {part: list(rows) for part, rows in ranked.items()}
    for row in changed:
        gone = _row_item(old, row)
        if gone is not None:
            for part in _parts(old, row):
                rows = out.get(part, [])
                at = bisect.bisect_left(rows, gone)
                if at < len(rows) and rows[at] == gone:
                    del rows[at]
        came = _row_item(table, row)
        if came is not None:
            for part in _parts(table, row):
                bisect.insort(out.setdefault(part, []), came)
    return out


#: The last snapshot ranked and its ranking: the next one is patched from it when it can be
#: (held, not weakly: the snapshot it replaces is gone by then; its rows are mostly the next
#: one's own bytes, so it costs its columns and changed rows only).
_LAST: list[tuple[JobTable, dict[str, list[Waiting]]]] = []


def _table_waiting(table: JobTable) -> dict[str, list[Waiting]]:
    """Every partition's waiting jobs of a queue snapshot, in order: made once per snapshot,
    patched from the previous snapshot's where the same jobs are queued and few rows changed
    (~5 ms at 100,000 jobs), else one pass over the pending rows and one sort per partition
    (~90 ms at 100,000 jobs whose rows were seen before, ~250 ms when every row is new)."""
    with _memo_lock:
        made = _WAITING.get(id(table))
        if made is not None and made[0]() is table:
            return made[1]
        by_partition = _patched(_LAST[0][0], _LAST[0][1], table) if _LAST else None
        if by_partition is None:
            by_partition = {}
            for row in table.index("state").get(JobState.PENDING.value, ()):
                item = _row_item(table, row)
                if item is not None:
                    for part in _parts(table, row):
                        by_partition.setdefault(part, []).append(item)
            for rows in by_partition.values():
                rows.sort()  # (-priority, job id) first: unique, so the rest never compares
        frags = table.fragments
        if len(_ROWS) > 3 * len(frags) + 1000:  # forget rows no longer read
            keep = {id(f) for f in frags}
            for key in [k for k in _ROWS if k not in keep]:
                del _ROWS[key]
        for key in [k for k, v in _WAITING.items() if v[0]() is None]:
            del _WAITING[key]
        _WAITING[id(table)] = (weakref.ref(table), by_partition)
        _LAST[:] = [(table, by_partition)]
        return by_partition


class SnapshotSources:
    """:class:`WhySources` over the live snapshots: the queue, the nodes and the partitions
    as ``/queue``, ``/nodes`` and ``/partitions`` serve them (hidden partitions already cut);
    reservations and the scheduler's view through the client, kept a while."""

    def __init__(self, client: Any, jobs: JobTable, nodes: NodeTable, partitions: Sequence[Partition], *,
                 visibility: Visibility | None = None, now: datetime | None = None) -> None:
        self.client = client
        self.jobs = jobs
        self.node_table = nodes
        self.policy = visibility or Visibility()
        self._partitions = self.policy.partitions(partitions)
        self.now = now or datetime.now(UTC)

    def waiting(self, partition: str) -> Sequence[Waiting]:
        return _table_waiting(self.jobs).get(partition, [])

    def job_state(self, job_id: int) -> str | None:
        keys = self.jobs.keys
        at = bisect.bisect_left(keys, job_id)
        if at < len(keys) and keys[at] == job_id:
            state: str = self.jobs.columns["state"][at]
            return state
        return None

    def record(self, job_id: int) -> list[Job]:
        """The queue records ``job_id`` names: its own row, else its array's or het job's."""
        keys = self.jobs.keys
        at = bisect.bisect_left(keys, job_id)
        if at < len(keys) and keys[at] == job_id:
            return self.jobs.jobs([at])
        return []

    def nodes(self, nodes: NodeSet) -> list[Node]:
        table = self.node_table
        return [Node.model_validate_json(table.fragments[r]) for r in table.rows_of(nodes)]

    def partitions(self) -> list[Partition]:
        return self._partitions

    def free(self, partition: Partition) -> PartitionFree:
        table = self.node_table
        with _memo_lock:
            made = _FREE.get(id(table))
            if made is None or made[0]() is not table:
                for key in [k for k, v in _FREE.items() if v[0]() is None]:
                    del _FREE[key]
                made = _FREE[id(table)] = (weakref.ref(table), {})
            found = made[1].get(partition.name)
        if found is None:
            rows = table.rows_where("partition", {partition.name})
            found = _free(Node.model_validate_json(table.fragments[r]) for r in rows)
            with _memo_lock:
                made[1][partition.name] = found
        return found

    def reservations(self) -> list[Reservation]:
        return _kept_reservations(self.client)

    def scheduling(self) -> SchedulingReads:
        return cached_scheduling(self.client)


_RESERVATIONS: weakref.WeakKeyDictionary[object, tuple[float, list[Reservation]]] = weakref.WeakKeyDictionary()
#: Seconds a client's reservations are kept for the explanations (one ``scontrol show
#: reservation`` per interval, not per request).
RESERVATIONS_TTL = 15.0


def _kept_reservations(client: Any) -> list[Reservation]:
    now = time.monotonic()
    with _memo_lock:
        found = _RESERVATIONS.get(client)
    if found is not None and found[0] > now:
        return found[1]
    value = list(client.reservations())
    with _memo_lock:
        _RESERVATIONS[client] = (now + RESERVATIONS_TTL, value)
    return value


# -- the explanation ----------------------------------------------------------------------------------


def _text_time(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if value is not None else "unknown"


def _span(value: timedelta | None) -> str:
    if value is None:
        return "no limit"
    seconds = max(0, int(value.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{hours}:{minutes:02d}:{secs:02d}"


def _in(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 1:
        return "under a minute"
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{days} d"] if days else []
    parts += [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes and not days else []
    return " ".join(parts)


def _plural(n: int | float, word: str) -> str:
    return f"{n:g} {word}" + ("" if n == 1 else "s")


@dataclass
class _Answer:
    job: Job
    info: ReasonInfo
    detail: str | None
    facts: list[Fact] = field(default_factory=list)
    owner_can: list[str] = field(default_factory=list)
    summary: str | None = None

    def note(self, text: str) -> None:
        self.facts.append(NoteFact(text=text))


def _read(answer: _Answer, what: str, read: Callable[[], Any]) -> Any:
    """``read()``, or None with a note when Slurm (or the source) cannot tell."""
    try:
        return read()
    except SlurmtowerError as exc:
        answer.note(f"{what} could not be read: {exc.message}")
    except Exception:  # a source's bug must not cost the rest of the answer
        log.exception("why: reading %s failed", what)
        answer.note(f"{what} could not be read")
    return None


def explain(job: Job, src: WhySources, *, show: Callable[[str | None], bool] = lambda _u: True) -> JobWhy:
    """Why ``job`` (one queue record) waits, read through ``src``; ``show(user)`` says whether
    a job of ``user`` may be named among the jobs ahead (:func:`names_shown`)."""
    code, detail = split_reason(job.state_reason)
    info = reason_info(code)
    answer = _Answer(job, info, detail)
    pending = job.state is JobState.PENDING
    if not pending:
        where = f" on {job.nodes}" if job.nodes else ""
        since = f" since {_text_time(job.start_time)}" if job.start_time and job.state is JobState.RUNNING else ""
        answer.summary = f"Job {job.job_key} is {job.state.value}{since}{where}: it does not wait."
        if code and code != "None":
            answer.summary += f" Slurm's last reason: {code} ({info.sentence(_values(job)).rstrip('.')})."
        return _result(answer, src, pending=False, category="not_pending")
    category = info.category
    handlers: dict[str, Callable[[_Answer, WhySources], None]] = {
        "held": _held, "dependency": _dependency, "begin_time": _begin_time, "nodes": _nodes,
        "reservation": _reservation, "partition": _partition, "account": _partition, "qos": _partition,
        "limit": _limit,
    }
    handler = handlers.get(category)
    if handler is not None:
        handler(answer, src)
    if category in ("priority", "resources", "waiting", "unknown", "scheduler", "licenses", "burst_buffer",
                    "array", "power"):
        _queue_facts(answer, src, show)
    elif category in ("nodes", "reservation", "partition"):
        _start(answer, src)
    return _result(answer, src, pending=True, category=category)


def _values(job: Job) -> dict[str, str | None]:
    return {"qos": job.qos, "account": job.account, "partition": job.partition, "user": job.user_name}


def _result(answer: _Answer, src: WhySources, *, pending: bool, category: str) -> JobWhy:
    job, info = answer.job, answer.info
    summary = answer.summary or info.sentence(_values(job))
    return JobWhy(job_id=job.job_id, job_key=job.job_key, user_name=job.user_name, account=job.account,
                  partition=job.partition, qos=job.qos, state=job.state.value, pending=pending,
                  reason=info.code if job.state_reason else None, reason_detail=answer.detail, known=info.known,
                  category=category, summary=summary, facts=answer.facts, owner_can=answer.owner_can,
                  read_at=src.now)


# -- held, dependency, begin time -----------------------------------------------------------------------

def _held(answer: _Answer, src: WhySources) -> None:
    job, code = answer.job, answer.info.code
    if code == "JobHeldUser":
        answer.facts.append(HoldFact(text=f"Held by its owner ({job.user_name}) or submitted held: its owner, an "
                                          "operator or an admin may release it.", held_by="user",
                                     release_by=["owner", "operator", "admin"], link=f"/ui/jobs/{job.job_id}"))
        answer.owner_can.append(f"Release it: scontrol release {job.job_key} (or slurmtower run slurm.job.release "
                                f"jobids={job.job_key}).")
    else:
        held_by = "requeue" if code == "JobHoldMaxRequeue" else "admin"
        answer.facts.append(HoldFact(text="Held by an operator or an admin: only an operator or an admin may "
                                          "release it.", held_by=held_by, release_by=["operator", "admin"],
                                     link=f"/ui/jobs/{job.job_id}"))
        answer.owner_can.append("Ask an operator or an admin to release it (a user cannot release an admin hold).")


_DEPENDENCY = re.compile(r"(?P<cond>[a-z_]+)(?::(?P<ids>[^(]*))?\((?P<state>[a-z]+)\)")
_CONDITIONS = {"after": "to start (or be cancelled)", "afterany": "to end", "afterok": "to end successfully",
               "afternotok": "to fail", "aftercorr": "(the task of the same index) to end successfully",
               "afterburstbuffer": "to end and its burst buffer to be staged out",
               "singleton": "the other jobs of its user and name to end"}


def _dependency(answer: _Answer, src: WhySources) -> None:
    job = answer.job
    text = job.dependency or ""
    found = list(_DEPENDENCY.finditer(text))
    if not found:
        answer.note(f"Slurm gives no readable dependency for job {job.job_key} ({text or 'none'}).")
        return
    first: str | None = None
    for m in found[:20]:
        cond, state = m["cond"], m["state"]
        satisfied = {"unfulfilled": False, "fulfilled": True, "failed": False}.get(state)
        ids = [int(d[0]) for part in (m["ids"] or "").split(":") if (d := re.match(r"\d+", part))]
        if not ids:
            answer.facts.append(DependencyFact(text=f"{cond}: waits for {_CONDITIONS.get(cond, cond)} ({state}).",
                                               condition=cond, satisfied=satisfied))
            continue
        for dep in ids:
            live = _read(answer, f"the state of job {dep}", lambda d=dep: src.job_state(d))  # type: ignore[misc]
            where = live or "no longer in slurmctld (ended)"
            failed = " Slurm says it can no longer be met." if state == "failed" else ""
            line = f"Waits for job {dep} {_CONDITIONS.get(cond, 'as ' + cond)} ({cond}); job {dep} is {where}.{failed}"
            first = first or line
            answer.facts.append(DependencyFact(text=line, job_id=dep, condition=cond, state=live,
                                               satisfied=satisfied, link=f"/ui/jobs/{dep}"))
    if first is not None:
        answer.summary = f"Job {job.job_key} {first[0].lower()}{first[1:]}"
    answer.owner_can.append(f"If the jobs it waits for will not end as it needs, change or drop the dependency: "
                            f"scontrol update jobid={job.job_key} dependency=<new> (empty: none), or cancel it.")


def _begin_time(answer: _Answer, src: WhySources) -> None:
    job = answer.job
    begin = job.eligible_time
    wait = begin - src.now if begin is not None else None
    when = f"{_text_time(begin)} (in {_in(wait)})" if wait is not None and wait.total_seconds() > 0 else \
        _text_time(begin)
    answer.facts.append(BeginTimeFact(text=f"May not start before {when}.", begin_time=begin,
                                      wait=wait if wait is not None and wait.total_seconds() > 0 else None))
    answer.summary = f"Job {job.job_key} asked not to start before {when}."
    answer.owner_can.append(f"Let it start now: scontrol update jobid={job.job_key} begintime=now.")


# -- nodes, reservation, partition ---------------------------------------------------------------------

_UNAVAILABLE = re.compile(r"UnavailableNodes:(\S+)")


def _node_fact(node: Node) -> NodeFact:
    holders = [part.holder for part in reason_holders(node.reason, node.reason_set_by_user) if part.holder]
    why = f": {node.reason}" if node.reason else ""
    by = f" (set by {node.reason_set_by_user}" + (f", {_text_time(node.reason_changed_at)})"
                                                 if node.reason_changed_at else ")") \
        if node.reason_set_by_user else ""
    return NodeFact(text=f"Node {node.name} is {node.state_text}{why}{by}.", node=node.name, state=node.state_text,
                    reason=node.reason, set_by=node.reason_set_by_user, since=node.reason_changed_at,
                    holders=holders, link=f"/ui/nodes/{node.name}")


def _nodes(answer: _Answer, src: WhySources) -> None:
    job = answer.job
    names: NodeSet | None = None
    m = _UNAVAILABLE.search(answer.detail or "")
    if m is not None:
        names = _read(answer, "the unavailable nodes", lambda: NodeSet(m[1].rstrip(",")))
    if names is None:
        start = _start_of(answer, src)
        asked = start.required_nodes if start is not None else None
        if asked:
            names = _read(answer, "the nodes it asks for", lambda: NodeSet(asked))
    if not names:
        if answer.detail:
            answer.note(f"Slurm adds: {answer.detail}.")
        return
    shown = NodeSet(list(names)[:NODES_SHOWN])
    found = _read(answer, f"nodes {shown}", lambda: src.nodes(shown)) or []
    facts = [_node_fact(n) for n in found]
    answer.facts.extend(facts)
    if len(names) > NODES_SHOWN:
        answer.note(f"{len(names) - NODES_SHOWN} more unavailable nodes are not described.")
    if facts:
        first = facts[0]
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        answer.summary = (f"Job {job.job_key} asks for node {first.node}{more}, which is {first.state}"
                          + (f": {first.reason}" if first.reason else "") + ".")
    answer.owner_can.append(f"Stop asking for {names}: scontrol update jobid={job.job_key} nodelist= "
                            "(any node of its partition), or wait until an operator returns it to service.")


def _reservation(answer: _Answer, src: WhySources) -> None:
    job = answer.job
    name = job.reservation
    if not name:
        answer.note("Slurm names no reservation for the job.")
        return
    found = _read(answer, "the reservations", src.reservations)
    if found is None:
        return
    resv = next((r for r in found if r.name == name), None)
    if resv is None:
        answer.facts.append(ReservationFact(text=f"Reservation {name} does not exist (any more).", name=name,
                                            exists=False, link="/ui/reservations"))
        answer.summary = f"Job {job.job_key} asks for reservation {name}, which does not exist (any more)."
        answer.owner_can.append(f"Drop the reservation: scontrol update jobid={job.job_key} reservation=")
        return
    now = src.now
    active = resv.start_time is not None and resv.start_time <= now and (resv.end_time is None or now < resv.end_time)
    who = ", ".join(resv.users + resv.accounts) or "everyone"
    when = "is active" if active else f"starts at {_text_time(resv.start_time)}" + (
        f" (in {_in(resv.start_time - now)})" if resv.start_time is not None and resv.start_time > now else "")
    text = f"Reservation {name} {when}, until {_text_time(resv.end_time)}, on {resv.nodes or 'no node'}, for {who}."
    answer.facts.append(ReservationFact(text=text, name=name, active=active, start_time=resv.start_time,
                                        end_time=resv.end_time, nodes=resv.nodes, users=resv.users,
                                        accounts=resv.accounts, flags=resv.flags, link="/ui/reservations"))
    answer.summary = f"Job {job.job_key} waits for reservation {name}, which {when}." if not active else \
        f"Job {job.job_key} runs in reservation {name}, which is active: its nodes are in use."
    answer.owner_can.append(f"Wait for the reservation, or run outside it: scontrol update jobid={job.job_key} "
                            "reservation=")


def _partition_of(answer: _Answer, src: WhySources, name: str) -> Partition | None:
    found = _read(answer, "the partitions", src.partitions)
    return next((p for p in found or () if p.name == name), None)


def _partition(answer: _Answer, src: WhySources) -> None:
    job, code = answer.job, answer.info.code
    names = [p for p in (job.partition or "").split(",") if p]
    for name in names[:4]:
        part = _partition_of(answer, src, name)
        if part is None:
            answer.note(f"Partition {name} is not known (hidden, or gone).")
            continue
        limits = [f"state {part.state}", f"time limit {_span(part.max_time)}"]
        if part.max_nodes is not None:
            limits.append(f"at most {_plural(part.max_nodes, 'node')} a job")
        asked = f"; the job asks for {_span(job.time_limit)}" if job.time_limit is not None else ""
        asked += f" on {_plural(job.node_count, 'node')}" if job.node_count else ""
        answer.facts.append(PartitionFact(
            text=f"Partition {name}: {', '.join(limits)}{asked}.", partition=name, state=part.state,
            max_time=part.max_time, max_nodes=part.max_nodes, min_nodes=part.min_nodes, asked_time=job.time_limit,
            asked_nodes=job.node_count, allow_accounts=part.allow_accounts, allow_qos=part.allow_qos,
            link="/ui/partitions"))
        if code == "PartitionTimeLimit" and part.max_time is not None and job.time_limit is not None:
            answer.summary = (f"Job {job.job_key} asks for {_span(job.time_limit)}; partition {name} allows at most "
                              f"{_span(part.max_time)}.")
            answer.owner_can.append(f"Ask for at most {_span(part.max_time)}: scontrol update jobid={job.job_key} "
                                    f"timelimit={_span(part.max_time)}.")
        elif code in ("PartitionDown", "PartitionInactive"):
            answer.summary = f"Partition {name} is {part.state}: no job starts there until an operator sets it UP."
    _elsewhere(answer, src)


def _elsewhere(answer: _Answer, src: WhySources) -> None:
    """Other partitions the job would fit in now (up, long enough, free CPUs)."""
    job = answer.job
    mine = set((job.partition or "").split(","))
    found = _read(answer, "the partitions", src.partitions) or []
    for part in found:
        if part.name in mine or part.state.upper() != "UP":
            continue
        if part.allow_accounts is not None and job.account not in part.allow_accounts:
            continue
        if job.account in part.deny_accounts or (job.qos and job.qos in part.deny_qos):
            continue
        if job.time_limit is not None and part.max_time is not None and part.max_time < job.time_limit:
            continue
        free = _read(answer, f"the nodes of partition {part.name}", lambda p=part: src.free(p))  # type: ignore[misc]
        if free is None or free.idle_cpus < (job.cpus or 1):
            continue
        answer.owner_can.append(f"Move it to partition {part.name} ({_plural(free.idle_cpus, 'CPU')} idle now, time "
                                f"limit {_span(part.max_time)}): scontrol update jobid={job.job_key} "
                                f"partition={part.name}.")
        if len(answer.owner_can) >= 4:
            return


# -- limits ----------------------------------------------------------------------------------------------

#: Limit name -> what it counts (singular, plural).
_LIMIT_WORDS = {"GrpJobs": ("running job", "running jobs"), "MaxJobsPU": ("running job", "running jobs"),
                "MaxJobsPA": ("running job", "running jobs"), "MaxJobs": ("running job", "running jobs"),
                "GrpSubmitJobs": ("queued or running job", "queued and running jobs"),
                "MaxSubmitJobsPU": ("queued or running job", "queued and running jobs"),
                "MaxSubmitJobsPA": ("queued or running job", "queued and running jobs"),
                "MaxSubmitJobs": ("queued or running job", "queued and running jobs"),
                "GrpWall": ("minute of wall time", "minutes of wall time"), "MaxWallPJ": ("minute", "minutes"),
                "GrpJobsAccrue": ("job accruing priority", "jobs accruing priority")}
_TRES_NOUNS = {"mem": ("MiB of memory", "MiB of memory"), "cpu": ("CPU", "CPUs"), "node": ("node", "nodes")}
_PER_WORDS = {"all": "", "user": " per user", "account": " per account", "job": " per job", "node": " per node"}


def _what(limit: Limit, count: float | None = None) -> str:
    """What ``limit`` counts, for ``count`` of it (plural unless 1)."""
    if limit.name in _LIMIT_WORDS:
        one, many = _LIMIT_WORDS[limit.name]
    elif "Mins" in limit.name:
        one = many = f"{limit.tres or 'resource'}-minutes"
    else:
        one, many = _TRES_NOUNS.get(limit.tres or "", (limit.tres or "resource", limit.tres or "resources"))
    return one if count == 1 else many


def _asked(job: Job, limit: Limit) -> float | None:
    """What the job asks for, against a per-job (or per-node) limit."""
    minutes = job.time_limit.total_seconds() / 60 if job.time_limit is not None else None
    if limit.name == "MaxWallPJ":
        return minutes
    amount: float | None = {"cpu": job.cpus, "node": job.node_count, "mem": job.memory_mib}.get(limit.tres or "")
    if amount is None and limit.tres == "mem" and job.memory_per_node_mib is not None:
        amount = job.memory_per_node_mib * (job.node_count or 1)
    if amount is not None and "Mins" in limit.name:
        return amount * minutes if minutes is not None else None
    return amount


def _matches(limit: Limit, of: LimitOf) -> bool:
    if limit.name != of.key:
        return False
    if of.tres is None:
        return limit.tres is None
    return limit.tres == of.tres or (limit.tres or "").startswith(f"{of.tres}/")


def _limit_fact(scope: str, owner: str, per: str, limit: Limit, job: Job, whose: str) -> LimitFact:
    what = _what(limit, limit.value)
    asked = _asked(job, limit) if per in ("job", "node") else None
    value = "no limit of" if limit.value is None else f"{limit.value:g}"
    owner_word = f"QOS {owner}" if scope == "qos" else f"association {owner}"
    text = f"{owner_word} allows {value} {what}{_PER_WORDS.get(per, '')} ({limit.name}" + \
        (f" {limit.tres}" if limit.tres else "") + ")"
    if asked is not None:
        text += f"; the job asks for {asked:g}"
        reached = limit.value is not None and (asked < limit.value if limit.name.startswith("Min") else
                                               asked > limit.value)
    else:
        reached = limit.reached
        if limit.used is not None:
            text += f"; {whose} use{'s' if whose != 'its jobs' else ''} {limit.used:g} now"
    return LimitFact(text=text + ".", scope="qos" if scope == "qos" else "association", owner=owner,
                     per=per,  # type: ignore[arg-type]
                     name=limit.name, tres=limit.tres, value=limit.value, used=limit.used, asked=asked, reached=reached,
                     link="/ui/fairshare" if scope == "association" else None)


def _chain(state: LimitsState, job: Job) -> list[tuple[str, list[Limit]]]:
    """The job's associations from its own up to root: (name, limits)."""
    out: list[tuple[str, list[Limit]]] = []
    assocs = state.associations
    own = [a for a in assocs if a.account == job.account and a.user == job.user_name
           and a.partition in (job.partition, None)]
    own.sort(key=lambda a: a.partition is None)  # a partition's association first
    if own:
        out.append((f"{own[0].account}/{own[0].user}", own[0].limits))
    accounts = {a.account: a for a in assocs if a.user is None}
    seen: set[str] = set()
    name = job.account
    while name is not None and name in accounts and name not in seen:
        seen.add(name)
        out.append((name, accounts[name].limits))
        name = accounts[name].parent_account
    return out


def _limit_facts(state: LimitsState, job: Job, of: LimitOf) -> list[LimitFact]:
    if of.scope == "qos":
        qos = state.qos.get(job.qos or "")
        if qos is None:
            return []
        if of.per == "user":
            pool = qos.per_user.get(str(job.user_id), []) if job.user_id is not None else []
            whose = f"user {job.user_name}"
        elif of.per == "account":
            pool = qos.per_account.get(job.account or "", [])
            whose = f"account {job.account}"
        else:
            pool, whose = qos.limits, "its jobs"
        return [_limit_fact("qos", qos.name, of.per, lim, job, whose) for lim in pool if _matches(lim, of)][:4]
    found: list[LimitFact] = []
    for name, limits in _chain(state, job):
        for lim in limits:
            if _matches(lim, of) and lim.value is not None:
                whose = f"user {job.user_name}" if of.per == "user" else "its jobs"
                found.append(_limit_fact("association", name, of.per, lim, job, whose))
    # The one at its limit first: the association that blocks the job.
    found.sort(key=lambda f: not f.reached)
    return found[:4]


def _limit(answer: _Answer, src: WhySources) -> None:
    job, of = answer.job, answer.info.limit
    state: LimitsState | None = _read(answer, "the QOS and association limits",
                                      lambda: src.scheduling().limits())
    if state is None:
        return
    facts: list[LimitFact]
    if of is not None:
        facts = _limit_facts(state, job, of)
    else:  # a generic limit reason (AccountingPolicy, QOSJobLimit ...): every limit reached
        facts = []
        qos = state.qos.get(job.qos or "")
        if qos is not None:
            mine = qos.per_user.get(str(job.user_id), []) + qos.per_account.get(job.account or "", [])
            facts += [_limit_fact("qos", qos.name, "all", lim, job, "its jobs") for lim in qos.limits + mine
                      if lim.reached]
        for name, limits in _chain(state, job):
            facts += [_limit_fact("association", name, "all", lim, job, "its jobs") for lim in limits if lim.reached]
    if not facts:
        answer.note("No such limit is set on the job's QOS or associations now (it may have changed since Slurm "
                    "gave the reason).")
        return
    answer.facts.extend(facts)
    answer.summary = f"{answer.info.sentence(_values(job)).rstrip('.')}: {facts[0].text}"
    if of is not None and of.per in ("job", "node"):
        first = facts[0]
        if first.name == "MaxWallPJ" and first.value is not None:
            answer.owner_can.append(f"Ask for at most {first.value} minutes: scontrol update jobid={job.job_key} "
                                    f"timelimit={first.value}.")
        else:
            answer.owner_can.append(f"Ask for less (at most {first.value} {_what_limit(first)}), or use another QOS or "
                                    "account whose limits allow it.")
    else:
        owner = "QOS" if of is None or of.scope == "qos" else "account"
        answer.owner_can.append(f"It starts when running jobs of the {owner} end; or submit it with another "
                                f"{'QOS' if owner == 'QOS' else 'account'} you may use (--{owner.lower()}=...).")


def _what_limit(fact: LimitFact) -> str:
    return _what(Limit(name=fact.name, tres=fact.tres, value=fact.value, used=fact.used), fact.value)


# -- the queue: priority, rank, start, resources -------------------------------------------------------

def _start_of(answer: _Answer, src: WhySources,
              pending: Future[list[StartEstimate]] | None = None) -> StartEstimate | None:
    job = answer.job
    found = _read(answer, "the expected start (squeue --start)",
                  pending.result if pending is not None else lambda: src.scheduling().start_estimates([job.job_id]))
    return next((s for s in found or () if s.job_id == job.job_id), None)


def _start(answer: _Answer, src: WhySources,
           pending: Future[list[StartEstimate]] | None = None) -> StartEstimate | None:
    start = _start_of(answer, src, pending)
    if start is not None and start.start_time is not None:
        nodes = f" on {start.scheduled_nodes}" if start.scheduled_nodes else ""
        answer.facts.append(StartFact(text=f"The scheduler expects it to start at {_text_time(start.start_time)}"
                                           f"{nodes}.", start_time=start.start_time,
                                      scheduled_nodes=start.scheduled_nodes))
    elif start is not None:
        answer.facts.append(StartFact(text="The scheduler gives no expected start yet.", start_time=None))
    return start


def _priority(answer: _Answer, src: WhySources) -> PriorityFactors | None:
    job = answer.job
    sched = _read(answer, "the scheduler's view", src.scheduling)
    if sched is None:
        return None
    factors: list[PriorityFactors] | None = _read(answer, "the priority factors (sprio)",
                                                  lambda: sched.priority_factors([job.job_id]))
    if factors is None:
        return None
    parts = [p for p in (job.partition or "").split(",") if p]
    mine = [f for f in factors if f.job_id == job.job_id]
    chosen = next((f for f in mine if f.partition in parts[:1]), mine[0] if mine else None)
    weights = _read(answer, "the priority weights (sprio -w)", sched.priority_weights)
    if chosen is None:
        answer.note("sprio gives no priority factors for it (held, or no longer pending).")
        return None
    top = sorted(chosen.weighted.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} {v}" for k, v in top if v) or "none"
    nice = f", nice {chosen.nice}" if chosen.nice else ""
    answer.facts.append(PriorityFact(text=f"Priority {chosen.priority}: {shown}{nice}.", priority=chosen.priority,
                                     weighted=chosen.weighted, normalized=chosen.normalized,
                                     weights=weights.weights if weights is not None else {}, nice=chosen.nice,
                                     tres=chosen.tres))
    return chosen


def _place(waiting: Sequence[Waiting], job: Job, priority: int | None) -> int:
    """The job's place in ``waiting``: where the list has it (its priority as the list was read
    with it: the job's own record, from the same read; else found by id, the list being another
    read), else where its priority (sprio's, fresher) puts it."""
    own = (-(job.priority or 0), job.job_id)
    at = bisect.bisect_left(waiting, own, key=lambda w: (w[0], w[1]))
    if at < len(waiting) and waiting[at][1] == job.job_id:
        return at
    found = next((i for i, w in enumerate(waiting) if w[1] == job.job_id), None)
    if found is not None:
        return found
    me = (-(priority if priority is not None else job.priority or 0), job.job_id)
    return bisect.bisect_left(waiting, me, key=lambda w: (w[0], w[1]))


def _rank(answer: _Answer, src: WhySources, show: Callable[[str | None], bool],
          priority: int | None) -> RankFact | None:
    job = answer.job
    part = (job.partition or "").split(",")[0]
    if not part:
        return None
    waiting = _read(answer, f"the jobs waiting in partition {part}", lambda: src.waiting(part))
    if waiting is None:
        return None
    at = _place(waiting, job, priority)
    inside = at < len(waiting) and waiting[at][1] == job.job_id
    total = len(waiting) if inside else len(waiting) + 1
    ahead_jobs: list[AheadJob] = []
    unnamed = 0
    for prio, job_id, user, reason in waiting[:at]:
        if len(ahead_jobs) >= AHEAD_SHOWN:
            break
        if show(user):
            ahead_jobs.append(AheadJob(job_id=job_id, user_name=user, priority=-prio, reason=reason))
        else:
            unnamed += 1
    unnamed += max(0, at - len(ahead_jobs) - unnamed)  # and those past the first AHEAD_SHOWN
    text = (f"It is next in line of {_plural(total, 'job')} waiting for resources in partition {part}." if at == 0
            else f"{_plural(at, 'job')} of a higher priority {'wait' if at != 1 else 'waits'} ahead of it in "
                 f"partition {part} ({at + 1} of {total}).")
    fact = RankFact(text=text, partition=part, rank=at + 1, waiting=total, ahead=at, ahead_jobs=ahead_jobs,
                    unnamed_ahead=unnamed, link=f"/ui/jobs?partition={part}&state=PENDING")
    answer.facts.append(fact)
    return fact


def _resources(answer: _Answer, src: WhySources) -> PartitionFree | None:
    job = answer.job
    name = (job.partition or "").split(",")[0]
    part = _partition_of(answer, src, name) if name else None
    if part is None:
        return None
    free: PartitionFree | None = _read(answer, f"the nodes of partition {name}", lambda: src.free(part))
    if free is None:
        return None
    asked = f"{_plural(job.cpus or 1, 'CPU')} on {_plural(job.node_count or 1, 'node')}"
    answer.facts.append(ResourcesFact(
        text=f"It asks for {asked} for {_span(job.time_limit)}; partition {name} has {free.idle_cpus} of "
             f"{_plural(free.total_cpus, 'CPU')} idle ({free.idle_nodes} of {_plural(free.total_nodes, 'node')} "
             f"wholly idle, {free.out_nodes} out of service).",
        partition=name, asked_cpus=job.cpus, asked_nodes=job.node_count, asked_memory_mib=job.memory_mib,
        asked_time=job.time_limit, total_cpus=free.total_cpus, idle_cpus=free.idle_cpus, total_nodes=free.total_nodes,
        idle_nodes=free.idle_nodes, out_nodes=free.out_nodes, link="/ui/partitions"))
    return free


def _queue_facts(answer: _Answer, src: WhySources, show: Callable[[str | None], bool]) -> None:
    job, code = answer.job, answer.info.code
    # squeue --start meanwhile: two commands at once, not one after the other (each ~10 ms)
    pending = _POOL.submit(lambda: src.scheduling().start_estimates([job.job_id]))
    factors = _priority(answer, src)
    rank = _rank(answer, src, show, factors.priority if factors is not None else None)
    start = _start(answer, src, pending)
    free = _resources(answer, src)
    where = f" in partition {rank.partition}" if rank is not None else ""
    when = f"; the scheduler expects it to start at {_text_time(start.start_time)}" \
        if start is not None and start.start_time is not None else ""
    if code == "Priority" and rank is not None:
        answer.summary = (f"{_plural(rank.ahead, 'job')} of a higher priority "
                          f"{'wait' if rank.ahead != 1 else 'waits'} ahead of job {job.job_key}{where}{when}.")
    elif code == "Resources":
        idle = f" ({free.idle_cpus} of {_plural(free.total_cpus, 'CPU')} idle)" if free is not None else ""
        answer.summary = (f"Job {job.job_key} is next in line{where}, but the resources it asks for are in use"
                          f"{idle}{when}.")
    if code in ("Priority", "Resources") and job.time_limit is not None and free is not None and free.idle_cpus:
        answer.owner_can.append(f"A shorter time limit (now {_span(job.time_limit)}) lets the backfill scheduler "
                                "start it in the gap before the jobs ahead need the idle CPUs: scontrol update "
                                f"jobid={job.job_key} timelimit=<shorter>.")
    if code in ("Priority", "Resources"):
        _elsewhere(answer, src)


# -- the action ----------------------------------------------------------------------------------------------

def _values_of(item: str | list[str]) -> list[str]:
    items = item if isinstance(item, list) else [item]
    return [v.strip() for part in items for v in part.split(",") if v.strip()]


def _covers(ref: JobRef, job: Job) -> bool:
    """``job`` (a queue record) is one ``ref`` names."""
    if ref.kind == "job":
        return ref.job_id in (job.job_id, job.array_job_id, job.het_job_id)
    if ref.kind == "het":
        return job.het_job_id == ref.job_id and job.job_id == ref.job_id + (ref.het_offset or 0)
    if job.array_job_id != ref.job_id:
        return False
    if job.array_task_id is not None:
        return ref.overlaps([(job.array_task_id, job.array_task_id)])
    return any(ref.overlaps([(r.start, r[-1])]) for r in array_task_ranges(job.array_task_str or "") if r)


def _records(run: Run, p: JobWhyParams) -> list[Job]:
    """The queue records ``p`` names, as the caller may see them (pending ones first per id)."""
    policy = run.visibility()
    if p.jobids is not None:
        refs = parse_job_ids(p.jobids)
        rows = policy.jobs(run.client.queue(job_ids=sorted({r.job_id for r in refs})))
        out: list[Job] = []
        unknown = []
        for ref in refs:
            mine = [j for j in rows if _covers(ref, j)]
            if not mine:
                unknown.append(ref.text)
            out += [j for j in mine if j not in out]
        if unknown:
            raise NotFound(f"unknown job(s): {', '.join(unknown[:10])} (not in the queue)", param="jobids")
        return out
    crit = {k: _values_of(v) for k, v in (p.criterias or {}).items()}
    if run.role == USER:
        others = [u for u in crit.get("user", []) if u != run.principal]
        if others:
            raise PermissionDenied(f"{run.principal} may see why only their own jobs wait, not those of "
                                   f"{', '.join(others[:5])}", param="criterias.user")
        crit["user"] = [run.principal]
    nodes = NodeSet(",".join(crit["nodes"])) if "nodes" in crit else None
    states = [s.upper() for s in crit.get("state", ["PENDING"])]
    rows = policy.jobs(run.client.queue(users=crit.get("user", ()), accounts=crit.get("account", ()),
                                        partitions=crit.get("partition", ()), states=states,
                                        names=crit.get("name", ()), nodes=nodes))
    if len(rows) > MAX_WHY_JOBS:
        raise InvalidInput(f"criterias select {len(rows)} jobs, more than {MAX_WHY_JOBS} in one call: narrow the "
                           "filter", param="criterias")
    return rows


@action("slurm.job.why", JobWhyParams, mutating=False, permission="read", own_jobs=True)
def job_why(run: Run, p: JobWhyParams) -> dict[str, dict[str, Any]]:
    """Why jobs are pending: the reason in plain words, what blocks them, what their owner can change."""
    jobs = _records(run, p)
    check_access(run.role, run.principal, jobs)
    policy = run.visibility()
    src = ClientSources(run.client, visibility=policy)
    # One sprio and one squeue --start for every job of the call (kept for the call).
    sched = _prefetch(src, [j.job_id for j in jobs if j.state is JobState.PENDING])
    src._scheduling = sched
    viewer = _RunViewer(run.principal, run.role) if run.role is not None else None
    show = names_shown(policy, viewer)
    return {j.job_key: explain(j, src, show=show).model_dump(mode="json") for j in jobs}


@dataclass(frozen=True)
class _RunViewer:
    name: str
    role: str


class _Prefetched:
    """The scheduler's answers for a whole call, read once."""

    def __init__(self, reads: SchedulingReads, job_ids: Sequence[int]) -> None:
        self.reads = reads
        self.ids = list(job_ids)
        self._factors: list[PriorityFactors] | None = None
        self._starts: list[StartEstimate] | None = None
        self._limits: LimitsState | None = None

    def priority_factors(self, job_ids: Sequence[int] = ()) -> list[PriorityFactors]:
        if self._factors is None:
            self._factors = self.reads.priority_factors(self.ids or list(job_ids))
        return [f for f in self._factors if not job_ids or f.job_id in job_ids]

    def priority_weights(self) -> Any:
        return self.reads.priority_weights()

    def start_estimates(self, job_ids: Sequence[int] = ()) -> list[StartEstimate]:
        if self._starts is None:
            self._starts = self.reads.start_estimates(self.ids or list(job_ids))
        return [s for s in self._starts if not job_ids or s.job_id in job_ids]

    def shares(self) -> Any:
        return self.reads.shares()

    def limits(self) -> LimitsState:
        if self._limits is None:
            self._limits = self.reads.limits()
        return self._limits


def _prefetch(src: ClientSources, job_ids: Sequence[int]) -> SchedulingReads:
    return _Prefetched(src.scheduling(), job_ids)  # type: ignore[return-value]


def why_from_snapshot(job_id: int, src: SnapshotSources, *, policy: Visibility, viewer: Viewer | None,
                      role: str | None, name: str) -> JobWhy:
    """The explanation of ``job_id``'s record in the queue snapshot (``GET /jobs/{id}/why``).

    Raises:
        NotFound: the snapshot has no such job (or it is in a hidden partition).
        PermissionDenied: the ``user`` role asks about another user's job (:func:`check_access`).
    """
    found = src.record(job_id)
    if not found:
        raise NotFound(f"job {job_id} is not in the queue (it ended or never was; a job submitted in the last "
                       "seconds is there once the queue is read again)", param="job_id")
    check_access(role, name, found)
    return explain(found[0], src, show=names_shown(policy, viewer))


