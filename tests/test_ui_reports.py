"""The reports page (/ui/reports) as HTML, in process, against the local cluster's accounting
database: the figures it shows are the library's (``Reports.usage`` for the same parameters),
its CSV link asks ``/reports/<kind>`` for the same report, a reader gets totals only, bad input
is the page again with a 400 naming the parameter; the job pages link to a user's and an
account's usage.

Usage comes from a few short jobs of alice and bob, rolled up by slurmdbd itself
(``DevCluster.roll_up``, as tests/test_reports.py does).
"""

from __future__ import annotations

import csv
import io
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import unescape
from urllib.parse import parse_qsl, urlsplit

import pytest

from slurmtower.accounting import AccountingDB
from slurmtower.accounting.reports import EfficiencyQuery, Reports, UsageQuery
from slurmtower.api import create_app
from slurmtower.dashboard.reports_view import CHART_GROUPS, default_range
from slurmtower.devcluster import DevCluster
from slurmtower.runtime.reports import report_rows
from slurmtower.settings import Settings
from tests.auth_helpers import OPERATOR, READER, bearer, module_app_settings
from tests.conftest import sh, submit, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.cluster

HTML = {"Accept": "text/html"}


@dataclass(frozen=True)
class Used:
    start: datetime
    end: datetime
    """From the hour the jobs started to the end of the current hour, rolled up."""
    jobs: list[int]


def _ended(jobs: list[int]) -> bool:
    out = sh("sacct", "-a", "-n", "-X", "-P", "-o", "JobIDRaw,End", "-j", ",".join(map(str, jobs)))
    ends = dict(line.split("|") for line in out.splitlines() if line)
    return all(ends.get(str(j), "Unknown") not in ("Unknown", "") for j in jobs)


@pytest.fixture(scope="module")
def used(devcluster: DevCluster, cluster_settings: Settings) -> Used:
    """Two users' short jobs in two accounts, ended and rolled up by slurmdbd (until the
    report over their hours shows both: a rollup asked while slurmdbd runs its own hourly one,
    just past the hour, can leave the hour's rows to that one)."""
    common = ("-t", "2", "-o", "/dev/null")
    jobs = [submit("alice", "-J", "st-uirep-a", "-A", "physics", "-p", "batch", "-c", "2", *common,
                   "--wrap", "timeout 3 sh -c 'while :; do :; done'; true"),
            submit("bob", "-J", "st-uirep-b", "-A", "chemistry", "-p", "debug", "-c", "1", *common, "--wrap", "sleep 2")]
    wait_for(lambda: _ended(jobs), 120, 0.5, what="the report jobs to end")
    out = sh("sacct", "-a", "-n", "-X", "-P", "-o", "Start", "-j", ",".join(map(str, jobs)))
    first = min(datetime.fromisoformat(s).astimezone(UTC) for s in out.split())
    start = first.replace(minute=0, second=0, microsecond=0)
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    db = AccountingDB.from_settings(cluster_settings)
    try:
        reports = Reports(db, tz=cluster_settings.accounting.time_zone)

        def rolled() -> bool:
            devcluster.roll_up(start=start)
            got = reports.usage(UsageQuery(start=start, end=end, period="hour", group_by="user"))
            return {"alice", "bob"} <= {g.name for g in got.groups}

        wait_for(rolled, 60, 2, what="both users' usage in the rolled-up hours")
    finally:
        db.close()
    return Used(start=start, end=end, jobs=jobs)


@pytest.fixture(scope="module")
def reports(devcluster: DevCluster, cluster_settings: Settings) -> Iterator[Reports]:
    db = AccountingDB.from_settings(cluster_settings)
    yield Reports(db, tz=cluster_settings.accounting.time_zone)
    db.close()


@pytest.fixture(scope="module")
def ui(cluster_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    s = module_app_settings(cluster_settings, tmp_path_factory.mktemp("ui-reports"))
    with TestClient(create_app(s)) as client:
        yield client


def _range(used: Used) -> dict[str, str]:
    return {"start": used.start.isoformat(), "end": used.end.isoformat()}


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html))).strip()


