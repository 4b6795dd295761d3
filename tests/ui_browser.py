"""Debian's Chromium driven by Playwright, for the /ui pages' tests: a browser fixture, logging
in as a person would, and a screenshot of each page into one folder.

Screenshots go to ``$SLURMTOWER_UI_SCREENSHOTS`` (default ``build/ui-screenshots``, ignored by
git): every page test writes ``<page>.png`` there, so a test run leaves a picture of each page.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmtower.api import create_app
from slurmtower.settings import Settings
from tests.auth_helpers import running_server, with_tokens

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(os.environ.get("SLURMTOWER_UI_SCREENSHOTS", "build/ui-screenshots"))


@pytest.fixture()
def server(settings: Settings, clean_nodes: object) -> Iterator[str]:
    """The service with the sensor on (events, the feed), tokens of each role, a fast refresh;
    every node in service before and after."""
    settings.api.refresh_interval = 0.5
    settings.events.poll_interval = 0.5
    with running_server(create_app(with_tokens(settings, sensor=True))) as url:
        yield url


@pytest.fixture()
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is missing (scripts/test.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def page_as(browser: Any, url: str, token: str, path: str = "/ui") -> Any:
    """A new browser context logged in with ``token`` through the login page, at ``path``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/ui")
    page.wait_for_url(f"{url}/ui/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/ui")
    if path != "/ui":
        page.goto(f"{url}{path}")
    return page


def wait_js(page: Any, expression: str, timeout: float = 30) -> Any:
    """Wait until ``expression`` is truthy in ``page``, polled with ``page.evaluate`` (what
    Playwright's ``wait_for_function`` compiles in the page is refused by the dashboard's
    Content-Security-Policy, which allows no eval)."""
    end = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {expression}")
        time.sleep(0.1)


def shoot(page: Any, name: str) -> Path:
    """A full-page screenshot ``<name>.png`` in :data:`SCREENSHOTS` (checked not to be blank)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} looks blank"
    return path
