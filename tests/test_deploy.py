"""``slurmtower init`` and ``slurmtower doctor`` against the local cluster: init's files (dry run,
into a temporary root, never over a file without --force), doctor passing on them, and doctor
naming the fix of each fault injected for real (munge unreachable, a write grant, a store at an
older revision, a sensor user slurmctld refuses triggers from)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from slurmtower.deploy import api_unit, judge_release, render_config, run_checks, sensor_unit
from slurmtower.devcluster import DevCluster
from slurmtower.models.version import SlurmVersion
from slurmtower.settings import Settings, load_settings

pytestmark = pytest.mark.release  # run again on every Slurm install (scripts/test.sh)

SLURMTOWER = str(Path(sys.executable).with_name("slurmtower"))
EXAMPLES = Path(__file__).parent.parent / "examples" / "systemd"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``slurmtower`` command, with no SLURMTOWER_* variable but those in ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURMTOWER_")}
    return subprocess.run([SLURMTOWER, *args], capture_output=True, text=True, env={**base, **(env or {})},
                          timeout=120, check=False)


def mariadb(sql: str) -> None:
    subprocess.run(["mariadb", "-uroot", "-N", "-e", sql], check=True, capture_output=True, timeout=30)


def lines_of(out: str) -> dict[str, str]:
    """doctor's output, ``{check: its line}``."""
    return {m[2]: m[0] for m in re.finditer(r"^(ok  |WARN|FAIL|skip) ([a-z-]+): .*$", out, re.M)}


#: doctor's slurm-release status on each release the suites run on (deploy/releases.py's
#: advisories: fixes in 25.05.9 and 25.11.8 only): the older series warn, 25.11.7 fails.
RELEASE_VERDICTS = {"22.05": "WARN", "23.11": "WARN", "24.11": "WARN", "25.11": "FAIL", "26.05": "ok  "}


