"""``slurmtower token``: ``create`` a new API bearer token (shown once) and its config entry;
``list`` the configured tokens with their expiry, last use and revocation; ``revoke`` one, in
the store, so that every process of the deployment refuses it, and the dashboard sessions made
from it, from its next request, no restart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

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


def _ledger(settings: Any) -> Any:
    from slurmtower.store.tokens import TokenLedger  # deferred: CLI startup

    return TokenLedger.open(settings.effective_store_url())


def _when(at: float | None) -> str:
    from datetime import UTC, datetime  # deferred: CLI startup

    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds") if at is not None else "-"


@token_app.command("list")
def token_list(
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="SLURMTOWER_CONFIG",
                                                help="Config file (TOML or YAML).")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text",
) -> None:
    """The tokens of ``auth.tokens``: name, role, expiry, last use (when and from where; a
    use is recorded within a few seconds, at most once a minute), revoked or not."""
    if output not in ("text", "json"):
        raise InvalidInput(f"--output {output!r} is not one of text, json", param="output")
    settings = load_settings(config)
    ledger = _ledger(settings)
    try:
        known = ledger.records()
    finally:
        ledger.close()
    rows = []
    for entry in settings.auth.tokens:
        record = known.get(entry.sha256.lower())
        rows.append({
            "name": entry.name, "role": entry.role, "sha256": entry.sha256.lower(),
            "expires": entry.expires.isoformat() if entry.expires is not None else None,
            "last_used": _when(record.last_used_at) if record and record.last_used_at else None,
            "last_address": record.last_address if record else None,
            "revoked": _when(record.revoked_at) if record and record.revoked_at else None,
        })
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(f"{'NAME':<24} {'ROLE':<9} {'EXPIRES':<25} {'LAST USED':<25} {'FROM':<16} REVOKED")
    for r in rows:
        typer.echo(f"{r['name']:<24} {r['role']:<9} {r['expires'] or '-':<25} {r['last_used'] or '-':<25} "
                   f"{r['last_address'] or '-':<16} {r['revoked'] or '-'}")


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Argument(help="The name of the token's auth.tokens entry.")],
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="SLURMTOWER_CONFIG",
                                                help="Config file (TOML or YAML).")] = None,
) -> None:
    """Revoke the token named NAME: every process of the deployment refuses it from its next
    request, and the dashboard sessions made from it, without a restart (the revocation is in
    the store, by the token's SHA-256: for good; give the person a new token). Remove its entry
    from the config at the next change."""
    import time  # deferred: CLI startup

    settings = load_settings(config)
    entries = [e for e in settings.auth.tokens if e.name == name]
    if not entries:
        known = ", ".join(e.name for e in settings.auth.tokens) or "none"
        raise InvalidInput(f"no token named {name!r} in auth.tokens (known: {known})", param="name")
    ledger = _ledger(settings)
    try:
        fresh = [ledger.revoke(e.sha256.lower(), e.name, time.time()) for e in entries]
    finally:
        ledger.close()
    if any(fresh):
        typer.echo(f"revoked the token of {name}: refused by every process from its next request, "
                   "with the dashboard sessions made from it")
    else:
        typer.echo(f"the token of {name} was already revoked")
