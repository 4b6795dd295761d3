"""The /ui dashboard in real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmtower.api import create_app
from slurmtower.settings import Settings
from tests.auth_helpers import OPERATOR, READER, running_server, with_tokens
from tests.conftest import node_states, sh, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.cluster]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture()
def server(settings: Settings, clean_nodes: object) -> Iterator[str]:
    settings.api.refresh_interval = 0.5
    settings.events.poll_interval = 0.5
    with running_server(create_app(with_tokens(settings, sensor=True))) as url:
        yield url


@pytest.fixture()
def browser() -> Iterator[object]:
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is missing (scripts/test.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _page_as(browser, url: str, token: str):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/ui")
    # Not logged in: sent to the login page; log in with the token like a person would.
    page.wait_for_url(f"{url}/ui/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/ui")
    return page


def test_dashboard_shows_nodes_live_drains_and_hides_buttons_from_readers(
        server: str, browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reader = _page_as(browser, server, READER)
    assert reader.locator(".node").count() == 4
    assert sorted(reader.locator(".node .name").all_inner_texts()) == ["n1", "n2", "n3", "n4"]
    assert reader.locator("button.act").count() == 0
    assert reader.locator("dialog#confirm").count() == 0
    reader.wait_for_selector("#feed-status:text('live')", timeout=15_000)

    # A drain done behind slurmtower's back shows up in the feed and on the map within seconds.
    sh("scontrol", "update", "nodename=n4", "state=DRAIN", "reason=browser test")
    reader.wait_for_selector("#feed li[data-node=n4][data-type='slurm.node.state']", timeout=15_000)
    reader.wait_for_selector(".node[data-node=n4].drained", timeout=15_000)
    title = reader.locator(".node[data-node=n4]").get_attribute("title") or ""
    assert "reason: browser test" in title and "owner: user:root" in title
    assert reader.locator("button.act").count() == 0

    # An operator sees the buttons and drains n1 with a confirmation and a reason.
    operator = _page_as(browser, server, OPERATOR)
    assert operator.locator(".node[data-node=n1] button.drain").count() == 1
    assert operator.locator(".node[data-node=n4] button.resume").count() == 1
    operator.click(".node[data-node=n1] button.drain")
    operator.wait_for_selector("dialog#confirm[open]")
    operator.fill("#confirm-reason", "swap fan")
    operator.click("#confirm-ok")
    operator.wait_for_selector("#action-result.ok", timeout=20_000)
    wait_for(lambda: "DRAIN" in node_states()["n1"], 10, what="n1 drained from the dashboard")
    assert "swap fan [slurmtower:otto@api]" in sh("scontrol", "show", "node", "n1")
    operator.wait_for_selector(".node[data-node=n1].drained", timeout=15_000)
    screenshot = Path(os.environ.get("SLURMTOWER_UI_SCREENSHOT", tmp_path / "ui.png"))
    operator.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000

    # Cancelling the confirmation changes nothing.
    operator.click(".node[data-node=n4] button.resume")
    operator.click("#confirm-cancel")
    assert "DRAIN" in node_states()["n4"]


def test_chromium_is_debians() -> None:
    assert shutil.which("chromium") == CHROMIUM or os.path.exists(CHROMIUM)
