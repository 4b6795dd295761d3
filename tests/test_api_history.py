"""/history and /users against the devcluster's real accounting DB, checked against sacct.

sacct is asked by job id (``-j``): with a time window it hides jobs that never became
eligible (the held sample job), which /history does show (they are in the job table).
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from slurmtower.devcluster import DevCluster
from slurmtower.devcluster.cluster import SampleJobs
from slurmtower.settings import Settings

from .api_server import api_for
from .conftest import sacct_runs, sh, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.release]


@pytest.fixture(scope="module")
def sample_jobs(devcluster: DevCluster) -> Iterator[SampleJobs]:
    jobs = devcluster.submit_sample_jobs()
    yield from _recorded(jobs)
    subprocess.run(["scancel", str(jobs.running), str(jobs.pending), str(jobs.timeout)],
                   capture_output=True, check=False)


def _recorded(jobs: SampleJobs) -> Iterator[SampleJobs]:

    every = ",".join(str(j) for j in jobs.as_dict().values())

    def recorded() -> bool:
        # slurmdbd gets each record a moment after slurmctld: wait for all of them, final.
        out = sh("sacct", "-a", "-n", "-X", "-P", "-o", "JobIDRaw,Partition,State", "-j", every)
        rows = [line.split("|") for line in out.splitlines()]
        states = {int(r[0]): r[2] for r in rows if all(r)}
        return (len(states) == len(jobs.as_dict()) and states[jobs.completed] == "COMPLETED"
                and states[jobs.failed] == "FAILED")

    wait_for(recorded, 60, 0.5, what="the sample jobs to finish in accounting")
    yield jobs


@pytest.fixture()
def api(settings: Settings, sample_jobs: SampleJobs) -> Iterator[httpx.Client]:
    with api_for(settings) as http:
        yield http


class SacctRows:
    """sacct's records (``-D``: a requeued job has one record per submission, as in the
    job table /history reads), looked up by job id (the newest record) or walked in full."""

    def __init__(self, records: list[dict[str, str]]) -> None:
        self.records = records

    def items(self) -> list[tuple[int, dict[str, str]]]:
        return [(int(r["JobIDRaw"]), r) for r in self.records]

    def __getitem__(self, job_id: int) -> dict[str, str]:
        found = [r for i, r in self.items() if i == job_id]
        if not found:
            raise KeyError(job_id)
        return found[-1]

    def __contains__(self, job_id: object) -> bool:
        return any(i == job_id for i, _ in self.items())


def sacct_jobs() -> SacctRows:
    """Every job record of the cluster as sacct reports it (asked by id, in chunks)."""
    # The newest id: from squeue (held jobs) and sacct (finished ones); ids only grow.
    out = sh("squeue", "-h", "-t", "all", "-o", "%A") + sh(
        "sacct", "-a", "-X", "-n", "-P", "-S", "2000-01-01", "-E", "now", "-o", "JobIDRaw")
    max_id = max([0, *(int(x) for x in out.split() if x.isdigit())])
    fields = ["JobIDRaw", "User", "Partition", "JobName", "State", "ExitCode", "Submit", "Start", "End",
              "AssocID", "Account"]
    records: list[dict[str, str]] = []
    for first in range(1, max_id + 3, 1000):
        want = ",".join(str(i) for i in range(first, min(first + 1000, max_id + 3)))
        # A job name may hold "|": split on a character no name holds.
        out = sh("sacct", "-a", "-X", "-D", "-n", "-P", "--delimiter=\x1f", "-o", ",".join(fields), "-j", want,
                 timeout=120)
        for line in out.splitlines():
            records.append(dict(zip(fields, line.split("\x1f"), strict=True)))
    return SacctRows(records)


def all_ids(http: httpx.Client, url: str) -> list[int]:
    """Every job id /history answers for ``url``, following the cursor."""
    sep = "&" if "?" in url else "?"
    got: list[int] = []
    page = f"{url}{sep}limit=1000"
    while True:
        resp = http.get(page)
        assert resp.status_code == 200, (page, resp.text)
        body = resp.json()
        got += ids(body)
        if body["next_cursor"] is None:
            return got
        page = f"{url}{sep}limit=1000&cursor={body['next_cursor']}"


def ids(body: dict[str, Any]) -> list[int]:
    return [j["job_id"] for j in body["jobs"]]


def newest(rows: SacctRows, keep: Any = lambda r: True, limit: int = 10,
           offset: int = 0) -> list[int]:
    """Ids of the matching sacct rows, highest first (the order of a jobid filter)."""
    return sorted((i for i, r in rows.items() if keep(r)), reverse=True)[offset:offset + limit]


def matching(rows: SacctRows, keep: Any) -> Counter[int]:
    """Job ids of the matching records, each as often as it has records."""
    return Counter(i for i, r in rows.items() if keep(r))


def check_page(http: httpx.Client, url: str, want: Counter[int], limit: int = 10, offset: int = 0) -> list[int]:
    """The page is the ``offset``/``limit`` slice of every matching job, newest submission
    (slurmdbd's ``job_db_inx``) first."""
    resp = http.get(url)
    assert resp.status_code == 200, (url, resp.text)
    page = resp.json()["jobs"]
    inx = [j["job_db_inx"] for j in page]
    assert inx == sorted(inx, reverse=True), url
    path, _, query = url.partition("?")
    terms = [t for t in query.split("&") if t and not t.startswith(("limit=", "offset="))]
    full = all_ids(http, f"{path}?{'&'.join(terms)}" if terms else path)
    assert Counter(full) == want, url
    assert [j["job_id"] for j in page] == full[offset:offset + limit], url
    return [j["job_id"] for j in page]


def test_seed_history_urls_match_sacct(api: httpx.Client, sample_jobs: SampleJobs) -> None:
    rows = sacct_jobs()
    assert sample_jobs.pending in rows
    cases = [
        ("/history", {}, lambda r: True),
        ("/history?limit=25", {"limit": 25}, lambda r: True),
        ("/history?limit=2&offset=2", {"limit": 2, "offset": 2}, lambda r: True),
        ("/history?user=alice", {}, lambda r: r["User"] == "alice"),
        ("/history?partition=debug", {}, lambda r: r["Partition"] == "debug"),
        ("/history?jobname=sample-fail", {}, lambda r: r["JobName"] == "sample-fail"),
        ("/history?state=1", {}, lambda r: r["State"] == "RUNNING"),
    ]
    for url, page, keep in cases:
        check_page(api, url, matching(rows, keep), **page)
    # with a jobid filter the order is the job id, highest first
    url = f"/history?jobid<={sample_jobs.failed}"
    assert ids(api.get(url).json()) == newest(rows, lambda r: int(r["JobIDRaw"]) <= sample_jobs.failed)


def test_history_rows_carry_decoded_exit_codes_and_user_names(api: httpx.Client,
                                                               sample_jobs: SampleJobs) -> None:
    rows = sacct_jobs()
    body = api.get(f"/history?jobid={sample_jobs.failed}").json()
    (job,) = body["jobs"]
    assert rows[sample_jobs.failed]["ExitCode"] == "3:0"
    assert (job["exit_code"], job["exit_signal"]) == (3, 0)
    assert job["state"] == "FAILED" and job["state_code"] == 5
    assert job["user_name"] == rows[sample_jobs.failed]["User"] == "bob"
    assert job["partition"] == rows[sample_jobs.failed]["Partition"] == "debug"
    assert job["account"] == rows[sample_jobs.failed]["Account"] == "chemistry"
    ok = api.get(f"/history?jobid={sample_jobs.completed}").json()["jobs"][0]
    assert (ok["exit_code"], ok["state"]) == (0, "COMPLETED")


@pytest.mark.parametrize("op", ["=", ">", "<", ">=", "<="])
def test_each_jobid_comparator_matches_sacct(api: httpx.Client, sample_jobs: SampleJobs, op: str) -> None:
    rows = sacct_jobs()
    pivot = sample_jobs.failed
    check = {"=": int.__eq__, ">": int.__gt__, "<": int.__lt__, ">=": int.__ge__, "<=": int.__le__}[op]
    assert all_ids(api, f"/history?jobid{op}{pivot}") == newest(
        rows, lambda r: check(int(r["JobIDRaw"]), pivot), limit=10**9)


def test_jobid_range_and_url_encoded_comparators(api: httpx.Client, sample_jobs: SampleJobs) -> None:
    lo, hi = sample_jobs.completed, sample_jobs.cancelled
    body = api.get(f"/history?jobid>={lo}&jobid%3C%3D{hi}").json()
    assert ids(body) == list(range(hi, lo - 1, -1))


@pytest.mark.parametrize("state", ["5", "FAILED", "failed", "JOB_FAILED"])
def test_state_by_number_or_name(api: httpx.Client, sample_jobs: SampleJobs, state: str) -> None:
    rows = sacct_jobs()
    got = all_ids(api, f"/history?state={state}")
    assert sample_jobs.failed in got
    assert Counter(got) == matching(rows, lambda r: r["State"] == "FAILED")


def test_state_zero_is_pending_and_eleven_is_out_of_memory(api: httpx.Client, sample_jobs: SampleJobs) -> None:
    rows = sacct_jobs()
    pending = all_ids(api, "/history?state=0")
    assert sample_jobs.pending in pending
    assert Counter(pending) == matching(rows, lambda r: r["State"] == "PENDING")
    assert Counter(all_ids(api, "/history?state=11")) == matching(rows, lambda r: r["State"] == "OUT_OF_MEMORY")


def test_filters_combine(api: httpx.Client, sample_jobs: SampleJobs) -> None:
    rows = sacct_jobs()
    got = all_ids(api, f"/history?user=bob&partition=debug&jobid>={sample_jobs.completed}")
    want = newest(rows, lambda r: r["User"] == "bob" and r["Partition"] == "debug"
                  and int(r["JobIDRaw"]) >= sample_jobs.completed, limit=10**9)
    assert got == want and sample_jobs.failed in got and sample_jobs.cancelled in got
    assert Counter(all_ids(api, "/history?user=bob&state=FAILED&jobname=sample-fail")) == matching(
        rows, lambda r: r["User"] == "bob" and r["State"] == "FAILED" and r["JobName"] == "sample-fail")


def test_associd_and_account_filters(api: httpx.Client, sample_jobs: SampleJobs) -> None:
    rows = sacct_jobs()
    assoc = int(rows[sample_jobs.failed]["AssocID"])
    assert Counter(all_ids(api, f"/history?associd={assoc}")) == matching(
        rows, lambda r: r["AssocID"] == str(assoc))
    assert Counter(all_ids(api, "/history?account=chemistry")) == matching(
        rows, lambda r: r["Account"] == "chemistry")


def test_time_range_filters(api: httpx.Client, sample_jobs: SampleJobs) -> None:
    rows = sacct_jobs()
    submit = rows[sample_jobs.failed]["Submit"]
    t = datetime.fromisoformat(submit).astimezone().isoformat()
    got = all_ids(api, f"/history?submitted_after={t.replace('+', '%2B')}")
    assert Counter(got) == matching(rows, lambda r: r["Submit"] >= submit)
    before = all_ids(api, f"/history?submitted_before={t.replace('+', '%2B')}")
    assert Counter(before) == matching(rows, lambda r: r["Submit"] < submit)
    ended = all_ids(api, "/history?ended_after=2000-01-01T00:00:00")
    assert sample_jobs.failed in ended and sample_jobs.running not in ended and sample_jobs.pending not in ended
    started = all_ids(api, "/history?started_after=2000-01-01")
    assert sample_jobs.running in started and sample_jobs.pending not in started


def test_cursor_pages_through_everything_once(api: httpx.Client, sample_jobs: SampleJobs) -> None:
    rows = sacct_jobs()
    seen: list[int] = []
    url = "/history?limit=50"
    while True:
        body = api.get(url).json()
        seen += ids(body)
        if body["next_cursor"] is None:
            break
        url = f"/history?limit=50&cursor={body['next_cursor']}"
    assert sorted(seen) == sorted(i for i, _ in rows.items())
    jobid_pages: list[int] = []
    span = f"jobid>={sample_jobs.timeout}&jobid<={sample_jobs.running}"
    url = f"/history?{span}&limit=2"
    while True:
        body = api.get(url).json()
        jobid_pages += ids(body)
        if body["next_cursor"] is None:
            break
        url = f"/history?{span}&limit=2&cursor={body['next_cursor']}"
    assert jobid_pages == newest(rows, lambda r: sample_jobs.timeout <= int(r["JobIDRaw"]) <= sample_jobs.running,
                                 limit=10**9)


@pytest.mark.parametrize(("url", "param"), [
    ("/history?colour=red", "colour"),
    ("/history?limit=abc", "limit"),
    ("/history?limit=-5", "limit"),
    ("/history?offset=-1", "offset"),
    ("/history?state=99", "state"),
    ("/history?state=SLEEPY", "state"),
    ("/history?user>alice", "user"),
    ("/history?jobid=1%20OR%201=1", "jobid"),
    ("/history?jobid<=abc", "jobid"),
    ("/history?user=alice'%20OR%20'1'='1", "user"),
    ("/history?partition=debug;DROP%20TABLE%20x", "partition"),
    ("/history?associd=1;SELECT", "associd"),
    ("/history?submitted_after=yesterday", "submitted_after"),
    ("/history?cursor=xyz", "cursor"),
    ("/users?name=root'--", "name"),
    ("/users?nam=root", "nam"),
], ids=lambda v: str(v)[:40])
def test_bad_input_is_a_400_naming_the_parameter(api: httpx.Client, url: str, param: str) -> None:
    resp = api.get(url)
    assert resp.status_code == 400, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["param"] == param


def test_injection_in_a_free_text_filter_is_just_a_value(api: httpx.Client) -> None:
    resp = api.get("/history?jobname=x'%20OR%20'1'='1")
    assert resp.status_code == 200
    assert resp.json()["jobs"] == []


def test_users_lists_associations_like_sacctmgr(api: httpx.Client) -> None:
    out = sh("sacctmgr", "-n", "-P", "show", "assoc", "format=user,account,partition")
    want: dict[str, set[str]] = {}
    for line in out.splitlines():
        user, account, _part = line.split("|")
        if user:
            want.setdefault(user, set()).add(account)
    body = api.get("/users").json()
    got = {u["name"]: {a["account"] for a in u["associations"]} for u in body}
    assert got == want
    (bob,) = api.get("/users?name=bob").json()
    assert {a["account"] for a in bob["associations"]} == {"physics", "chemistry"}
    assert api.get("/users?name=nosuchuser").json() == []


def test_hidden_partitions_never_show_in_history(settings: Settings, sample_jobs: SampleJobs) -> None:
    settings.api.hidden_partitions = ["short"]
    with api_for(settings) as http:
        everything = all_ids(http, "/history")
        assert sample_jobs.timeout not in everything and sample_jobs.failed in everything
        assert http.get("/history?partition=short").json()["jobs"] == []
        assert http.get(f"/history?jobid={sample_jobs.timeout}").json()["jobs"] == []


def test_database_down_gives_503_while_live_routes_work(settings: Settings, sample_jobs: SampleJobs) -> None:
    # The machine's MariaDB is shared with other engineers: it is not stopped; the accounting
    # URL points at a closed port instead, which is what a stopped server looks like.
    settings.accounting.url = SecretStr("mysql+pymysql://reader:pw@127.0.0.1:9/st_acct_nothing")
    settings.accounting.connect_timeout = 2
    with api_for(settings) as http:
        start = time.monotonic()
        resp = http.get("/history")
        assert time.monotonic() - start < 10
        assert resp.status_code == 503
        assert resp.json()["type"].endswith("AccountingUnavailable")
        assert "reader:pw" not in resp.text and "pw@" not in resp.text
        assert http.get("/users").status_code == 503
        assert http.get("/queue").status_code == 200
        assert http.get("/nodes").status_code == 200


def test_users_hide_associations_of_hidden_partitions(settings: Settings, devcluster: DevCluster) -> None:
    have = sh("sacctmgr", "-n", "-P", "show", "assoc", "where", "user=alice", "format=partition")
    if "short" not in have.split():
        sh("sacctmgr", "-i", "add", "user", "alice", "account=physics", "partition=short")
    with api_for(settings) as http:
        (alice,) = http.get("/users?name=alice").json()
        assert "short" in {a["partition"] for a in alice["associations"]}
    settings.api.hidden_partitions = ["short"]
    with api_for(settings) as http:
        (alice,) = http.get("/users?name=alice").json()
    assert "short" not in {a["partition"] for a in alice["associations"]}
    assert {a["account"] for a in alice["associations"]} == {"physics"}


def test_a_requeued_job_has_one_record_per_run(api: httpx.Client, requeued_job: int) -> None:
    """Each run of a requeued job is its own record, newest first, identified on 26.05+ by the
    run's sluid exactly as sacct prints it (None on releases without one)."""
    runs = sacct_runs(requeued_job)
    body = api.get(f"/history?jobid={requeued_job}").json()
    got = [(j["state"], j["sluid"]) for j in body["jobs"]]
    assert got == [(r["State"], r["SLUID"] or None) for r in reversed(runs)]
    assert len({j["job_db_inx"] for j in body["jobs"]}) == 2
    sluids = [j["sluid"] for j in body["jobs"]]
    assert sluids == [None, None] or (len(set(sluids)) == 2 and all(str(s).startswith("s") for s in sluids))
