"""The job queue and the node states in squeue's and sinfo's compact text forms.

Why text: at 20,000 jobs 22.05's ``squeue --json`` takes 1.9-2.6 s, prints 62 MB and peaks
at 936 MB; the text form of the fields the live views need takes 0.13 s. ``sinfo --json``
at 5,000 nodes prints 6.2 MB every poll, while the node states the sensor compares fold
into a few lines of ``sinfo -O`` (nodes that share a state and reason share a line).

Each row is one line of fields separated by ``\\x1f`` (ASCII unit separator: job names and
reasons may hold ``|``, blanks or commas, never control characters). Neither form has a
"changed since" option on any release: the callers keep the last output and reparse only
the lines that changed.

What each release offers to learn what changed, and what slurmctld pays for it (one
``REQUEST_JOB_INFO`` packs every job record, ~4-10 us each: 0.35-0.9 s at 80,000 records on
two cores):

* every release: ``slurm_load_jobs(update_time)`` answers "no change" without packing when no
  job changed since (squeue does it only within one ``--iterate`` process, slurmrestd's
  ``/jobs?update_time=``); on a queue where any job starts, ends or is re-prioritised between
  two reads it is a full read all the same. Not used: the line digest below gives the same
  "nothing changed" to the parse, not to slurmctld.
* 22.05: nothing finer. A read costs what the queue's size costs, so the refresh interval is
  slurmctld's time per read over ``api.refresh_controller_share`` (the live cache).
* 23.11 and later: ``squeue --only-job-state`` (``REQUEST_JOB_STATE``: slurmctld packs each
  job's id and state only) could tell which jobs changed state between full reads. Not used
  yet: no such release runs here to test it against, and reasons, priorities and start
  estimates change without a state change, so it would not replace the full read.
* 24.11 and later: ``update_time`` in the JSON forms' envelope (``last_update``), as above.

What the text form lacks against ``--json`` (documented in ``/queue``): exit codes of
finished jobs still in slurmctld (22.05's ``squeue -O`` has no ``ExitCode``), the restart
count, the submit line, the group's name (``group_id`` is there), whether memory was asked
per CPU or per node (``memory_mib`` is the job's TRES memory instead), and a completing job's
base state (squeue prints ``COMPLETING`` in its place: the job's ``state`` is then
COMPLETING). ``slurm.job.get`` still reads the full record.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import tzinfo
from hashlib import blake2b as _blake2b
from typing import Any

from pydantic_core import to_json

from slurmtower.models.job import Job, parse_job_state
from slurmtower.models.node import Node, parse_node_state
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.adapters._values import memory_mib, parse_duration, parse_text_time, text_or_none

__all__ = [
    "QUEUE_FIELDS",
    "QUEUE_JOB_FIELDS",
    "SEP",
    "STATE_FIELDS",
    "QueueRow",
    "QueueRowParser",
    "line_hash",
    "parse_node_state_line",
    "parse_node_states_text",
    "parse_queue_line",
    "queue_format",
    "state_format",
]

SEP = "\x1f"

#: ``squeue -O`` fields, in the order :func:`parse_queue_line` reads them. Only fields whose
#: value changes when the job changes: ``TimeUsed``/``TimeLeft`` would change every line
#: every second (``elapsed`` is ``now - start_time`` for a running job). No ``GroupName``:
#: squeue looks the group up once per job, which doubles its cost (0.59 -> 0.32 s of CPU at
#: 42,000 jobs); ``group_id`` is there.
QUEUE_FIELDS = (
    "JobID", "ArrayJobID", "ArrayTaskID", "HetJobID", "Name", "UserName", "UserID", "GroupID",
    "Account", "Partition", "QOS", "State", "Reason", "NodeList", "NumNodes", "NumCPUs", "NumTasks",
    "tres-alloc", "TimeLimit", "SubmitTime", "EligibleTime", "StartTime", "EndTime", "BatchHost",
    "WorkDir", "Command", "Comment", "PriorityLong", "Reservation", "Dependency", "STDOUT",
    "STDERR", "Cluster",
)

#: The :class:`Job` fields a queue row can fill; the others need the full record.
QUEUE_JOB_FIELDS = frozenset({
    "job_id", "array_job_id", "array_task_id", "array_task_str", "het_job_id", "name", "user_name", "user_id",
    "group_id", "account", "partition", "qos", "state", "state_flags", "state_reason", "nodes", "node_count",
    "cpus", "tasks", "memory_mib", "time_limit", "submit_time", "eligible_time", "start_time", "end_time",
    "batch_host", "work_dir", "command", "comment", "priority", "reservation", "dependency", "standard_output",
    "standard_error", "cluster",
})

#: ``sinfo -O`` fields of the node states the sensor compares.
STATE_FIELDS = ("StateComplete", "NodeList", "Reason", "User", "TimeStamp")


def queue_format() -> str:
    """The ``squeue -O`` argument: every field unpadded, each followed by the separator."""
    return ",".join(f"{f}:{SEP}" for f in QUEUE_FIELDS)


def state_format() -> str:
    """The ``sinfo -O`` argument for :data:`STATE_FIELDS`."""
    return ",".join(f"{f}:{SEP}" for f in STATE_FIELDS)


def _intern(value: str | None) -> str | None:
    return sys.intern(value) if value is not None else None


def _int(value: str) -> int | None:
    value = value.strip()
    return int(value) if value.isdigit() else None


def _tres_memory(tres: str) -> int | None:
    for part in tres.split(","):
        key, _, value = part.partition("=")
        if key == "mem":
            return memory_mib(value)
    return None


def parse_queue_line(line: str, *, tz: tzinfo | None = None) -> Job:
    """One line of ``squeue -h -O <queue_format()>`` as a :class:`Job` (the JSON
    :class:`QueueRowParser` makes of it, read back).

    Raises:
        ValueError: the line does not hold :data:`QUEUE_FIELDS` (Slurm printed something else).
    """
    return Job.model_validate_json(QueueRowParser(tz).row(line)[1])


QueueRow = tuple[int, bytes, tuple[Any, ...]]
"""(job id, the job's JSON as :class:`~slurmtower.models.table.JobTable` stores it, its columns)."""


class QueueRowParser:
    """Turns ``squeue -O <queue_format()>`` lines into table rows at ~20 us a line.

    The last column is the line's :func:`line_hash`: the refresh worker keeps only these (a
    line that hashes as before is unchanged; two different lines of one job hashing alike is
    a 2**-64 chance). The hash is the same in every process and every run, so a worker can go
    on from the hashes of a table kept on disk by an earlier run (its first read at a restart
    parses only the lines that changed since).

    :func:`parse_queue_line` builds a pydantic :class:`Job` per line (~300 us); at 100,000
    jobs that is half a minute of start-up. This writes the same JSON directly from the
    fields, converting each distinct time, duration and state text once (a bulk submission
    shares its submit time, limit and state), and gives the same model when read back
    (tested against :func:`parse_queue_line`).
    """

    def __init__(self, tz: tzinfo | None = None) -> None:
        self.tz = tz
        self._times: dict[str, str | None] = {}
        self._limits: dict[str, str | None] = {}
        self._states: dict[str, tuple[str, list[str]]] = {}
        self._nodes: dict[str, frozenset[str]] = {}

    def _time(self, text: str) -> str | None:
        if text in self._times:
            return self._times[text]
        when = parse_text_time(text, self.tz)
        found = when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else None
        if len(self._times) < 100_000:
            self._times[text] = found
        return found

    def _limit(self, text: str) -> str | None:
        if text in self._limits:
            return self._limits[text]
        try:
            limit = parse_duration(text)
        except ValueError:
            limit = None
        found = to_json(limit).decode()[1:-1] if limit is not None else None
        self._limits[text] = found
        return found

    def _state(self, text: str) -> tuple[str, list[str]]:
        found = self._states.get(text)
        if found is None:
            base, flags = parse_job_state(text)
            found = self._states[text] = (base.value, sorted(flags))
        return found

    def _node_set(self, text: str | None) -> frozenset[str]:
        if not text:
            return _NO_NODES  # one object for every pending job (pickled once per delta)
        found = self._nodes.get(text)
        if found is None:
            found = frozenset(NodeSet(text))
            if len(self._nodes) < 100_000:
                self._nodes[text] = found
        return found

    def row(self, line: str) -> QueueRow:
        """The row of one line.

        Raises:
            ValueError: the line does not hold :data:`QUEUE_FIELDS`.
        """
        f = line.split(SEP)
        if len(f) < len(QUEUE_FIELDS):
            raise ValueError(f"squeue printed {len(f)} fields where {len(QUEUE_FIELDS)} were asked: {line[:80]!r}")
        (job_id, array_job, array_task, het, name, user, uid, gid, account, partition, qos, state,
         reason, nodes, node_count, cpus, tasks, tres, limit, submit, eligible, start, end, batch_host,
         work_dir, command, comment, priority, reservation, dependency, stdout, stderr, cluster) = f[:33]
        task = text_or_none(array_task)
        task_id = int(task) if task is not None and task.isdigit() else None
        base, flags = self._state(state)
        user_name = _intern(text_or_none(user))
        account_name = _intern(text_or_none(account))
        partition_name = _intern(text_or_none(partition))
        job_name = _intern(name or None)
        node_list = text_or_none(nodes)
        doc: dict[str, Any] = {
            "job_id": int(job_id),
            "array_job_id": _int(array_job) if task is not None else None,
            "array_task_id": task_id,
            "array_task_str": task if task is not None and task_id is None else None,
            "het_job_id": _int(het) or None,
            "name": job_name,
            "user_name": user_name,
            "user_id": _int(uid),
            "group_id": _int(gid),
            "account": account_name,
            "partition": partition_name,
            "qos": text_or_none(qos),
            "state": base,
            "state_flags": flags or None,
            "state_reason": text_or_none(reason),
            "nodes": node_list,
            "node_count": _int(node_count),
            "cpus": _int(cpus),
            "tasks": _int(tasks),
            "memory_mib": _tres_memory(tres),
            "time_limit": self._limit(limit),
            "submit_time": self._time(submit),
            "eligible_time": self._time(eligible),
            "start_time": self._time(start),
            "end_time": self._time(end),
            "batch_host": text_or_none(batch_host),
            "work_dir": text_or_none(work_dir),
            "command": text_or_none(command),
            "comment": text_or_none(comment),
            "priority": _int(priority),
            "reservation": text_or_none(reservation),
            "dependency": text_or_none(dependency),
            "standard_output": text_or_none(stdout),
            "standard_error": text_or_none(stderr),
            "cluster": text_or_none(cluster),
        }
        fragment = to_json({k: v for k, v in doc.items() if v is not None})  # keys: QUEUE_JOB_FIELDS
        return (doc["job_id"], fragment,
                (user_name, account_name, partition_name, base, doc["name"], self._node_set(node_list),
                 line_hash(line)))


def line_hash(line: str) -> int:
    """A 64-bit digest of one squeue line, the same in every process and run (``hash()`` is
    salted per process): ~1 us a line."""
    return int.from_bytes(_blake2b(line.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "little")


#: The node set of a job on no node (CPython makes a new empty frozenset each time).
_NO_NODES: frozenset[str] = frozenset()


def parse_node_state_line(line: str, *, tz: tzinfo | None = None) -> list[Node]:
    """One line of ``sinfo -h -a -O <state_format()>``: the nodes it folds, each with its base
    state, flags, reason, who set it and when (no other field is read)."""
    f = line.split(SEP)
    if len(f) < len(STATE_FIELDS):
        raise ValueError(f"sinfo printed {len(f)} fields where {len(STATE_FIELDS)} were asked: {line[:80]!r}")
    state, nodes, reason, user, stamp = f[:5]
    base, flags = parse_node_state(state)
    reason_text = text_or_none(reason)
    common = {
        "state": base,
        "flags": flags,
        "reason": reason_text,
        "reason_set_by_user": text_or_none(user) if reason_text else None,
        "reason_changed_at": parse_text_time(stamp, tz) if reason_text else None,
    }
    return [Node(name=name, **common) for name in NodeSet(nodes)]


def parse_node_states_text(text: str | Iterable[str], *, tz: tzinfo | None = None) -> list[Node]:
    """Every node of ``sinfo -h -a -O <state_format()>`` once (a node in two partitions is
    printed on two lines with the same state)."""
    lines = text.splitlines() if isinstance(text, str) else text
    seen: dict[str, Node] = {}
    for line in lines:
        if line.strip():
            for node in parse_node_state_line(line, tz=tz):
                seen.setdefault(node.name, node)
    return list(seen.values())
