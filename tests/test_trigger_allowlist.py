"""``auth.trigger_program_allowlist`` matches whole path components (issue 12, item 8).

slurmctld runs a trigger's program as SlurmUser; a ``prefix*`` entry once matched with
``startswith``, so ``/opt/hooks/../../bin/sh -c id`` passed. Every attempt below goes
through the real action, ``slurm.trigger.set``, over HTTP as an admin (dry runs: the check
comes before anything is armed) and from the CLI.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.settings import Settings

from .auth_helpers import ADMIN, bearer, running_server, with_tokens
from .conftest import sh

pytestmark = pytest.mark.cluster

SCRIPT = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "slurmtower")


@pytest.fixture()
def hooks(tmp_path: Path) -> Path:
    """An allowed hook directory with one program, a symlink out of it to /bin/sh, and the
    neighbours a prefix match would confuse with it."""
    root = tmp_path / "opt"
    hooks = root / "hooks"
    (hooks / "sub").mkdir(parents=True)
    for path in (hooks / "report", hooks / "sub" / "x", root / "hooks-evil" / "x", root / "hooks-a"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    (hooks / "shell").symlink_to("/bin/sh")
    return hooks


def _server(settings: Settings, allowlist: list[str]) -> Iterator[httpx.Client]:
    with_tokens(settings)
    settings.auth.trigger_program_allowlist = allowlist
    with running_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


@pytest.fixture()
def api(settings: Settings, hooks: Path) -> Iterator[httpx.Client]:
    yield from _server(settings, [f"{hooks}/*"])


def _set(http: httpx.Client, program: str) -> httpx.Response:
    return http.post("/actions/slurm.trigger.set", headers=bearer(ADMIN),
                     json={"program": program, "event": "down", "dry_run": True})


@pytest.mark.parametrize(("program", "canonical"), [
    ("{h}/report", "{h}/report"),
    ("{h}/report --node n1", "{h}/report --node n1"),
    ("{h}//report", "{h}/report"),
    ("{h}/./report", "{h}/report"),
], ids=["plain", "arguments", "double-slash", "dot"])
def test_a_program_in_the_allowed_directory_passes_in_canonical_form(api: httpx.Client, hooks: Path,
                                                                     program: str, canonical: str) -> None:
    resp = _set(api, program.format(h=hooks))
    assert resp.status_code == 200, resp.text
    assert resp.json()["result"]["trigger"]["program"] == canonical.format(h=hooks)


@pytest.mark.parametrize("program", [
    "{h}/../../bin/sh -c id",
    "{h}/../hooks/report",
    "{h}/./../../bin/sh",
    "opt/hooks/report",
    "{h}/report\t/bin/sh",
], ids=["dotdot-out", "dotdot-back-in", "dot-then-dotdot", "relative", "tab"])
def test_traversal_and_relative_paths_are_a_400_naming_program(api: httpx.Client, hooks: Path, program: str) -> None:
    before = sh("strigger", "--get", check=False)
    resp = _set(api, program.format(h=hooks))
    assert resp.status_code == 400, resp.text
    assert resp.json()["param"] == "program"
    assert sh("strigger", "--get", check=False) == before


@pytest.mark.parametrize("program", [
    "{h}/shell -c id",  # a symlink in the directory, to /bin/sh
    "{h}-evil/x",  # the prefix without its separator
    "{h}/sub/x",  # '*' does not cross a '/'
    "/bin/sh -c id",
], ids=["symlink-out", "sibling-prefix", "subdirectory", "elsewhere"])
def test_programs_outside_the_allowed_directory_are_refused(api: httpx.Client, hooks: Path, program: str) -> None:
    resp = _set(api, program.format(h=hooks))
    assert resp.status_code == 403, resp.text
    assert "allowlist" in resp.json()["detail"]


def test_an_entry_without_a_separator_matches_names_not_directories(settings: Settings, hooks: Path) -> None:
    for http in _server(settings, [f"{hooks}*"]):
        assert _set(http, f"{hooks}-a").status_code == 200
        assert _set(http, f"{hooks}-evil/x").status_code == 403
        assert _set(http, f"{hooks}/report").status_code == 403


def test_the_cli_refuses_traversal_too(devcluster: DevCluster, tmp_path: Path, hooks: Path) -> None:
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path / "state")}

    def cli(program: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, "run", "slurm.trigger.set", f"program={program}", "event=down", "--dry-run",
                               "-o", "json"], capture_output=True, text=True, env=env, timeout=60, check=False)

    refused = cli(f"{hooks}/../../bin/sh -c id")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "program" in refused.stderr and "'..'" in refused.stderr
    ok = cli(f"{hooks}//report")
    assert ok.returncode == 0, ok.stderr
    assert f'"program": "{hooks}/report"' in ok.stdout
