"""Text output of the Slurm commands to models.

Used where a release has no JSON (22.05's scontrol, sdiag; strigger and ``scontrol show
config`` everywhere) and as a cross-check of the JSON. Text timestamps are local time without
a zone: every parser takes ``tz``, the cluster's zone (default: this machine's).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.accounting import Association, AssociationLimits
from slurmtower.models.config import ClusterConfig, config_key
from slurmtower.models.job import ExitCode, Job, JobStep, parse_job_state
from slurmtower.models.node import Node, NodeReason, parse_node_state
from slurmtower.models.partition import Partition
from slurmtower.models.reservation import Reservation
from slurmtower.models.stats import ControllerStats, RpcStat, RpcUserStat
from slurmtower.models.trigger import Trigger
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.adapters._values import (
    memory_mib,
    parse_duration,
    parse_text_time,
    split_list,
    text_or_none,
)

__all__ = [
    "parse_associations_text",
    "parse_config_text",
    "parse_jobs_text",
    "parse_nodes_text",
    "parse_partitions_text",
    "parse_reservations_text",
    "parse_sacct_steps_text",
    "parse_sacct_text",
    "parse_sdiag_text",
    "parse_sinfo_reasons_text",
    "parse_sinfo_text",
    "parse_squeue_text",
    "parse_steps_text",
    "parse_triggers_text",
    "split_key_values",
]

# A key starts a new field only when a space (or the line start) precedes it, so values with
# spaces survive: "Reason=disk replace [root@...]", "OS=Linux 6.1 #1 SMP", "Command=/a b".
_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.]*)=")


def split_key_values(line: str) -> dict[str, str]:
    """Split one ``scontrol -o show`` record into ``{Key: value}`` (values stripped).

    A key is ``[A-Za-z][A-Za-z0-9_:/.]*`` followed by ``=`` and preceded by a space or the
    line start; everything up to the next such key is the value, spaces included.
    """
    matches = list(_KEY_RE.finditer(line))
    result: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        result.setdefault(match[1], line[match.end() : end].strip())
    return result


def _records(text: str, first_key: str) -> list[dict[str, str]]:
    """Records of ``scontrol [-o] show ...``: one per line with ``-o``, else one per block
    of indented lines starting with ``first_key=``. "No ... in the system" gives none."""
    blocks: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith(f"{first_key}="):
            blocks.append([line.strip()])
        elif blocks and raw[:1].isspace():
            blocks[-1].append(line.strip())
        elif line.startswith("No ") and line.endswith(" in the system"):
            continue
        elif blocks:
            blocks[-1].append(line.strip())
        else:
            raise SlurmError(f"unexpected line in scontrol output: {line[:80]!r}")
    return [split_key_values(" ".join(block)) for block in blocks]


def _value(fields: dict[str, str], key: str) -> str | None:
    return text_or_none(fields.get(key))


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    match = re.match(r"^\s*(-?\d+)", value)
    return int(match[1]) if match else None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _limit(value: str | None) -> int | None:
    """A count where ``UNLIMITED``/``INFINITE`` means no limit (``None``)."""
    if value is None or value.upper() in ("UNLIMITED", "INFINITE"):
        return None
    return _int(value)


def _duration(value: str | None) -> timedelta | None:
    try:
        return parse_duration(value)
    except ValueError:
        return None


def _name_and_id(value: str | None) -> tuple[str | None, int | None]:
    """``alice(1001)`` -> ("alice", 1001); ``1001`` -> (None, 1001)."""
    if value is None:
        return None, None
    match = re.fullmatch(r"(.*?)\((\d+)\)", value)
    if match:
        return (match[1] or None), int(match[2])
    if value.isdigit():
        return None, int(value)
    return value, None


_REASON_RE = re.compile(r"^(.*?)\s*\[([^@\]]*)@([^\]]+)\]\s*$")


def _reason(value: str | None, tz: tzinfo | None) -> tuple[str | None, str | None, datetime | None]:
    """``disk replace [root@2026-11-29T10:00:00]`` -> (reason, user, time)."""
    if value is None:
        return None, None, None
    match = _REASON_RE.match(value)
    if match is None:
        return value, None, None
    return (match[1] or None), (match[2] or None), parse_text_time(match[3], tz)


# ----------------------------------------------------------------------------------------- nodes


def parse_nodes_text(text: str, *, tz: tzinfo | None = None) -> list[Node]:
    """Nodes from ``scontrol -o show node`` (or the multi-line form)."""
    nodes = []
    for f in _records(text, "NodeName"):
        state, flags = parse_node_state(f.get("State", ""))
        reason, user, changed = _reason(_value(f, "Reason"), tz)
        cpus, alloc = _int(f.get("CPUTot")), _int(f.get("CPUAlloc"))
        nodes.append(
            Node(
                name=f["NodeName"],
                state=state,
                flags=flags,
                reason=reason,
                reason_set_by_user=user,
                reason_changed_at=changed,
                partitions=split_list(f.get("Partitions")),
                cpus=cpus,
                alloc_cpus=alloc,
                idle_cpus=cpus - alloc if cpus is not None and alloc is not None else None,
                effective_cpus=_int(f.get("CPUEfctv")),
                sockets=_int(f.get("Sockets")),
                cores_per_socket=_int(f.get("CoresPerSocket")),
                threads_per_core=_int(f.get("ThreadsPerCore")),
                real_memory_mib=_int(f.get("RealMemory")),
                alloc_memory_mib=_int(f.get("AllocMem")),
                free_memory_mib=_int(f.get("FreeMem")),
                tmp_disk_mib=_int(f.get("TmpDisk")),
                cpu_load=_float(_value(f, "CPULoad")),
                features=split_list(f.get("AvailableFeatures")),
                active_features=split_list(f.get("ActiveFeatures")),
                gres=_value(f, "Gres"),
                gres_used=_value(f, "GresUsed"),
                weight=_int(f.get("Weight")),
                comment=_value(f, "Comment"),
                extra=_value(f, "Extra"),
                address=_value(f, "NodeAddr"),
                hostname=_value(f, "NodeHostName"),
                port=_int(f.get("Port")),
                boot_time=parse_text_time(f.get("BootTime"), tz),
                slurmd_start_time=parse_text_time(f.get("SlurmdStartTime"), tz),
                last_busy=parse_text_time(f.get("LastBusyTime"), tz),
                resume_after=parse_text_time(f.get("ResumeAfterTime"), tz),
                slurmd_version=_value(f, "Version"),
                architecture=_value(f, "Arch"),
                operating_system=_value(f, "OS"),
                owner=_value(f, "Owner"),
                tres=_value(f, "CfgTRES"),
                tres_used=_value(f, "AllocTRES"),
                reservation=_value(f, "ReservationName"),
            )
        )
    return nodes


def parse_sinfo_text(text: str) -> list[Node]:
    """Partial nodes (name, state, flags, partitions) from ``sinfo`` or ``sinfo -N``.

    Needs the PARTITION, STATE and NODELIST columns (default format); sinfo's short states
    fold the base state away for some words (``drain``, ``drng``), see
    :func:`~slurmtower.models.parse_node_state`.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.upper() for h in lines[0].split()]
    try:
        col_state = header.index("STATE")
        col_nodes = header.index("NODELIST") if "NODELIST" in header else header.index("HOSTNAMES")
    except ValueError as exc:
        raise SlurmError(f"sinfo output without STATE/NODELIST columns: {lines[0]!r}") from exc
    col_part = header.index("PARTITION") if "PARTITION" in header else None
    merged: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        cols = line.split()
        if len(cols) < len(header):
            continue
        state, flags = parse_node_state(cols[col_state])
        partition = cols[col_part].rstrip("*") if col_part is not None else None
        for name in NodeSet(cols[col_nodes]):
            node = merged.setdefault(name, {"name": name, "partitions": []})
            node.update(state=state, flags=flags)
            if partition and partition not in node["partitions"]:
                node["partitions"].append(partition)
    return [Node(**fields) for fields in merged.values()]


