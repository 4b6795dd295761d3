"""The upgrade as a site runs it, end to end, on the real local cluster.

The previous release (this repository at the last commit before the newest store migration,
exported with ``git archive`` and run from its own ``PYTHONPATH``) runs as the deployment of
``examples/systemd``: its units' ``ExecStart`` lines run as written (the executable, the
config they name and the API's port swapped for the test's; ``User=`` is systemd's, the test
runs them as itself), and they stop as systemd stops them (``ExecStop=`` when there is one,
else ``KillSignal=`` to the whole process group, ``SIGKILL`` after ``TimeoutStopSec=``). Its
real code paths fill the store: the sensor's events and node states, drains and resumes from
the CLI and the API (executions, audit, holds), an alert, failed logins, the deployment's key
and leases. Then, as the README's "Upgrading" says: stop, back up, ``slurmtower db current``,
``slurmtower db upgrade`` with today's code (which refuses to serve before it), every row of
every table compared, and today's units started on the upgraded store, reading the old rows
and adding new ones. On a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import MetaData, create_engine, inspect, select

from slurmtower.devcluster import DevCluster
from slurmtower.store.revision import HEAD_REVISION
from slurmtower.store.schema import VERSION_TABLE
from tests.conftest import wait_for
from tests.sensor_helpers import SLURMTOWER, cluster_state_dir, free_port

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[1]
MIGRATIONS = "src/slurmtower/store/migrations/versions"
#: The executable the units name; swapped for the release under test's.
UNIT_EXECUTABLE = "/opt/slurmtower/venv/bin/slurmtower"
#: The previous release's ``slurmtower`` script, run by this interpreter from its PYTHONPATH.
OLD_MAIN = "import sys; from slurmtower.cli import main; sys.argv[0] = 'slurmtower'; sys.exit(main())"
NODE = "n4"
#: A node the previous release drains and today's resumes: its hold crosses the upgrade.
HELD = "n3"
#: Alertmanager's webhook body with one firing alert about NODE.
ALERTMANAGER = {
    "version": "4", "status": "firing", "receiver": "slurmtower", "groupLabels": {}, "commonLabels": {},
    "commonAnnotations": {}, "externalURL": "http://alertmanager", "groupKey": "{}",
    "alerts": [{"status": "firing", "labels": {"alertname": "UpgradeTest", "node": NODE}, "annotations": {},
                "startsAt": "2026-12-04T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "",
                "fingerprint": "0123abcd"}],
}


def _git(*argv: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def previous_release() -> str:
    """The commit before the newest migration was added: the release this one upgrades."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("the previous release is taken from git history: no git checkout here")
    # the commit that added the newest migration file (a later fix of that unreleased file is
    # not a release)
    newest = _git("log", "-1", "--diff-filter=A", "--format=%H", "--", MIGRATIONS)
    return _git("rev-parse", f"{newest}^")


@dataclass
class Release:
    """One release's code: how to run its ``slurmtower`` and its systemd units."""

    name: str
    command: list[str]
    units: Path
    env: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.command, *args], env={**env, **self.env}, capture_output=True, text=True,
                              timeout=60, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{self.name}: slurmtower {shlex.join(args)} exited {proc.returncode}: "
                                 f"{proc.stderr}{proc.stdout}")
        return proc