@pytest.fixture()
def open_dir() -> Iterator[Path]:
    """A temporary directory others (SlurmUser) may traverse, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="st-deploy-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- without the cluster -----------------------------------------------------------------


def test_the_example_units_are_the_rendered_ones() -> None:
    assert (EXAMPLES / "slurmtower-api.service").read_text() == api_unit()
    assert (EXAMPLES / "slurmtower-sensor.service").read_text() == sensor_unit()


def test_the_generated_config_holds_every_key_at_its_default(tmp_path: Path) -> None:
    """Every commented ``key = default`` line of the schema's file, uncommented, loads and
    gives the defaults: the file documents the settings as they are."""
    text = render_config({})
    uncommented = re.sub(r"^# ([a-z_]+ = (?!  \(unset\)).+)$", r"\1", text, flags=re.M)
    assert uncommented.count("\n") == text.count("\n") and uncommented != text
    path = tmp_path / "all.toml"
    path.write_text(uncommented)
    assert load_settings(path, environ={}).model_dump() == Settings().model_dump()
    assert "# Addresses or networks" in text and "[api]" in text and "[auth]" in text


@pytest.mark.parametrize(("release", "status"), [
    ("22.05.8", "warn"), ("25.05.8", "fail"), ("25.05.9", "ok"), ("25.11.7", "fail"), ("25.11.8", "ok"),
    ("26.05.0", "ok"), ("26.11.0", "warn"),
], ids=str)
def test_the_release_is_judged_by_the_advisories_and_the_parsed_range(release: str, status: str) -> None:
    verdict = judge_release(SlurmVersion.parse(release))
    assert verdict.status == status, verdict
    assert (verdict.fix is None) == (status == "ok")


def test_doctor_weighs_the_tls_and_proxy_settings(settings: Settings) -> None:
    settings.api.host = "0.0.0.0"  # noqa: S104 - the setting doctor warns about
    [open_] = run_checks(settings, only=["tls-proxy"])
    assert open_.status == "warn" and "127.0.0.1" in (open_.fix or "")
    settings.api.trusted_proxies = ["0.0.0.0/0"]
    [everyone] = run_checks(settings, only=["tls-proxy"])
    assert everyone.status == "fail" and "every address" in everyone.detail


# -- init ------------------------------------------------------------------------------------


def test_init_dry_run_prints_every_file_with_its_secrets_masked_and_writes_nothing(
        devcluster: DevCluster, tmp_path: Path) -> None:
    res = run("init", "--dry-run", "--root", str(tmp_path), env={"SLURM_CONF": str(devcluster.slurm_conf)})
    assert res.returncode == 0, res.stderr
    for path in ("etc/slurmtower/slurmtower.toml", "etc/slurmtower/sensor.toml", "etc/slurmtower/sensor.key",
                 "etc/systemd/system/slurmtower-api.service", "etc/systemd/system/slurmtower-sensor.service",
                 "etc/sysusers.d/slurmtower.conf", "etc/tmpfiles.d/slurmtower.conf",
                 "etc/slurmtower/nginx-slurmtower.conf", "etc/slurmtower/accounting-grant.sql"):
        assert f"--- would write {tmp_path / path} (mode " in res.stdout
    assert f'cluster_name = "{devcluster.cluster_name}"' in res.stdout
    assert f'url = "mysql+pymysql://slurmtower_ro:********@127.0.0.1:3306/{devcluster.db_name}"' in res.stdout
    assert list(tmp_path.iterdir()) == []


def _init(root: Path, devcluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run("init", "--root", str(root), *args, env={"SLURM_CONF": str(devcluster.slurm_conf)})


def test_init_writes_the_files_then_refuses_to_overwrite_them_without_force(
        devcluster: DevCluster, tmp_path: Path) -> None:
    res = _init(tmp_path, devcluster)
    assert res.returncode == 0, res.stderr
    etc = tmp_path / "etc/slurmtower"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in etc.iterdir()}
    assert modes == {"slurmtower.toml": 0o640, "sensor.toml": 0o640, "sensor.key": 0o640,
                     "accounting-grant.sql": 0o600, "nginx-slurmtower.conf": 0o644}
    settings = load_settings(etc / "slurmtower.toml", environ={})
    assert settings.cluster_name == devcluster.cluster_name
    assert settings.slurm.slurm_conf == devcluster.slurm_conf and settings.slurm.slurm_user == "slurm"
    assert settings.api.trusted_proxies == ["127.0.0.1"] and not settings.events.sensor_enabled
    assert settings.accounting.url is not None
    url = make_url(settings.accounting.url.get_secret_value())
    assert (url.username, url.host, url.port, url.database) == ("slurmtower_ro", "127.0.0.1", 3306, devcluster.db_name)
    assert f"IDENTIFIED BY '{url.password}'" in (etc / "accounting-grant.sql").read_text()
    sensor = load_settings(etc / "sensor.toml", environ={})
    assert sensor.events.key_file == Path("/etc/slurmtower/sensor.key") and sensor.events.sensor_enabled
    assert f"ExecStart={SLURMTOWER} serve" in (tmp_path / "etc/systemd/system/slurmtower-api.service").read_text()
    key = (etc / "sensor.key").read_text()
    assert re.fullmatch(r"[0-9a-f]{64}\n", key)

    again = _init(tmp_path, devcluster)
    assert again.returncode == 3 and "--force" in again.stderr and len(again.stderr.splitlines()) == 1
    forced = _init(tmp_path, devcluster, "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"kept {etc / 'sensor.key'}" in forced.stdout and (etc / "sensor.key").read_text() == key
    assert f"replaced {etc / 'slurmtower.toml'}" in forced.stdout


# -- doctor ----------------------------------------------------------------------------------


def test_init_then_doctor_passes_on_the_local_cluster(devcluster: DevCluster, open_dir: Path) -> None:
    """The site's steps: init, the read-only grant it wrote, then doctor with the API's config
    and with the sensor's (as root, which sets triggers as SlurmUser)."""
    db_user = f"st_doctor_{secrets.token_hex(3)}"
    assert _init(open_dir, devcluster, "--db-user", db_user).returncode == 0
    etc = open_dir / "etc/slurmtower"
    try:
        mariadb((etc / "accounting-grant.sql").read_text())
        env = {"SLURMTOWER_STATE_DIR": str(open_dir / "state")}
        api = run("doctor", "-c", str(etc / "slurmtower.toml"), env=env)
        checks = lines_of(api.stdout)
        assert list(checks) == ["slurm-commands", "munge", "slurmctld", "slurm-release", "operator",
                                "accounting-db", "sensor-triggers", "notify-program", "store", "clock", "tls-proxy"]
        assert checks["accounting-db"].startswith(f"ok   accounting-db: {db_user}@")
        release = subprocess.run(["sinfo", "-V"], capture_output=True, text=True, check=True).stdout.split()[1]
        expected = RELEASE_VERDICTS[release.rsplit(".", 1)[0]]
        assert checks["slurm-release"].startswith(f"{expected} slurm-release: Slurm {release}"), checks
        if release == "25.11.7":  # below the September 2026 floor: the line names the fixed release
            assert checks["slurm-release"].endswith("-> fix: upgrade Slurm to 25.11.8 or later")
        # doctor fails only where a check fails: here the release's, where it is below its fix
        assert api.returncode == (1 if expected == "FAIL" else 0), api.stdout + api.stderr
        assert [c for c, line in checks.items() if line.startswith("FAIL")] == \
            (["slurm-release"] if expected == "FAIL" else [])
        assert checks["sensor-triggers"].startswith("skip")  # the API's config: the sensor runs apart
        sensor = run("doctor", "-c", str(etc / "sensor.toml"),
                     env={**env, "SLURMTOWER_EVENTS__KEY_FILE": str(etc / "sensor.key")})
        assert sensor.returncode == (1 if expected == "FAIL" else 0), sensor.stdout + sensor.stderr
        assert lines_of(sensor.stdout)["sensor-triggers"].startswith("ok   sensor-triggers: slurmctld takes node "
                                                                     "triggers from slurm")
        assert lines_of(sensor.stdout)["notify-program"].startswith("ok")
    finally:
        mariadb(f"DROP USER IF EXISTS '{db_user}'@'localhost', '{db_user}'@'127.0.0.1'")


