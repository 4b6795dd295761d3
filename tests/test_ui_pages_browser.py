"""The overview, partitions and reservations pages in Debian's Chromium: what a person sees,
the load chart's ranges, the navigation, and a screenshot of each page (tests/ui_browser.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.auth_helpers import OPERATOR, READER
from tests.conftest import sh
from tests.ui_browser import browser, page_as, server, shoot

pytestmark = [pytest.mark.browser, pytest.mark.cluster]
__all__ = ["browser", "server"]  # the fixture

RESV = "st_ui_browser_resv"


def _labelled(page: Any) -> None:
    """Every form control on the page has a label a screen reader announces."""
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea')]
        .filter((el) => el.type !== 'hidden' && !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
        .map((el) => el.id || el.name)""")
    assert unlabelled == []


def test_overview_in_the_browser(server: str, browser: Any) -> None:  # noqa: F811
    sh("scontrol", "update", "nodename=n2", "state=DRAIN", "reason=browser overview")
    page = page_as(browser, server, READER)
    page.wait_for_selector('#feed li[data-node="n2"][data-type="slurm.node.state"]', timeout=20_000)
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Overview"
    assert page.locator("h2").all_inner_texts()[:3] == ["Cluster", "Nodes", "Load"]
    assert re.fullmatch(r"\d+ / 8 \(\d+ %\)", page.locator('[data-resource="CPUs"]').inner_text())
    assert page.locator("table.partbars tbody tr").count() == 3
    # the ranges of the load chart: one pressed at a time, the chart asks /load for that span
    with page.expect_request(lambda r: "/load?time=86400" in r.url):
        page.click('button.range[data-seconds="86400"]')
    assert page.locator('button.range[aria-pressed="true"]').inner_text() == "24 h"
    page.wait_for_selector("#feed-status:text('live')", timeout=15_000)
    _labelled(page)
    shoot(page, "overview-reader")


def test_partitions_and_reservations_pages_in_the_browser(server: str, browser: Any) -> None:  # noqa: F811
    start = (datetime.now(UTC) + timedelta(hours=2)).astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    sh("scontrol", "create", "reservation", f"reservationname={RESV}", "nodes=n[1-2]", f"starttime={start}",
       "duration=120", "users=root", "flags=MAINT")
    try:
        page = page_as(browser, server, OPERATOR, "/ui/partitions")
        assert page.locator('nav a[aria-current="page"]').inner_text() == "Partitions"
        names = page.locator("table.partitions tbody th[scope=row]").all_inner_texts()
        assert [n.split()[0] for n in names] == sh("sinfo", "-h", "-o", "%R").split()
        shoot(page, "partitions")
        page.click('nav a[href="/ui/reservations"]')
        page.wait_for_url(f"{server}/ui/reservations")
        row = page.locator(f'tr[data-reservation="{RESV}"]')
        assert "INACTIVE" in row.inner_text() and "n[1-2]" in row.inner_text()
        shoot(page, "reservations")
        # the skip link leads to the content for keyboard users
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.className") == "skip"
    finally:
        sh("scontrol", "delete", f"reservationname={RESV}", check=False)