@dataclass
class Unit:
    """A systemd service unit of ``examples/systemd`` run the way systemd runs it."""

    path: Path
    release: Release
    config: Path
    base_env: dict[str, str]
    replace: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def _service(self) -> dict[str, list[str]]:
        parser = configparser.RawConfigParser(strict=False, delimiters=("=",), comment_prefixes=("#", ";"),
                                              interpolation=None, dict_type=_MultiDict)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(self.path)
        return {k: v.split("\n") for k, v in parser["Service"].items()}

    def _argv(self, line: str) -> list[str]:
        argv = shlex.split(line.lstrip("-@+!:"))  # systemd's prefixes (ignore failure, ...) don't matter here
        assert argv[0] == UNIT_EXECUTABLE, f"{self.path.name}: {line}"
        argv = [self.replace.get(a, a) for a in argv[1:]]
        return [*self.release.command, *argv]

    def env(self) -> dict[str, str]:
        env = dict(self.base_env)
        for line in self._service().get("Environment", []):
            for assignment in shlex.split(line):
                key, value = assignment.split("=", 1)
                env[key] = str(self.config) if key == "SLURMTOWER_CONFIG" else value
        return {**env, **self.release.env}

    @property
    def log_path(self) -> Path:
        return self.config.parent / f"{self.path.stem}.{self.release.name}.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def start(self) -> None:
        """``ExecStart=`` in a process group of its own (the unit's control group)."""
        (line,) = self._service()["ExecStart"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self._argv(line), env=self.env(), stdout=log, stderr=log,
                                         start_new_session=True)

    def run_once(self, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``ExecStart=`` to its end (a start that is refused)."""
        (line,) = self._service()["ExecStart"]
        return subprocess.run(self._argv(line), env=self.env(), capture_output=True, text=True, timeout=timeout,
                              check=False)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """``ExecStop=``, or ``KillSignal=`` (SIGTERM) to the group; SIGKILL past ``TimeoutStopSec=``.
        Returns the main process's exit status."""
        if self.proc is None:
            return None
        service = self._service()
        if self.proc.poll() is None:
            for line in service.get("ExecStop", []):
                subprocess.run(self._argv(line), env=self.env(), capture_output=True, timeout=90, check=False)
            signame = service.get("KillSignal", ["SIGTERM"])[0]
            try:
                os.killpg(self.proc.pid, getattr(signal, signame))
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(float(service.get("TimeoutStopSec", ["90"])[0]))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        code = self.proc.returncode
        self.proc = None
        return code


class _MultiDict(dict[str, Any]):
    """configparser keeping every value of a repeated key (``Environment=`` twice), one per line."""

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, list) and key in self:
            self[key].extend(value)
        else:
            super().__setitem__(key, value)


def snapshot(url: str, columns: dict[str, list[str]] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the store (but Alembic's), in a fixed order; of each table
    only ``columns[table]`` when given (what an older revision had)."""
    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        with engine.connect() as conn:
            return {name: sorted((tuple(row) for row in conn.execute(
                        select(*(table.c[c] for c in columns[name])) if columns and name in columns
                        else select(table))), key=repr)
                    for name, table in meta.tables.items() if name != "alembic_version"}
    finally:
        engine.dispose()


def table_columns(url: str) -> dict[str, list[str]]:
    """Each table's columns, in order."""
    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        return {name: [c.name for c in table.columns] for name, table in meta.tables.items()}
    finally:
        engine.dispose()


def table_indexes(url: str) -> dict[str, set[tuple[str | None, tuple[str, ...], bool]]]:
    """Each table's indexes: (name, columns, unique)."""
    engine = create_engine(url)
    try:
        found = inspect(engine)
        return {name: {(ix["name"], tuple(c or "" for c in ix["column_names"]), bool(ix["unique"]))
                       for ix in found.get_indexes(name)} for name in found.get_table_names()}
    finally:
        engine.dispose()


def as_before(records: list[dict[str, Any]], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with only the fields the previous release's records had."""
    keys = {k for r in before for k in r}
    return [{k: v for k, v in r.items() if k in keys} for r in records]


def revision(db_current: str) -> str:
    """The store's revision in ``slurmtower db current``'s answer."""
    found = re.search(r"(?m)^revision:\s+(\S+)", db_current)
    assert found, db_current
    return found.group(1)


def json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, devcluster: DevCluster) -> Iterator[str]:
    if request.param == "postgresql":
        yield request.getfixturevalue("pg_store")
    else:
        yield "sqlite:///{state_dir}/slurmtower.db"  # filled in with the deployment's state dir


@pytest.fixture()
def old_release(tmp_path: Path) -> Release:
    commit = previous_release()
    root = tmp_path / f"release-{commit[:10]}"
    root.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "src", "examples/systemd"],
                             capture_output=True, check=True, timeout=60).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True, timeout=60)
    # Its own code first on the path (before this checkout's editable install); the same dependencies.
    return Release(name="previous", command=[sys.executable, "-c", OLD_MAIN], units=root / "examples/systemd",
                   env={"PYTHONPATH": str(root / "src")})


