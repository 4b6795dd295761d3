"""slurmtower.accounting."""
