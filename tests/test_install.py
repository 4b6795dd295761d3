"""slurmtower as a site installs it: the wheel and the sdist ``make dist`` builds, installed
into clean virtual environments (no checkout on the path), run from there against the local
cluster. One environment has the core dependencies only (the CLI, the actions, the store's
migrations, the sensor); the other adds the ``server`` extra (the API and the dashboard).

The wheel is built once for the module; the environments come from PyPI through uv's cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.models.event import SENSOR_TRIGGERED
from slurmtower.store.migrate import head_revision
from tests import sensor_helpers, serve_helpers
from tests.sensor_helpers import SensorProcess, cluster_state_dir, serve_env

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "slurmtower"
UV = str(Path(sys.executable).with_name("uv"))
#: What the wheel must carry besides the Python modules, relative to the package.
DATA_FILES = sorted(
    [p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "dashboard" / "static").iterdir()]
    + [p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "dashboard" / "templates").glob("*.html")]
    + [p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "store" / "migrations").rglob("*.py")]
    + ["store/migrations/script.py.mako", "events/notify.py", "py.typed"]
)
SERVER_ERROR = "pip install 'slurmtower[server]'"


@pytest.fixture(autouse=True)
def _no_checkout_on_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The processes started here (from the environments' own bin/) inherit no Python path."""
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        monkeypatch.delenv(name, raising=False)


def _run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 180) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return proc


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path

    @property
    def version(self) -> str:
        return self.wheel.name.split("-")[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dist]:
    """``make dist``'s command: the sdist, and the wheel built from it."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out), str(ROOT)])
    yield Dist(wheel=next(out.glob("*.whl")), sdist=next(out.glob("*.tar.gz")))
    shutil.rmtree(out, ignore_errors=True)


@dataclass(frozen=True)
class Install:
    """A virtual environment holding the wheel (and the deps its extras name), nothing else."""

    root: Path

    @property
    def slurmtower(self) -> str:
        return str(self.root / "bin" / "slurmtower")

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def run(self, *argv: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``slurmtower ARGV`` from this environment, in its own directory (not the checkout)."""
        proc = subprocess.run([self.slurmtower, *argv], capture_output=True, text=True, timeout=120, check=False,
                              cwd=self.root, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"slurmtower {' '.join(argv)} exited {proc.returncode}: {proc.stderr[-3000:]}")
        return proc


def _install(root: Path, requirement: str) -> Install:
    _run([UV, "venv", "--quiet", "--python", sys.executable, str(root)])
    _run([UV, "pip", "install", "--quiet", "--python", str(root / "bin" / "python"), requirement])
    return Install(root)


