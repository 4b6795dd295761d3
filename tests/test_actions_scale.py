"""Node and job actions at scale: one Slurm call, reads of only what is acted on, and a
per-node account of what happened, partial outcomes included.

The 4-node devcluster covers the calls each action makes and a node whose slurmd was
killed; the 1,000-node scale lab (``scale_cluster``: n1-n4 run a slurmd, n5-n1000 have none
and show ``unknown*``) the 1,000-node drain's time and the resume Slurm only half does.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmtower.actions import PARTIAL_EXIT_CODE, Catalogue
from slurmtower.devcluster import DevCluster
from slurmtower.errors import NotFound
from slurmtower.nodeset import NodeSet
from slurmtower.settings import Settings, load_settings
from slurmtower.slurm import CliSlurmClient, CommandRunner, RestSlurmClient

from .conftest import node_states, scale_sh, sh, wait_for

pytestmark = pytest.mark.cluster

SCRIPT = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "slurmtower")


def run(cat: Catalogue, name: str, params: dict[str, Any], who: str = "alice") -> Any:
    return cat.execute(name, params, principal=who, via="cli")


def sbatch_held(*args: str) -> int:
    out = sh("sbatch", "--parsable", "--hold", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args,
             "--wrap", "true")
    return int(out.strip().split(";")[0])


class Calls:
    """The Slurm commands a runner ran (kind, e.g. ``scontrol show``, plus argv)."""

    def __init__(self, runner: CommandRunner) -> None:
        self.kinds: list[str] = []
        self._runner = runner

    def __enter__(self) -> Calls:
        self._runner.observers.append(self._seen)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._runner.observers.remove(self._seen)

    def _seen(self, kind: str, _seconds: float, _ok: bool) -> None:
        self.kinds.append(kind)


@pytest.fixture()
def catalogue(settings: Settings, client: CliSlurmClient) -> Iterator[Catalogue]:
    # The client's once-per-process questions (`sinfo -V`, which commands print JSON), asked
    # before any test counts calls: whichever test of the session comes first.
    client.version()
    client.json_forms()
    cat = Catalogue.from_settings(settings, client=client)
    yield cat
    cat.store.close()


# -- the 4-node devcluster ------------------------------------------------------------------


def test_drain_and_resume_read_only_their_nodes(catalogue: Catalogue, runner: CommandRunner,
                                                clean_nodes: Any) -> None:
    with Calls(runner) as calls:
        env = run(catalogue, "slurm.node.drain", {"nodes": "n[1-2]", "reason": "disk swap"})
    assert env.status == "succeeded" and env.result["outcome"] == {"drained": "n[1-2]"}
    # nodes before (the ownership check and the audit), the one update, nodes after
    assert calls.kinds == ["scontrol show", "scontrol update", "scontrol show"]
    with Calls(runner) as calls:
        env = run(catalogue, "slurm.node.resume", {"nodes": "n[1-2]"})
    assert env.status == "succeeded" and env.exit_code == 0
    assert env.result["outcome"] == {"resumed": "n[1-2]"} and env.result["not_responding"] is None
    assert calls.kinds == ["scontrol show", "scontrol update", "scontrol show"]


def test_resume_of_a_node_whose_slurmd_is_dead_says_it_was_not_responding(
        catalogue: Catalogue, clean_nodes: DevCluster) -> None:
    clean_nodes.fail_node("n2")
    wait_for(lambda: "NOT_RESPONDING" in node_states()["n2"], 30, what="n2 not responding")
    # slurmctld may already hold n2 DOWN ("Not responding"): taking that over needs force
    drain = run(catalogue, "slurm.node.drain", {"nodes": "n[1-2]", "reason": "psu", "force": True})
    assert drain.status == "succeeded" and drain.result["outcome"] == {"drained": "n[1-2]"}
    env = run(catalogue, "slurm.node.resume", {"nodes": "n[1-2]"})
    assert env.status == "succeeded", env.stderr
    assert env.result["outcome"] == {"resumed": "n[1-2]"}
    assert env.result["not_responding"] == "n2"
    assert "not responding before the resume (in service once their slurmd registers): n2" in env.stdout
    record = catalogue.store.list_audit(limit=1)[0]
    assert record.outcome == "succeeded"
    assert "NOT_RESPONDING" in record.before["n2"]["state"] and "DRAIN" in record.before["n2"]["state"]
    assert record.after["n2"]["outcome"] == "resumed" and "DRAIN" not in record.after["n2"]["state"]
    assert record.after["n1"]["reason"] is None


#: The held jobs' name, new each run: jobs an earlier run cancelled stay in squeue (with
#: their JobHeldUser reason) for MinJobAge, and a rerun of this module must not find them.
FIND_NAME = f"st-scale-find-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def held_jobs(devcluster: DevCluster) -> Iterator[list[int]]:
    jobs = [sbatch_held("-J", FIND_NAME, "-A", "physics", "-p", "batch") for _ in range(3)]
    yield jobs
    sh("scancel", *map(str, jobs), check=False)


def test_job_find_on_a_text_form_field_is_one_squeue_call(catalogue: Catalogue, runner: CommandRunner,
                                                          held_jobs: list[int]) -> None:
    with Calls(runner) as calls:
        env = run(catalogue, "slurm.job.find", {"criterias": {"name": FIND_NAME,
                                                              "state_reason": "JobHeldUser"}})
    assert env.result == sorted(held_jobs)
    assert calls.kinds == ["squeue"]  # Slurm's name filter, then the text form of what it leaves


def test_job_find_on_a_full_record_field_reads_only_the_narrowed_jobs(
        catalogue: Catalogue, runner: CommandRunner, held_jobs: list[int]) -> None:
    with Calls(runner) as calls:
        env = run(catalogue, "slurm.job.find", {"criterias": {"name": FIND_NAME, "restarts": 0}})
    assert env.result == sorted(held_jobs)
    # the ids by name, then one single-job read per id: never every job's record
    assert calls.kinds == ["squeue"] + ["scontrol show"] * len(held_jobs)


def test_job_get_reads_only_the_asked_job(catalogue: Catalogue, runner: CommandRunner,
                                          held_jobs: list[int]) -> None:
    with Calls(runner) as calls:
        env = run(catalogue, "slurm.job.get", {"jobids": held_jobs[0]})
    assert calls.kinds == ["scontrol show"]
    job = env.result[str(held_jobs[0])][0]
    assert (job["name"], job["account"], job["partition"], job["state"]) == (FIND_NAME, "physics",
                                                                              "batch", "PENDING")
    assert job["state_reason"] == "JobHeldUser" and job["from_accounting"] is False


def test_rest_backend_reads_a_few_nodes_and_jobs_one_by_one(devcluster: DevCluster, client: CliSlurmClient,
                                                             held_jobs: list[int]) -> None:
    rest = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", user="root", jwt_key_file=devcluster.jwt_key)
    paths: list[str] = []
    rest.observers.append(lambda kind, _s, _ok: paths.append(kind))
    try:
        nodes = rest.nodes(NodeSet("n[2-3]"))
        assert [n.name for n in nodes] == ["n2", "n3"]
        assert [(n.state, n.flags) for n in nodes] == [(n.state, n.flags) for n in client.nodes(NodeSet("n[2-3]"))]
        with pytest.raises(NotFound, match="n9"):
            rest.nodes(NodeSet("n[3,9]"))
        jobs = rest.jobs([held_jobs[0], 999999])
        assert [j.job_id for j in jobs] == [held_jobs[0]] and jobs[0].name == FIND_NAME
        # /node/{name} and /job/{id}, never every node's or job's record
        assert set(paths) == {"rest openapi", "rest node", "rest job"}, paths
    finally:
        rest.close()


# -- the 1,000-node scale lab ---------------------------------------------------------------


@pytest.fixture()
def lab(scale_cluster: DevCluster, tmp_path: Path) -> Iterator[tuple[DevCluster, Catalogue, NodeSet]]:
    """The lab's catalogue (a private store) and the nodes this test may act on: those nobody
    holds (other sessions share the lab). Afterwards the lab's node states are reset: in
    22.05 a never-registered node that was drained and resumed turns DOWN ("Not responding")
    some 20 s later, and only a slurmctld restart without saved node states brings back
    ``unknown*``."""
    settings = load_settings(scale_cluster.tower_conf, environ={})
    settings.state_dir = tmp_path
    settings.actions.breaker_enabled = False  # 1,000 nodes at once: what the breaker refuses
    runner = CommandRunner(timeout=60, env={"SLURM_CONF": str(scale_cluster.slurm_conf)})
    cat = Catalogue.from_settings(settings, client=CliSlurmClient(runner))
    cat.client.version()
    free = NodeSet([n.name for n in cat.client.nodes() if not n.reason and not n.flags & {"DRAIN", "FAIL"}])
    assert len(free) >= 990, f"other sessions hold too many of the lab's nodes: {NodeSet('n[1-1000]') - free}"
    yield scale_cluster, cat, free
    cat.store.close()
    scale_cluster.reset_node_states()


def test_drain_of_1000_nodes_is_one_call_within_a_second(lab: tuple[DevCluster, Catalogue, NodeSet]) -> None:
    cluster, cat, targets = lab
    runner = cat.client.runner  # type: ignore[attr-defined]
    with Calls(runner) as calls:
        env = run(cat, "slurm.node.drain", {"nodes": str(targets), "reason": "rack power"})
    assert env.status == "succeeded", env.stderr
    took = (env.end_time - env.start_time).total_seconds()
    assert took <= 1.0, f"the drain of {len(targets)} nodes took {took:.2f} s inside the action"
    assert calls.kinds == ["scontrol show", "scontrol update", "scontrol show"]
    assert env.result["outcome"] == {"drained": str(targets)}
    drained = scale_sh(cluster, "sinfo", "-h", "-N", "-t", "drain", "-o", "%N").split()
    assert set(NodeSet(drained)) >= set(targets)
    record = cat.store.list_audit(limit=1)[0]
    assert record.outcome == "succeeded" and record.nodes == str(targets)
    assert len(record.before) == len(record.after) == len(targets)
    assert {a["outcome"] for a in record.after.values()} == {"drained"}


def test_resume_of_1000_drained_nodes_without_slurmd_is_partial(lab: tuple[DevCluster, Catalogue, NodeSet],
                                                                tmp_path: Path) -> None:
    cluster, cat, targets = lab
    live, silent = targets & NodeSet("n[1-4]"), targets & NodeSet("n[5-1000]")
    run(cat, "slurm.node.drain", {"nodes": str(targets), "reason": "rack power"}, who="root")
    env = {**cluster.command_env(), "SLURMTOWER_STATE_DIR": str(tmp_path)}
    env.pop("SUDO_USER", None)
    proc = subprocess.run([SCRIPT, "run", "slurm.node.resume", f"nodes={targets}"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    # Slurm cleared every DRAIN, set the live nodes' state and refused the never-registered ones'
    assert proc.returncode == PARTIAL_EXIT_CODE == 4, proc.stderr
    assert proc.stderr.startswith("slurmtower: partial: slurm.node.resume: drain_cleared: ")
    envelope = yaml.safe_load(proc.stdout)
    assert envelope["status"] == "partial" and envelope["exit_code"] == 4 and envelope["error"] is None
    assert envelope["result"]["outcome"] == {"drain_cleared": str(silent), **({"resumed": str(live)} if live else {})}
    assert envelope["result"]["not_responding"] == str(silent)
    assert "Invalid node state specified" in envelope["stderr"]
    assert not set(NodeSet(scale_sh(cluster, "sinfo", "-h", "-N", "-t", "drain", "-o", "%N").split())) & set(targets)
    audit = json.loads(subprocess.run([SCRIPT, "audit", "--limit", "1", "--output", "json"], capture_output=True,
                                      text=True, env=env, timeout=60, check=True).stdout)[0]
    assert audit["outcome"] == "partial" and "Invalid node state specified" in audit["message"]
    first = next(iter(silent))
    # NOT_RESPONDING once slurmctld's first ping of the node failed
    assert audit["before"][first]["state"] in {"UNKNOWN+DRAIN", "UNKNOWN+DRAIN+NOT_RESPONDING"}
    assert audit["before"][first]["reason"] == "rack power [slurmtower:root@cli]"
    assert audit["after"][first] == {"state": "UNKNOWN+NOT_RESPONDING", "reason": None, "outcome": "drain_cleared"}
    assert all(audit["after"][n]["outcome"] == "resumed" for n in live)