def test_a_store_of_the_previous_release_is_upgraded_with_every_row_kept(
        devcluster: DevCluster, clean_nodes: DevCluster, old_release: Release, store_url: str,
        tmp_path: Path) -> None:
    state_dir = cluster_state_dir(devcluster, "upgrade")  # SlurmUser runs the sensor's notify program here
    url = store_url.format(state_dir=state_dir)
    config = state_dir / "slurmtower.toml"
    config.write_text(re.sub(r'(?m)^state_dir = .*$', f'state_dir = "{state_dir}"', devcluster.tower_conf.read_text()))
    tokens = devcluster.demo_tokens()
    api_port, sensor_port = free_port(), free_port()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMTOWER_", "PROMETHEUS_", "PYTHONPATH"))}
    base_env.update(SLURM_CONF=str(devcluster.slurm_conf), SLURMTOWER_CONFIG=str(config),
                    SLURMTOWER_STORE_URL=url, SLURMTOWER_EVENTS__CALLBACK_PORT=str(sensor_port),
                    SLURMTOWER_EVENTS__POLL_INTERVAL="0.5", SLURMTOWER_ACTIONS__BREAKER_ENABLED="false")
    new_release = Release(name="current", command=[SLURMTOWER], units=REPO / "examples/systemd")
    api_url = f"http://127.0.0.1:{api_port}"

    def units(release: Release) -> tuple[Unit, Unit]:
        # The API's port is the units' 8642 on a site; a free one here (another test may serve there).
        return (Unit(release.units / "slurmtower-sensor.service", release, config, base_env),
                Unit(release.units / "slurmtower-api.service", release, config, base_env, {"8642": str(api_port)}))

    def start(deployment: tuple[Unit, Unit]) -> None:
        for unit in deployment:
            unit.start()
        sensor, api = deployment
        for unit, probe in ((sensor, f"http://127.0.0.1:{sensor_port}/health"), (api, f"{api_url}/health")):
            def up(unit: Unit = unit, probe: str = probe) -> bool:
                if not unit.running():
                    raise AssertionError(f"{unit.path.name} ({unit.release.name}) exited: {unit.log()}")
                try:
                    return httpx.get(probe, timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False
            wait_for(up, 40, 0.2, what=f"{unit.path.name} of the {unit.release.name} release")

    def stop(deployment: tuple[Unit, Unit]) -> None:
        for unit in reversed(deployment):
            assert unit.stop() in (0, -signal.SIGTERM), f"{unit.path.name}: {unit.log()}"

    def events(release: Release) -> list[dict[str, Any]]:
        return json_lines(release.cli("events", "--limit", "10000", "-o", "json", env=base_env).stdout)

    def node_events(release: Release) -> list[dict[str, Any]]:
        return [e for e in events(release) if e["type"] == "slurm.node.state" and e["node"] == NODE]

    old, new = units(old_release), units(new_release)
    try:
        # -- the previous release runs, and its code fills the store -----------------------
        start(old)
        wait_for(lambda: any(e["type"] == "slurm.sensor.trigger.up" for e in events(old_release)), 30,
                 what="the previous sensor's up event")
        old_release.cli("run", "slurm.node.drain", f"nodes={NODE}", "reason=before the upgrade", env=base_env)
        wait_for(lambda: len(node_events(old_release)) >= 1, 30, what="the drain event")
        old_release.cli("run", "slurm.node.resume", f"nodes={NODE}", env=base_env)
        wait_for(lambda: len(node_events(old_release)) >= 2, 30, what="the resume event")
        old_release.cli("run", "slurm.node.drain", f"nodes={HELD}", "reason=held over the upgrade", env=base_env)
        keyed = {"Authorization": f"Bearer {tokens['operator']}", "Idempotency-Key": "across-the-upgrade"}
        answer = httpx.post(f"{api_url}/actions/slurm.node.drain", params={"dry_run": "true"},
                            json={"nodes": NODE, "reason": "a dry run"}, headers=keyed, timeout=30)
        assert answer.status_code == 200, answer.text
        alert = subprocess.run([*old_release.command, "alert", "-"], input=json.dumps(ALERTMANAGER),
                               env={**base_env, **old_release.env}, capture_output=True, text=True, timeout=60,
                               check=False)
        assert alert.returncode == 0, alert.stderr
        for _ in range(2):
            assert httpx.get(f"{api_url}/audit", headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
        stop(old)

        # -- the upgrade, as the README says ------------------------------------------------
        before = snapshot(url)
        old_columns = table_columns(url)
        old_indexes = table_indexes(url)
        for table in ("events", "node_states", "action_executions", "action_audit", "node_holds",
                      "login_failures", "deployment"):
            assert before[table], f"the previous release wrote no {table}"
        old_events = events(old_release)
        old_audit = json.loads(old_release.cli("audit", "-o", "json", "--limit", "1000", env=base_env).stdout)
        old_revision = revision(old_release.cli("db", "current", env=base_env).stdout)
        assert old_revision != HEAD_REVISION

        refused = new[1].run_once()
        assert refused.returncode == 78, refused.stderr
        assert "slurmtower db upgrade" in refused.stderr

        current = new_release.cli("db", "current", env=base_env).stdout
        assert revision(current) == old_revision and "needs `slurmtower db upgrade`" in current, current
        upgraded = new_release.cli("db", "upgrade", env=base_env)
        assert HEAD_REVISION in upgraded.stdout, upgraded.stdout
        after = snapshot(url, old_columns)
        for table, rows in before.items():
            if table != VERSION_TABLE:  # the one row the upgrade is for
                assert after[table] == rows, f"{table} changed in the upgrade"
        # the columns the upgrade added hold their defaults on the old rows (revision 6: every
        # row is the default cluster's, cluster = ''; a session has no groups; revision 9: an
        # audit record of no request, approved by no one)
        added = {t: [c for c in cols if c not in old_columns.get(t, [])] for t, cols in table_columns(url).items()}
        defaults = {"cluster": {""}, "groups": {None}, "request_id": {None}, "approved_by": {None}}
        for table, cols in added.items():
            if cols and old_columns.get(table):
                assert set(cols) <= set(defaults), (table, cols)
                for col in cols:
                    assert {r for (r,) in snapshot(url, {table: [col]})[table]} <= defaults[col], (table, col)
        assert after[VERSION_TABLE] == [(HEAD_REVISION,)]
        assert set(after) >= set(before) and (set(after) > set(before) or any(added.values())
                                              or table_indexes(url) != old_indexes)
        assert revision(new_release.cli("db", "current", env=base_env).stdout) == HEAD_REVISION

        # -- today's release runs on the upgraded store ----------------------------------
        # every field the previous release answered is answered alike (this one adds `cluster`:
        # None in a one-cluster deployment)
        assert as_before(events(new_release), old_events) == old_events
        new_audit = json.loads(new_release.cli("audit", "-o", "json", "--limit", "1000", env=base_env).stdout)
        assert as_before(new_audit, old_audit) == old_audit
        assert {r.get("cluster") for r in [*events(new_release), *new_audit]} == {None}
        start(new)
        # an idempotency key used before the upgrade replays its execution after it
        again = httpx.post(f"{api_url}/actions/slurm.node.drain", params={"dry_run": "true"},
                           json={"nodes": NODE, "reason": "a dry run"}, headers=keyed, timeout=30)
        assert again.status_code == 200 and again.json()["execution_id"] == answer.json()["execution_id"], again.text
        new_release.cli("run", "slurm.node.drain", f"nodes={NODE}", "reason=after the upgrade", env=base_env)
        wait_for(lambda: len(node_events(new_release)) >= 3, 30, what="an event of today's sensor")
        new_release.cli("run", "slurm.node.resume", f"nodes={NODE}", env=base_env)
        # the hold the previous release recorded is today's to release: the node resumes
        new_release.cli("run", "slurm.node.resume", f"nodes={HELD}", env=base_env)
        wait_for(lambda: "drain" not in node_state(devcluster, HELD), 30, what=f"{HELD} resumed")
        new_release.cli("token", "revoke", "demo-reader", env=base_env)  # the new table, token_state
        wait_for(lambda: httpx.get(f"{api_url}/nodes", headers={"Authorization": f"Bearer {tokens['reader']}"},
                                   timeout=10).status_code == 401, 15, what="the revoked token refused")
        stop(new)
        final = snapshot(url, old_columns)
        assert min(e["id"] for e in as_before(events(new_release), old_events) if e not in old_events) > max(
            e["id"] for e in old_events)
        assert final["token_state"]
        for table in ("events", "action_audit", "action_executions"):
            assert all(row in final[table] for row in before[table]), f"{table}: an old row changed"
            assert len(final[table]) > len(before[table]), f"{table}: today's release added none"
    finally:
        for unit in (*old, *new):
            unit.stop()
        _clear_triggers(devcluster, state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


def node_state(cluster: DevCluster, node: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}
    return subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True,
                          check=True, env=env, timeout=30).stdout.strip().lower()


def _clear_triggers(cluster: DevCluster, state_dir: Path) -> None:
    """Any trigger a killed sensor of this test left armed."""
    env = {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}
    out = subprocess.run(["strigger", "--get"], capture_output=True, text=True, check=False, env=env).stdout
    for line in out.splitlines()[1:]:
        if any(word.startswith(str(state_dir)) for word in line.split()):
            subprocess.run(["strigger", "--clear", f"--id={line.split()[0]}"], capture_output=True, check=False,
                           env=env)
