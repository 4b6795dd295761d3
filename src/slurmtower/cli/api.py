"""``slurmtower serve``: the HTTP API (and, inside it, the sensor and the archiver)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from slurmtower.cli.app import app
from slurmtower.settings import load_settings

__all__ = ["serve"]


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="SLURMTOWER_CONFIG",
                                                help="Config file (TOML or YAML).")] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default: api.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: api.port).")] = None,
) -> None:
    """Run the REST API service."""
    import uvicorn

    from slurmtower.api import create_app

    settings = load_settings(config)
    if host:
        settings.api.host = host
    if port:
        settings.api.port = port
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    uvicorn.run(create_app(settings), host=settings.api.host, port=settings.api.port, log_level="info")
