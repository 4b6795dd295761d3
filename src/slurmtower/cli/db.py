"""``slurmtower db upgrade``, ``slurmtower db current`` and ``slurmtower db purge``: slurmtower's own store."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from slurmtower.cli.app import ConfigOpt, app, load_settings

__all__ = ["db_app"]

db_app = typer.Typer(help="slurmtower's own store: its schema revision, upgrades.", no_args_is_help=True)
app.add_typer(db_app, name="db")

OutputOpt = Annotated[str, typer.Option("--output", "-o", help="text or json")]


def _revision(revision: str | None, versioned: bool) -> str:
    if revision is None:
        return "empty"
    return revision if versioned else f"{revision} (no version table: made by slurmtower 0.1)"


@db_app.command("upgrade")
def db_upgrade(config: ConfigOpt = None, output: OutputOpt = "text") -> None:
    """Upgrade the store in place to this slurmtower's schema, in one transaction (back it up
    first); an empty store is created."""
    from slurmtower.store.engine import make_store_engine  # deferred: CLI startup
    from slurmtower.store.migrate import upgrade  # deferred: CLI startup

    url = load_settings(config).effective_store_url()
    engine = make_store_engine(url)
    try:
        before, after = upgrade(engine)
    finally:
        engine.dispose()
    where = engine.url.render_as_string(hide_password=True)
    if output == "json":
        typer.echo(json.dumps({"store": where, "from": before.revision, "to": after.revision,
                               "head": after.head, "upgraded": before != after}, indent=2))
        return
    if before == after:
        typer.echo(f"store {where}: already at {after.revision}, nothing to do")
        return
    typer.echo(f"store {where}: upgraded from {_revision(before.revision, before.versioned)} to {after.revision}")


@db_app.command("current")
def db_current(config: ConfigOpt = None, output: OutputOpt = "text") -> None:
    """Print the store's schema revision and this slurmtower's head revision."""
    from slurmtower.store.engine import make_store_engine  # deferred: CLI startup
    from slurmtower.store.migrate import UPGRADE_COMMAND, current_state  # deferred: CLI startup

    engine = make_store_engine(load_settings(config).effective_store_url())
    try:
        state = current_state(engine)
    finally:
        engine.dispose()
    where = engine.url.render_as_string(hide_password=True)
    if not state.known:
        verdict = "newer than this slurmtower: upgrade slurmtower"
    elif state.up_to_date:
        verdict = "up to date"
    elif state.empty:
        verdict = "created at the head revision on first start"
    else:
        verdict = f"needs `{UPGRADE_COMMAND}`"
    if output == "json":
        typer.echo(json.dumps({"store": where, "revision": state.revision, "versioned": state.versioned,
                               "head": state.head, "up_to_date": state.up_to_date, "known": state.known},
                              indent=2))
        return
    typer.echo(f"store:    {where}")
    typer.echo(f"revision: {_revision(state.revision, state.versioned)}")
    typer.echo(f"head:     {state.head}")
    typer.echo(f"status:   {verdict}")


@db_app.command("purge")
def db_purge(
    older_than_days: Annotated[float | None, typer.Option(
        "--older-than-days", min=0, help="Purge executions started before this many days ago "
                                         "(default: actions.retention_days).")] = None,
    audit_older_than_days: Annotated[float | None, typer.Option(
        "--audit-older-than-days", min=0, help="Purge audit records written before this many days ago "
                                               "(default: actions.audit_retention_days).")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Delete the action executions and the audit records older than their retentions, as the
    service's archiver leader does every actions.purge_interval."""
    from datetime import UTC, datetime, timedelta  # deferred: CLI startup

    from slurmtower.actions import ActionStore  # deferred: CLI startup

    settings = load_settings(config)
    days = settings.actions.retention_days if older_than_days is None else older_than_days
    audit_days = settings.actions.audit_retention_days if audit_older_than_days is None else audit_older_than_days
    now = datetime.now(UTC)
    cutoff, audit_cutoff = now - timedelta(days=days), now - timedelta(days=audit_days)
    store = ActionStore(settings.effective_store_url())
    try:
        purged = store.purge_executions(older_than=cutoff)
        audit_purged = store.purge_audit(older_than=audit_cutoff)
    finally:
        store.close()
    if output == "json":
        typer.echo(json.dumps({"purged": purged, "started_before": cutoff.isoformat(),
                               "audit_purged": audit_purged, "audit_before": audit_cutoff.isoformat()}, indent=2))
        return
    typer.echo(f"purged {purged} executions started before {cutoff.isoformat(timespec='seconds')}")
    typer.echo(f"purged {audit_purged} audit records written before {audit_cutoff.isoformat(timespec='seconds')}")
