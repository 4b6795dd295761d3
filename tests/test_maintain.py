"""slurm.node.maintain on the devcluster: drain, MAINT reservation, wait for the node's jobs,
a check on the host or as a Slurm job in the reservation, resume or stay drained; each step an
event and an audit record; the run goes on from its events after a restart; over HTTP the
service's background task moves it on."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from slurmtower.actions import Catalogue
from slurmtower.actions.maintain import EVENT_PREFIX, TYPES, Maintenance
from slurmtower.api import create_app
from slurmtower.events.store import EventStore
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient
from tests.auth_helpers import OPERATOR, READER, bearer, running_server, with_tokens
from tests.conftest import node_states, sh, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture()
def catalogue(settings: Settings, client: CliSlurmClient, clean_nodes: object) -> Iterator[Catalogue]:
    cat = Catalogue.from_settings(settings, client=client)
    yield cat
    cat.store.close()
    for line in sh("scontrol", "-o", "show", "reservation", check=False).splitlines():
        name = line.split()[0].split("=", 1)[1] if line.startswith("ReservationName=") else ""
        if name.startswith("maint_"):
            sh("scontrol", "delete", f"reservationname={name}", check=False)


def maintain(cat: Catalogue, params: dict[str, Any]) -> Any:
    return cat.execute("slurm.node.maintain", params, principal="alice", via="cli")


def steps(settings: Settings, run_id: str) -> list[str]:
    store = EventStore(settings.effective_store_url())
    try:
        return [ev.payload["step"] for ev in store.query(types=list(TYPES), limit=1000)
                if ev.payload.get("run") == run_id]
    finally:
        store.close()


def advance_until_finished(settings: Settings, client: CliSlurmClient, run_id: str, timeout: float = 90) -> None:
    """Move the run on as the service's background task does, with a fresh runner each round
    (what a restart gives: nothing but the events)."""
    def done() -> bool:
        runner = Maintenance(Catalogue.from_settings(settings, client=client), EventStore(settings.effective_store_url()),
                             state_dir=settings.state_dir, close=True)
        try:
            runner.advance()
            return runner.state(run_id).finished
        finally:
            runner.close()
    wait_for(done, timeout, 1.0, what=f"maintenance {run_id} to finish")


def reservation(name: str) -> str:
    """The reservation's record (``""`` when Slurm has none by that name)."""
    out = sh("scontrol", "-o", "show", "reservation", name, check=False)
    return out if out.startswith("ReservationName=") else ""


def test_dry_run_shows_the_plan_and_changes_nothing(catalogue: Catalogue) -> None:
    # an earlier test's job may still be completing on a node (IDLE+COMPLETING): compare settled states
    def settled() -> dict[str, str] | None:
        states = node_states()
        return None if any("COMPLETING" in state for state in states.values()) else states

    before = wait_for(settled, 60, what="no node completing a job")
    env = maintain(catalogue, {"nodes": "n2", "check": "/bin/true", "dry_run": True})
    assert env.status == "succeeded"
    assert env.result["plan"]["n2"] == [
        "drain n2 ('maintenance')", "put n2 in reservation maint_n2 (MAINT, IGNORE_JOBS)",
        "wait until n2 runs no job (at most 3600 s; then it stays drained)",
        "run the check /bin/true n2 on slurmtower's host (at most 600 s)",
        "check passes: remove n2 from maint_n2 and resume it; fails: it stays drained with the check's output in "
        "its reason"]
    assert node_states() == before and "maint_n2" not in reservation("maint_n2")


