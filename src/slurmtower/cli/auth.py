"""``slurmtower token create``: a new API bearer token, shown once, and its config entry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer

from slurmtower.cli.app import app, load_settings
from slurmtower.errors import InvalidInput
from slurmtower.principal import ROLES as TOKEN_ROLES
from slurmtower.principal import hash_token, new_token

__all__ = ["token_app"]

token_app = typer.Typer(help="API bearer tokens.", no_args_is_help=True)
app.add_typer(token_app, name="token")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option("--role", help="reader, operator, admin, or alerter (may only post "
                                                     "alerts to /hooks/alertmanager).")],
    name: Annotated[str, typer.Option("--name", help="Who holds the token (shown in the audit log).")],
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="SLURMTOWER_CONFIG",
                                                help="Config file, to refuse a name already in use.")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="text, yaml or json")] = "text",
) -> None:
    """Print a new token ONCE and the ``auth.tokens`` entry (name, role, sha256) to add to the config.

    Only the SHA-256 goes into the config; the token itself is not stored anywhere.
    """
    if role not in TOKEN_ROLES:
        raise InvalidInput(f"--role {role!r} is not one of {', '.join(TOKEN_ROLES)}", param="role")
    if not _NAME_RE.match(name):
        raise InvalidInput(f"--name {name!r}: use 1-64 letters, digits, '.', '_', '@' or '-'", param="name")
    if output not in ("text", "yaml", "json"):
        raise InvalidInput(f"--output {output!r} is not one of text, yaml, json", param="output")
    if config is not None:
        taken = {t.name for t in load_settings(config).auth.tokens}
        if name in taken:
            raise InvalidInput(f"--name {name!r} already has a token in {config}; pick another name "
                               "or remove the old entry first", param="name")
    token = new_token()
    entry = {"name": name, "role": role, "sha256": hash_token(token)}
    if output == "json":
        typer.echo(json.dumps({"token": token, "entry": entry}))
        return
    typer.echo(f"token: {token}")
    typer.echo("(shown once: slurmtower keeps only its SHA-256)", err=True)
    typer.echo("")
    if output == "yaml":
        typer.echo("# add under auth: tokens: in the config file")
        typer.echo(f"- name: {json.dumps(name)}\n  role: {role}\n  sha256: {entry['sha256']}")
    else:
        typer.echo("# add to the config file")
        typer.echo("[[auth.tokens]]")
        typer.echo(f"name = {json.dumps(name)}\nrole = \"{role}\"\nsha256 = \"{entry['sha256']}\"")