def parse_sinfo_reasons_text(text: str, *, tz: tzinfo | None = None) -> list[NodeReason]:
    """``sinfo -R`` (REASON USER TIMESTAMP NODELIST); the reason may contain spaces."""
    result = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 4:
            continue
        *reason, user, stamp, nodes = parts
        result.append(
            NodeReason(
                nodes=nodes,
                reason=" ".join(reason),
                user=text_or_none(user),
                changed_at=parse_text_time(stamp, tz),
            )
        )
    return result


# ------------------------------------------------------------------------------------------ jobs


def _job_ids(text: str) -> tuple[int, int | None, int | None, str | None, int | None]:
    """``2018``, ``2022_3``, ``2023_[1-5%2]``, ``100+1`` ->
    (job_id, array_job_id, array_task_id, array_task_str, het_job_id).

    Without JobIDRaw a task's own id is unknown and the array's id stands in for it.
    """
    match = re.fullmatch(r"(\d+)(?:_(\d+)|_\[(.+)\]|\+(\d+))?", text.strip())
    if match is None:
        raise SlurmError(f"not a job id: {text!r}")
    job_id = int(match[1])
    if match[2] is not None:
        return job_id, job_id, int(match[2]), None, None
    if match[3] is not None:
        return job_id, job_id, None, match[3], None
    if match[4] is not None:
        return job_id + int(match[4]), None, None, None, job_id
    return job_id, None, None, None, None


