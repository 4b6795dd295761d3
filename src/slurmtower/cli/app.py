"""The Typer application the command modules register on, and its small helpers (the entry
point, where library errors become exit codes, is :mod:`slurmtower.cli.main`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from slurmtower.settings import Settings

__all__ = ["ClusterOpt", "ConfigOpt", "app", "cluster_settings", "event_store", "fail", "load_settings"]

app = typer.Typer(
    name="slurmtower",
    help="A control tower for Slurm clusters: actions, node events, rules and a REST API.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich's markdown rendering costs 0.1 s per start
    add_completion=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from slurmtower import __version__  # deferred: reading the metadata costs a start

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _options(
    _version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                           help="Print slurmtower's version and exit.")] = False,
) -> None:
    pass


def load_settings(path: str | Path | None = None) -> Settings:
    """:func:`slurmtower.settings.load_settings`, loaded when a command needs it (pydantic's
    settings and the models are a quarter of a second: ``--help`` needs neither)."""
    from slurmtower.settings import load_settings as load  # deferred: CLI startup

    return load(path)


ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Config file (TOML or YAML).",
                                                envvar="SLURMTOWER_CONFIG")]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="Which cluster of [[clusters]] (default: the "
                                                "default cluster).")]


def cluster_settings(path: str | Path | None, cluster: str | None) -> Settings:
    """The settings of ``cluster`` (``--cluster``; the default cluster without it) of the
    configuration at ``path``; a :class:`~slurmtower.errors.ConfigError` names an unknown one."""
    settings = load_settings(path)
    names = settings.cluster_names()
    if cluster is not None and cluster not in names:
        from slurmtower.errors import ConfigError  # deferred: CLI startup

        raise ConfigError(f"--cluster {cluster[:60]!r}: no such cluster (clusters: {', '.join(names)})",
                          key="clusters")
    return settings.for_cluster(cluster or names[0])


def event_store(settings: Settings, cluster: str | None) -> Any:
    """The event store of ``settings``' deployment, writing for ``cluster`` (the settings of
    :func:`cluster_settings`) and naming each event's cluster."""
    from slurmtower.events.store import EventStore  # deferred: CLI startup

    deployment = settings.deployment()
    store = EventStore(settings.effective_store_url(),
                       default_cluster=deployment.cluster_names()[0] if deployment.clusters else None)
    return store.scoped(settings.cluster_key())


def fail(message: str, code: int = 2) -> None:
    """Print one readable line on stderr and exit with ``code``."""
    typer.echo(f"slurmtower: error: {message}", err=True)
    raise typer.Exit(code)
