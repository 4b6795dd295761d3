"""The HTTP API (FastAPI), a thin adapter over the library.

``create_app`` loads FastAPI when first named (``slurmtower sensor`` serves a Starlette app of
its own, :mod:`slurmtower.api.sensor_app`, and never imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slurmtower.runtime import BackgroundTask, Services

if TYPE_CHECKING:
    from slurmtower.api.app import create_app

__all__ = ["BackgroundTask", "Services", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from slurmtower.api.app import create_app  # deferred: FastAPI only where the API is built

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