def _array_task(value: str | None) -> tuple[int | None, str | None]:
    if value is None:
        return None, None
    return (int(value), None) if value.isdigit() else (None, value)


def _exit(value: str | None) -> ExitCode | None:
    try:
        return ExitCode.from_text(value) if value else None
    except ValueError:
        return None


def parse_jobs_text(text: str, *, tz: tzinfo | None = None) -> list[Job]:
    """Jobs from ``scontrol -o show job`` (or the multi-line form)."""
    jobs = []
    for f in _records(text, "JobId"):
        user, uid = _name_and_id(_value(f, "UserId"))
        group, gid = _name_and_id(_value(f, "GroupId"))
        state, flags = parse_job_state(f.get("JobState", ""))
        task_id, task_str = _array_task(_value(f, "ArrayTaskId"))
        memory_cpu = memory_mib(f.get("MinMemoryCPU"))
        jobs.append(
            Job(
                job_id=int(f["JobId"]),
                array_job_id=_int(f.get("ArrayJobId")),
                array_task_id=task_id,
                array_task_str=task_str,
                het_job_id=_int(f.get("HetJobId")),
                name=f.get("JobName"),
                user_name=user,
                user_id=uid,
                group_name=group,
                group_id=gid,
                account=_value(f, "Account"),
                partition=_value(f, "Partition"),
                qos=_value(f, "QOS"),
                state=state,
                state_flags=flags,
                state_reason=_value(f, "Reason"),
                nodes=_value(f, "NodeList"),
                node_count=_int(f.get("NumNodes")),
                cpus=_int(f.get("NumCPUs")),
                tasks=_int(f.get("NumTasks")),
                memory_per_node_mib=memory_mib(f.get("MinMemoryNode")) if memory_cpu is None else None,
                memory_per_cpu_mib=memory_cpu,
                time_limit=_duration(f.get("TimeLimit")),
                submit_time=parse_text_time(f.get("SubmitTime"), tz),
                eligible_time=parse_text_time(f.get("EligibleTime"), tz),
                start_time=parse_text_time(f.get("StartTime"), tz),
                end_time=parse_text_time(f.get("EndTime"), tz),
                elapsed=_duration(f.get("RunTime")),
                exit_code=_exit(f.get("ExitCode")),
                derived_exit_code=_exit(f.get("DerivedExitCode")),
                batch_host=_value(f, "BatchHost"),
                work_dir=_value(f, "WorkDir"),
                command=_value(f, "Command"),
                submit_line=_value(f, "SubmitLine"),
                comment=_value(f, "Comment"),
                priority=_int(f.get("Priority")),
                reservation=_value(f, "Reservation"),
                dependency=_value(f, "Dependency"),
                restarts=_int(f.get("Restarts")),
                standard_output=_value(f, "StdOut"),
                standard_error=_value(f, "StdErr"),
            )
        )
    return jobs


