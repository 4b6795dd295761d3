"""slurmtower's own store: its one schema, its migrations, how to open it.

* :mod:`slurmtower.store.schema`: the one :class:`~sqlalchemy.MetaData` holding every
  table of the store (events, audit, load archive, deployment values, login failures);
* :mod:`slurmtower.store.engine`: :func:`make_store_engine`, the one way to open it;
* :mod:`slurmtower.store.migrate`: the start-up check (:func:`check_or_create`) and the
  Alembic migrations in ``store/migrations`` (``slurmtower db upgrade``).

Nothing is imported here: import the submodule you need (Alembic is loaded only by
:mod:`~slurmtower.store.migrate`).
"""

from __future__ import annotations

__all__: list[str] = []
