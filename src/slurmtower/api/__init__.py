"""The HTTP API (FastAPI), a thin adapter over the library."""

from __future__ import annotations

from slurmtower.api.app import create_app
from slurmtower.runtime import BackgroundTask, Services

__all__ = ["BackgroundTask", "Services", "create_app"]
