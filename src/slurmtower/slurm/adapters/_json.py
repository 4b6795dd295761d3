"""JSON documents (CLI ``--json`` and slurmrestd) to models.

Every function takes the whole document, reads the format from its ``meta``, runs each record
through the adapter chain (:mod:`._chain`) and builds models from the newest shape only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.accounting import AccountingUser, AdminLevel, Association, AssociationLimits
from slurmtower.models.job import ExitCode, Job, JobStep, parse_job_state
from slurmtower.models.node import Node, parse_node_state
from slurmtower.models.partition import Partition
from slurmtower.models.reservation import Reservation
from slurmtower.models.stats import ControllerStats, RpcStat, RpcUserStat
from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._chain import Kind, upgrade
from slurmtower.slurm.adapters._envelope import detect_version, format_version, records
from slurmtower.slurm.adapters._values import (
    epoch,
    is_infinite,
    minutes,
    number,
    split_list,
    text_or_none,
)

__all__ = [
    "parse_associations_json",
    "parse_jobs_json",
    "parse_nodes_json",
    "parse_partitions_json",
    "parse_ping_json",
    "parse_reservations_json",
    "parse_sacct_json",
    "parse_sacct_steps_json",
    "parse_sdiag_json",
    "parse_steps_json",
    "parse_users_json",
]

Record = dict[str, Any]


def _upgraded(doc: dict[str, Any], key: str, kind: Kind) -> tuple[list[Record], SlurmVersion | None]:
    items = records(doc, key)
    fmt = format_version(doc)
    try:
        version: SlurmVersion | None = detect_version(doc)
    except SlurmError:
        # A document without meta (hand-made, or trimmed by a proxy) still parses.
        version = None
    return [upgrade(kind, item, fmt, version) for item in items], version


def _id_or_none(value: Any) -> int | None:
    """Ids where Slurm uses 0 for "none" (array_job_id, het_job_id)."""
    result = number(value)
    return result or None


def _required_id(record: Record, key: str = "job_id") -> int:
    value = number(record.get(key))
    if value is None:
        raise SlurmError(f"Slurm JSON record without {key!r}")
    return value


def _exit_code(value: Any) -> ExitCode | None:
    if not isinstance(value, dict):
        return None
    status = [str(s).upper() for s in value.get("status") or []]
    if "INVALID" in status or "PENDING" in status:
        return None
    signal = number((value.get("signal") or {}).get("id"))
    if signal:
        return ExitCode(signal=signal, core_dumped="CORE_DUMPED" in status)
    return_code = number(value.get("return_code"))
    if return_code is None:
        return None
    return ExitCode(return_code=return_code)


def _cpu_load(value: Any) -> float | None:
    load = number(value)
    # Slurm reports the load average in hundredths (156 = 1.56).
    return load / 100 if load is not None else None


# ---------------------------------------------------------------------------------------- nodes


def _node(record: Record) -> Node:
    state, flags = parse_node_state(record.get("state") or [])
    cpus = number(record.get("cpus"))
    alloc = number(record.get("alloc_cpus"))
    idle = number(record.get("alloc_idle_cpus", record.get("idle_cpus")))
    return Node(
        name=record["name"],
        state=state,
        flags=flags,
        reason=text_or_none(record.get("reason")),
        reason_set_by_user=text_or_none(record.get("reason_set_by_user")),
        reason_changed_at=epoch(record.get("reason_changed_at")),
        partitions=split_list(record.get("partitions")),
        cpus=cpus,
        alloc_cpus=alloc,
        idle_cpus=idle,
        effective_cpus=number(record.get("effective_cpus")),
        sockets=number(record.get("sockets")),
        cores_per_socket=number(record.get("cores")),
        threads_per_core=number(record.get("threads")),
        real_memory_mib=number(record.get("real_memory")),
        alloc_memory_mib=number(record.get("alloc_memory")),
        free_memory_mib=number(record.get("free_mem")),
        tmp_disk_mib=number(record.get("temporary_disk")),
        cpu_load=_cpu_load(record.get("cpu_load")),
        features=split_list(record.get("features")),
        active_features=split_list(record.get("active_features")),
        gres=text_or_none(record.get("gres")),
        gres_used=text_or_none(record.get("gres_used")),
        weight=number(record.get("weight")),
        comment=text_or_none(record.get("comment")),
        extra=text_or_none(record.get("extra")),
        address=text_or_none(record.get("address")),
        hostname=text_or_none(record.get("hostname")),
        port=number(record.get("port")),
        boot_time=epoch(record.get("boot_time")),
        slurmd_start_time=epoch(record.get("slurmd_start_time")),
        last_busy=epoch(record.get("last_busy")),
        resume_after=epoch(record.get("resume_after")),
        slurmd_version=text_or_none(record.get("version")),
        architecture=text_or_none(record.get("architecture")),
        operating_system=text_or_none(record.get("operating_system")),
        owner=text_or_none(record.get("owner")),
        tres=text_or_none(record.get("tres")),
        tres_used=text_or_none(record.get("tres_used")),
        reservation=text_or_none(record.get("reservation")),
    )


def _same(group: Record) -> int | None:
    """A per-node value from a sinfo group's ``{minimum, maximum}`` when they agree."""
    low, high = number(group.get("minimum")), number(group.get("maximum"))
    return low if low is not None and low == high else None


