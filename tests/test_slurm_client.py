"""The CLI backend against the real local cluster: every read and write, and the errors."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.errors import NodeSetError, NotFound, SlurmRequestError, SlurmUnavailable
from slurmtower.models import JobState, NodeFlag, NodeState
from slurmtower.nodeset import NodeSet, parse_nodeset
from slurmtower.slurm import CliSlurmClient, CommandRunner

from .conftest import node_states, sh, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.release]


def test_version_is_detected_once_from_sinfo(client: CliSlurmClient) -> None:
    version = client.version()
    # "slurm-wlm 22.05.8" (Debian) or "slurm 26.05.3" (a prefix install)
    assert version.release == sh("sinfo", "-V").split()[-1]
    caps = client.capabilities()
    assert caps.backend == "cli"
    modern = (version.major, version.minor) >= (23, 2)
    assert caps.scontrol_json is modern and caps.sdiag_json is modern  # 22.05 has no scontrol --json
    assert caps.config_json is ((version.major, version.minor) >= (26, 5))
    assert "drain" in caps.writes


def test_nodes_lists_the_four_nodes_with_their_partitions(client: CliSlurmClient) -> None:
    nodes = {n.name: n for n in client.nodes()}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    assert nodes["n1"].cpus == 2
    assert nodes["n1"].real_memory_mib == 2000
    assert set(nodes["n1"].partitions or []) == {"debug", "batch"}
    assert set(nodes["n3"].partitions or []) == {"debug", "short"}
    assert all(n.state in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED) for n in nodes.values())


def test_nodes_of_a_node_set_and_unknown_node(client: CliSlurmClient) -> None:
    assert [n.name for n in client.nodes(parse_nodeset("n[2-3]"))] == ["n2", "n3"]
    with pytest.raises(NotFound, match="n9"):
        client.nodes(parse_nodeset("n[1,9]"))


def test_partitions_are_read_with_limits(client: CliSlurmClient) -> None:
    parts = {p.name: p for p in client.partitions()}
    assert set(parts) == {"debug", "batch", "short"}
    assert parts["debug"].is_default is True
    assert parts["batch"].max_time is not None and parts["batch"].max_time.total_seconds() == 3600
    assert parts["debug"].max_time is None  # INFINITE
    assert parts["short"].nodes == "n[3-4]"


def test_config_has_every_key_in_snake_case(client: CliSlurmClient) -> None:
    config = client.config()
    assert config.cluster_name == sh("scontrol", "show", "config").split("ClusterName", 1)[1].split()[1]
    assert config.get("select_type") == "select/cons_tres"
    assert config.get("return_to_service") == "1"
    assert config.slurm_user == "slurm"
    raw = sh("scontrol", "show", "config")
    keys = [line.split("=", 1)[0].strip() for line in raw.splitlines() if " = " in line]
    assert len(config.items) >= len(keys) - 5


def test_controller_statistics_come_from_sdiag(client: CliSlurmClient) -> None:
    stats = client.stats()
    assert stats.server_thread_count is not None and stats.server_thread_count >= 1
    assert any(r.name.startswith("REQUEST_") for r in stats.rpcs_by_type)


def test_jobs_steps_and_job_ids_with_slurm_side_filters(client: CliSlurmClient) -> None:
    held_name = f"st-client-held-{uuid.uuid4().hex[:8]}"
    job = int(sh("runuser", "-u", "alice", "--", "sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp",
                 "-J", "st-client-steps", "-A", "physics", "-p", "debug", "-t", "5",
                 "--wrap", "srun sleep 120").strip())
    held = int(sh("runuser", "-u", "bob", "--", "sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp",
                  "-J", held_name, "-A", "chemistry", "-p", "batch", "-t", "5", "--hold",
                  "--wrap", "true").strip())
    try:
        wait_for(lambda: any(s.job_id == job and s.step_id == "0" for s in client.job_steps([job])), 30,
                 what="the srun step")
        jobs = {j.job_id: j for j in client.jobs([job, held])}
        assert jobs[job].state == JobState.RUNNING
        assert jobs[job].user_name == "alice" and jobs[job].account == "physics"
        assert jobs[held].state == JobState.PENDING
        assert client.job_ids(users=["bob"], states=["PENDING"]) == [held] or held in client.job_ids(
            users=["bob"], states=["PENDING"])
        assert job not in client.job_ids(users=["bob"])
        assert client.job_ids(partitions=["batch"], names=[held_name]) == [held]
        assert job in client.job_ids(nodes=NodeSet(jobs[job].nodes or ""))
        steps = client.job_steps([job])
        assert {s.job_id for s in steps} == {job}
    finally:
        sh("scancel", str(job), str(held), check=False)


def test_reservation_create_update_delete(client: CliSlurmClient) -> None:
    name = "st-client-resv"
    sh("scontrol", "delete", f"reservationname={name}", check=False)
    created = client.create_reservation(name, nodes=parse_nodeset("n1"), users=["root"],
                                        flags=["MAINT", "IGNORE_JOBS"])
    try:
        assert created == name
        resv = {r.name: r for r in client.reservations()}[name]
        assert resv.nodes == "n1" and "MAINT" in resv.flags
        client.update_reservation(name, nodes=parse_nodeset("n[1-2]"))
        assert {r.name: r for r in client.reservations()}[name].nodes == "n[1-2]"
    finally:
        client.delete_reservation(name)
    assert name not in {r.name for r in client.reservations()}
    with pytest.raises(SlurmRequestError, match="(?i)invalid"):
        client.delete_reservation(name)


def test_trigger_set_as_slurm_user_listed_and_cleared(client: CliSlurmClient) -> None:
    tid = client.set_trigger(event="down", program="/bin/true st-client-test", nodes=parse_nodeset("n4"))
    try:
        trig = {t.trigger_id: t for t in client.triggers()}[tid]
        assert trig.type == "down" and trig.user == "slurm" and trig.res_id == "n4"
    finally:
        client.clear_triggers([tid])
    assert tid not in {t.trigger_id for t in client.triggers()}


def test_drain_and_resume_a_node_set_in_one_call(client: CliSlurmClient, clean_nodes: DevCluster) -> None:
    calls: list[str] = []
    client.runner.observers.append(lambda kind, _s, _ok: calls.append(kind))
    try:
        client.drain(parse_nodeset("n[1-2]"), reason="st-client disk swap")
    finally:
        client.runner.observers.pop()
    assert calls == ["scontrol update"]
    states = node_states()
    assert "DRAIN" in states["n1"] and "DRAIN" in states["n2"] and "DRAIN" not in states["n3"]
    nodes = {n.name: n for n in client.nodes()}
    assert NodeFlag.DRAIN in nodes["n1"].flags
    assert nodes["n1"].reason == "st-client disk swap"
    assert nodes["n1"].reason_set_by_user == "root"
    client.resume(parse_nodeset("n[1-2]"))
    wait_for(lambda: all("DRAIN" not in node_states()[n] for n in ("n1", "n2")), 10, what="resume")


def test_down_then_update_fields(client: CliSlurmClient, clean_nodes: DevCluster) -> None:
    client.down(parse_nodeset("n3"), reason="st-client down")
    assert node_states()["n3"].startswith("DOWN")
    client.update_nodes(parse_nodeset("n4"), weight="5", comment="st comment", features="dev,ssd")
    n4 = client.nodes(parse_nodeset("n4"))[0]
    assert n4.weight == 5 and n4.comment == "st comment" and "ssd" in (n4.features or [])
    client.update_nodes(parse_nodeset("n4"), weight="1", comment="", active_features="dev", features="dev")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"state": "DRAIN"}, "(?i)reason"),
        ({"state": "MAINT", "reason": "x"}, "(?i)valid states are"),
    ],
    ids=["drain-without-reason", "invalid-state"],
)
def test_bad_node_updates_carry_slurms_message_and_change_nothing(
    client: CliSlurmClient, clean_nodes: DevCluster, kwargs: dict[str, str], message: str
) -> None:
    before = node_states()
    with pytest.raises(SlurmRequestError, match=message) as exc:
        client.update_nodes(parse_nodeset("n1"), **kwargs)
    assert exc.value.returncode == 1 and exc.value.argv is not None and exc.value.argv[0] == "scontrol"
    assert node_states() == before


def test_unknown_node_and_malformed_node_set(client: CliSlurmClient, clean_nodes: DevCluster) -> None:
    before = node_states()
    with pytest.raises(SlurmRequestError, match="(?i)invalid node name"):
        client.drain(NodeSet("n99"), reason="x")
    with pytest.raises(NodeSetError):
        client.drain(parse_nodeset("n[1-"), reason="x")
    assert node_states() == before


def test_devcluster_up_is_idempotent_and_fast(devcluster: DevCluster) -> None:
    took = devcluster.up()
    assert took < 3
    assert f"SLURM_CONF={devcluster.slurm_conf}" in devcluster.env_exports()


@pytest.mark.slow
def test_fail_node_makes_it_down_and_restore_brings_it_back(client: CliSlurmClient,
                                                           clean_nodes: DevCluster) -> None:
    t0 = time.monotonic()
    clean_nodes.fail_node("n2")
    wait_for(lambda: node_states()["n2"].startswith("DOWN"), 25, what="n2 DOWN")
    assert time.monotonic() - t0 < 20
    clean_nodes.restore_node("n2")
    wait_for(lambda: node_states()["n2"] in ("IDLE", "MIXED", "ALLOCATED"), 20, what="n2 back")


@pytest.mark.slow
def test_slurmctld_stopped_is_unavailable_not_a_bad_request(devcluster: DevCluster) -> None:
    pid = int((devcluster.run_dir / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 30, what="slurmctld to stop")
    try:
        quick = CliSlurmClient(CommandRunner(timeout=20, env={"SLURM_CONF": str(devcluster.slurm_conf)}))
        t0 = time.monotonic()
        with pytest.raises(SlurmUnavailable):
            quick.nodes()
        assert time.monotonic() - t0 < 25
    finally:
        devcluster.up()
    assert CliSlurmClient(CommandRunner(env={"SLURM_CONF": str(devcluster.slurm_conf)})).ping()


def test_fail_state_with_reason_and_undrain(client: CliSlurmClient, clean_nodes: DevCluster) -> None:
    client.update_nodes(parse_nodeset("n4"), state="FAIL", reason="st-client flaky")
    n4 = client.nodes(parse_nodeset("n4"))[0]
    assert NodeFlag.FAIL in n4.flags and n4.reason == "st-client flaky"
    client.resume(parse_nodeset("n4"))
    wait_for(lambda: "FAIL" not in node_states()["n4"], 10, what="n4 out of FAIL")
    client.undrain(parse_nodeset("n3"))  # accepted on a node that is not drained
    assert "DRAIN" not in node_states()["n3"]
