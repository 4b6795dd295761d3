"""The local cluster itself: commands, idempotence, sample jobs."""

from __future__ import annotations

import json
import subprocess

import pytest

from slurmtower.devcluster import DevCluster

from .conftest import sh, wait_for

pytestmark = pytest.mark.cluster


def _slurmtower(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([".venv/bin/slurmtower", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_status_lists_every_daemon_and_idle_nodes(devcluster: DevCluster) -> None:
    proc = _slurmtower("devcluster", "status", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["up"] is True
    assert all(status["daemons"][d] for d in ("slurmctld", "slurmdbd", "slurmrestd", "slurmd-n1", "slurmd-n4"))
    assert sorted(status["nodes"]) == ["n1", "n2", "n3", "n4"]


def test_env_points_slurm_commands_at_the_cluster(devcluster: DevCluster) -> None:
    exports = _slurmtower("devcluster", "env").stdout
    proc = subprocess.run(["bash", "-c", f'{exports}\nsinfo -h -N -o "%N" | sort -u | tr "\\n" " "'],
                          capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.stdout.split() == ["n1", "n2", "n3", "n4"]
    assert "SLURMTOWER_CONFIG=" in exports


def test_fail_node_refuses_unknown_nodes_with_one_line(devcluster: DevCluster) -> None:
    proc = _slurmtower("devcluster", "fail-node", "n9")
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == ["slurmtower: error: unknown node 'n9': the devcluster has n1, n2, n3, n4"]


def test_accounts_and_users_exist(devcluster: DevCluster) -> None:
    out = sh("sacctmgr", "-n", "-P", "show", "assoc", "format=account,user")
    pairs = {tuple(line.split("|")) for line in out.splitlines()}
    assert {("physics", "alice"), ("physics", "bob"), ("chemistry", "bob")} <= pairs


@pytest.mark.slow
def test_sample_jobs_end_in_each_state(sample_jobs: dict[str, int]) -> None:
    expected = {"completed": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED",
                "timeout": "TIMEOUT", "pending": "PENDING", "running": "RUNNING"}

    def states() -> dict[str, str] | None:
        ids = ",".join(str(j) for j in sample_jobs.values())
        out = sh("sacct", "-n", "-P", "-X", "-j", ids, "-o", "JobID,State,ExitCode")
        by_id = {line.split("|")[0]: line.split("|") for line in out.splitlines()}
        got = {name: by_id.get(str(job), ["", "", ""])[1].split()[0] if by_id.get(str(job)) else ""
               for name, job in sample_jobs.items()}
        return got if got == expected else None

    wait_for(states, 150, 2, what="sample jobs to reach their final states")
    out = sh("sacct", "-n", "-P", "-X", "-j", str(sample_jobs["failed"]), "-o", "ExitCode")
    assert out.strip() == "3:0"


@pytest.mark.slow
def test_a_second_cluster_with_its_own_mariadb_runs_beside_the_first(devcluster: DevCluster) -> None:
    """Where no MariaDB should be shared, the devcluster starts its own (and stops only it)."""
    from pathlib import Path

    root = Path("/var/lib/slurmtower/dc-test-own")
    other = DevCluster(root=root, cluster_name="dcown", port_base=31900, log=lambda _m: None)
    try:
        other.up(fresh=not other.is_up(), own_mariadb=True)
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(other.slurm_conf)}
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env,
                             check=True).stdout
        assert sorted({line.split()[0] for line in out.splitlines()}) == ["n1", "n2", "n3", "n4"]
        mariadb_pid = int((other.run_dir / "mariadbd.pid").read_text())
        assert f"--datadir={root}/mysql" in Path(f"/proc/{mariadb_pid}/cmdline").read_text().replace("\0", " ")
        assert devcluster.is_up()  # the first cluster is untouched
    finally:
        other.down()
    assert not other.is_up()
    assert devcluster.is_up()
    assert subprocess.run(["mariadb-admin", "ping"], capture_output=True, check=False).returncode == 0
