"""The StackStorm ``slurm`` pack's shapes: ``slurmtower run ... --output st2`` and
``POST /actions/{name}?format=st2``, for a site whose workflows read the pack's results.

The execution comes out as ``st2 run`` prints it (``id``, ``status``, ``parameters``,
``result: {exit_code, result, stderr, stdout}``), and the action's own result under the pack's
field names and value forms. The pack returns pyslurm's dicts (``pyslurm.node().get()``,
``pyslurm.job().get()``, ``pyslurm.jobstep().get()``, ``pyslurm.config().get()``): the names
and forms here are those of pyslurm 18.08, the release of the pack's documented examples
(``version: '18.08'``).

One declared mapping per resource, ``pack field -> source``: :data:`NODE`, :data:`JOB`,
:data:`STEP` and :data:`CONFIG`. A source is

* a slurmtower field name: its value as it is (``"alloc_memory_mib"`` for ``alloc_mem``);
* a :class:`From`: a small function of slurmtower's model (``boot_time`` as Unix seconds);
* a :class:`NotRead`: slurmtower has no source for the field; it is always ``None``.

``docs/stackstorm.md`` shows these tables (:func:`markdown_table`); a test keeps them equal.

The view is made from the result as the caller may see it: routes apply
:mod:`slurmtower.visibility` first, so a reader's st2 job carries ``None`` in the private
fields (``command``, ``work_dir``, ``std_out``, ``std_err``) of other users' jobs.

The pack's parameters are slurmtower's (same names, same defaults); in the st2 format
:func:`pack_params` also takes the pack's names where slurmtower's differ: a ``slurm.config.get``
``item`` (``schedtype``) and ``slurm.job.find`` ``criterias`` keys (``num_nodes``).
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel

from slurmtower.errors import InvalidInput
from slurmtower.models import Job, JobState, JobStep, Node, config_key, parse_job_state
from slurmtower.models.accounting import HistoryJob, HistoryStep
from slurmtower.models.job import ExitCode, step_label
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.adapters import parse_text_time

__all__ = [
    "CONFIG",
    "FORMATS",
    "JOB",
    "NODE",
    "STEP",
    "TABLES",
    "From",
    "NotRead",
    "St2Execution",
    "St2Result",
    "check_format",
    "execution",
    "markdown_table",
    "pack_params",
    "result",
]

#: What ``--output`` (beside yaml and json) and ``?format=`` accept: slurmtower's own envelope,
#: or the pack's.
FORMATS = ("slurmtower", "st2")


@dataclass(frozen=True)
class From:
    """A pack field computed from slurmtower's model by ``get``; ``doc`` says how."""

    doc: str
    get: Callable[[Any], Any]


@dataclass(frozen=True)
class NotRead:
    """A pack field slurmtower has no source for: always ``None``; ``why`` says why."""

    why: str


Source = str | From | NotRead

# -- value forms ------------------------------------------------------------------------------


def _epoch(attr: str) -> From:
    def get(model: Any) -> int | None:
        value: datetime | None = getattr(model, attr)
        return int(value.timestamp()) if value is not None else None

    return From(f"`{attr}` as Unix seconds", get)


def _local(attr: str) -> From:
    def get(model: Any) -> str | None:
        value: datetime | None = getattr(model, attr)
        return value.astimezone().strftime("%Y-%m-%dT%H:%M:%S") if value is not None else None

    return From(f"`{attr}` as local time `YYYY-MM-DDTHH:MM:SS` (Slurm's time string)", get)


def _uid_of(name: str | None) -> int | None:
    if name is None:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _uid(attr: str) -> From:
    return From(f"the uid of `{attr}` (this host's password database)", lambda m: _uid_of(getattr(m, attr)))


def _text_or_empty(attr: str) -> From:
    """pyslurm's ``listOrNone(value, '')``: the text as it is, ``[]`` when unset."""

    def get(model: Any) -> Any:
        value = getattr(model, attr)
        if isinstance(value, list):
            return ",".join(value) if value else []
        return value if value else []

    return From(f"`{attr}` as comma-separated text, `[]` when none (pyslurm's form)", get)


def _split(attr: str) -> From:
    return From(f"`{attr}` split at commas, `[]` when none",
                lambda m: [p for p in (getattr(m, attr) or "").split(",") if p])


def _exit(attr: str) -> From:
    def get(model: Any) -> str | None:
        code: ExitCode | None = getattr(model, attr)
        return f"{code.return_code or 0}:{code.signal or 0}" if code is not None else None

    return From(f"`{attr}` as `return_code:signal`", get)


def _seconds_text(seconds: int | None) -> str | None:
    """pyslurm's ``secs2time_str``: ``[D-]HH:MM:SS``."""
    if seconds is None:
        return None
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _minutes(limit: timedelta | None) -> int | None:
    return int(limit.total_seconds() // 60) if limit is not None else None


#: Slurm's ``job_state_string``: a flag that replaces the base state, in this order.
_STATE_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
                "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")


