"""Partitions: ``scontrol show partition --json``, REST ``/partitions`` and ``scontrol -o show
partition``.

Release steps of ``partition`` records (see :mod:`._chain`):

====================  =========================================================================
step                  what changes
====================  =========================================================================
v0.0.38 -> v0.0.40    22.05's flat keys (``max_time_limit``, ``"min nodes per job"`` with -1
                      for INFINITE ...) become nested groups (``maximums``, ``minimums``,
                      ``defaults``, ``partition.state`` ...). 22.05's ``flags``
                      (``["default", "hidden"]``) are kept, upper-cased, as v0.0.45 spells them.
v0.0.40 -> v0.0.44    no partition flags at all: the JSON of 23.11-25.11 does not say which
                      partition is the default (``is_default``/``hidden`` are ``None``): the
                      CLI backend reads the text form there (:func:`json_marks_default`), the
                      REST backend has none; ``topology`` added.
v0.0.44 -> v0.0.45    ``flags`` is back (``["DEFAULT"]`` on the default partition, ``[]``
                      elsewhere; read). ``cpus.task_binding`` went from an int to a list of
                      CPU_BIND flags, ``select_type`` from ``[]`` to ``["NONE"]`` (new
                      ``CR_*`` names), ``maximums.shares``/``oversubscribe.jobs`` from 1 to 0
                      for the same OverSubscribe=NO; new ``preempt_mode``,
                      ``partition.exclusive``/``oversubscribe`` strings. None of those is
                      read, so nothing to rewrite: an older record just has no ``flags``.
====================  =========================================================================

Text: 26.05 prints ``Exclusive=`` where 25.11 printed ``ExclusiveUser=``/``ExclusiveTopo=`` (not
read). ``Default=YES``/``Hidden=`` give ``is_default``/``hidden`` in every release.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from slurmtower.models.partition import Partition
from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._chain import Record, num, step
from slurmtower.slurm.adapters._json import upgraded
from slurmtower.slurm.adapters._text import as_duration, as_int, as_limit, field, scontrol_records
from slurmtower.slurm.adapters._values import minutes, number, split_list, text_or_none

__all__ = ["json_marks_default", "parse_partitions_json", "parse_partitions_text"]


def json_marks_default(data_parser: str | None) -> bool:
    """Whether partition JSON in ``data_parser`` (e.g. ``data_parser/v0.0.40``) says which
    partition is the default: v0.0.38/39 (``flags``) and v0.0.45+ do, v0.0.40-44 (23.11-25.11)
    do not, so a reader with a text form at hand reads that instead (it says, in every release)."""
    found = re.search(r"v0\.0\.(\d+)", data_parser or "")
    return found is None or not 40 <= int(found[1]) <= 44

# ----------------------------------------------------------------------------- release steps


@step("partition", 40)
def _partition_v40(record: Record, version: SlurmVersion | None) -> Record:
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
            "time": num(record.get("default_time_limit")),
            "partition_memory_per_node": num(record.get("default_memory_per_node")),
            "partition_memory_per_cpu": num(record.get("default_memory_per_cpu")),
        },
        "maximums": {
            "time": num(record.get("max_time_limit")),
            "nodes": num(record.get("maximum_nodes_per_job")),
            "cpus_per_node": num(record.get("maximum_cpus_per_node")),
            "partition_memory_per_node": num(record.get("maximum_memory_per_node")),
            "partition_memory_per_cpu": num(record.get("maximum_memory_per_cpu")),
            "over_time_limit": num(record.get("over_time_limit")),
        },
        # 22.05 spells this one key with spaces; -1 there means INFINITE.
        "minimums": {"nodes": num(record.get("min nodes per job"))},
        "priority": {
            "job_factor": record.get("priority_job_factor"),
            "tier": record.get("priority_tier"),
        },
        "grace_time": record.get("preemption_grace_time"),
        "partition": {"state": [state.upper()] if isinstance(state, str) else state or []},
        # v0.0.40-44 have no partition flags; v0.0.45 has them again, in upper case.
        "flags": flags,
    }


# -------------------------------------------------------------------------------------- JSON


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
    flags = record.get("flags")
    if flags is not None:
        flags = [str(f).upper() for f in flags]
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

    v0.0.40-44 JSON (23.11-25.11) has no partition flags, so ``is_default`` and ``hidden``
    are ``None`` there; 22.05, 26.05+ (v0.0.45 ``flags``) and the text form have them.

    Raises:
        SlurmError: no ``partitions`` in the document.
    """
    items, _ = upgraded(doc, "partitions", "partition")
    return [_partition(item) for item in items]


# -------------------------------------------------------------------------------------- text


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
    for f in scontrol_records(text, "PartitionName"):
        grace = as_int(f.get("GraceTime"))
        partitions.append(
            Partition(
                name=f["PartitionName"],
                state=(field(f, "State") or "UNKNOWN").upper(),
                nodes=field(f, "Nodes"),
                total_nodes=as_int(f.get("TotalNodes")),
                total_cpus=as_int(f.get("TotalCPUs")),
                is_default=_yes(f.get("Default")),
                hidden=_yes(f.get("Hidden")),
                max_time=as_duration(f.get("MaxTime")),
                default_time=as_duration(f.get("DefaultTime")),
                min_nodes=as_limit(f.get("MinNodes")),
                max_nodes=as_limit(f.get("MaxNodes")),
                max_cpus_per_node=as_limit(f.get("MaxCPUsPerNode")),
                default_memory_per_node_mib=as_limit(f.get("DefMemPerNode")) or None,
                max_memory_per_node_mib=as_limit(f.get("MaxMemPerNode")) or None,
                allow_accounts=_allow(field(f, "AllowAccounts")),
                deny_accounts=split_list(f.get("DenyAccounts")),
                allow_groups=_allow(field(f, "AllowGroups")),
                allow_qos=_allow(field(f, "AllowQos")),
                deny_qos=split_list(f.get("DenyQos")),
                qos=field(f, "QoS"),
                priority_tier=as_int(f.get("PriorityTier")),
                priority_job_factor=as_int(f.get("PriorityJobFactor")),
                grace_time=timedelta(seconds=grace) if grace is not None else None,
                tres=field(f, "TRES"),
            )
        )
    return partitions
