"""The Typer application the command modules register on, and its small helpers (the entry
point, where library errors become exit codes, is :mod:`slurmtower.cli.main`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from slurmtower.settings import Settings

__all__ = ["app", "fail", "load_settings"]

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


def cluster_settings(path: str | Path | None, cluster: str | None) -> Settings:
    """The settings of ``cluster`` (``--cluster``; the default cluster without it) of the
    configuration at ``path``; a :class:`~slurmtower.errors.ConfigError` names an unknown one."""
    settings = load_settings(path)
    return settings.for_cluster(cluster or settings.cluster_names()[0])


def fail(message: str, code: int = 2) -> None:
    """Print one readable line on stderr and exit with ``code``."""
    typer.echo(f"slurmtower: error: {message}", err=True)
    raise typer.Exit(code)