def _state_string(state: JobState, flags: frozenset[str]) -> str:
    for flag in _STATE_FLAGS:
        if flag in flags:
            return flag
    return state.value


def _run_seconds(job: Job | JobStep) -> int | None:
    """pyslurm's ``run_time``: 0 while pending, else start to end (now while running)."""
    if isinstance(job, Job) and job.elapsed is not None:
        return int(job.elapsed.total_seconds())
    if job.state is JobState.PENDING:
        return 0
    if job.start_time is None:
        return None
    end = job.end_time if job.state.is_finished and job.end_time is not None else datetime.now(UTC)
    return max(0, int((end - job.start_time).total_seconds()))


def _gres_used(node: Node) -> list[str] | None:
    # pyslurm's parse_gres: split at commas outside parentheses; None when empty.
    return re.split(r",(?![^(]*\))", node.gres_used) if node.gres_used else None


def _not_read(slurm: str) -> NotRead:
    return NotRead(f"slurmtower does not read it (Slurm's {slurm})")


_ENERGY = _not_read("CurrentWatts/ConsumedJoules")

# -- nodes ------------------------------------------------------------------------------------

#: ``slurm.node.get``: pyslurm's ``node().get()`` dict of one node.
NODE: dict[str, Source] = {
    "alloc_cpus": "alloc_cpus",
    "alloc_mem": "alloc_memory_mib",
    "arch": "architecture",
    "boards": "boards",
    "boot_time": _epoch("boot_time"),
    "core_spec_cnt": "specialized_cores",
    "cores": "cores_per_socket",
    "cores_per_socket": "cores_per_socket",
    "cpu_load": From("`cpu_load` x 100 (Slurm's hundredths: 1.56 is 156)",
                     lambda n: round(n.cpu_load * 100) if n.cpu_load is not None else None),
    "cpu_spec_list": _text_or_empty("specialized_cpus"),
    "cpus": "cpus",
    "energy": _ENERGY,
    "err_cpus": _not_read("count of CPUs in the ERROR state"),
    "features": _text_or_empty("features"),
    "features_active": _text_or_empty("active_features"),
    "free_mem": "free_memory_mib",
    "gres": _split("gres"),
    "gres_drain": _not_read("GresDrain"),
    "gres_used": From("`gres_used` split at commas outside parentheses, `None` when none", _gres_used),
    "mcs_label": _not_read("MCS_label"),
    "mem_spec_limit": "specialized_memory_mib",
    "name": "name",
    "node_addr": "address",
    "node_hostname": "hostname",
    "os": "operating_system",
    "owner": _uid("owner"),
    "partitions": "partitions",
    "power_mgmt": _not_read("CapWatts"),
    "real_memory": "real_memory_mib",
    "reason": "reason",
    "reason_time": _epoch("reason_changed_at"),
    "reason_uid": _uid("reason_set_by_user"),
    "slurmd_start_time": _epoch("slurmd_start_time"),
    "sockets": "sockets",
    "state": From("`state_text`: the base state and flags as scontrol prints them (`IDLE+DRAIN`)",
                  lambda n: n.state_text),
    "threads": "threads_per_core",
    "tmp_disk": "tmp_disk_mib",
    "tres_fmt_str": "tres",
    "version": "slurmd_version",
    "weight": "weight",
}

# -- jobs -------------------------------------------------------------------------------------


def _mem_per_cpu(job: Job) -> bool | None:
    if job.memory_per_cpu_mib is None and job.memory_per_node_mib is None:
        return None
    return job.memory_per_cpu_mib is not None


def _state_reason(job: Job) -> str | None:
    # slurmctld's reason is "None" when there is none; accounting keeps no reason.
    if job.state_reason is not None or job.from_accounting:
        return job.state_reason
    return "None"


