"""The usage matrix (``/usage``, the load archive): per visible partition, its nodes and what
its running jobs use of them, with totals."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from slurmtower.live.hidden import visible_jobs, visible_partitions
from slurmtower.models import Job, JobState, Node, Partition
from slurmtower.nodeset import NodeSet

__all__ = ["build_usage"]

log = logging.getLogger(__name__)


def _ratio(used: int, total: int) -> float | None:
    return round(used / total, 4) if total > 0 else None


def _totals(cpus_total: int, cpus_used: int, mem_total: int, mem_used: int, jobs: int) -> dict[str, Any]:
    return {"cpus_total": cpus_total, "cpus_used": cpus_used, "memory_total_mib": mem_total,
            "memory_used_mib": mem_used, "cpu_usage": _ratio(cpus_used, cpus_total),
            "memory_usage": _ratio(mem_used, mem_total), "jobs": jobs}


def _job_share(job: Job, node_count: int) -> list[tuple[int, int]]:
    """(cpus, memory MiB) the job uses on each of its nodes, in node order."""
    cpus = job.cpus or 0
    base, extra = divmod(cpus, node_count) if node_count else (0, 0)
    shares = []
    for i in range(node_count):
        c = base + (1 if i < extra else 0)
        if job.memory_per_node_mib is not None:
            mem = job.memory_per_node_mib
        elif job.memory_per_cpu_mib is not None:
            mem = job.memory_per_cpu_mib * c
        elif job.memory_mib is not None and node_count:
            mem = job.memory_mib // node_count + (1 if i < job.memory_mib % node_count else 0)
        else:
            mem = 0
        shares.append((c, mem))
    return shares


def build_usage(nodes: list[Node], jobs: list[Job], partitions: list[Partition],
                hidden: Collection[str]) -> dict[str, Any]:
    """The usage matrix: for each visible partition, its nodes and what its running jobs use.

    Tolerates nodes reporting 0 (or no) CPUs or memory (ratios become null), jobs without a
    user name (deleted users) and jobs of hidden partitions (left out).
    """
    by_name = {n.name: n for n in nodes}
    matrix: dict[str, dict[str, dict[str, Any]]] = {}
    for part in visible_partitions(partitions, hidden):
        rows: dict[str, dict[str, Any]] = {}
        for name in (NodeSet(part.nodes) if part.nodes else ()):
            node = by_name.get(name)
            rows[name] = {"state": node.state_text if node else None,
                          "cpus_total": (node.cpus or 0) if node else 0,
                          "memory_total_mib": (node.real_memory_mib or 0) if node else 0,
                          "cpus_used": 0, "memory_used_mib": 0, "jobs": 0}
        matrix[part.name] = rows
    for job in visible_jobs(jobs, hidden):
        if job.state not in (JobState.RUNNING, JobState.SUSPENDED) or not job.nodes:
            continue
        rows = matrix.get(job.partition or "", {})
        try:
            job_nodes = list(NodeSet(job.nodes))
        except Exception:  # a malformed list from Slurm must not break /usage
            log.warning("job %s has an unparsable node list %r", job.job_id, job.nodes)
            continue
        for name, (cpus, mem) in zip(job_nodes, _job_share(job, len(job_nodes)), strict=True):
            row = rows.get(name)
            if row is not None:
                row["cpus_used"] += cpus
                row["memory_used_mib"] += mem
                row["jobs"] += 1
    out: dict[str, Any] = {}
    seen: dict[str, dict[str, int]] = {}
    for part_name, rows in matrix.items():
        sums = [0, 0, 0, 0, 0]
        shaped = {}
        for name, row in rows.items():
            shaped[name] = {"state": row["state"], **_totals(row["cpus_total"], row["cpus_used"],
                                                              row["memory_total_mib"],
                                                              row["memory_used_mib"], row["jobs"])}
            for i, k in enumerate(("cpus_total", "cpus_used", "memory_total_mib", "memory_used_mib", "jobs")):
                sums[i] += row[k]
            agg = seen.setdefault(name, {"cpus_total": row["cpus_total"],
                                         "memory_total_mib": row["memory_total_mib"],
                                         "cpus_used": 0, "memory_used_mib": 0, "jobs": 0})
            agg["cpus_used"] += row["cpus_used"]
            agg["memory_used_mib"] += row["memory_used_mib"]
            agg["jobs"] += row["jobs"]
        out[part_name] = {"nodes": shaped, "totals": _totals(*sums)}
    grand = _totals(sum(a["cpus_total"] for a in seen.values()), sum(a["cpus_used"] for a in seen.values()),
                    sum(a["memory_total_mib"] for a in seen.values()),
                    sum(a["memory_used_mib"] for a in seen.values()), sum(a["jobs"] for a in seen.values()))
    return {"partitions": out, "totals": grand}
