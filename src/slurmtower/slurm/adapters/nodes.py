"""Nodes: ``scontrol show node --json``, REST ``/nodes``, ``sinfo --json``, and their text forms
(``scontrol -o show node``, ``sinfo``, ``sinfo -R``).

Release steps of ``node`` and ``sinfo`` records (see :mod:`._chain`):

====================  =========================================================================
step                  what changes
====================  =========================================================================
v0.0.38 -> v0.0.40    node ``state`` + ``state_flags`` become one list (likewise
                      ``next_state_after_reboot``), ``free_memory`` -> ``free_mem`` (an
                      object), ``slurmd_version`` -> ``version``, features a list; epochs
                      become number objects. 22.05's ``sinfo --json`` lists nodes (``nodes[]``),
                      24.11+'s partition x state groups (``sinfo[]``): told apart by the key.
v0.0.40 -> v0.0.44    keys were only added (``topology``, ``cert_flags`` ...).
v0.0.44 -> v0.0.45    sinfo: ``reason.user`` moved up to ``reason_set_by_user`` (``reason`` is
                      ``{description, time}``). Node: new ``suspend_time`` (read; older
                      formats have none), removed ``power``, ``external_sensors``,
                      ``tres_weighted`` (never read).
====================  =========================================================================

Text: ``SuspendTime=`` (26.05+) is the node's own power-saving idle time. ``CoreSpecCount``,
``CPUSpecList`` and ``MemSpecLimit`` are printed only when set (JSON: ``specialized_*``, which
22.05's REST lacks).
"""

from __future__ import annotations

from datetime import timedelta, tzinfo
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.node import Node, NodeReason, parse_node_state
from slurmtower.models.version import SlurmVersion
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.adapters._chain import Record, num, step, wrap
from slurmtower.slurm.adapters._json import upgraded
from slurmtower.slurm.adapters._text import as_float, as_int, field, reason_parts, scontrol_records
from slurmtower.slurm.adapters._values import (
    epoch,
    is_infinite,
    number,
    parse_duration,
    parse_text_time,
    split_list,
    text_or_none,
)

__all__ = ["parse_nodes_json", "parse_nodes_text", "parse_sinfo_reasons_text", "parse_sinfo_text"]

# ----------------------------------------------------------------------------- release steps

_NODE_TIMES_V38 = ("boot_time", "last_busy", "reason_changed_at", "slurmd_start_time", "resume_after")


def _features(value: Any) -> Any:
    if isinstance(value, str):
        return [part for part in value.split(",") if part]
    return value


@step("node", 40)
def _node_v40(record: Record, version: SlurmVersion | None) -> Record:
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
        record["free_mem"] = num(record.pop("free_memory"))
    if "slurmd_version" in record:
        record["version"] = record.pop("slurmd_version")
    for key in ("features", "active_features"):
        record[key] = _features(record.get(key))
    wrap(record, *_NODE_TIMES_V38)
    return record


@step("sinfo", 45)
def _sinfo_v45(record: Record, version: SlurmVersion | None) -> Record:
    reason = record.get("reason")
    if isinstance(reason, dict) and "user" in reason:
        user = reason.pop("user")
        record.setdefault("reason_set_by_user", user)
    return record


# -------------------------------------------------------------------------------------- JSON


def _cpu_load(value: Any) -> float | None:
    load = number(value)
    # Slurm reports the load average in hundredths (156 = 1.56).
    return load / 100 if load is not None else None