#: ``slurm.job.get``: pyslurm's ``job().get()`` dict of one job. (pyslurm adds
#: ``cluster_features``, ``fed_*``, ``gres_enforce_bind``, ``kill_on_invalid_dependent``,
#: ``spread_job`` and ``pack_job_*`` only when set; slurmtower reads none of them.)
JOB: dict[str, Source] = {
    "account": "account",
    "accrue_time": _local("accrue_time"),
    "admin_comment": "admin_comment",
    "alloc_node": "alloc_node",
    "alloc_sid": "alloc_sid",
    "array_job_id": "array_job_id",
    "array_max_tasks": "array_max_tasks",
    "array_task_id": "array_task_id",
    "array_task_str": "array_task_str",
    "assoc_id": _not_read("association id of a live job"),
    "batch_features": _not_read("BatchFeatures"),
    "batch_flag": _not_read("BatchFlag"),
    "batch_host": "batch_host",
    "billable_tres": _not_read("billable TRES"),
    "bitflags": _not_read("job flags"),
    "boards_per_node": _not_read("ReqB:S:C:T"),
    "burst_buffer": _not_read("BurstBuffer"),
    "burst_buffer_state": _not_read("BurstBufferState"),
    "command": "command",
    "comment": "comment",
    "contiguous": _not_read("Contiguous"),
    "core_spec": _not_read("CoreSpec"),
    "cores_per_socket": _not_read("ReqB:S:C:T"),
    "cpu_freq_gov": _not_read("CPUFreqGov"),
    "cpu_freq_max": _not_read("CPUFreqMax"),
    "cpu_freq_min": _not_read("CPUFreqMin"),
    "cpus_alloc_layout": _not_read("per-node CPU ids"),
    "cpus_allocated": _not_read("per-node CPU counts"),
    "cpus_per_task": _not_read("CPUs/Task"),
    "cpus_per_tres": _not_read("CpusPerTres"),
    "dependency": "dependency",
    "derived_ec": _exit("derived_exit_code"),
    "eligible_time": _epoch("eligible_time"),
    "end_time": _epoch("end_time"),
    "exc_nodes": _not_read("ExcNodeList"),
    "exit_code": _exit("exit_code"),
    "features": _not_read("the job's Features"),
    "group_id": "group_id",
    "job_id": "job_id",
    "job_state": From("`state`, or the flag in `state_flags` that replaces it (COMPLETING ...), as "
                      "Slurm's job_state_string", lambda j: _state_string(j.state, j.state_flags)),
    "last_sched_eval": _not_read("LastSchedEval"),
    "licenses": _not_read("the job's Licenses"),
    "max_cpus": _not_read("max CPUs"),
    "max_nodes": _not_read("max nodes"),
    "mem_per_cpu": From("`memory_per_cpu_mib` is set", _mem_per_cpu),
    "mem_per_node": From("`memory_per_node_mib` is set",
                         lambda j: None if _mem_per_cpu(j) is None else not _mem_per_cpu(j)),
    "mem_per_tres": _not_read("MemPerTres"),
    "min_memory_cpu": "memory_per_cpu_mib",
    "min_memory_node": "memory_per_node_mib",
    "name": "name",
    "network": _not_read("Network"),
    "nice": _not_read("Nice"),
    "nodes": "nodes",
    "ntasks_per_board": _not_read("NtasksPerN:B:S:C"),
    "ntasks_per_core": _not_read("NtasksPerN:B:S:C"),
    "ntasks_per_core_str": _not_read("NtasksPerN:B:S:C"),
    "ntasks_per_node": _not_read("NtasksPerN:B:S:C"),
    "ntasks_per_socket": _not_read("NtasksPerN:B:S:C"),
    "ntasks_per_socket_str": _not_read("NtasksPerN:B:S:C"),
    "num_cpus": "cpus",
    "num_nodes": "node_count",
    "partition": "partition",
    "pn_min_cpus": _not_read("MinCPUsNode"),
    "pn_min_memory": From("`memory_per_cpu_mib`, else `memory_per_node_mib`",
                          lambda j: j.memory_per_cpu_mib if j.memory_per_cpu_mib is not None
                          else j.memory_per_node_mib),
    "pn_min_tmp_disk": _not_read("MinTmpDiskNode"),
    "power_flags": _not_read("power flags"),
    "preempt_time": _not_read("PreemptTime"),
    "priority": "priority",
    "profile": _not_read("Profile"),
    "qos": "qos",
    "reboot": _not_read("Reboot"),
    "req_nodes": _not_read("ReqNodeList"),
    "req_switch": _not_read("Switches"),
    "requeue": _not_read("Requeue"),
    "resize_time": _not_read("ResizeTime"),
    "restart_cnt": "restarts",
    "resv_name": "reservation",
    "run_time": From("`elapsed` in seconds (0 while pending; else start to end, or to now)", _run_seconds),
    "run_time_str": From("`run_time` as `[D-]HH:MM:SS`", lambda j: _seconds_text(_run_seconds(j))),
    "sched_nodes": _not_read("SchedNodeList"),
    "shared": _not_read("OverSubscribe"),
    "show_flags": _not_read("show flags"),
    "sockets_per_board": _not_read("ReqB:S:C:T"),
    "sockets_per_node": _not_read("Socks/Node"),
    "start_time": _epoch("start_time"),
    "state_reason": From("`state_reason`; `\"None\"` when slurmctld gives none", _state_reason),
    "std_err": "standard_error",
    "std_in": _not_read("StdIn"),
    "std_out": "standard_output",
    "submit_time": _epoch("submit_time"),
    "suspend_time": _not_read("SuspendTime"),
    "system_comment": _not_read("SystemComment"),
    "threads_per_core": _not_read("ReqB:S:C:T"),
    "time_limit": From("`time_limit` in minutes (`None`: unlimited or not known)",
                       lambda j: _minutes(j.time_limit)),
    "time_limit_str": From("`time_limit` as `[D-]HH:MM:SS`",
                           lambda j: _seconds_text(int(j.time_limit.total_seconds()))
                           if j.time_limit is not None else None),
    "time_min": _not_read("TimeMin"),
    "tres_alloc_str": _not_read("the allocated TRES string"),
    "tres_bind": _not_read("TresBind"),
    "tres_freq": _not_read("TresFreq"),
    "tres_per_job": _not_read("TresPerJob"),
    "tres_per_node": _not_read("TresPerNode"),
    "tres_per_socket": _not_read("TresPerSocket"),
    "tres_per_task": _not_read("TresPerTask"),
    "tres_req_str": _not_read("the requested TRES string"),
    "user_id": "user_id",
    "wait4switch": _not_read("Switches wait time"),
    "wckey": _not_read("WCKey"),
    "work_dir": "work_dir",
}

