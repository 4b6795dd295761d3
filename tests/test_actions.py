"""Every catalogue action against the real devcluster, its error cases, ownership and audit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from slurmtower.actions import ActionStore, Catalogue
from slurmtower.errors import Conflict, InvalidInput, NodeSetError, NotFound, PermissionDenied
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient

from .conftest import node_states, reason_of, sh, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.release]

RESV = "st_test_resv"


@pytest.fixture()
def catalogue(settings: Settings, client: CliSlurmClient) -> Iterator[Catalogue]:
    cat = Catalogue.from_settings(settings, client=client)
    yield cat
    cat.store.close()


def cluster_state() -> dict[str, Any]:
    """What an error must leave untouched: node states and reasons, reservations, triggers."""
    nodes = sh("scontrol", "-o", "show", "node")
    reasons = {line.split()[0]: [f for f in line.split() if f.startswith(("State=", "Reason="))]
               for line in nodes.splitlines()}
    return {"nodes": reasons, "resv": sh("scontrol", "-o", "show", "reservation", check=False),
            "triggers": sh("strigger", "--get", check=False)}


def run(cat: Catalogue, name: str, params: dict[str, Any] | None = None, who: str = "alice", **kw: Any):  # type: ignore[no-untyped-def]
    return cat.execute(name, params or {}, principal=who, via="cli", **kw)


def sbatch(*args: str) -> int:
    out = sh("sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args)
    return int(out.strip().split(";")[0])


# -- config -----------------------------------------------------------------------------------


def test_config_get_one_item_snake_case(catalogue: Catalogue) -> None:
    env = run(catalogue, "slurm.config.get", {"item": "min_job_age"})
    assert env.status == "succeeded" and env.exit_code == 0
    assert env.result == {"min_job_age": "60 sec"}
    assert env.parameters == {"item": "min_job_age"}
    # Slurm's own name works too; the value is what scontrol prints (22.05: topology/none,
    # 26.05: topology/flat)
    shown = next(line.split("=", 1)[1].strip() for line in sh("scontrol", "show", "config").splitlines()
                 if line.startswith("TopologyPlugin "))
    assert run(catalogue, "slurm.config.get", {"item": "TopologyPlugin"}).result == {"topology_plugin": shown}
    assert shown.startswith("topology/")


def test_config_get_all_items(catalogue: Catalogue) -> None:
    env = run(catalogue, "slurm.config.get")
    assert env.result["cluster_name"] == sh("scontrol", "show", "config").split("ClusterName")[1].split(
        "=")[1].split()[0]
    assert len(env.result) > 100


def test_config_get_unknown_item_suggests_close_names(catalogue: Catalogue) -> None:
    # A 404: the name is well formed (the schema takes any), this slurmctld has no such item.
    with pytest.raises(NotFound, match="did you mean topology_plugin") as exc:
        run(catalogue, "slurm.config.get", {"item": "topology_plugn"})
    assert exc.value.to_problem()["param"] == "item"


# -- jobs -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live_jobs(devcluster: Any) -> Iterator[dict[str, int]]:
    jobs = {
        "held": sbatch("-J", "st-act-held", "-A", "physics", "-p", "batch", "--hold", "--wrap", "sleep 1"),
        "run": sbatch("-J", "st-act-run", "-A", "physics", "-p", "debug", "-w", "n3", "-t", "10",
                      "--wrap", "sleep 600"),
    }
    wait_for(lambda: sh("squeue", "-h", "-j", str(jobs["run"]), "-o", "%T").strip() == "RUNNING", 30,
             what="job to run")
    yield jobs
    sh("scancel", str(jobs["held"]), str(jobs["run"]), check=False)


def test_job_find_by_batch_host_as_in_the_seed(catalogue: Catalogue, live_jobs: dict[str, int]) -> None:
    env = run(catalogue, "slurm.job.find", {"criterias": {"batch_host": "n3"}})
    assert live_jobs["run"] in env.result
    assert live_jobs["held"] not in env.result


def test_job_find_server_side_criteria_do_not_pull_job_details(
        catalogue: Catalogue, live_jobs: dict[str, int], runner: Any) -> None:
    calls: list[str] = []
    runner.observers.append(lambda kind, _s, _ok: calls.append(kind))
    try:
        env = run(catalogue, "slurm.job.find", {"criterias": {"name": "st-act-held", "user": "root",
                                                              "state": "PENDING"}})
    finally:
        runner.observers.pop()
    assert env.result == [live_jobs["held"]]
    assert calls == ["squeue"]  # one filtered `squeue -o %i`, no `squeue --json`


def test_job_find_residual_criterion_on_narrowed_ids(catalogue: Catalogue, live_jobs: dict[str, int]) -> None:
    env = run(catalogue, "slurm.job.find", {"criterias": {"account": "physics", "partition": "batch", "state": "PD",
                                                          "state_reason": "JobHeldUser"}})
    assert env.result == [live_jobs["held"]]


def test_job_find_unknown_criterion_and_bad_state(catalogue: Catalogue) -> None:
    with pytest.raises(InvalidInput, match="unknown job field 'batch_hots'.*batch_host"):
        run(catalogue, "slurm.job.find", {"criterias": {"batch_hots": "n1"}})
    with pytest.raises(InvalidInput, match="unknown job state 'RUNING'"):
        run(catalogue, "slurm.job.find", {"criterias": {"job_state": "RUNING"}})


def test_job_get_and_step_get_keyed_by_job_id(catalogue: Catalogue, live_jobs: dict[str, int]) -> None:
    job = live_jobs["run"]
    env = run(catalogue, "slurm.job.get", {"jobids": job})
    assert list(env.result) == [str(job)]
    assert env.result[str(job)][0]["batch_host"] == "n3"
    assert env.result[str(job)][0]["from_accounting"] is False
    steps = run(catalogue, "slurm.job.step.get", {"jobids": [job]}).result
    assert list(steps) == [str(job)]
    assert "batch" in steps[str(job)]
    held = run(catalogue, "slurm.job.step.get", {"jobids": [live_jobs["held"]]}).result
    assert held == {str(live_jobs["held"]): {}}


def test_job_get_unknown_id_is_not_found(catalogue: Catalogue) -> None:
    with pytest.raises(NotFound, match="999999"):
        run(catalogue, "slurm.job.get", {"jobids": [999999]})
    with pytest.raises(InvalidInput, match="jobids"):
        run(catalogue, "slurm.job.get", {"jobids": "abc"})


# -- nodes ------------------------------------------------------------------------------------


def test_node_get_keyed_by_name(catalogue: Catalogue) -> None:
    env = run(catalogue, "slurm.node.get", {"nodes": "n[1-2]"})
    assert sorted(env.result) == ["n1", "n2"]
    assert env.result["n1"]["real_memory_mib"] == 2000 and env.result["n1"]["cpus"] == 2


def test_drain_then_resume_by_the_owner(catalogue: Catalogue, clean_nodes: Any) -> None:
    env = run(catalogue, "slurm.node.drain", {"nodes": "n[1-2]", "reason": "disk swap"})
    assert env.status == "succeeded"
    states = node_states()
    assert "DRAIN" in states["n1"] and "DRAIN" in states["n2"] and "DRAIN" not in states["n3"]
    assert "disk swap [slurmtower:alice@cli]" in sh("sinfo", "-R", "-h", "-o", "%60E|%N")
    got = run(catalogue, "slurm.node.get", {"nodes": "n1"}).result["n1"]
    assert got["reason_owner"] == "slurmtower:alice@cli"
    env = run(catalogue, "slurm.node.resume", {"nodes": "n[1-2]"})
    assert env.status == "succeeded" and env.result["nodes"] == "n[1-2]"
    assert all("DRAIN" not in s for s in node_states().values())
    every = catalogue.store.list_audit()
    assert [(r.action, r.outcome) for r in every] == [("slurm.node.resume", "succeeded"), ("slurm.node.resume", "intent"),
                                                      ("slurm.node.drain", "succeeded"), ("slurm.node.drain", "intent")]
    records = [r for r in every if r.outcome != "intent"]
    drain = records[1]
    assert drain.who == "alice" and drain.via == "cli" and drain.outcome == "succeeded"
    assert drain.nodes == "n[1-2]" and drain.parameters["reason"] == "disk swap"
    assert drain.before["n1"]["state"] == "IDLE" and drain.after["n1"]["state"] == "IDLE+DRAIN"


def test_down_sets_down_with_default_reason(catalogue: Catalogue, clean_nodes: Any) -> None:
    env = run(catalogue, "slurm.node.down", {"nodes": "n4"}, who="ops")
    assert env.result["reason"] == "slurmtower: Downed using slurm.node.down action [slurmtower:ops@cli]"
    assert node_states()["n4"].startswith("DOWN")
    run(catalogue, "slurm.node.resume", {"nodes": "n4"}, who="ops")
    wait_for(lambda: not node_states()["n4"].startswith("DOWN"), 10, what="n4 up")


def test_resume_of_another_owners_drain_is_refused(catalogue: Catalogue, clean_nodes: Any) -> None:
    run(catalogue, "slurm.node.drain", {"nodes": "n1", "reason": "bad fan"}, who="alice")
    sh("scontrol", "update", "nodename=n2", "state=drain", "reason=health check: ECC errors")
    before = cluster_state()
    with pytest.raises(Conflict) as exc:
        run(catalogue, "slurm.node.resume", {"nodes": "n[1-2]"}, who="bob")
    assert "n1 is held by slurmtower:alice@cli" in exc.value.message
    assert "n2 is held by user:root" in exc.value.message
    assert cluster_state() == before
    refused = catalogue.store.list_audit(limit=1)[0]
    assert refused.outcome == "refused" and refused.who == "bob" and "alice" in refused.message
    # even alice may not take over the health check's drain without force
    with pytest.raises(Conflict, match="n2 is held by user:root"):
        run(catalogue, "slurm.node.resume", {"nodes": "n[1-2]"}, who="alice")
    env = run(catalogue, "slurm.node.resume", {"nodes": "n[1-2]", "force": True}, who="bob")
    assert env.status == "succeeded" and sorted(env.result["forced"]) == ["n1", "n2"]
    assert all("DRAIN" not in s for s in node_states().values())


def test_drain_over_another_owners_drain_adds_a_hold_and_force_takes_over(catalogue: Catalogue,
                                                                         clean_nodes: Any) -> None:
    run(catalogue, "slurm.node.drain", {"nodes": "n3", "reason": "psu"}, who="alice")
    # a second owner is no longer refused: bob's hold joins alice's, the reason names both
    env = run(catalogue, "slurm.node.drain", {"nodes": "n[3-4]", "reason": "rack"}, who="bob")
    assert env.status == "succeeded" and env.result["outcome"] == {"drained": "n[3-4]"}
    assert env.result["held_with"] == {"n3": ["slurmtower:alice@cli"]} and env.result["taken_over"] == []
    assert reason_of("n3") == "psu [slurmtower:alice@cli]; rack [slurmtower:bob@cli]"
    assert reason_of("n4") == "rack [slurmtower:bob@cli]"
    # the owner may re-drain with a new reason: her hold keeps its place
    run(catalogue, "slurm.node.drain", {"nodes": "n3", "reason": "psu, ordered"}, who="alice")
    assert reason_of("n3") == "psu, ordered [slurmtower:alice@cli]; rack [slurmtower:bob@cli]"
    # force: a take-over, bob's hold is the only one left
    env = run(catalogue, "slurm.node.drain", {"nodes": "n3", "reason": "mine now", "force": True}, who="bob")
    assert env.result["taken_over"] == ["n3"]
    got = run(catalogue, "slurm.node.get", {"nodes": "n3"}).result["n3"]
    assert got["reason_owner"] == "slurmtower:bob@cli" and [h["holder"] for h in got["holds"]] == [
        "slurmtower:bob@cli"]
    assert reason_of("n3") == "mine now [slurmtower:bob@cli]"


def test_dry_run_changes_nothing_and_is_audited(catalogue: Catalogue, clean_nodes: Any) -> None:
    before = cluster_state()
    for name, params in [("slurm.node.drain", {"nodes": "n[1-4]", "reason": "x"}),
                         ("slurm.node.down", {"nodes": "n1"}),
                         ("slurm.node.update", {"nodes": "n1", "infos": {"weight": 7}}),
                         ("slurm.node.reserve", {"nodes": "n1", "reservation_name": RESV}),
                         ("slurm.trigger.set", {"program": "/bin/true", "event": "down"})]:
        env = run(catalogue, name, params, dry_run=True)
        assert env.status == "succeeded" and env.dry_run and "dry run: would" in env.stdout
    assert cluster_state() == before
    assert {r.outcome for r in catalogue.store.list_audit()} == {"dry_run", "intent"}
    assert len(catalogue.store.list_audit()) == 10


def test_bulk_drain_is_one_slurm_call(catalogue: Catalogue, clean_nodes: Any, runner: Any) -> None:
    calls: list[str] = []
    runner.observers.append(lambda kind, _s, _ok: calls.append(kind))
    try:
        run(catalogue, "slurm.node.drain", {"nodes": "n[1-4]", "reason": "rack work"})
        run(catalogue, "slurm.node.resume", {"nodes": "n[1-4]"})
    finally:
        runner.observers.pop()
    assert calls.count("scontrol update") == 2  # one per action, for all four nodes


def test_node_update_allowed_field(catalogue: Catalogue, clean_nodes: Any) -> None:
    try:
        env = run(catalogue, "slurm.node.update", {"nodes": "n[1-2]", "infos": {"comment": "rack 7",
                                                                                "weight": 5}})
        assert env.status == "succeeded"
        out = sh("scontrol", "-o", "show", "node", "n2")
        assert "Comment=rack 7" in out and "Weight=5" in out
        rec = catalogue.store.list_audit(limit=1)[0]
        assert rec.before["n2"]["weight"] == 1 and rec.after["n2"]["weight"] == 5
    finally:
        sh("scontrol", "update", "nodename=n[1-2]", "weight=1", "comment=")


@pytest.mark.parametrize(("params", "param", "exc_type"), [
    ({"nodes": "n1", "infos": {"cpus": 4}}, "infos", InvalidInput),
    ({"nodes": "n1", "infos": {"state": "DRAIN"}}, "infos", InvalidInput),
    ({"nodes": "n1", "infos": {}}, "infos", InvalidInput),
    ({"nodes": "n1", "infos": {"weight": "heavy"}}, "infos", InvalidInput),
    ({"nodes": "n[1-4],n9", "infos": {"weight": 3}}, "nodes", NotFound),
], ids=["cpus", "state", "empty", "weight-type", "unknown-node"])
def test_node_update_refuses_before_anything_runs(catalogue: Catalogue, params: dict[str, Any], param: str,
                                                  exc_type: type[Exception]) -> None:
    before = cluster_state()
    with pytest.raises(exc_type) as exc:
        run(catalogue, "slurm.node.update", params)
    assert (getattr(exc.value, "param", None) or exc.value.extra.get("param")) == param  # type: ignore[attr-defined]
    assert cluster_state() == before


BAD_INPUT = [
    ("slurm.node.drian", {"nodes": "n1"}, NotFound, "did you mean slurm.node.drain"),
    ("slurm.node.drain", {"nodes": "n1", "resaon": "x"}, InvalidInput, "unknown parameter 'resaon'"),
    ("slurm.node.drain", {"nodes": 5}, InvalidInput, "parameter 'nodes'"),
    ("slurm.node.drain", {"nodes": "n[1-"}, NodeSetError, "unclosed"),
    ("slurm.node.drain", {"nodes": "n1,n9"}, NotFound, "n9"),
    ("slurm.node.drain", {"nodes": "n1", "reason": "  "}, InvalidInput, "reason must not be empty"),
    ("slurm.node.drain", {"nodes": "n1", "reason": "x [slurmtower:bob@cli]"}, InvalidInput, "owner tag"),
    ("slurm.node.down", {"nodes": "@all"}, NodeSetError, "group syntax"),
    ("slurm.node.resume", {"nodes": "n1", "force": "maybe"}, InvalidInput, "force"),
    ("slurm.node.reserve", {"nodes": "n1", "props": {"flags": ["MAINT", "BOGUS"]}}, InvalidInput, "BOGUS"),
    ("slurm.node.reserve", {"nodes": "n1", "props": {"duration": "long"}}, InvalidInput, "duration"),
    ("slurm.node.reserve", {"nodes": "n1", "reservation_name": "a b"}, InvalidInput, "reservation name"),
    ("slurm.node.unreserve", {"nodes": "n1", "reservation_name": "nope"}, NotFound, "nope"),
    ("slurm.trigger.set", {"program": "/bin/true", "event": "explode"}, InvalidInput, "unknown event"),
    ("slurm.trigger.set", {"program": "true", "event": "down"}, InvalidInput, "absolute path"),
    ("slurm.trigger.set", {"program": "/bin/true"}, InvalidInput, "event is required"),
    ("slurm.trigger.set", {"program": "/bin/true", "event": "down", "nodes": "n7"}, NotFound, "n7"),
    ("slurm.trigger.set", {"program": "/bin/true", "jobid": 999999, "fini": True}, NotFound, "999999"),
    ("slurm.trigger.unset", {"trigger_ids": [987654]}, NotFound, "987654"),
    ("slurm.trigger.unset", {"trigger_ids": "x"}, InvalidInput, "trigger_ids"),
]


@pytest.mark.parametrize(("name", "params", "exc_type", "match"), BAD_INPUT,
                         ids=[f"{n.split('.', 1)[1]}-{m.split()[0]}" for n, _p, _e, m in BAD_INPUT])
def test_bad_input_is_refused_and_changes_nothing(catalogue: Catalogue, name: str, params: dict[str, Any],
                                                  exc_type: type[Exception], match: str) -> None:
    before = cluster_state()
    with pytest.raises(exc_type, match=match):
        run(catalogue, name, params)
    assert cluster_state() == before
    if name in catalogue.names():
        rec = catalogue.store.list_audit(limit=1)
        assert rec and rec[0].outcome == "rejected" and rec[0].action == name


# -- reservations -----------------------------------------------------------------------------


@pytest.fixture()
def no_test_reservation() -> Iterator[None]:
    sh("scontrol", "delete", f"reservationname={RESV}", check=False)
    yield
    sh("scontrol", "delete", f"reservationname={RESV}", check=False)


def _resv_line() -> str:
    return sh("scontrol", "-o", "show", "reservation", RESV, check=False)


def test_reserve_creates_then_extends_and_unreserve_deletes_when_empty(
        catalogue: Catalogue, no_test_reservation: None) -> None:
    env = run(catalogue, "slurm.node.reserve", {"nodes": "n1", "reservation_name": RESV})
    assert env.result["created"] is True
    line = _resv_line()
    assert "Nodes=n1 " in line and "Users=root" in line
    assert all(f in line for f in ("MAINT", "IGNORE_JOBS", "OVERLAP"))
    assert "Duration=365-00:00:00" in line
    env = run(catalogue, "slurm.node.reserve", {"nodes": "n[3-4]", "reservation_name": RESV})
    assert env.result == {"reservation": RESV, "created": False, "nodes": "n[1,3-4]", "changed": True}
    assert "Nodes=n[1,3-4] " in _resv_line()
    env = run(catalogue, "slurm.node.unreserve", {"nodes": "n[1,3]", "reservation_name": RESV})
    assert env.result["remaining"] == "n4" and env.result["deleted"] is False
    assert "Nodes=n4 " in _resv_line()
    env = run(catalogue, "slurm.node.unreserve", {"nodes": "n4", "reservation_name": RESV})
    assert env.result["deleted"] is True
    assert _resv_line().strip() == "" or "not found" in _resv_line().lower()
    audit = [r for r in catalogue.store.list_audit() if r.outcome != "intent"]
    assert [r.action for r in audit] == ["slurm.node.unreserve"] * 2 + ["slurm.node.reserve"] * 2
    assert audit[-1].before["reservation"] is None and audit[-1].after["reservation"]["nodes"] == "n1"


def test_reserve_with_props(catalogue: Catalogue, no_test_reservation: None) -> None:
    run(catalogue, "slurm.node.reserve", {"nodes": "n2", "reservation_name": RESV,
                                          "props": {"duration": 30, "users": ["alice", "bob"],
                                                    "flags": ["maint", "ignore_jobs"]}})
    line = _resv_line()
    assert "Duration=00:30:00" in line and "Users=alice,bob" in line and "OVERLAP" not in line


def test_failed_slurm_call_gives_a_failed_envelope_and_audit(catalogue: Catalogue,
                                                             no_test_reservation: None) -> None:
    env = run(catalogue, "slurm.node.reserve", {"nodes": "n2", "reservation_name": RESV,
                                                "props": {"users": ["no_such_user_xyz"]}})
    assert env.status == "failed" and env.exit_code != 0 and env.stderr
    assert catalogue.get_execution(env.execution_id).status == "failed"
    rec = catalogue.store.list_audit(limit=1)[0]
    assert rec.outcome == "failed" and rec.execution_id == env.execution_id
    assert _resv_line().strip() == "" or "not found" in _resv_line().lower()


# -- triggers ---------------------------------------------------------------------------------


def test_trigger_set_and_unset(catalogue: Catalogue) -> None:
    program = f"/bin/echo slurmtower-test-{time.time_ns()}"
    env = run(catalogue, "slurm.trigger.set", {"program": program, "event": "down", "nodes": "n[3-4]"})
    tid = env.result
    assert isinstance(tid, int)
    listed = sh("strigger", "--get")
    assert program.split()[1] in listed and str(tid) in listed
    try:
        with pytest.raises(InvalidInput, match="belongs to slurm, not root"):
            run(catalogue, "slurm.trigger.unset", {"trigger_ids": [tid], "user": "root"})
        env = run(catalogue, "slurm.trigger.unset", {"trigger_ids": tid})
        assert env.status == "succeeded"
        assert program.split()[1] not in sh("strigger", "--get", check=False)
    finally:
        sh("strigger", "--clear", f"--id={tid}", check=False)


def test_trigger_set_on_job_end(catalogue: Catalogue, live_jobs: dict[str, int]) -> None:
    program = f"/bin/echo slurmtower-fini-{time.time_ns()}"
    env = run(catalogue, "slurm.trigger.set", {"program": program, "jobid": live_jobs["run"], "fini": True})
    try:
        line = next(ln for ln in sh("strigger", "--get").splitlines() if program.split()[1] in ln)
        assert "fini" in line and str(live_jobs["run"]) in line
    finally:
        run(catalogue, "slurm.trigger.unset", {"trigger_ids": [env.result]})


def test_trigger_program_allowlist_applies_to_api_and_rules(catalogue: Catalogue, settings: Settings) -> None:
    with pytest.raises(PermissionDenied, match="allowlist"):
        catalogue.execute("slurm.trigger.set", {"program": "/bin/true", "event": "down"}, principal="x",
                          via="api")
    settings.auth.trigger_program_allowlist = ["/bin/true"]
    env = catalogue.execute("slurm.trigger.set", {"program": "/bin/true", "event": "down"}, principal="x",
                            via="rule", dry_run=True)
    assert env.status == "succeeded" and env.dry_run


def test_rule_dispatcher_records_the_rule_as_owner(catalogue: Catalogue, clean_nodes: Any) -> None:
    from slurmtower.actions import rule_dispatcher

    dispatch = rule_dispatcher(catalogue)
    out = dispatch("slurm.node.drain", {"nodes": "n3", "reason": "ecc"}, {"origin": "rule", "rule": "ecc-check"})
    assert out["status"] == "succeeded" and out["result"]["reason"] == "ecc [slurmtower:ecc-check@rule]"
    assert catalogue.store.list_audit(limit=1)[0].via == "rule"


def test_audit_store_any_url_keyset_pages(tmp_path: Any) -> None:
    from datetime import UTC, datetime

    store = ActionStore(f"sqlite:///{tmp_path}/sub/dir/a.db")
    for i in range(5):
        store.append_audit(execution_id=str(i), at=datetime.now(UTC), who="w", via="api", action="a",
                           parameters={"i": i}, nodes=None, before={}, after={}, outcome="succeeded")
    first = store.list_audit(limit=2)
    second = store.list_audit(limit=2, before=first[-1].seq)
    assert [r.parameters["i"] for r in first + second] == [4, 3, 2, 1]
