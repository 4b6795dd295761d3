"""One file per revision of the store's schema; Alembic skips this one."""
