"""Typer application and the one place where library errors become exit codes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from slurmtower.errors import SlurmtowerError

if TYPE_CHECKING:
    from slurmtower.settings import Settings

__all__ = ["app", "fail", "load_settings", "main"]

app = typer.Typer(
    name="slurmtower",
    help="A control tower for Slurm clusters: actions, node events, rules and a REST API.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich's markdown rendering costs 0.1 s per start
    add_completion=False,
)


def load_settings(path: str | Path | None = None) -> Settings:
    """:func:`slurmtower.settings.load_settings`, loaded when a command needs it (pydantic's
    settings and the models are a quarter of a second: ``--help`` needs neither)."""
    from slurmtower.settings import load_settings as load  # deferred: CLI startup

    return load(path)


def fail(message: str, code: int = 2) -> None:
    """Print one readable line on stderr and exit with ``code``."""
    typer.echo(f"slurmtower: error: {message}", err=True)
    raise typer.Exit(code)


def _register() -> None:
    # Sub-command modules register themselves on `app` when imported.
    import slurmtower.cli.devcluster  # noqa: F401  # deferred: registers its commands on `app`, which it imports
    import slurmtower.cli.misc  # noqa: F401  # deferred: registers its commands on `app`, which it imports

    for name in ("actions", "events", "api", "auth", "db"):
        try:
            __import__(f"slurmtower.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"slurmtower.cli.{name}":
                raise


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the console script: maps every library error to an exit code + one line."""
    _register()
    command = typer.main.get_command(app)
    try:
        return command.main(args=argv, prog_name="slurmtower", standalone_mode=False)
    except SlurmtowerError as exc:
        typer.echo(f"slurmtower: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("slurmtower: aborted", err=True)
        sys.exit(130)
    except Exception as exc:
        # Usage errors (an unknown command, a missing argument) of click, or of the click
        # typer bundles: both are ClickExceptions with a message and an exit code (2).
        message = getattr(exc, "format_message", None)
        code = getattr(exc, "exit_code", None)
        if callable(message) and isinstance(code, int):
            typer.echo(f"slurmtower: error: {message()}", err=True)
            sys.exit(code)
        raise
