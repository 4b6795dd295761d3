"""Job control through the catalogue, the HTTP API and the CLI, on the local cluster: each
action on pending, running and array jobs, dry runs equal to squeue's list, the user role on
its own jobs, the job breaker, partial outcomes, bad input, the audit and AdminComment."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmtower.actions import Catalogue
from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.errors import InvalidInput, NotFound
from slurmtower.runtime import Services
from slurmtower.settings import Settings, TokenEntry
from slurmtower.slurm import CliSlurmClient

from .conftest import sh, submit, wait_for
from .test_actions_api import Http

pytestmark = [pytest.mark.cluster, pytest.mark.release]

TOKENS = {"reader": ("reader-bot", "r-token-123"), "operator": ("operator-bot", "o-token-456"),
          "admin": ("admin-bot", "a-token-789"), "alice": ("alice", "u-token-alice"), "bob": ("bob", "u-token-bob")}
SCRIPT = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "slurmtower")


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who][1]}"}


def state(job: int | str) -> str:
    """squeue's state and reason of a job (``""`` once it left the queue)."""
    return sh("squeue", "-h", "-j", str(job), "-o", "%T %r", check=False).strip()


@pytest.fixture()
def jobs(devcluster: Any) -> Iterator[list[int]]:
    """Jobs submitted by the test (appended to the list), cancelled after it."""
    submitted: list[int] = []
    yield submitted
    if submitted:
        sh("scancel", *map(str, submitted), check=False)


def pending(user: str, jobs: list[int], *args: str) -> int:
    job = submit(user, "--begin=now+1hour", "-J", "st-jobctl", *args, "--wrap", "sleep 300")
    jobs.append(job)
    return job


def running(user: str, jobs: list[int], *args: str) -> int:
    job = submit(user, "-J", "st-jobctl", *args, "--wrap", "sleep 300")
    jobs.append(job)
    wait_for(lambda: state(job).startswith("RUNNING"), 30, what=f"job {job} running")
    return job


@pytest.fixture()
def catalogue(settings: Settings, client: CliSlurmClient) -> Iterator[Catalogue]:
    cat = Catalogue.from_settings(settings, client=client)
    yield cat
    cat.close()


def act(cat: Catalogue, name: str, params: dict[str, Any], **kw: Any) -> Any:
    return cat.execute(name, params, principal=kw.pop("who", "root"), via=kw.pop("via", "cli"), **kw)


@pytest.fixture()
def http(settings: Settings, client: CliSlurmClient) -> Iterator[Http]:
    settings.auth.tokens = [TokenEntry(name=name, role="user" if who in ("alice", "bob") else who,  # type: ignore[arg-type]
                                       sha256=hash_token(tok)) for who, (name, tok) in TOKENS.items()]
    yield Http(create_app(services=Services(settings=settings, client=client)))


def test_each_action_on_pending_running_and_array_jobs(catalogue: Catalogue, jobs: list[int]) -> None:
    wait = pending("root", jobs)
    run = running("root", jobs)
    array = pending("root", jobs, "--array=1-4")
    env = act(catalogue, "slurm.job.hold", {"jobids": [wait, f"{array}_[2-3]", run]})
    assert env.status == "succeeded" and env.exit_code == 0, env.stderr
    assert env.result["outcomes"] == {"held": [str(wait), f"{array}_[2-3]"], "unchanged": [str(run)]}
    assert env.result["jobs"][str(run)]["why"].startswith("not pending")
    assert state(wait) == "PENDING JobHeldAdmin" and state(f"{array}_2") == "PENDING JobHeldAdmin"
    assert "JobHeld" not in state(f"{array}_1")  # the other tasks are untouched
    assert "slurmtower: hold by root@cli" in sh("scontrol", "show", "job", str(wait))
    env = act(catalogue, "slurm.job.release", {"jobids": [wait, array]})
    assert env.result["counts"] == {"released": 2} and "JobHeld" not in state(wait)
    assert act(catalogue, "slurm.job.suspend", {"jobids": [run]}).result["outcomes"] == {"suspended": [str(run)]}
    assert state(run).startswith("SUSPENDED")
    assert act(catalogue, "slurm.job.resume", {"jobids": [run]}).result["outcomes"] == {"resumed": [str(run)]}
    assert act(catalogue, "slurm.job.signal", {"jobids": [run], "signal": "USR1"}).result["counts"] == {
        "signalled": 1}
    env = act(catalogue, "slurm.job.update", {"jobids": [wait], "infos": {"time_limit": 7, "comment": "moved"}})
    assert env.result["outcomes"] == {"updated": [str(wait)]}
    shown = sh("scontrol", "show", "job", str(wait))
    assert "TimeLimit=00:07:00" in shown and "Comment=moved" in shown
    env = act(catalogue, "slurm.job.requeue", {"jobids": [run], "hold": True})
    assert env.result["outcomes"] == {"requeued": [str(run)]}
    wait_for(lambda: state(run).startswith("PENDING"), 30, what="requeued held")
    env = act(catalogue, "slurm.job.cancel", {"jobids": [wait, run, array]})
    assert env.result["counts"] == {"cancelled": 3} and env.status == "succeeded"
    assert all(state(j) in ("", "COMPLETING") or state(j).startswith("CANCELLED") for j in (wait, run, array))


