"""Kept for imports of earlier releases: the engine lives in :mod:`slurmtower.store.engine`."""

from __future__ import annotations

from slurmtower.store.engine import make_store_engine

__all__ = ["make_store_engine"]
