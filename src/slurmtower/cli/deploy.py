"""``slurmtower init`` (the configuration, keys, units and proxy snippet a site installs) and
``slurmtower doctor`` (one line per check of a deployment, with its fix)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Annotated

import typer

from slurmtower.cli.app import ConfigOpt, app, fail, load_settings

__all__ = ["doctor", "init"]

OutputOpt = Annotated[str, typer.Option("--output", "-o", help="text or json")]


@app.command()
def init(
    root: Annotated[Path, typer.Option("--root", help="Write under this directory instead of / "
                                       "(a package's staging directory, a test).")] = Path("/"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that exist (never the sensor's key).")]
    = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be written, secrets masked.")] = False,
    db_user: Annotated[str, typer.Option("--db-user", help="The read-only user of slurmdbd's database.")]
    = "slurmtower_ro",
    server_name: Annotated[str | None, typer.Option("--server-name", help="The proxy's public host name "
                                                    "(default: this host's FQDN).")] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="The API's loopback port.")] = 8642,
    output: OutputOpt = "text",
) -> None:
    """Write /etc/slurmtower/slurmtower.toml and sensor.toml (commented, from the settings' schema),
    the sensor's key, the accounting grant, the systemd units, sysusers.d and tmpfiles.d entries
    and an nginx snippet, from the Slurm configuration found ($SLURM_CONF, /etc/slurm/slurm.conf,
    slurmdbd.conf beside it, else scontrol show config)."""
    from slurmtower.deploy.discover import discover  # deferred: CLI startup
    from slurmtower.deploy.init import (  # deferred: CLI startup
        as_mapping,
        default_slurmtower,
        missing_groups,
        plan_init,
        write_plan,
    )
    from slurmtower.deploy.units import UnitParams  # deferred: CLI startup

    site = discover()
    etc = Path("/etc/slurmtower")
    params = UnitParams(slurmtower=default_slurmtower(), config=etc / "slurmtower.toml",
                        sensor_config=etc / "sensor.toml", slurm_user=site.slurm_user, port=port,
                        server_name=server_name or socket.getfqdn())
    plan = plan_init(site, params=params, db_user=db_user, etc=etc)
    if dry_run:
        if output == "json":
            typer.echo(json.dumps({**as_mapping(plan), "root": str(root)}, indent=2))
            return
        for f in plan.files:
            typer.echo(f"--- would write {root / f.path.relative_to('/')} (mode {f.mode:04o}"
                       f"{', group ' + f.group if f.group else ''}{', kept if it exists' if f.keep else ''})")
            typer.echo(f.shown(), nl=False)
        for note in plan.notes:
            typer.echo(f"next: {note}")
        return
    done = write_plan(plan, root=root, force=force)
    if output == "json":
        typer.echo(json.dumps({"files": [{"path": str(p), "action": a} for p, a in done],
                               "notes": plan.notes}, indent=2))
        return
    for path, action in done:
        typer.echo(f"{action} {path}")
    for group in missing_groups(plan):
        typer.echo(f"next: group {group} does not exist yet: after systemd-sysusers, chgrp {group} the files "
                   "named for it above")
    for note in plan.notes:
        typer.echo(f"next: {note}")


@app.command()
def doctor(
    config: ConfigOpt = None,
    check: Annotated[list[str] | None, typer.Option("--check", help="Run only this check (repeatable).")] = None,
    output: OutputOpt = "text",
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster's checks (of [[clusters]]; "
                                                "default: every cluster's).")] = None,
) -> None:
    """Check the deployment as the service's user: one line per check with its fix (each
    cluster's, named, with ``[[clusters]]``); exit 1 when a check fails (warnings do not)."""
    from slurmtower.deploy.doctor import CHECKS, doctor_failed, run_checks  # deferred: CLI startup

    unknown = [c for c in check or [] if c not in CHECKS]
    if unknown:
        fail(f"no check {unknown[0]!r}; the checks: {', '.join(CHECKS)}")
    results = run_checks(load_settings(config), only=check, cluster=cluster)
    if output == "json":
        typer.echo(json.dumps([{"name": r.name, "status": r.status, "detail": r.detail, "fix": r.fix,
                                "cluster": r.cluster} for r in results], indent=2))
    else:
        for r in results:
            typer.echo(r.line())
    if doctor_failed(results):
        raise typer.Exit(1)