def test_admin_comment_only_up_to_its_bound(catalogue: Catalogue, settings: Settings, jobs: list[int]) -> None:
    settings.actions.job_admin_comment_max = 1
    two = [pending("root", jobs), pending("root", jobs)]
    env = act(catalogue, "slurm.job.hold", {"jobids": two})
    assert env.result["counts"] == {"held": 2} and "AdminComment not set: 2 jobs" in env.stdout
    assert "slurmtower:" not in sh("scontrol", "show", "job", str(two[0]))
    env = act(catalogue, "slurm.job.release", {"jobids": two[:1]})
    assert "slurmtower: release by root@cli" in sh("scontrol", "show", "job", str(two[0]))


def test_a_het_job_and_one_of_its_components(catalogue: Catalogue, jobs: list[int]) -> None:
    het = int(sh("sbatch", "--parsable", "-o", "/dev/null", "--begin=now+1hour", "-n1", ":", "-n1",
                 "--wrap", "sleep 300").strip())
    jobs.append(het)

    def components() -> dict[str, str]:
        out = sh("squeue", "-h", "-j", str(het), "-o", "%i %T %r")
        return dict(line.split(" ", 1) for line in out.splitlines())

    env = act(catalogue, "slurm.job.hold", {"jobids": [het]})  # the whole het job
    assert env.result["outcomes"] == {"held": [str(het)]}
    assert components() == {f"{het}+0": "PENDING JobHeldAdmin", f"{het}+1": "PENDING JobHeldAdmin"}
    env = act(catalogue, "slurm.job.release", {"jobids": [f"{het}+1"]})  # one component
    assert env.result["outcomes"] == {"released": [f"{het}+1"]}, env.result
    now = components()
    assert now[f"{het}+0"] == "PENDING JobHeldAdmin" and "JobHeld" not in now[f"{het}+1"]


def test_a_dry_run_lists_what_squeue_lists_and_changes_nothing(catalogue: Catalogue, jobs: list[int]) -> None:
    mine = [pending("alice", jobs), pending("alice", jobs, "--array=1-3"), pending("alice", jobs, "-p", "batch")]
    other = pending("bob", jobs)
    criterias = {"user": "alice", "partition": "debug", "state": "PENDING"}
    env = act(catalogue, "slurm.job.hold", {"criterias": criterias, "dry_run": True})
    listed = sh("squeue", "-h", "-u", "alice", "-p", "debug", "-t", "PENDING", "-o", "%i").split()
    assert sorted(env.result["jobs"]) == sorted(listed) and len(listed) == 2
    assert all(v["would"] == "hold" for v in env.result["jobs"].values()) and env.dry_run
    assert str(other) not in env.result["jobs"] and str(mine[2]) not in env.result["jobs"]
    assert not any("JobHeld" in state(j) for j in [*mine, other])  # nothing changed
    # the act builds the same list the same way
    env = act(catalogue, "slurm.job.hold", {"criterias": criterias})
    assert sorted(env.result["outcomes"]["held"]) == sorted(listed)


