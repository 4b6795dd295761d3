"""``slurmtower serve``: the HTTP API (and, inside it, the sensor and the archiver)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from slurmtower.cli.app import app
from slurmtower.settings import load_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["app_factory", "serve"]


#: GIL switch interval of the server process. Refreshing a big snapshot (parsing 2,000 jobs
#: takes ~0.4 s of Python) holds the GIL in a worker thread; with the default 5 ms interval
#: the event loop waits up to 5 ms at each of its many GIL hand-overs per request (a convoy)
#: and tail latency balloons. A shorter interval keeps requests moving during a refresh.
SWITCH_INTERVAL = 0.0005


def app_factory() -> FastAPI:
    """The application built from ``$SLURMTOWER_CONFIG`` and the environment (one per worker)."""
    from slurmtower.api import create_app

    sys.setswitchinterval(SWITCH_INTERVAL)
    return create_app(load_settings())


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
    import uvicorn

    from slurmtower.api import create_app

    settings = load_settings(config)
    if host:
        settings.api.host = host
    if port:
        settings.api.port = port
    if workers:
        settings.api.workers = workers
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    sys.setswitchinterval(SWITCH_INTERVAL)
    if settings.api.workers > 1:
        # Each worker builds its own app from the same file and environment; the load
        # archiver's lease keeps exactly one of them sampling.
        if config is not None:
            os.environ["SLURMTOWER_CONFIG"] = str(config)
        uvicorn.run("slurmtower.cli.api:app_factory", factory=True, host=settings.api.host,
                    port=settings.api.port, workers=settings.api.workers, log_level="info",
                    access_log=access_log)
        return
    uvicorn.run(create_app(settings), host=settings.api.host, port=settings.api.port, log_level="info",
                access_log=access_log)