def _sinfo_nodes(items: list[Record]) -> list[Node]:
    """24.11+ ``sinfo --json``: one record per partition x state group; merge per node.

    Per-node numbers are only known when the group's minimum and maximum agree (or the group
    has one node); a record of 22.05's ``sinfo --json`` is one node and is handled as such.
    """
    merged: dict[str, dict[str, Any]] = {}
    for item in items:
        names = (item.get("nodes") or {}).get("nodes") or []
        total = number((item.get("nodes") or {}).get("total")) or len(names)
        cpus = item.get("cpus") or {}
        memory = item.get("memory") or {}
        reason = item.get("reason") or {}
        partition = ((item.get("partition") or {}).get("name")) or None
        features = item.get("features") or {}
        free = memory.get("free") or {}
        for name in names:
            node = merged.setdefault(name, {"name": name, "partitions": []})
            if partition and partition not in node["partitions"]:
                node["partitions"].append(partition)
            node.update(
                state=(item.get("node") or {}).get("state") or [],
                cpus=_same(cpus),
                real_memory=_same(memory),
                weight=_same(item.get("weight") or {}),
                sockets=_same(item.get("sockets") or {}),
                cores=_same(item.get("cores") or {}),
                threads=_same(item.get("threads") or {}),
                temporary_disk=_same(item.get("disk") or {}),
                features=features.get("total"),
                active_features=features.get("active"),
                gres=(item.get("gres") or {}).get("total"),
                comment=item.get("comment"),
                extra=item.get("extra"),
                reservation=item.get("reservation"),
                reason=reason.get("description"),
                reason_set_by_user=reason.get("user"),
                reason_changed_at=reason.get("time"),
            )
            load = item.get("cpus", {}).get("load") or {}
            if total == 1:
                node.update(
                    alloc_cpus=cpus.get("allocated"),
                    alloc_idle_cpus=cpus.get("idle"),
                    alloc_memory=memory.get("allocated"),
                    free_mem=_same(free),
                    cpu_load=_same(load),
                    port=item.get("port"),
                )
    return [_node(record) for record in merged.values()]


def parse_nodes_json(doc: dict[str, Any]) -> list[Node]:
    """Nodes from ``scontrol show node --json``, REST ``/nodes``, or ``sinfo --json``.

    22.05's ``sinfo --json`` lists nodes (``nodes[]``); 24.11+'s lists partition x state
    groups (``sinfo[]``), which become partial nodes (name, state, flags, partitions, and
    the per-node numbers a group pins down).

    Raises:
        SlurmError: neither ``nodes`` nor ``sinfo`` in the document.
    """
    if isinstance(doc, dict) and "sinfo" in doc:
        items, _ = _upgraded(doc, "sinfo", "sinfo")
        return _sinfo_nodes(items)
    items, _ = _upgraded(doc, "nodes", "node")
    return [_node(item) for item in items]


# ----------------------------------------------------------------------------------------- jobs


def _array_task_id(value: Any) -> int | None:
    # v0.0.40+ JSON can report NO_VAL as a plain number in array_task_id.
    result = number(value)
    return result if result is not None and result < 0xFFFFFFFE else None


