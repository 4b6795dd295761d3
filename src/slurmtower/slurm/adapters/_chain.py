"""The version-adapter chain: one step per Slurm data format, oldest to newest.

Each step rewrites one record of format N into the shape of the next format, so that the
builders in :mod:`._build` only know the newest shape (data_parser v0.0.44). A step touches
only what changed in the fields slurmtower reads; unknown keys pass through untouched.

====================  =========================================================================
step                  what changes
====================  =========================================================================
v0.0.38 -> v0.0.40    22.05 -> 23.11. Numbers and epochs become ``{set, infinite, number}``;
                      node ``state`` + ``state_flags`` become one list, ``free_memory`` ->
                      ``free_mem``, ``slurmd_version`` -> ``version``, features a list; job
                      ``job_state`` a list, ``exit_code`` a raw wait status -> an object;
                      partitions' flat keys -> nested groups; sacct ``state.current`` a list,
                      ``required.memory`` -> ``memory_per_node``/``memory_per_cpu``, step ids
                      ``"2024.batch"``; sdiag times and average times become objects.
                      Associations: limits and ``priority`` become number objects, null
                      strings ``""``, ``is_default`` 0/1 a bool; users' ``administrator_level``
                      a list (``"None"`` -> ``["None"]``).
                      The step only rewrites values still in the old shape, so it is also
                      safe for 23.02's v0.0.39, which has some of the new shapes already.
v0.0.40 -> v0.0.42    no change in the fields read here (checked against the v0.0.40 and
                      v0.0.42 schemas in 24.11's OpenAPI document).
v0.0.42 -> v0.0.44    keys were only added (node ``topology``, job ``step_id``, user
                      ``default.qos`` ...).
====================  =========================================================================
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal

from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._values import INFINITE, NO_VAL

__all__ = ["Kind", "upgrade"]

Kind = Literal[
    "node",
    "job",
    "partition",
    "reservation",
    "sacct_job",
    "sacct_step",
    "diag",
    "sinfo",
    "ping",
    "association",
    "user",
]
Record = dict[str, Any]

#: The newest format the builders read.
NEWEST = 44


def _num(value: Any, *, zero_is_unset: bool = False) -> dict[str, Any]:
    """22.05's plain number as a v0.0.40 number object."""
    if isinstance(value, dict):
        return value
    if value is None or isinstance(value, bool) or (zero_is_unset and value == 0):
        return {"set": False, "infinite": False, "number": 0}
    if isinstance(value, int | float) and value in INFINITE:
        return {"set": False, "infinite": True, "number": 0}
    if isinstance(value, int | float) and value in NO_VAL:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def _wrap(record: Record, *keys: str) -> None:
    for key in keys:
        if key in record:
            record[key] = _num(record[key])


def _exit_object(status: Any) -> dict[str, Any]:
    """A raw wait status (22.05 squeue/REST: 768 = exit 3) as a v0.0.40 exit code object."""
    if isinstance(status, dict):
        return status
    if status is None or not isinstance(status, int):
        return {"status": ["INVALID"], "return_code": _num(None), "signal": {"id": _num(None), "name": ""}}
    signal = status & 0x7F
    if signal:
        names = ["SIGNALED", *(["CORE_DUMPED"] if status & 0x80 else [])]
        return {"status": names, "return_code": _num(None), "signal": {"id": _num(signal), "name": ""}}
    code = (status >> 8) & 0xFF
    return {
        "status": ["SUCCESS" if code == 0 else "ERROR"],
        "return_code": _num(code),
        "signal": {"id": _num(None), "name": ""},
    }


def _features(value: Any) -> Any:
    if isinstance(value, str):
        return [part for part in value.split(",") if part]
    return value


class _Step:
    """One format step; a method per record kind, identity by default."""

    source: int
    target: int

    def apply(self, kind: Kind, record: Record, version: SlurmVersion | None) -> Record:
        method: Callable[[Record, SlurmVersion | None], Record] | None = getattr(self, kind, None)
        return method(record, version) if method is not None else record


