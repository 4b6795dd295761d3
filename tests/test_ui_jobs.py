"""/ui/jobs (the live queue), /ui/jobs/{id} (one job) and /ui/history, without a browser.

First the pure view functions on known inputs (durations, job times, keyset paging over a
100,000-job table, seff's efficiency, the history form), then the pages of a real server on
the local cluster checked against Slurm's own commands: squeue for the queue, its filters,
elapsed and time left; scontrol show job for a running job; sacct for steps, exit codes, CPU
and memory efficiency, every run of a requeued job, and the history. Privacy (readers see
private fields on their own jobs only), hidden partitions, bad filters (a readable 4xx page)
and a dead accounting database (503 page; live details still shown) are checked too.
"""

from __future__ import annotations

import pwd
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.dashboard import jobs_view as v
from slurmtower.devcluster import DevCluster
from slurmtower.models import Job, JobState
from slurmtower.models.accounting import HistoryJob, HistoryStep
from slurmtower.models.table import JobTable, job_fragment
from slurmtower.settings import Settings, TokenEntry, load_settings
from tests.auth_helpers import OPERATOR, READER, bearer, running_server, with_tokens
from tests.conftest import ForgottenJobs, forgotten, sacct_runs, sh, submit, wait_for

ALICE = "stw_test_alice_reader_token"
"""A reader named like the Slurm user alice: her own jobs show their private fields."""
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# -- a small HTML reader for the pages ------------------------------------------------------------
class Page(HTMLParser):
    """What the tests read from a page: table rows (``tr[data-job]`` with ``td[data-col]``),
    fields (``dd[data-field]``, per ``article[data-run]``), links by ``rel``, alerts, inputs."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.fields: dict[str, str] = {}
        self.runs: list[dict[str, str]] = []
        self.rel: dict[str, str] = {}
        self.alerts: list[str] = []
        self.inputs: dict[str, dict[str, str | None]] = {}
        self.labels: set[str] = set()
        self.hrefs: list[str] = []
        self._stack: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-job"):
            self.rows.append({"id": int(a["data-job"] or 0), "run": a.get("data-run"), "cells": {}})
        if tag == "article" and a.get("data-run"):
            self.runs.append({"number": a["data-run"] or ""})
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"] or "")
            if a.get("rel"):
                self.rel[a["rel"] or ""] = a["href"] or ""
        if tag in ("input", "select"):
            self.inputs[a.get("name") or ""] = a
        if tag == "label" and a.get("for"):
            self.labels.add(a["for"] or "")
        if tag not in ("input", "br", "meta", "link", "option"):
            self._stack.append((tag, a, []))

    def handle_data(self, data: str) -> None:
        for _tag, _a, text in self._stack:
            text.append(data)

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            name, a, text = self._stack.pop()
            value = " ".join("".join(text).split())
            if name == "td" and a.get("data-col") and self.rows:
                self.rows[-1]["cells"][a["data-col"]] = value
            if a.get("data-field"):
                target = self.runs[-1] if self.runs and self._inside("article") else self.fields
                target[a["data-field"] or ""] = value
            if a.get("role") == "alert":
                self.alerts.append(value)
            if name == tag:
                break

    def _inside(self, tag: str) -> bool:
        return any(t == tag for t, _a, _x in self._stack)

    def cells(self, col: str) -> list[str]:
        return [r["cells"].get(col, "") for r in self.rows]


def seconds(text: str) -> int:
    """squeue's ``[days-][hours:]minutes:seconds`` in seconds."""
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


# -- pure view functions -----------------------------------------------------------------------------
def test_durations_print_as_squeue_prints_them() -> None:
    assert v.duration_text(timedelta(seconds=5)) == "0:05"
    assert v.duration_text(timedelta(minutes=4, seconds=5)) == "4:05"
    assert v.duration_text(timedelta(hours=1, minutes=2, seconds=3)) == "1:02:03"
    assert v.duration_text(timedelta(days=2, hours=1, minutes=2, seconds=3)) == "2-01:02:03"
    assert v.duration_text(None) == ""
    assert [seconds(t) for t in ("0:05", "4:05", "1:02:03", "2-01:02:03")] == [5, 245, 3723, 176523]


def test_job_times_running_ended_pending_and_suspended() -> None:
    now = T0 + timedelta(minutes=10)
    running = Job(job_id=1, state=JobState.RUNNING, start_time=T0, time_limit=timedelta(minutes=30))
    assert v.job_times(running, now) == (timedelta(minutes=10), timedelta(minutes=20))
    unlimited = running.model_copy(update={"time_limit": None})
    assert v.job_times(unlimited, now) == (timedelta(minutes=10), None)
    over = running.model_copy(update={"time_limit": timedelta(minutes=5)})
    assert v.job_times(over, now) == (timedelta(minutes=10), timedelta(0))  # past its limit: 0 left, as squeue
    ended = Job(job_id=2, state=JobState.COMPLETED, start_time=T0, end_time=T0 + timedelta(seconds=42))
    assert v.job_times(ended, now) == (timedelta(seconds=42), None)
    # a pending job's start time is slurmctld's estimate: no elapsed time
    assert v.job_times(Job(job_id=3, state=JobState.PENDING, start_time=now + timedelta(hours=1)), now) == (None, None)
    assert v.job_times(running.model_copy(update={"state": JobState.SUSPENDED}), now) == (None, None)


def _table(n: int) -> JobTable:
    users = ["alice", "bob", "carol", None]
    return JobTable.from_jobs(
        Job(job_id=1000 + i, state=JobState.RUNNING if i % 3 else JobState.PENDING, user_name=users[i % 4],
            account="physics" if i % 2 else "chem", partition="debug" if i % 5 else "batch,short",
            name=f"job{i % 7}", nodes=f"n{i % 4 + 1}" if i % 3 else None)
        for i in range(n))


