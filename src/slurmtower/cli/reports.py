"""``slurmtower report usage|efficiency|waits|availability``: the usage reports of ``/reports``
from slurmdbd's database, as a table, JSON or CSV. The CLI reads with the configuration's own
database credentials, so it sees every figure (as an admin does); hidden partitions stay hidden."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated, Any

import typer

from slurmtower.cli.app import ClusterOpt, ConfigOpt, app, cluster_settings, fail

__all__ = ["report_app"]

report_app = typer.Typer(help="Usage reports from slurmdbd's accounting: usage, efficiency, waits, availability.",
                         no_args_is_help=True)
app.add_typer(report_app, name="report")

Start = Annotated[str, typer.Option("--start", help="ISO 8601 (naive = UTC) or Unix seconds.")]
End = Annotated[str, typer.Option("--end", help="ISO 8601 (naive = UTC) or Unix seconds.")]
Output = Annotated[str, typer.Option("--output", "-o", help="table, json or csv")]
Names = Annotated[str | None, typer.Option(help="Comma-separated names: only these.")]
Top = Annotated[int | None, typer.Option(help="Only the N largest groups.")]


def _run(kind: str, config: Path | None, output: str, params: dict[str, Any], cluster: str | None = None) -> None:
    if output not in ("table", "json", "csv"):
        fail(f"--output must be table, json or csv, not {output[:60]!r}")
    from slurmtower.principal import ADMIN, Principal  # deferred: CLI startup
    from slurmtower.runtime import Services  # deferred: CLI startup
    from slurmtower.runtime.reports import (  # deferred: CLI startup
        parse_report,
        report_csv,
        report_rows,
        run_report,
        wanted_partitions,
    )
    from slurmtower.visibility import Visibility  # deferred: CLI startup

    settings = cluster_settings(config, cluster)
    given = {k: str(v) for k, v in params.items() if v is not None}
    query = parse_report(kind, given)
    services = Services.for_cluster(settings)
    policy = Visibility.from_settings(services.settings)  # the cluster's (hidden partitions)
    wanted = wanted_partitions(given) if kind == "availability" else ()
    partitions = services.client.partitions() if kind == "availability" else []  # every one: the policy cuts
    report = run_report(services.reports(), query, Principal(name=getpass.getuser(), role=ADMIN, via="cli"),
                        policy, partitions=partitions, wanted_partitions=wanted, own_accounts=list)
    if output == "json":
        typer.echo(report.model_dump_json(indent=2))
    elif output == "csv":
        typer.echo(report_csv(report), nl=False)
    else:
        _table(report_rows(report), report.source, getattr(report, "notes", []))


def _table(rows: list[dict[str, Any]], source: str, notes: list[str]) -> None:
    if not rows:
        typer.echo(f"(nothing in this range; source: {source})")
        return
    columns = [c for c in rows[0] if any(r.get(c) not in (None, "") for r in rows)]
    cells = [[("" if r.get(c) is None else f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]))
              for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    typer.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    typer.echo(f"source: {source}")
    for note in notes:
        typer.echo(f"note: {note}")


@report_app.command("usage")
def usage(start: Start, end: End, config: ConfigOpt = None, output: Output = "table",
          cluster: ClusterOpt = None,
          period: Annotated[str | None, typer.Option(help="hour, day, week, month or range (default).")] = None,
          group_by: Annotated[str | None, typer.Option(help="cluster, account (default), user, account+user, "
                                                       "partition or qos.")] = None,
          tres: Annotated[str | None, typer.Option(help="Comma-separated TRES (default cpu): cpu, mem, "
                                                   "gres/gpu ...")] = None,
          top: Top = None, users: Names = None, accounts: Names = None,
          rollup: Annotated[str | None, typer.Option(help="auto (default), hour, day or month.")] = None) -> None:
    """Usage per group and period in TRES-hours, as sreport counts it."""
    _run("usage", config, output, {"start": start, "end": end, "period": period, "group_by": group_by,
                                   "tres": tres, "top": top, "users": users, "accounts": accounts,
                                   "rollup": rollup}, cluster)


@report_app.command("efficiency")
def efficiency(start: Start, end: End, config: ConfigOpt = None, output: Output = "table",
               cluster: ClusterOpt = None,
               group_by: Annotated[str | None, typer.Option(help="user (default), account or account+user.")] = None,
               top: Top = None, users: Names = None, accounts: Names = None) -> None:
    """CPU and memory efficiency (as seff counts it) of the jobs that ended in the range."""
    _run("efficiency", config, output, {"start": start, "end": end, "group_by": group_by, "top": top,
                                        "users": users, "accounts": accounts}, cluster)


@report_app.command("waits")
def waits(start: Start, end: End, config: ConfigOpt = None, output: Output = "table",
          cluster: ClusterOpt = None,
          size_buckets: Annotated[str | None, typer.Option(help="Lower CPU bounds after the first "
                                                           "(default 50,250,500,1000).")] = None,
          partitions: Names = None, accounts: Names = None) -> None:
    """Wait times and job sizes per partition and account."""
    _run("waits", config, output, {"start": start, "end": end, "size_buckets": size_buckets,
                                   "partitions": partitions, "accounts": accounts}, cluster)


@report_app.command("availability")
def availability(start: Start, end: End, config: ConfigOpt = None, output: Output = "table",
                 cluster: ClusterOpt = None,
                 partitions: Names = None,
                 top_reasons: Annotated[int | None, typer.Option(help="Reasons per row (default 10).")] = None) -> None:
    """Down and drained node-hours per partition and node, the costliest reasons first."""
    _run("availability", config, output, {"start": start, "end": end, "partitions": partitions,
                                          "top_reasons": top_reasons}, cluster)
