"""The CLI backend on every recorded Slurm release, through fake Slurm commands.

Only 22.05 runs here; 24.11 and 25.11 are served by small scripts on PATH that print the
recorded outputs (the real subprocess path, the real parsers). Each script logs its argv so
the tests see which source the client chose for each release.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from slurmtower.models import NodeFlag, NodeState
from slurmtower.nodeset import parse_nodeset
from slurmtower.slurm import CliSlurmClient, CommandRunner

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and not p.name.startswith("_"))

FAKE = r"""#!/usr/bin/env python3
import json, os, sys
from pathlib import Path
fx = Path(os.environ["FAKE_SLURM_FIXTURES"])
name = os.path.basename(sys.argv[0]); args = sys.argv[1:]
with open(os.environ["FAKE_SLURM_LOG"], "a") as log:
    log.write(json.dumps([name, *args]) + "\n")
index = json.loads((fx / "index.json").read_text())
def out(f):
    p = fx / f
    if not p.exists():
        print(f"{name}: unrecognized option '--json'", file=sys.stderr); sys.exit(1)
    sys.stdout.write(p.read_text()); sys.exit(0)
if name == "sinfo":
    if "-V" in args: print(index["slurm_version"]); sys.exit(0)
    if "--json" in args: out("sinfo.json")
if name == "scontrol":
    if args[:1] == ["ping"]: print("Slurmctld(primary) at x is UP"); sys.exit(0)
    words = [a for a in args if not a.startswith("-")]
    what = words[1] if len(words) > 1 else ""
    if words[:2] == ["show", "config"]: out("scontrol-show-config.txt")
    if "--json" in args: out(f"scontrol-show-{what}.json")
    if "-o" in args: out(f"scontrol-o-show-{what}.txt")
if name == "squeue" and "--json" in args: out("squeue.json")
if name == "sdiag": out("sdiag.json" if "--json" in args else "sdiag.txt")
if name == "strigger" and "--get" in args: out("strigger-get.txt")
print(f"fake {name}: no recording for {args}", file=sys.stderr); sys.exit(2)
"""


@pytest.fixture(params=RELEASES, ids=[f"slurm-{r}" for r in RELEASES])
def fake(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, CliSlurmClient, Path]:
    release: str = request.param
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cmd in ("sinfo", "scontrol", "squeue", "sdiag", "strigger"):
        script = bin_dir / cmd
        script.write_text(FAKE)
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "argv.log"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM_FIXTURES": str(FIXTURES / release),
           "FAKE_SLURM_LOG": str(log)}
    return release, CliSlurmClient(CommandRunner(env=env)), log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_client_uses_the_best_source_of_each_release(fake: tuple[str, CliSlurmClient, Path]) -> None:
    _release, client, log = fake
    client.nodes()
    client.partitions()
    client.stats()
    modern = client.version() >= (23, 2)
    calls = _calls(log)
    assert calls[0] == ["sinfo", "-V"]
    assert sum(1 for c in calls if c == ["sinfo", "-V"]) == 1  # detected once
    if modern:
        assert ["scontrol", "show", "node", "--json"] in calls
        assert ["scontrol", "show", "partition", "--json"] in calls
        assert ["sdiag", "--json"] in calls
    else:
        assert ["scontrol", "-o", "show", "node"] in calls
        assert ["scontrol", "-o", "show", "partition"] in calls
        assert ["sdiag"] in calls
    assert client.capabilities().scontrol_json is modern


def test_every_release_gives_the_same_node_and_partition_models(fake: tuple[str, CliSlurmClient, Path]) -> None:
    release, client, _log = fake
    nodes = {n.name[1:]: n for n in client.nodes()}  # n1/m1/p1 -> "1"
    assert sorted(nodes) == ["1", "2", "3", "4"]
    assert all(n.cpus == 2 for n in nodes.values())
    drained = nodes["4"]
    assert NodeFlag.DRAIN in drained.flags and drained.reason == "disk replace"
    if release != "22.05":  # only the newer recordings have a DOWN node and a reservation
        assert nodes["3"].state == NodeState.DOWN and nodes["3"].reason == "bad dimm"
        assert {r.name for r in client.reservations()} == {"maint1", "future1"}
    parts = {p.name: p for p in client.partitions()}
    assert set(parts) == {"debug", "batch", "short"}
    assert parts["batch"].max_time is not None and parts["batch"].max_time.total_seconds() == 3600
    prefix = next(iter(client.nodes())).name[0]
    assert [n.name for n in client.nodes(parse_nodeset(f"{prefix}[2-3]"))] == [f"{prefix}2", f"{prefix}3"]


def test_every_release_reads_jobs_stats_config_and_triggers(fake: tuple[str, CliSlurmClient, Path]) -> None:
    release, client, _log = fake
    index = json.loads((FIXTURES / release / "index.json").read_text())
    jobs = {j.job_id: j for j in client.jobs()}
    failed = int(index["sample_jobs"].get("failed_exit3") or index["sample_jobs"]["failed"])
    if failed in jobs:  # still in slurmctld when recorded
        assert jobs[failed].exit_code is not None and jobs[failed].exit_code.return_code == 3
    assert client.stats().server_thread_count is not None
    assert client.config().cluster_name == index["cluster"]
    triggers = client.triggers()
    assert triggers and all(t.trigger_id > 0 for t in triggers)
    assert any("PERM" in t.flags for t in triggers)
