"""Deployment-wide values in the store: one per name, the first writer wins.

The sensor's UUID and its callback key are the deployment's, not a process's: every process
of a deployment reads the same ones, so a trigger callback is accepted by whichever process
the proxy hands it to, and a new leader after a failover keeps its predecessor's triggers.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from slurmtower.store.schema import deployment, schema_options

__all__ = ["deployment_value"]


def deployment_value(engine: Engine, name: str, default: Callable[[], str] | None = None, *,
                     schema: str | None = None) -> str | None:
    """The value ``name`` of the deployment; when there is none and ``default`` is given,
    store ``default()``, unless another process stored one first: then that one. Every
    caller gets the same value."""
    opts = schema_options(schema)
    t = deployment
    with engine.connect().execution_options(**opts) as conn:
        value: str | None = conn.execute(select(t.c.value).where(t.c.name == name)).scalar()
    if value is not None or default is None:
        return value
    candidate = default()
    try:
        with engine.begin() as conn:
            conn = conn.execution_options(**opts)
            conn.execute(insert(t).values(name=name, value=candidate, updated_at=datetime.now(UTC)))
        return candidate
    except IntegrityError:  # another process was first
        with engine.connect().execution_options(**opts) as conn:
            winner: str = conn.execute(select(t.c.value).where(t.c.name == name)).scalar_one()
            return winner