def table(html: str, tres: str) -> dict[str, list[int]]:
    """The usage table of ``tres``: group -> [seconds per period ..., total seconds] (``*total*``:
    the footer's total)."""
    m = re.search(rf'<table class="jobs-table report-table" data-tres="{re.escape(tres)}">(.*?)</table>', html, re.S)
    assert m, f"no table of {tres}"
    found = {unescape(g): [int(s) for s in re.findall(r'data-seconds="(\d+)"', row)]
             for g, row in re.findall(r'<tr data-group="([^"]+)">(.*?)</tr>', m[1], re.S)}
    total = re.search(r'<tr data-total="[^"]+">(.*?)</tr>', m[1], re.S)
    if total:
        found["*total*"] = [int(s) for s in re.findall(r'data-seconds="(\d+)"', total[1])]
    return found


def charts(html: str) -> list[dict[str, object]]:
    return [json.loads(unescape(c)) for c in re.findall(r'data-chart="([^"]+)"', html)]


def csv_link(html: str) -> str:
    m = re.search(r'<a id="report-csv" href="([^"]+)"', html)
    assert m, "no CSV link"
    return unescape(m[1])


def bad_param(html: str) -> str | None:
    m = re.search(r'<p id="reports-error"[^>]*data-param="([^"]*)"', html)
    return unescape(m[1]) if m else None


# -- usage ---------------------------------------------------------------------------------------


def test_the_usage_page_shows_what_the_library_reports(ui: TestClient, reports: Reports, used: Used) -> None:
    params = {"kind": "usage", **_range(used), "period": "hour", "group_by": "account+user", "tres": "cpu,mem"}
    page = ui.get("/ui/reports", params=params, headers={**bearer(OPERATOR), **HTML})
    assert page.status_code == 200, page.text
    want = reports.usage(UsageQuery(start=used.start, end=used.end, period="hour", group_by="account+user",
                                    tres=("cpu", "mem")))
    assert {g.name for g in want.groups} >= {"physics/alice", "chemistry/bob"}
    for tres in ("cpu", "mem"):
        shown = table(page.text, tres)
        assert shown == {**{g.name: [*(c.tres_seconds[tres] for c in g.cells), g.total_seconds[tres]]
                            for g in want.groups}, "*total*": [want.total_seconds[tres]]}
        assert shown["*total*"][0] > 0
    # one chart per TRES: a series per group (the largest CHART_GROUPS, then "others"), per period
    drawn = charts(page.text)
    assert len(drawn) == 2
    for chart, tres in zip(drawn, ("cpu", "mem"), strict=True):
        series = chart["series"]
        assert isinstance(series, list)
        assert len(series) == min(len(want.groups), CHART_GROUPS) + (len(want.groups) > CHART_GROUPS)
        assert len(chart["labels"]) == len(want.periods)  # type: ignore[arg-type]
        first = want.groups[0]
        assert series[0] == {"name": first.name, "hours": [round(c.tres_seconds[tres] / 3600, 4) for c in first.cells]}
    text = _text(page.text)
    assert f"Source: {want.source}" in text and want.source.startswith("assoc_usage_")
    for note in want.notes:
        assert note in text
    assert 'aria-current="page">Reports</a>' in page.text


