"""slurmtower.slurm."""
