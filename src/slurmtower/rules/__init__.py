"""slurmtower.rules."""
