"""``slurmtower serve``: the HTTP API (and, inside it, the sensor and the archiver)."""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from slurmtower.cli.app import app, load_settings
from slurmtower.errors import ConfigError

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["OPTION_VARIABLES", "SERVER_EXTRA", "app_factory", "export_options", "require_server_extra", "serve"]

#: The modules ``serve`` needs beyond the core install: ``pip install 'slurmtower[server]'``.
SERVER_EXTRA = ("fastapi", "authlib")


def require_server_extra() -> None:
    """Raise :class:`ConfigError` naming the ``server`` extra when its packages are missing (an
    install of the CLI alone), rather than an ImportError's traceback from deep in the API."""
    missing = [name for name in SERVER_EXTRA if find_spec(name) is None]
    if missing:
        raise ConfigError(f"slurmtower serve needs the server extra ({', '.join(missing)} not installed): "
                          "pip install 'slurmtower[server]'")


#: GIL switch interval of the server process. Refreshing a big snapshot (parsing 2,000 jobs
#: takes ~0.4 s of Python) holds the GIL in a worker thread; with the default 5 ms interval
#: the event loop waits up to 5 ms at each of its many GIL hand-overs per request (a convoy)
#: and tail latency balloons. A shorter interval keeps requests moving during a refresh.
SWITCH_INTERVAL = 0.0005


def app_factory() -> FastAPI:
    """The application built from ``$SLURMTOWER_CONFIG`` and the environment (one per worker)."""
    from slurmtower.api import create_app  # deferred: CLI startup

    sys.setswitchinterval(SWITCH_INTERVAL)
    return create_app(load_settings())


#: ``serve``'s options that are settings, and the variable :func:`load_settings` reads each
#: from. ``serve`` exports the options given, so that every worker (a fresh process building
#: its app with :func:`app_factory`) sees the same settings as the parent.
OPTION_VARIABLES = {
    "config": "SLURMTOWER_CONFIG",
    "host": "SLURMTOWER_API__HOST",
    "port": "SLURMTOWER_API__PORT",
    "workers": "SLURMTOWER_API__WORKERS",
}


def export_options(options: dict[str, object | None]) -> None:
    """Put each option given (not None) in the environment the workers inherit."""
    for name, value in options.items():
        if value is not None:
            os.environ[OPTION_VARIABLES[name]] = str(value)


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="SLURMTOWER_CONFIG",
                                                help="Config file (TOML or YAML).")] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default: api.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: api.port).")] = None,
    workers: Annotated[int | None, typer.Option(min=1,
                                                help="Worker processes (default: api.workers).")] = None,
    access_log: Annotated[bool, typer.Option("--access-log/--no-access-log",
                                             help="Log every request (costs throughput).")] = True,
) -> None:
    """Run the REST API service."""
    require_server_extra()
    import uvicorn  # deferred: CLI startup

    from slurmtower.api import create_app  # deferred: CLI startup

    # The parent reads its settings the way each worker will: from the exported options.
    export_options({"config": config, "host": host, "port": port, "workers": workers})
    settings = load_settings()
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    # A store at another schema revision is refused here, in one line, before any worker
    # starts (an empty one is created, once).
    from slurmtower.store.migrate import check_store_url  # deferred: CLI startup

    check_store_url(settings.effective_store_url())
    sys.setswitchinterval(SWITCH_INTERVAL)
    if settings.api.workers > 1:
        # Each worker builds its own app from the same file and environment; the load
        # archiver role's election keeps exactly one of them sampling. Their counters go to files
        # in a directory of their own, which every scrape sums (routes/metrics.py).
        from slurmtower.runtime.metrics import MULTIPROCESS_VARIABLE, multiprocess_dir  # deferred: CLI startup

        with multiprocess_dir(settings.state_dir, settings.api.port) as metrics_dir:
            os.environ[MULTIPROCESS_VARIABLE] = str(metrics_dir)
            uvicorn.run("slurmtower.cli.api:app_factory", factory=True, host=settings.api.host,
                        port=settings.api.port, workers=settings.api.workers, log_level="info",
                        access_log=access_log, **settings.api.server_options())
        return
    uvicorn.run(create_app(settings), host=settings.api.host, port=settings.api.port, log_level="info",
                access_log=access_log, **settings.api.server_options())