# -- steps ------------------------------------------------------------------------------------

_CKPT = NotRead("checkpointing left Slurm in 20.11")

#: ``slurm.job.step.get``: pyslurm's ``jobstep().get()`` dict of one step.
STEP: dict[str, Source] = {
    "array_job_id": _not_read("the step's array job id"),
    "array_task_id": _not_read("the step's array task id"),
    "ckpt_dir": _CKPT,
    "ckpt_interval": _CKPT,
    "cpus_per_tres": _not_read("CpusPerTres"),
    "dist": _not_read("the task distribution"),
    "mem_per_tres": _not_read("MemPerTres"),
    "name": "name",
    "network": _not_read("Network"),
    "nodes": "nodes",
    "num_cpus": "cpus",
    "num_tasks": "tasks",
    "partition": "partition",
    "resv_ports": _not_read("ResvPorts"),
    "run_time": From("seconds from `start_time` to `end_time` (or to now)", _run_seconds),
    "srun_host": _not_read("SrunHost"),
    "srun_pid": _not_read("SrunHost:Pid"),
    "start_time": _epoch("start_time"),
    "state": From("`state` as Slurm's job_state_string", lambda s: _state_string(s.state, s.state_flags)),
    "time_limit": From("`time_limit` in minutes; `\"UNLIMITED\"` for a live step without one",
                       lambda s: _minutes(s.time_limit) if s.time_limit is not None
                       else (None if s.from_accounting else "UNLIMITED")),
    "time_limit_str": From("`time_limit` as `[D-]HH:MM:SS`, or `\"UNLIMITED\"`",
                           lambda s: _seconds_text(int(s.time_limit.total_seconds()))
                           if s.time_limit is not None else (None if s.from_accounting else "UNLIMITED")),
    "tres_alloc_str": _not_read("the step's TRES"),
    "tres_bind": _not_read("TresBind"),
    "tres_freq": _not_read("TresFreq"),
    "tres_per_node": _not_read("TresPerNode"),
    "tres_per_socket": _not_read("TresPerSocket"),
    "tres_per_step": _not_read("TresPerStep"),
    "tres_per_task": _not_read("TresPerTask"),
    "user_id": "user_id",
}

#: The pack keys steps by Slurm's step id: pyslurm 18.08's numbers of the batch and extern steps.
STEP_KEYS = {"batch": str(0xFFFFFFFE), "extern": str(0xFFFFFFFF)}

# -- configuration ----------------------------------------------------------------------------

def _words(text: str) -> list[str]:
    return text.split()


