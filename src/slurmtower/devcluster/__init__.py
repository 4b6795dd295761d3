"""The local real Slurm cluster used by tests and the demo."""

from __future__ import annotations

from slurmtower.devcluster.cluster import DEFAULT_DIR, DevCluster, DevClusterError, SampleJobs
from slurmtower.devcluster.installs import SlurmInstall, find_slurm_installs, release_cluster_layout

__all__ = ["DEFAULT_DIR", "DevCluster", "DevClusterError", "SampleJobs", "SlurmInstall", "find_slurm_installs",
           "release_cluster_layout"]
