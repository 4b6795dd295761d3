"""The reports page in Debian's Chromium: an operator fills the form and submits it, the usage
chart is drawn (uPlot, a series per group shown), the table has the library's groups, the CSV
link downloads the report's rows; the page runs under the dashboard's Content-Security-Policy
without a console error (tests/ui_browser.py)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import pytest

from slurmtower.accounting.reports import Reports, UsageQuery
from slurmtower.api import create_app
from slurmtower.dashboard.reports_view import CHART_GROUPS, hours_text
from slurmtower.runtime.reports import report_rows
from slurmtower.settings import Settings
from tests.auth_helpers import OPERATOR, module_app_settings, running_server
from tests.test_ui_reports import Used, reports, used
from tests.ui_browser import browser, page_as, shoot, wait_js

pytestmark = [pytest.mark.browser, pytest.mark.cluster]
__all__ = ["browser", "reports", "used"]  # the fixtures


@pytest.fixture(scope="module")
def server(cluster_settings: Settings, tmp_path_factory: pytest.TempPathFactory, used: Used) -> Iterator[str]:
    s = module_app_settings(cluster_settings, tmp_path_factory.mktemp("ui-reports-browser"))
    with running_server(create_app(s)) as url:
        yield url


def _minute(t: Any) -> str:
    return t.strftime("%Y-%m-%dT%H:%M")


def test_an_operator_draws_a_usage_report_and_downloads_it(server: str, browser: Any, reports: Reports,
                                                           used: Used) -> None:  # noqa: F811
    page = page_as(browser, server, OPERATOR)
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(f"{msg.type}: {msg.text}") if msg.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
    page.click('nav a[href="/ui/reports"]')
    page.wait_for_url(f"{server}/ui/reports")
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Reports"
    wait_js(page, "document.querySelector('.report-chart[data-drawn]')")  # the default report's chart
    shoot(page, "reports-default")

    # the fields follow the report chosen: waits take no period or TRES
    page.select_option("#reports-kind", "waits")
    assert not page.is_visible("#reports-period") and page.is_visible("#reports-partitions")
    page.select_option("#reports-kind", "usage")
    assert page.is_visible("#reports-period") and not page.is_visible("#reports-partitions")

    page.fill("#reports-start", _minute(used.start))
    page.fill("#reports-end", _minute(used.end))
    page.select_option("#reports-period", "hour")
    page.select_option("#reports-group_by", "account+user")
    page.fill("#reports-tres", "cpu")
    with page.expect_navigation():
        page.click("#reports-form button[type=submit]")
    assert "group_by=account%2Buser" in page.url and "period=hour" in page.url
    assert "users=" not in page.url and "partitions=" not in page.url  # empty and other reports' fields left out

    want = reports.usage(UsageQuery(start=used.start, end=used.end, period="hour", group_by="account+user"))
    groups = min(len(want.groups), CHART_GROUPS) + (len(want.groups) > CHART_GROUPS)
    drawn = wait_js(page, "(document.querySelector('.report-chart[data-drawn]') || {dataset: {}}).dataset.drawn")
    assert int(drawn) == groups == int(page.get_attribute(".report-chart", "data-series") or 0)
    # uPlot's legend: the periods' series and one per group; its canvas is drawn
    assert page.locator(".report-chart .u-legend .u-series").count() == groups + 1
    assert page.evaluate("""() => { const c = document.querySelector('.report-chart canvas');
        return c && c.width > 100 && c.height > 100 &&
               c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v, i) => i % 4 === 3 && v > 0); }""")
    names = page.locator('table.report-table tbody tr[data-group] th[scope="row"]').all_inner_texts()
    assert names == [g.name for g in want.groups] and len(names) >= 2
    totals = page.locator('table.report-table tbody tr[data-group] td[data-col="total"]').all_inner_texts()
    assert totals == [hours_text(g.total_hours["cpu"]) for g in want.groups]

    with page.expect_download() as info:
        page.click("#report-csv")
    download = info.value
    assert download.suggested_filename.startswith("slurmtower-usage-")
    with open(download.path(), encoding="utf-8") as fh:
        rows = list(csv.DictReader(io.StringIO(fh.read())))
    assert list(rows[0]) == list(report_rows(want)[0])
    assert len(rows) == len(want.groups) * len(want.periods)
    shoot(page, "reports-usage")
    assert problems == []
