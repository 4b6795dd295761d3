"""The ``slurmtower`` console script: every command module registered on :data:`app`, and the
one place where library errors become exit codes and one readable line."""

from __future__ import annotations

import sys
from typing import Any

import typer

# Each command module registers its commands on `app` when imported (they load their heavy
# imports only when a command runs).
import slurmtower.cli.actions
import slurmtower.cli.api
import slurmtower.cli.auth
import slurmtower.cli.db
import slurmtower.cli.deploy
import slurmtower.cli.devcluster
import slurmtower.cli.events
import slurmtower.cli.mcp
import slurmtower.cli.misc
import slurmtower.cli.reports
import slurmtower.cli.requests
import slurmtower.cli.why  # noqa: F401
from slurmtower.cli.app import app
from slurmtower.errors import SlurmtowerError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the console script: maps every library error to an exit code + one line."""
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
