"""``slurmtower devcluster``: the local real Slurm cluster."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from slurmtower.cli.app import app
from slurmtower.devcluster.installs import DEFAULT_DIR, find_slurm_installs, release_cluster_layout

if TYPE_CHECKING:
    from slurmtower.devcluster.cluster import DevCluster

__all__ = ["devcluster_app"]

devcluster_app = typer.Typer(help="A real local Slurm cluster (Debian's Slurm 22.05, or one installed under "
                             "--slurm-prefix) for tests and demos.",
                             no_args_is_help=True)
app.add_typer(devcluster_app, name="devcluster")

DirOpt = Annotated[Path, typer.Option("--dir", help="Where the cluster keeps its config and state "
                                      "(several clusters may run side by side: set "
                                      "SLURMTOWER_DEVCLUSTER_NAME and _PORT_BASE too).",
                                      envvar="SLURMTOWER_DEVCLUSTER_DIR")]


def _cluster(root: Path, quiet: bool = False, nodes: int | None = None,
             slurm_prefix: Path | None = None) -> DevCluster:
    from slurmtower.devcluster.cluster import DevCluster  # deferred: CLI startup

    return DevCluster(root=root, log=(lambda _m: None) if quiet else typer.echo, nodes=nodes,
                      slurm_prefix=slurm_prefix)


@devcluster_app.command()
def up(
    root: DirOpt = DEFAULT_DIR,
    fresh: Annotated[bool, typer.Option(help="Wipe Slurm state and the accounting DB first.")] = False,
    own_mariadb: Annotated[bool, typer.Option(help="Start a private MariaDB even if one runs.")] = False,
    nodes: Annotated[int | None, typer.Option(
        "--nodes", min=4, max=10_000,
        help="Node definitions (the scale lab): n1-n4 run a slurmd, the others none. "
             "Default: the count this --dir was last brought up with, else 4. "
             "Node i uses port PORT_BASE+100+i: see the README for safe port bases.")] = None,
    slurm_prefix: Annotated[Path | None, typer.Option(
        "--slurm-prefix", envvar="SLURMTOWER_DEVCLUSTER_SLURM_PREFIX",
        help="Run the Slurm installed under this prefix (its sbin/ and bin/, e.g. /opt/slurm-26.05) "
             "instead of Debian's 22.05 packages; give it its own --dir, name and port base to run "
             "beside the default cluster. Default: what this --dir was brought up with.")] = None,
) -> None:
    """Install what is missing and start the cluster (a quick no-op when it runs)."""
    _cluster(root, nodes=nodes, slurm_prefix=slurm_prefix).up(fresh=fresh, own_mariadb=own_mariadb)


@devcluster_app.command()
def down(root: DirOpt = DEFAULT_DIR) -> None:
    """Stop the daemons the devcluster started."""
    _cluster(root).down()


@devcluster_app.command()
def status(root: DirOpt = DEFAULT_DIR,
           output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text") -> None:
    """Show the daemons and node states."""
    from slurmtower.nodeset import NodeSet  # deferred: CLI startup

    st = _cluster(root, quiet=True).status()
    if output == "json":
        typer.echo(json.dumps(st, indent=2))
        return
    typer.echo(f"cluster {st['cluster']} in {st['dir']}: {'UP' if st['up'] else 'DOWN'} "
               f"({st['node_count']} nodes, Slurm {st['slurm_prefix'] or 'from Debian (/usr)'})")
    for name, pid in dict(st["daemons"]).items():  # type: ignore[call-overload]
        typer.echo(f"  {name:<12} {'pid ' + str(pid) if pid else 'not running'}")
    by_state: dict[str, list[str]] = {}
    for node, state in dict(st["nodes"]).items():  # type: ignore[call-overload]
        by_state.setdefault(state, []).append(node)
    for state, names in by_state.items():
        typer.echo(f"  nodes {NodeSet(names)}: {state}" if len(names) > 1 else f"  node {names[0]}: {state}")
    if not st["up"]:
        raise typer.Exit(3)


@devcluster_app.command()
def env(root: DirOpt = DEFAULT_DIR) -> None:
    """Print shell exports: eval "$(slurmtower devcluster env)"."""
    typer.echo(_cluster(root, quiet=True).env_exports(), nl=False)


@devcluster_app.command("clusters-config")
def clusters_config(
    dirs: Annotated[list[Path], typer.Argument(help="The clusters' --dir, the default cluster first.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the configuration (YAML, 0600).")],
    state_dir: Annotated[Path, typer.Option("--state-dir", help="The tower's state directory.")] = Path(
        "/var/lib/slurmtower/clusters-demo"),
) -> None:
    """Write one tower's [[clusters]] configuration over running local clusters."""
    from slurmtower.devcluster.several import write_clusters_config  # deferred: CLI startup

    clusters = [_cluster(d, quiet=True) for d in dirs]
    for c in clusters:
        if not c.tower_conf.exists():
            raise typer.BadParameter(f"{c.root} holds no cluster: run `slurmtower devcluster up --dir {c.root}` first")
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o755)  # noqa: S103 - the sensor's notify program runs as SlurmUser from there
    write_clusters_config(out, clusters, state_dir)
    typer.echo(f"{out}: {', '.join(c.cluster_name for c in clusters)} (default {clusters[0].cluster_name})")


@devcluster_app.command()
def installs(output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text") -> None:
    """List Slurm installs besides Debian's (/opt/slurm-*, $SLURMTOWER_TEST_SLURM_PREFIXES) and the
    dir, name and port base `up --slurm-prefix` is given for each by the test suite."""
    rows = []
    for install in find_slurm_installs():
        root, name, port_base = release_cluster_layout(install)
        rows.append({"prefix": str(install.prefix), "version": install.version, "dir": str(root),
                     "cluster_name": name, "port_base": port_base})
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['prefix']}\t{row['version']}\t{row['dir']}\t{row['cluster_name']}\t{row['port_base']}")


@devcluster_app.command("fail-node")
def fail_node(node: str, root: DirOpt = DEFAULT_DIR) -> None:
    """Kill NODE's slurmd (SIGKILL): Slurm marks it DOWN within ~12 s."""
    _cluster(root).fail_node(node)


@devcluster_app.command("restore-node")
def restore_node(node: str, root: DirOpt = DEFAULT_DIR) -> None:
    """Start NODE's slurmd again."""
    _cluster(root).restore_node(node)


@devcluster_app.command("sample-jobs")
def sample_jobs(root: DirOpt = DEFAULT_DIR) -> None:
    """Submit jobs ending COMPLETED, FAILED, CANCELLED, TIMEOUT, plus one PENDING and one RUNNING."""
    typer.echo(json.dumps(_cluster(root, quiet=True).submit_sample_jobs().as_dict()))


@devcluster_app.command()
def rollup(
    root: DirOpt = DEFAULT_DIR,
    start: Annotated[datetime | None, typer.Option(
        formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"],
        help="The first hour to roll, local time (default: the current hour).")] = None,
    end: Annotated[datetime | None, typer.Option(
        formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"],
        help="Roll up to this hour, local time (default: per --through).")] = None,
    through: Annotated[str, typer.Option(
        help="Without --end: hour (to the end of this hour), day (to the next midnight: the day "
             "tables too) or month (to the next first of a month).")] = "hour",
) -> None:
    """Make slurmdbd roll usage up now (sacctmgr rollup), the current hour included: sreport and
    the usage reports see the jobs that just ran. slurmdbd's own hourly rollup is left as it was."""
    done = _cluster(root, quiet=True).roll_up(start=start, end=end, through=through)
    typer.echo(json.dumps(done.as_dict()))