def test_a_node_with_a_running_job_is_maintained_end_to_end(catalogue: Catalogue, settings: Settings,
                                                          client: CliSlurmClient) -> None:
    job = int(sh("sbatch", "--parsable", "-w", "n2", "-o", "/dev/null", "-D", "/tmp", "-J", "st-maint",
                 "--wrap", "sleep 6").split(";")[0])
    try:
        wait_for(lambda: sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING", 30, what="the job")
        env = maintain(catalogue, {"nodes": "n2", "reason": "fan swap", "check": "/bin/sh -c 'echo fans ok {node}'"})
        assert env.status == "succeeded", env.stderr
        run_id = env.result["runs"]["n2"]["run"]
        # drained with the job still running, in a MAINT reservation; waiting for the job
        assert env.result["runs"]["n2"]["step"] == "reserved"
        state = node_states()["n2"]
        assert "DRAIN" in state and ("MIXED" in state or "ALLOC" in state), state
        resv = reservation("maint_n2")
        assert "Nodes=n2 " in resv and "MAINT" in resv and "IGNORE_JOBS" in resv
        assert f"fan swap (maintenance {run_id}) [slurmtower:alice@cli]" in sh("scontrol", "show", "node", "n2")
        advance_until_finished(settings, client, run_id)
    finally:
        subprocess.run(["scancel", str(job)], check=False, capture_output=True)
    assert steps(settings, run_id) == ["started", "drained", "reserved", "idle", "check_started", "check_passed",
                                       "resumed", "finished"]
    wait_for(lambda: "DRAIN" not in node_states()["n2"], 10, what="n2 resumed")
    assert "maint_n2" not in reservation("maint_n2")
    # the job was let finish, not killed
    assert sh("sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State").strip() == "COMPLETED"
    # every step that changed Slurm is an audited action of alice's
    actions = [r.action for r in catalogue.store.list_audit(limit=50) if r.nodes == "n2" and r.who == "alice"]
    assert {"slurm.node.drain", "slurm.node.reserve", "slurm.node.unreserve", "slurm.node.resume",
            "slurm.node.maintain"} <= set(actions)
    store = EventStore(settings.effective_store_url())
    try:
        passed = [e for e in store.query(types=[EVENT_PREFIX + "check_passed"], limit=100)
                  if e.payload["run"] == run_id]
    finally:
        store.close()
    assert passed and passed[0].payload["output"] == "fans ok n2" and passed[0].node == "n2"


def test_a_failing_check_keeps_the_node_drained_with_its_output(catalogue: Catalogue, settings: Settings,
                                                              client: CliSlurmClient) -> None:
    env = maintain(catalogue, {"nodes": "n3", "check": "/bin/sh -c 'echo disk /dev/sdb failed; exit 3'"})
    run_id = env.result["runs"]["n3"]["run"]
    advance_until_finished(settings, client, run_id)
    runner = Maintenance(Catalogue.from_settings(settings, client=client), EventStore(settings.effective_store_url()),
                             state_dir=settings.state_dir, close=True)
    try:
        state = runner.state(run_id)
    finally:
        runner.close()
    assert state.outcome == "check_failed" and state.data["exit_code"] == 3
    assert "DRAIN" in node_states()["n3"]
    assert "Reason=maintenance check failed: disk /dev/sdb failed [slurmtower:alice@cli]" in \
        sh("scontrol", "-o", "show", "node", "n3")
    assert "maint_n3" not in reservation("maint_n3")  # the drain keeps it out; the reservation is gone


def test_the_check_can_run_as_a_slurm_job_on_the_node(catalogue: Catalogue, settings: Settings,
                                                     client: CliSlurmClient) -> None:
    env = maintain(catalogue, {"nodes": "n4", "check": "/bin/sh -c 'sleep 2; echo job check on $SLURMD_NODENAME'",
                               "check_as_job": True, "check_timeout": 120})
    run_id = env.result["runs"]["n4"]["run"]
    assert env.result["runs"]["n4"]["step"] == "check_started"
    runner = Maintenance(Catalogue.from_settings(settings, client=client), EventStore(settings.effective_store_url()),
                             state_dir=settings.state_dir, close=True)
    try:
        job = int(runner.state(run_id).data["job_id"])
    finally:
        runner.close()
    # the check job asks for n4 inside the maintenance reservation; the drain is off meanwhile
    shown = sh("scontrol", "-o", "show", "job", str(job))
    assert "Reservation=maint_n4 " in shown and "ReqNodeList=n4 " in shown
    assert "DRAIN" not in node_states()["n4"] and "Nodes=n4 " in reservation("maint_n4")
    advance_until_finished(settings, client, run_id, timeout=120)
    runner = Maintenance(Catalogue.from_settings(settings, client=client), EventStore(settings.effective_store_url()),
                             state_dir=settings.state_dir, close=True)
    try:
        state = runner.state(run_id)
    finally:
        runner.close()
    assert state.outcome == "resumed", state.data
    assert state.data["output"] == "job check on n4"
    out = sh("sacct", "-n", "-X", "-P", "-j", str(job), "-o", "NodeList,State,ExitCode")
    assert out.strip() == "n4|COMPLETED|0:0"
    assert "DRAIN" not in node_states()["n4"] and reservation("maint_n4") == ""


def test_a_node_still_busy_at_the_timeout_stays_drained(catalogue: Catalogue, settings: Settings,
                                                       client: CliSlurmClient) -> None:
    job = int(sh("sbatch", "--parsable", "-w", "n1", "-o", "/dev/null", "-D", "/tmp", "-J", "st-maint-busy",
                 "--wrap", "sleep 300").split(";")[0])
    try:
        wait_for(lambda: sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING", 30, what="the job")
        env = maintain(catalogue, {"nodes": "n1", "idle_timeout": 2})
        run_id = env.result["runs"]["n1"]["run"]
        time.sleep(2.5)
        advance_until_finished(settings, client, run_id, timeout=30)
        assert steps(settings, run_id)[-3:] == ["timed_out", "kept_drained", "finished"]
        assert "DRAIN" in node_states()["n1"]
        assert sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING"  # never killed
    finally:
        subprocess.run(["scancel", str(job)], check=False, capture_output=True)


def test_over_http_the_service_moves_the_run_on(settings: Settings, clean_nodes: object) -> None:
    settings.actions.maintenance_interval = 0.5
    with running_server(create_app(with_tokens(settings))) as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        refused = http.post("/actions/slurm.node.maintain", json={"nodes": "n3"}, headers=bearer(READER))
        assert refused.status_code == 403
        program = http.post("/actions/slurm.node.maintain", json={"nodes": "n3", "check": "/bin/true"},
                            headers=bearer(OPERATOR))
        assert program.status_code == 403 and "trigger_program_allowlist" in program.json()["detail"]
        waiting = http.post("/actions/slurm.node.maintain", json={"nodes": "n3", "wait": True},
                            headers=bearer(OPERATOR))
        assert waiting.status_code == 400 and waiting.json()["param"] == "wait"
        assert "DRAIN" not in node_states()["n3"]  # refused: nothing changed
        started = http.post("/actions/slurm.node.maintain", json={"nodes": "n3", "reason": "bios update"},
                            headers=bearer(OPERATOR))
        assert started.status_code == 200, started.text
        run_id = started.json()["result"]["runs"]["n3"]["run"]
        # an idle node without a check: the action itself goes on to the resume
        events = wait_for(lambda: [e for e in http.get("/events", params={"node": "n3"}, headers=bearer(READER))
                                   .json() if e["type"].startswith(EVENT_PREFIX) and e["payload"]["run"] == run_id
                                   and e["payload"]["step"] == "finished"], 30, what="the run to finish")
        assert events[0]["payload"]["outcome"] == "resumed"
    wait_for(lambda: "DRAIN" not in node_states()["n3"], 10, what="n3 resumed")
    assert "maint_n3" not in reservation("maint_n3")


def test_a_waited_run_whose_check_fails_ends_failed(settings: Settings, devcluster: Any,
                                                    clean_nodes: object) -> None:
    """The node stays drained: the execution says failed (exit code 1), not succeeded."""
    env = devcluster.command_env()
    env["SLURMTOWER_STATE_DIR"] = str(settings.state_dir)
    env["SLURMTOWER_ACTIONS__MAINTENANCE_INTERVAL"] = "1"
    proc = subprocess.run([".venv/bin/slurmtower", "run", "slurm.node.maintain", "nodes=n4", "wait=true",
                           "check=/bin/sh -c 'exit 3'", "--output", "json"], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    body = json.loads(proc.stdout)
    assert body["status"] == "failed" and body["exit_code"] == 1
    assert body["result"]["runs"]["n4"]["outcome"] == "check_failed"
    assert "maintenance failed on n4" in body["stderr"]
    assert "DRAIN" in node_states()["n4"]


def test_the_cli_can_wait_for_the_end(settings: Settings, devcluster: Any, clean_nodes: object) -> None:
    """``slurmtower run slurm.node.maintain ... wait=true``: the command moves the run on itself
    and ends with it (a CLI user without a running service)."""
    job = int(sh("sbatch", "--parsable", "-w", "n3", "-o", "/dev/null", "-D", "/tmp", "-J", "st-maint-cli",
                 "--wrap", "sleep 4").split(";")[0])
    try:
        wait_for(lambda: sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING", 30, what="the job")
        env = devcluster.command_env()
        env["SLURMTOWER_STATE_DIR"] = str(settings.state_dir)
        env["SLURMTOWER_ACTIONS__MAINTENANCE_INTERVAL"] = "1"
        started = time.monotonic()
        proc = subprocess.run([".venv/bin/slurmtower", "run", "slurm.node.maintain", "nodes=n3", "wait=true",
                               "check=/bin/true", "--output", "json"], capture_output=True, text=True, timeout=120,
                              env=env, check=False)
        took = time.monotonic() - started
    finally:
        subprocess.run(["scancel", str(job)], check=False, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)["result"]["runs"]
    assert runs["n3"]["step"] == "finished" and runs["n3"]["outcome"] == "resumed"
    assert took >= 2  # it waited for the job
    assert "DRAIN" not in node_states()["n3"] and reservation("maint_n3") == ""
    assert sh("sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State").strip() == "COMPLETED"


def test_a_node_another_owner_holds_stays_out_for_them(catalogue: Catalogue, settings: Settings,
                                                      client: CliSlurmClient) -> None:
    """The run lets go of its own hold only: a drain made with scontrol before stays."""
    sh("scontrol", "update", "nodename=n1", "state=DRAIN", "reason=bad psu")
    env = maintain(catalogue, {"nodes": "n1"})
    run_id = env.result["runs"]["n1"]["run"]
    advance_until_finished(settings, client, run_id, timeout=30)
    assert steps(settings, run_id)[-2:] == ["still_held", "finished"]
    runner = Maintenance(Catalogue.from_settings(settings, client=client), EventStore(settings.effective_store_url()),
                             state_dir=settings.state_dir, close=True)
    try:
        state = runner.state(run_id)
    finally:
        runner.close()
    assert state.outcome == "still_held" and state.data["holders"] == ["user:root"]
    shown = sh("scontrol", "-o", "show", "node", "n1")
    assert "DRAIN" in node_states()["n1"] and "bad psu" in shown and "maintenance" not in shown
    assert reservation("maint_n1") == ""


def test_a_run_goes_on_after_the_service_is_killed(settings: Settings, devcluster: Any, clean_nodes: object) -> None:
    """``slurmtower serve`` starts a run on a node with a running job and is killed (SIGKILL)
    while the run waits; the job ends while no service runs; a new ``serve`` on the same store
    finds the run in its events and finishes it: resumed, out of its reservation."""
    from slurmtower.api.security import hash_token
    from tests.sensor_helpers import serve_env
    from tests.serve_helpers import ServeProcess

    env = serve_env(devcluster, settings.state_dir,
                    SLURMTOWER_EVENTS__SENSOR_ENABLED="false", SLURMTOWER_ACTIONS__MAINTENANCE_INTERVAL="0.5",
                    SLURMTOWER_ACTIONS__BREAKER_ENABLED="false",
                    SLURMTOWER_AUTH__TOKENS=json.dumps([{"name": "otto", "role": "operator",
                                                         "sha256": hash_token(OPERATOR)}]))
    log = settings.state_dir / "serve.log"

    def serve() -> ServeProcess:
        server = ServeProcess(env, log, ("--no-access-log",))
        server.start()
        return server

    def free() -> str | None:  # a node no other test's job runs on (sample jobs run for a minute)
        states = node_states()
        return next((n for n in ("n3", "n4", "n2", "n1") if states[n] == "IDLE"), None)

    node = wait_for(free, 90, 1.0, what="a node without jobs")
    job = int(sh("sbatch", "--parsable", "-w", node, "-o", "/dev/null", "-D", "/tmp", "-J", "st-maint-kill",
                 "--wrap", "sleep 8").split(";")[0])
    first, second = None, None
    try:
        wait_for(lambda: sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING", 30, what="the job")
        first = serve()
        started = httpx.post(f"{first.url}/actions/slurm.node.maintain", json={"nodes": node, "reason": "kill test"},
                             headers=bearer(OPERATOR), timeout=60)
        assert started.status_code == 200, started.text
        run_id = started.json()["result"]["runs"][node]["run"]
        assert started.json()["result"]["runs"][node]["step"] == "reserved"
        first.kill()
        assert steps(settings, run_id) == ["started", "drained", "reserved"]
        wait_for(lambda: sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "", 60, what="the job to end")
        assert "DRAIN" in node_states()[node] and reservation(f"maint_{node}")  # nobody moved it on meanwhile
        second = serve()
        url = second.url
        try:
            wait_for(lambda: "finished" in steps(settings, run_id), 30, what="the new service to finish the run")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: steps {steps(settings, run_id)}, {node} {sh('scontrol', '-o', 'show', 'node', node)}"
                                 f" jobs {sh('squeue', '-h', '-w', node, '-t', 'all', '-o', '%i %T %j')} /ready "
                                 f"{httpx.get(f'{url}/ready', timeout=10).text}, log {log.read_text()[-2000:]}") from None
    finally:
        subprocess.run(["scancel", str(job)], check=False, capture_output=True)
        for server in (first, second):
            if server is not None:
                server.stop()
    assert steps(settings, run_id) == ["started", "drained", "reserved", "idle", "resumed", "finished"]
    assert "DRAIN" not in node_states()[node] and reservation(f"maint_{node}") == ""
    assert sh("sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State").strip() == "COMPLETED"


def test_a_run_between_the_steps_of_its_start_is_left_to_its_start(catalogue: Catalogue, settings: Settings) -> None:
    """A background round that finds a run at ``drained`` a moment after it was recorded (its
    start() reserving meanwhile, here or in another process) leaves it alone; only a run that
    stayed there past START_GRACE (a restart between the steps) is drained and reserved again.
    (Two rounds once recorded ``reserved`` twice.)"""
    from datetime import UTC, datetime, timedelta

    from slurmtower.actions.maintain import START_GRACE, RunState

    runner = Maintenance(catalogue, EventStore(settings.effective_store_url()), state_dir=settings.state_dir,
                         close=True, close_catalogue=False)
    try:
        state = RunState(run_id="between01", node="n3", params={"reason": "between", "idle_timeout": 3600},
                         principal="otto", via="api", started_at=datetime.now(UTC))
        runner._record(state, "started", params=state.params, principal="otto", via="api", plan=[])
        runner._record(state, "drained", execution_id="x")
        assert runner.advance() == 0
        assert steps(settings, "between01") == ["started", "drained"]
        later = datetime.now(UTC) + timedelta(seconds=START_GRACE + 1)
        runner.advance(now=later)
        # drained and reserved again, once; n3 runs no job, so the run goes on to its end
        assert steps(settings, "between01") == ["started", "drained", "reserved", "idle", "resumed", "finished"]
        assert not reservation("maint_n3")
    finally:
        if reservation("maint_n3"):
            runner._release_reservation(runner.state("between01"))
        runner.close()
