"""Alembic migrations of slurmtower's own store (run by :mod:`slurmtower.store.migrate`)."""
