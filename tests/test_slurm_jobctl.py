"""Job control (slurmtower.slurm.jobctl) against the devcluster's real Slurm: id parsing, each
act on pending, running, array and het jobs, Slurm's per-id messages, and slurmrestd's share."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.errors import InvalidInput, SlurmUnavailable, Unsupported
from slurmtower.slurm import (
    CliJobControl,
    CliSlurmClient,
    CommandRunner,
    JobRef,
    RestSlurmClient,
    job_control,
    parse_job_ids,
)
from slurmtower.slurm.jobctl import MAX_JOB_IDS, fold_messages, per_id_lines
from slurmtower.slurm.rest_jobctl import RestJobControl

from .conftest import sh, submit, wait_for

pytestmark = pytest.mark.release  # run again on every Slurm install (scripts/test.sh)

NAME = "st-jobctl"
UNKNOWN = "9999999"


# -- parsing -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("123", JobRef("123", 123)),
    ("007", JobRef("7", 7)),
    ("123_4", JobRef("123_4", 123, ((4, 4),))),
    ("123_[1-5]", JobRef("123_[1-5]", 123, ((1, 5),))),
    ("123_[1,3,5-7]", JobRef("123_[1,3,5-7]", 123, ((1, 1), (3, 3), (5, 7)))),
    ("123+1", JobRef("123+1", 123, het_offset=1)),
], ids=["job", "padded", "task", "range", "list", "het"])
def test_parses_each_kind_of_job_id(text: str, expected: JobRef) -> None:
    assert parse_job_ids([text]) == [expected]


def test_a_string_of_ids_splits_on_commas_outside_brackets_and_drops_repeats() -> None:
    refs = parse_job_ids("5,6_[1,3],5, 7+0")
    assert [r.text for r in refs] == ["5", "6_[1,3]", "7+0"]
    assert [r.kind for r in refs] == ["job", "tasks", "het"]


@pytest.mark.parametrize("bad", ["abc", "12x", "1_", "1_[]", "1_[5-1]", "1_[1-2%2]", "1_[1-]", "1+",
                                 "1+x", "0", "99999999", "-1", "1_2_3", "1;rm", " ", "9" * 65],
                         ids=lambda b: b if len(b) < 10 else "too-long")
def test_a_malformed_job_id_is_refused_by_name(bad: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_job_ids(["1", bad])
    assert err.value.param == "jobids"
    assert repr(bad.strip()[:20]) .strip("'") in err.value.message


def test_the_list_of_ids_is_bounded() -> None:
    with pytest.raises(InvalidInput, match="more than 10000"):
        parse_job_ids(range(1, MAX_JOB_IDS + 2))
    with pytest.raises(InvalidInput, match="no job id"):
        parse_job_ids([])
    assert len(parse_job_ids(range(1, MAX_JOB_IDS + 1))) == MAX_JOB_IDS


def test_slurms_per_id_lines_are_folded_onto_the_ids_given() -> None:
    refs = parse_job_ids(["3_[4-9]", "10", "11_[1-2]", "12_4"])
    out = ("3_4-5: No error\n3_6-9: Invalid job id specified\nInvalid job id specified for job 10\n"
           "slurm_suspend error: Invalid job id specified\n11_1: No error\n11_2: Job is pending execution\n"
           "scancel: error: Kill job error on job id 12_4: Access/permission denied\n")
    folded = {"3_[4-9]": "3_[6-9]: Invalid job id specified", "10": "Invalid job id specified",
              "11_[1-2]": "11_2: Job is pending execution", "12_4": "Access/permission denied"}
    assert fold_messages(refs, per_id_lines(out)) == folded
    # 26.05 prints task ranges and single tasks in brackets (3_[6-9], 11_[2]): the same results
    bracketed = out.replace("3_4-5", "3_[4-5]").replace("3_6-9", "3_[6-9]").replace("11_1:", "11_[1]:") \
        .replace("11_2:", "11_[2]:")
    assert fold_messages(refs, per_id_lines(bracketed)) == folded


# -- the command backend on the cluster ----------------------------------------------------------

@pytest.fixture()
def jobs(devcluster: DevCluster) -> Iterator[list[int]]:
    """The ids this test submits (``submit_job``), cancelled at the end."""
    submitted: list[int] = []
    yield submitted
    if submitted:
        subprocess.run(["scancel", *(str(j) for j in submitted)], capture_output=True, check=False)
        wait_for(lambda: not sh("squeue", "-h", "-n", NAME, "-t", "R,CG,S", "-o", "%i").split(), 60,
                 what="this test's jobs to end")


def submit_job(jobs: list[int], *args: str, user: str = "root") -> int:
    job = submit(user, "-J", NAME, "-t", "10", *args, "--wrap", "sleep 300")
    jobs.append(job)
    return job


def field(job: str | int, key: str) -> str:
    """One field of ``scontrol show job`` (the first record: an array's first task)."""
    out = sh("scontrol", "-o", "show", "job", str(job), check=False)
    for word in out.splitlines()[0].split(" ") if out else []:
        if word.startswith(f"{key}="):
            return word.split("=", 1)[1]
    return ""


def state(job: str | int) -> str:
    return sh("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()


def running(jobs: list[int], *args: str) -> int:
    job = submit_job(jobs, *args)
    wait_for(lambda: state(job) == "RUNNING", 30, what=f"job {job} to run")
    return job


@pytest.fixture(scope="module")
def ctl(runner: CommandRunner) -> CliJobControl:
    return CliJobControl(runner)


def test_hold_release_and_user_hold_with_an_unknown_id_beside(ctl: CliJobControl, jobs: list[int]) -> None:
    job = submit_job(jobs, "--begin=now+1hour")
    refs = parse_job_ids([job, UNKNOWN])
    assert ctl.hold(refs) == {str(job): None, UNKNOWN: "Invalid job id specified"}
    assert field(job, "Reason") == "JobHeldAdmin"
    assert ctl.release(refs[:1]) == {str(job): None}
    assert field(job, "Reason") != "JobHeldAdmin" and field(job, "Priority") != "0"
    assert ctl.hold(refs[:1], user=True) == {str(job): None}
    assert field(job, "Reason") == "JobHeldUser"


def test_suspend_and_resume_a_running_job(ctl: CliJobControl, jobs: list[int]) -> None:
    job, pending = running(jobs), submit_job(jobs, "--hold")
    assert ctl.suspend(parse_job_ids([job, pending])) == {str(job): None, str(pending): "Job is pending execution"}
    wait_for(lambda: state(job) == "SUSPENDED", 10, what="the job to be suspended")
    assert ctl.resume(parse_job_ids([job])) == {str(job): None}
    wait_for(lambda: state(job) == "RUNNING", 10, what="the job to run again")
    assert ctl.resume(parse_job_ids([job])) == {str(job): "Job is not suspended"}


def test_requeue_a_running_job_and_requeuehold_it(ctl: CliJobControl, jobs: list[int]) -> None:
    job = running(jobs)
    assert ctl.requeue(parse_job_ids([job, UNKNOWN])) == {str(job): None, UNKNOWN: "Invalid job id specified"}
    wait_for(lambda: field(job, "Restarts") == "1", 30, what="the requeue")
    assert ctl.requeue(parse_job_ids([job]), hold=True) == {str(job): "Job is pending execution"}
    other = running(jobs)
    assert ctl.requeue(parse_job_ids([other]), hold=True) == {str(other): None}
    wait_for(lambda: field(other, "JobState") == "PENDING" and field(other, "Priority") == "0", 30,
             what="the requeued job to be held")


def test_signal_and_cancel_a_running_job(ctl: CliJobControl, jobs: list[int], tmp_path: Path) -> None:
    # RUNNING in slurmctld comes before slurmstepd runs the script: a signal sent in between
    # finds no shell and the job sleeps on. Wait for the script's first line in its output.
    out = tmp_path / "signal.out"
    job = submit("root", "-J", NAME, "-t", "10", "-o", str(out), "--wrap", "echo started; sleep 300")
    jobs.append(job)
    wait_for(lambda: state(job) == "RUNNING" and out.exists() and "started" in out.read_text(), 30,
             what=f"job {job}'s script to run")
    # USR1 to the batch shell ends it (bash has no handler for it).
    assert ctl.cancel(parse_job_ids([job]), signal="SIGUSR1", batch=True) == {str(job): None}
    wait_for(lambda: field(job, "JobState") in {"FAILED", "CANCELLED", "COMPLETED"}, 30, what="the job to end")
    other = running(jobs)
    assert ctl.cancel(parse_job_ids([other, UNKNOWN])) == {str(other): None, UNKNOWN: "Invalid job id specified"}
    wait_for(lambda: field(other, "JobState") == "CANCELLED", 30, what="the cancel")
    assert ctl.cancel(parse_job_ids([other])) == {str(other): "Job/step already completing or completed"}
    with pytest.raises(InvalidInput, match="signal"):
        ctl.signal(parse_job_ids([other]), "SIGNOPE")


def test_array_tasks_ranges_and_the_whole_array(ctl: CliJobControl, jobs: list[int]) -> None:
    array = submit_job(jobs, "--array=1-5", "--hold")
    results = ctl.release(parse_job_ids([f"{array}_2", f"{array}_[3-4,9]"]))
    assert results == {f"{array}_2": None, f"{array}_[3-4,9]": f"{array}_9: Invalid job id specified"}
    assert ctl.hold(parse_job_ids([f"{array}_[2-4]"])) == {f"{array}_[2-4]": None}
    assert {field(f"{array}_{t}", "Reason") for t in (2, 3, 4)} == {"JobHeldAdmin"}
    assert ctl.cancel(parse_job_ids([f"{array}_1"])) == {f"{array}_1": None}
    wait_for(lambda: f"{array}_1" not in sh("squeue", "-h", "-r", "-j", str(array), "-o", "%i").split(), 30,
             what="task 1 to go")
    assert ctl.cancel(parse_job_ids([array])) == {str(array): None}
    wait_for(lambda: not sh("squeue", "-h", "-j", str(array), "-o", "%i").split(), 30, what="the array to go")


def test_a_het_component_is_held_and_released(ctl: CliJobControl, jobs: list[int]) -> None:
    het = int(sh("sbatch", "--parsable", "-o", "/dev/null", "-J", NAME, "--hold", "-n1", ":", "-n1", "--wrap",
                 "sleep 300").strip().split(";")[0])
    jobs.append(het)
    assert ctl.release(parse_job_ids([f"{het}+1", f"{het}+7"])) == {
        f"{het}+1": None, f"{het}+7": "Invalid job id specified"}
    assert field(het + 1, "Reason") != "JobHeldUser" and field(het, "Reason") == "JobHeldUser"


def test_update_sets_fields_and_refuses_an_unknown_one_with_nothing_changed(ctl: CliJobControl,
                                                                           jobs: list[int]) -> None:
    job = submit_job(jobs, "--hold", "--comment=before")
    refs = parse_job_ids([job])
    with pytest.raises(InvalidInput, match="'nosuch'") as err:
        ctl.update(refs, {"comment": "after", "nosuch": "x"})
    assert err.value.param == "nosuch"
    with pytest.raises(InvalidInput, match="nice"):
        ctl.update(refs, {"comment": "after", "nice": "high"})  # type: ignore[dict-item]
    assert field(job, "Comment") == "before"
    result = ctl.update(parse_job_ids([job, UNKNOWN]), {
        "comment": "after", "admin_comment": "by slurmtower for alice", "time_limit": timedelta(minutes=7),
        "nice": 5, "partition": "batch", "begin_time": "now+2hours"})
    assert result == {str(job): None, UNKNOWN: "Invalid job id specified"}
    out = sh("scontrol", "show", "job", str(job))
    assert "Comment=after" in out and "AdminComment=by slurmtower for alice" in out
    assert field(job, "TimeLimit") == "00:07:00" and field(job, "Nice") == "5" and field(job, "Partition") == "batch"
    assert ctl.update(refs, {"partition": "nosuch"}) == {str(job): "Invalid partition name specified"}


def test_root_acts_on_another_users_job(ctl: CliJobControl, jobs: list[int]) -> None:
    theirs = submit_job(jobs, "--hold", user="alice")
    assert ctl.release(parse_job_ids([theirs])) == {str(theirs): None}
    assert field(theirs, "Reason") != "JobHeldUser"


def test_cancel_matching_uses_scancels_filters(ctl: CliJobControl, jobs: list[int]) -> None:
    a, b = submit_job(jobs, "--hold", "-p", "short"), submit_job(jobs, "--hold", "-p", "batch")
    assert ctl.cancel_matching(name=NAME, partition="short", state="pending") == {str(a): None}
    wait_for(lambda: state(a) == "", 30, what="the matching job to go")
    assert state(b) == "PENDING"
    assert ctl.cancel_matching(name="st-jobctl-none") == {}
    with pytest.raises(InvalidInput, match="at least one filter"):
        ctl.cancel_matching()
    with pytest.raises(InvalidInput, match="state"):
        ctl.cancel_matching(name=NAME, state="COMPLETED")


def test_an_unreachable_controller_raises_instead_of_per_id_messages(devcluster: DevCluster,
                                                                      tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join("SlurmctldPort=9" if line.startswith("SlurmctldPort=") else line
                              for line in devcluster.slurm_conf.read_text().splitlines()) + "\n")
    down = CliJobControl(CommandRunner(timeout=30, env={"SLURM_CONF": str(conf)}))
    with pytest.raises(SlurmUnavailable):
        down.hold(parse_job_ids(["1", "2"]))
    with pytest.raises(SlurmUnavailable):
        down.cancel(parse_job_ids(["1"]))


def test_job_control_follows_the_clients_backend(client: CliSlurmClient, rest: RestSlurmClient) -> None:
    assert isinstance(job_control(client), CliJobControl)
    assert isinstance(job_control(rest), RestJobControl)


# -- slurmrestd ------------------------------------------------------------------------------

@pytest.fixture()
def rest(devcluster: DevCluster) -> Iterator[RestSlurmClient]:
    client = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", user="root",
                             jwt_key_file=devcluster.jwt_key)
    yield client
    client.close()


def test_rest_holds_releases_updates_and_cancels(rest: RestSlurmClient, jobs: list[int]) -> None:
    ctl = RestJobControl(rest)
    job = submit_job(jobs, "--begin=now+1hour")
    refs = parse_job_ids([job])
    held = ctl.hold(parse_job_ids([job, UNKNOWN]))
    assert held[str(job)] is None and "Invalid job id" in (held[UNKNOWN] or "")
    assert field(job, "Reason") == "JobHeldAdmin"
    assert ctl.release(refs) == {str(job): None}
    assert field(job, "Priority") != "0"
    assert ctl.update(refs, {"comment": "via rest", "time_limit": timedelta(minutes=9)}) == {str(job): None}
    assert field(job, "TimeLimit") == "00:09:00" and "Comment=via rest" in sh("scontrol", "show", "job", str(job))
    with pytest.raises(InvalidInput, match="'nosuch'"):
        ctl.update(refs, {"nosuch": 1})
    assert ctl.cancel(refs) == {str(job): None}
    wait_for(lambda: state(job) == "", 30, what="the cancel over REST")
    gone = ctl.cancel(parse_job_ids([UNKNOWN]))
    assert "Invalid job id" in (gone[UNKNOWN] or "")


def test_rest_says_what_this_slurmrestd_cannot_do(rest: RestSlurmClient, client: CliSlurmClient,
                                                  jobs: list[int]) -> None:
    ctl = RestJobControl(rest)
    refs = parse_job_ids(["1"])
    for act in (lambda: ctl.suspend(refs), lambda: ctl.resume(refs), lambda: ctl.hold(refs, user=True)):
        with pytest.raises(Unsupported):
            act()
    if client.version().major == 22:
        with pytest.raises(Unsupported, match="requeue"):
            ctl.requeue(refs)
        with pytest.raises(Unsupported, match="admin_comment"):
            ctl.update(refs, {"admin_comment": "x"})
        with pytest.raises(Unsupported, match="flags"):
            ctl.cancel(refs, batch=True)
        with pytest.raises(Unsupported, match="filter"):
            ctl.cancel_matching(name=NAME)