# pyslurm 18.08's config().get() keys by value type.
_CONFIG_KINDS: dict[str, str] = {
    **dict.fromkeys(_words("""accounting_storage_tres accounting_storage_backup_host accounting_storage_host
        accounting_storage_loc accounting_storage_pass accounting_storage_type accounting_storage_user
        acct_gather_energy_type acct_gather_profile_type acct_gather_interconnect_type
        acct_gather_filesystem_type authinfo authtype bb_type checkpoint_type core_spec_plugin cluster_name
        comm_params crypto_type epilog epilog_slurmctld ext_sensors_type federation_parameters
        health_check_program job_acct_gather_freq job_acct_gather_type job_acct_gather_params job_ckpt_dir
        job_comp_host job_comp_loc job_comp_pass job_comp_type job_comp_user job_container_plugin
        job_credential_private_key job_credential_public_certificate job_submit_plugins launch_params
        launch_type mail_domain mail_prog mpi_default mpi_params msg_aggr_params node_prefix plugindir
        plugstack power_parameters power_plugin preempt_mode preempt_type priority_params priority_type
        proctrack_type priority_weight_tres prolog prolog_slurmctld propagate_rlimits
        propagate_rlimits_except reboot_program resume_fail_program resume_program resv_epilog resv_prolog
        route_plugin salloc_default_command sbcast_parameters sched_logfile sched_params schedtype
        select_type slurm_conf slurm_user_name slurmd_user_name slurmctld_addr slurmctld_logfile
        slurmctld_pidfile slurmctld_primary_off_prog slurmctld_primary_on_prog slurmd_logfile
        slurmd_parameters slurmd_pidfile slurmd_spooldir srun_epilog srun_prolog state_save_location
        suspend_program switch_type task_epilog task_plugin task_prolog tmp_fs topology_param
        topology_plugin unkillable_program version x11_params"""), "str"),
    **dict.fromkeys(_words("""accounting_storage_enforce accounting_storage_port acctng_store_job_comment
        acct_gather_node_freq batch_start_timeout boot_time complete_wait cpu_freq_def cpu_freq_govs
        debug_flags def_mem_per_cpu eio_timeout epilog_msg_time first_job_id fs_dampening_factor
        get_env_timeout group_time group_update_force hash_val health_check_interval health_check_node_state
        inactive_limit job_comp_port keep_alive_time kill_wait log_fmt max_array_sz max_job_cnt max_job_id
        max_mem_per_cpu max_step_cnt max_tasks_per_node mem_limit_enforce min_job_age msg_timeout
        next_job_id over_time_limit priority_decay_hl priority_calc_period priority_favor_small
        priority_flags priority_max_age priority_reset_period priority_weight_age priority_weight_fs
        priority_weight_js priority_weight_part priority_weight_qos private_data prolog_epilog_timeout
        propagate_prio_process prolog_flags reconfig_flags resume_rate resume_timeout resv_over_run
        ret2service sched_log_level sched_time_slice select_type_param slurm_user_id slurmd_user_id
        slurmctld_debug slurmctld_port slurmctld_port_count slurmctld_syslog_debug slurmctld_timeout
        slurmd_debug slurmd_port slurmd_syslog_debug slurmd_timeout suspend_rate suspend_time
        suspend_timeout task_plugin_param track_wckey tree_width unkillable_timeout use_spec_resources
        vsize_factor wait_time"""), "int"),
    **dict.fromkeys(_words("""disable_root_jobs enforce_part_limits fast_schedule job_file_append job_requeue
        kill_on_bad_exit use_pam"""), "bool"),
    **dict.fromkeys(_words("gres_plugins private_data_list suspend_exc_nodes suspend_exc_parts"), "list"),
    **dict.fromkeys(_words("licenses licenses_used"), "dict"),
}

# Pack name -> slurmtower's key (the snake case of scontrol show config's name) where they differ.
_CONFIG_RENAMES = {
    "authinfo": "auth_info", "authtype": "auth_type", "bb_type": "burst_buffer_type",
    "comm_params": "communication_parameters", "cpu_freq_govs": "cpu_freq_governors",
    "crypto_type": "cred_type", "fs_dampening_factor": "fair_share_dampening_factor",
    "gres_plugins": "gres_types", "group_time": "group_update_time",
    "job_acct_gather_freq": "job_acct_gather_frequency", "job_container_plugin": "job_container_type",
    "launch_params": "launch_parameters", "log_fmt": "log_time_format", "max_array_sz": "max_array_size",
    "max_job_cnt": "max_job_count", "max_step_cnt": "max_step_count", "msg_timeout": "message_timeout",
    "plugindir": "plugin_dir", "plugstack": "plug_stack_config",
    "priority_decay_hl": "priority_decay_half_life", "priority_params": "priority_parameters",
    "priority_reset_period": "priority_usage_reset_period", "priority_weight_fs": "priority_weight_fair_share",
    "priority_weight_js": "priority_weight_job_size", "priority_weight_part": "priority_weight_partition",
    "propagate_rlimits": "propagate_resource_limits",
    "propagate_rlimits_except": "propagate_resource_limits_except", "ret2service": "return_to_service",
    "sbcast_parameters": "bcast_parameters", "sched_log_level": "slurm_sched_log_level",
    "sched_logfile": "slurm_sched_log_file", "sched_params": "scheduler_parameters",
    "sched_time_slice": "scheduler_time_slice", "schedtype": "scheduler_type",
    "select_type_param": "select_type_parameters", "slurmctld_logfile": "slurmctld_log_file",
    "slurmctld_pidfile": "slurmctld_pid_file", "slurmd_logfile": "slurmd_log_file",
    "slurmd_pidfile": "slurmd_pid_file", "slurmd_spooldir": "slurmd_spool_dir",
    "track_wckey": "track_wc_key", "unkillable_program": "unkillable_step_program",
    "unkillable_timeout": "unkillable_step_timeout", "use_spec_resources": "allow_spec_resources_usage",
    "version": "slurm_version", "vsize_factor": "v_size_factor", "x11_params": "x11_parameters",
}


