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


@pytest.fixture(scope="module", autouse=True)
def _sample_jobs_first(sample_jobs: dict[str, int]) -> dict[str, int]:
    """The sample jobs start with the module (the TIMEOUT one needs a minute or more): the
    module's other tests run meanwhile, and the test of their final states comes last."""
    return sample_jobs


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


def test_up_restarts_a_dead_slurmdbd_and_keeps_the_tokens_a_user_added(devcluster: DevCluster) -> None:
    """`up` on a cluster whose slurmdbd died is not "already up"; rewriting slurmtower.toml
    keeps what the user added below the mark, and the token entries of a file from before it."""
    import os
    import signal
    import tomllib
    from pathlib import Path

    from slurmtower.devcluster.cluster import USER_MARK

    root = Path("/var/lib/slurmtower/dc-test-own")
    other = DevCluster(root=root, cluster_name="dcown", port_base=31900, log=lambda _m: None)
    try:
        other.up(fresh=not other.is_up(), own_mariadb=True)
        mine = '[[auth.tokens]]\nname = "alice"\nrole = "operator"\nsha256 = "' + "a" * 64 + '"\n'
        text = other.tower_conf.read_text()
        assert USER_MARK in text
        other.tower_conf.write_text(text + mine)
        dbd = int((other.run_dir / "slurmdbd.pid").read_text())
        os.kill(dbd, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{dbd}").exists(), 10, 0.1, what="slurmdbd to die")
        logs: list[str] = []
        other.log = logs.append
        other.up()
        assert not any("already up" in m for m in logs), logs
        assert (other.run_dir / "slurmdbd.pid").read_text().split()[0] != str(dbd)
        names = [t["name"] for t in tomllib.loads(other.tower_conf.read_text())["auth"]["tokens"]]
        assert "alice" in names and len([n for n in names if n.startswith("demo-")]) == 3
        # A file written before the mark existed: its extra token entries are kept too.
        generated = other.tower_conf.read_text().split(USER_MARK)[0]
        other.tower_conf.write_text(generated + mine.replace("alice", "bob"))
        other.down()
        other.up()
        names = [t["name"] for t in tomllib.loads(other.tower_conf.read_text())["auth"]["tokens"]]
        assert "bob" in names and "alice" not in names
    finally:
        other.down()


def test_a_pid_file_names_its_daemon_not_whoever_got_the_pid_next(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """pids wrap (32,768 on this kind of machine): a killed slurmd's pid file, its pid now
    another program's, is stale, so restore_node starts the slurmd again."""
    import os
    import sys
    from pathlib import Path

    from slurmtower.devcluster.cluster import _read_pid

    fake = tmp_path / "slurmd"
    fake.symlink_to(sys.executable)
    proc = subprocess.Popen([str(fake), "-c", "import time; time.sleep(60)", "-N", "n9"])
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        wait_for(lambda: b"n9" in cmdline.read_bytes(), 10, 0.05, what="the process")
        (tmp_path / "slurmd-n9.pid").write_text(f"{proc.pid}\n")
        (tmp_path / "slurmd-n8.pid").write_text(f"{proc.pid}\n")
        (tmp_path / "slurmctld.pid").write_text(f"{proc.pid}\n")
        (tmp_path / "slurmdbd.pid").write_text(f"{os.getpid()}\n")
        assert _read_pid(tmp_path / "slurmd-n9.pid") == proc.pid
        assert _read_pid(tmp_path / "slurmd-n8.pid") is None  # another node's slurmd
        assert _read_pid(tmp_path / "slurmctld.pid") is None  # another daemon
        assert _read_pid(tmp_path / "slurmdbd.pid") is None  # pytest took the pid
    finally:
        proc.kill()
        proc.wait()
    assert _read_pid(tmp_path / "slurmd-n9.pid") is None  # dead


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
