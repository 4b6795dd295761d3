"""``slurmtower run``, ``slurmtower actions`` and ``slurmtower audit``: the action catalogue
from the command line."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from slurmtower.cli.app import ClusterOpt, ConfigOpt, app, cluster_settings
from slurmtower.errors import InvalidInput

__all__ = ["actions_app"]

OutputOpt = Annotated[str, typer.Option("--output", "-o", help="yaml or json (text too for listings).")]

actions_app = typer.Typer(help="List the actions and their parameters.", invoke_without_command=True)
app.add_typer(actions_app, name="actions")


def _check_output(output: str, allowed: tuple[str, ...]) -> None:
    if output not in allowed:
        raise InvalidInput(f"--output must be one of {', '.join(allowed)}, not {output!r}", param="output")


def _dump(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, default=str)
    import yaml  # deferred: CLI startup (--help and JSON output do not need it)

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True).rstrip()


@app.command(context_settings={"ignore_unknown_options": False})
def run(
    action: Annotated[str, typer.Argument(help="Action name, e.g. slurm.node.drain.")],
    params: Annotated[list[str] | None, typer.Argument(help="Parameters as key=value (JSON for objects and "
                                                       "lists), e.g. nodes=n[1-2] reason='disk swap'.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be done; change nothing.")] = False,
    idempotency_key: Annotated[str | None, typer.Option(
        "--idempotency-key", help="A retry with the same key and parameters prints the first execution's "
                                  "envelope without acting again (other parameters: exit 3).")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="yaml, json, or st2: the execution as the "
                                        "StackStorm slurm pack gives it, JSON (docs/stackstorm.md).")] = "yaml",
    request_reason: Annotated[str | None, typer.Option(
        "--request-reason", help="Why, when the act becomes a request (a two-person rule covers it: another "
                                 "person approves it with `slurmtower requests approve`).")] = None,
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Run one action and print its envelope; exit code 0 only on success (6: it became a request)."""
    from slurmtower.actions import (  # deferred: CLI startup
        REQUESTED_EXIT_CODE,
        Catalogue,
        Envelope,
        cli_principal,
        parse_cli_params,
    )

    _check_output(output, ("yaml", "json", "st2"))
    if output == "st2":
        from slurmtower.actions import st2  # deferred: the st2 output only
    given = parse_cli_params(params or [])
    parsed = st2.pack_params(action, given) if output == "st2" else given
    catalogue = Catalogue.from_settings(cluster_settings(config, cluster))
    done = catalogue.approvals().submit(action, parsed, principal=cli_principal(), role=None, via="cli",
                                        dry_run=True if dry_run else None, idempotency_key=idempotency_key,
                                        reason=request_reason)
    if not isinstance(done, Envelope):
        typer.echo(_dump(done.model_dump(mode="json"), "json" if output == "st2" else output))
        typer.echo(f"slurmtower: requested: {action} waits for a decision as request {done.id} ({done.why}); "
                   "nothing done yet", err=True)
        raise typer.Exit(REQUESTED_EXIT_CODE)
    env = done
    if output == "st2":
        typer.echo(json.dumps(st2.execution(env.model_dump(mode="json"), given), indent=2))
    else:
        typer.echo(_dump(env.model_dump(mode="json"), output))
    if not env.recorded:
        typer.echo(f"slurmtower: error: {env.stderr.splitlines()[0]}", err=True)
        raise typer.Exit(env.exit_code)
    if env.status == "partial":
        typer.echo(f"slurmtower: partial: {action}: {env.stderr.splitlines()[0] if env.stderr else ''}", err=True)
        raise typer.Exit(env.exit_code)
    if env.status != "succeeded":
        typer.echo(f"slurmtower: error: {action} failed: {env.stderr.splitlines()[0] if env.stderr else ''}",
                   err=True)
        raise typer.Exit(env.exit_code or 1)


def _type_of(prop: dict[str, Any]) -> str:
    if "anyOf" in prop:
        return " | ".join(_type_of(p) for p in prop["anyOf"])
    if "$ref" in prop:
        return "object"
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list[{_type_of(prop.get('items', {}))}]"
    return str(kind)


@actions_app.callback()
def actions_list(ctx: typer.Context, output: OutputOpt = "text") -> None:
    """List every action (name, permission, whether it changes anything)."""
    if ctx.invoked_subcommand is not None:
        return
    from slurmtower.actions import REGISTRY  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    rows: list[dict[str, Any]] = [
        {"name": s.name, "description": s.description, "mutating": s.mutating, "permission": s.permission}
        for s in (REGISTRY[n] for n in sorted(REGISTRY))
    ]
    if output != "text":
        typer.echo(_dump(rows, output))
        return
    width = max(len(str(r["name"])) for r in rows)
    for r in rows:
        flag = "changes" if r["mutating"] else "reads  "
        typer.echo(f"{r['name']:<{width}}  {flag}  {r['permission']:<7}  {r['description']}")


@actions_app.command("show")
def actions_show(action: Annotated[str, typer.Argument(help="Action name.")], output: OutputOpt = "text") -> None:
    """Print an action's parameters with types, defaults and descriptions (or its JSON Schema)."""
    from slurmtower.actions import Catalogue  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    spec = Catalogue.spec(action)
    if output != "text":
        typer.echo(_dump(spec.describe(), output))
        return
    schema = spec.schema()
    required = set(schema.get("required", []))
    typer.echo(f"{spec.name}: {spec.description}")
    own = " (or the user role, on its own jobs)" if spec.own_jobs else ""
    typer.echo(f"  permission: {spec.permission}{own}; {'changes the cluster' if spec.mutating else 'read-only'}")
    typer.echo("  parameters:")
    for name, prop in schema.get("properties", {}).items():
        default = "(required)" if name in required else f"default: {json.dumps(prop.get('default'))}"
        if name not in required and "default" not in prop:
            default = "default: (see description)"
        typer.echo(f"    {name} ({_type_of(prop)}) {default}")
        if prop.get("description"):
            typer.echo(f"        {prop['description']}")
    for def_name, definition in schema.get("$defs", {}).items():
        typer.echo(f"  {def_name} (object):")
        for name, prop in definition.get("properties", {}).items():
            typer.echo(f"    {name} ({_type_of(prop)}) default: {json.dumps(prop.get('default'))}"
                       f"  {prop.get('description', '')}")


@app.command()
def audit(
    limit: Annotated[int, typer.Option(help="Records to show (newest first).")] = 50,
    before: Annotated[int | None, typer.Option(help="Only records older than this seq (next page).")] = None,
    who: Annotated[str | None, typer.Option(help="Only this principal.")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action.")] = None,
    output: OutputOpt = "text",
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """List the audit log of mutating actions (who, what, parameters, outcome) of one cluster."""
    from slurmtower.actions import ActionStore  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    settings = cluster_settings(config, cluster)
    store = ActionStore(settings.effective_store_url(), **settings.store_cluster())
    records = store.list_audit(limit=limit, before=before, who=who, action=action)
    if output != "text":
        typer.echo(_dump([r.model_dump(mode="json") for r in records], output))
        return
    for r in records:
        params = json.dumps({k: v for k, v in r.parameters.items() if k != "dry_run"}, default=str)
        typer.echo(f"{r.seq:>6}  {r.at:%Y-%m-%d %H:%M:%S}  {r.who}@{r.via}  {r.action}  {r.outcome}  "
                   f"{r.nodes or '-'}  {params}" + (f"  {r.message.splitlines()[0]}" if r.message else ""))
