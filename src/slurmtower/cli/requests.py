"""``slurmtower requests``: the requests for acts that wait for a person, from the command line.

The caller is the CLI's principal (the invoking user behind sudo, else the effective user);
like ``slurmtower run`` it has Slurm's own rights, so it decides requests as an admin does,
never its own (:mod:`slurmtower.actions.approvals`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from slurmtower.cli.actions import OutputOpt, _check_output, _dump
from slurmtower.cli.app import ClusterOpt, ConfigOpt, app, cluster_settings

if TYPE_CHECKING:
    from slurmtower.actions import Approvals
    from slurmtower.models.request import ActionRequest

__all__ = ["requests_app"]

requests_app = typer.Typer(help="Requests for acts that wait for a person: list, show, approve, deny, withdraw.",
                           no_args_is_help=True)
app.add_typer(requests_app, name="requests")

RequestArg = Annotated[int, typer.Argument(min=1, help="The request's id.")]
CommentOpt = Annotated[str | None, typer.Option("--comment", "-m", help="Why (free text).")]


def _approvals(config: Any, cluster: str | None) -> Approvals:
    from slurmtower.actions import Catalogue  # deferred: CLI startup

    return Catalogue.from_settings(cluster_settings(config, cluster)).approvals()


def _line(r: ActionRequest) -> str:
    what = json.dumps({k: v for k, v in r.parameters.items() if v not in (None, [], False)}, default=str)
    decided = f"  {r.state} by {r.decided_by}" if r.decided_by else ""
    return (f"{r.id:>6}  {r.state:<9}  {r.created_at:%Y-%m-%d %H:%M}  {r.requester}@{r.via}  {r.action}  {what}"
            f"{decided}" + (f"  \u201c{r.reason}\u201d" if r.reason else ""))


def _print(r: ActionRequest, output: str) -> None:
    if output == "text":
        typer.echo(_line(r))
        typer.echo(f"        why: {r.why}; expires {r.expires_at:%Y-%m-%d %H:%M:%S} UTC")
        if r.comment:
            typer.echo(f"        comment: {r.comment}")
        if r.execution_id:
            typer.echo(f"        execution: {r.execution_id}")
        return
    typer.echo(_dump(r.model_dump(mode="json"), output))


@requests_app.command("list")
def list_requests(
    state: Annotated[list[str] | None, typer.Option("--state", help="Only these states (repeatable): pending, "
                                                    "running, approved, failed, denied, withdrawn, expired.")] = None,
    requester: Annotated[str | None, typer.Option(help="Only this requester's.")] = None,
    action: Annotated[str | None, typer.Option(help="Only requests for this action.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    output: OutputOpt = "text",
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """List requests, newest first, and how many are pending."""
    from slurmtower.actions import cli_principal  # deferred: CLI startup
    from slurmtower.errors import InvalidInput  # deferred: CLI startup
    from slurmtower.models.request import REQUEST_STATES  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    bad = [s for s in state or () if s not in REQUEST_STATES]
    if bad:
        raise InvalidInput(f"--state {bad[0]!r} is not one of {', '.join(REQUEST_STATES)}", param="state")
    page = _approvals(config, cluster).find(principal=cli_principal(), role=None, states=state or (),
                                            requester=requester, action=action, limit=limit)
    if output != "text":
        typer.echo(_dump(page.model_dump(mode="json"), output))
        return
    for r in page.requests:
        typer.echo(_line(r))
    typer.echo(f"{page.pending} pending", err=True)


@requests_app.command("show")
def show_request(request_id: RequestArg, output: OutputOpt = "text", config: ConfigOpt = None,
                 cluster: ClusterOpt = None) -> None:
    """Print one request: what, who, why, its plan and its decision."""
    from slurmtower.actions import cli_principal  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    req = _approvals(config, cluster).get(request_id, principal=cli_principal(), role=None)
    _print(req, output)
    if output == "text" and req.plan.get("stdout"):
        typer.echo("        plan: " + str(req.plan["stdout"]).replace("\n", "\n              "))


@requests_app.command("approve")
def approve(request_id: RequestArg, comment: CommentOpt = None, output: OutputOpt = "text",
            config: ConfigOpt = None, cluster: ClusterOpt = None) -> None:
    """Approve a pending request (not your own): its action runs now, as its requester."""
    from slurmtower.actions import cli_principal  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    req, env = _approvals(config, cluster).approve(request_id, principal=cli_principal(), role=None, via="cli",
                                                   comment=comment)
    if output != "text":
        typer.echo(_dump({"request": req.model_dump(mode="json"), "execution": env.model_dump(mode="json")}, output))
    else:
        _print(req, output)
        if env.stdout:
            typer.echo(env.stdout)
    if req.state != "approved":
        typer.echo(f"slurmtower: error: request {req.id}: {req.action} ran and failed: "
                   f"{env.stderr.splitlines()[0] if env.stderr else env.status}", err=True)
        raise typer.Exit(env.exit_code or 1)


@requests_app.command("deny")
def deny(request_id: RequestArg, comment: CommentOpt = None, output: OutputOpt = "text",
         config: ConfigOpt = None, cluster: ClusterOpt = None) -> None:
    """Deny a pending request: nothing runs."""
    from slurmtower.actions import cli_principal  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    _print(_approvals(config, cluster).deny(request_id, principal=cli_principal(), role=None, via="cli",
                                            comment=comment), output)


@requests_app.command("withdraw")
def withdraw(request_id: RequestArg, comment: CommentOpt = None, output: OutputOpt = "text",
             config: ConfigOpt = None, cluster: ClusterOpt = None) -> None:
    """Withdraw your own pending request."""
    from slurmtower.actions import cli_principal  # deferred: CLI startup

    _check_output(output, ("text", "json", "yaml"))
    _print(_approvals(config, cluster).withdraw(request_id, principal=cli_principal(), role=None, via="cli",
                                                comment=comment), output)


@requests_app.command("expire")
def expire(config: ConfigOpt = None, cluster: ClusterOpt = None) -> None:
    """Expire the pending requests past their time now (the service does it every
    approvals.expiry_interval): one line each."""
    for r in _approvals(config, cluster).expire():
        typer.echo(f"{r.id}  expired  {r.action}  asked by {r.requester}")