def test_the_csv_link_asks_the_api_for_the_same_report(ui: TestClient, reports: Reports, used: Used) -> None:
    params = {"kind": "usage", **_range(used), "period": "range", "group_by": "user", "tres": "cpu", "top": "5"}
    page = ui.get("/ui/reports", params=params, headers={**bearer(OPERATOR), **HTML})
    assert page.status_code == 200, page.text
    link = csv_link(page.text)
    path, query = urlsplit(link).path, dict(parse_qsl(urlsplit(link).query))
    assert path == "/reports/usage"
    assert query == {**{k: v for k, v in params.items() if k != "kind"}, "format": "csv"}
    got = ui.get(link, headers=bearer(OPERATOR))
    assert got.status_code == 200 and got.headers["content-disposition"].startswith("attachment;")
    want = reports.usage(UsageQuery(start=used.start, end=used.end, period="range", group_by="user", top=5))
    rows = list(csv.DictReader(io.StringIO(got.text)))
    assert list(rows[0]) == list(report_rows(want)[0])
    assert {r["group"]: int(r["tres_seconds"]) for r in rows} == {g.name: g.total_seconds["cpu"] for g in want.groups}
    assert table(page.text, "cpu") == {**{g.name: [g.total_seconds["cpu"]] for g in want.groups},
                                       "*total*": [want.total_seconds["cpu"]]}


def test_the_default_report_is_the_last_week_per_account_and_day(ui: TestClient, reports: Reports,
                                                                 used: Used) -> None:
    page = ui.get("/ui/reports", headers={**bearer(OPERATOR), **HTML})
    assert page.status_code == 200, page.text
    start, end = default_range(datetime.now(UTC))
    assert f'id="reports-start" name="start" type="datetime-local" step="3600" value="{start}"' in page.text
    assert f'value="{end}"' in page.text
    assert dict(parse_qsl(urlsplit(csv_link(page.text)).query)) == {
        "start": start, "end": end, "period": "day", "group_by": "account", "tres": "cpu", "format": "csv"}
    want = reports.usage(UsageQuery(start=start, end=end, period="day", group_by="account"))
    assert len(want.periods) == 8
    assert table(page.text, "cpu") == {**{g.name: [*(c.tres_seconds["cpu"] for c in g.cells), g.total_seconds["cpu"]]
                                          for g in want.groups}, "*total*": [want.total_seconds["cpu"]]}
    assert {"physics", "chemistry"} <= {g.name for g in want.groups}


def test_a_reader_sees_totals_only(ui: TestClient, used: Used) -> None:
    reader = {**bearer(READER), **HTML}
    refused = ui.get("/ui/reports", params={"kind": "usage", **_range(used), "group_by": "user"}, headers=reader)
    assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html")
    assert bad_param(refused.text) == "group_by" and "totals only" in _text(refused.text)
    assert re.search(r'<select id="reports-group_by" name="group_by"[^>]*aria-invalid="true"', refused.text)
    assert 'id="report"' not in refused.text and 'id="report-csv"' not in refused.text
    refused = ui.get("/ui/reports", params={"kind": "usage", **_range(used), "users": "alice"}, headers=reader)
    assert refused.status_code == 403 and bad_param(refused.text) == "users"
    totals = ui.get("/ui/reports", params={"kind": "usage", **_range(used), "group_by": "account"}, headers=reader)
    assert totals.status_code == 200 and "physics" in table(totals.text, "cpu")


@pytest.mark.parametrize(("extra", "param"), [
    ({"start": "yesterday"}, "start"),
    ({"end": "2000-01-01"}, "end"),
    ({"group_by": "planet"}, "group_by"),
    ({"period": "fortnight"}, "period"),
    ({"tres": "cpu,unobtainium"}, "tres"),
    ({"top": "ten"}, "top"),
    ({"color": "red"}, "color"),
    ({"kind": "pie"}, "kind"),
    ({"kind": "efficiency", "group_by": "partition"}, "group_by"),
    ({"kind": "waits", "size_buckets": "10,x"}, "size_buckets"),
    ({"kind": "availability", "partitions": "nope"}, "partitions"),
], ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else str(v))
def test_bad_input_is_the_page_again_with_a_400_naming_the_parameter(ui: TestClient, used: Used,
                                                                     extra: dict[str, str], param: str) -> None:
    resp = ui.get("/ui/reports", params={"kind": "usage", **_range(used), **extra},
                  headers={**bearer(OPERATOR), **HTML})
    assert resp.status_code == 400, resp.text
    assert resp.headers["content-type"].startswith("text/html")
    assert bad_param(resp.text) == param
    assert 'id="reports-form"' in resp.text and 'id="report"' not in resp.text  # the form, to correct it
    if param not in ("color", "kind"):
        assert re.search(rf'id="reports-{param}" name="{param}"[^>]*aria-invalid="true"', resp.text)