def parse_steps_text(text: str, *, tz: tzinfo | None = None) -> list[JobStep]:
    """Steps from ``scontrol -o show steps`` ("No job steps in the system" gives none)."""
    steps = []
    for f in _records(text, "StepId"):
        step_text = f["StepId"]
        job_part, _, step_id = step_text.partition(".")
        het_component = None
        if "+" in job_part:
            job_part, _, component = job_part.partition("+")
            het_component = _int(component)
        job_id = _int(job_part)
        if job_id is None:
            raise SlurmError(f"not a step id: {step_text!r}")
        user, uid = _name_and_id(_value(f, "UserId"))
        state, flags = parse_job_state(f.get("State", ""))
        steps.append(
            JobStep(
                job_id=job_id,
                step_id=step_id or step_text,
                het_component=het_component,
                name=_value(f, "Name"),
                state=state,
                state_flags=flags,
                nodes=_value(f, "NodeList"),
                node_count=_int(f.get("Nodes")),
                tasks=_int(f.get("Tasks")),
                cpus=_int(f.get("CPUs")),
                start_time=parse_text_time(f.get("StartTime"), tz),
                time_limit=_duration(f.get("TimeLimit")),
                partition=_value(f, "Partition"),
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
        job_id, array_job, task_id, task_str, het = _job_ids(job_text)
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
                node_count=_int(count),
                elapsed=_duration(elapsed),
            )
        )
    return jobs


# ------------------------------------------------------------------------------------ accounting


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
    count = _int(row.get("nnodes"))
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
        job_id, array_job, task_id, task_str, het = _job_ids(job_text)
        raw_id = _int(row.get("jobidraw"))
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
                user_id=_int(row.get("uid")),
                group_name=text_or_none(row.get("group")),
                group_id=_int(row.get("gid")),
                account=text_or_none(row.get("account")),
                partition=text_or_none(row.get("partition")),
                qos=text_or_none(row.get("qos")),
                state=state,
                state_flags=flags,
                state_reason=text_or_none(row.get("reason")),
                nodes=text_or_none(row.get("nodelist")) if row.get("nodelist") != "None assigned" else None,
                node_count=_node_count(row),
                cpus=_int(row.get("ncpus") or row.get("alloccpus")),
                time_limit=_duration(row.get("timelimit")),
                submit_time=parse_text_time(row.get("submit"), tz),
                eligible_time=parse_text_time(row.get("eligible"), tz),
                start_time=parse_text_time(row.get("start"), tz),
                end_time=parse_text_time(row.get("end"), tz),
                elapsed=_duration(row.get("elapsed")),
                exit_code=_exit(row.get("exitcode")),
                derived_exit_code=_exit(row.get("derivedexitcode")),
                work_dir=text_or_none(row.get("workdir")),
                comment=text_or_none(row.get("comment")),
                priority=_int(row.get("priority")),
                reservation=text_or_none(row.get("reservation")),
                restarts=_int(row.get("restarts")),
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
        job_id, _, _, _, _ = _job_ids(job_text)
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
                tasks=_int(row.get("ntasks")),
                cpus=_int(row.get("ncpus") or row.get("alloccpus")),
                start_time=parse_text_time(row.get("start"), tz),
                end_time=parse_text_time(row.get("end"), tz),
                partition=text_or_none(row.get("partition")),
                user_name=text_or_none(row.get("user")),
                exit_code=_exit(row.get("exitcode")),
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


# ------------------------------------------------------------------------ partitions, reservations


def _allow(value: str | None) -> list[str] | None:
    """``ALL`` (or unset) means everyone: ``None``."""
    if value is None or value.upper() == "ALL":
        return None
    return split_list(value)


def _yes(value: str | None) -> bool | None:
    return None if value is None else value.upper() == "YES"


def parse_partitions_text(text: str) -> list[Partition]:
    """Partitions from ``scontrol -o show partition``."""
    partitions = []
    for f in _records(text, "PartitionName"):
        grace = _int(f.get("GraceTime"))
        partitions.append(
            Partition(
                name=f["PartitionName"],
                state=(_value(f, "State") or "UNKNOWN").upper(),
                nodes=_value(f, "Nodes"),
                total_nodes=_int(f.get("TotalNodes")),
                total_cpus=_int(f.get("TotalCPUs")),
                is_default=_yes(f.get("Default")),
                hidden=_yes(f.get("Hidden")),
                max_time=_duration(f.get("MaxTime")),
                default_time=_duration(f.get("DefaultTime")),
                min_nodes=_limit(f.get("MinNodes")),
                max_nodes=_limit(f.get("MaxNodes")),
                max_cpus_per_node=_limit(f.get("MaxCPUsPerNode")),
                default_memory_per_node_mib=_limit(f.get("DefMemPerNode")) or None,
                max_memory_per_node_mib=_limit(f.get("MaxMemPerNode")) or None,
                allow_accounts=_allow(_value(f, "AllowAccounts")),
                deny_accounts=split_list(f.get("DenyAccounts")),
                allow_groups=_allow(_value(f, "AllowGroups")),
                allow_qos=_allow(_value(f, "AllowQos")),
                deny_qos=split_list(f.get("DenyQos")),
                qos=_value(f, "QoS"),
                priority_tier=_int(f.get("PriorityTier")),
                priority_job_factor=_int(f.get("PriorityJobFactor")),
                grace_time=timedelta(seconds=grace) if grace is not None else None,
                tres=_value(f, "TRES"),
            )
        )
    return partitions


