"""The /ui dashboard in real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.auth_helpers import OPERATOR, READER, bearer
from tests.conftest import node_states, sh, wait_for
from tests.ui_browser import CHROMIUM, browser, page_as, server, shoot

pytestmark = [pytest.mark.browser, pytest.mark.cluster]

def test_dashboard_shows_nodes_live_drains_and_hides_buttons_from_readers(
        server: str, browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reader = page_as(browser, server, READER)
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
    operator = page_as(browser, server, OPERATOR)
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
    shoot(operator, "overview")

    # A second owner's hold on n4 (drain holds): the box lists both holders, oldest first.
    added = httpx.post(f"{server}/actions/slurm.node.drain", json={"nodes": "n4", "reason": "fan check"},
                       headers=bearer(OPERATOR), timeout=30)
    assert added.status_code == 200 and added.json()["result"]["held_with"] == {"n4": ["user:root"]}, added.text
    operator.wait_for_selector(".node[data-node=n4] .owner:text('user:root, slurmtower:otto@api')", timeout=15_000)
    title = operator.locator(".node[data-node=n4]").get_attribute("title") or ""
    assert "held by: user:root, slurmtower:otto@api" in title and "reason: browser test; fan check" in title

    # Cancelling the confirmation changes nothing.
    operator.click(".node[data-node=n4] button.resume")
    operator.click("#confirm-cancel")
    assert "DRAIN" in node_states()["n4"]


__all__ = ["browser", "server"]  # the fixture, imported from tests.ui_browser


def test_chromium_is_debians() -> None:
    assert shutil.which("chromium") == CHROMIUM or os.path.exists(CHROMIUM)
