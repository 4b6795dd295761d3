"""slurmtower.devcluster."""
