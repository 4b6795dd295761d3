"""Small commands: version, config show, info, welcome."""

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


@app.command()
def welcome(config: ConfigOpt = None,
            wait: Annotated[float, typer.Option(help="Seconds to wait for the service to answer /health "
                                                     "(0: say it now).", min=0, max=600)] = 0) -> None:
    """Say where to go once ``slurmtower serve`` answers: the dashboard's and the API's
    addresses, how to log in (the local cluster's demo tokens), how to stop. ``make run`` prints
    it when the service is up."""
    import time  # deferred: CLI startup

    import httpx  # deferred: CLI startup

    from slurmtower.errors import SlurmUnavailable  # deferred: CLI startup
    from slurmtower.settings import load_settings  # deferred: CLI startup

    settings = load_settings(config)
    host = settings.api.host if settings.api.host not in ("0.0.0.0", "::", "") else "127.0.0.1"  # noqa: S104
    url = f"http://{'[' + host + ']' if ':' in host else host}:{settings.api.port}"
    end = time.monotonic() + wait
    while wait:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > end:
            raise SlurmUnavailable(f"the service did not answer {url}/health within {wait:g} s")
        time.sleep(0.3)
    tokens = _demo_tokens()
    lines = ["", "slurmtower is running.", "",
             f"  Dashboard   {url}/ui",
             f"  API         {url}/docs (its OpenAPI document: {url}/openapi.json)", ""]
    if tokens:
        lines += ["  Log in at /ui/login with one of the local cluster's demo tokens (one per role),",
                  "  or send it as 'Authorization: Bearer <token>' to the API:"]
        lines += [f"    {role:<9} {token}" for role, token in tokens.items()]
        lines += ["", '  The CLI on this cluster: eval "$(.venv/bin/slurmtower devcluster env)"',
                  "  The first hour: docs/tutorial.md (make docs builds the site)", "",
                  "  Stop: Ctrl-C (the local cluster stays up for the next run: make cluster-down stops it)."]
    else:
        lines += ["  Log in with a token of auth.tokens (the secret you gave its owner: the configuration",
                  "  holds its SHA-256 only), or sign on where auth.oidc is set.", "",
                  "  Stop: Ctrl-C."]
    typer.echo("\n".join([*lines, ""]))


def _demo_tokens() -> dict[str, str]:
    """The local cluster's demo tokens, where this shell points at one (``devcluster env``)."""
    import os  # deferred: CLI startup
    from pathlib import Path  # deferred: CLI startup

    root = os.environ.get("SLURMTOWER_DEVCLUSTER_DIR")
    path = Path(root) / "etc" / "demo-tokens.json" if root else None
    try:
        found = json.loads(path.read_text()) if path is not None else {}
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
