"""Accounting: jobs and their steps from slurmdbd (``sacct --json``, REST ``/slurmdb/jobs``,
``sacct -P``), associations (``sacctmgr show assoc --json``, REST ``/slurmdb/associations``,
``sacctmgr -P show assoc``) and users (REST ``/slurmdb/users``).

Release steps of ``sacct_job``, ``sacct_step``, ``association`` and ``user`` records (see
:mod:`._chain`):

====================  =========================================================================
step                  what changes
====================  =========================================================================
v0.0.38 -> v0.0.40    sacct ``state.current`` a list, ``required.memory`` ->
                      ``memory_per_node``/``memory_per_cpu`` (22.05 flags per-CPU memory with
                      the top bit), ``array.task_id`` and ``time.limit`` number objects, step
                      ids ``"2024.batch"`` (were ``job_id`` + ``id``); 22.05.8's accounting
                      exit codes are all 0 and dropped (see :func:`_sacct_exit_v40`).
                      Associations: limits and ``priority`` become number objects, null
                      strings ``""``, ``is_default`` 0/1 a bool; users' ``administrator_level``
                      a list (``"None"`` -> ``["None"]``).
v0.0.40 -> v0.0.44    keys were only added (``segment_size``, the step's ``stdout``/``stderr``
                      ..., the user's ``default.qos``).
v0.0.44 -> v0.0.45    sacct job: new ``sluid`` and ``original_sluid`` (read: the identity of
                      one run of a job; older formats have none), ``exclusive``,
                      ``oversubscribe`` (not read); step: ``pid`` removed, ``submit_line``
                      added (neither read). Associations and users unchanged. Nothing to
                      rewrite.
====================  =========================================================================

Text: ``sacct -P`` and ``sacctmgr -P show assoc`` print the same columns in every release; an
association's id and parent only with ``format=ID,ParentName,...``.
"""

from __future__ import annotations

import re
from datetime import timedelta, tzinfo
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.accounting import AccountingUser, AdminLevel, Association, AssociationLimits
from slurmtower.models.job import Job, JobStep, parse_job_state
from slurmtower.models.version import SlurmVersion
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.adapters._chain import Record, num, step, wrap
from slurmtower.slurm.adapters._json import array_task_id, exit_code, id_or_none, path, required_id, upgraded
from slurmtower.slurm.adapters._text import as_duration, as_int, exit_text, job_ids
from slurmtower.slurm.adapters._values import (
    epoch,
    is_infinite,
    memory_mib,
    minutes,
    number,
    parse_duration,
    parse_text_time,
    split_list,
    text_or_none,
)

__all__ = [
    "parse_associations_json",
    "parse_associations_text",
    "parse_sacct_json",
    "parse_sacct_steps_json",
    "parse_sacct_steps_text",
    "parse_sacct_text",
    "parse_users_json",
]

# ----------------------------------------------------------------------------- release steps


@step("sacct_job", 40)
def _sacct_job_v40(record: Record, version: SlurmVersion | None) -> Record:
    state = record.get("state") or {}
    if isinstance(state.get("current"), str):
        state["current"] = [state["current"]]
    for key in ("exit_code", "derived_exit_code"):
        record[key] = _sacct_exit_v40(record.get(key), version)
    array = record.get("array") or {}
    if "task_id" in array:
        array["task_id"] = num(array["task_id"])
    required = record.get("required") or {}
    if "memory" in required:
        memory = required.pop("memory")
        # 22.05 flags per-CPU memory with the top bit (MEM_PER_CPU).
        per_cpu = isinstance(memory, int) and memory >= 1 << 63
        required["memory_per_cpu"] = num(memory - (1 << 63) if per_cpu else None)
        required["memory_per_node"] = num(None if per_cpu else memory, zero_is_unset=True)
    time = record.get("time") or {}
    if "limit" in time:
        time["limit"] = num(time["limit"])
    wrap(record, "priority")
    reservation = record.get("reservation")
    if isinstance(reservation, dict) and not isinstance(reservation.get("name"), str):
        # 22.05 prints "name": 0 when the job had no reservation.
        reservation["name"] = ""
    for item in record.get("steps") or []:
        _sacct_step_v40(item, version)
    return record