def _walk(table: JobTable, params: dict[str, str]) -> list[v.JobPage]:
    """Every page, by following the next-page cursors from the first."""
    pages = [v.page_queue(table, v.parse_queue_query(params))]
    while pages[-1].next_cursor is not None:
        pages.append(v.page_queue(table, v.parse_queue_query({**params, "after": pages[-1].next_cursor})))
    return pages


def _activity(state: str) -> int:
    """The default order's rank of a state: running, then pending (the others after)."""
    return {"RUNNING": 0, "PENDING": 3}.get(state, 9)


@pytest.mark.parametrize("sort", ["activity", "id", "user", "account", "partition", "state", "name"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_keyset_paging_visits_each_matching_job_once_in_order(sort: str, order: str) -> None:
    table = _table(500)
    params = {"sort": sort, "order": order, "limit": "37", "state": "R,PD", "account": "physics"}
    pages = _walk(table, params)
    got = [table.keys[r] for p in pages for r in p.rows]
    rows = [r for r in range(len(table)) if table.columns["account"][r] == "physics"]
    col = table.columns.get("state" if sort == "activity" else sort)
    want = sorted(rows, key=lambda r: ((_activity(col[r]) if sort == "activity" else v.node_sort_key(col[r] or ""))
                                       if col else 0, table.keys[r]), reverse=order == "desc")
    assert got == [table.keys[r] for r in want]
    assert [len(p.rows) for p in pages[:-1]] == [37] * (len(pages) - 1) and len(pages) == -(-len(want) // 37)
    assert all(p.matching == len(want) for p in pages)
    assert [p.position for p in pages] == [37 * i for i in range(len(pages))]
    # previous-page links go back over the same pages, the first one included
    for i in range(len(pages) - 1, 0, -1):
        back = v.page_queue(table, v.parse_queue_query({**params, "before": pages[i].prev_cursor}))
        assert back.rows == pages[i - 1].rows and back.position == pages[i - 1].position
    assert pages[0].prev_cursor is None
    # a page link stays right when its last job left the queue meanwhile
    gone = table.keys[pages[0].rows[-1]]
    smaller = JobTable.from_jobs(j for j in table.jobs() if j.job_id != gone)
    after = v.page_queue(smaller, v.parse_queue_query({**params, "after": pages[0].next_cursor}))
    assert [smaller.keys[r] for r in after.rows] == [table.keys[r] for r in pages[1].rows]


def test_running_and_pending_jobs_come_first_by_default() -> None:
    """The finished jobs slurmctld still holds (their ids the smallest) used to fill the first
    page: the default order puts running, then pending jobs first, each by job id."""
    jobs = [Job(job_id=i, state=JobState.COMPLETED) for i in range(1, 61)]
    jobs += [Job(job_id=i, state=JobState.PENDING) for i in range(61, 81)]
    jobs += [Job(job_id=i, state=JobState.RUNNING) for i in range(81, 91)]
    table = JobTable.from_jobs(jobs)
    first = v.page_queue(table, v.parse_queue_query({}))
    assert [table.keys[r] for r in first.rows] == [*range(81, 91), *range(61, 81), *range(1, 21)]
    by_id = v.page_queue(table, v.parse_queue_query({"sort": "id"}))  # the old order, a click away
    assert [table.keys[r] for r in by_id.rows] == list(range(1, 51))
    assert v.parse_queue_query({}).sort_link("id") == "?sort=id"


def test_a_page_of_100000_jobs_builds_models_for_its_rows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 100_000
    frag = job_fragment(Job(job_id=1, state=JobState.PENDING))
    table = JobTable(list(range(1, n + 1)), [frag] * n, {
        "user": [f"u{i % 1000}" for i in range(n)], "account": ["a"] * n, "partition": ["debug"] * n,
        "state": ["PENDING" if i % 2 else "RUNNING" for i in range(n)], "name": [f"x{i % 10}" for i in range(n)],
        "nodes": [frozenset()] * n, "line": [None] * n})
    built: list[int] = []
    original = JobTable.jobs
    monkeypatch.setattr(JobTable, "jobs", lambda self, rows=None: built.append(len(list(rows or []))) or
                        original(self, rows))
    page = v.page_queue(table, v.parse_queue_query({"sort": "user", "order": "desc", "q": "u99", "limit": "50"}))
    # u99 and u990-u999, 100 jobs each; u999 sorts first (descending)
    assert page.matching == 1100
    assert len(page.rows) == 50 and built == []
    assert [table.columns["user"][r] for r in page.rows] == ["u999"] * 50
    assert dict(page.states) == {"PENDING": 600, "RUNNING": 500}  # odd rows pend: u99, u991 ... u999


def test_queue_filters_mean_what_queue_means() -> None:
    q = v.parse_queue_query({"user": "alice, bob", "state": "pd,R", "nodes": "n[1-3]", "partition": "",
                             "q": "", "sort": "user"})
    assert q.filters == {"user": {"alice", "bob"}, "state": {"PENDING", "RUNNING"}, "nodes": {"n1", "n2", "n3"}}
    assert q.search is None and q.sort == "user" and not q.descending
    assert q.form == {"user": "alice, bob", "state": "pd,R", "nodes": "n[1-3]", "sort": "user"}
    for bad, param in [({"state": "BOGUS"}, "state"), ({"nodes": "n["}, "nodes"), ({"sort": "priority"}, "sort"),
                       ({"limit": "0"}, "limit"), ({"limit": "5000"}, "limit"), ({"after": "garbage"}, "after"),
                       ({"order": "up"}, "order"), ({"user": ","}, "user")]:
        with pytest.raises(v.InvalidInput) as err:
            v.parse_queue_query(bad)
        assert err.value.param == param, bad
    # a cursor of one sort order is refused for another (its keys mean something else)
    cursor = v.page_queue(_table(10), v.parse_queue_query({"limit": "2"})).next_cursor
    assert cursor is not None
    with pytest.raises(v.InvalidInput, match="another sort order"):
        v.parse_queue_query({"sort": "user", "after": cursor})


def test_search_finds_job_ids_and_parts_of_names_users_accounts() -> None:
    table = _table(50)
    def found(text: str) -> list[int]:
        query = v.parse_queue_query({"q": text, "limit": "500", "sort": "id"})
        return [table.keys[r] for r in v.page_queue(table, query).rows]
    assert found("1007") == [1007]
    assert found("CAROL") == [1000 + i for i in range(50) if i % 4 == 2]
    assert found("job6") == [1000 + i for i in range(50) if i % 7 == 6]
    assert found("zzz") == []


def test_efficiency_is_seffs() -> None:
    run = HistoryJob(job_db_inx=1, job_id=7, name="x", user_id=1, partition="debug", association_id=1,
                     state="COMPLETED", state_code=3, node_count=1, cpus=4, memory_mib=1000,
                     start_time=T0, end_time=T0 + timedelta(seconds=100))
    steps = [HistoryStep(job_db_inx=1, job_id=7, step_id=-5, step_name="batch", state="COMPLETED", state_code=3,
                         node_count=1, task_count=1, user_cpu_time=timedelta(seconds=50),
                         system_cpu_time=timedelta(seconds=10), max_rss_bytes=300 * 2**20),
             HistoryStep(job_db_inx=1, job_id=7, step_id=0, step_name="a", state="COMPLETED", state_code=3,
                         node_count=1, task_count=1, user_cpu_time=timedelta(seconds=40),
                         system_cpu_time=timedelta(0), max_rss_bytes=500 * 2**20)]
    eff = v.efficiency(run, steps)
    assert eff is not None
    assert eff.cpu == pytest.approx(100 / 400) and eff.memory == pytest.approx(0.5)
    assert v.efficiency(run.model_copy(update={"state": "RUNNING", "end_time": None}), steps) is None
    no_rss = v.efficiency(run, [s.model_copy(update={"max_rss_bytes": None}) for s in steps])
    assert no_rss is not None and no_rss.memory is None and no_rss.cpu == pytest.approx(0.25)
    runs = v.runs_of([run.model_copy(update={"job_db_inx": 2}), run], steps)
    assert [(r.number, len(r.steps)) for r in runs] == [(2, 0), (1, 2)]


def test_history_form_is_a_history_query() -> None:
    form = v.history_form("jobid=&jobid_from=10&jobid_to=20&user=bob&state=&submitted_after=2026-01-01T08%3A00")
    assert form.error is None and form.query is not None
    assert form.query.jobid == ((">=", 10), ("<=", 20)) and form.query.user == "bob" and form.query.limit == 50
    assert form.query.submitted_after == datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
    assert form.values == {"jobid_from": "10", "jobid_to": "20", "user": "bob", "submitted_after": "2026-01-01T08:00",
                           "limit": "50"}
    assert form.link("abc") == "?jobid%3E%3D10&jobid%3C%3D20&user=bob&submitted_after=2026-01-01T08%3A00&limit=50" \
                               "&cursor=abc"
    # /history's own terms are taken as they are
    raw = v.history_form("jobid>5&jobid<=9&limit=3")
    assert raw.query is not None and raw.query.jobid == ((">", 5), ("<=", 9)) and raw.query.limit == 3
    assert raw.values["jobid_from"] == "6"
    for bad, param in [("jobid_from=abc", "jobid"), ("submitted_after=yesterday", "submitted_after"),
                       ("limit=0", "limit"), ("cursor=zzz", "cursor"), ("color=red", "color"), ("state=NOPE", "state")]:
        got = v.history_form(bad)
        assert got.error is not None and got.error.param == param, bad


# -- the pages on the local cluster ---------------------------------------------------------------
def _settings(devcluster: DevCluster, state_dir: Path) -> Settings:
    s = with_tokens(load_settings(devcluster.tower_conf, environ={}))
    s.auth.tokens.append(TokenEntry(name="alice", role="reader", sha256=hash_token(ALICE)))
    s.state_dir = state_dir
    s.api.refresh_interval = 0.5
    return s


@pytest.fixture(scope="module")
def ui(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with running_server(create_app(_settings(devcluster, tmp_path_factory.mktemp("ui-jobs")))) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        yield http


def get(http: httpx.Client, path: str, token: str = READER, **params: str) -> tuple[int, Page, str]:
    resp = http.get(path, params=params or None, headers={**bearer(token), "Accept": "text/html"})
    assert resp.headers["content-type"].startswith("text/html"), (path, resp.status_code, resp.text[:300])
    assert "Traceback" not in resp.text
    return resp.status_code, Page(resp.text), resp.text


sbatch = submit  # as ``user``: the job id


def squeue_state(job: int) -> str:
    return sh("squeue", "-h", "-j", str(job), "-o", "%T", check=False).strip()


@pytest.fixture(scope="module")
def queue_jobs(devcluster: DevCluster) -> Iterator[dict[str, int]]:
    """Running and pending jobs of alice, bob and root in three partitions (names uij-q-*)."""
    jobs = {
        "run_a": sbatch("alice", "-J", "uij-q-run-a", "-A", "physics", "-p", "debug", "-t", "30", "--wrap", "sleep 900"),
        "run_a2": sbatch("alice", "-J", "uij-q-run-a2", "-A", "physics", "-p", "debug", "-t", "UNLIMITED",
                         "--wrap", "sleep 900"),
        "run_b": sbatch("bob", "-J", "uij-q-run-b", "-A", "chemistry", "-p", "batch", "-t", "10",
                        "--wrap", "srun sleep 900"),
        "held_b": sbatch("bob", "-J", "uij-q-held", "-A", "physics", "-p", "debug", "-t", "5", "--hold",
                         "--wrap", "true"),
        "held_a": sbatch("alice", "-J", "uij-q-short", "-A", "physics", "-p", "short", "-t", "1", "--hold",
                         "--wrap", "true"),
    }
    jobs["dep"] = sbatch("root", "-J", "uij-q-dep", "-A", "physics", "-t", "5",
                         f"--dependency=afterok:{jobs['held_b']}", "--wrap", "true")
    for i in range(5):
        jobs[f"bulk{i}"] = sbatch("alice", "-J", f"uij-q-bulk-{i % 2}", "-A", "physics", "-p", "debug", "-t", "2",
                                  "--hold", "--wrap", "true")
    for key in ("run_a", "run_a2", "run_b"):
        wait_for(lambda k=key: squeue_state(jobs[k]) == "RUNNING", 60, what=f"{key} to run")
    wait_for(lambda: f"StepId={jobs['run_b']}.0 " in sh("scontrol", "-o", "show", "step", check=False), 30,
             what="run_b's srun step")
    yield jobs
    subprocess.run(["scancel", *map(str, jobs.values())], capture_output=True, check=False)


SQUEUE_FIELDS = "%i|%u|%a|%P|%T|%j|%r|%M|%L|%C|%N"
SQUEUE_KEYS = ("id", "user", "account", "partition", "state", "name", "reason", "used", "left", "cpus", "nodes")


def squeue(*args: str) -> list[dict[str, str]]:
    out = sh("squeue", "-h", *(args or ("-t", "all")), "-o", SQUEUE_FIELDS)
    return [dict(zip(SQUEUE_KEYS, line.split("|"), strict=True)) for line in out.splitlines() if line]


def _queue_page(http: httpx.Client, token: str = READER, **params: str) -> Page:
    """The queue page in job-id order (squeue's), unless ``params`` sort otherwise."""
    status, page, _ = get(http, "/ui/jobs", token, limit="500", **{"sort": "id", **params})
    assert status == 200, page.alerts
    return page


@pytest.fixture(scope="module")
def early_job(forgotten_jobs: ForgottenJobs | None) -> int:
    """alice's job that ended when the session started: slurmctld forgets it (MinJobAge)
    while other tests run, and the last test here reads it from accounting."""
    assert forgotten_jobs is not None
    return forgotten_jobs.alice


@pytest.mark.cluster
def test_jobs_page_lists_the_queue_squeue_shows_with_times_and_reasons(ui: httpx.Client, early_job: int,
                                                                      queue_jobs: dict[str, int]) -> None:
    def same() -> tuple[Page, list[dict[str, str]]] | None:
        # The same jobs in the same states: a short job can go from PENDING to COMPLETED
        # between the page's snapshot and the squeue call.
        page, want = _queue_page(ui), squeue()
        states = {int(w["id"]): w["state"] for w in want}
        if [r["id"] for r in page.rows] != sorted(states):
            return None
        settled = all(r["cells"]["state"].split()[0] == states[r["id"]] or states[r["id"]] == "COMPLETING"
                      for r in page.rows)
        return (page, want) if settled else None

    page, want = wait_for(same, 10, 0.5, what="the page to list what squeue lists")
    by_id = {int(w["id"]): w for w in want}
    for row in page.rows:
        cells, w = row["cells"], by_id[row["id"]]
        assert (cells["user"], cells["account"], cells["partition"], cells["name"], cells["cpus"]) == \
            (w["user"], w["account"], w["partition"], w["name"], w["cpus"]), row
        assert cells["state"].split()[0] == w["state"] or w["state"] == "COMPLETING"
        if w["state"] == "RUNNING":
            assert abs(seconds(cells["elapsed"]) - seconds(w["used"])) <= 3, (cells, w)
            if w["left"] == "UNLIMITED":
                assert cells["left"] == "UNLIMITED"
            else:
                assert abs(seconds(cells["left"]) - seconds(w["left"])) <= 3, (cells, w)
            assert cells["nodes"] == w["nodes"]  # one node each: linked by name
        elif w["state"] == "PENDING":
            assert cells["reason"] == w["reason"] and cells["elapsed"] == cells["left"] == ""
    ours = {by_id[j]["reason"] for j in (queue_jobs["held_b"], queue_jobs["dep"])}
    assert ours == {"JobHeldUser", "Dependency"}
    # the running jobs' nodes link to their node pages
    _, _, text = get(ui, "/ui/jobs", q="uij-q-run")
    for row in squeue("-n", "uij-q-run-a,uij-q-run-b"):
        assert f'href="/ui/nodes/{row["nodes"]}"' in text
    # the counts by state are squeue's
    counts = re.findall(r'jobs-chip jobs-state-\w+">(\w+) (\d+)<', get(ui, "/ui/jobs")[2])
    assert {s: int(n) for s, n in counts} == {s: sum(1 for w in want if w["state"] == s) for s in
                                               {w["state"] for w in want}}


@pytest.mark.cluster
@pytest.mark.parametrize(("params", "args"), [
    ({"user": "alice"}, ("-t", "all", "-u", "alice")),
    ({"user": "alice,bob"}, ("-t", "all", "-u", "alice,bob")),
    ({"account": "chemistry"}, ("-t", "all", "-A", "chemistry")),
    ({"partition": "short"}, ("-t", "all", "-p", "short")),
    ({"state": "PD"}, ("-t", "PD")),
    ({"state": "running", "user": "bob"}, ("-t", "R", "-u", "bob")),
    ({"name": "uij-q-bulk-1,uij-q-dep"}, ("-t", "all", "-n", "uij-q-bulk-1,uij-q-dep")),
])
def test_filters_match_squeues(ui: httpx.Client, queue_jobs: dict[str, int], params: dict[str, str],
                               args: tuple[str, ...]) -> None:
    def same() -> list[int] | None:
        want = sorted(int(w["id"]) for w in squeue(*args))
        return want if want and [r["id"] for r in _queue_page(ui, **params).rows] == want else None

    assert wait_for(same, 10, 0.5, what=f"{params} to list what squeue {' '.join(args)} lists")


@pytest.mark.cluster
def test_node_filter_lists_the_jobs_running_there(ui: httpx.Client, queue_jobs: dict[str, int]) -> None:
    node = squeue("-j", str(queue_jobs["run_b"]))[0]["nodes"]

    def same() -> list[int] | None:
        want = sorted(int(w["id"]) for w in squeue("-t", "all", "-w", node))
        return want if [r["id"] for r in _queue_page(ui, nodes=node).rows] == want else None

    assert queue_jobs["run_b"] in wait_for(same, 10, 0.5, what=f"the jobs on {node}")


@pytest.mark.cluster
def test_sorting_search_and_paging_walk_every_job_once(ui: httpx.Client, queue_jobs: dict[str, int]) -> None:
    # (-t PD,R: the cancelled jobs of an earlier run stay in slurmctld for MinJobAge)
    mine = [w for w in squeue("-t", "PD,R") if w["name"].startswith("uij-q-")]
    want = [int(w["id"]) for w in sorted(mine, key=lambda w: (v.node_sort_key(w["user"]), int(w["id"])),
                                         reverse=True)]
    seen: list[int] = []
    params: dict[str, str] = {"q": "UIJ-Q-", "state": "PD,R", "sort": "user", "order": "desc", "limit": "3"}
    pages = 0
    while True:
        status, page, _ = get(ui, "/ui/jobs", **params)
        assert status == 200 and len(page.rows) <= 3
        seen += [r["id"] for r in page.rows]
        pages += 1
        if "next" not in page.rel:
            break
        assert "prev" in page.rel or pages == 1
        params = dict(httpx.QueryParams(page.rel["next"].split("?", 1)[1]))
    assert seen == want and pages == -(-len(want) // 3)
    # back one page from the last
    status, page, _ = get(ui, "/ui/jobs", **dict(httpx.QueryParams(page.rel["prev"].split("?", 1)[1])))
    assert [r["id"] for r in page.rows] == want[(pages - 2) * 3:(pages - 1) * 3]
    # column headers sort by themselves, a second click reverses
    _, page, text = get(ui, "/ui/jobs", q="uij-q-", sort="name")
    assert [r["cells"]["name"] for r in page.rows] == sorted(r["cells"]["name"] for r in page.rows)
    assert 'aria-sort="ascending"' in text and "?q=uij-q-&amp;sort=name&amp;order=desc" in text
    # search: a job id, or part of a name / user / account, in any case
    assert [r["id"] for r in get(ui, "/ui/jobs", q=str(queue_jobs["dep"]))[1].rows] == [queue_jobs["dep"]]
    assert sorted(r["id"] for r in get(ui, "/ui/jobs", q="Q-RUN", state="R")[1].rows) == sorted(
        queue_jobs[k] for k in ("run_a", "run_a2", "run_b"))
    assert [r["id"] for r in get(ui, "/ui/jobs", q="chemis", state="R")[1].rows] == [queue_jobs["run_b"]]


@pytest.mark.cluster
def test_bad_filters_give_the_page_again_with_the_message(ui: httpx.Client, queue_jobs: dict[str, int]) -> None:
    for params, message in [
        ({"state": "BOGUS"}, "state: 'BOGUS' is not a known state"),
        ({"nodes": "n["}, "nodes:"),
        ({"sort": "priority"}, "sort must be one of"),
        ({"limit": "0"}, "limit must be a whole number"),
        ({"after": "not-a-cursor"}, "after is not a page link"),
        ({"colour": "red"}, "unknown parameter 'colour'"),
    ]:
        status, page, _ = get(ui, "/ui/jobs", **params)
        assert status == 400, params
        assert any(message in a for a in page.alerts), (params, page.alerts)
        assert page.rows == []
    # the form keeps what was typed, the field is marked
    _, page, _ = get(ui, "/ui/jobs", state="BOGUS", user="alice")
    assert page.inputs["state"]["value"] == "BOGUS" and page.inputs["state"].get("aria-invalid") == "true"
    assert page.inputs["user"]["value"] == "alice"
    # every input has its label
    assert {i["id"] for i in page.inputs.values()} <= page.labels


def scontrol_job(job: int) -> dict[str, str]:
    out = sh("scontrol", "-o", "show", "job", str(job))
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


@pytest.mark.cluster
def test_running_job_page_is_scontrols_record(ui: httpx.Client, queue_jobs: dict[str, int]) -> None:
    job = queue_jobs["run_b"]
    status, page, text = get(ui, f"/ui/jobs/{job}")
    assert status == 200
    sc = scontrol_job(job)
    f = page.fields
    assert f["user"] == f"{sc['UserId'].split('(')[0]} ({sc['UserId'].split('(')[1].rstrip(')')})"
    assert (f["account"], f["partition"], f["cpus"], f["nodes"], f["batch host"]) == (
        sc["Account"], sc["Partition"], sc["NumCPUs"], sc["NodeList"], sc["BatchHost"])
    assert f["state"] == "RUNNING" and f["time limit"] == "10:00" and sc["TimeLimit"] == "00:10:00"
    assert f["started"] == datetime.fromisoformat(sc["StartTime"]).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert abs(seconds(f["elapsed"]) - seconds(sc["RunTime"])) <= 3
    assert abs(seconds(f["elapsed"]) + seconds(f["left"]) - 600) <= 1
    assert f'href="/ui/nodes/{sc["NodeList"]}"' in text
    # its running step, as scontrol lists it
    assert 'data-step="0"' in text and f"{job}.0" in text
    # accounting has its (running) run once slurmdbd got the start
    wait_for(lambda: sh("sacct", "-n", "-X", "-o", "State", "-j", str(job)).strip() == "RUNNING", 30, 0.5,
             what="slurmdbd to record the start")
    assert [r["run state"] for r in get(ui, f"/ui/jobs/{job}")[1].runs] == ["RUNNING"]


@pytest.mark.cluster
def test_readers_see_private_fields_on_their_own_jobs_only(ui: httpx.Client, queue_jobs: dict[str, int]) -> None:
    job = queue_jobs["run_a"]
    assert scontrol_job(job)["WorkDir"] == "/tmp"
    _, other, text = get(ui, f"/ui/jobs/{job}", READER)  # rita: not hers
    assert other.fields["work dir"].startswith("private") and "/tmp" not in text
    _, own, _ = get(ui, f"/ui/jobs/{job}", ALICE)
    assert own.fields["work dir"] == "/tmp"
    _, op, _ = get(ui, f"/ui/jobs/{job}", OPERATOR)
    assert op.fields["work dir"] == "/tmp"
    # bob's job stays private to alice
    _, bobs, _ = get(ui, f"/ui/jobs/{queue_jobs['run_b']}", ALICE)
    assert bobs.fields["work dir"].startswith("private")


@pytest.mark.cluster
def test_pending_job_page_gives_its_reason(ui: httpx.Client, queue_jobs: dict[str, int]) -> None:
    job = queue_jobs["dep"]
    _, page, _ = get(ui, f"/ui/jobs/{job}")
    assert page.fields["state"] == "PENDING" and page.fields["reason"] == scontrol_job(job)["Reason"] == "Dependency"
    assert page.fields["elapsed"] == "" and page.fields["nodes"] == ""


@pytest.mark.cluster
def test_unknown_and_malformed_job_ids_give_readable_pages(ui: httpx.Client, devcluster: DevCluster) -> None:
    status, page, _ = get(ui, "/ui/jobs/3999999999")
    assert status == 404
    assert page.alerts == ["No job 3999999999: slurmctld does not hold it and accounting has no record of it."]
    status, page, _ = get(ui, "/ui/jobs/abc")
    assert status == 400 and page.alerts == ["'abc' is not a job id (a whole number)"]


# -- finished jobs: steps, exit codes, efficiency, runs -----------------------------------------------
BURN = ("python3 -c \"import time; b=bytearray(150*2**20); t=time.time()\nwhile time.time()-t<3: sum(range(10**5))\"; "
        "srun -n1 python3 -c \"import time; b=bytearray(60*2**20); time.sleep(2)\"; srun -n1 false; exit 0")


def sacct_steps(job: int) -> dict[str, dict[str, str]]:
    fields = ["JobID", "State", "ExitCode", "TotalCPU", "MaxRSS", "Elapsed", "AllocCPUS", "AllocTRES", "Start", "End"]
    out = sh("sacct", "-n", "-P", "-o", ",".join(fields), "-j", str(job))
    return {r["JobID"]: r for r in (dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines())}


def cpu_seconds(text: str) -> float:
    """sacct's TotalCPU (``MM:SS.mmm``, ``HH:MM:SS``, ``D-HH:MM:SS``) in seconds."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return float(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


@pytest.fixture(scope="module")
def finished_job(devcluster: DevCluster) -> int:
    """alice's job of a CPU-bound batch script (150 MiB), a 60 MiB srun step and a failing one,
    sampled every second (``--acctg-freq``) so that accounting has each step's MaxRSS."""
    job = sbatch("alice", "-J", "uij-eff", "-A", "physics", "-p", "debug", "-t", "5", "--mem=400M",
                 "--acctg-freq=task=1", "--wrap", BURN)

    def recorded() -> bool:
        steps = sacct_steps(job)
        derived = sh("sacct", "-n", "-X", "-P", "-o", "DerivedExitCode", "-j", str(job)).strip()
        return (steps.get(str(job), {}).get("State") == "COMPLETED" and f"{job}.1" in steps
                and all(s["End"] not in ("", "Unknown") for s in steps.values())
                and derived == "1:0")  # slurmdbd sets it a moment after the job's end: the failing step's

    wait_for(recorded, 60, 0.5, what=f"job {job} to finish in accounting")
    return job


@pytest.mark.cluster
def test_finished_job_steps_exit_codes_and_efficiency_are_saccts(ui: httpx.Client, finished_job: int) -> None:
    job = finished_job
    steps = sacct_steps(job)
    status, page, text = get(ui, f"/ui/jobs/{job}", ALICE)
    assert status == 200 and len(page.runs) == 1
    run = page.runs[0]
    top = steps[str(job)]
    assert (run["run state"], run["exit code"], run["cpus"]) == ("COMPLETED", top["ExitCode"], top["AllocCPUS"])
    assert seconds(run["elapsed"]) == seconds(top["Elapsed"])
    derived = sh("sacct", "-n", "-X", "-P", "-o", "DerivedExitCode", "-j", str(job)).strip()
    assert run["derived exit code"] == derived == "1:0"  # the failing srun step
    # each step's state, exit code, CPU time and MaxRSS
    rows = {m[0]: (m[1], m[2]) for m in re.findall(
        r'<tr data-step="([^"]+)"><td>[^<]*</td><td>[^<]*</td><td data-col="state">(\w+)</td>\s*'
        r'<td data-col="exit">([\d:]+)', text)}
    want = {k.split(".", 1)[1]: (s["State"], s["ExitCode"]) for k, s in steps.items() if "." in k}
    assert rows == want
    # seff: the steps' CPU time over elapsed x allocated CPUs; the largest MaxRSS over the memory
    cpu = sum(cpu_seconds(s["TotalCPU"]) for k, s in steps.items() if "." in k)
    cpus = int(top["AllocCPUS"])
    expected_cpu = 100 * cpu / (seconds(top["Elapsed"]) * cpus)
    got_cpu = float(run["cpu efficiency"].split("%")[0])
    assert abs(got_cpu - expected_cpu) <= 0.1, (run, steps)
    mem_mib = int(re.search(r"mem=(\d+)M", top["AllocTRES"]).group(1))  # type: ignore[union-attr]
    assert mem_mib == 400
    max_rss_k = max(int(s["MaxRSS"].rstrip("K")) for k, s in steps.items() if "." in k and s["MaxRSS"])
    assert max_rss_k > 150 * 1024  # the batch script's 150 MiB
    expected_mem = 100 * max_rss_k / 1024 / mem_mib
    assert abs(float(run["memory efficiency"].split("%")[0]) - expected_mem) <= 0.1, (run, steps)


@pytest.mark.cluster
def test_max_rss_is_read_from_the_step_table(devcluster: DevCluster, finished_job: int) -> None:
    from slurmtower.accounting import AccountingDB

    db = AccountingDB.from_settings(load_settings(devcluster.tower_conf, environ={}))
    try:
        steps = db.steps_for_jobs([finished_job])[finished_job]
    finally:
        db.close()
    want = {k.split(".", 1)[1]: s["MaxRSS"] for k, s in sacct_steps(finished_job).items() if "." in k}
    got = {v.step_label(s.step_id): s.max_rss_bytes for s in steps}
    assert set(got) == set(want)
    for step, rss in want.items():
        # sacct prints MaxRSS in KiB, rounded down
        assert (got[step] // 1024 if got[step] is not None else "") == (int(rss.rstrip("K")) if rss else ""), step


@pytest.mark.cluster
def test_requeued_job_shows_every_run(ui: httpx.Client, requeued_job: int) -> None:
    runs = sacct_runs(requeued_job)  # oldest first
    assert [r["State"] for r in runs] == ["REQUEUED", "COMPLETED"]
    status, page, _ = get(ui, f"/ui/jobs/{requeued_job}")
    assert status == 200
    assert [r["number"] for r in page.runs] == ["2", "1"]
    assert [r["run state"] for r in page.runs] == [r["State"] for r in reversed(runs)]
    assert [r["submitted"] for r in page.runs] == [
        datetime.fromisoformat(r["Submit"]).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") for r in reversed(runs)]
    # 26.05+ names each run (SLUID); older releases have none and the page shows none
    assert [r.get("sluid", "") for r in page.runs] == [r["SLUID"] for r in reversed(runs)]


# -- history -----------------------------------------------------------------------------------------
def sacct_records(ids: list[int]) -> list[dict[str, str]]:
    fields = ["JobIDRaw", "User", "Account", "Partition", "JobName", "State", "ExitCode", "Submit", "Start", "End"]
    out = sh("sacct", "-a", "-X", "-D", "-n", "-P", "--delimiter=\x1f", "-o", ",".join(fields),
             "-j", ",".join(map(str, ids)))
    rows = [dict(zip(fields, line.split("\x1f"), strict=True)) for line in out.splitlines() if line]
    for r in rows:
        r["State"] = r["State"].split()[0]  # "CANCELLED by 1001"
    return rows


def _utc(text: str) -> str:
    return "" if text in ("", "Unknown", "None") else \
        datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@pytest.mark.cluster
def test_history_page_is_saccts_records_with_cursor_paging(ui: httpx.Client, queue_jobs: dict[str, int],
                                                           finished_job: int, requeued_job: int) -> None:
    ids = sorted({*queue_jobs.values(), finished_job, requeued_job})
    lo, hi = ids[0], ids[-1]
    want = sacct_records(list(range(lo, hi + 1)))
    # newest job id first (a jobid filter orders so), a requeued job's runs newest submission first
    want.sort(key=lambda r: (int(r["JobIDRaw"]), r["Submit"]), reverse=True)

    def rows_of(page: Page) -> list[tuple[Any, ...]]:
        return [(r["id"], r["cells"]["user"], r["cells"]["account"], r["cells"]["partition"], r["cells"]["name"],
                 r["cells"]["state"], r["cells"]["exit"], r["cells"]["submitted"], r["cells"]["started"],
                 r["cells"]["ended"]) for r in page.rows]

    expected = [(int(r["JobIDRaw"]), r["User"], r["Account"], r["Partition"], r["JobName"], r["State"],
                 r["ExitCode"], _utc(r["Submit"]), _utc(r["Start"]), _utc(r["End"])) for r in want]
    status, page, _ = get(ui, "/ui/history", jobid_from=str(lo), jobid_to=str(hi), limit="1000")
    got = rows_of(page)
    # still-running jobs may end between the two reads: compare those by id only
    fixed = {int(r["JobIDRaw"]) for r in want if r["State"] not in ("RUNNING", "PENDING")}
    assert status == 200 and [g[0] for g in got] == [e[0] for e in expected]
    assert [g for g in got if g[0] in fixed] == [e for e in expected if e[0] in fixed]
    # paging: 4 a page, through the next-page links, gives the same records
    seen: list[tuple[Any, ...]] = []
    path = f"/ui/history?jobid_from={lo}&jobid_to={hi}&limit=4"
    while True:
        status, page, _ = get(ui, path)  # the links hold /history's own terms (jobid%3E%3D...)
        assert status == 200 and len(page.rows) <= 4
        seen += [(r["id"], r["run"]) for r in page.rows]
        if "next" not in page.rel:
            break
        path = page.rel["next"]
    assert [s[0] for s in seen] == [e[0] for e in expected] and len(set(seen)) == len(seen)
    # filters: bob's, FAILED-free; the user's and the state's are sacct's
    _, page, _ = get(ui, "/ui/history", jobid_from=str(lo), jobid_to=str(hi), user="bob", limit="1000")
    assert [r["id"] for r in page.rows] == [e[0] for e in expected if e[1] == "bob"]
    _, page, _ = get(ui, "/ui/history", jobid_from=str(lo), jobid_to=str(hi), state="COMPLETED", limit="1000")
    assert [r["id"] for r in page.rows] == [e[0] for e in expected if e[5] == "COMPLETED"]
    # the page and /history give the same records for the same query
    api = ui.get("/history", params={"user": "alice", "limit": "20"}, headers=bearer(READER)).json()
    _, page, _ = get(ui, "/ui/history", user="alice", limit="20")
    assert [(r["id"], int(r["run"] or 0)) for r in page.rows] == [(j["job_id"], j["job_db_inx"]) for j in api["jobs"]]


@pytest.mark.cluster
def test_history_bad_filters_are_4xx_pages_naming_the_field(ui: httpx.Client) -> None:
    for params, field, message in [
        ({"jobid_from": "abc"}, "jobid", "jobid must be a whole number, not 'abc'"),
        ({"submitted_after": "yesterday"}, "submitted_after", "must be an ISO 8601 time"),
        ({"limit": "0"}, "limit", "limit must be between 1 and 1000"),
        ({"cursor": "zzz"}, "cursor", "cursor is not a cursor from a previous page"),
        ({"state": "NOPE"}, "state", "unknown job state 'NOPE'"),
        ({"user": "a b"}, "user", "user is not a valid user name"),
        ({"color": "red"}, "color", "unknown filter 'color'"),
    ]:
        status, page, _ = get(ui, "/ui/history", **params)
        assert status == 400, params
        assert len(page.alerts) == 1 and page.alerts[0].startswith(f"{field}:") and message in page.alerts[0], \
            (params, page.alerts)
        assert page.rows == []
    _, page, _ = get(ui, "/ui/history", jobid_from="abc")
    assert page.inputs["jobid_from"]["value"] == "abc" and page.inputs["jobid_from"].get("aria-invalid") == "true"
    assert {i["id"] for i in page.inputs.values()} <= page.labels


@pytest.mark.cluster
def test_hidden_partitions_leave_every_page(devcluster: DevCluster, tmp_path: Path,
                                            queue_jobs: dict[str, int]) -> None:
    settings = _settings(devcluster, tmp_path)
    settings.api.hidden_partitions = ["batch"]
    batch_job = queue_jobs["run_b"]
    with running_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        page = _queue_page(http, OPERATOR)
        assert batch_job not in [r["id"] for r in page.rows]
        assert "batch" not in page.cells("partition")
        assert sorted(r["id"] for r in page.rows) == sorted(int(w["id"]) for w in squeue() if w["partition"] != "batch")
        assert "<option value=\"batch\">" not in get(http, "/ui/jobs", OPERATOR)[2]
        status, job_page, _ = get(http, f"/ui/jobs/{batch_job}", OPERATOR)
        assert status == 404 and job_page.alerts[0].startswith(f"No job {batch_job}")
        status, hist, _ = get(http, "/ui/history", OPERATOR, partition="batch")
        assert status == 200 and hist.rows == []
        _, hist, _ = get(http, "/ui/history", OPERATOR, limit="1000")
        assert hist.rows and "batch" not in hist.cells("partition")
        assert batch_job not in [r["id"] for r in hist.rows]


@pytest.mark.cluster
def test_a_dead_accounting_database_is_a_503_page_and_live_details_stay(devcluster: DevCluster, tmp_path: Path,
                                                                       queue_jobs: dict[str, int]) -> None:
    settings = _settings(devcluster, tmp_path)
    settings.accounting.url = SecretStr("mysql+pymysql://reader:x@127.0.0.1:9/nothing")  # discard port: refused
    with running_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        status, page, _ = get(http, "/ui/history")
        assert status == 503 and "accounting database" in page.alerts[0]
        status, page, text = get(http, f"/ui/jobs/{queue_jobs['run_a']}")
        assert status == 200 and page.fields["state"] == "RUNNING"
        assert "accounting did not answer" in text
        status, page, _ = get(http, "/ui/jobs/3999999999")
        assert status == 503 and "did not answer" in page.alerts[0]


@pytest.mark.cluster
def test_a_job_slurmctld_forgot_is_shown_from_accounting(ui: httpx.Client, early_job: int) -> None:
    forgotten(early_job)
    status, page, text = get(ui, f"/ui/jobs/{early_job}", READER)
    assert status == 200 and "slurmctld no longer holds this job" in text
    record = sacct_records([early_job])[0]
    assert record["User"] == "alice" and page.fields["user"] == f"alice ({pwd.getpwnam('alice').pw_uid})"
    assert (page.fields["account"], page.fields["partition"]) == (record["Account"], record["Partition"])
    assert page.fields["work dir"].startswith("private")  # rita reads alice's job
    assert [(r["run state"], r["exit code"], r["submitted"], r["ended"]) for r in page.runs] == [
        (record["State"], record["ExitCode"], _utc(record["Submit"]), _utc(record["End"]))]
    assert "%" in page.runs[0]["cpu efficiency"] or "not known" in page.runs[0]["cpu efficiency"]
    assert 'data-step="batch"' in text
