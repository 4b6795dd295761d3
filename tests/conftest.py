"""Fixtures for the real local cluster (``slurmtower devcluster``) and its servers.

The cluster is brought up once per session (a quick no-op when it runs). Tests that change
node states use ``clean_nodes``, which puts every node back in service afterwards.

``scale_cluster`` is a second, 1,000-node instance (the scale lab) beside it; see its docstring.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.nodeset import NodeSet
from slurmtower.settings import Settings, load_settings
from slurmtower.slurm import CliSlurmClient, CommandRunner

ALL_NODES = NodeSet("n[1-4]")


def _can_run_cluster() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


@pytest.fixture(scope="session")
def devcluster() -> Iterator[DevCluster]:
    """The local real Slurm cluster, up."""
    if not _can_run_cluster():
        pytest.skip("the local Slurm cluster needs root on Debian")
    cluster = DevCluster(log=lambda _m: None)
    cluster.up()
    os.environ["SLURM_CONF"] = str(cluster.slurm_conf)
    os.environ["SLURMTOWER_CONFIG"] = str(cluster.tower_conf)
    _start_clean(cluster)
    yield cluster


def _start_clean(cluster: DevCluster) -> None:
    """The suite owns the devcluster: no jobs or reservations left from an earlier run."""
    jobs = sh("squeue", "-h", "-o", "%A").split()
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True, check=False)
    for line in sh("scontrol", "-o", "show", "reservation", check=False).splitlines():
        if line.startswith("ReservationName="):
            name = line.split()[0].split("=", 1)[1]
            subprocess.run(["scontrol", "delete", f"reservationname={name}"], capture_output=True, check=False)
    restore_all_nodes(cluster)
    wait_for(lambda: not sh("squeue", "-h", "-t", "R,CG", "-o", "%A").split(), 60, what="old jobs to end")


@pytest.fixture(scope="session")
def cluster_settings(devcluster: DevCluster) -> Settings:
    """slurmtower settings pointing at the devcluster (store in the cluster's state dir)."""
    return load_settings(devcluster.tower_conf, environ={})


@pytest.fixture()
def settings(devcluster: DevCluster, tmp_path: Path) -> Settings:
    """Devcluster settings with a private, empty slurmtower store for this test."""
    s = load_settings(devcluster.tower_conf, environ={})
    s.state_dir = tmp_path
    return s


@pytest.fixture(scope="session")
def runner(devcluster: DevCluster) -> CommandRunner:
    return CommandRunner(timeout=30, env={"SLURM_CONF": str(devcluster.slurm_conf)})


@pytest.fixture(scope="session")
def client(runner: CommandRunner) -> CliSlurmClient:
    return CliSlurmClient(runner)


def sh(*argv: str, check: bool = True, timeout: float = 30) -> str:
    """Run a Slurm command against the devcluster directly (the test's own view)."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} failed: {proc.stderr}")
    return proc.stdout


def node_states() -> dict[str, str]:
    """``{node: scontrol state}`` as Slurm itself prints it, e.g. ``IDLE+DRAIN``."""
    out = sh("scontrol", "-o", "show", "node")
    states = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        states[fields["NodeName"]] = fields["State"]
    return states


def wait_for(check, timeout: float = 30, step: float = 0.2, what: str = "condition"):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def restore_all_nodes(cluster: DevCluster) -> None:
    """Every slurmd running and every node back in service with no reason."""
    for n in ALL_NODES:
        cluster.restore_node(n)
    states = node_states()
    bad = [n for n, s in states.items() if any(w in s for w in ("DRAIN", "DOWN", "FAIL", "FUTURE"))]
    if bad:
        subprocess.run(["scontrol", "update", f"nodename={NodeSet(bad)}", "state=RESUME"],
                       capture_output=True, check=False)
        bad_after = [n for n, s in node_states().items() if "DRAIN" in s or "FAIL" in s]
        if bad_after:
            subprocess.run(["scontrol", "update", f"nodename={NodeSet(bad_after)}", "state=UNDRAIN"],
                           capture_output=True, check=False)
    wait_for(lambda: all(not any(w in s for w in ("DOWN", "DRAIN", "NOT_RESPONDING", "FAIL", "FUTURE"))
                         for s in node_states().values()), 40, what="all nodes back in service")


@pytest.fixture()
def clean_nodes(devcluster: DevCluster) -> Iterator[DevCluster]:
    """For tests that change node states: all nodes in service before and after."""
    restore_all_nodes(devcluster)
    yield devcluster
    restore_all_nodes(devcluster)


@pytest.fixture(scope="module")
def sample_jobs(devcluster: DevCluster) -> Iterator[dict[str, int]]:
    """The devcluster's sample jobs (COMPLETED, FAILED, CANCELLED, TIMEOUT, PENDING, RUNNING).

    The TIMEOUT job needs 60-90 s to end; the RUNNING and PENDING ones are cancelled at the
    end of the module (a running job would turn other tests' drained nodes into draining ones).
    """
    jobs = devcluster.submit_sample_jobs().as_dict()
    yield jobs
    subprocess.run(["scancel", str(jobs["running"]), str(jobs["pending"])], capture_output=True, check=False)


SCALE_NODES = 1000
SCALE_DIR = Path("/var/lib/slurmtower/scale-test")
SCALE_NAME = "scaletest"
SCALE_PORT_BASE = 14000  # ports 14000-15100: clear of the default cluster's 26800-26904


@contextmanager
def _scale_lock(root: Path) -> Iterator[Path]:
    """The scale lab's session registry (one pid file per pytest session), under a file lock."""
    sessions = root.parent / f"{root.name}.sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    with open(sessions / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for entry in sessions.glob("*.pid"):
            if not Path(f"/proc/{entry.stem}").exists():
                entry.unlink(missing_ok=True)
        yield sessions


@pytest.fixture(scope="session")
def scale_cluster() -> Iterator[DevCluster]:
    """A 1,000-node scale lab (``devcluster up --nodes 1000``), its own dir, name and ports.

    n1-n4 run a slurmd (idle, they run jobs), n5-n1000 have none (``unknown*``:
    UNKNOWN+NOT_RESPONDING; 22.05 turns one that is drained and resumed ``down*``, "Not
    responding", ~20 s later, for the rest of the session). Partitions: debug (all, default), batch n[1-2], short n[3-4],
    compute n[1-900], bigmem n[3-4,601-900], gpu n[1-2,901-1000], long n[501-1000].
    Users alice, bob, carol, dave; accounts physics, chemistry, biology, astro.

    It never touches ``os.environ``: run Slurm's commands with
    ``env=scale_cluster.command_env()`` (SLURM_CONF, SLURMTOWER_CONFIG, ...), and build
    settings with ``load_settings(scale_cluster.tower_conf, environ={})``.
    Sessions share it (pytest runs of several engineers): it is brought up by the first
    and stopped by the last; leftover jobs are cancelled only when no other session uses
    it, so name your jobs and cancel your own.
    """
    if not _can_run_cluster():
        pytest.skip("the local Slurm cluster needs root on Debian")
    cluster = DevCluster(root=SCALE_DIR, cluster_name=SCALE_NAME, port_base=SCALE_PORT_BASE,
                         nodes=SCALE_NODES, log=lambda _m: None)
    with _scale_lock(SCALE_DIR) as sessions:
        alone = not any(sessions.glob("*.pid"))
        if alone:
            _forget_node_states(cluster)  # an earlier session that died left drains behind
        cluster.up()
        if alone:
            cluster.cancel_jobs()
        (sessions / f"{os.getpid()}.pid").touch()
    try:
        yield cluster
    finally:
        with _scale_lock(SCALE_DIR) as sessions:
            (sessions / f"{os.getpid()}.pid").unlink(missing_ok=True)
            if not any(sessions.glob("*.pid")):
                cluster.cancel_jobs()
                cluster.down()
                _forget_node_states(cluster)


def _forget_node_states(cluster: DevCluster) -> None:
    """The next `up` of a stopped lab starts every node as slurm.conf says (unknown*, not down*)."""
    if not cluster.is_up():
        for saved in (cluster.root / "state").glob("node_state*"):
            saved.unlink()


def scale_sh(cluster: DevCluster, *argv: str, check: bool = True, timeout: float = 60) -> str:
    """Run a Slurm command against the scale lab ``cluster`` (the test's own view)."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                          env=cluster.command_env())
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} failed: {proc.stderr}")
    return proc.stdout