def test_a_field_the_report_does_not_take_is_left_out(ui: TestClient, used: Used) -> None:
    page = ui.get("/ui/reports", params={"kind": "waits", **_range(used), "period": "day", "users": ""},
                  headers={**bearer(OPERATOR), **HTML})
    assert page.status_code == 200, page.text
    assert "left out: period" in _text(page.text)
    assert dict(parse_qsl(urlsplit(csv_link(page.text)).query)) == {**_range(used), "format": "csv"}


def test_the_other_reports_are_tables_of_the_csv_rows(ui: TestClient, reports: Reports, used: Used) -> None:
    for kind, extra in (("efficiency", {"group_by": "account+user"}), ("waits", {}), ("availability", {})):
        page = ui.get("/ui/reports", params={"kind": kind, **_range(used), **extra},
                      headers={**bearer(OPERATOR), **HTML})
        assert page.status_code == 200, (kind, page.text)
        got = ui.get(csv_link(page.text), headers=bearer(OPERATOR))
        assert got.status_code == 200, got.text
        rows = list(csv.DictReader(io.StringIO(got.text)))
        m = re.search(r'<table class="jobs-table report-table" id="report-rows">(.*?)</table>', page.text, re.S)
        assert m and rows, kind
        header = [_text(h) for h in re.findall(r'<th scope="col">(.*?)</th>', m[1])]
        assert header == [c.replace("_", " ") for c in rows[0]]
        assert len(re.findall(r"<tr>", m[1])) == len(rows) + 1  # the header's row too
    page = ui.get("/ui/reports", params={"kind": "efficiency", **_range(used), "group_by": "account+user"},
                  headers={**bearer(OPERATOR), **HTML})
    want = reports.efficiency(EfficiencyQuery(start=used.start, end=used.end, group_by="account+user"))
    jobs = [int(j) for j in re.findall(r'<td data-col="jobs">(\d+)</td>', page.text)]
    assert jobs == [r.jobs for r in want.rows] + [want.total.jobs] and want.total.jobs >= 2


# -- links from the job pages ----------------------------------------------------------------------


def test_the_job_pages_link_to_the_users_and_accounts_usage(ui: TestClient, used: Used) -> None:
    operator, reader = {**bearer(OPERATOR), **HTML}, {**bearer(READER), **HTML}
    user_link = "/ui/reports?kind=usage&amp;group_by=user&amp;users=alice"
    account_link = "/ui/reports?kind=usage&amp;group_by=account&amp;accounts=physics"
    assert user_link in ui.get("/ui/jobs", params={"user": "alice"}, headers=operator).text
    assert account_link in ui.get("/ui/jobs", params={"account": "physics"}, headers=operator).text
    both = ui.get("/ui/jobs", params={"user": "alice", "account": "physics"}, headers=operator).text
    assert f"{user_link}&amp;accounts=physics" in both
    # readers see totals only (api.reports_for_readers): no link to a user's figures
    assert "/ui/reports?" not in ui.get("/ui/jobs", params={"user": "alice"}, headers=reader).text
    assert account_link in ui.get("/ui/jobs", params={"account": "physics"}, headers=reader).text
    job = ui.get(f"/ui/jobs/{used.jobs[0]}", headers=operator)
    assert job.status_code == 200 and user_link in job.text and account_link in job.text
    # the link leads to the report
    follow = ui.get(unescape(user_link), headers=operator)
    assert follow.status_code == 200 and list(table(follow.text, "cpu")) == ["alice", "*total*"]