def test_the_user_role_acts_on_its_own_jobs_only(http: Http, jobs: list[int]) -> None:
    alice, bob = pending("alice", jobs), pending("bob", jobs)
    refused = http.post("/actions/slurm.job.cancel", json={"jobids": [alice, bob]}, headers=auth("alice"))
    assert refused.status_code == 403 and str(bob) in refused.json()["detail"], refused.text
    assert "nothing done" in refused.json()["detail"] and state(alice) == "PENDING BeginTime"
    theirs = http.post("/actions/slurm.job.hold", json={"criterias": {"user": "bob"}, "uhold": True},
                       headers=auth("alice"))
    assert theirs.status_code == 403 and theirs.json()["param"] == "criterias.user"
    admin_hold = http.post("/actions/slurm.job.hold", json={"jobids": [alice]}, headers=auth("alice"))
    assert admin_hold.status_code == 403 and admin_hold.json()["param"] == "uhold"
    assert http.post("/actions/slurm.job.suspend", json={"jobids": [alice]}, headers=auth("alice")).status_code == 403
    longer = http.post("/actions/slurm.job.update", json={"jobids": [alice], "infos": {"priority": 9}},
                       headers=auth("alice"))
    assert longer.status_code == 403 and longer.json()["param"] == "priority"
    reader = http.post("/actions/slurm.job.cancel", json={"jobids": [alice]}, headers=auth("reader"))
    assert reader.status_code == 403 and "user role" in reader.json()["detail"]
    assert state(alice) == "PENDING BeginTime" and state(bob) == "PENDING BeginTime"
    # her own: a user hold, then the cancel; the audit names her, AdminComment too
    held = http.post("/actions/slurm.job.hold", json={"criterias": {"state": "PENDING"}, "uhold": True},
                     headers=auth("alice"))
    assert held.status_code == 200 and held.json()["result"]["outcomes"] == {"held": [str(alice)]}, held.text
    assert state(alice) == "PENDING JobHeldUser" and state(bob) == "PENDING BeginTime"
    done = http.post("/actions/slurm.job.cancel", json={"jobids": [alice]}, headers=auth("alice"))
    assert done.status_code == 200 and done.json()["result"]["counts"] == {"cancelled": 1}
    assert "slurmtower: cancel by alice@api" in sh("scontrol", "show", "job", str(alice))
    audit = http.get("/audit", params={"action": "slurm.job.cancel"}, headers=auth("admin")).json()
    outcome = next(r for r in audit["records"] if r["outcome"] == "succeeded")
    assert outcome["who"] == "alice" and outcome["after"]["jobs"] == {"cancelled": [str(alice)]}
    # an operator acts on anyone's
    ops = http.post("/actions/slurm.job.cancel", json={"jobids": [bob]}, headers=auth("operator"))
    assert ops.status_code == 200 and ops.json()["result"]["counts"] == {"cancelled": 1}


def test_hidden_partitions_jobs_are_unknown(http: Http, settings: Settings, jobs: list[int]) -> None:
    settings.api.hidden_partitions = ["batch"]
    hidden = pending("alice", jobs, "-p", "batch")
    answer = http.post("/actions/slurm.job.cancel", json={"jobids": [hidden]}, headers=auth("admin"))
    assert answer.status_code == 404 and answer.json()["param"] == "jobids"
    listed = http.post("/actions/slurm.job.hold", json={"criterias": {"user": "alice"}, "dry_run": True},
                       headers=auth("admin"))
    assert str(hidden) not in listed.json()["result"]["jobs"] and state(hidden) == "PENDING BeginTime"


