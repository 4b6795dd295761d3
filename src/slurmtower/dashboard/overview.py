"""What the overview (``/ui``) and the partitions page show, computed from snapshots: pure
functions, no I/O (the routes fetch; these count)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurmtower.models import Node, NodeFlag, NodeState, Partition
from slurmtower.models.event import Event
from slurmtower.models.table import JobTable
from slurmtower.nodeset import NodeSet

__all__ = ["EventLine", "Resource", "cpu_states", "event_line", "gpu_count", "job_counts", "partition_rows",
           "resources"]

_GPU = re.compile(r"^gpu(?::[^:(,]+)?:(\d+)")
#: The order jobs by state are listed in (the others after, by name).
JOB_STATE_ORDER = ("RUNNING", "PENDING", "COMPLETING", "SUSPENDED", "COMPLETED", "FAILED", "CANCELLED",
                   "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def gpu_count(gres: str | None) -> int:
    """GPUs in a node's ``Gres``/``GresUsed`` (``gpu:4``, ``gpu:a100:2(IDX:0-1)``, several
    comma-separated kinds); 0 without any."""
    if not gres or gres in ("(null)", "N/A"):
        return 0
    total = 0
    for item in re.split(r",(?![^()]*\))", gres):
        match = _GPU.match(item.strip())
        if match:
            total += int(match[1])
    return total


@dataclass(frozen=True)
class Resource:
    label: str
    used: int
    total: int
    unit: str = ""

    @property
    def percent(self) -> int | None:
        return round(100 * self.used / self.total) if self.total else None


def resources(nodes: Iterable[Node]) -> list[Resource]:
    """CPUs, memory and GPUs allocated over what the nodes have (as slurmctld counts them)."""
    cpus = cpus_used = mem = mem_used = gpus = gpus_used = 0
    for n in nodes:
        cpus += n.cpus or 0
        cpus_used += n.alloc_cpus or 0
        mem += n.real_memory_mib or 0
        mem_used += n.alloc_memory_mib or 0
        gpus += gpu_count(n.gres)
        gpus_used += gpu_count(n.gres_used)
    return [Resource("CPUs", cpus_used, cpus), Resource("Memory", mem_used // 1024, mem // 1024, "GiB"),
            Resource("GPUs", gpus_used, gpus)]


def job_counts(table: JobTable) -> list[tuple[str, int]]:
    """Jobs slurmctld holds, by base state, in :data:`JOB_STATE_ORDER` (from the table's index)."""
    counts = {state: len(rows) for state, rows in table.index("state").items() if rows}
    ordered = [(s, counts.pop(s)) for s in JOB_STATE_ORDER if s in counts]
    return ordered + sorted(counts.items())


def _unavailable(node: Node) -> bool:
    """Its free CPUs cannot take a job: down, drained or draining, failing, not responding."""
    return node.state in (NodeState.DOWN, NodeState.FUTURE, NodeState.UNKNOWN) or bool(
        node.flags & {NodeFlag.DRAIN, NodeFlag.FAIL, NodeFlag.NOT_RESPONDING, NodeFlag.POWERED_DOWN})


def cpu_states(nodes: Iterable[Node]) -> tuple[int, int, int, int]:
    """CPUs allocated / idle / other / total, as ``sinfo -o %C`` counts them (other: the free
    CPUs of nodes that cannot take jobs)."""
    alloc = idle = other = total = 0
    for n in nodes:
        cpus, used = n.cpus or 0, min(n.alloc_cpus or 0, n.cpus or 0)
        alloc += used
        total += cpus
        if _unavailable(n):
            other += cpus - used
        else:
            idle += cpus - used
    return alloc, idle, other, total


def partition_rows(partitions: Iterable[Partition], nodes: Mapping[str, Node],
                   node_css: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per partition (give the visible ones): its nodes by map colour (``node_css``:
    name -> class), CPUs allocated/idle/other/total (sinfo's ``%C``), memory allocated."""
    rows = []
    for part in partitions:
        members = [nodes[name] for name in (NodeSet(part.nodes) if part.nodes else ()) if name in nodes]
        states: dict[str, int] = {}
        for node in members:
            css = node_css.get(node.name, "unknown")
            states[css] = states.get(css, 0) + 1
        alloc, idle, other, total = cpu_states(members)
        rows.append({"partition": part, "name": part.name, "nodes": len(members), "states": states,
                     "cpus_alloc": alloc, "cpus_idle": idle, "cpus_other": other, "cpus_total": total,
                     "memory_alloc_mib": sum(n.alloc_memory_mib or 0 for n in members),
                     "memory_total_mib": sum(n.real_memory_mib or 0 for n in members)})
    return rows


@dataclass(frozen=True)
class EventLine:
    """One event as the overview's feed lists it (the page's script adds new ones alike)."""

    id: int | None
    time: str
    iso: str
    type: str
    node: str
    detail: str


def event_line(event: Event) -> EventLine:
    """The feed line of ``event``: a node's ``from -> to (reason, owner)``, a trigger's class
    and type; the same text the page's script writes for events that arrive live."""
    p = event.payload
    if event.type == "slurm.node.state":
        before = "+".join(str(x) for x in [p.get("previous_state"), *(p.get("previous_flags") or [])] if x)
        after = "+".join(str(x) for x in [p.get("state"), *(p.get("flags") or [])] if x)
        detail = f"{before or '?'} \u2192 {after or 'gone'}"
        if p.get("reason"):
            detail += f" ({p['reason']}{', ' + str(p['reason_owner']) if p.get('reason_owner') else ''})"
    else:
        detail = " ".join(str(p[k]) for k in ("class", "type", "argument") if p.get(k))
    return EventLine(id=event.id, time=event.time.strftime("%H:%M:%S"), iso=event.time.isoformat(),
                     type=event.type, node=event.node or "", detail=detail)