class _V0038ToV0040(_Step):
    """22.05's openapi/v0.0.38 (and dbv0.0.38) to data_parser/v0.0.40."""

    source, target = 38, 40

    _NODE_TIMES = ("boot_time", "last_busy", "reason_changed_at", "slurmd_start_time", "resume_after")
    _JOB_TIMES = (
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
    _JOB_NUMBERS = (
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

    def node(self, record: Record, version: SlurmVersion | None) -> Record:
        state = record.get("state")
        if isinstance(state, str):
            record["state"] = [state.upper(), *(record.pop("state_flags", None) or [])]
        after = record.get("next_state_after_reboot")
        if isinstance(after, str):
            record["next_state_after_reboot"] = [
                after.upper(),
                *(record.pop("next_state_after_reboot_flags", None) or []),
            ]
        if "free_memory" in record:
            record["free_mem"] = _num(record.pop("free_memory"))
        if "slurmd_version" in record:
            record["version"] = record.pop("slurmd_version")
        for key in ("features", "active_features"):
            record[key] = _features(record.get(key))
        _wrap(record, *self._NODE_TIMES)
        return record

    def job(self, record: Record, version: SlurmVersion | None) -> Record:
        state = record.get("job_state")
        if isinstance(state, str):
            record["job_state"] = [state]
        for key in ("exit_code", "derived_exit_code"):
            if key in record:
                record[key] = _exit_object(record[key])
        # 22.05 prints array_job_id 0 and het_job_id 0 for "not an array / not het".
        _wrap(record, *self._JOB_TIMES, *self._JOB_NUMBERS)
        return record

    def partition(self, record: Record, version: SlurmVersion | None) -> Record:
        if "maximums" in record:
            return record
        flags = [str(f).upper() for f in record.get("flags") or []]
        state = record.get("state")
        return {
            "name": record.get("name"),
            "nodes": {
                "configured": record.get("nodes", ""),
                "total": record.get("total_nodes"),
                "allowed_allocation": record.get("allowed_allocation_nodes", ""),
            },
            "accounts": {
                "allowed": record.get("allowed_accounts", ""),
                "deny": record.get("denied_accounts", ""),
            },
            "groups": {"allowed": record.get("allowed_groups", "")},
            "qos": {
                "allowed": record.get("allowed_qos", ""),
                "deny": record.get("denied_qos", ""),
                "assigned": record.get("qos", ""),
            },
            "tres": {
                "configured": record.get("tres", ""),
                "billing_weights": record.get("billing_weights", ""),
            },
            "cpus": {"total": record.get("total_cpus")},
            "defaults": {
                "time": _num(record.get("default_time_limit")),
                "partition_memory_per_node": _num(record.get("default_memory_per_node")),
                "partition_memory_per_cpu": _num(record.get("default_memory_per_cpu")),
            },
            "maximums": {
                "time": _num(record.get("max_time_limit")),
                "nodes": _num(record.get("maximum_nodes_per_job")),
                "cpus_per_node": _num(record.get("maximum_cpus_per_node")),
                "partition_memory_per_node": _num(record.get("maximum_memory_per_node")),
                "partition_memory_per_cpu": _num(record.get("maximum_memory_per_cpu")),
                "over_time_limit": _num(record.get("over_time_limit")),
            },
            # 22.05 spells this one key with spaces; -1 there means INFINITE.
            "minimums": {"nodes": _num(record.get("min nodes per job"))},
            "priority": {
                "job_factor": record.get("priority_job_factor"),
                "tier": record.get("priority_tier"),
            },
            "grace_time": record.get("preemption_grace_time"),
            "partition": {"state": [state.upper()] if isinstance(state, str) else state or []},
            # v0.0.40+ has no partition flags at all; keep 22.05's for the builder.
            "_flags": flags,
        }

    def reservation(self, record: Record, version: SlurmVersion | None) -> Record:
        flags = record.get("flags")
        if isinstance(flags, str):
            record["flags"] = [f for f in flags.split(",") if f]
        _wrap(record, "start_time", "end_time")
        return record

    def sacct_job(self, record: Record, version: SlurmVersion | None) -> Record:
        state = record.get("state") or {}
        if isinstance(state.get("current"), str):
            state["current"] = [state["current"]]
        for key in ("exit_code", "derived_exit_code"):
            record[key] = self._sacct_exit(record.get(key), version)
        array = record.get("array") or {}
        if "task_id" in array:
            array["task_id"] = _num(array["task_id"])
        required = record.get("required") or {}
        if "memory" in required:
            memory = required.pop("memory")
            # 22.05 flags per-CPU memory with the top bit (MEM_PER_CPU).
            per_cpu = isinstance(memory, int) and memory >= 1 << 63
            required["memory_per_cpu"] = _num(memory - (1 << 63) if per_cpu else None)
            required["memory_per_node"] = _num(None if per_cpu else memory, zero_is_unset=True)
        time = record.get("time") or {}
        if "limit" in time:
            time["limit"] = _num(time["limit"])
        _wrap(record, "priority")
        reservation = record.get("reservation")
        if isinstance(reservation, dict) and not isinstance(reservation.get("name"), str):
            # 22.05 prints "name": 0 when the job had no reservation.
            reservation["name"] = ""
        for step in record.get("steps") or []:
            self.sacct_step(step, version)
        return record

    def sacct_step(self, record: Record, version: SlurmVersion | None) -> Record:
        step = record.get("step") or {}
        if "job_id" in step:
            step["id"] = f"{step.pop('job_id')}.{step.get('id')}"
        if isinstance(record.get("state"), str):
            record["state"] = [record["state"]]
        record["exit_code"] = self._sacct_exit(record.get("exit_code"), version)
        time = record.get("time") or {}
        for key in ("start", "end"):
            if key in time:
                time[key] = _num(time[key])
        return record

    @staticmethod
    def _sacct_exit(value: Any, version: SlurmVersion | None) -> Any:
        # Slurm 22.05.8's sacct --json and /slurmdb/v0.0.38 report every exit code as
        # {"status": "SUCCESS", "return_code": 0} (a job that ran `exit 3` included), so the
        # value carries no information: drop it. sacct -P text and squeue JSON are correct.
        if version is not None and version.key[:2] <= (22, 5):
            return None
        if isinstance(value, dict) and isinstance(value.get("status"), str):
            code = value.get("return_code")
            return {
                "status": [value["status"]],
                "return_code": _num(code),
                "signal": {"id": _num(value.get("signal")), "name": ""},
            }
        return value

    def diag(self, record: Record, version: SlurmVersion | None) -> Record:
        _wrap(record, "req_time", "req_time_start", "job_states_ts", "bf_when_last_cycle")
        for key in ("rpcs_by_message_type", "rpcs_by_user"):
            for item in record.get(key) or []:
                _wrap(item, "average_time")
        return record

    # The same limits in every format (dbv0.0.38's parse_assoc and data_parser's ASSOC):
    # max.jobs.per.{count,accruing,submitted} = Grp{Jobs,JobsAccrue,Submit},
    # max.jobs.{active,accruing,total} = Max{Jobs,JobsAccrue,Submit}, max.jobs.per.wall_clock
    # = MaxWall, max.per.account.wall_clock = GrpWall; only the number shape changed.
    _ASSOC_NUMBERS: tuple[tuple[str, ...], ...] = (
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

    def association(self, record: Record, version: SlurmVersion | None) -> Record:
        for path in self._ASSOC_NUMBERS:
            parent: Any = record
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if isinstance(parent, dict) and path[-1] in parent:
                parent[path[-1]] = _num(parent[path[-1]])
        for key in ("user", "partition", "parent_account", "cluster"):
            if key in record and record[key] is None:
                record[key] = ""
        default = record.get("default")
        if isinstance(default, dict) and default.get("qos") is None and "qos" in default:
            default["qos"] = ""
        if isinstance(record.get("is_default"), int):
            record["is_default"] = bool(record["is_default"])
        return record

    def user(self, record: Record, version: SlurmVersion | None) -> Record:
        level = record.get("administrator_level")
        if isinstance(level, str):
            record["administrator_level"] = [level]
        for association in record.get("associations") or []:
            self.association(association, version)
        return record

    def ping(self, record: Record, version: SlurmVersion | None) -> Record:
        if "ping" in record and "pinged" not in record:
            record["pinged"] = record.pop("ping")
            record["responding"] = record["pinged"] == "UP"
        return record


class _V0040ToV0042(_Step):
    """23.11/24.05 to 24.11: nothing slurmtower reads changed."""

    source, target = 40, 42


class _V0042ToV0044(_Step):
    """24.11 to 25.11: keys were only added."""

    source, target = 42, 44


_STEPS: list[_Step] = [_V0038ToV0040(), _V0040ToV0042(), _V0042ToV0044()]


def upgrade(kind: Kind, record: Record, fmt: int, version: SlurmVersion | None = None) -> Record:
    """Bring one record of data format ``v0.0.<fmt>`` up to the newest shape (a copy)."""
    current = copy.deepcopy(record)
    for step in _STEPS:
        if fmt < step.target:
            current = step.apply(kind, current, version)
    return current