def test_the_job_breaker_at_its_threshold(http: Http, settings: Settings, jobs: list[int]) -> None:
    settings.actions.job_breaker_min_jobs = 2
    settings.actions.job_breaker_share = 0.01
    three = [pending("root", jobs) for _ in range(3)]
    assert http.post("/actions/slurm.job.hold", json={"jobids": three[:2]}, headers=auth("operator")).status_code == 200
    # two held within the window: one more trips it
    tripped = http.post("/actions/slurm.job.hold", json={"jobids": three[2:]}, headers=auth("operator"))
    assert tripped.status_code == 409 and "job breaker" in tripped.json()["detail"], tripped.text
    assert state(three[2]) == "PENDING BeginTime"
    events = http.get("/events", params={"type": "slurmtower.breaker.tripped"}, headers=auth("admin")).json()
    assert any(e["payload"]["action"] == "slurm.job.hold" for e in events)
    forced = http.post("/actions/slurm.job.hold", json={"jobids": three[2:], "override_breaker": True},
                       headers=auth("operator"))
    assert forced.status_code == 403 and forced.json()["param"] == "override_breaker"
    forced = http.post("/actions/slurm.job.hold", json={"jobids": three[2:], "override_breaker": True},
                       headers=auth("admin"))
    assert forced.status_code == 200 and forced.json()["result"]["breaker"]["overridden"] is True
    assert state(three[2]) == "PENDING JobHeldAdmin"
    # releases count as the holds did: three more past the limit
    released = http.post("/actions/slurm.job.release", json={"jobids": three}, headers=auth("operator"))
    assert released.status_code == 409 and released.json()["breaker"]["requested"] == 3, released.text
    assert state(three[0]) == "PENDING JobHeldAdmin"


