"""``slurmtower sensor``, ``slurmtower events [--follow]``, ``slurmtower alert`` and
``slurmtower rules check DIR``."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from slurmtower.cli.app import ClusterOpt, ConfigOpt, app, cluster_settings, event_store, load_settings
from slurmtower.errors import InvalidInput

if TYPE_CHECKING:
    from slurmtower.settings import Settings

__all__ = ["parse_since", "rules_app"]

rules_app = typer.Typer(help="Event rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, *, now: datetime | None = None) -> tuple[int | None, datetime | None]:
    """``--since``: an event id (``1234``), an age (``30s``, ``10m``, ``2h``, ``1d``) or an
    ISO 8601 time (``2024-05-01T10:00:00+00:00``; without a zone it is UTC).

    Returns ``(since_id, start)``; raises :class:`InvalidInput` naming ``--since``.
    """
    value = text.strip()
    if value.isdigit():
        return int(value), None
    match = _DURATION.match(value)
    if match:
        seconds = float(match[1]) * _UNITS[match[2]]
        return None, (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidInput(
            f"--since {text!r}: expected an event id, an age like 10m, or an ISO 8601 time", param="since"
        ) from exc
    return None, when if when.tzinfo else when.replace(tzinfo=UTC)


def _describe(event: Any) -> str:
    p = event.payload
    when = event.time.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    where = f" [{event.cluster}]" if event.cluster else ""
    head = f"{event.id:>6}  {when}  {event.type:<32} {event.source:<8}{where}"
    if event.type == "slurm.node.state":
        before = "+".join([p.get("previous_state") or "-", *p.get("previous_flags", [])])
        after = "+".join([p.get("state") or "-", *p.get("flags", [])])
        reason = f"  reason={p['reason']!r}" if p.get("reason") else ""
        owner = f" by {p['reason_owner']}" if p.get("reason_owner") else ""
        return f"{head} {event.node}: {before} -> {after}{reason}{owner}"
    if event.type == "slurm.sensor.trigger.triggered":
        return f"{head} {p.get('class')}/{p.get('type')} {p.get('argument', '')}"
    if event.type in ("slurm.sensor.trigger.up", "slurm.sensor.trigger.down"):
        return f"{head} sensor {p.get('uuid')}"
    if event.type == "slurmtower.security":
        return f"{head} {p.get('what')}: {p.get('status')} {p.get('reason')} {p.get('detail')}"
    return f"{head} {event.node or ''} {json.dumps(p, sort_keys=True)[:200]}"


@app.command("events")
def events_cmd(
    config: ConfigOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    type_: Annotated[list[str] | None, typer.Option("--type", "-t", help="Event type (repeatable).")] = None,
    node: Annotated[str | None, typer.Option("--node", "-n", help="Only events about this node.")] = None,
    since: Annotated[str | None, typer.Option(help="Event id, age (10m, 2h) or ISO time.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many past events.", min=1, max=10000)] = 50,
    output: Annotated[str, typer.Option("--output", "-o", help="text or json (one object a line)")] = "text",
    interval: Annotated[float, typer.Option(help="Seconds between reads with --follow.", min=0.05)] = 0.5,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster's events (of [[clusters]]; "
                                                "default: every cluster's).")] = None,
) -> None:
    """Print events from the event store (newest ``--limit`` unless ``--since``)."""
    if output not in ("text", "json"):
        raise InvalidInput(f"--output {output!r}: use text or json", param="output")
    settings = cluster_settings(config, cluster)
    since_id, start = parse_since(since) if since else (None, None)
    types = [t for item in type_ or [] for t in item.split(",") if t] or None
    store = event_store(settings, cluster)
    scope = {"own": True} if cluster is not None else {}

    def emit(events: list[Any]) -> None:
        for ev in events:
            if output == "json":
                typer.echo(ev.model_dump_json())
            else:
                typer.echo(_describe(ev))

    if since is None:
        events = list(reversed(store.query(types=types, node=node, limit=limit, descending=True, **scope)))
    else:
        events = store.query(since_id=since_id, start=start, types=types, node=node, limit=limit, **scope)
    emit(events)
    if not follow:
        return
    position = events[-1].id if events else (store.last_id() or 0)
    assert position is not None
    try:
        while True:
            time.sleep(interval)
            new = store.query(since_id=position, types=types, node=node, limit=1000, **scope)
            if new:
                emit(new)
                last = new[-1].id
                assert last is not None
                position = last
    except KeyboardInterrupt:
        return


@app.command("alert")
def alert_cmd(
    file: Annotated[str, typer.Argument(help="A JSON file of alerts, or - for standard input.")] = "-",
    format_: Annotated[str, typer.Option("--format", "-f", help="alertmanager (Alertmanager's webhook body) "
                                         "or generic (an alert, or {\"alerts\": [...]})")] = "alertmanager",
    config: ConfigOpt = None,
    output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text",
    cluster: ClusterOpt = None,
) -> None:
    """Record alerts as events, as ``POST /hooks/alertmanager`` and ``/hooks/generic`` do (one
    ``alert.firing`` / ``alert.resolved`` event per alert, its node from the labels, copies
    within ``hooks.dedupe_window`` left out): for a health check run from cron, or to try a
    rule. The service's rule engine runs on them within a poll interval."""
    from slurmtower.events.alerts import (  # deferred: CLI startup
        parse_alertmanager,
        parse_generic,
        parse_json_body,
        record_alerts,
        recorded_summary,
    )
    if format_ not in ("alertmanager", "generic"):
        raise InvalidInput(f"--format {format_!r}: use alertmanager or generic", param="format")
    if output not in ("text", "json"):
        raise InvalidInput(f"--output {output!r}: use text or json", param="output")
    settings = cluster_settings(config, cluster)
    limit = settings.hooks.max_body_bytes
    try:
        if file == "-":
            body = typer.get_binary_stream("stdin").read(limit + 1)
        else:
            with open(file, "rb") as handle:
                body = handle.read(limit + 1)
    except OSError as exc:
        raise InvalidInput(f"{file}: {exc.strerror or exc}", param="file") from exc
    if len(body) > limit:
        raise InvalidInput(f"{file}: over hooks.max_body_bytes ({limit} bytes)", param="file")
    data = parse_json_body(body)
    parse = parse_alertmanager if format_ == "alertmanager" else parse_generic
    alerts = parse(data, hooks=settings.hooks)
    store = event_store(settings, cluster)
    try:
        stored, duplicates = record_alerts(store, alerts, dedupe_window=settings.hooks.dedupe_window)
    finally:
        store.close()
    if output == "json":
        typer.echo(json.dumps(recorded_summary(len(alerts), stored, duplicates)))
        return
    for ev in stored:
        typer.echo(_describe(ev))
    typer.echo(f"{len(alerts)} alert(s): {len(stored)} recorded, {duplicates} already recorded")


