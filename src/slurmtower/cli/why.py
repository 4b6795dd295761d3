"""``slurmtower why JOBID``: why a job waits, in plain words (the action ``slurm.job.why``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from slurmtower.cli.app import ClusterOpt, ConfigOpt, app, cluster_settings
from slurmtower.errors import InvalidInput

__all__ = ["render_why"]


def render_why(key: str, why: dict[str, Any]) -> str:
    """One explanation (``slurm.job.why``'s result for one job) as text for a terminal."""
    head = f"Job {key} ({why.get('user_name') or '?'}, {why.get('partition') or '?'}, {why['state']})"
    reason = why.get("reason") or "None"
    detail = f" {why['reason_detail']}" if why.get("reason_detail") else ""
    lines = [f"{head}: {reason}{detail}", f"  {why['summary']}"]
    for fact in why.get("facts", []):
        link = f"  [{fact['link']}]" if fact.get("link") else ""
        lines.append(f"  - {fact['text']}{link}")
        if fact["kind"] == "rank":
            for ahead in fact.get("ahead_jobs", []):
                lines.append(f"      ahead: job {ahead['job_id']} {ahead.get('user_name') or ''} priority "
                             f"{ahead.get('priority')} ({ahead.get('reason') or 'None'})")
            if fact.get("unnamed_ahead"):
                lines.append(f"      and {fact['unnamed_ahead']} more, not named here")
    if why.get("owner_can"):
        lines.append("  What its owner can do:")
        lines += [f"  * {hint}" for hint in why["owner_can"]]
    return "\n".join(lines)


@app.command()
def why(
    jobs: Annotated[list[str], typer.Argument(help="Job ids: 123, an array task 123_4, tasks 123_[1-5] (several "
                                                   "may be given).")],
    output: Annotated[str, typer.Option("--output", "-o", help="text, json or yaml.")] = "text",
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Why jobs are pending: the reason in plain words, what blocks them, what their owner can change."""
    from slurmtower.actions import Catalogue, cli_principal  # deferred: CLI startup

    if output not in ("text", "json", "yaml"):
        raise InvalidInput(f"--output must be one of text, json, yaml, not {output!r}", param="output")
    catalogue = Catalogue.from_settings(cluster_settings(config, cluster))
    env = catalogue.execute("slurm.job.why", {"jobids": jobs}, principal=cli_principal(), via="cli")
    if env.status != "succeeded":
        typer.echo(f"slurmtower: error: {env.stderr.splitlines()[0] if env.stderr else 'slurm.job.why failed'}",
                   err=True)
        raise typer.Exit(env.exit_code or 1)
    result: dict[str, Any] = env.result or {}
    if output == "json":
        typer.echo(json.dumps(result, indent=2))
    elif output == "yaml":
        import yaml  # deferred: CLI startup

        typer.echo(yaml.safe_dump(result, sort_keys=False, allow_unicode=True).rstrip())
    else:
        typer.echo("\n\n".join(render_why(key, value) for key, value in result.items()))