def _doctor(devcluster: DevCluster, *checks: str, **env: str) -> subprocess.CompletedProcess[str]:
    args = [a for c in checks for a in ("--check", c)]
    return run("doctor", "-c", str(devcluster.tower_conf), *args, env=env)


def test_doctor_names_the_fix_when_munge_does_not_answer(devcluster: DevCluster, tmp_path: Path) -> None:
    """slurm.conf pointing Slurm's clients at a munge socket nobody serves (the shared munged
    keeps running for the other tests)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(devcluster.slurm_conf.read_text() + f"AuthInfo=socket={tmp_path}/munge.socket.2\n")
    res = _doctor(devcluster, "munge", "slurmctld", SLURMTOWER_SLURM__SLURM_CONF=str(conf))
    assert res.returncode == 1, res.stdout + res.stderr
    checks = lines_of(res.stdout)
    assert checks["munge"].startswith(f"FAIL munge: munge does not answer on {tmp_path}/munge.socket.2")
    assert "fix: start munged" in checks["munge"]
    assert checks["slurmctld"].startswith("FAIL") and "fix: start munged" in checks["slurmctld"]


def test_doctor_names_the_fix_for_a_database_user_that_may_write(devcluster: DevCluster,
                                                                 cluster_settings: Settings) -> None:
    assert cluster_settings.accounting.url is not None
    url = make_url(cluster_settings.accounting.url.get_secret_value())
    user, password = f"st_doctor_rw_{secrets.token_hex(3)}", secrets.token_hex(12)
    mariadb(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'; "
            f"GRANT SELECT, INSERT, UPDATE ON `{url.database}`.* TO '{user}'@'127.0.0.1'")
    try:
        writer = url.set(username=user, password=password).render_as_string(hide_password=False)
        res = _doctor(devcluster, "accounting-db", SLURMTOWER_ACCOUNTING__URL=writer)
        assert res.returncode == 1, res.stdout + res.stderr
        line = lines_of(res.stdout)["accounting-db"]
        assert line.startswith(f"FAIL accounting-db: {user}@127.0.0.1 may do more than read: INSERT, UPDATE")
        assert f"fix: REVOKE ALL PRIVILEGES, GRANT OPTION FROM '{user}'@'127.0.0.1'; GRANT SELECT ON " \
               f"`{url.database}`.* TO '{user}'@'127.0.0.1'" in line
    finally:
        mariadb(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


def test_doctor_names_the_fix_for_a_store_at_an_older_revision(devcluster: DevCluster, tmp_path: Path) -> None:
    from alembic import command

    from slurmtower.store import migrate
    from slurmtower.store.engine import make_store_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.check_store_url(url)  # made at the head, as a service's first start does
    engine = make_store_engine(url)
    try:
        with migrate._locked(engine, None) as conn:
            command.downgrade(migrate._config(conn, None), "-1")
        older = migrate.current_state(engine).revision
    finally:
        engine.dispose()
    assert older is not None and older != migrate.head_revision()
    res = _doctor(devcluster, "store", SLURMTOWER_STORE_URL=url)
    assert res.returncode == 1, res.stdout + res.stderr
    line = lines_of(res.stdout)["store"]
    assert f"is at {older}, this slurmtower needs {migrate.head_revision()}" in line
    assert line.endswith("fix: stop the deployment's processes, back the store up, run `slurmtower db upgrade`")


def test_doctor_names_the_fix_when_the_sensor_user_cannot_set_triggers(devcluster: DevCluster) -> None:
    """A sensor configured to run as ``nobody``: slurmctld itself refuses its trigger (the
    probe names no real node, so nothing is armed either way)."""
    before = subprocess.run(["strigger", "--get"], capture_output=True, text=True, check=False).stdout
    res = _doctor(devcluster, "sensor-triggers", SLURMTOWER_SLURM__SLURM_USER="nobody")
    assert res.returncode == 1, res.stdout + res.stderr
    line = lines_of(res.stdout)["sensor-triggers"]
    assert line.startswith("FAIL sensor-triggers: slurmctld refuses triggers from nobody: ")
    assert "Access/permission denied" in line
    assert line.endswith('fix: run the sensor as SlurmUser: User=slurm in slurmtower-sensor.service, '
                         'and slurm.slurm_user = "slurm"')
    assert subprocess.run(["strigger", "--get"], capture_output=True, text=True, check=False).stdout == before