def parse_reservations_text(text: str, *, tz: tzinfo | None = None) -> list[Reservation]:
    """Reservations from ``scontrol -o show reservation``; 22.05 prints "No reservations in
    the system" when there are none, which gives ``[]``."""
    return [
        Reservation(
            name=f["ReservationName"],
            nodes=_value(f, "Nodes"),
            node_count=_int(f.get("NodeCnt")),
            core_count=_int(f.get("CoreCnt")),
            start_time=parse_text_time(f.get("StartTime"), tz),
            end_time=parse_text_time(f.get("EndTime"), tz),
            duration=_duration(f.get("Duration")),
            flags=split_list(f.get("Flags")),
            users=split_list(f.get("Users")),
            accounts=split_list(f.get("Accounts")),
            groups=split_list(f.get("Groups")),
            partition=_value(f, "PartitionName"),
            features=_value(f, "Features"),
            tres=_value(f, "TRES"),
            state=_value(f, "State"),
        )
        for f in _records(text, "ReservationName")
    ]


# -------------------------------------------------------------------------------- config, sdiag


_CONFIG_LINE = re.compile(r"^(\S[^=]*?)\s*=\s?(.*)$")
_CONTROLLER_LINE = re.compile(r"^Slurmctld\((\w+)\) at (\S+) is (\w+)")


def parse_config_text(text: str, *, tz: tzinfo | None = None) -> ClusterConfig:
    """``scontrol show config`` as a :class:`ClusterConfig` (keys in snake case)."""
    items: dict[str, str] = {}
    as_of = None
    controllers: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("Configuration data as of "):
            as_of = parse_text_time(line.removeprefix("Configuration data as of ").strip(), tz)
            continue
        controller = _CONTROLLER_LINE.match(line)
        if controller:
            controllers[controller[2]] = controller[3]
            continue
        match = _CONFIG_LINE.match(line)
        if match and " = " in line:
            items.setdefault(config_key(match[1]), match[2].strip())
    if not items:
        raise SlurmError("no 'Key = Value' lines in scontrol show config output")
    return ClusterConfig(items=items, as_of=as_of, controllers=controllers)


_SDIAG_FIELDS: dict[tuple[str, str], str] = {
    ("", "server thread count"): "server_thread_count",
    ("", "agent queue size"): "agent_queue_size",
    ("", "agent count"): "agent_count",
    ("", "agent thread count"): "agent_thread_count",
    ("", "dbd agent queue size"): "dbd_agent_queue_size",
    ("", "jobs submitted"): "jobs_submitted",
    ("", "jobs started"): "jobs_started",
    ("", "jobs completed"): "jobs_completed",
    ("", "jobs canceled"): "jobs_canceled",
    ("", "jobs failed"): "jobs_failed",
    ("", "jobs pending"): "jobs_pending",
    ("", "jobs running"): "jobs_running",
    ("main", "last cycle"): "schedule_cycle_last_us",
    ("main", "max cycle"): "schedule_cycle_max_us",
    ("main", "total cycles"): "schedule_cycle_count",
    ("main", "mean cycle"): "schedule_cycle_mean_us",
    ("main", "mean depth cycle"): "schedule_cycle_mean_depth",
    ("main", "cycles per minute"): "schedule_cycles_per_minute",
    ("main", "last queue length"): "schedule_queue_length",
    ("backfill", "total backfilled jobs (since last slurm start)"): "backfilled_jobs",
    ("backfill", "total backfilled jobs (since last stats cycle start)"): "backfilled_jobs_since_last_cycle",
    ("backfill", "total backfilled heterogeneous job components"): "backfilled_het_jobs",
    ("backfill", "total cycles"): "backfill_cycle_count",
    ("backfill", "last cycle"): "backfill_cycle_last_us",
    ("backfill", "max cycle"): "backfill_cycle_max_us",
    ("backfill", "mean cycle"): "backfill_cycle_mean_us",
    ("backfill", "last depth cycle"): "backfill_last_depth",
    ("backfill", "last depth cycle (try sched)"): "backfill_last_depth_try",
    ("backfill", "last queue length"): "backfill_queue_length",
    ("backfill", "last table size"): "backfill_table_size",
}
_SDIAG_TIMES: dict[tuple[str, str], str] = {
    ("", "sdiag output at"): "slurm_time",
    ("", "data since"): "data_since",
    ("", "job states ts"): "job_states_time",
    ("backfill", "last cycle when"): "backfill_last_cycle_time",
}
_RPC_LINE = re.compile(r"^\s*(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)")
_EPOCH_IN_PARENS = re.compile(r"\((\d+)\)\s*$")


