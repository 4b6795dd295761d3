"""Why is this job pending (issue 44), on the local cluster: one job waiting for each reason,
made once for the module (held by its owner and by root, a dependency, a begin time, a drained
node it asks for, a reservation, a QOS limit per user and per job, an account's GrpJobs, a
partition down, a partition's time limit, resources, priority behind another), explained by
the action, the API (from the snapshots), the CLI and the job page, each answer checked
against what squeue, sprio, sshare, scontrol and sacctmgr say; who sees what; fair share."""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurmtower.actions import Catalogue
from slurmtower.actions import why as why_module
from slurmtower.actions.why import ClientSources, explain
from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.models import Job, JobState
from slurmtower.models.table import JobTable, job_fragment
from slurmtower.settings import Settings, TokenEntry
from slurmtower.slurm import CliSlurmClient
from slurmtower.slurm.adapters import parse_text_time

from .auth_helpers import module_app_settings, running_server
from .conftest import restore_all_nodes, sh, submit, wait_for
from .ui_browser import browser, page_as, shoot, wait_js  # noqa: F401 - the browser fixture

pytestmark = [pytest.mark.cluster, pytest.mark.release]

SCRIPT = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "slurmtower")
ACCOUNT = "st_why_acct"
RESERVATION = "st_why_resv"
TOKENS = {"operator": ("otto", "operator", "why-operator-token"), "reader": ("rita", "reader", "why-reader-token"),
          "admin": ("ada", "admin", "why-admin-token"), "alice": ("alice", "user", "why-alice-token"),
          "bob": ("bob", "user", "why-bob-token")}
#: Each waiting job of the scenario and the reason Slurm gives it.
REASONS = {
    "held_user": "JobHeldUser", "held_admin": "JobHeldAdmin", "dependency": "Dependency", "begin": "BeginTime",
    "node": "ReqNodeNotAvail", "reservation": "Reservation", "qos_user": "QOSMaxJobsPerUserLimit",
    "qos_wall": "QOSMaxWallDurationPerJobLimit", "account": "AssocGrpJobsLimit", "down": "PartitionDown",
    "too_long": "PartitionTimeLimit", "first": "Resources", "second": "Priority",
}


def _reason(job: int) -> str:
    """squeue's reason code for ``job`` (``%r`` adds details: ``ReqNodeNotAvail, UnavailableNodes:n4``)."""
    return sh("squeue", "-h", "-j", str(job), "-o", "%r", check=False).strip().split(",")[0]


