"""Small commands: version, config show."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from slurmtower.cli.app import ClusterOpt, ConfigOpt, app, cluster_settings

__all__ = ["config_app"]

config_app = typer.Typer(help="Inspect slurmtower's configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")



@app.command()
def version() -> None:
    """Print slurmtower's version (as ``slurmtower --version``)."""
    from slurmtower import __version__  # deferred: reading the metadata costs a start

    typer.echo(__version__)


@config_app.command("show")
def config_show(config: ConfigOpt = None,
                output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text") -> None:
    """Print the effective configuration, where each value came from, secrets masked."""
    from slurmtower.settings import describe, load_settings  # deferred: CLI startup

    rows = describe(load_settings(config))
    if output == "json":
        typer.echo(json.dumps({k: {"value": v, "source": s} for k, v, s in rows}, indent=2))
        return
    width = max(len(k) for k, _, _ in rows)
    for key, value, source in rows:
        typer.echo(f"{key:<{width}}  {value}  ({source})")


@app.command()
def info(config: ConfigOpt = None,
         output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text",
         cluster: ClusterOpt = None) -> None:
    """Print the cluster, its Slurm version, the backend in use and its capabilities, slurmrestd's
    API versions (where one is configured); warn (stderr) when the REST API version in use is deprecated."""
    from slurmtower.slurm import make_client  # deferred: CLI startup
    from slurmtower.slurm.info import cluster_info  # deferred: CLI startup

    settings = cluster_settings(config, cluster)  # the cluster's Slurm (the default cluster's without one)
    caps, warnings = cluster_info(settings, make_client(settings))
    caps = {"cluster": settings.cluster_name or settings.cluster_names()[0], **caps}
    for warning in warnings:
        typer.echo(f"slurmtower: warning: {warning}", err=True)
    if output == "json":
        typer.echo(json.dumps(caps, indent=2))
        return
    for key, value in caps.items():
        if isinstance(value, dict):
            typer.echo(f"{key}:")
            for k, v in value.items():
                typer.echo(f"  {k}: {', '.join(map(str, v)) if isinstance(v, list) else v}")
        else:
            typer.echo(f"{key}: {', '.join(value) if isinstance(value, list) else value}")
