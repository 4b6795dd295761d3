"""Job control: cancel, hold, release, requeue, suspend, resume, signal and update jobs.

Job ids are parsed once (:func:`parse_job_ids`) into :class:`JobRef`; a :class:`JobControl`
backend acts on a list of them with one Slurm call per method where Slurm allows it, and
answers per id: ``None`` where Slurm accepted it, else Slurm's own message for that id
(:data:`JobResults`). A failure that is not about one job (slurmctld or munge down) raises
the classified :class:`~slurmtower.errors.SlurmError` instead.

What each release offers for these calls (scontrol/scancel from the man pages and the live
22.05; slurmrestd from the recorded ``GET /openapi/v3`` of each release in the fixtures)::

    call                   22.05 (v0.0.36-38)   24.11 (v0.0.40-42)   25.11 (v0.0.41-44)   26.05 (v0.0.42-45)
    scontrol hold/uhold/   comma list of ids,   same                 same                 same
      release/requeue/     array ranges, het
      requeuehold/         components; one RPC
      suspend/resume/      per id, errors per
      update jobid=        id
    scancel -s/-b/-f,      several ids; -v      same                 same                 same
      --user/--account...  names each refused
    REST DELETE job/{id}   ?signal only         ?signal&flags        ?signal&flags        ?signal&flags
    REST DELETE jobs/      -                    ids or filters (one  same                 same
                                                call, kill_jobs_msg)
    REST POST job/{id}     job_properties: hold job_desc_msg: hold,  same                 same
                           true/false (admin),  admin_comment,
                           no admin_comment;    constraints ...
                           array task refused
    REST requeue           -                    -                    -                    GET job/{id}/requeue,
                                                                                          POST jobs/requeue
                                                                                          (v0.0.45 only)
    REST suspend/resume    -                    -                    -                    -

Quirks measured on 22.05 (the texts the per-id results carry):

- scontrol prints ``<message> for job <id>`` per refused id, or ``<id>: <message>`` for an
  array expression, one line per task range (``3_4-5: No error``, ``3_6-9: Invalid job id
  specified``: "No error" is success); hold/release then add ``slurm_suspend error: ...``.
- With slurmctld unreachable, scontrol hold says ``Unexpected message received for job 1``
  (the same text ``scontrol suspend <unknown id>`` gives): when every id is refused with one
  text, ``scontrol ping`` tells the two apart.
- ``scancel <id>`` (SIGKILL) is silent and exits 0 for an unknown or finished job; ``-v``
  makes it name them (``Kill job error on job id 4: Job/step already completing or
  completed``), so every scancel here runs with ``-v``.
- ``scontrol update`` applies keywords in order and stops at the first it refuses: the
  fields are checked here before anything runs.
- ``scontrol requeue`` of a completed batch job is accepted (it runs again).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NoReturn, Protocol, runtime_checkable

from slurmtower.errors import InvalidInput, SlurmError, SlurmUnavailable
from slurmtower.nodeset import NodeSet, parse_nodeset, split_outside_brackets
from slurmtower.slurm.cli_backend import CliSlurmClient
from slurmtower.slurm.runner import CommandResult, CommandRunner, classify_failure

if TYPE_CHECKING:
    from slurmtower.slurm.client import SlurmClient

__all__ = [
    "CANCEL_STATES",
    "JOB_UPDATE_FIELDS",
    "MAX_JOB_IDS",
    "MAX_JOB_ID_TEXT",
    "SIGNALS",
    "CliJobControl",
    "JobControl",
    "JobRef",
    "JobResults",
    "job_control",
    "parse_job_ids",
]

#: At most this many job id expressions in one call.
MAX_JOB_IDS = 10_000
#: At most this many characters in one job id expression.
MAX_JOB_ID_TEXT = 64
#: Slurm's largest job id (MAX_JOB_ID, 0x03FFFFFF) and array task id (below NO_VAL).
_MAX_JOB_ID = 0x03FFFFFF
_MAX_TASK_ID = 4_294_967_293

#: The per-id answer of every :class:`JobControl` method: ``{id text: None (accepted) or
#: Slurm's message}``, in the order the ids were given.
JobResults = dict[str, str | None]

#: Signals by name (``scancel --signal``, slurmrestd's enum); numbers 1-64 are taken too.
SIGNALS = frozenset({"HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT",
                     "STOP", "TSTP", "TTIN", "TTOU"})
#: The states ``scancel --state`` filters on.
CANCEL_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED"})

_JOB_RE = re.compile(r"^(\d+)$")
_TASK_RE = re.compile(r"^(\d+)_(\d+)$")
_RANGE_RE = re.compile(r"^(\d+)_\[([0-9,\-]+)\]$")
_HET_RE = re.compile(r"^(\d+)\+(\d+)$")
_SHAPES = "123, 123_4, 123_[1-5,7], 123+1"


@dataclass(frozen=True)
class JobRef:
    """One job id expression as Slurm takes it.

    ``text`` is what Slurm is given (canonical: ``007`` becomes ``7``); ``job_id`` the job (or
    array master, or het leader) it names; ``tasks`` the array task ranges (``None``: not an
    array task expression; a whole array is its master's plain id); ``het_offset`` the
    component of a het job.
    """

    text: str
    job_id: int
    tasks: tuple[tuple[int, int], ...] | None = None
    het_offset: int | None = None

    @property
    def kind(self) -> str:
        """``job``, ``task``, ``tasks`` (a range) or ``het``."""
        if self.het_offset is not None:
            return "het"
        if self.tasks is None:
            return "job"
        return "task" if len(self.tasks) == 1 and self.tasks[0][0] == self.tasks[0][1] else "tasks"

    def overlaps(self, ranges: Iterable[tuple[int, int]]) -> bool:
        """Any of ``ranges`` (array task ids) is in this expression's tasks."""
        return self.tasks is not None and any(lo <= b and a <= hi for lo, hi in self.tasks for a, b in ranges)

    def __str__(self) -> str:
        return self.text


def _bad(item: str, why: str = "") -> NoReturn:
    shown = item if len(item) <= MAX_JOB_ID_TEXT else item[:MAX_JOB_ID_TEXT] + "..."
    raise InvalidInput(f"jobids: {shown!r} is not a job id ({why or _SHAPES})", param="jobids", value=shown)


def _job_id(item: str, digits: str) -> int:
    value = int(digits)
    if not 0 < value <= _MAX_JOB_ID:
        _bad(item, f"job ids run from 1 to {_MAX_JOB_ID}")
    return value


def _task_ranges(item: str, spec: str) -> tuple[tuple[int, int], ...]:
    ranges: list[tuple[int, int]] = []
    for part in spec.split(","):
        lo_text, _, hi_text = part.partition("-")
        if not lo_text.isdigit() or (hi_text and not hi_text.isdigit()) or (_ and not hi_text):
            _bad(item)
        lo, hi = int(lo_text), int(hi_text or lo_text)
        if lo > hi:
            _bad(item, f"task range {part} runs backwards")
        if hi > _MAX_TASK_ID:
            _bad(item, f"array task ids run up to {_MAX_TASK_ID}")
        ranges.append((lo, hi))
    return tuple(ranges)


def _fold(ranges: Sequence[tuple[int, int]]) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def parse_job_id(item: str | int) -> JobRef:
    """One job id expression (``123``, ``123_4``, ``123_[1-5,7]``, ``123+1``) as a :class:`JobRef`.

    Raises:
        InvalidInput: (``param="jobids"``) naming the malformed item.
    """
    if isinstance(item, bool) or not isinstance(item, (str, int)):
        _bad(repr(item))
    text = str(item).strip()
    if not text or len(text) > MAX_JOB_ID_TEXT:
        _bad(text, f"at most {MAX_JOB_ID_TEXT} characters" if text else "empty")
    if m := _JOB_RE.match(text):
        job = _job_id(text, m[1])
        return JobRef(str(job), job)
    if m := _TASK_RE.match(text):
        job = _job_id(text, m[1])
        task = _task_ranges(text, m[2])
        return JobRef(f"{job}_{task[0][0]}", job, task)
    if m := _RANGE_RE.match(text):
        job = _job_id(text, m[1])
        tasks = _task_ranges(text, m[2])
        return JobRef(f"{job}_[{_fold(tasks)}]", job, tasks)
    if m := _HET_RE.match(text):
        job = _job_id(text, m[1])
        return JobRef(f"{job}+{int(m[2])}", job, het_offset=int(m[2]))
    _bad(text)


def parse_job_ids(jobids: str | int | Iterable[str | int]) -> list[JobRef]:
    """Job id expressions (a list, or one string of comma-separated ones) as :class:`JobRef`
    in the given order, duplicates dropped.

    Raises:
        InvalidInput: (``param="jobids"``) none given, more than :data:`MAX_JOB_IDS`, or a
            malformed one (named).
    """
    if isinstance(jobids, str):
        if len(jobids) > MAX_JOB_IDS * (MAX_JOB_ID_TEXT + 1):
            raise InvalidInput(f"jobids: more than {MAX_JOB_IDS} job ids", param="jobids")
        items: list[str | int] = list(split_outside_brackets(jobids))
    elif isinstance(jobids, int):
        items = [jobids]
    else:
        items = []
        for item in jobids:
            items.append(item)
            if len(items) > MAX_JOB_IDS:
                break
    if len(items) > MAX_JOB_IDS:
        raise InvalidInput(f"jobids: more than {MAX_JOB_IDS} job ids", param="jobids")
    refs: dict[str, JobRef] = {}
    for item in items:
        ref = parse_job_id(item)
        refs.setdefault(ref.text, ref)
    if not refs:
        raise InvalidInput("jobids: no job id given", param="jobids")
    return list(refs.values())


# -- update fields ------------------------------------------------------------------------

#: Job fields ``update`` takes: slurmtower's name -> (scontrol's keyword, slurmrestd's
#: job_desc field, kind of value). ``minutes``: a timedelta, minutes, or ``UNLIMITED``;
#: ``time``: a datetime, or Slurm's own time (``now+1hour``); ``nodes``: a node set.
JOB_UPDATE_FIELDS: dict[str, tuple[str, str, str]] = {
    "time_limit": ("TimeLimit", "time_limit", "minutes"),
    "time_min": ("TimeMin", "time_minimum", "minutes"),
    "partition": ("Partition", "partition", "name"),
    "qos": ("QOS", "qos", "name"),
    "account": ("Account", "account", "name"),
    "reservation": ("ReservationName", "reservation", "name"),
    "wckey": ("WCKey", "wckey", "name"),
    "name": ("Name", "name", "text"),
    "nice": ("Nice", "nice", "int"),
    "priority": ("Priority", "priority", "count"),
    "comment": ("Comment", "comment", "text"),
    "admin_comment": ("AdminComment", "admin_comment", "text"),
    "features": ("Features", "constraints", "text"),
    "dependency": ("Dependency", "dependency", "text"),
    "licenses": ("Licenses", "licenses", "text"),
    "mail_user": ("MailUser", "mail_user", "text"),
    "mail_type": ("MailType", "mail_type", "text"),
    "begin_time": ("StartTime", "begin_time", "time"),
    "deadline": ("Deadline", "deadline", "time"),
    "requeue": ("Requeue", "requeue", "bool"),
    "num_nodes": ("NumNodes", "minimum_nodes", "count"),
    "num_tasks": ("NumTasks", "tasks", "count"),
    "exclude_nodes": ("ExcNodeList", "excluded_nodes", "nodes"),
    "required_nodes": ("ReqNodeList", "required_nodes", "nodes"),
}

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_SLURM_TIME_RE = re.compile(r"^[A-Za-z0-9:+\-/T]{1,64}$")
_DURATION_RE = re.compile(r"^(?:\d+-)?\d+(?::\d+){0,2}$|^(?:UNLIMITED|INFINITE)$", re.IGNORECASE)
_MAX_TEXT = 4096

#: A value ``update`` takes for a field.
FieldValue = str | int | bool | timedelta | datetime | NodeSet


def _field_error(name: str, value: object, want: str) -> NoReturn:
    raise InvalidInput(f"{name}: {value!r} is not {want}", param=name)


def check_update_fields(fields: Mapping[str, FieldValue]) -> dict[str, FieldValue]:
    """``fields`` checked (names known, values of the right kind) before anything runs.

    Raises:
        InvalidInput: no field, an unknown field (named), or a bad value.
    """
    if not fields:
        raise InvalidInput("fields: nothing to update", param="fields")
    unknown = sorted(k for k in fields if k not in JOB_UPDATE_FIELDS)
    if unknown:
        raise InvalidInput(f"job field {unknown[0]!r} cannot be updated (one of: {', '.join(JOB_UPDATE_FIELDS)})",
                           param=unknown[0])
    checked: dict[str, FieldValue] = {}
    for name, value in fields.items():
        kind = JOB_UPDATE_FIELDS[name][2]
        if kind == "minutes":
            ok = (isinstance(value, timedelta) and value >= timedelta(0)) or \
                (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or \
                (isinstance(value, str) and bool(_DURATION_RE.match(value)))
            if not ok:
                _field_error(name, value, "a duration (timedelta, minutes, [days-]hh:mm:ss or UNLIMITED)")
        elif kind in ("int", "count"):
            if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**31 - 3 or \
                    (kind == "count" and value < 0):
                _field_error(name, value, "a whole number" if kind == "int" else "a count")
        elif kind == "bool":
            if not isinstance(value, bool):
                _field_error(name, value, "true or false")
        elif kind == "time":
            if isinstance(value, datetime):
                if value.tzinfo is None:
                    _field_error(name, value, "a timezone-aware datetime")
            elif not (isinstance(value, str) and _SLURM_TIME_RE.match(value)):
                _field_error(name, value, "a datetime or a Slurm time (now+1hour, 2026-12-01T10:00)")
        elif kind == "nodes":
            value = parse_nodeset(value, param=name) if isinstance(value, str) else value
            if not isinstance(value, NodeSet):
                _field_error(name, value, "a node set")
        elif kind == "name":
            if not (isinstance(value, str) and _NAME_RE.match(value)):
                _field_error(name, value, "a name")
        elif not isinstance(value, str) or len(value) > _MAX_TEXT or any(c in value for c in "\n\r\0"):
            _field_error(name, value, f"one line of text of at most {_MAX_TEXT} characters")
        checked[name] = value
    return checked


def _scontrol_value(kind: str, value: FieldValue) -> str:
    if kind == "minutes" and isinstance(value, timedelta):
        return str(max(1, int(value.total_seconds() // 60)))
    if kind == "time" and isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    if kind == "bool":
        return "1" if value else "0"
    return str(value)


def check_signal(signal: str | int) -> str:
    """A signal as scancel takes it (``USR1``, ``10``); ``SIG`` prefix dropped.

    Raises:
        InvalidInput: (``param="signal"``) not a known signal name or number.
    """
    text = str(signal).strip().upper().removeprefix("SIG")
    if text in SIGNALS or (text.isdigit() and 1 <= int(text) <= 64 and not isinstance(signal, bool)):
        return text
    raise InvalidInput(f"signal: {signal!r} is not a signal ({', '.join(sorted(SIGNALS))} or 1-64)", param="signal")


# -- the protocol ---------------------------------------------------------------------------

@runtime_checkable
class JobControl(Protocol):
    """Acts on jobs; each method makes one Slurm call where Slurm allows and answers per id.

    Every method raises :class:`~slurmtower.errors.InvalidInput` for bad arguments (before
    any call), :class:`~slurmtower.errors.Unsupported` where the backend cannot do it, and
    :class:`~slurmtower.errors.SlurmError` subclasses for a failure that is not per job.
    """

    def cancel(self, refs: Sequence[JobRef], *, signal: str | int | None = None, batch: bool = False,
               full: bool = False) -> JobResults:
        """Cancel (or send ``signal`` to) the jobs; ``batch``: the batch shell only; ``full``:
        every step and the batch shell (scancel's ``--batch`` / ``--full``)."""
        ...

    def cancel_matching(self, *, user: str | None = None, account: str | None = None,
                        partition: str | None = None, state: str | None = None, name: str | None = None,
                        nodes: NodeSet | str | None = None, signal: str | int | None = None) -> JobResults:
        """Cancel every job matching all the filters (scancel's own), in one call; the ids it
        acted on. At least one filter is needed."""
        ...

    def hold(self, refs: Sequence[JobRef], *, user: bool = False) -> JobResults:
        """Hold pending jobs: an admin hold, or a user hold (``scontrol uhold``) with ``user``."""
        ...

    def release(self, refs: Sequence[JobRef]) -> JobResults:
        """Release held jobs (either hold)."""
        ...

    def requeue(self, refs: Sequence[JobRef], *, hold: bool = False) -> JobResults:
        """Requeue batch jobs; ``hold``: held afterwards (``scontrol requeuehold``)."""
        ...

    def suspend(self, refs: Sequence[JobRef]) -> JobResults:
        """Suspend running jobs (operators and admins only)."""
        ...

    def resume(self, refs: Sequence[JobRef]) -> JobResults:
        """Resume suspended jobs."""
        ...

    def signal(self, refs: Sequence[JobRef], signal: str | int) -> JobResults:
        """Send ``signal`` to the jobs' steps (the batch shell left alone, as scancel does)."""
        ...

    def update(self, refs: Sequence[JobRef], fields: Mapping[str, FieldValue]) -> JobResults:
        """Set ``fields`` (names of :data:`JOB_UPDATE_FIELDS`) on the jobs."""
        ...


# -- per-id messages --------------------------------------------------------------------------

_SCANCEL_LINE = re.compile(r"^scancel: error: Kill job error on job id (\S+): (.+)$")
_SCANCEL_DONE = re.compile(r"^scancel: (?:Terminating job|Signal \d+ to job) (\S+)$")
_FOR_JOB_LINE = re.compile(r"^(.+) for job (\S+)$")
_ID_LINE = re.compile(r"^(\d+(?:_[0-9\[\],\-]+|\+\d+)?): (.+)$")
_NO_ERROR = "No error"
#: Per-id texts that are about the call, not the job: the whole call is refused.
_WHOLE_MARKERS = ("unable to contact", "connection refused", "socket timed out", "authentication",
                  "munge", "zero bytes were transmitted", "communication connection failure")


def per_id_lines(output: str) -> list[tuple[str, str]]:
    """``(id as Slurm printed it, message)`` for each per-job line of scontrol's or scancel's
    output (see the module's notes for the shapes)."""
    found: list[tuple[str, str]] = []
    for raw in output.splitlines():
        line = raw.strip()
        if m := _SCANCEL_LINE.match(line):
            found.append((m[1], m[2].strip()))
        elif line.startswith(("scancel:", "slurm_suspend error:", "slurm_update error:", "scontrol:")):
            continue
        elif m := _FOR_JOB_LINE.match(line):
            found.append((m[2], m[1].strip()))
        elif m := _ID_LINE.match(line):
            found.append((m[1], m[2].strip()))
    return found


def _printed_ref(printed: str, refs: Sequence[JobRef], by_text: Mapping[str, JobRef]) -> JobRef | None:
    """The ref a printed id is about: the same text, else (``3_6-9``, ``3_1`` of ``3_[1-2]``)
    the array expression of that job whose tasks it overlaps, else the only ref of that job."""
    if printed in by_text:
        return by_text[printed]
    try:
        ref = parse_job_id(printed)
    except InvalidInput:
        m = re.match(r"^(\d+)_([0-9,\-]+)$", printed)  # scontrol's "3_4-5" (a folded task range)
        if m is None:
            return None
        try:
            ref = parse_job_id(f"{m[1]}_[{m[2]}]")
        except InvalidInput:
            return None
    if ref.text in by_text:
        return by_text[ref.text]
    same = [r for r in refs if r.job_id == ref.job_id]
    if ref.tasks is not None:
        overlapping = [r for r in same if r.overlaps(ref.tasks)]
        if overlapping:
            return overlapping[0]
    return same[0] if len(same) == 1 else None


def _task_text(printed: str) -> str:
    """A task range as one spelling on every release: scontrol prints a range of tasks
    ``3_4-5`` up to 25.11 and ``3_[4-5]`` on 26.05, one task ``3_9`` and ``3_[9]``: here
    ``3_[4-5]`` and ``3_9``."""
    if m := re.match(r"^(\d+)_\[(\d+)\]$", printed):
        return f"{m[1]}_{m[2]}"
    if m := re.match(r"^(\d+)_([0-9]+[,\-][0-9,\-]*)$", printed):
        return f"{m[1]}_[{m[2]}]"
    return printed


def fold_messages(refs: Sequence[JobRef], lines: Iterable[tuple[str, str]]) -> JobResults:
    """Each ref's result from the per-id lines: ``None``, or its messages (``"; "``-joined,
    prefixed with the task range Slurm named where that is not the ref's own text)."""
    by_text = {r.text: r for r in refs}
    messages: dict[str, list[str]] = {r.text: [] for r in refs}
    for printed, message in lines:
        ref = _printed_ref(printed, refs, by_text)
        if ref is None or message == _NO_ERROR:
            continue
        shown = _task_text(printed)
        text = message if printed == ref.text or shown == ref.text else f"{shown}: {message}"
        if text not in messages[ref.text]:
            messages[ref.text].append(text)
    return {text: ("; ".join(found) if found else None) for text, found in messages.items()}


# -- the command backend ------------------------------------------------------------------------

#: scontrol takes the ids as one comma-separated argument; Linux refuses one argument
#: longer than 128 KiB (MAX_ARG_STRLEN), so longer lists are cut in as few calls as fit.
_MAX_ARG = 100_000


def _chunks(refs: Sequence[JobRef]) -> list[list[JobRef]]:
    chunks: list[list[JobRef]] = [[]]
    size = 0
    for ref in refs:
        if chunks[-1] and size + len(ref.text) + 1 > _MAX_ARG:
            chunks.append([])
            size = 0
        chunks[-1].append(ref)
        size += len(ref.text) + 1
    return chunks


class CliJobControl:
    """:class:`JobControl` over ``scontrol`` and ``scancel`` (through the one runner)."""

    def __init__(self, runner: CommandRunner | None = None) -> None:
        self.runner = runner or CommandRunner()

    def _timeout(self, n: int) -> float:
        # slurmctld handles one RPC per id: ~1 ms each on the 5,000-node lab.
        return max(self.runner.timeout, 10 + 0.01 * n)

    def _ping(self) -> bool:
        try:
            return "UP" in self.runner.run(["scontrol", "ping"], timeout=10, check=False).stdout
        except SlurmUnavailable:
            return False

    def _fail(self, res: CommandResult, message: str) -> NoReturn:
        err = classify_failure(res.argv, res.returncode, message)
        if not isinstance(err, SlurmUnavailable) and not self._ping():
            raise SlurmUnavailable(f"slurmctld is not responding ({res.argv[0]}: {message.strip()[:200]})",
                                   argv=res.argv, returncode=res.returncode, stderr=res.stderr)
        raise err

    def _results(self, res: CommandResult, refs: Sequence[JobRef]) -> JobResults:
        output = f"{res.stderr}\n{res.stdout}"
        lines = per_id_lines(output)
        for _printed, message in lines:
            if any(m in message.lower() for m in _WHOLE_MARKERS):
                self._fail(res, message)
        results = fold_messages(refs, lines)
        refused = [m for m in results.values() if m is not None]
        if res.returncode != 0 and not refused:
            self._fail(res, res.stderr or res.stdout)
        if refused and len(refused) == len(results) and len(set(refused)) == 1 and not self._ping():
            # 22.05's scontrol reports an unreachable slurmctld per id ("Unexpected message received").
            raise SlurmUnavailable(f"slurmctld is not responding ({res.argv[0]}: {refused[0]})", argv=res.argv,
                                   returncode=res.returncode, stderr=res.stderr)
        return results

    def _scontrol(self, words: Sequence[str], refs: Sequence[JobRef], *, update: Sequence[str] = ()) -> JobResults:
        refs = _unique(refs)
        results: JobResults = {}
        for chunk in _chunks(refs):
            ids = ",".join(r.text for r in chunk)
            argv = ["scontrol", *words, f"jobid={ids}", *update] if update else ["scontrol", *words, ids]
            res = self.runner.run(argv, check=False, timeout=self._timeout(len(chunk)))
            results.update(self._results(res, chunk))
        return results

    def _scancel(self, options: Sequence[str], refs: Sequence[JobRef]) -> JobResults:
        refs = _unique(refs)
        res = self.runner.run(["scancel", "-v", *options, *(r.text for r in refs)], check=False,
                              timeout=self._timeout(len(refs)))
        return self._results(res, refs)

    def cancel(self, refs: Sequence[JobRef], *, signal: str | int | None = None, batch: bool = False,
               full: bool = False) -> JobResults:
        if batch and full:
            raise InvalidInput("batch and full exclude each other", param="batch")
        options = [] if signal is None else [f"--signal={check_signal(signal)}"]
        options += ["--batch"] if batch else []
        options += ["--full"] if full else []
        return self._scancel(options, refs)

    def cancel_matching(self, *, user: str | None = None, account: str | None = None,
                        partition: str | None = None, state: str | None = None, name: str | None = None,
                        nodes: NodeSet | str | None = None, signal: str | int | None = None) -> JobResults:
        options = _match_filters(user=user, account=account, partition=partition, state=state, name=name,
                                 nodes=nodes)
        if signal is not None:
            options.append(f"--signal={check_signal(signal)}")
        res = self.runner.run(["scancel", "-v", *options], check=False, timeout=self._timeout(MAX_JOB_IDS))
        acted = [m[1] for line in res.stderr.splitlines() if (m := _SCANCEL_DONE.match(line.strip()))]
        refs = []
        for text in acted:
            try:
                refs.append(parse_job_id(text))
            except InvalidInput:
                continue
        if not refs:
            if res.returncode != 0 or "unable to contact" in res.stderr.lower():
                self._fail(res, res.stderr or res.stdout)
            return {}
        return self._results(res, _unique(refs))

    def hold(self, refs: Sequence[JobRef], *, user: bool = False) -> JobResults:
        return self._scontrol(["uhold" if user else "hold"], refs)

    def release(self, refs: Sequence[JobRef]) -> JobResults:
        return self._scontrol(["release"], refs)

    def requeue(self, refs: Sequence[JobRef], *, hold: bool = False) -> JobResults:
        return self._scontrol(["requeuehold" if hold else "requeue"], refs)

    def suspend(self, refs: Sequence[JobRef]) -> JobResults:
        return self._scontrol(["suspend"], refs)

    def resume(self, refs: Sequence[JobRef]) -> JobResults:
        return self._scontrol(["resume"], refs)

    def signal(self, refs: Sequence[JobRef], signal: str | int) -> JobResults:
        return self._scancel([f"--signal={check_signal(signal)}"], refs)

    def update(self, refs: Sequence[JobRef], fields: Mapping[str, FieldValue]) -> JobResults:
        checked = check_update_fields(fields)
        words = [f"{JOB_UPDATE_FIELDS[k][0]}={_scontrol_value(JOB_UPDATE_FIELDS[k][2], v)}"
                 for k, v in checked.items()]
        return self._scontrol(["update"], refs, update=words)


def _unique(refs: Sequence[JobRef]) -> list[JobRef]:
    if not refs:
        raise InvalidInput("jobids: no job id given", param="jobids")
    if len(refs) > MAX_JOB_IDS:
        raise InvalidInput(f"jobids: more than {MAX_JOB_IDS} job ids", param="jobids")
    for ref in refs:
        if not isinstance(ref, JobRef):
            raise InvalidInput(f"jobids: {ref!r} is not a parsed job id (parse_job_ids)", param="jobids")
    return list({r.text: r for r in refs}.values())


def _match_filters(*, user: str | None, account: str | None, partition: str | None, state: str | None,
                   name: str | None, nodes: NodeSet | str | None) -> list[str]:
    """scancel's filter options, checked; at least one."""
    options: list[str] = []
    for param, flag, value in (("user", "--user", user), ("account", "--account", account),
                               ("partition", "--partition", partition), ("name", "--name", name)):
        if value is None:
            continue
        if not _NAME_RE.match(value):
            raise InvalidInput(f"{param}: {value!r} is not a name", param=param)
        options.append(f"{flag}={value}")
    if state is not None:
        if state.upper() not in CANCEL_STATES:
            raise InvalidInput(f"state: {state!r} is not one of {', '.join(sorted(CANCEL_STATES))}", param="state")
        options.append(f"--state={state.upper()}")
    if nodes is not None:
        folded = parse_nodeset(nodes, param="nodes") if isinstance(nodes, str) else nodes
        if not folded:
            raise InvalidInput("nodes: empty node set", param="nodes")
        options.append(f"--nodelist={folded}")
    if not options:
        raise InvalidInput("cancel_matching needs at least one filter", param="criterias")
    return options


def job_control(client: SlurmClient) -> JobControl:
    """The :class:`JobControl` of a client's backend: its runner for the command backend,
    its session for slurmrestd (whose fallback, a command client, is not used: what
    slurmrestd cannot do raises :class:`~slurmtower.errors.Unsupported`)."""
    if isinstance(client, CliSlurmClient):
        return CliJobControl(client.runner)
    from slurmtower.slurm.rest_backend import RestSlurmClient  # deferred: httpx, REST only

    if isinstance(client, RestSlurmClient):
        from slurmtower.slurm.rest_jobctl import RestJobControl  # deferred: httpx, REST only

        return RestJobControl(client)
    raise SlurmError(f"no job control for {type(client).__name__}")

