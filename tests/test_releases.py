"""Other Slurm releases, live: the devcluster on every Slurm install found on this machine
(``/opt/slurm-*``, ``$SLURMTOWER_TEST_SLURM_PREFIXES``), and what ``slurmtower info`` says there.

The release suites themselves (``-m release``: actions, sensor, REST API, /history against
sacct, the slurmrestd backend) run again on each install in a pytest run of their own
(``scripts/test.sh``, ``SLURMTOWER_TEST_SLURM_PREFIX``). Where no install is found, the tests
here are skipped saying so: the release suites then ran on Debian's 22.05 only.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmtower.devcluster import DEFAULT_DIR, DevCluster, SlurmInstall, find_slurm_installs

from .conftest import RELEASE_PREFIX, _can_run_cluster, release_devcluster, wait_for

pytestmark = pytest.mark.cluster

INSTALLS = find_slurm_installs()
NO_INSTALL = ("no Slurm install besides Debian's 22.05 on this machine (nothing under /opt/slurm-*, "
              "$SLURMTOWER_TEST_SLURM_PREFIXES unset; `make slurm-releases` builds them from ../shared/slurm): "
              "the release suites ran on 22.05 only")


def _installs() -> list[object]:
    """Every install; in a release suite's run (``scripts/test.sh``), its own install only (the
    main run beside the release suites leaves these to them:
    ``conftest.pytest_collection_modifyitems``)."""
    if not INSTALLS:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_INSTALL), id="none")]
    mine = [i for i in INSTALLS if RELEASE_PREFIX is None or str(i.prefix) == str(Path(RELEASE_PREFIX).resolve())]
    return [pytest.param(i, id=f"slurm-{i.version}", marks=pytest.mark.release) for i in mine]


@pytest.fixture(params=_installs())
def release(request: pytest.FixtureRequest) -> Iterator[tuple[SlurmInstall, DevCluster]]:
    """The install's devcluster, up; stopped afterwards unless this run's suites use it."""
    if not _can_run_cluster():
        pytest.skip("the local Slurm cluster needs root on Debian")
    install: SlurmInstall = request.param
    cluster = release_devcluster(install.prefix)
    was_up = cluster.is_up()
    cluster.up()
    yield install, cluster
    if not was_up and RELEASE_PREFIX is None:
        cluster.down()


def _slurmtower(cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([".venv/bin/slurmtower", *args], capture_output=True, text=True, timeout=120,
                          check=False, env=cluster.command_env())


def test_installs_are_listed_with_their_versions() -> None:
    proc = subprocess.run([".venv/bin/slurmtower", "devcluster", "installs", "-o", "json"], capture_output=True,
                          text=True, timeout=120, check=False, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [(r["prefix"], r["version"]) for r in listed] == [(str(i.prefix), i.version) for i in INSTALLS]
    # every install gets its own dir, cluster name and ports
    assert len({r["dir"] for r in listed}) == len({r["cluster_name"] for r in listed}) == len(listed)
    if not INSTALLS:
        pytest.skip(NO_INSTALL)


def test_the_devcluster_runs_the_install_beside_debians(release: tuple[SlurmInstall, DevCluster]) -> None:
    install, cluster = release
    status = json.loads(_slurmtower(cluster, "devcluster", "status", "-o", "json").stdout)
    assert status["up"] is True and status["slurm_prefix"] == str(install.prefix)
    assert sorted(status["nodes"]) == ["n1", "n2", "n3", "n4"]
    # its own commands: the release's sinfo answers for its controller
    env = cluster.command_env()
    out = subprocess.run(["sinfo", "-V"], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == f"slurm {install.version}"
    assert subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, env=env,
                          check=True).stdout.count(f"ClusterName             = {cluster.cluster_name}") == 1
    # and Debian's cluster (the main suite's: scripts/test.sh brings it up first) is still up
    # beside it, on its own release
    # (asked with Debian's scontrol though this session has the release's first on PATH; the main
    # suite, running meanwhile, freezes and restarts that slurmctld in some tests: up again soon)
    debians = DevCluster(root=DEFAULT_DIR, log=lambda _m: None)  # not $SLURMTOWER_DEVCLUSTER_DIR (this lane's)
    assert debians.slurm_prefix is None
    wait_for(debians.is_up, 60, step=1, what="Debian's cluster up beside the release's")


def test_info_reports_the_release_and_what_it_can_do(release: tuple[SlurmInstall, DevCluster]) -> None:
    install, cluster = release
    proc = _slurmtower(cluster, "info", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["slurm_version"] == install.version
    major, minor = (int(x) for x in install.version.split(".")[:2])
    assert info["scontrol_json"] is ((major, minor) >= (23, 2))
    assert info["sdiag_json"] is ((major, minor) >= (23, 2))
    assert info["config_json"] is ((major, minor) >= (26, 5))
    assert info["data_parser"] is not None
    rest = info["rest"]
    assert rest["api"] == rest["newest_known"] and rest["api"] in rest["offered"]
    if (major, minor) == (26, 5):
        assert info["data_parser"].endswith("v0.0.45") and rest["api"] == "v0.0.45"
        assert rest["deprecated"] == ["v0.0.42"]
    text = _slurmtower(cluster, "info")
    assert text.returncode == 0 and f"slurm_version: {install.version}" in text.stdout
    assert "warning" not in text.stderr, text.stderr
    for old in rest["deprecated"]:  # pinned to a deprecated version: warned, named what to use
        pinned = subprocess.run([".venv/bin/slurmtower", "info"], capture_output=True, text=True, timeout=120,
                                check=False, env={**cluster.command_env(), "SLURMTOWER_SLURM__REST_API_VERSION": old})
        assert pinned.returncode == 0, pinned.stderr
        assert pinned.stderr.startswith(f"slurmtower: warning: slurmrestd marks API {old} deprecated (")
        assert pinned.stderr.rstrip().endswith(f"slurm.rest_api_version pins it; without the pin slurmtower "
                                               f"uses {rest['newest_known']}")
        if old == "v0.0.42":
            assert "(since Slurm 26.05, removed in 26.11)" in pinned.stderr


def test_info_warns_when_the_pinned_rest_api_is_deprecated(devcluster: DevCluster) -> None:
    """22.05's slurmrestd marks v0.0.36 deprecated (26.05's: v0.0.42): pinned, ``info`` says so on
    stderr and names the version slurmtower uses without the pin; unpinned, no warning."""
    env = devcluster.command_env()
    plain = subprocess.run([".venv/bin/slurmtower", "info", "-o", "json"], capture_output=True, text=True,
                           timeout=120, check=False, env=env)
    assert plain.returncode == 0 and "warning" not in plain.stderr, plain.stderr
    rest = json.loads(plain.stdout)["rest"]
    assert rest["api"] == "v0.0.38" and rest["deprecated"] == ["v0.0.36"] and rest["pinned"] is False
    pinned = subprocess.run([".venv/bin/slurmtower", "info"], capture_output=True, text=True, timeout=120,
                            check=False, env={**env, "SLURMTOWER_SLURM__REST_API_VERSION": "v0.0.36"})
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stderr.strip().splitlines() == [
        "slurmtower: warning: slurmrestd marks API v0.0.36 deprecated (removed in Slurm 23.02): "
        "slurm.rest_api_version pins it; without the pin slurmtower uses v0.0.38"]
    assert "  api: v0.0.36" in pinned.stdout