def _seconds(value: Any) -> timedelta | None:
    """A number object of seconds; infinite and unset are ``None``."""
    if is_infinite(value):
        return None
    seconds = number(value)
    return timedelta(seconds=seconds) if seconds is not None else None


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
        boards=number(record.get("boards")),
        specialized_cores=number(record.get("specialized_cores")),
        specialized_cpus=text_or_none(record.get("specialized_cpus")),
        specialized_memory_mib=number(record.get("specialized_memory")),
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
        suspend_time=_seconds(record.get("suspend_time")),
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
                reason_set_by_user=item.get("reason_set_by_user"),
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
    groups (``sinfo[]``), which become partial nodes (name, state, flags, partitions, reason,
    and the per-node numbers a group pins down).

    Raises:
        SlurmError: neither ``nodes`` nor ``sinfo`` in the document.
    """
    if isinstance(doc, dict) and "sinfo" in doc:
        items, _ = upgraded(doc, "sinfo", "sinfo")
        return _sinfo_nodes(items)
    items, _ = upgraded(doc, "nodes", "node")
    return [_node(item) for item in items]


# -------------------------------------------------------------------------------------- text


def _suspend_time_text(value: str | None) -> timedelta | None:
    """``SuspendTime=INFINITE`` (never) is ``None``; a number is seconds, as in slurm.conf."""
    text = text_or_none(value)
    if text is None or text.upper() in ("INFINITE", "UNLIMITED"):
        return None
    seconds = text.removesuffix("sec").strip()
    if seconds.isdigit():
        return timedelta(seconds=int(seconds))
    try:
        return parse_duration(text)
    except ValueError:
        return None


def _specialized(f: dict[str, str], key: str) -> int | None:
    """``CoreSpecCount``/``MemSpecLimit``: scontrol prints them only when set, so a full
    record (one with ``Boards=``) without them has 0."""
    if key in f:
        return as_int(f[key])
    return 0 if "Boards" in f else None


def parse_nodes_text(text: str, *, tz: tzinfo | None = None) -> list[Node]:
    """Nodes from ``scontrol -o show node`` (or the multi-line form)."""
    nodes = []
    for f in scontrol_records(text, "NodeName"):
        state, flags = parse_node_state(f.get("State", ""))
        reason, user, changed = reason_parts(field(f, "Reason"), tz)
        cpus, alloc = as_int(f.get("CPUTot")), as_int(f.get("CPUAlloc"))
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
                effective_cpus=as_int(f.get("CPUEfctv")),
                sockets=as_int(f.get("Sockets")),
                cores_per_socket=as_int(f.get("CoresPerSocket")),
                threads_per_core=as_int(f.get("ThreadsPerCore")),
                boards=as_int(f.get("Boards")),
                specialized_cores=_specialized(f, "CoreSpecCount"),
                specialized_cpus=field(f, "CPUSpecList"),
                specialized_memory_mib=_specialized(f, "MemSpecLimit"),
                real_memory_mib=as_int(f.get("RealMemory")),
                alloc_memory_mib=as_int(f.get("AllocMem")),
                free_memory_mib=as_int(f.get("FreeMem")),
                tmp_disk_mib=as_int(f.get("TmpDisk")),
                cpu_load=as_float(field(f, "CPULoad")),
                features=split_list(f.get("AvailableFeatures")),
                active_features=split_list(f.get("ActiveFeatures")),
                gres=field(f, "Gres"),
                gres_used=field(f, "GresUsed"),
                weight=as_int(f.get("Weight")),
                comment=field(f, "Comment"),
                extra=field(f, "Extra"),
                address=field(f, "NodeAddr"),
                hostname=field(f, "NodeHostName"),
                port=as_int(f.get("Port")),
                boot_time=parse_text_time(f.get("BootTime"), tz),
                slurmd_start_time=parse_text_time(f.get("SlurmdStartTime"), tz),
                last_busy=parse_text_time(f.get("LastBusyTime"), tz),
                resume_after=parse_text_time(f.get("ResumeAfterTime"), tz),
                suspend_time=_suspend_time_text(f.get("SuspendTime")),
                slurmd_version=field(f, "Version"),
                architecture=field(f, "Arch"),
                operating_system=field(f, "OS"),
                owner=field(f, "Owner"),
                tres=field(f, "CfgTRES"),
                tres_used=field(f, "AllocTRES"),
                reservation=field(f, "ReservationName"),
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