@rules_app.command("check")
def rules_check(
    directory: Annotated[Path, typer.Argument(help="Directory of rule files (*.yaml).")],
    output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text",
) -> None:
    """Load every rule file in DIR; list the rules, report each broken file (exit 1)."""
    from slurmtower.rules import load_rules  # deferred: CLI startup

    rules, errors = load_rules(directory)
    if output == "json":
        typer.echo(json.dumps({
            "rules": [{"name": r.name, "enabled": r.enabled, "trigger": r.trigger.type,
                       "action": r.action.ref} for r in rules],
            "errors": [{"file": str(e.file), "rule": e.rule, "message": e.message} for e in errors],
        }, indent=2))
    else:
        for r in rules:
            state = "" if r.enabled else " (disabled)"
            typer.echo(f"ok    {r.name}: {r.trigger.type} -> {r.action.ref}{state}")
        for e in errors:
            typer.echo(f"slurmtower: error: {e}", err=True)
    if errors:
        raise typer.Exit(1)


def _sensor_app(settings: Settings) -> Any:
    from slurmtower.api.sensor_app import create_sensor_app  # deferred: CLI startup

    return create_sensor_app(settings)


@app.command("sensor")
def sensor_cmd(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default: events.callback_host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: events.callback_port, api.port).")] = None,
) -> None:
    """Run the node sensor alone: Slurm triggers, the poll loop, rules, and its callback receiver
    (with /health and /ready; the events are read where `slurmtower serve` runs on the same store).

    A clean stop (SIGTERM, Ctrl-C) clears the sensor's triggers.
    """
    import uvicorn  # deferred: CLI startup

    settings = load_settings(config)
    if port:
        settings.events.callback_port = port
    bind = host or settings.events.callback_host
    listen = settings.events.callback_port or settings.api.port
    uvicorn.run(_sensor_app(settings), host=bind, port=listen, log_level="warning",
                **settings.api.server_options())