def parse_sdiag_text(text: str) -> ControllerStats:
    """``sdiag`` text (the only form in 22.05) as :class:`ControllerStats`."""
    section = ""
    values: dict[str, Any] = {}
    raw: dict[str, dict[str, str]] = {}
    by_type: list[RpcStat] = []
    by_user: list[RpcUserStat] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("*****"):
            continue
        lower = stripped.lower()
        if not line[:1].isspace():
            if lower.startswith("main schedule statistics"):
                section = "main"
                continue
            if lower.startswith("backfilling stats"):
                section = "backfill"
                values["backfill_active"] = "middle of backfilling" in lower
                continue
            if lower.startswith("remote procedure call statistics by message type"):
                section = "rpc_type"
                continue
            if lower.startswith("remote procedure call statistics by user"):
                section = "rpc_user"
                continue
            if lower.startswith(("main scheduler exit", "backfill exit", "pending rpc")):
                section = "other"
                continue
            if lower.startswith(("sdiag output at", "data since")):
                section = ""
            elif lower.startswith("latency for 1000 calls"):
                values["gettimeofday_latency_us"] = _int(stripped.split(":", 1)[1])
                continue
        if section in ("rpc_type", "rpc_user"):
            rpc = _RPC_LINE.match(line)
            if rpc:
                name, ident, count, average, total = rpc.groups()
                if section == "rpc_type":
                    by_type.append(
                        RpcStat(
                            name=name,
                            type_id=int(ident),
                            count=int(count),
                            average_time_us=int(average),
                            total_time_us=int(total),
                        )
                    )
                else:
                    by_user.append(
                        RpcUserStat(
                            user=name,
                            user_id=int(ident),
                            count=int(count),
                            average_time_us=int(average),
                            total_time_us=int(total),
                        )
                    )
            continue
        if lower.startswith("sdiag output at"):
            label, value = "sdiag output at", stripped
        elif lower.startswith("data since"):
            label, value = "data since", stripped
        else:
            label, sep, value = stripped.partition(":")
            if not sep:
                continue
        key = (section if section in ("main", "backfill") else "", label.strip().lower())
        raw.setdefault(section or "general", {})[key[1]] = value.strip()
        if key in _SDIAG_FIELDS:
            values[_SDIAG_FIELDS[key]] = _int(value)
        elif key in _SDIAG_TIMES:
            stamp = _EPOCH_IN_PARENS.search(value)
            values[_SDIAG_TIMES[key]] = datetime.fromtimestamp(int(stamp[1]), UTC) if stamp else None
    if not values:
        raise SlurmError("no statistics in sdiag output")
    return ControllerStats(**values, rpcs_by_type=by_type, rpcs_by_user=by_user, raw=raw)


# -------------------------------------------------------------------------------------- triggers


def parse_triggers_text(text: str) -> list[Trigger]:
    """``strigger --get``. The FLAGS column is empty for one-shot triggers, so the line is
    split into six columns, then an optional ``PERM``, then the program with its arguments."""
    triggers = []
    for line in text.splitlines():
        parts = line.split(maxsplit=6)
        if len(parts) < 7 or not parts[0].isdigit():
            continue
        trigger_id, res_type, res_id, event, offset, user, rest = parts
        flags: list[str] = []
        first, _, remainder = rest.partition(" ")
        if not first.startswith("/") and first.isupper():
            flags = [f for f in first.split(",") if f]
            rest = remainder.strip()
        triggers.append(
            Trigger(
                trigger_id=int(trigger_id),
                res_type=res_type,
                res_id=res_id,
                type=event,
                offset=int(offset),
                user=user,
                flags=flags,
                program=rest,
            )
        )
    return triggers
