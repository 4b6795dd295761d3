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
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient, CommandRunner
from slurmtower.slurm.info import cluster_info

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
JSON = any(a == "--json" or a.startswith("--json=") for a in args)
def out(f):
    p = fx / f
    if not p.exists():
        print(f"{name}: unrecognized option '--json'", file=sys.stderr); sys.exit(1)
    text = p.read_text()
    if os.environ.get("FAKE_SLURM_NEWER") and "--json" in args and f.endswith(".json"):
        # A release newer than slurmtower: its default format (v0.0.46) in a shape it cannot read.
        doc = json.loads(text)
        doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.46"
        for key in ("nodes", "jobs", "partitions", "reservations", "statistics", "slurm_conf"):
            if key in doc:
                doc[key + "_v46"] = doc.pop(key)
        text = json.dumps(doc)
    sys.stdout.write(text); sys.exit(0)
if name == "sinfo":
    if "-V" in args: print(index["slurm_version"]); sys.exit(0)
    if JSON: out("sinfo.json")
if name == "scontrol":
    if args[:1] == ["ping"]: print("Slurmctld(primary) at x is UP"); sys.exit(0)
    words = [a for a in args if not a.startswith("-")]
    what = words[1] if len(words) > 1 else ""
    if words[:2] == ["show", "config"]:
        # 24.11/25.11 accept --json here and print the text form; 26.05 prints JSON.
        out("scontrol-show-config.json" if JSON and (fx / "scontrol-show-config.json").exists()
            else "scontrol-show-config.txt")
    if JSON: out(f"scontrol-show-{what}.json")
    if "-o" in args: out(f"scontrol-o-show-{what}.txt")
if name == "squeue" and JSON: out("squeue.json")
if name == "sdiag": out("sdiag.json" if JSON else "sdiag.txt")
if name == "strigger" and "--get" in args: out("strigger-get.txt")
print(f"fake {name}: no recording for {args}", file=sys.stderr); sys.exit(2)
"""


def fake_commands(tmp_path: Path, release: str, **extra: str) -> tuple[dict[str, str], Path]:
    """The fake Slurm commands of ``release`` first on PATH: (their environment, the argv log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cmd in ("sinfo", "scontrol", "squeue", "sdiag", "strigger"):
        script = bin_dir / cmd
        script.write_text(FAKE)
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "argv.log"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM_FIXTURES": str(FIXTURES / release),
           "FAKE_SLURM_LOG": str(log), **extra}
    return env, log


@pytest.fixture(params=RELEASES, ids=[f"slurm-{r}" for r in RELEASES])
def fake(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, CliSlurmClient, Path]:
    release: str = request.param
    env, log = fake_commands(tmp_path, release)
    return release, CliSlurmClient(CommandRunner(env=env)), log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_client_uses_the_best_source_of_each_release(fake: tuple[str, CliSlurmClient, Path]) -> None:
    _release, client, log = fake
    client.nodes()
    client.partitions()
    client.stats()
    modern = client.version() >= (23, 2)
    client.config()
    calls = _calls(log)
    # The JSON forms are asked once, before the first read: which commands print JSON.
    assert calls[0] == ["scontrol", "show", "partition", "--json"]
    assert sum(1 for c in calls if c == ["sinfo", "-V"]) <= 1  # the version, read once
    config_json = (FIXTURES / _release / "scontrol-show-config.json").exists()
    forms = client.json_forms()
    assert (forms.scontrol, forms.sdiag, forms.config) == (modern, modern, config_json)
    # only the probe: the configuration itself is read in the text form on every release
    assert sum(1 for c in calls if c[:2] == ["scontrol", "show"] and c[-2:] == ["config", "--json"]) == \
        (1 if modern else 0)
    if modern:
        recorded = json.loads((FIXTURES / _release / "index.json").read_text())["data_parser"].split()[0]
        assert forms.data_parser is not None and recorded.endswith(forms.data_parser.rsplit("/", 1)[-1])
    # every node in the text form on every release (the JSON costs scontrol 7.7 s and 463 MB at
    # 10,000 nodes on 26.05, the text 0.16 s and 16 MB)
    assert ["scontrol", "-o", "show", "node"] in calls
    assert not any(c[:3] == ["scontrol", "show", "node"] for c in calls)
    if modern:
        assert ["scontrol", "show", "partition", "--json"] in calls
        assert ["sdiag", "--json"] in calls
    else:
        assert ["scontrol", "-o", "show", "partition"] in calls
        assert ["sdiag"] in calls
    caps = client.capabilities()
    assert caps.scontrol_json is modern and caps.config_json is config_json
    assert ["scontrol", "show", "config"] in calls


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


def test_a_release_newer_than_slurmtower_is_asked_for_the_newest_format_it_parses(tmp_path: Path) -> None:
    """26.11 prints data_parser v0.0.46 by default, which this slurmtower does not parse: the
    probe sees that and every read asks for v0.0.45 by name (26.05's commands take
    ``--json=v0.0.44`` the same way). Served here by 26.05's recordings."""
    newest = max(p.name for p in FIXTURES.iterdir() if (p / "scontrol-show-config.json").exists())
    env, log = fake_commands(tmp_path, newest, FAKE_SLURM_NEWER="1")
    client = CliSlurmClient(CommandRunner(env=env))
    forms = client.json_forms()
    assert forms.data_parser is not None and forms.data_parser.endswith("v0.0.46")
    assert forms.json_flag == "--json=v0.0.45"
    assert sorted(p.name for p in client.partitions()) == ["batch", "debug", "short"]
    assert len(client.nodes()) == 4 and client.stats().server_thread_count is not None
    reads = [c for c in _calls(log)[3:] if any(a.startswith("--json") for a in c)]
    assert reads and all("--json=v0.0.45" in c for c in reads)
    facts, warnings = cluster_info(Settings(), client)  # what `slurmtower info` prints
    assert facts["cli_json_option"] == "--json=v0.0.45"
    assert warnings == ["Slurm's commands print data_parser v0.0.46 by default, newer than this slurmtower "
                        "parses: it asks for v0.0.45 (--json=v0.0.45); upgrade slurmtower"]
