"""Fixtures for the real local cluster (``slurmtower devcluster``) and its servers.

The cluster is brought up once per session (a quick no-op when it runs). Tests that change
node states use ``clean_nodes``, which puts every node back in service afterwards.

``scale_cluster`` is a second, 1,000-node instance (the scale lab) beside it; see its docstring.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from slurmtower.devcluster import DevCluster, find_slurm_installs, release_cluster_layout
from slurmtower.nodeset import NodeSet
from slurmtower.settings import Settings, load_settings
from slurmtower.slurm import CliSlurmClient, CommandRunner

ALL_NODES = NodeSet("n[1-4]")
#: The environment variable (and value) that turns the circuit breaker off.
BREAKER_OFF = ("SLURMTOWER_ACTIONS__BREAKER_ENABLED", "false")


def _can_run_cluster() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


#: A run of the release suites (``-m release``) on the Slurm installed under this prefix, set by
#: scripts/test.sh for each install ``slurmtower devcluster installs`` lists; unset: Debian's 22.05.
# Taken out of the environment: slurmtower refuses unknown SLURMTOWER_ variables, and the CLI
# and servers the tests start inherit it.
RELEASE_PREFIX = os.environ.pop("SLURMTOWER_TEST_SLURM_PREFIX", None) or None


def release_devcluster(prefix: str | Path) -> DevCluster:
    """The devcluster of the Slurm installed under ``prefix``: its own dir, name and ports."""
    installs = {i.prefix: i for i in find_slurm_installs({"SLURMTOWER_TEST_SLURM_PREFIXES": str(prefix)})}
    install = installs.get(Path(prefix).resolve())
    if install is None:
        raise AssertionError(f"{prefix} holds no Slurm install (sbin/slurmctld -V, bin/sinfo)")
    root, name, port_base = release_cluster_layout(install)
    return DevCluster(root=root, cluster_name=name, port_base=port_base, slurm_prefix=install.prefix,
                      log=lambda _m: None)


#: The pytest-xdist worker running this process (``gw0``, ``gw1`` ...; ``""`` without xdist).
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
#: The modules that use the scale lab (one lab for every session): one worker runs them all.
SCALE_LAB_MODULES = frozenset({"tests/test_actions_scale.py", "tests/test_devcluster_scale.py",
                               "tests/test_live_scale.py", "tests/test_ui_nodes.py", "tests/test_ui_nodes_browser.py"})


def scope_of(nodeid: str) -> str:
    """What one xdist worker runs whole: a test module (its servers and module fixtures are
    set up once), or every module of the scale lab."""
    module = nodeid.split("::", 1)[0]
    return "scale-lab" if module in SCALE_LAB_MODULES else module


#: Seconds the slowest scopes took in a two-worker run (2026-12-07, ``--junitxml``): they are
#: handed out first, the longest first, so that no worker is left alone with a long one at the
#: end (xdist orders scopes by their number of tests: these few-test, long ones came last).
#: The other scopes follow, the most tests first. A guess: a wrong one costs time, not results.
SLOW_SCOPES = {
    "scale-lab": 192, "tests/test_fuzz.py": 109, "tests/test_shared_snapshot.py": 106,
    "tests/test_upgrade.py": 100, "tests/test_devcluster.py": 93, "tests/test_clusters.py": 77,
    "tests/test_api_load.py": 74, "tests/test_maintain.py": 64, "tests/test_sensor.py": 54,
    "tests/test_actions_cli.py": 48, "tests/test_replicas.py": 47, "tests/test_api_live.py": 42,
    "tests/test_store_schema.py": 42, "tests/test_oidc.py": 38, "tests/test_ui_jobs.py": 34,
    "tests/test_image.py": 33, "tests/test_install.py": 30, "tests/test_ui_jobs_browser.py": 29,
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under pytest-xdist (``scripts/test.sh``: ``-n 2``) each worker has a devcluster of its
    own (:func:`worker_devcluster`) and takes whole scopes (:func:`scope_of`), the slowest
    first (:data:`SLOW_SCOPES`). xdist's own ``loadgroup`` cannot do it on pytest 9
    (pytest-dev/pytest-xdist#1386: the groups are lost)."""
    from xdist.scheduler import LoadScopeScheduling  # deferred: only the xdist controller schedules

    class ScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            if not self.ordered:  # the queue is complete when the first unit is handed out
                queue = sorted(self.workqueue.items(), key=lambda kv: (-SLOW_SCOPES.get(kv[0], 0), -len(kv[1])))
                self.workqueue.clear()
                self.workqueue.update(queue)
                self.ordered = True
            super()._assign_work_unit(node)

    return ScopeScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On another release's cluster only the ``release`` suites run (the others are 22.05's).
    A test that uses the scale lab outside :data:`SCALE_LAB_MODULES` is an error: two workers
    would change the one lab at once."""
    if RELEASE_PREFIX:
        other = [item for item in items if item.get_closest_marker("release") is None]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [item for item in items if item.get_closest_marker("release") is not None]
    elif os.environ.get("RELEASE_SUITES_BESIDE"):
        # Tests of an install's own cluster run in that install's release suite, which
        # scripts/test.sh runs beside this one and which brings that cluster up and stops it:
        # not from here as well.
        theirs = [item for item in items if "release" in getattr(item, "fixturenames", ())
                  and item.get_closest_marker("skip") is None]
        if theirs:
            config.hook.pytest_deselected(items=theirs)
            items[:] = [item for item in items if item not in theirs]
    stray = [item.nodeid for item in items if "scale_cluster" in getattr(item, "fixturenames", ())
             and scope_of(item.nodeid) != "scale-lab"]
    if stray:
        raise pytest.UsageError(f"tests/conftest.py SCALE_LAB_MODULES lacks the module of {stray[0]}")


def worker_devcluster(worker: str) -> DevCluster:
    """The devcluster of an xdist worker: the default one for ``gw0`` (and without xdist),
    its own dir, name and ports for the others (26800 + 200 x N: clear of the scale lab's
    14000-15100 and the release clusters' 16000-19999), stopped when the session ends."""
    n = int(worker.removeprefix("gw") or 0)
    if n == 0:
        return DevCluster(log=lambda _m: None)
    return DevCluster(root=Path(f"/var/lib/slurmtower/devcluster-{worker}"), cluster_name=f"tower{worker}",
                      port_base=26800 + 200 * n, log=lambda _m: None)


@pytest.fixture(scope="session")
def devcluster() -> Iterator[DevCluster]:
    """The local real Slurm cluster, up: Debian's 22.05, or the install under
    ``$SLURMTOWER_TEST_SLURM_PREFIX`` (its commands first on PATH for the whole session)."""
    if not _can_run_cluster():
        pytest.skip("the local Slurm cluster needs root on Debian")
    cluster = release_devcluster(RELEASE_PREFIX) if RELEASE_PREFIX else worker_devcluster(WORKER)
    with _devcluster_lock():  # two workers' first `up` would both install packages and make users
        cluster.up()
    # SLURM_CONF, SLURMTOWER_CONFIG, SLURMTOWER_DEVCLUSTER_*, SLURMTOWER_URL/TOKEN (and PATH
    # on a prefix install): what `eval "$(slurmtower devcluster env)"` exports for it.
    os.environ.update(cluster.command_env())
    # The circuit breaker (10 % of a partition per 10 minutes, at least one node) would refuse
    # most drains of a 4-node cluster: off for every test but its own (tests/test_breaker.py),
    # here for the CLI and servers the tests start, in the settings fixtures for the rest.
    os.environ[BREAKER_OFF[0]] = BREAKER_OFF[1]
    _start_clean(cluster)
    yield cluster
    if WORKER not in ("", "gw0") and not RELEASE_PREFIX:
        cluster.down()  # a worker's own cluster (the default one stays up, as `make run` uses it)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (made with its directory) among this machine's pytest
    processes, released when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _devcluster_lock() -> contextlib.AbstractContextManager[None]:
    return _file_lock(Path("/var/lib/slurmtower/.tests-up.lock"))


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
    """slurmtower settings pointing at the devcluster (store in the cluster's state dir; the
    circuit breaker off)."""
    s = load_settings(devcluster.tower_conf, environ={})
    s.actions.breaker_enabled = False
    return s


@pytest.fixture()
def settings(devcluster: DevCluster, tmp_path: Path) -> Settings:
    """Devcluster settings with a private, empty slurmtower store for this test (the circuit
    breaker off: tests/test_breaker.py turns it on; the refresh worker off: the snapshots are
    refreshed in the serving process, tests/test_api_offload.py and the serve processes of
    the several-process tests run the worker)."""
    s = load_settings(devcluster.tower_conf, environ={})
    s.state_dir = tmp_path
    s.actions.breaker_enabled = False
    s.api.refresh_in_subprocess = False
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


def reason_of(node: str) -> str:
    """The reason Slurm shows for ``node`` (``sinfo -R``, unabridged; ``""``: none)."""
    return sh("sinfo", "-h", "-R", "-n", node, "-o", "%400E").strip()


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


def sacct_runs(job_id: int) -> list[dict[str, str]]:
    """sacct's record of each run of ``job_id`` (``-D``), oldest first, with its SLUID where this
    release has one (26.05+; older sacct refuses the field: ``""`` then)."""
    fields = ["JobIDRaw", "State", "Submit"]
    has_sluid = subprocess.run(["sacct", "-n", "-X", "-o", "SLUID", "-j", str(job_id)], capture_output=True,
                               text=True, check=False).returncode == 0
    asked = [*fields, "SLUID"] if has_sluid else fields
    out = sh("sacct", "-a", "-n", "-X", "-D", "-P", "-o", ",".join(asked), "-j", str(job_id))
    rows = [dict(zip(asked, line.split("|"), strict=True)) for line in out.splitlines() if line]
    return [{**r, "SLUID": r.get("SLUID", "")} for r in rows]


def submit(user: str, *args: str) -> int:
    """``sbatch`` as ``user`` (``runuser`` unless root), output discarded; the job id."""
    argv = ["sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args]
    if user != "root":
        argv = ["runuser", "-u", user, "--", *argv]
    return int(sh(*argv).strip().split(";")[0])


def _squeue_state(job: int) -> str:
    return sh("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()


def _requeue_twice(job: int) -> None:
    """``job`` requeued while running (slurmdbd keeps that run as REQUEUED), made eligible at
    once (a requeue waits ~2 min otherwise), then COMPLETED."""
    wait_for(lambda: _squeue_state(job) == "RUNNING", 60, what=f"job {job} to run")
    sh("scontrol", "requeue", str(job))
    wait_for(lambda: _squeue_state(job) == "PENDING", 30, what=f"job {job} to be requeued")
    sh("scontrol", "update", f"jobid={job}", "StartTime=now")
    wait_for(lambda: [r["State"] for r in sacct_runs(job)] == ["REQUEUED", "COMPLETED"], 120, 0.5,
             what=f"both runs of job {job} in accounting")


@dataclass(frozen=True)
class ForgottenJobs:
    """Finished jobs for the tests that read a job slurmctld has forgotten (from accounting).

    slurmctld forgets a finished job once it is MinJobAge (60 s) old, at its purge pass, which
    runs every 60 s: up to two minutes after the job's end. So the jobs are submitted (and
    ended) when the session starts, and those minutes pass while other tests run; each test
    still waits for slurmctld to have forgotten its job (:func:`forgotten`)."""

    root: int  #: root's job (account physics, partition debug): ``true``
    alice: int  #: alice's job (account physics, partition debug): ``true``
    requeued: int  #: root's job that ran twice (REQUEUED, then COMPLETED)


#: The fixtures that read :class:`ForgottenJobs`: the session submits them only where one is collected.
FORGOTTEN_FIXTURES = frozenset({"forgotten_job", "early_job", "requeued_job"})


@pytest.fixture(scope="session", autouse=True)
def forgotten_jobs(request: pytest.FixtureRequest) -> ForgottenJobs | None:
    """:class:`ForgottenJobs`, submitted before the first test when a collected test needs them
    (autouse: first of the session's fixtures; ``None`` where none does or no cluster can run)."""
    items = request.session.items
    if not _can_run_cluster() or not any(FORGOTTEN_FIXTURES & set(getattr(i, "fixturenames", ())) for i in items):
        return None
    request.getfixturevalue("devcluster")
    common = ("-A", "physics", "-p", "debug", "-t", "1", "--wrap", "true")
    root, alice = submit("root", "-J", "st-forgotten", *common), submit("alice", "-J", "st-forgotten-alice", *common)
    requeued = submit("root", "-J", "st-requeued", "-t", "2", "--wrap", "sleep 3")
    _requeue_twice(requeued)
    # Every one ended before the first test: none runs beside a test that drains a node.
    wait_for(lambda: not {_squeue_state(j) for j in (root, alice, requeued)} - {"", "COMPLETED"}, 60,
             what="the forgotten jobs to end")
    return ForgottenJobs(root=root, alice=alice, requeued=requeued)


def forgotten(job: int, timeout: float = 150) -> int:
    """``job``, once slurmctld has forgotten it (``scontrol show job`` fails) and accounting
    holds it: at most ~2 min after its end (MinJobAge, then the next purge pass)."""
    wait_for(lambda: subprocess.run(["scontrol", "show", "job", str(job)], capture_output=True,
                                    check=False).returncode != 0, timeout, 1, what=f"slurmctld to forget job {job}")
    return job


@pytest.fixture(scope="session")
def requeued_job(forgotten_jobs: ForgottenJobs | None) -> int:
    """A batch job that ran twice: REQUEUED, then COMPLETED (see :class:`ForgottenJobs`)."""
    assert forgotten_jobs is not None
    return forgotten_jobs.requeued


SCALE_NODES = 1000
SCALE_DIR = Path("/var/lib/slurmtower/scale-test")
SCALE_NAME = "scaletest"
SCALE_PORT_BASE = 14000  # ports 14000-15100: clear of the default cluster's 26800-26904


@contextmanager
def _scale_lock(root: Path) -> Iterator[Path]:
    """The scale lab's session registry (one pid file per pytest session), under a file lock."""
    sessions = root.parent / f"{root.name}.sessions"
    with _file_lock(sessions / ".lock"):
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
        cluster.forget_node_states()


def scale_sh(cluster: DevCluster, *argv: str, check: bool = True, timeout: float = 60) -> str:
    """Run a Slurm command against the scale lab ``cluster`` (the test's own view)."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                          env=cluster.command_env())
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} failed: {proc.stderr}")
    return proc.stdout


PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1"


@pytest.fixture()
def pg_store() -> Iterator[str]:
    """A fresh PostgreSQL database for one deployment's store, dropped afterwards."""
    name = f"st_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:  # scripts/test.sh starts PostgreSQL: not having one is a failure
        pytest.fail(f"no PostgreSQL at {PG_SERVER}: {exc.orig}")
    try:
        yield f"{PG_SERVER}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()
