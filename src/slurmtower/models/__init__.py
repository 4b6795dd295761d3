"""slurmtower.models."""