def _job(record: Record) -> Job:
    state, flags = parse_job_state(record.get("job_state") or [])
    time_limit = None if is_infinite(record.get("time_limit")) else minutes(record.get("time_limit"))
    return Job(
        job_id=_required_id(record),
        array_job_id=_id_or_none(record.get("array_job_id")),
        array_task_id=_array_task_id(record.get("array_task_id")),
        array_task_str=text_or_none(record.get("array_task_string")),
        het_job_id=_id_or_none(record.get("het_job_id")),
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
        exit_code=_exit_code(record.get("exit_code")),
        derived_exit_code=_exit_code(record.get("derived_exit_code")),
        batch_host=record.get("batch_host"),
        work_dir=record.get("current_working_directory"),
        command=record.get("command"),
        submit_line=record.get("submit_line"),
        comment=record.get("comment"),
        priority=number(record.get("priority")),
        reservation=record.get("resv_name"),
        dependency=record.get("dependency"),
        restarts=number(record.get("restart_cnt")),
        standard_output=record.get("standard_output"),
        standard_error=record.get("standard_error"),
        cluster=record.get("cluster"),
    )


def parse_jobs_json(doc: dict[str, Any]) -> list[Job]:
    """Jobs from ``squeue --json``, ``scontrol show job --json`` or REST ``/jobs``.

    Note that 22.05's ``squeue --json`` ignores ``-t/-u/-p`` and returns every job slurmctld
    still holds, while 24.11+ applies squeue's default PENDING/RUNNING filter.

    Raises:
        SlurmError: no ``jobs`` in the document.
    """
    items, _ = _upgraded(doc, "jobs", "job")
    return [_job(item) for item in items]


def parse_steps_json(doc: dict[str, Any]) -> list[JobStep]:
    """Steps of the jobs in a sacct or REST ``/slurmdb/jobs`` document (the only JSON that
    lists steps: ``scontrol show steps`` has no ``--json``)."""
    return parse_sacct_steps_json(doc)


# ----------------------------------------------------------------------------------- accounting


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
        job_id=_required_id(record),
        array_job_id=_id_or_none(array.get("job_id")),
        array_task_id=_array_task_id(array.get("task_id")),
        array_task_str=text_or_none(array.get("task")),
        het_job_id=_id_or_none(het.get("job_id")),
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
        exit_code=_exit_code(record.get("exit_code")),
        derived_exit_code=_exit_code(record.get("derived_exit_code")),
        work_dir=record.get("working_directory"),
        submit_line=record.get("submit_line"),
        comment=comment.get("job"),
        priority=number(record.get("priority")),
        reservation=text_or_none(reservation.get("name")),
        restarts=number(record.get("restart_cnt")),
        standard_output=record.get("stdout_expanded") or record.get("stdout"),
        standard_error=record.get("stderr_expanded") or record.get("stderr"),
        cluster=record.get("cluster"),
        from_accounting=True,
    )


def _sacct_step(record: Record, job: Record) -> JobStep:
    step = record.get("step") or {}
    full_id = str(step.get("id") or "")
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
        name=step.get("name"),
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
        exit_code=_exit_code(record.get("exit_code")),
        from_accounting=True,
    )


def parse_sacct_json(doc: dict[str, Any]) -> list[Job]:
    """Jobs from ``sacct --json`` or REST ``/slurmdb/jobs`` (``from_accounting=True``).

    22.05 reports every accounting exit code as 0, so those come out as ``None`` (see
    :mod:`._chain`). Steps are left out; see :func:`parse_sacct_steps_json`.

    Raises:
        SlurmError: no ``jobs`` in the document.
    """
    items, _ = _upgraded(doc, "jobs", "sacct_job")
    return [_sacct_job(item) for item in items]


def parse_sacct_steps_json(doc: dict[str, Any]) -> list[JobStep]:
    """All steps of all jobs of a ``sacct --json`` / ``/slurmdb/jobs`` document."""
    items, _ = _upgraded(doc, "jobs", "sacct_job")
    return [_sacct_step(step, item) for item in items for step in item.get("steps") or []]


# ------------------------------------------------------------------------ partitions, reservations