def _user_part(key: str, uid: bool) -> From:
    def get(items: Mapping[str, str]) -> Any:
        value = _config_text(items, key)
        match = re.fullmatch(r"(.*?)\((\d+)\)", value or "")
        if match is None:
            return value if not uid and value is not None else None
        return int(match[2]) if uid else match[1]

    return From(f"the {'uid' if uid else 'name'} in `{key}` (`slurm(64030)`)", get)


def _port(count: bool) -> From:
    def get(items: Mapping[str, str]) -> int | None:
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", _config_text(items, "slurmctld_port") or "")
        if match is None:
            return None
        first, last = int(match[1]), int(match[2] or match[1])
        return last - first + 1 if count else first

    return From("the number of ports in `slurmctld_port`" if count else "the first port of `slurmctld_port`", get)


def _boot_time(items: Mapping[str, str]) -> int | None:
    when = parse_text_time(_config_text(items, "boot_time"))
    return int(when.timestamp()) if when is not None else None


def _store_job_comment(items: Mapping[str, str]) -> int | None:
    flags = _config_text(items, "accounting_store_flags")
    if "accounting_store_flags" not in items:
        return None
    return 1 if "job_comment" in (flags or "").split(",") else 0


_NEVER_PRINTED = NotRead("scontrol show config does not print it")

#: ``slurm.config.get``: pyslurm's ``config().get()`` dict. Its keys are the snake case of
#: slurm.conf's names, like slurmtower's, but for the renames here. Settings Slurm no longer
#: has (``checkpoint_type``, ``fast_schedule`` ...) are ``None``; slurmtower's settings the
#: pack does not know (``slurmctld_host_0`` ...) follow under slurmtower's names.
CONFIG: dict[str, Source] = {
    **{key: _CONFIG_RENAMES.get(key, key) for key in sorted(_CONFIG_KINDS)},
    "accounting_storage_pass": _NEVER_PRINTED,
    "job_comp_pass": _NEVER_PRINTED,
    "licenses_used": _NEVER_PRINTED,
    "acctng_store_job_comment": From("1 when `accounting_store_flags` has `job_comment`, else 0",
                                     _store_job_comment),
    "boot_time": From("`boot_time` as Unix seconds", _boot_time),
    "private_data_list": From("`private_data` split at commas, `[]` for `none`",
                              lambda items: [p for p in (_config_text(items, "private_data") or "").split(",")
                                             if p and p != "none"]),
    "slurm_user_id": _user_part("slurm_user", uid=True),
    "slurm_user_name": _user_part("slurm_user", uid=False),
    "slurmctld_port": _port(count=False),
    "slurmctld_port_count": _port(count=True),
    "slurmd_user_id": _user_part("slurmd_user", uid=True),
    "slurmd_user_name": _user_part("slurmd_user", uid=False),
}

_NUMBER = re.compile(r"^(\d+)(?: (?:sec|usec|min|nodes/min|percent))?$")


def _config_text(items: Mapping[str, str], key: str) -> str | None:
    value = items.get(key)
    return None if value is None or value.strip() in ("", "(null)", "N/A", "(null type)") else value


def _config_value(kind: str, text: str | None) -> Any:
    """A setting's text (``300 sec``) in the form pyslurm gives it (300)."""
    if kind == "list":
        return [p for p in (text or "").split(",") if p]
    if kind == "dict":  # licenses: "fluent:30,matlab" -> {"fluent": 30, "matlab": 1}
        licenses: dict[str, int] = {}
        for part in (text or "").split(","):
            match = re.fullmatch(r"([^:*]+)(?:[:*](\d+))?", part.strip())
            if match:
                licenses[match[1]] = int(match[2] or 1)
        return licenses
    if text is None:
        return None
    if kind == "bool":
        return text.strip().upper() not in ("NO", "0", "FALSE")
    if kind == "int":
        match = _NUMBER.match(text.strip())
        if match:
            return int(match[1])
        if text.strip() in ("Yes", "No"):
            return int(text.strip() == "Yes")
        return None if text.strip() == "Unknown" else text  # names Slurm prints for a bit mask
    return text


def _config(items: Mapping[str, str], only: str | None = None) -> dict[str, Any]:
    used: set[str] = set()
    out: dict[str, Any] = {}
    for key, source in CONFIG.items():
        if only is not None and key != only:
            continue
        if isinstance(source, str):
            out[key] = _config_value(_CONFIG_KINDS[key], _config_text(items, source))
            used.add(source)
        elif isinstance(source, From):
            out[key] = source.get(items)
        else:
            out[key] = None
    if only is None:  # settings the pack does not know, under slurmtower's names
        out.update({key: value for key, value in sorted(items.items()) if key not in used and key not in out})
    return out


