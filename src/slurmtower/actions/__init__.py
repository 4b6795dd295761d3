"""slurmtower.actions."""
