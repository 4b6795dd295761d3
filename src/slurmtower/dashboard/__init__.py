"""slurmtower.dashboard."""
