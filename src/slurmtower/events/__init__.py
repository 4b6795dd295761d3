"""slurmtower.events."""
