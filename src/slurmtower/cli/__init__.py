"""slurmtower.cli."""