@step("sacct_step", 40)
def _sacct_step_v40(record: Record, version: SlurmVersion | None) -> Record:
    ident = record.get("step") or {}
    if "job_id" in ident:
        ident["id"] = f"{ident.pop('job_id')}.{ident.get('id')}"
    if isinstance(record.get("state"), str):
        record["state"] = [record["state"]]
    record["exit_code"] = _sacct_exit_v40(record.get("exit_code"), version)
    time = record.get("time") or {}
    for key in ("start", "end"):
        if key in time:
            time[key] = num(time[key])
    return record


def _sacct_exit_v40(value: Any, version: SlurmVersion | None) -> Any:
    # Slurm 22.05.8's sacct --json and /slurmdb/v0.0.38 report every exit code as
    # {"status": "SUCCESS", "return_code": 0} (a job that ran `exit 3` included), so the
    # value carries no information: drop it. sacct -P text and squeue JSON are correct.
    if version is not None and version.key[:2] <= (22, 5):
        return None
    if isinstance(value, dict) and isinstance(value.get("status"), str):
        code = value.get("return_code")
        return {
            "status": [value["status"]],
            "return_code": num(code),
            "signal": {"id": num(value.get("signal")), "name": ""},
        }
    return value


# The same limits in every format (dbv0.0.38's parse_assoc and data_parser's ASSOC):
# max.jobs.per.{count,accruing,submitted} = Grp{Jobs,JobsAccrue,Submit},
# max.jobs.{active,accruing,total} = Max{Jobs,JobsAccrue,Submit}, max.jobs.per.wall_clock
# = MaxWall, max.per.account.wall_clock = GrpWall; only the number shape changed.
_ASSOC_NUMBERS_V38: tuple[tuple[str, ...], ...] = (
    ("max", "jobs", "per", "count"),
    ("max", "jobs", "per", "accruing"),
    ("max", "jobs", "per", "submitted"),
    ("max", "jobs", "per", "wall_clock"),
    ("max", "jobs", "active"),
    ("max", "jobs", "accruing"),
    ("max", "jobs", "total"),
    ("max", "per", "account", "wall_clock"),
    ("min", "priority_threshold"),
    ("priority",),
)