@pytest.fixture(scope="module")
def core(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """``pip install slurmtower-*.whl``: the CLI, actions, events and the sensor."""
    root = tmp_path_factory.mktemp("core") / "venv"
    yield _install(root, f"slurmtower @ {dist.wheel.as_uri()}")
    shutil.rmtree(root.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def server(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    """``pip install 'slurmtower-*.whl[server]'``: the API and the dashboard too."""
    root = tmp_path_factory.mktemp("server") / "venv"
    yield _install(root, f"slurmtower[server] @ {dist.wheel.as_uri()}")
    shutil.rmtree(root.parent, ignore_errors=True)


def test_the_wheel_carries_the_dashboard_the_migrations_and_the_notify_program(dist: Dist) -> None:
    names = set(zipfile.ZipFile(dist.wheel).namelist())
    assert [f for f in DATA_FILES if f"slurmtower/{f}" not in names] == []
    metadata = zipfile.ZipFile(dist.wheel).read(f"slurmtower-{dist.version}.dist-info/METADATA").decode()
    assert "Provides-Extra: server" in metadata and "Provides-Extra: postgres" in metadata
    core_requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not [r for r in core_requires if r.split()[1].lower().startswith(("fastapi", "authlib"))]
    assert dist.sdist.name == f"slurmtower-{dist.version}.tar.gz"


def _git(cwd: Path, *argv: str) -> str:
    return _run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv], cwd=cwd).stdout.strip()


def _vcs_version(root: Path) -> str:
    from hatch_vcs.version_source import VCSVersionSource  # deferred: the build's plugin, this test only

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["version"]
    return str(VCSVersionSource(str(root), config).get_version_data()["version"])


def test_the_version_is_the_git_tags_and_a_tree_without_history_builds_as_the_fallback(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "--quiet", "--no-tags", str(ROOT), str(clone))
    head = _git(clone, "rev-parse", "--short=7", "HEAD")
    untagged = _vcs_version(clone)
    assert ".dev" in untagged and f"+g{head}" in untagged
    _git(clone, "tag", "-a", "v2.3.4", "-m", "release 2.3.4")
    assert _vcs_version(clone) == "2.3.4"
    export = tmp_path / "export"
    export.mkdir()
    _run(["sh", "-c", f"git -C {clone} archive HEAD pyproject.toml | tar -x -C {export}"])
    fallback = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["version"]["fallback-version"]
    assert _vcs_version(export) == fallback


@pytest.mark.parametrize("which", ["core", "server"])
def test_each_install_runs_from_its_own_environment_and_gives_its_version(
    which: str, dist: Dist, request: pytest.FixtureRequest,
) -> None:
    install: Install = request.getfixturevalue(which)
    probe = ("import importlib.util, slurmtower; print(slurmtower.__file__); "
             "print(*[m for m in ('fastapi', 'authlib') if importlib.util.find_spec(m)])")
    where, web = _run([install.python, "-c", probe], cwd=install.root).stdout.splitlines()
    assert Path(where).is_relative_to(install.root) and not Path(where).is_relative_to(ROOT)
    assert web == ("" if which == "core" else "fastapi authlib")
    assert install.run("--version").stdout.strip() == dist.version
    assert install.run("version").stdout.strip() == dist.version


def test_the_cli_alone_runs_an_action_against_the_cluster(core: Install, devcluster: DevCluster, tmp_path: Path) -> None:
    env = serve_env(devcluster, tmp_path)  # a store of its own: the execution is recorded there
    out = core.run("run", "slurm.node.get", "nodes=n1", "-o", "json", env=env).stdout
    envelope = json.loads(out)
    assert envelope["status"] == "succeeded"
    assert envelope["result"]["n1"]["name"] == "n1" and "debug" in envelope["result"]["n1"]["partitions"]


def test_db_upgrade_finds_the_migrations_in_the_package(core: Install, devcluster: DevCluster, tmp_path: Path) -> None:
    env = serve_env(devcluster, tmp_path)
    done = json.loads(core.run("db", "upgrade", "-o", "json", env=env).stdout)
    assert done["to"] == done["head"] == head_revision() and done["upgraded"]
    assert str(tmp_path) in done["store"]
    state = json.loads(core.run("db", "current", "-o", "json", env=env).stdout)
    assert state["revision"] == head_revision() and state["up_to_date"]


def test_serve_without_the_server_extra_fails_in_one_line(core: Install, devcluster: DevCluster, tmp_path: Path) -> None:
    proc = core.run("serve", env=serve_env(devcluster, tmp_path), check=False)
    assert proc.returncode == 78, proc.stderr
    assert proc.stderr.count("\n") == 1 and SERVER_ERROR in proc.stderr
    assert proc.stderr.startswith("slurmtower: error: slurmtower serve needs the server extra")


def test_the_sensor_runs_without_the_server_extra_and_takes_a_signed_callback(
    core: Install, devcluster: DevCluster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sensor_helpers, "SLURMTOWER", core.slurmtower)
    sensor = SensorProcess(devcluster)
    try:
        sensor.start()
        assert httpx.get(f"{sensor.url}/ready", timeout=10).json()["triggers"] == 5
        # What slurmctld runs when a trigger fires (strigger passes come every ~16 s: run it now).
        program = sensor.state_dir / "slurmtower-notify.py"
        _run([core.python, str(program), "--url", sensor.url, "--key-file", str(sensor.state_dir / "sensor.key"),
              "--sensor-uuid", str(sensor.current_uuid()), "node", "drained", "n1"])
        triggered = sensor.wait_events(lambda evs: [e for e in evs if e.type == SENSOR_TRIGGERED], 10,
                                       "the callback's event")
        assert [e.payload["argument"] for e in triggered if e.type == SENSOR_TRIGGERED] == ["n1"]
    finally:
        sensor.cleanup()


def test_serve_from_the_wheel_answers_ready_and_serves_the_dashboard(
    server: Install, devcluster: DevCluster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serve_helpers, "SLURMTOWER", server.slurmtower)
    state_dir = cluster_state_dir(devcluster, "install")
    env = serve_env(devcluster, state_dir, SLURMTOWER_AUTH__ANONYMOUS_READ="true",
                    SLURMTOWER_EVENTS__SENSOR_ENABLED="false", SLURMTOWER_ARCHIVER__ARCHIVE_USAGE_LOAD="false")
    server.run("db", "upgrade", env=env)  # the store serve then finds at the head revision
    process = serve_helpers.ServeProcess(env, state_dir / "serve.log")
    try:
        process.start()
        with httpx.Client(base_url=process.url, timeout=30) as http:
            ready = http.get("/ready")
            assert ready.status_code == 200, ready.text
            assert ready.json()["slurmctld"] is True
            css = http.get("/ui/static/dashboard.css")
            assert css.status_code == 200
            assert css.content == (PACKAGE / "dashboard" / "static" / "dashboard.css").read_bytes()
            page = http.get("/ui")
            assert page.status_code == 200 and "/ui/static/dashboard.js" in page.text
    finally:
        process.stop()
        shutil.rmtree(state_dir, ignore_errors=True)
