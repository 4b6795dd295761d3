"""slurmtower: a control tower for Slurm clusters.

The library's public surface, for tools built on it (each name is loaded on first use, so
``import slurmtower`` stays cheap)::

    from slurmtower import load_settings, make_client, Catalogue

    settings = load_settings()
    catalogue = Catalogue.from_settings(settings)
    envelope = catalogue.execute("slurm.node.get", {"nodes": "n1"}, principal="me", via="script")

========================  ====================================================================
``Settings``              the configuration (``load_settings`` reads file and environment)
``make_client``           the one client to Slurm (``SlurmClient``: CLI or slurmrestd backend)
``Catalogue``             the action catalogue (the same actions as the CLI, the API, the rules)
``EventStore``            the node event log (``Event``) the sensor records and rules read
``AccountingDB``          slurmdbd's database, read-only (job history, users)
``LiveState``             the cluster as shared snapshots (queue, nodes, partitions, stats)
``build_services``        a whole service (what ``slurmtower serve`` runs), ``Services``
``Principal``, ``Perm``   who acts and what a role may do; ``Visibility`` what they may see
``SlurmtowerError``       the root of every error (its HTTP status and CLI exit code)
========================  ====================================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: The version when slurmtower's metadata cannot be read (run from a tree never installed).
_UNKNOWN_VERSION = "0+unknown"

_EXPORTS = {
    "AccountingDB": "slurmtower.accounting",
    "Catalogue": "slurmtower.actions",
    "Envelope": "slurmtower.actions",
    "Event": "slurmtower.models.event",
    "EventStore": "slurmtower.events.store",
    "LiveState": "slurmtower.live.state",
    "Perm": "slurmtower.principal",
    "Principal": "slurmtower.principal",
    "Services": "slurmtower.runtime",
    "Settings": "slurmtower.settings",
    "SlurmClient": "slurmtower.slurm",
    "SlurmtowerError": "slurmtower.errors",
    "Visibility": "slurmtower.visibility",
    "build_services": "slurmtower.runtime",
    "load_settings": "slurmtower.settings",
    "make_client": "slurmtower.slurm",
}

if TYPE_CHECKING:
    from slurmtower.accounting import AccountingDB
    from slurmtower.actions import Catalogue, Envelope
    from slurmtower.errors import SlurmtowerError
    from slurmtower.events.store import EventStore
    from slurmtower.live.state import LiveState
    from slurmtower.models.event import Event
    from slurmtower.principal import Perm, Principal
    from slurmtower.runtime import Services, build_services
    from slurmtower.settings import Settings, load_settings
    from slurmtower.slurm import SlurmClient, make_client
    from slurmtower.visibility import Visibility

    __version__: str

__all__ = [
    "AccountingDB",
    "Catalogue",
    "Envelope",
    "Event",
    "EventStore",
    "LiveState",
    "Perm",
    "Principal",
    "Services",
    "Settings",
    "SlurmClient",
    "SlurmtowerError",
    "Visibility",
    "__version__",
    "build_services",
    "load_settings",
    "make_client",
]


def _installed_version() -> str:
    """The version the installed metadata gives (the git tag's at build time: pyproject's
    ``[tool.hatch.version]``), read once, on first use: reading it costs tens of milliseconds."""
    from importlib.metadata import PackageNotFoundError, version  # deferred: first use only

    try:
        return version("slurmtower")
    except PackageNotFoundError:
        return _UNKNOWN_VERSION


def __getattr__(name: str) -> Any:
    if name == "__version__":
        found = _installed_version()
        globals()["__version__"] = found
        return found
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'slurmtower' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
