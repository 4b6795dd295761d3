"""The ``slurmtower`` command line: a thin adapter over the library."""

from __future__ import annotations

from slurmtower.cli.app import app
from slurmtower.cli.main import main

__all__ = ["app", "main"]