def _partition(record: Record) -> Partition:
    nodes = record.get("nodes") or {}
    accounts = record.get("accounts") or {}
    groups = record.get("groups") or {}
    qos = record.get("qos") or {}
    maximums = record.get("maximums") or {}
    defaults = record.get("defaults") or {}
    minimums = record.get("minimums") or {}
    priority = record.get("priority") or {}
    state = (record.get("partition") or {}).get("state") or []
    flags = record.get("_flags")
    grace = number(record.get("grace_time"))
    return Partition(
        name=record["name"],
        state=str(state[0]).upper() if state else "UNKNOWN",
        nodes=text_or_none(nodes.get("configured")),
        total_nodes=number(nodes.get("total")),
        total_cpus=number((record.get("cpus") or {}).get("total")),
        is_default="DEFAULT" in flags if flags is not None else None,
        hidden="HIDDEN" in flags if flags is not None else None,
        max_time=minutes(maximums.get("time")),
        default_time=minutes(defaults.get("time")),
        min_nodes=number(minimums.get("nodes")),
        max_nodes=number(maximums.get("nodes")),
        max_cpus_per_node=number(maximums.get("cpus_per_node")),
        default_memory_per_node_mib=number(defaults.get("partition_memory_per_node")) or None,
        max_memory_per_node_mib=number(maximums.get("partition_memory_per_node")) or None,
        allow_accounts=split_list(accounts.get("allowed")) or None,
        deny_accounts=split_list(accounts.get("deny")),
        allow_groups=split_list(groups.get("allowed")) or None,
        allow_qos=split_list(qos.get("allowed")) or None,
        deny_qos=split_list(qos.get("deny")),
        qos=text_or_none(qos.get("assigned")),
        priority_tier=number(priority.get("tier")),
        priority_job_factor=number(priority.get("job_factor")),
        grace_time=timedelta(seconds=grace) if grace is not None else None,
        tres=text_or_none((record.get("tres") or {}).get("configured")),
    )


def parse_partitions_json(doc: dict[str, Any]) -> list[Partition]:
    """Partitions from ``scontrol show partition --json`` or REST ``/partitions``.

    v0.0.40+ JSON has no partition flags, so ``is_default`` and ``hidden`` are ``None``
    there; 22.05 and the text form have them.

    Raises:
        SlurmError: no ``partitions`` in the document.
    """
    items, _ = _upgraded(doc, "partitions", "partition")
    return [_partition(item) for item in items]


def _reservation(record: Record) -> Reservation:
    start, end = epoch(record.get("start_time")), epoch(record.get("end_time"))
    return Reservation(
        name=record["name"],
        nodes=text_or_none(record.get("node_list")),
        node_count=number(record.get("node_count")),
        core_count=number(record.get("core_count")),
        start_time=start,
        end_time=end,
        duration=end - start if start is not None and end is not None else None,
        flags=split_list(record.get("flags")),
        users=split_list(record.get("users")),
        accounts=split_list(record.get("accounts")),
        groups=split_list(record.get("groups")),
        partition=text_or_none(record.get("partition")),
        features=text_or_none(record.get("features")),
        tres=text_or_none(record.get("tres")),
    )


def parse_reservations_json(doc: dict[str, Any]) -> list[Reservation]:
    """Reservations from ``scontrol show reservation --json`` or REST ``/reservations``.

    Raises:
        SlurmError: no ``reservations`` in the document.
    """
    items, _ = _upgraded(doc, "reservations", "reservation")
    return [_reservation(item) for item in items]


# ----------------------------------------------------------------------------------- sdiag, ping


def _rpc_type(item: Record) -> RpcStat:
    return RpcStat(
        name=str(item.get("message_type") or item.get("type_id")),
        type_id=number(item.get("type_id")),
        count=number(item.get("count")) or 0,
        average_time_us=number(item.get("average_time")),
        total_time_us=number(item.get("total_time")),
    )


def _rpc_user(item: Record) -> RpcUserStat:
    return RpcUserStat(
        user=str(item.get("user") or item.get("user_id")),
        user_id=number(item.get("user_id")),
        count=number(item.get("count")) or 0,
        average_time_us=number(item.get("average_time")),
        total_time_us=number(item.get("total_time")),
    )


