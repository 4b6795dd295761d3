"""The local real Slurm cluster used by tests and the demo.

The cluster itself (:mod:`.cluster`) is loaded on first use: ``slurmtower devcluster env``
and the CLI's help need only :mod:`.installs`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from slurmtower.devcluster.installs import DEFAULT_DIR, SlurmInstall, find_slurm_installs, release_cluster_layout

if TYPE_CHECKING:
    from slurmtower.devcluster.cluster import DevCluster, DevClusterError, RollUp, SampleJobs

__all__ = ["DEFAULT_DIR", "DevCluster", "DevClusterError", "RollUp", "SampleJobs", "SlurmInstall",
           "find_slurm_installs", "release_cluster_layout"]

_LAZY = {"DevCluster", "DevClusterError", "RollUp", "SampleJobs"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("slurmtower.devcluster.cluster"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
