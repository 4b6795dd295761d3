"""The local real Slurm cluster used by tests and the demo."""

from __future__ import annotations

from slurmtower.devcluster.cluster import DEFAULT_DIR, DevCluster, DevClusterError, SampleJobs

__all__ = ["DEFAULT_DIR", "DevCluster", "DevClusterError", "SampleJobs"]