def parse_sdiag_json(doc: dict[str, Any]) -> ControllerStats:
    """Controller statistics from ``sdiag --json`` (24.11+) or REST ``/diag``.

    Raises:
        SlurmError: no ``statistics`` in the document.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("statistics"), dict):
        records(doc, "statistics")  # raises with the envelope's errors
    raw = doc["statistics"]
    fmt = format_version(doc)
    stats = upgrade("diag", raw, fmt)
    n = stats.get
    return ControllerStats(
        slurm_time=epoch(n("req_time")),
        data_since=epoch(n("req_time_start")),
        server_thread_count=number(n("server_thread_count")),
        agent_queue_size=number(n("agent_queue_size")),
        agent_count=number(n("agent_count")),
        agent_thread_count=number(n("agent_thread_count")),
        dbd_agent_queue_size=number(n("dbd_agent_queue_size")),
        jobs_submitted=number(n("jobs_submitted")),
        jobs_started=number(n("jobs_started")),
        jobs_completed=number(n("jobs_completed")),
        jobs_canceled=number(n("jobs_canceled")),
        jobs_failed=number(n("jobs_failed")),
        jobs_pending=number(n("jobs_pending")),
        jobs_running=number(n("jobs_running")),
        job_states_time=epoch(n("job_states_ts")),
        schedule_cycle_last_us=number(n("schedule_cycle_last")),
        schedule_cycle_max_us=number(n("schedule_cycle_max")),
        schedule_cycle_mean_us=number(n("schedule_cycle_mean")),
        schedule_cycle_count=number(n("schedule_cycle_total")),
        schedule_cycle_mean_depth=number(n("schedule_cycle_mean_depth")),
        schedule_cycles_per_minute=number(n("schedule_cycle_per_minute")),
        schedule_queue_length=number(n("schedule_queue_length")),
        backfill_active=n("bf_active"),
        backfilled_jobs=number(n("bf_backfilled_jobs")),
        backfilled_jobs_since_last_cycle=number(n("bf_last_backfilled_jobs")),
        backfilled_het_jobs=number(n("bf_backfilled_het_jobs")),
        backfill_cycle_count=number(n("bf_cycle_counter")),
        backfill_last_cycle_time=epoch(n("bf_when_last_cycle")),
        backfill_cycle_last_us=number(n("bf_cycle_last")),
        backfill_cycle_max_us=number(n("bf_cycle_max")),
        backfill_cycle_mean_us=number(n("bf_cycle_mean")),
        backfill_last_depth=number(n("bf_last_depth")),
        backfill_last_depth_try=number(n("bf_last_depth_try")),
        backfill_queue_length=number(n("bf_queue_len")),
        backfill_table_size=number(n("bf_table_size")),
        gettimeofday_latency_us=number(n("gettimeofday_latency")),
        rpcs_by_type=[_rpc_type(item) for item in n("rpcs_by_message_type") or []],
        rpcs_by_user=[_rpc_user(item) for item in n("rpcs_by_user") or []],
        raw=raw,
    )


def parse_ping_json(doc: dict[str, Any]) -> dict[str, bool]:
    """REST ``/ping``: controller host name -> responding.

    Raises:
        SlurmError: no ``pings`` in the document.
    """
    items, _ = _upgraded(doc, "pings", "ping")
    return {str(item.get("hostname")): bool(item.get("responding")) for item in items}


# --------------------------------------------------------------------------- associations, users


def _path(record: Record, *keys: str) -> Any:
    value: Any = record
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


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
    jobs = _path(record, "max", "jobs") or {}
    per_job = jobs.get("per") or {}
    tres = _path(record, "max", "tres") or {}
    return AssociationLimits(
        max_jobs=number(jobs.get("active")),
        max_jobs_accrue=number(jobs.get("accruing")),
        max_submit_jobs=number(jobs.get("total")),
        max_wall_minutes=number(per_job.get("wall_clock")),
        max_tres_per_job=_tres(_path(tres, "per", "job")),
        max_tres_per_node=_tres(_path(tres, "per", "node")),
        max_tres_minutes_per_job=_tres(_path(tres, "minutes", "per", "job")),
        grp_jobs=number(per_job.get("count")),
        grp_submit_jobs=number(per_job.get("submitted")),
        grp_wall_minutes=number(_path(record, "max", "per", "account", "wall_clock")),
        grp_tres=_tres(tres.get("total")),
        grp_tres_minutes=_tres(_path(tres, "group", "minutes")),
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
        default_qos=text_or_none(_path(record, "default", "qos")),
        limits=_limits(record),
    )


def parse_associations_json(doc: dict[str, Any]) -> list[Association]:
    """Associations from ``sacctmgr show assoc --json`` (24.11+) or REST
    ``/slurmdb/<ver>/associations``.

    Raises:
        SlurmError: no ``associations`` in the document, or a record without an account.
    """
    items, _ = _upgraded(doc, "associations", "association")
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
    default_account = text_or_none(_path(record, "default", "account"))
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
    items, _ = _upgraded(doc, "users", "user")
    return [_user(item) for item in items]
