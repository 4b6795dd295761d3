"""slurmtower's typed models: pure pydantic, no I/O.

One shape whatever the Slurm release; :mod:`slurmtower.slurm.adapters` builds them from
each release's JSON and text. Every model is declared with ``defer_build``: its validator is
built when first used, so a process (a CLI call) pays only for the models it touches.
"""

from __future__ import annotations

from slurmtower.models.config import ClusterConfig, config_key
from slurmtower.models.job import ExitCode, Job, JobState, JobStep, parse_job_state
from slurmtower.models.node import Node, NodeFlag, NodeReason, NodeState, parse_node_state
from slurmtower.models.partition import Partition
from slurmtower.models.reports import (
    AvailabilityReport,
    EfficiencyReport,
    UsageReport,
    WaitReport,
)
from slurmtower.models.reservation import Reservation
from slurmtower.models.stats import ControllerStats, RpcStat, RpcUserStat
from slurmtower.models.trigger import Trigger
from slurmtower.models.version import SlurmVersion

__all__ = [
    "AvailabilityReport",
    "ClusterConfig",
    "ControllerStats",
    "EfficiencyReport",
    "ExitCode",
    "Job",
    "JobState",
    "JobStep",
    "Node",
    "NodeFlag",
    "NodeReason",
    "NodeState",
    "Partition",
    "Reservation",
    "RpcStat",
    "RpcUserStat",
    "SlurmVersion",
    "Trigger",
    "UsageReport",
    "WaitReport",
    "config_key",
    "parse_job_state",
    "parse_node_state",
]