@step("association", 40)
def _association_v40(record: Record, version: SlurmVersion | None) -> Record:
    for keys in _ASSOC_NUMBERS_V38:
        parent: Any = record
        for key in keys[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and keys[-1] in parent:
            parent[keys[-1]] = num(parent[keys[-1]])
    for key in ("user", "partition", "parent_account", "cluster"):
        if key in record and record[key] is None:
            record[key] = ""
    default = record.get("default")
    if isinstance(default, dict) and default.get("qos") is None and "qos" in default:
        default["qos"] = ""
    if isinstance(record.get("is_default"), int):
        record["is_default"] = bool(record["is_default"])
    return record


@step("user", 40)
def _user_v40(record: Record, version: SlurmVersion | None) -> Record:
    level = record.get("administrator_level")
    if isinstance(level, str):
        record["administrator_level"] = [level]
    for association in record.get("associations") or []:
        _association_v40(association, version)
    return record


# -------------------------------------------------------------------------------------- JSON


def _sacct_job(record: Record) -> Job:
    state = record.get("state") or {}
    base, flags = parse_job_state(state.get("current") or [])
    time = record.get("time") or {}
    array = record.get("array") or {}
    required = record.get("required") or {}
    het = record.get("het") or {}
    comment = record.get("comment") or {}
    association = record.get("association") or {}
    reservation = record.get("reservation") or {}
    limit = time.get("limit")
    elapsed = number(time.get("elapsed"))
    return Job(
        job_id=required_id(record),
        array_job_id=id_or_none(array.get("job_id")),
        array_task_id=array_task_id(array.get("task_id")),
        array_task_str=text_or_none(array.get("task")),
        het_job_id=id_or_none(het.get("job_id")),
        name=record.get("name"),
        user_name=record.get("user") or association.get("user"),
        group_name=record.get("group"),
        account=record.get("account"),
        partition=record.get("partition"),
        qos=record.get("qos"),
        state=base,
        state_flags=flags,
        state_reason=text_or_none(state.get("reason")),
        nodes=text_or_none(record.get("nodes")),
        node_count=number(record.get("allocation_nodes")),
        cpus=number(required.get("CPUs")),
        memory_per_node_mib=number(required.get("memory_per_node")),
        memory_per_cpu_mib=number(required.get("memory_per_cpu")),
        time_limit=None if is_infinite(limit) else minutes(limit),
        submit_time=epoch(time.get("submission")),
        eligible_time=epoch(time.get("eligible")),
        start_time=epoch(time.get("start")),
        end_time=epoch(time.get("end")),
        elapsed=timedelta(seconds=elapsed) if elapsed is not None else None,
        exit_code=exit_code(record.get("exit_code")),
        derived_exit_code=exit_code(record.get("derived_exit_code")),
        work_dir=record.get("working_directory"),
        submit_line=record.get("submit_line"),
        comment=comment.get("job"),
        priority=number(record.get("priority")),
        reservation=text_or_none(reservation.get("name")),
        restarts=number(record.get("restart_cnt")),
        standard_output=record.get("stdout_expanded") or record.get("stdout"),
        standard_error=record.get("stderr_expanded") or record.get("stderr"),
        cluster=record.get("cluster"),
        sluid=text_or_none(record.get("sluid")),
        original_sluid=text_or_none(record.get("original_sluid")),
        from_accounting=True,
    )


def _sacct_step(record: Record, job: Record) -> JobStep:
    ident = record.get("step") or {}
    full_id = str(ident.get("id") or "")
    job_part, _, step_id = full_id.partition(".")
    het_component = None
    if "+" in job_part:
        job_part, _, component = job_part.partition("+")
        het_component = int(component) if component.isdigit() else None
    state, flags = parse_job_state(record.get("state") or [])
    nodes = record.get("nodes") or {}
    time = record.get("time") or {}
    tasks = record.get("tasks") or {}
    cpus = next(
        (t.get("count") for t in (record.get("tres") or {}).get("allocated") or [] if t.get("type") == "cpu"),
        None,
    )
    return JobStep(
        job_id=int(job_part) if job_part.isdigit() else number(job.get("job_id")) or 0,
        step_id=step_id or full_id,
        het_component=het_component,
        name=ident.get("name"),
        state=state,
        state_flags=flags,
        nodes=text_or_none(nodes.get("range")),
        node_count=number(nodes.get("count")),
        tasks=number(tasks.get("count")),
        cpus=number(cpus),
        start_time=epoch(time.get("start")),
        end_time=epoch(time.get("end")),
        partition=job.get("partition"),
        user_name=job.get("user"),
        exit_code=exit_code(record.get("exit_code")),
        from_accounting=True,
    )


def parse_sacct_json(doc: dict[str, Any]) -> list[Job]:
    """Jobs from ``sacct --json`` or REST ``/slurmdb/jobs`` (``from_accounting=True``).

    22.05 reports every accounting exit code as 0, so those come out as ``None`` (see
    :func:`_sacct_exit_v40`). 26.05+ (v0.0.45) names each run of a job (``sluid``: a requeued
    job's runs differ). Steps are left out; see :func:`parse_sacct_steps_json`.

    Raises:
        SlurmError: no ``jobs`` in the document.
    """
    items, _ = upgraded(doc, "jobs", "sacct_job")
    return [_sacct_job(item) for item in items]


def parse_sacct_steps_json(doc: dict[str, Any]) -> list[JobStep]:
    """All steps of all jobs of a ``sacct --json`` / ``/slurmdb/jobs`` document."""
    items, _ = upgraded(doc, "jobs", "sacct_job")
    return [_sacct_step(record, item) for item in items for record in item.get("steps") or []]


def _tres(items: Any) -> dict[str, int]:
    """A TRES list (``[{"type": "gres", "name": "gpu", "count": 1}]``) as ``{"gres/gpu": 1}``.

    slurmdbd keeps memory TRES in MiB, so ``mem`` needs no conversion here. Negative and
    NO_VAL64-sized counts (unset) are dropped.
    """
    out: dict[str, int] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not item.get("type"):
            continue
        count = number(item.get("count"))
        if count is None or count < 0 or count >= 2**63:
            continue
        name = text_or_none(item.get("name"))
        out[f"{item['type']}/{name}" if name else str(item["type"])] = count
    return out


def _limits(record: Record) -> AssociationLimits:
    jobs = path(record, "max", "jobs") or {}
    per_job = jobs.get("per") or {}
    tres = path(record, "max", "tres") or {}
    return AssociationLimits(
        max_jobs=number(jobs.get("active")),
        max_jobs_accrue=number(jobs.get("accruing")),
        max_submit_jobs=number(jobs.get("total")),
        max_wall_minutes=number(per_job.get("wall_clock")),
        max_tres_per_job=_tres(path(tres, "per", "job")),
        max_tres_per_node=_tres(path(tres, "per", "node")),
        max_tres_minutes_per_job=_tres(path(tres, "minutes", "per", "job")),
        grp_jobs=number(per_job.get("count")),
        grp_submit_jobs=number(per_job.get("submitted")),
        grp_wall_minutes=number(path(record, "max", "per", "account", "wall_clock")),
        grp_tres=_tres(tres.get("total")),
        grp_tres_minutes=_tres(path(tres, "group", "minutes")),
    )


def _association(record: Record, default_account: str | None = None) -> Association:
    account = text_or_none(record.get("account"))
    if account is None:
        raise SlurmError("Slurm association record without 'account'")
    user = text_or_none(record.get("user"))
    partition = text_or_none(record.get("partition"))
    if "is_default" in record or "flags" in record:
        flags = [str(f).upper() for f in record.get("flags") or []]
        is_default = bool(record.get("is_default")) or "DEFAULT" in flags
    else:
        # A user's short association (account, cluster, partition, user) says nothing;
        # the user's default account does.
        is_default = default_account is not None and account == default_account and partition is None
    shares = number(record.get("shares_raw"))
    return Association(
        # 24.11.7 prints "id": 0 for every association (slurmdbd's ids start at 1).
        id=number(record.get("id")) or None,
        cluster=text_or_none(record.get("cluster")),
        user=user,
        account=account,
        partition=partition,
        # Only an account's own association has a parent; 22.05 and 24.11 agree on that.
        parent_account=text_or_none(record.get("parent_account")) if user is None else None,
        # 24.11.7 marks accounts' own associations is_default too; only users have defaults.
        is_default=is_default and user is not None,
        shares=shares,
        priority=number(record.get("priority")),
        qos=split_list(record.get("qos")),
        default_qos=text_or_none(path(record, "default", "qos")),
        limits=_limits(record),
    )


def parse_associations_json(doc: dict[str, Any]) -> list[Association]:
    """Associations from ``sacctmgr show assoc --json`` (24.11+) or REST
    ``/slurmdb/<ver>/associations``.

    Raises:
        SlurmError: no ``associations`` in the document, or a record without an account.
    """
    items, _ = upgraded(doc, "associations", "association")
    return [_association(item) for item in items]


_ADMIN_LEVELS: dict[str, AdminLevel] = {
    "none": "none",
    "not set": "none",
    "operator": "operator",
    "administrator": "administrator",
}


def _admin_level(value: Any) -> AdminLevel:
    levels = [str(v).strip().lower() for v in (value if isinstance(value, list) else [value]) if v]
    known = [_ADMIN_LEVELS[level] for level in levels if level in _ADMIN_LEVELS]
    if len(known) != len(levels):
        raise SlurmError(f"unknown Slurm administrator level {value!r}")
    order: list[AdminLevel] = ["none", "operator", "administrator"]
    return max(known, key=order.index, default="none")


def _user(record: Record) -> AccountingUser:
    name = text_or_none(record.get("name"))
    if name is None:
        raise SlurmError("Slurm user record without 'name'")
    default_account = text_or_none(path(record, "default", "account"))
    return AccountingUser(
        name=name,
        admin_level=_admin_level(record.get("administrator_level")),
        default_account=default_account,
        associations=[_association(a, default_account) for a in record.get("associations") or []],
    )


def parse_users_json(doc: dict[str, Any]) -> list[AccountingUser]:
    """Users from REST ``/slurmdb/<ver>/users`` (``uid`` stays None: nothing here does I/O).

    22.05 lists each user's associations (account, cluster, partition, user only: no
    limits or shares); v0.0.40+ lists them only when asked (``?with_assocs``), else ``[]``,
    and leaves ``default.account`` empty unless asked as well.

    Raises:
        SlurmError: no ``users`` in the document, a record without a name, or an unknown
            administrator level.
    """
    items, _ = upgraded(doc, "users", "user")
    return [_user(item) for item in items]


# -------------------------------------------------------------------------------------- text


def _sacct_rows(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip().lower() for h in lines[0].split("|")]
    if "jobid" not in header:
        raise SlurmError("sacct -P output without a JobID column (run it with a header, without -n)")
    return [dict(zip(header, line.split("|"), strict=False)) for line in lines[1:]]


def _node_count(row: dict[str, str]) -> int | None:
    """NNodes, or the size of NodeList when the -o list has no NNodes."""
    count = as_int(row.get("nnodes"))
    nodes = text_or_none(row.get("nodelist"))
    if count is None and nodes is not None and nodes != "None assigned":
        count = len(NodeSet(nodes))
    return count


def parse_sacct_text(text: str, *, tz: tzinfo | None = None) -> list[Job]:
    """Jobs (not steps) from ``sacct -P -o JobID,...`` with its header line.

    Exit codes are Slurm's ``rc:signal`` and correct in every release (unlike 22.05's
    sacct JSON). Add JobIDRaw to the fields to get array tasks' own ids.
    """
    jobs = []
    for row in _sacct_rows(text):
        job_text = row.get("jobid", "")
        if "." in job_text:
            continue
        job_id, array_job, task_id, task_str, het = job_ids(job_text)
        raw_id = as_int(row.get("jobidraw"))
        state, flags = parse_job_state(row.get("state", ""))
        user = text_or_none(row.get("user"))
        jobs.append(
            Job(
                job_id=raw_id if raw_id is not None else job_id,
                array_job_id=array_job,
                array_task_id=task_id,
                array_task_str=task_str,
                het_job_id=het,
                name=row.get("jobname"),
                user_name=user,
                user_id=as_int(row.get("uid")),
                group_name=text_or_none(row.get("group")),
                group_id=as_int(row.get("gid")),
                account=text_or_none(row.get("account")),
                partition=text_or_none(row.get("partition")),
                qos=text_or_none(row.get("qos")),
                state=state,
                state_flags=flags,
                state_reason=text_or_none(row.get("reason")),
                nodes=text_or_none(row.get("nodelist")) if row.get("nodelist") != "None assigned" else None,
                node_count=_node_count(row),
                cpus=as_int(row.get("ncpus") or row.get("alloccpus")),
                time_limit=as_duration(row.get("timelimit")),
                submit_time=parse_text_time(row.get("submit"), tz),
                eligible_time=parse_text_time(row.get("eligible"), tz),
                start_time=parse_text_time(row.get("start"), tz),
                end_time=parse_text_time(row.get("end"), tz),
                elapsed=as_duration(row.get("elapsed")),
                exit_code=exit_text(row.get("exitcode")),
                derived_exit_code=exit_text(row.get("derivedexitcode")),
                work_dir=text_or_none(row.get("workdir")),
                comment=text_or_none(row.get("comment")),
                priority=as_int(row.get("priority")),
                reservation=text_or_none(row.get("reservation")),
                restarts=as_int(row.get("restarts")),
                cluster=text_or_none(row.get("cluster")),
                from_accounting=True,
            )
        )
    return jobs


def parse_sacct_steps_text(text: str, *, tz: tzinfo | None = None) -> list[JobStep]:
    """The step rows (``2024.batch``, ``2024.0``) of ``sacct -P`` output."""
    steps = []
    for row in _sacct_rows(text):
        job_text, dot, step_id = row.get("jobid", "").partition(".")
        if not dot:
            continue
        job_id, _, _, _, _ = job_ids(job_text)
        state, flags = parse_job_state(row.get("state", ""))
        steps.append(
            JobStep(
                job_id=job_id,
                step_id=step_id,
                name=row.get("jobname"),
                state=state,
                state_flags=flags,
                nodes=text_or_none(row.get("nodelist")),
                node_count=_node_count(row),
                tasks=as_int(row.get("ntasks")),
                cpus=as_int(row.get("ncpus") or row.get("alloccpus")),
                start_time=parse_text_time(row.get("start"), tz),
                end_time=parse_text_time(row.get("end"), tz),
                partition=text_or_none(row.get("partition")),
                user_name=text_or_none(row.get("user")),
                exit_code=exit_text(row.get("exitcode")),
                from_accounting=True,
            )
        )
    return steps


# ---------------------------------------------------------------------------------- associations

#: slurmdbd's shares_raw for ``Fairshare=parent`` (SLURMDB_FS_USE_PARENT), as JSON prints it.
_SHARES_PARENT = 0x7FFFFFFF

#: sacctmgr column headers (lower case, spaces removed) -> the keys read below.
_ASSOC_COLUMNS = {
    "parname": "parentname",
    "fairshare": "share",
}


def _assoc_rows(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip().lower().replace(" ", "") for h in lines[0].split("|")]
    header = [_ASSOC_COLUMNS.get(h, h) for h in header]
    if "account" not in header:
        raise SlurmError("sacctmgr show assoc output without an Account column (run it with -P and a header)")
    return [dict(zip(header, line.split("|"), strict=False)) for line in lines[1:]]


def _assoc_count(row: dict[str, str], column: str) -> int | None:
    value = text_or_none(row.get(column))
    if value is None or value.upper() in ("UNLIMITED", "INFINITE"):
        return None
    if not re.fullmatch(r"\d+", value):
        raise SlurmError(f"sacctmgr {column} is not a count: {value!r}")
    return int(value)


def _assoc_minutes(row: dict[str, str], column: str) -> int | None:
    try:
        duration = parse_duration(row.get(column))
    except ValueError as exc:
        raise SlurmError(f"sacctmgr {column} is not a duration: {row.get(column)!r}") from exc
    return None if duration is None else int(duration.total_seconds() // 60)


def _tres_text(row: dict[str, str], column: str) -> dict[str, int]:
    """``cpu=4,mem=1000M,gres/gpu=1`` as ``{"cpu": 4, "mem": 1000, "gres/gpu": 1}``.

    sacctmgr prints memory-like TRES (mem, bb, fs/disk) with a unit suffix (``2G``); they
    are normalised to MiB, the unit slurmdbd stores and the JSON form prints.
    """
    out: dict[str, int] = {}
    for pair in split_list(row.get(column)):
        name, sep, value = pair.partition("=")
        amount = int(value) if value.isdigit() else memory_mib(value) if value[-1:].isalpha() else None
        if not sep or not name or amount is None:
            raise SlurmError(f"sacctmgr {column} has a bad TRES value: {pair!r}")
        out[name] = amount
    return out


def _shares(row: dict[str, str]) -> int | None:
    value = text_or_none(row.get("share"))
    if value is None:
        return None
    if value.lower() == "parent":
        return _SHARES_PARENT
    if not value.isdigit():
        raise SlurmError(f"sacctmgr Share is not a number or 'parent': {value!r}")
    return int(value)


def parse_associations_text(text: str) -> list[Association]:
    """Associations from ``sacctmgr -P show assoc`` (pipe-separated, with the header line).

    Reads the default columns (Cluster, Account, User, Partition, Share, Priority, the Grp*
    and Max* limits, QOS, Def QOS) and, when asked for with ``format=``, ID, ParentName and
    MaxJobsAccrue; other columns (GrpTRESRunMins ...) are ignored. The default columns
    carry no id and no default-account mark: ``id`` is None and ``is_default`` False.

    Raises:
        SlurmError: no Account column, or a value that is not what its column holds.
    """
    associations = []
    for row in _assoc_rows(text):
        account = text_or_none(row.get("account"))
        if account is None:
            raise SlurmError(f"sacctmgr association without an account: {'|'.join(row.values())!r}")
        user = text_or_none(row.get("user"))
        associations.append(
            Association(
                id=_assoc_count(row, "id") or None,
                cluster=text_or_none(row.get("cluster")),
                user=user,
                account=account,
                partition=text_or_none(row.get("partition")),
                parent_account=text_or_none(row.get("parentname")) if user is None else None,
                shares=_shares(row),
                priority=_assoc_count(row, "priority"),
                qos=split_list(row.get("qos")),
                default_qos=text_or_none(row.get("defqos")),
                limits=AssociationLimits(
                    max_jobs=_assoc_count(row, "maxjobs"),
                    max_jobs_accrue=_assoc_count(row, "maxjobsaccrue"),
                    max_submit_jobs=_assoc_count(row, "maxsubmit"),
                    max_wall_minutes=_assoc_minutes(row, "maxwall"),
                    max_tres_per_job=_tres_text(row, "maxtres"),
                    max_tres_per_node=_tres_text(row, "maxtrespernode"),
                    max_tres_minutes_per_job=_tres_text(row, "maxtresmins"),
                    grp_jobs=_assoc_count(row, "grpjobs"),
                    grp_submit_jobs=_assoc_count(row, "grpsubmit"),
                    grp_wall_minutes=_assoc_minutes(row, "grpwall"),
                    grp_tres=_tres_text(row, "grptres"),
                    grp_tres_minutes=_tres_text(row, "grptresmins"),
                ),
            )
        )
    return associations