def _state(job: int) -> str:
    return sh("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()


@pytest.fixture(scope="module")
def scenario(devcluster: DevCluster, cluster_settings: Settings,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Every node busy or out (n1, n2 run batch's two whole-node jobs, n3 alice's capped job and
    her job of the account limited to one running job, n4 drained through slurmtower by alice),
    then one job waiting for each reason of :data:`REASONS`."""
    restore_all_nodes(devcluster)
    jobs: dict[str, int] = {}
    # (an interrupted run may have left them: adding again is "nothing new", status 1)
    sh("sacctmgr", "-i", "add", "account", ACCOUNT, "Description=slurmtower why tests", "Organization=tests",
       "GrpJobs=1", check=False)
    sh("sacctmgr", "-i", "add", "user", "alice,bob", f"Account={ACCOUNT}", check=False)
    assert sh("sacctmgr", "-n", "-P", "show", "assoc", f"account={ACCOUNT}", "format=user,grpjobs").split() == [
        "|1", "alice|", "bob|"]
    settings = cluster_settings.model_copy(deep=True)
    settings.state_dir = tmp_path_factory.mktemp("why-store")
    drains = Catalogue.from_settings(settings)
    try:
        run = ("-t", "20", "--wrap", "sleep 900")
        jobs["fill1"] = submit("alice", "-J", "st-why", "-p", "batch", "-w", "n1", "--exclusive", *run)
        jobs["fill2"] = submit("bob", "-J", "st-why", "-p", "batch", "-w", "n2", "--exclusive", *run)
        jobs["capped"] = submit("alice", "-J", "st-why", "-p", "debug", "-w", "n3", "--qos=capped", *run)
        jobs["limited"] = submit("alice", "-J", "st-why", "-p", "debug", "-w", "n3", "-A", ACCOUNT, *run)
        for name in ("fill1", "fill2", "capped", "limited"):
            wait_for(lambda j=jobs[name]: _state(j) == "RUNNING", 60, what=f"job {name} running")
        env = drains.execute("slurm.node.drain", {"nodes": "n4", "reason": "disk swap"}, principal="alice",
                             via="cli")
        assert env.status == "succeeded", env.stderr
        sh("scontrol", "create", "reservation", f"reservationname={RESERVATION}", "nodes=n4",
           "starttime=now+1hour", "duration=60", "users=alice,bob")
        sh("scontrol", "update", "partitionname=short", "state=DOWN")
        wait = ("-J", "st-why", "-t", "5", "--wrap", "sleep 60")
        jobs["qos_user"] = submit("alice", "-p", "debug", "--qos=capped", *wait)
        jobs["qos_wall"] = submit("bob", "-J", "st-why", "-p", "debug", "--qos=capped", "-t", "60", "--wrap",
                                  "sleep 60")
        jobs["held_user"] = submit("alice", "-p", "debug", "--hold", *wait)
        jobs["held_admin"] = submit("bob", "-p", "debug", *wait)
        sh("scontrol", "hold", str(jobs["held_admin"]))
        jobs["dependency"] = submit("alice", "-p", "debug", f"--dependency=afterok:{jobs['held_user']}", *wait)
        jobs["begin"] = submit("bob", "-p", "debug", "--begin=now+2hours", *wait)
        jobs["node"] = submit("bob", "-p", "debug", "-w", "n4", *wait)
        jobs["reservation"] = submit("alice", "-p", "debug", f"--reservation={RESERVATION}", *wait)
        jobs["down"] = submit("bob", "-J", "st-why", "-p", "short", "-t", "2", "--wrap", "sleep 60")
        jobs["account"] = submit("bob", "-p", "debug", "-A", ACCOUNT, *wait)
        jobs["first"] = submit("alice", "-J", "st-why", "-p", "batch", "-t", "10", "--wrap", "sleep 60")
        jobs["second"] = submit("alice", "-J", "st-why", "-p", "batch", "-t", "10", "--nice=100", "--wrap",
                                "sleep 60")
        jobs["too_long"] = submit("alice", "-J", "st-why", "-p", "batch", "-t", "120", "--wrap", "sleep 60")
        for name, reason in REASONS.items():
            wait_for(lambda j=jobs[name], r=reason: _reason(j) == r, 90, 0.5, what=f"job {name} to wait for {reason}")
        yield jobs
    finally:
        drains.close()
        if jobs:
            sh("scancel", *map(str, jobs.values()), check=False)
        sh("scontrol", "delete", f"reservationname={RESERVATION}", check=False)
        sh("scontrol", "update", "partitionname=short", "state=UP", check=False)
        mine = set(map(str, jobs.values()))
        wait_for(lambda: not mine & set(sh("squeue", "-h", "-o", "%i").split()), 60, what="the scenario's jobs to end")
        sh("sacctmgr", "-i", "delete", "user", "alice,bob", f"account={ACCOUNT}", check=False)
        sh("sacctmgr", "-i", "delete", "account", ACCOUNT, check=False)
        restore_all_nodes(devcluster)


@pytest.fixture(scope="module")
def why(scenario: dict[str, int], cluster_settings: Settings, client: CliSlurmClient,
        tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The action's answer for every job of the scenario (one call: as the CLI runs it)."""
    settings = cluster_settings.model_copy(deep=True)
    settings.state_dir = tmp_path_factory.mktemp("why-action")
    cat = Catalogue.from_settings(settings, client=client)
    env = cat.execute("slurm.job.why", {"jobids": [str(j) for j in scenario.values()]}, principal="root", via="cli")
    cat.close()
    assert env.status == "succeeded", env.stderr
    return {name: env.result[str(job)] for name, job in scenario.items()}


@pytest.fixture(scope="module")
def api(scenario: dict[str, int], cluster_settings: Settings,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = module_app_settings(cluster_settings, tmp_path_factory.mktemp("why-api"))
    settings.auth.tokens = [TokenEntry(name=name, role=role, sha256=hash_token(token))  # type: ignore[arg-type]
                            for name, role, token in TOKENS.values()]
    settings.api.refresh_interval = 0.5
    with running_server(create_app(settings)) as url:
        yield url


def get(url: str, path: str, who: str = "operator") -> httpx.Response:
    return httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {TOKENS[who][2]}"}, timeout=60)


def facts(answer: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in answer["facts"] if f["kind"] == kind]


# -- the local cluster ------------------------------------------------------------------------------


def test_the_devcluster_weighs_priorities_and_enforces_limits(devcluster: DevCluster) -> None:
    config = sh("scontrol", "show", "config")
    assert re.search(r"PriorityType\s*=\s*priority/multifactor", config)
    enforce = re.search(r"AccountingStorageEnforce\s*=\s*(\S+)", config)
    assert enforce and {"associations", "limits", "qos"} <= set(enforce[1].split(","))
    qos = sh("sacctmgr", "-n", "-P", "show", "qos", "capped", "format=name,maxjobspu,maxwall").strip()
    assert qos == "capped|1|00:30:00"


# -- each reason, explained by the action -----------------------------------------------------------


@pytest.mark.parametrize("name", list(REASONS))
def test_each_waiting_job_is_explained_with_squeues_reason(name: str, why: dict[str, dict[str, Any]],
                                                          scenario: dict[str, int]) -> None:
    answer = why[name]
    assert answer["pending"] and answer["state"] == "PENDING"
    assert answer["reason"] == REASONS[name] == _reason(scenario[name]) and answer["known"]
    assert answer["summary"] and answer["summary"].endswith(".") and "{" not in answer["summary"]
    assert not facts(answer, "note"), facts(answer, "note")


def test_holds_say_who_may_release_them(why: dict[str, dict[str, Any]]) -> None:
    (user,) = facts(why["held_user"], "hold")
    assert user["held_by"] == "user" and "owner" in user["release_by"]
    assert any("scontrol release" in hint for hint in why["held_user"]["owner_can"])
    (admin,) = facts(why["held_admin"], "hold")
    assert admin["held_by"] == "admin" and admin["release_by"] == ["operator", "admin"]


def test_a_dependency_names_the_job_and_its_state(why: dict[str, dict[str, Any]], scenario: dict[str, int]) -> None:
    (dep,) = facts(why["dependency"], "dependency")
    held = scenario["held_user"]
    assert (dep["job_id"], dep["condition"], dep["state"], dep["satisfied"]) == (held, "afterok", "PENDING", False)
    assert dep["link"] == f"/ui/jobs/{held}" and f"job {held}" in why["dependency"]["summary"]
    assert f"afterok:{held}" in sh("squeue", "-h", "-j", str(scenario["dependency"]), "-o", "%E")


def test_a_begin_time_is_the_one_slurm_holds(why: dict[str, dict[str, Any]], scenario: dict[str, int]) -> None:
    (begin,) = facts(why["begin"], "begin_time")
    eligible = re.search(r"EligibleTime=(\S+)", sh("scontrol", "show", "job", str(scenario["begin"])))
    assert eligible and begin["begin_time"] is not None
    expected = parse_text_time(eligible[1])
    assert expected is not None
    assert begin["begin_time"] == expected.astimezone(UTC).isoformat().replace("+00:00", "Z")
    assert timedelta(hours=1, minutes=55) < timedelta(seconds=_seconds(begin["wait"])) <= timedelta(hours=2)


def _seconds(duration: str) -> float:
    """An ISO 8601 duration as pydantic writes it (``PT1H59M30S``), in seconds."""
    m = re.fullmatch(r"P(?:(\d+)D)?T?(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", duration)
    assert m, duration
    days, hours, minutes, seconds = (float(x or 0) for x in m.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def test_a_drained_node_asked_for_names_its_reason_and_owner(why: dict[str, dict[str, Any]]) -> None:
    (node,) = facts(why["node"], "node")
    shown = sh("scontrol", "-o", "show", "node", "n4")
    assert node["node"] == "n4" and "DRAIN" in node["state"] and "State=IDLE+DRAIN" in shown
    assert node["reason"] == re.search(r"Reason=(.*?) \[\w+@", shown)[1]  # type: ignore[index]
    assert "disk swap" in node["reason"] and node["holders"] == ["slurmtower:alice@cli"]
    assert node["link"] == "/ui/nodes/n4" and "n4" in why["node"]["summary"]
    assert any("nodelist=" in hint for hint in why["node"]["owner_can"])


def test_a_reservation_says_when_it_starts(why: dict[str, dict[str, Any]]) -> None:
    (resv,) = facts(why["reservation"], "reservation")
    start = re.search(r"StartTime=(\S+)", sh("scontrol", "show", "reservation", RESERVATION))
    assert start and resv["name"] == RESERVATION and resv["active"] is False and resv["nodes"] == "n4"
    expected = parse_text_time(start[1])
    assert expected is not None
    assert resv["start_time"] == expected.astimezone(UTC).isoformat().replace("+00:00", "Z")
    assert set(resv["users"]) == {"alice", "bob"} and RESERVATION in why["reservation"]["summary"]


def test_the_qos_limit_names_its_value_and_use(why: dict[str, dict[str, Any]]) -> None:
    (per_user,) = facts(why["qos_user"], "limit")
    running = sh("squeue", "-h", "-u", "alice", "-q", "capped", "-t", "R", "-o", "%i").split()
    limit = sh("sacctmgr", "-n", "-P", "show", "qos", "capped", "format=maxjobspu").strip()
    assert (per_user["scope"], per_user["owner"], per_user["per"], per_user["name"]) == ("qos", "capped", "user",
                                                                                        "MaxJobsPU")
    assert per_user["value"] == int(limit) == 1 and per_user["used"] == len(running) == 1 and per_user["reached"]
    assert "QOS capped" in why["qos_user"]["summary"]
    (wall,) = facts(why["qos_wall"], "limit")
    assert (wall["name"], wall["per"], wall["value"], wall["asked"], wall["reached"]) == ("MaxWallPJ", "job", 30, 60,
                                                                                         True)
    assert any("timelimit=30" in hint for hint in why["qos_wall"]["owner_can"])


def test_the_account_limit_names_the_account(why: dict[str, dict[str, Any]]) -> None:
    found = facts(why["account"], "limit")
    grp = sh("sacctmgr", "-n", "-P", "show", "assoc", f"account={ACCOUNT}", "format=user,grpjobs").splitlines()
    running = sh("squeue", "-h", "-A", ACCOUNT, "-t", "R", "-o", "%i").split()
    assert "|1" in grp and found
    assert (found[0]["scope"], found[0]["owner"], found[0]["name"], found[0]["value"], found[0]["used"]) == (
        "association", ACCOUNT, "GrpJobs", 1, len(running))
    assert found[0]["reached"] and ACCOUNT in why["account"]["summary"]


def test_partitions_down_or_too_short(why: dict[str, dict[str, Any]]) -> None:
    (down,) = facts(why["down"], "partition")
    assert "State=DOWN" in sh("scontrol", "-o", "show", "partition", "short")
    assert (down["partition"], down["state"]) == ("short", "DOWN") and "short" in why["down"]["summary"]
    (short,) = facts(why["too_long"], "partition")
    assert (short["partition"], short["max_time"], short["asked_time"]) == ("batch", "PT1H", "PT2H")
    assert any("timelimit=1:00:00" in hint for hint in why["too_long"]["owner_can"])


@pytest.fixture(scope="module")
def explained(cluster_settings: Settings, client: CliSlurmClient,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Ask the action now for one job's answer (the ``why`` fixture's are as of the module's start)."""
    settings = cluster_settings.model_copy(deep=True)
    settings.state_dir = tmp_path_factory.mktemp("why-again")
    cat = Catalogue.from_settings(settings, client=client)

    def ask(job: int) -> dict[str, Any]:
        env = cat.execute("slurm.job.why", {"jobids": [str(job)]}, principal="root", via="cli")
        assert env.status == "succeeded", env.stderr
        result: dict[str, Any] = env.result[str(job)]
        return result

    yield ask
    cat.close()


def _same_factors(answer: dict[str, Any], job: int) -> bool:
    """The answer's priority factors are sprio's (the age part grows between the two reads)."""
    (priority,) = facts(answer, "priority")
    line = sh("sprio", "-h", "-j", str(job), "-o", "%Y %F %N").split()
    return (abs(priority["priority"] - int(line[0])) <= 20 and
            (priority["weighted"]["fairshare"], priority["nice"]) == (int(line[1]), int(line[2])))


def _batch_waiting() -> list[tuple[int, int]]:
    """(job, priority) of batch's jobs waiting for resources, in the order squeue serves them."""
    rows = [line.split() for line in sh("squeue", "-h", "-p", "batch", "-t", "PD", "-o", "%i %Q %r").splitlines()]
    waiting = [(int(i), int(q)) for i, q, r in rows if r in ("Priority", "Resources", "None")]
    return sorted(waiting, key=lambda w: (-w[1], w[0]))


def test_resources_and_priority_rank_the_jobs_as_squeue_and_sprio_do(why: dict[str, dict[str, Any]],
                                                                    scenario: dict[str, int], explained: Any) -> None:
    order = _batch_waiting()
    assert [j for j, _ in order] == [scenario["first"], scenario["second"]]
    for name, rank in (("first", 1), ("second", 2)):
        answer = why[name]
        (fact,) = facts(answer, "rank")
        assert (fact["partition"], fact["rank"], fact["waiting"], fact["ahead"]) == ("batch", rank, 2, rank - 1)
        (priority,) = facts(answer, "priority")
        assert priority["weights"]["fairshare"] == 10000 and priority["nice"] == (100 if name == "second" else 0)
        # slurmctld recomputes priorities every minute (PriorityCalcPeriod): sprio is read right
        # after the action, and both again should a recomputation fall between them
        wait_for(lambda n=name: _same_factors(explained(scenario[n]), scenario[n]), 130, 1,
                 what=f"the {name} job's factors as sprio gives them")
        (resources,) = facts(answer, "resources")
        assert (resources["partition"], resources["idle_cpus"], resources["total_cpus"]) == ("batch", 0, 4)
    (ahead,) = facts(why["second"], "rank")[0]["ahead_jobs"]
    assert ahead["job_id"] == scenario["first"] and ahead["user_name"] == "alice"
    assert facts(why["second"], "priority")[0]["nice"] == 100
    assert len(facts(why["first"], "start")) == 1

    def same_start() -> bool:
        # the backfill scheduler moves its estimate each cycle: squeue and a fresh answer,
        # read together, again should a cycle fall between them
        start = sh("squeue", "-h", "--start", "-j", str(scenario["first"]), "-o", "%S").strip()
        (expected,) = facts(explained(scenario["first"]), "start")
        if start == "N/A":
            return True
        when = parse_text_time(start)
        assert when is not None
        return bool(expected["start_time"] == when.astimezone(UTC).isoformat().replace("+00:00", "Z"))

    wait_for(same_start, 60, 1, what="the first job's start as squeue --start gives it")
    assert "next in line" in why["first"]["summary"] and "1 job of a higher priority" in why["second"]["summary"]


def test_a_running_job_does_not_wait(why: dict[str, dict[str, Any]]) -> None:
    answer = why["fill1"]
    assert not answer["pending"] and answer["category"] == "not_pending" and "RUNNING" in answer["summary"]


def test_an_unknown_reason_is_shown_as_itself_with_the_generic_facts(scenario: dict[str, int],
                                                                     client: CliSlurmClient) -> None:
    (job,) = [j for j in client.queue(job_ids=[scenario["second"]]) if j.job_id == scenario["second"]]
    newer = job.model_copy(update={"state_reason": "WaitingForQuantumAnnealer"})  # a newer release's code
    answer = explain(newer, ClientSources(client)).model_dump(mode="json")
    assert (answer["reason"], answer["known"], answer["category"]) == ("WaitingForQuantumAnnealer", False, "unknown")
    assert "WaitingForQuantumAnnealer" in answer["summary"]
    assert {"priority", "rank", "start", "resources"} <= {f["kind"] for f in answer["facts"]}


def test_a_snapshots_ranking_is_patched_as_it_would_be_made() -> None:
    rng = random.Random(44)
    reasons = ["Priority", "Resources", None, "JobHeldUser", "BeginTime"]

    def job(i: int) -> Job:
        return Job(job_id=i, state=rng.choice([JobState.PENDING] * 4 + [JobState.RUNNING]),
                   partition=rng.choice(["debug", "batch", "batch,short"]), user_name=rng.choice(["alice", "bob"]),
                   priority=rng.randint(1, 50), state_reason=rng.choice(reasons))

    first = JobTable.from_jobs([job(i) for i in range(1, 400)])
    ranked = why_module._table_waiting(first)
    assert ranked["batch"] == sorted(ranked["batch"]) and ranked["short"]
    frags = list(first.fragments)
    for row in rng.sample(range(len(frags)), 30):  # a refresh: 30 jobs changed, the rest the same bytes
        frags[row] = job_fragment(job(first.keys[row]))
    columns = {c: list(first.columns[c]) for c in ("user", "account", "partition", "state", "name", "nodes", "line")}
    for row, frag in enumerate(frags):
        model = Job.model_validate_json(frag)
        columns["user"][row], columns["partition"][row], columns["state"][row] = (
            model.user_name, model.partition, model.state.value)
    second = JobTable(first.keys, frags, columns)
    patched = why_module._table_waiting(second)
    why_module._LAST.clear()
    fresh = why_module._table_waiting(JobTable(second.keys, second.fragments, second.columns))
    assert patched == fresh and patched != ranked


def test_criterias_explain_a_users_pending_jobs(cluster_settings: Settings, client: CliSlurmClient,
                                                scenario: dict[str, int], tmp_path: Path) -> None:
    settings = cluster_settings.model_copy(deep=True)
    settings.state_dir = tmp_path
    cat = Catalogue.from_settings(settings, client=client)
    env = cat.execute("slurm.job.why", {"criterias": {"user": "bob", "partition": "debug"}}, principal="root",
                      via="cli")
    cat.close()
    pending = set(sh("squeue", "-h", "-u", "bob", "-p", "debug", "-t", "PD", "-o", "%i").split())
    assert env.status == "succeeded" and set(env.result) == pending
    assert {str(scenario[n]) for n in ("held_admin", "begin", "node", "account", "qos_wall")} <= set(env.result)


# -- the API (from the snapshots), the CLI ------------------------------------------------------------


def test_the_api_explains_from_the_snapshots_as_the_action_does(api: str, why: dict[str, dict[str, Any]],
                                                                scenario: dict[str, int]) -> None:
    for name in REASONS:
        resp = get(api, f"/jobs/{scenario[name]}/why")
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        assert (answer["reason"], answer["category"], answer["known"]) == (
            why[name]["reason"], why[name]["category"], True), name
        assert sorted(f["kind"] for f in answer["facts"]) == sorted(f["kind"] for f in why[name]["facts"]), name
        for kind in ("hold", "dependency", "node", "reservation", "limit", "partition", "rank"):
            # what moves between the two reads is left out: a limit's use, the priorities ahead
            # (slurmctld recomputes them every minute)
            mine = [_stable(f) for f in facts(answer, kind)]
            assert mine == [_stable(f) for f in facts(why[name], kind)], (name, kind)


def _stable(fact: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in fact.items() if k not in ("text", "used")}
    if "ahead_jobs" in out:
        out["ahead_jobs"] = [a["job_id"] for a in out["ahead_jobs"]]
    return out


def test_the_cli_says_why_in_plain_words(scenario: dict[str, int], devcluster: DevCluster) -> None:
    env = devcluster.command_env()
    out = subprocess.run([SCRIPT, "why", str(scenario["node"]), str(scenario["qos_user"])], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"Job {scenario['node']} (bob, debug, PENDING): ReqNodeNotAvail" in out.stdout
    assert "Node n4 is IDLE+DRAIN" in out.stdout and "QOS capped allows 1 running job per user" in out.stdout
    data = json.loads(subprocess.run([SCRIPT, "why", str(scenario["begin"]), "-o", "json"], capture_output=True,
                                     text=True, env=env, timeout=60, check=True).stdout)
    assert data[str(scenario["begin"])]["reason"] == "BeginTime"
    for bad, message in (("999999", "unknown job(s): 999999"), ("abc", "abc")):
        res = subprocess.run([SCRIPT, "why", bad], capture_output=True, text=True, env=env, timeout=60)
        assert res.returncode == 2 and res.stdout == "", res
        assert res.stderr.startswith("slurmtower: error:") and message in res.stderr and res.stderr.count("\n") == 1


def test_bad_input_is_a_problem_naming_it(api: str, scenario: dict[str, int]) -> None:
    for path, status, param in (("/jobs/abc/why", 400, "job_id"), ("/jobs/0/why", 400, "job_id"),
                                (f"/jobs/{scenario['node']}/why?verbose=1", 400, "verbose"),
                                ("/jobs/4294967290/why", 404, "job_id"), ("/fairshare?x=1", 400, "x")):
        resp = get(api, path)
        assert resp.status_code == status and resp.headers["content-type"] == "application/problem+json", path
        assert resp.json().get("param") == param, (path, resp.json())
    both = httpx.post(f"{api}/actions/slurm.job.why", json={"jobids": ["1"], "criterias": {"user": "bob"}},
                      headers={"Authorization": f"Bearer {TOKENS['operator'][2]}"}, timeout=60)
    assert both.status_code == 400 and "jobids or criterias" in both.json()["detail"]


# -- who sees what -----------------------------------------------------------------------------------------


def test_the_user_role_sees_why_only_for_its_own_jobs(api: str, scenario: dict[str, int]) -> None:
    assert get(api, f"/jobs/{scenario['qos_user']}/why", "alice").json()["reason"] == "QOSMaxJobsPerUserLimit"
    refused = get(api, f"/jobs/{scenario['node']}/why", "alice")
    assert refused.status_code == 403 and str(scenario["node"]) in refused.json()["detail"]
    action = httpx.post(f"{api}/actions/slurm.job.why", json={"jobids": [str(scenario["node"])]},
                        headers={"Authorization": f"Bearer {TOKENS['alice'][2]}"}, timeout=60)
    assert action.status_code == 403 and str(scenario["node"]) in action.json()["detail"]
    crit = httpx.post(f"{api}/actions/slurm.job.why", json={"criterias": {"user": "bob"}},
                      headers={"Authorization": f"Bearer {TOKENS['alice'][2]}"}, timeout=60)
    assert crit.status_code == 403 and crit.json()["param"] == "criterias.user"
    mine = httpx.post(f"{api}/actions/slurm.job.why", json={"criterias": {"partition": "batch"}},
                      headers={"Authorization": f"Bearer {TOKENS['alice'][2]}"}, timeout=60)
    assert mine.status_code == 200 and set(mine.json()["result"]) == {
        str(scenario[n]) for n in ("first", "second", "too_long")}


def test_readers_see_the_jobs_ahead_counted_operators_named(api: str, scenario: dict[str, int]) -> None:
    def rank(who: str) -> dict[str, Any]:
        resp = get(api, f"/jobs/{scenario['second']}/why", who)
        assert resp.status_code == 200, resp.text
        return facts(resp.json(), "rank")[0]

    named = [a["job_id"] for a in rank("operator")["ahead_jobs"]]
    assert named == [scenario["first"]] and rank("admin")["ahead_jobs"] == rank("operator")["ahead_jobs"]
    reader = rank("reader")  # alice's job ahead is another user's for rita: counted, not named
    assert (reader["ahead"], reader["ahead_jobs"], reader["unnamed_ahead"]) == (1, [], 1)
    owner = rank("alice")  # her own job ahead: named
    assert [a["job_id"] for a in owner["ahead_jobs"]] == [scenario["first"]] and owner["unnamed_ahead"] == 0


def test_the_job_pages_panel_follows_the_same_rules(api: str, scenario: dict[str, int]) -> None:
    own = get(api, f"/ui/jobs/{scenario['qos_user']}", "alice")
    assert own.status_code == 200 and 'id="why-summary"' in own.text and "QOS capped" in own.text
    other = get(api, f"/ui/jobs/{scenario['node']}", "alice")  # the page is a reader's; the panel is not
    assert other.status_code == 200 and 'id="why-note"' in other.text and 'id="why-summary"' not in other.text
    assert "shown to the job&#39;s owner, operators and admins" in other.text
    reader = get(api, f"/ui/jobs/{scenario['second']}", "reader")
    assert 'id="why-summary"' in reader.text and "data-ahead=" not in reader.text
    assert 'data-unnamed="1"' in reader.text and "1 job not named here" in reader.text


# -- fair share -------------------------------------------------------------------------------------------


def _sshare() -> dict[tuple[str, str | None], str]:
    out = sh("sshare", "-a", "-n", "-P", "-o", "Account,User,RawShares")
    return {(a.strip(), u or None): s for a, u, s in (line.split("|") for line in out.splitlines())}


def test_the_fairshare_tree_as_each_role_sees_it(api: str, scenario: dict[str, int]) -> None:
    expected = _sshare()
    whole = get(api, "/fairshare").json()
    assert whole["access"] == "all"
    assert {(r["account"], r["user"]): str(r["raw_shares"] if r["raw_shares"] is not None else "")
            for r in whole["shares"]} == {k: v if v != "parent" else "" for k, v in expected.items()}
    by_line = {(r["account"], r["user"]): r for r in whole["shares"]}
    assert by_line[("physics", "alice")]["parent"] == "physics" and by_line[(ACCOUNT, None)]["parent"] == "root"
    assert 0 <= by_line[("physics", "alice")]["fairshare"] <= 1
    alice = get(api, "/fairshare", "alice").json()
    assert alice["access"] == "own"
    assert {(r["account"], r["user"]) for r in alice["shares"]} == {
        ("physics", "alice"), ("physics", None), (ACCOUNT, "alice"), (ACCOUNT, None)}
    reader = get(api, "/fairshare", "reader").json()
    assert reader["access"] == "totals" and reader["shares"]
    assert all(r["user"] is None for r in reader["shares"])
    assert {r["account"] for r in reader["shares"]} == {a for a, u in expected if u is None}


# -- the dashboard ------------------------------------------------------------------------------------------


@pytest.mark.browser
def test_the_job_page_says_why_it_waits(api: str, scenario: dict[str, int], browser: Any) -> None:  # noqa: F811
    page = page_as(browser, api, TOKENS["operator"][2], f"/ui/jobs/{scenario['node']}")
    wait_js(page, "document.querySelector('#why-summary') !== null")
    assert page.inner_text("#why-title") == "Why is it waiting"
    assert page.inner_text("#why-reason") == "ReqNodeNotAvail" and "n4" in page.inner_text("#why-summary")
    assert page.get_attribute("#why-facts li[data-kind=node] a", "href") == "/ui/nodes/n4"
    shoot(page, "job-why")
    def shows_sprios_fairshare() -> bool:  # the service keeps sprio's answer 10 s: read again until it is the latest
        page.goto(f"{api}/ui/jobs/{scenario['second']}")
        wait_js(page, "document.querySelector('#why-facts li[data-kind=priority]') !== null")
        fairshare = sh("sprio", "-h", "-j", str(scenario["second"]), "-o", "%F").strip()
        return bool(page.inner_text("#why-facts tr[data-factor=fairshare] td.num") == fairshare)

    wait_for(shows_sprios_fairshare, 130, 2, what="the page's fair-share factor to be sprio's")
    assert page.get_attribute(f"#why-facts li[data-ahead='{scenario['first']}'] a", "href") == \
        f"/ui/jobs/{scenario['first']}"
    page.goto(f"{api}/ui/jobs/{scenario['fill1']}")  # running: no panel
    assert page.query_selector("#why") is None
    page.goto(f"{api}/ui/fairshare")
    wait_js(page, "document.querySelector('table.fairshare-tree') !== null")
    assert page.query_selector(f"tr[data-account='{ACCOUNT}'][data-user='alice']") is not None
    shoot(page, "fairshare")
    page.context.close()