def test_the_job_breaker_guards_one_users_jobs(http: Http, settings: Settings, jobs: list[int]) -> None:
    """Operators acting on most of one user's jobs trip the breaker even when the queue is
    long; the user acting on their own jobs does not."""
    settings.actions.job_breaker_min_jobs = 2
    settings.actions.job_breaker_share = 0.5
    bobs = [pending("bob", jobs) for _ in range(3)]
    alices = [pending("alice", jobs) for _ in range(6)]
    queue = len(sh("squeue", "-h", "-o", "%i").split())  # the jobs squeue lists: the breaker's queue
    assert max(2, queue // 2) >= 4  # the queue's scope lets 4 through (9 jobs of this test, maybe others')
    tripped = http.post("/actions/slurm.job.hold", json={"jobids": bobs}, headers=auth("operator"))
    assert tripped.status_code == 409 and "bob's 3 jobs" in tripped.json()["detail"], tripped.text
    assert tripped.json()["breaker"]["scope"] == "user" and not any("JobHeld" in state(j) for j in bobs)
    two = http.post("/actions/slurm.job.hold", json={"jobids": alices[:2]}, headers=auth("operator"))
    assert two.status_code == 200 and two.json()["result"]["counts"] == {"held": 2}
    # alice's own: her scope (2 + 2 of her 6 jobs, past 50 %) does not guard what she does herself
    own = http.post("/actions/slurm.job.hold", json={"jobids": alices[2:4], "uhold": True}, headers=auth("alice"))
    assert own.status_code == 200 and own.json()["result"]["counts"] == {"held": 2}, own.text


def test_the_job_breaker_counts_an_arrays_tasks(http: Http, settings: Settings, jobs: list[int]) -> None:
    """A held 250-task array is one record in squeue and 250 jobs to the breaker (its
    defaults: 50 % of the queue, at least 100 jobs): cancelling, releasing or changing it
    whole is refused with that count, and an admin's release records 250 jobs acted on.
    (250, not the 1,000 of issue 41: each pending task counts against MaxJobCount, 10,000
    for the whole session's cluster.)"""
    array = submit("alice", "--hold", "--begin=now+1hour", "--array=1-250", "-J", "st-jobctl", "--wrap", "sleep 300")
    jobs.append(array)
    tasks = ["squeue", "-h", "-r", "-j", str(array), "-o", "%i %T %r %l"]
    before = sh(*tasks)
    assert len(before.splitlines()) == 250 and len(sh("squeue", "-h", "-j", str(array), "-o", "%i").split()) == 1
    assert len(sh("squeue", "-h", "-r", "-o", "%i").split()) < 500  # the array is more than half the queue
    for name, extra in [("slurm.job.cancel", {}), ("slurm.job.release", {}),
                        ("slurm.job.update", {"infos": {"time_limit": 5}}),
                        ("slurm.job.cancel", {"dry_run": True})]:
        refused = http.post(f"/actions/{name}", json={"jobids": [array], **extra}, headers=auth("operator"))
        assert refused.status_code == 409, (name, refused.text)
        assert "of 250 job(s)" in refused.json()["detail"] and refused.json()["breaker"]["requested"] == 250
    assert sh(*tasks) == before  # nothing changed
    released = http.post("/actions/slurm.job.release", json={"jobids": [array], "override_breaker": True},
                         headers=auth("admin"))
    assert released.status_code == 200 and released.json()["result"]["affected"] == 250, released.text
    audit = http.get("/audit", params={"action": "slurm.job.release"}, headers=auth("admin")).json()
    assert next(r for r in audit["records"] if r["outcome"] == "succeeded")["after"]["acted"] == 250
    # the 250 released are in the window: one more job acted on is past the limit
    one = http.post("/actions/slurm.job.hold", json={"jobids": [f"{array}_7"]}, headers=auth("operator"))
    assert one.status_code == 409 and one.json()["breaker"]["earlier"] == 250, one.text
    settings.actions.breaker_window = 0.001  # the release out of the window: the hold of the whole is refused alone
    held = http.post("/actions/slurm.job.hold", json={"jobids": [array]}, headers=auth("operator"))
    assert held.status_code == 409 and held.json()["breaker"]["requested"] == 250, held.text
    assert held.json()["breaker"]["earlier"] == 0 and "JobHeld" not in sh(*tasks)


def test_the_job_breaker_counts_a_het_jobs_components(http: Http, settings: Settings, jobs: list[int]) -> None:
    settings.actions.job_breaker_min_jobs = 1
    settings.actions.job_breaker_share = 0.01
    het = int(sh("sbatch", "--parsable", "-o", "/dev/null", "--begin=now+1hour", "-n1", ":", "-n1",
                 "--wrap", "sleep 300").strip())
    jobs.append(het)
    whole = http.post("/actions/slurm.job.hold", json={"jobids": [het]}, headers=auth("operator"))
    assert whole.status_code == 409 and "of 2 job(s)" in whole.json()["detail"], whole.text
    one = http.post("/actions/slurm.job.hold", json={"jobids": [f"{het}+1"]}, headers=auth("operator"))
    assert one.status_code == 200 and one.json()["result"]["affected"] == 1, one.text


def test_every_job_action_counts(http: Http, settings: Settings, jobs: list[int]) -> None:
    """Releases, updates and resumes count as cancels and holds do (a priority=0 update holds
    jobs; a release or resume of many starts them at once)."""
    settings.actions.job_breaker_min_jobs = 2
    settings.actions.job_breaker_share = 0.01
    held = [pending("root", jobs, "--hold") for _ in range(3)]  # sbatch --hold: a user hold
    for name, extra in [("slurm.job.update", {"infos": {"time_limit": 5}}),
                        ("slurm.job.update", {"infos": {"priority": 0}}), ("slurm.job.release", {})]:
        refused = http.post(f"/actions/{name}", json={"jobids": held, **extra}, headers=auth("operator"))
        assert refused.status_code == 409 and "of 3 job(s)" in refused.json()["detail"], (name, refused.text)
    assert all(state(j) == "PENDING JobHeldUser" for j in held)
    assert "TimeLimit=00:05:00" not in sh("scontrol", "show", "job", str(held[0]))
    run = [submit("root", "-J", "st-jobctl", "--wrap", "sleep 300") for _ in range(3)]  # started together
    jobs.extend(run)
    wait_for(lambda: all(state(j).startswith("RUNNING") for j in run), 30, what="three jobs running")
    sh("scontrol", "suspend", ",".join(map(str, run)))
    resumed = http.post("/actions/slurm.job.resume", json={"jobids": run}, headers=auth("operator"))
    assert resumed.status_code == 409 and resumed.json()["breaker"]["action"] == "slurm.job.resume", resumed.text
    assert all(state(j).startswith("SUSPENDED") for j in run)


def test_jobs_are_counted_as_slurm_counts_them(client: CliSlurmClient, catalogue: Catalogue, settings: Settings,
                                               devcluster: Any, jobs: list[int]) -> None:
    """Each array task and het component is a job: the clients' count, the rows' counts and
    the actions' agree, for a throttled, a stepped and a sparse array (its task list longer
    than squeue's 64 characters as given) and a het job; and a stepped array is acted on by
    filter (scontrol does not take 1-199:3 back)."""
    from slurmtower.slurm import RestSlurmClient

    settings.actions.job_breaker_enabled = False  # the counts are this test's, the breaker's are above

    def counted(*args: str) -> int:
        job = submit("alice", "--begin=now+1hour", "-J", "st-count", *args, "--wrap", "sleep 300")
        jobs.append(job)
        return job

    sparse = ",".join(str(n * (n + 1) // 2 + 1) for n in range(30))  # 1,2,4,7,11 ... 436: 30 tasks
    arrays = {counted("--array=1-100%10"): 100, counted("--array=1-199:3"): 67, counted(f"--array={sparse}"): 30}
    het = counted("-n1", ":", "-n1")
    mine = {"users": ["alice"], "names": ["st-count"], "states": ["PENDING"]}  # not those ended before
    slurm = 100 + 67 + 30 + 2  # (22.05's squeue -r lists 66 of 1-199:3: it drops a stepped range's last task)
    assert client.job_count(**mine) == slurm
    assert sum(j.job_count for j in client.queue(**mine)) == slurm
    # slurmrestd cuts a task list past 64 characters ("1-2,4,7 ... 172,19...": its own
    # SLURM_BITSTR_LEN, README): the sparse array is left out of its count
    rest = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", user="root", jwt_key_file=devcluster.jwt_key)
    try:
        assert rest.job_count(**mine, job_ids=[*list(arrays)[:2], het]) == 100 + 67 + 2
    finally:
        rest.close()
    env = act(catalogue, "slurm.job.hold", {"criterias": {"user": "alice", "name": "st-count"}, "dry_run": True})
    counts = {text.split("_")[0]: entry["count"] for text, entry in env.result["jobs"].items()}
    assert counts == {**{str(a): n for a, n in arrays.items()}, str(het): 2} and env.result["affected"] == slurm
    env = act(catalogue, "slurm.job.hold", {"jobids": [f"{next(iter(arrays))}_[1-20,15-30]"], "dry_run": True})
    assert env.result["affected"] == 30
    env = act(catalogue, "slurm.job.hold", {"criterias": {"user": "alice", "name": "st-count"}})
    assert env.result["counts"] == {"held": 4}, env.result
    assert set(sh("squeue", "-h", "-u", "alice", "-n", "st-count", "-o", "%r").split()) == {"JobHeldAdmin"}
    assert client.job_count(**mine) == slurm


class _EndsOneJob(CliSlurmClient):
    """A real client; right after the action reads the queue, one job really ends in Slurm
    (as if its owner cancelled it between the dry run and the act)."""

    victim = 0

    def queue(self, **kw: Any) -> Any:
        jobs = super().queue(**kw)
        if self.victim:
            sh("scancel", str(self.victim))
            wait_for(lambda: not state(self.victim).startswith("PENDING"), 10, what="the job ended")
            self.victim = 0
        return jobs


def test_a_job_that_ended_before_the_act_makes_a_partial_outcome(settings: Settings, runner: Any,
                                                                 jobs: list[int]) -> None:
    keep, ends = pending("root", jobs), pending("root", jobs)
    racing = _EndsOneJob(runner)
    racing.victim = ends
    cat = Catalogue.from_settings(settings, client=racing)
    try:
        env = act(cat, "slurm.job.hold", {"jobids": [keep, ends]})
    finally:
        cat.close()
    assert env.status == "partial" and env.exit_code == 4, env
    assert env.result["outcomes"] == {"held": [str(keep)], "gone": [str(ends)]}
    assert env.result["jobs"][str(ends)]["message"]


def test_a_refusal_by_slurm_is_named_per_job(catalogue: Catalogue, jobs: list[int]) -> None:
    wait, run = pending("root", jobs), running("root", jobs)
    env = act(catalogue, "slurm.job.update", {"jobids": [wait, run], "infos": {"partition": "batch"}})
    assert env.status == "partial" and env.exit_code == 4
    assert env.result["outcomes"] == {"updated": [str(wait)], "refused": [str(run)]}
    assert env.result["jobs"][str(run)]["message"]
    assert "Partition=batch" in sh("scontrol", "show", "job", str(wait))


@pytest.mark.parametrize(("params", "param", "text"), [
    ({"jobids": ["999999"]}, "jobids", "unknown job(s): 999999"),
    ({"jobids": ["12_[5-1]"]}, "jobids", "12_[5-1]"),
    ({"jobids": ["abc"]}, "jobids", "'abc'"),
    ({"jobids": ["1"], "criterias": {"user": "alice"}}, None, "not both"),
    ({}, None, "give jobids or criterias"),
    ({"criterias": {"owner": "alice"}}, "criterias", "unknown criterion 'owner'"),
])
def test_bad_input_is_one_line_and_changes_nothing(catalogue: Catalogue, jobs: list[int], params: dict[str, Any],
                                                   param: str | None, text: str) -> None:
    wait = pending("root", jobs)
    with pytest.raises((InvalidInput, NotFound)) as err:
        act(catalogue, "slurm.job.cancel", params)
    assert text in err.value.message and "\n" not in err.value.message
    if param is not None:
        assert err.value.extra["param"] == param
    assert state(wait) == "PENDING BeginTime"


def test_a_field_slurm_cannot_update_is_named(catalogue: Catalogue, jobs: list[int]) -> None:
    wait = pending("root", jobs)
    with pytest.raises(InvalidInput) as err:
        act(catalogue, "slurm.job.update", {"jobids": [wait], "infos": {"colour": "red", "comment": "x"}})
    assert "colour" in err.value.message
    with pytest.raises(InvalidInput, match="admin_comment"):
        act(catalogue, "slurm.job.update", {"jobids": [wait], "infos": {"admin_comment": "forged"}})
    assert "Comment=x" not in sh("scontrol", "show", "job", str(wait))


def test_the_cli_prints_the_envelope_and_exits_4_on_a_partial(devcluster: Any, tmp_path: Path,
                                                              jobs: list[int]) -> None:
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}
    wait, run = pending("root", jobs), running("root", jobs)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=60, check=False)

    res = cli("run", "slurm.job.update", f"jobids={wait},{run}", 'infos={"partition": "batch"}', "-o", "json")
    assert res.returncode == 4 and res.stderr.startswith("slurmtower: partial: slurm.job.update"), res.stderr
    assert json.loads(res.stdout)["result"]["counts"] == {"refused": 1, "updated": 1}
    res = cli("run", "slurm.job.cancel", "jobids=1_[", "-o", "json")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "jobids" in res.stderr
    res = cli("run", "slurm.job.cancel", f"jobids={wait}", "--dry-run", "-o", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["result"]["jobs"][str(wait)]["would"] == "cancel"
    assert state(wait).startswith("PENDING")
    res = cli("run", "slurm.job.cancel", f"jobids={wait},{run}")
    assert res.returncode == 0 and "cancel: 2 cancelled" in res.stdout



def test_job_actions_through_slurmrestd(settings: Settings, devcluster: Any, jobs: list[int]) -> None:
    """The REST backend: hold, release and cancel through slurmrestd's job endpoints (22.05's
    cannot set AdminComment: said, not failed); what it cannot do is a one-line Unsupported."""
    from slurmtower.errors import Unsupported
    from slurmtower.slurm import RestSlurmClient

    rest = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", user="root", jwt_key_file=devcluster.jwt_key)
    cat = Catalogue.from_settings(settings, client=rest)
    try:
        wait = pending("root", jobs)
        env = act(cat, "slurm.job.hold", {"jobids": [wait]})
        assert env.result["outcomes"] == {"held": [str(wait)]} and state(wait) == "PENDING JobHeldAdmin"
        if rest.version().major == 22:
            assert "AdminComment not set" in env.stdout
        assert act(cat, "slurm.job.release", {"jobids": [wait]}).result["counts"] == {"released": 1}
        running_job = running("root", jobs)
        with pytest.raises(Unsupported, match="suspend"):
            act(cat, "slurm.job.suspend", {"jobids": [running_job]})
        assert state(running_job).startswith("RUNNING")
        env = act(cat, "slurm.job.cancel", {"jobids": [wait, running_job]})
        assert env.result["counts"] == {"cancelled": 2}, env.result
    finally:
        cat.close()
        rest.close()
