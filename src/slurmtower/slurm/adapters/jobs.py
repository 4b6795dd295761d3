"""Jobs as slurmctld holds them (``squeue --json``, ``scontrol show job --json``, REST ``/jobs``,
their text forms ``scontrol -o show job`` and squeue's table) and job steps (``scontrol show
steps``; the JSON that lists steps is accounting's, see :mod:`.accounting`).

Release steps of ``job`` records (see :mod:`._chain`):

====================  =========================================================================
step                  what changes
====================  =========================================================================
v0.0.38 -> v0.0.40    ``job_state`` a list; ``exit_code`` a raw wait status (768 = exit 3) ->
                      an object; times and counts become number objects.
v0.0.40 -> v0.0.44    keys were only added (``step_id`` with the run's ``sluid`` in v0.0.44,
                      ``submit_line``, ``std*_expanded`` ...).
v0.0.44 -> v0.0.45    removed ``power`` (never read); added ``container_type``,
                      ``memory_update_delay``/``margin`` (not read); ``job_resources.select_type``
                      names changed (``["CORE"]`` -> ``["CR_CORE_MEMORY"]``, not read); new job
                      flag ``JOB_IMPLICIT_MAX_NODES`` (flags are not read). Nothing to rewrite.
====================  =========================================================================

JSON has no ``alloc_sid`` (the text's ``AllocNode:Sid``), and 22.05's no ``allocating_node``.

Text: 26.05's ``scontrol -o show job`` adds ``Exclusive=`` and prints ``OverSubscribe=NO`` where
25.11 printed ``OK``; neither is read.
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.job import Job, JobStep, parse_job_state
from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._chain import Record, num, step, wrap
from slurmtower.slurm.adapters._json import array_task_id, exit_code, id_or_none, path, required_id, upgraded
from slurmtower.slurm.adapters._text import (
    as_duration,
    as_int,
    exit_text,
    field,
    job_ids,
    name_and_id,
    scontrol_records,
)
from slurmtower.slurm.adapters._values import (
    epoch,
    is_infinite,
    memory_mib,
    minutes,
    number,
    parse_text_time,
    text_or_none,
)
from slurmtower.slurm.adapters.accounting import parse_sacct_steps_json

__all__ = ["parse_jobs_json", "parse_jobs_text", "parse_squeue_text", "parse_steps_json", "parse_steps_text"]

# ----------------------------------------------------------------------------- release steps

_JOB_TIMES_V38 = (
    "accrue_time",
    "deadline",
    "eligible_time",
    "end_time",
    "last_sched_evaluation",
    "preempt_time",
    "pre_sus_time",
    "resize_time",
    "start_time",
    "submit_time",
    "suspend_time",
)
_JOB_NUMBERS_V38 = (
    "array_job_id",
    "array_task_id",
    "array_max_tasks",
    "cpus",
    "cpus_per_task",
    "het_job_id",
    "het_job_offset",
    "max_cpus",
    "max_nodes",
    "memory_per_cpu",
    "memory_per_node",
    "minimum_cpus_per_node",
    "minimum_tmp_disk_per_node",
    "node_count",
    "priority",
    "tasks",
    "time_limit",
    "time_minimum",
)


def _exit_object_v40(status: Any) -> dict[str, Any]:
    """A raw wait status (22.05 squeue/REST: 768 = exit 3) as a v0.0.40 exit code object."""
    if isinstance(status, dict):
        return status
    if status is None or not isinstance(status, int):
        return {"status": ["INVALID"], "return_code": num(None), "signal": {"id": num(None), "name": ""}}
    signal = status & 0x7F
    if signal:
        names = ["SIGNALED", *(["CORE_DUMPED"] if status & 0x80 else [])]
        return {"status": names, "return_code": num(None), "signal": {"id": num(signal), "name": ""}}
    code = (status >> 8) & 0xFF
    return {
        "status": ["SUCCESS" if code == 0 else "ERROR"],
        "return_code": num(code),
        "signal": {"id": num(None), "name": ""},
    }


@step("job", 40)
def _job_v40(record: Record, version: SlurmVersion | None) -> Record:
    state = record.get("job_state")
    if isinstance(state, str):
        record["job_state"] = [state]
    for key in ("exit_code", "derived_exit_code"):
        if key in record:
            record[key] = _exit_object_v40(record[key])
    # 22.05 prints array_job_id 0 and het_job_id 0 for "not an array / not het".
    wrap(record, *_JOB_TIMES_V38, *_JOB_NUMBERS_V38)
    return record


# -------------------------------------------------------------------------------------- JSON


def _job(record: Record) -> Job:
    state, flags = parse_job_state(record.get("job_state") or [])
    time_limit = None if is_infinite(record.get("time_limit")) else minutes(record.get("time_limit"))
    return Job(
        job_id=required_id(record),
        array_job_id=id_or_none(record.get("array_job_id")),
        array_task_id=array_task_id(record.get("array_task_id")),
        array_task_str=text_or_none(record.get("array_task_string")),
        het_job_id=id_or_none(record.get("het_job_id")),
        name=record.get("name"),
        user_name=record.get("user_name"),
        user_id=number(record.get("user_id")),
        group_name=record.get("group_name"),
        group_id=number(record.get("group_id")),
        account=record.get("account"),
        partition=record.get("partition"),
        qos=record.get("qos"),
        state=state,
        state_flags=flags,
        state_reason=text_or_none(record.get("state_reason")),
        nodes=record.get("nodes"),
        node_count=number(record.get("node_count")),
        cpus=number(record.get("cpus")),
        tasks=number(record.get("tasks")),
        memory_per_node_mib=number(record.get("memory_per_node")),
        memory_per_cpu_mib=number(record.get("memory_per_cpu")),
        time_limit=time_limit,
        submit_time=epoch(record.get("submit_time")),
        eligible_time=epoch(record.get("eligible_time")),
        start_time=epoch(record.get("start_time")),
        end_time=epoch(record.get("end_time")),
        exit_code=exit_code(record.get("exit_code")),
        derived_exit_code=exit_code(record.get("derived_exit_code")),
        batch_host=record.get("batch_host"),
        work_dir=record.get("current_working_directory"),
        command=record.get("command"),
        submit_line=record.get("submit_line"),
        comment=record.get("comment"),
        priority=number(record.get("priority")),
        reservation=record.get("resv_name"),
        dependency=record.get("dependency"),
        restarts=number(record.get("restart_cnt")),
        accrue_time=epoch(record.get("accrue_time")),
        admin_comment=text_or_none(record.get("admin_comment")),
        alloc_node=text_or_none(record.get("allocating_node")),
        array_max_tasks=id_or_none(record.get("array_max_tasks")),
        standard_output=record.get("standard_output"),
        standard_error=record.get("standard_error"),
        cluster=record.get("cluster"),
        sluid=text_or_none(path(record, "step_id", "sluid")),
    )


def parse_jobs_json(doc: dict[str, Any]) -> list[Job]:
    """Jobs from ``squeue --json``, ``scontrol show job --json`` or REST ``/jobs``.

    Note that 22.05's ``squeue --json`` ignores ``-t/-u/-p`` and returns every job slurmctld
    still holds, while 24.11+ applies squeue's default PENDING/RUNNING filter.

    Raises:
        SlurmError: no ``jobs`` in the document.
    """
    items, _ = upgraded(doc, "jobs", "job")
    return [_job(item) for item in items]


def parse_steps_json(doc: dict[str, Any]) -> list[JobStep]:
    """Steps of the jobs in a sacct or REST ``/slurmdb/jobs`` document (the only JSON that
    lists steps: ``scontrol show steps`` has no ``--json``)."""
    return parse_sacct_steps_json(doc)


# -------------------------------------------------------------------------------------- text


def _array_task(value: str | None) -> tuple[int | None, str | None]:
    if value is None:
        return None, None
    return (int(value), None) if value.isdigit() else (None, value)


def parse_jobs_text(text: str, *, tz: tzinfo | None = None) -> list[Job]:
    """Jobs from ``scontrol -o show job`` (or the multi-line form)."""
    jobs = []
    for f in scontrol_records(text, "JobId"):
        user, uid = name_and_id(field(f, "UserId"))
        group, gid = name_and_id(field(f, "GroupId"))
        state, flags = parse_job_state(f.get("JobState", ""))
        task_id, task_str = _array_task(field(f, "ArrayTaskId"))
        memory_cpu = memory_mib(f.get("MinMemoryCPU"))
        alloc = field(f, "AllocNode:Sid") or ""
        alloc_node, _, sid = alloc.rpartition(":") if ":" in alloc else (alloc, "", "")
        alloc_sid = as_int(sid)
        jobs.append(
            Job(
                job_id=int(f["JobId"]),
                array_job_id=as_int(f.get("ArrayJobId")),
                array_task_id=task_id,
                array_task_str=task_str,
                het_job_id=as_int(f.get("HetJobId")),
                name=f.get("JobName"),
                user_name=user,
                user_id=uid,
                group_name=group,
                group_id=gid,
                account=field(f, "Account"),
                partition=field(f, "Partition"),
                qos=field(f, "QOS"),
                state=state,
                state_flags=flags,
                state_reason=field(f, "Reason"),
                nodes=field(f, "NodeList"),
                node_count=as_int(f.get("NumNodes")),
                cpus=as_int(f.get("NumCPUs")),
                tasks=as_int(f.get("NumTasks")),
                memory_per_node_mib=memory_mib(f.get("MinMemoryNode")) if memory_cpu is None else None,
                memory_per_cpu_mib=memory_cpu,
                time_limit=as_duration(f.get("TimeLimit")),
                submit_time=parse_text_time(f.get("SubmitTime"), tz),
                eligible_time=parse_text_time(f.get("EligibleTime"), tz),
                start_time=parse_text_time(f.get("StartTime"), tz),
                end_time=parse_text_time(f.get("EndTime"), tz),
                elapsed=as_duration(f.get("RunTime")),
                exit_code=exit_text(f.get("ExitCode")),
                derived_exit_code=exit_text(f.get("DerivedExitCode")),
                batch_host=field(f, "BatchHost"),
                work_dir=field(f, "WorkDir"),
                command=field(f, "Command"),
                submit_line=field(f, "SubmitLine"),
                comment=field(f, "Comment"),
                priority=as_int(f.get("Priority")),
                reservation=field(f, "Reservation"),
                dependency=field(f, "Dependency"),
                restarts=as_int(f.get("Restarts")),
                accrue_time=parse_text_time(f.get("AccrueTime"), tz),
                admin_comment=field(f, "AdminComment"),
                alloc_node=alloc_node,
                alloc_sid=alloc_sid,
                array_max_tasks=as_int(f.get("ArrayTaskThrottle")) or None,
                standard_output=field(f, "StdOut"),
                standard_error=field(f, "StdErr"),
            )
        )
    return jobs


def parse_steps_text(text: str, *, tz: tzinfo | None = None) -> list[JobStep]:
    """Steps from ``scontrol -o show steps`` ("No job steps in the system" gives none)."""
    steps = []
    for f in scontrol_records(text, "StepId"):
        step_text = f["StepId"]
        job_part, _, step_id = step_text.partition(".")
        het_component = None
        if "+" in job_part:
            job_part, _, component = job_part.partition("+")
            het_component = as_int(component)
        job_id = as_int(job_part)
        if job_id is None:
            raise SlurmError(f"not a step id: {step_text!r}")
        user, uid = name_and_id(field(f, "UserId"))
        state, flags = parse_job_state(f.get("State", ""))
        steps.append(
            JobStep(
                job_id=job_id,
                step_id=step_id or step_text,
                het_component=het_component,
                name=field(f, "Name"),
                state=state,
                state_flags=flags,
                nodes=field(f, "NodeList"),
                node_count=as_int(f.get("Nodes")),
                tasks=as_int(f.get("Tasks")),
                cpus=as_int(f.get("CPUs")),
                start_time=parse_text_time(f.get("StartTime"), tz),
                time_limit=as_duration(f.get("TimeLimit")),
                partition=field(f, "Partition"),
                user_name=user,
                user_id=uid,
            )
        )
    return steps


def parse_squeue_text(text: str) -> list[Job]:
    """Partial jobs from squeue's default table (JOBID PARTITION NAME USER ST TIME NODES
    NODELIST(REASON)). The default format cuts names to 8 characters; prefer ``--json``."""
    jobs = []
    for line in text.splitlines()[1:]:
        parts = line.split(None, 7)
        if len(parts) < 8:
            continue
        job_text, partition, name, user, code, elapsed, count, where = parts
        job_id, array_job, task_id, task_str, het = job_ids(job_text)
        state, flags = parse_job_state(code)
        pending_reason = where.startswith("(") and where.endswith(")")
        jobs.append(
            Job(
                job_id=job_id,
                array_job_id=array_job,
                array_task_id=task_id,
                array_task_str=task_str,
                het_job_id=het,
                name=name,
                user_name=user,
                partition=partition,
                state=state,
                state_flags=flags,
                state_reason=where[1:-1] if pending_reason else None,
                nodes=None if pending_reason else where,
                node_count=as_int(count),
                elapsed=as_duration(elapsed),
            )
        )
    return jobs

