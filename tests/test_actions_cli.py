"""`slurmtower run`, `actions`, `audit` through the real console script."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import node_states, sh

pytestmark = pytest.mark.cluster

SCRIPT = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "slurmtower")


@pytest.fixture()
def cli(devcluster: Any, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run the console script against the devcluster with a private store."""
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}
    env.pop("SUDO_USER", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=60, check=False)

    return run


def test_issue_example_drain_and_resume(cli: Any, clean_nodes: Any) -> None:
    proc = cli("run", "slurm.node.drain", "nodes=n[1-2]", "reason=disk swap")
    assert proc.returncode == 0, proc.stderr
    env = yaml.safe_load(proc.stdout)
    assert env["status"] == "succeeded" and env["exit_code"] == 0 and env["stderr"] == ""
    assert env["parameters"]["nodes"] == "n[1-2]"
    reasons = sh("sinfo", "-R", "-h", "-o", "%60E|%N")
    assert "disk swap [slurmtower:root@cli]|n[1-2]" in reasons.replace("  ", "").replace(" |", "|")
    proc = cli("run", "slurm.node.resume", "nodes=n[1-2]", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "succeeded"
    assert all("DRAIN" not in s for s in node_states().values())
    audit = cli("audit", "--output", "json")
    records = [r for r in json.loads(audit.stdout) if r["outcome"] != "intent"]
    assert [r["action"] for r in records[:2]] == ["slurm.node.resume", "slurm.node.drain"]
    assert records[1]["who"] == "root" and records[1]["via"] == "cli"
    text = cli("audit").stdout
    assert "root@cli  slurm.node.drain  succeeded  n[1-2]" in text


def test_seed_examples(cli: Any) -> None:
    proc = cli("run", "slurm.config.get", "item=topology_plugin")
    assert proc.returncode == 0
    assert yaml.safe_load(proc.stdout)["result"] == {"topology_plugin": "topology/none"}
    proc = cli("run", "slurm.job.find", 'criterias={"batch_host": "n1"}')
    assert proc.returncode == 0 and isinstance(yaml.safe_load(proc.stdout)["result"], list)
    proc = cli("run", "slurm.node.get", "nodes=n1")
    assert proc.returncode == 0 and list(yaml.safe_load(proc.stdout)["result"]) == ["n1"]
    job = int(sh("sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp", "--hold", "--wrap", "true").strip())
    try:
        for action in ("slurm.job.get", "slurm.job.step.get"):
            proc = cli("run", action, f"jobids={job}")
            assert proc.returncode == 0, proc.stderr
            out = yaml.safe_load(proc.stdout)
            assert out["parameters"] == {"jobids": [job]} and list(out["result"]) == [str(job)]
    finally:
        sh("scancel", str(job), check=False)


BAD = [
    (["run", "slurm.node.drian", "nodes=n1"], "did you mean slurm.node.drain"),
    (["run", "slurm.node.drain", "nodes=n1", "color=red"], "unknown parameter 'color'"),
    (["run", "slurm.node.drain", "nodes=n1", "dry_run=perhaps"], "dry_run"),
    (["run", "slurm.node.drain", "nodes=n[1-"], "unclosed"),
    (["run", "slurm.node.drain", "nodes=n1,nx9"], "unknown node(s): nx9"),
    (["run", "slurm.node.drain", "nodes=n1", "reason="], "reason must not be empty"),
    (["run", "slurm.node.reserve", "nodes=n1", 'props={"flags": ["NOPE"]}'], "unknown reservation flag 'NOPE'"),
    (["run", "slurm.node.update", "nodes=n1", 'infos={"real_memory": 9}'], "cannot update node field"),
    (["run", "slurm.node.drain", "nodes"], "expected key=value"),
    (["run", "slurm.job.find", "criterias={bad json"], "not valid JSON"),
    (["nosuch"], "No such command 'nosuch'"),
    (["run"], "Missing argument 'action'"),
    (["run", "slurm.node.get", "nodes=n1", "--nope"], "No such option: --nope"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m.split("'")[0].strip()[:24] for _a, m in BAD])
def test_bad_input_exit_2_one_line_nothing_changed(cli: Any, args: list[str], message: str) -> None:
    before = sh("scontrol", "-o", "show", "node"), sh("scontrol", "-o", "show", "reservation", check=False)
    proc = cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmtower: error: ") and message in lines[0]
    assert proc.stdout == ""
    after = sh("scontrol", "-o", "show", "node"), sh("scontrol", "-o", "show", "reservation", check=False)
    assert _settable(after[0]) == _settable(before[0])
    assert after[1] == before[1]


def _settable(nodes: str) -> list[list[str]]:
    """What an action could have changed (loads and timestamps move on their own)."""
    keys = ("NodeName=", "State=", "Reason=", "Weight=", "Comment=", "AvailableFeatures=", "Gres=")
    return [[f for f in line.split() if f.startswith(keys)] for line in nodes.splitlines()]


def test_ownership_refusal_exit_3(cli: Any, clean_nodes: Any) -> None:
    sh("scontrol", "update", "nodename=n4", "state=drain", "reason=memtest failed")
    proc = cli("run", "slurm.node.resume", "nodes=n4")
    assert proc.returncode == 3
    assert "n4 is held by user:root ('memtest failed')" in proc.stderr and "force=true" in proc.stderr
    assert "DRAIN" in node_states()["n4"]
    assert cli("run", "slurm.node.resume", "nodes=n4", "force=true").returncode == 0
    assert "DRAIN" not in node_states()["n4"]


def test_dry_run_flag(cli: Any, clean_nodes: Any) -> None:
    proc = cli("run", "slurm.node.down", "nodes=n[1-4]", "--dry-run")
    assert proc.returncode == 0
    assert yaml.safe_load(proc.stdout)["dry_run"] is True
    assert all(not s.startswith("DOWN") for s in node_states().values())


def test_failed_action_exit_nonzero(cli: Any) -> None:
    proc = cli("run", "slurm.node.reserve", "nodes=n1", "reservation_name=st_cli_fail",
               'props={"users": ["no_such_user_abc"]}')
    try:
        assert proc.returncode != 0
        assert "slurm.node.reserve failed" in proc.stderr
        assert yaml.safe_load(proc.stdout)["status"] == "failed"
    finally:
        sh("scontrol", "delete", "reservationname=st_cli_fail", check=False)


def test_actions_list_and_show(cli: Any) -> None:
    proc = cli("actions")
    assert proc.returncode == 0
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == sorted([
        "slurm.config.get", "slurm.job.find", "slurm.job.get", "slurm.job.step.get", "slurm.node.down",
        "slurm.node.drain", "slurm.node.get", "slurm.node.maintain", "slurm.node.reserve", "slurm.node.resume",
        "slurm.node.unreserve", "slurm.node.update", "slurm.trigger.set", "slurm.trigger.unset", "slurm.job.why",
        *(f"slurm.job.{v}" for v in ("cancel", "hold", "release", "requeue", "suspend", "resume", "signal", "update")),
        *(f"slurm.reservation.{v}" for v in ("create", "update", "delete"))])
    show = cli("actions", "show", "slurm.node.drain").stdout
    assert "nodes (string | list[string]) (required)" in show  # a node set, or a list of them
    assert 'reason (string) default: "slurmtower: Drained using slurm.node.drain action"' in show
    schema = json.loads(cli("actions", "show", "slurm.trigger.unset", "-o", "json").stdout)
    assert schema["parameters"]["properties"]["user"]["default"] == "slurm"
    assert cli("actions", "show", "slurm.nope").returncode == 2


def test_a_read_from_the_cli_loads_no_database_or_web_library(cli: Any, devcluster: Any, tmp_path: Path) -> None:
    """The CLI's start-up: ``run slurm.node.get`` of a node in service opens no store, so it
    loads neither SQLAlchemy nor the web stack (a drain does open the store)."""
    heavy = "{'sqlalchemy', 'alembic', 'fastapi', 'starlette', 'uvicorn', 'httpx'}"
    code = ("import sys\nfrom slurmtower.cli.main import main\nsys.argv = ['slurmtower', *sys.argv[1:]]\n"
            "try:\n    main()\nfinally:\n"
            f"    print('loaded:', sorted({{m.split('.')[0] for m in sys.modules}} & {heavy}), file=sys.stderr)\n")
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}
    python = str(Path(SCRIPT).with_name("python"))

    def loaded(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
        res = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, env=env, timeout=60)
        return res, res.stderr.strip().splitlines()[-1]

    res, mods = loaded("run", "slurm.node.get", "nodes=n1", "-o", "json")
    assert res.returncode == 0 and "n1" in json.loads(res.stdout)["result"], res.stderr
    assert mods == "loaded: []"
    res, mods = loaded("run", "slurm.node.drain", "nodes=n1", "reason=x", "--dry-run", "-o", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["status"] == "succeeded", res.stderr
    assert "sqlalchemy" in mods  # the dry run is audited: the store is opened
