"""slurmtower.api."""