#: The pack's resources and their mappings (docs/stackstorm.md has one table each).
TABLES: dict[str, dict[str, Source]] = {"node": NODE, "job": JOB, "step": STEP, "config": CONFIG}

# -- applying the mapping -----------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, list):
        return list(value)
    return value


def _view(table: Mapping[str, Source], model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, source in table.items():
        if isinstance(source, str):
            out[key] = _plain(getattr(model, source))
        elif isinstance(source, From):
            out[key] = source.get(model)
        else:
            out[key] = None
    return out


def _exit_code(rc: int | None, signal: int | None) -> ExitCode | None:
    """An accounting row's return code and signal as an ExitCode (``None``: neither)."""
    if rc is None and not signal:
        return None
    return ExitCode(signal=signal) if signal else ExitCode(return_code=rc)


def _history_job(record: Mapping[str, Any]) -> Job:
    """An accounting row (``slurm.job.get`` of a job that left slurmctld) as a Job."""
    row = HistoryJob.model_validate({k: v for k, v in record.items() if k != "from_accounting"})
    state, flags = parse_job_state(row.state)
    return Job(job_id=row.job_id, array_job_id=row.array_job_id, array_task_id=row.array_task_id, name=row.name,
               user_name=row.user_name, user_id=row.user_id, account=row.account, partition=row.partition,
               state=state, state_flags=flags, nodes=row.nodes, node_count=row.node_count, cpus=row.cpus,
               memory_mib=row.memory_mib, time_limit=row.time_limit, submit_time=row.submit_time,
               eligible_time=row.eligible_time, start_time=row.start_time, end_time=row.end_time,
               exit_code=_exit_code(row.exit_code, row.exit_signal),
               derived_exit_code=_exit_code(row.derived_exit_code, row.derived_exit_signal), work_dir=row.work_dir,
               submit_line=row.submit_line, sluid=row.sluid, from_accounting=True)


def _history_step(record: Mapping[str, Any]) -> JobStep:
    row = HistoryStep.model_validate({k: v for k, v in record.items() if k != "from_accounting"})
    state, flags = parse_job_state(row.state)
    return JobStep(job_id=row.job_id, step_id=step_label(row.step_id), name=row.step_name, state=state,
                   state_flags=flags, nodes=row.nodes, node_count=row.node_count, tasks=row.task_count,
                   cpus=row.cpus, start_time=row.start_time, end_time=row.end_time,
                   exit_code=_exit_code(row.exit_code, row.exit_signal), from_accounting=True)


def node(record: Mapping[str, Any]) -> dict[str, Any]:
    """One node of a ``slurm.node.get`` result (a dumped :class:`Node`) in the pack's shape."""
    return _view(NODE, Node.model_validate(record))


def job(record: Mapping[str, Any]) -> dict[str, Any]:
    """One job of a ``slurm.job.get`` result (a dumped :class:`Job`, or an accounting row) in
    the pack's shape."""
    model = _history_job(record) if record.get("from_accounting") and "job_db_inx" in record \
        else Job.model_validate(record)
    return _view(JOB, model)


def step(record: Mapping[str, Any]) -> dict[str, Any]:
    """One step of a ``slurm.job.step.get`` result in the pack's shape."""
    model = _history_step(record) if record.get("from_accounting") and "job_db_inx" in record \
        else JobStep.model_validate(record)
    return _view(STEP, model)


def result(action: str, value: Any, parameters: Mapping[str, Any] | None = None) -> Any:
    """An action's ``result`` in the pack's shape (``parameters``: those asked, for
    ``slurm.config.get``'s ``item``). Actions whose result the pack does not document
    (drain, resume, reserve ...: pyslurm returned nothing of theirs) keep slurmtower's."""
    if not isinstance(value, dict):
        return value  # job.find's ids, trigger.set's id, a failed execution's None
    if action == "slurm.node.get":
        return {name: node(rec) for name, rec in value.items()}
    if action == "slurm.job.get":
        return {job_id: [job(rec) for rec in recs] for job_id, recs in value.items()}
    if action == "slurm.job.step.get":
        return {job_id: {STEP_KEYS.get(key, key): step(rec) for key, rec in steps.items()}
                for job_id, steps in value.items()}
    if action == "slurm.config.get":
        item = (parameters or {}).get("item")
        if item is None:
            return _config(value)
        key = config_key(str(item))
        if key in CONFIG:
            return _config(value, only=key)
        # slurmtower's name of a renamed setting (scheduler_type): under the pack's (schedtype)
        names = [k for k, s in CONFIG.items() if s == key]
        return {k: _config(value, only=k)[k] for k in names} if names else dict(value)
    return value


# -- parameters and the execution -------------------------------------------------------------

#: slurmtower's parameters the pack does not have: left out of the st2 ``parameters`` at
#: their default.
_OWN_PARAMS = {"dry_run": False, "include_finished": False, "force": False}


#: The settings behind the pack's computed items (``slurm_user_id`` is in ``slurm_user``).
_CONFIG_ITEMS = {"slurm_user_id": "slurm_user", "slurm_user_name": "slurm_user", "slurmd_user_id": "slurmd_user",
                 "slurmd_user_name": "slurmd_user", "slurmctld_port": "slurmctld_port",
                 "slurmctld_port_count": "slurmctld_port", "private_data_list": "private_data",
                 "acctng_store_job_comment": "accounting_store_flags", "boot_time": "boot_time"}


def _criterion(key: str) -> str:
    source = JOB.get(key)
    return source if isinstance(source, str) else key


def pack_params(action: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The pack's parameters as slurmtower's: a ``slurm.config.get`` ``item`` by its pyslurm
    name (``schedtype`` -> ``scheduler_type``), ``slurm.job.find`` criterias by pyslurm's job
    field names (``num_nodes`` -> ``node_count``, ``std_out`` -> ``standard_output``)."""
    out = dict(params)
    if action == "slurm.config.get" and isinstance(out.get("item"), str):
        key = config_key(out["item"])
        source = CONFIG.get(key)
        if isinstance(source, str):
            out["item"] = source
        elif key in _CONFIG_ITEMS:
            out["item"] = _CONFIG_ITEMS[key]
    if action == "slurm.job.find" and isinstance(out.get("criterias"), Mapping):
        out["criterias"] = {_criterion(k): v for k, v in out["criterias"].items()}
    return out


def _parameters(used: Mapping[str, Any], given: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in used.items():
        if key in _OWN_PARAMS and value == _OWN_PARAMS[key] and (given is None or key not in given):
            continue
        if given is not None and key in ("item", "criterias") and key in given:
            value = given[key]  # as the caller named them (the pack's names)
        if key == "nodes" and isinstance(value, str):
            value = list(NodeSet(value))
        out[key] = value
    return out


#: st2 has no partial outcome: a partial execution is ``failed`` (its ``exit_code`` 4 and
#: ``stderr`` say what changed).
_STATUS = {"succeeded": "succeeded", "partial": "failed", "failed": "failed"}


class St2Result(BaseModel):
    """An execution's ``result`` as the pack's actions gave it."""

    exit_code: int
    """0 on success, else the exit code ``slurmtower run`` ends with."""
    result: Any = None
    """The action's answer in the pack's shape (its field names, docs/stackstorm.md)."""
    stderr: str
    stdout: str


class St2Execution(BaseModel):
    """An execution as ``st2 run`` prints it (``?format=st2``, ``--output st2``)."""

    id: str | None
    """The execution id (slurmtower's ``execution_id``)."""
    status: Literal["succeeded", "failed"]
    """``failed`` also for a partial outcome (StackStorm has no partial)."""
    parameters: dict[str, Any]
    """The pack's parameters (``nodes`` a list, the caller's names)."""
    result: St2Result


def execution(body: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An envelope (as the caller may see it: JSON, private fields already null) as ``st2 run``
    prints an execution: ``id``, ``status``, ``parameters`` (the pack's: ``nodes`` a list, the
    caller's names; slurmtower's own options left out at their defaults) and ``result``
    (``exit_code``, ``result`` in the pack's shape, ``stderr``, ``stdout``)."""
    action = str(body.get("action", ""))
    used = body.get("parameters") or {}
    return {
        "id": body.get("execution_id"),
        "status": _STATUS.get(str(body.get("status")), str(body.get("status"))),
        "parameters": _parameters(used, given),
        "result": {
            "exit_code": body.get("exit_code", 0),
            "result": result(action, body.get("result"), given if given is not None else used),
            "stderr": body.get("stderr", ""),
            "stdout": body.get("stdout", ""),
        },
    }


def check_format(value: str | None) -> str:
    """``value`` if it is a known format (``None``: slurmtower's).

    Raises:
        InvalidInput: naming the unknown format and the known ones.
    """
    if value is None:
        return "slurmtower"
    if value not in FORMATS:
        raise InvalidInput(f"unknown format {value!r} (known: {', '.join(FORMATS)})", param="format")
    return value


def markdown_table(resource: str) -> str:
    """The mapping of one resource as docs/stackstorm.md shows it."""
    rows = ["| pack field | slurmtower source |", "|---|---|"]
    for key, source in TABLES[resource].items():
        if isinstance(source, str):
            text = f"`{source}`"
        elif isinstance(source, From):
            text = source.doc
        else:
            text = f"not available: {source.why}"
        rows.append(f"| `{key}` | {text} |")
    return "\n".join(rows)
