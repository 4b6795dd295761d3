"""The scale lab: ``devcluster up --nodes N`` (here a 1,000-node instance beside the default one)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from slurmtower.devcluster import DevCluster, DevClusterError
from slurmtower.nodeset import NodeSet

from .conftest import SCALE_NODES, scale_sh, wait_for


def _states(cluster: DevCluster) -> dict[str, str]:
    """``{node: sinfo state}``, e.g. ``unknown*``."""
    states: dict[str, str] = {}
    for line in scale_sh(cluster, "sinfo", "-h", "-o", "%N %T").splitlines():
        hostlist, state = line.split()
        states.update(dict.fromkeys(NodeSet(hostlist), state))
    return states


@pytest.mark.cluster
def test_sinfo_shows_every_node_definition(scale_cluster: DevCluster) -> None:
    assert set(_states(scale_cluster)) == set(NodeSet(f"n[1-{SCALE_NODES}]"))


@pytest.mark.cluster
def test_the_slurmd_nodes_are_idle_and_run_jobs(scale_cluster: DevCluster) -> None:
    assert {n: s for n, s in _states(scale_cluster).items() if n in NodeSet("n[1-4]")} == dict.fromkeys(
        ["n1", "n2", "n3", "n4"], "idle")
    out = scale_sh(scale_cluster, "sbatch", "--parsable", "-J", "lab-runs-on-n1", "-w", "n1",
                   "-p", "compute", "-A", "biology", "-t", "1", "-o", "/dev/null", "-D", "/tmp",
                   "--uid", "carol", "--wrap", "true")
    job = out.strip().split(";")[0]

    def ended() -> dict[str, str] | None:
        show = scale_sh(scale_cluster, "scontrol", "-o", "show", "job", job)
        fields = dict(f.split("=", 1) for f in show.split() if "=" in f)
        return fields if fields["JobState"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") else None

    # `defer`: the scheduler looks at new jobs within batch_sched_delay (3 s), not at submit
    fields = wait_for(ended, 30, 0.2, what=f"job {job} to run")
    assert (fields["JobState"], fields["NodeList"], fields["Partition"], fields["UserId"].split("(")[0]) == (
        "COMPLETED", "n1", "compute", "carol")


def _scontrol_nodes(cluster: DevCluster) -> dict[str, dict[str, str]]:
    out = scale_sh(cluster, "scontrol", "-o", "show", "node")
    nodes = {}
    for line in out.splitlines():
        # Reason is last and may hold spaces
        head, _, reason = line.partition(" Reason=")
        fields = dict(f.split("=", 1) for f in head.split() if "=" in f)
        fields["Reason"] = reason
        nodes[fields["NodeName"]] = fields
    return nodes


@pytest.mark.cluster
def test_nodes_without_slurmd_show_as_unknown_and_not_responding(scale_cluster: DevCluster) -> None:
    """22.05 never sets a node that has never registered DOWN: it stays UNKNOWN+NOT_RESPONDING.

    Once its state is updated (drained and resumed by another scale test of this session),
    it turns IDLE and, one ping round later, DOWN "Not responding" (``down*``).
    """
    others = NodeSet(f"n[5-{SCALE_NODES}]")

    def not_responding() -> dict[str, dict[str, str]] | None:
        nodes = _scontrol_nodes(scale_cluster)
        return nodes if all("NOT_RESPONDING" in nodes[n]["State"].split("+") for n in others) else None

    nodes = wait_for(not_responding, 40, 0.5, what="the first failed registration round")
    sinfo = _states(scale_cluster)
    # Untouched: no reason, and not a node another test resumed (IDLE+NOT_RESPONDING with no
    # reason until the next ping round marks it DOWN "Not responding").
    untouched = [n for n in others if not nodes[n]["Reason"] and not nodes[n]["State"].startswith("IDLE+")]
    assert untouched, "every lab node has been drained or downed by another test"
    assert {nodes[n]["State"] for n in untouched} == {"UNKNOWN+NOT_RESPONDING"}
    assert {sinfo[n] for n in untouched} == {"unknown*"}
    for n in set(others) - set(untouched):
        assert nodes[n]["State"].startswith(("DOWN+", "UNKNOWN+", "IDLE+")), (n, nodes[n]["State"])


@pytest.mark.cluster
def test_the_queue_settings_allow_100k_jobs(scale_cluster: DevCluster) -> None:
    config = dict(line.split(" = ", 1) for line in scale_sh(scale_cluster, "scontrol", "show", "config")
                  .splitlines() if " = " in line)
    config = {k.strip(): v.strip() for k, v in config.items()}
    assert int(config["MaxJobCount"]) >= 200_000
    assert int(config["MaxArraySize"]) > 10_000
    assert "defer" in config["SchedulerParameters"]


@pytest.mark.cluster
def test_partitions_overlap_like_a_site(scale_cluster: DevCluster) -> None:
    out = scale_sh(scale_cluster, "sinfo", "-h", "-a", "-o", "%R %N")
    parts: dict[str, NodeSet] = {}
    for line in out.splitlines():
        name, nodes = line.split()
        parts[name] = parts[name] | NodeSet(nodes) if name in parts else NodeSet(nodes)
    assert parts == {
        "debug": NodeSet("n[1-1000]"), "batch": NodeSet("n[1-2]"), "short": NodeSet("n[3-4]"),
        "compute": NodeSet("n[1-900]"), "bigmem": NodeSet("n[3-4,601-900]"),
        "gpu": NodeSet("n[1-2,901-1000]"), "long": NodeSet("n[501-1000]"),
    }
    default = scale_sh(scale_cluster, "scontrol", "-o", "show", "partition", "debug")
    assert "Default=YES" in default


@pytest.mark.cluster
def test_the_lab_has_more_users_and_accounts(scale_cluster: DevCluster) -> None:
    out = scale_sh(scale_cluster, "sacctmgr", "-n", "-P", "show", "assoc", "format=account,user")
    pairs = {tuple(line.split("|")) for line in out.splitlines()}
    assert {("physics", "alice"), ("chemistry", "bob"), ("biology", "carol"), ("astro", "dave")} <= pairs


@pytest.mark.cluster
def test_a_plain_up_and_status_keep_the_node_count(scale_cluster: DevCluster) -> None:
    again = DevCluster(root=scale_cluster.root, log=lambda _m: None)
    assert (again.node_count, again.cluster_name, again.port_base) == (
        SCALE_NODES, scale_cluster.cluster_name, scale_cluster.port_base)
    assert again.up() < 5  # already up: a quick no-op, not a restart
    # only --dir, and a shell that exported the default cluster's name and ports
    env = {**scale_cluster.command_env(), "SLURMTOWER_DEVCLUSTER_NAME": "tower",
           "SLURMTOWER_DEVCLUSTER_PORT_BASE": "26800"}
    del env["SLURMTOWER_DEVCLUSTER_DIR"]
    proc = subprocess.run([".venv/bin/slurmtower", "devcluster", "status", "-o", "json", "--dir",
                           str(scale_cluster.root)], capture_output=True, text=True, timeout=60, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert (status["node_count"], len(status["nodes"]), status["cluster"]) == (SCALE_NODES, SCALE_NODES,
                                                                                scale_cluster.cluster_name)
    exports = subprocess.run([".venv/bin/slurmtower", "devcluster", "env", "--dir", str(scale_cluster.root)],
                             capture_output=True, text=True, timeout=60, check=True, env=env).stdout
    assert f"SLURMTOWER_DEVCLUSTER_PORT_BASE={scale_cluster.port_base}\n" in exports
    assert json.loads((scale_cluster.root / "etc" / "devcluster.json").read_text()) == {
        "nodes": SCALE_NODES, "cluster_name": scale_cluster.cluster_name, "port_base": scale_cluster.port_base}


@pytest.mark.cluster
def test_fail_node_explains_that_lab_nodes_have_no_slurmd(scale_cluster: DevCluster) -> None:
    proc = subprocess.run([".venv/bin/slurmtower", "devcluster", "fail-node", "n9"], capture_output=True,
                          text=True, timeout=60, check=False, env=scale_cluster.command_env())
    assert proc.returncode != 0
    assert proc.stderr.strip() == "slurmtower: error: n9 has no slurmd: in the devcluster only n1, n2, n3, n4 run one"


@pytest.mark.parametrize(("nodes", "port_base", "message"), [
    (3, 20000, "--nodes must be between 4 and 10000, not 3"),
    (10_001, 20000, "--nodes must be between 4 and 10000, not 10001"),
    (5000, 61000, "port base 61000 leaves no room for 5000 nodes (their ports would end at 66100 > 65535)"),
], ids=["too-few", "too-many", "ports-overflow"])
def test_node_counts_out_of_range_are_refused(nodes: int, port_base: int, message: str) -> None:
    with pytest.raises(DevClusterError) as exc:
        DevCluster(root=Path("/nonexistent"), port_base=port_base, nodes=nodes)
    assert str(exc.value) == message


def test_a_dir_never_brought_up_has_four_nodes(tmp_path: Path) -> None:
    assert DevCluster(root=tmp_path).node_count == 4


def test_a_dir_names_its_cluster_and_ports_ahead_of_the_environment(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMTOWER_DEVCLUSTER_NAME", "tower")
    monkeypatch.setenv("SLURMTOWER_DEVCLUSTER_PORT_BASE", "26800")
    (tmp_path / "etc").mkdir()
    # a dir brought up before etc/devcluster.json named them: its slurm.conf says
    (tmp_path / "etc" / "slurm.conf").write_text("ClusterName=old\nSlurmctldPort=31917\n")
    assert (DevCluster(root=tmp_path).cluster_name, DevCluster(root=tmp_path).port_base) == ("old", 31900)
    (tmp_path / "etc" / "devcluster.json").write_text('{"nodes": 2000, "cluster_name": "lab", "port_base": 18000}')
    lab = DevCluster(root=tmp_path)
    assert (lab.cluster_name, lab.port_base, lab.node_count) == ("lab", 18000, 2000)
    assert DevCluster(root=tmp_path, cluster_name="explicit", port_base=19000).cluster_name == "explicit"
    assert DevCluster(root=tmp_path / "new").cluster_name == "tower"  # nothing saved: the environment
