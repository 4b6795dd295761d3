"""/ui/nodes and /ui/nodes/{name} in real headless Chromium (Debian's package, driven by
Playwright): the map against sinfo, the filter form used with the keyboard, a drain and a resume
from a node page through the confirmation dialog, and the map of the 1,000-node scale lab with
its load time measured in the browser. Each page leaves a screenshot (nodes, node, nodes-1000)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.settings import load_settings
from tests.auth_helpers import OPERATOR, READER, running_server, with_tokens
from tests.conftest import node_states, scale_sh, sh, wait_for
from tests.test_ui_nodes import sinfo_groups
from tests.ui_browser import browser, page_as, server, shoot, wait_js

pytestmark = [pytest.mark.browser, pytest.mark.cluster]

__all__ = ["browser", "server"]  # the fixture, imported from tests.ui_browser

#: The map of 1,000 nodes loads (navigation start to the load event) within this, measured in
#: Chromium on this 2-core machine at ~0.2 s with other test runs going: a wide margin.
SCALE_LOAD_MS = 1000


def shown_groups(page: Any) -> dict[str, dict[str, str]]:
    """``{partition: {node: condition}}`` as the browser shows the map."""
    found: dict[str, dict[str, str]] = page.evaluate("""() => Object.fromEntries(
        [...document.querySelectorAll('section.nodemap-group')].map(s => [s.dataset.partition,
            Object.fromEntries([...s.querySelectorAll('.nodemap-cells a')].map(
                a => [a.getAttribute('href').split('/').pop(), a.className]))]))""")
    return found


def test_node_map_matches_sinfo_and_filters_from_the_keyboard(server: str, browser) -> None:  # type: ignore[no-untyped-def]
    sh("scontrol", "update", "nodename=n3", "state=DRAIN", "reason=browser map")
    wait_for(lambda: "DRAIN" in node_states()["n3"], 10, what="n3 drained")
    page = page_as(browser, server, READER, "/ui/nodes")
    expected = sinfo_groups(sh("sinfo", "-h", "-N", "-o", "%N|%R|%T"))

    def same() -> bool:
        page.reload()
        return shown_groups(page) == expected

    wait_for(same, 15, what=f"the map to show {expected}")
    assert page.locator("h2").first.inner_text() == "Nodes"
    assert page.locator("nav a[aria-current=page]").inner_text() == "Nodes"
    cell = page.locator("section[data-partition=short] .nodemap-cells a[href='/ui/nodes/n3']")
    assert cell.get_attribute("title") == "n3: drained (IDLE+DRAIN), reason: browser map, held by user:root"
    # Every cell is a link whose accessible name (from its title) names the node and its state.
    assert page.evaluate("[...document.querySelectorAll('.nodemap-cells a')].every(a => a.title.length > 3)")
    assert page.get_by_role("link", name=re.compile(r"^n3: drained")).count() == \
        sum(1 for nodes in expected.values() if "n3" in nodes)
    # Every form control has a label.
    for control in ("#nodemap-q", "#nodemap-partition"):
        assert page.locator(f"label[for={control[1:]}]").count() == 1
    assert page.locator("fieldset.nodemap-states legend").inner_text() == "State"
    assert "browser map" in page.locator("section.nodemap-held").inner_text()
    shoot(page, "nodes")

    # The filter, typed and submitted from the keyboard: a hostlist and a state.
    page.focus("#nodemap-q")
    page.keyboard.type("n[2-4]")
    page.check("input[name=state][value=drained]")
    page.focus("#nodemap-q")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/ui/nodes\?q=n%5B2-4%5D&state=drained.*"))
    assert shown_groups(page) == {p: {"n3": "drained"} for p, nodes in expected.items() if "n3" in nodes}
    assert page.locator("#nodemap-q").input_value() == "n[2-4]"
    # A cell leads to its node page, with the keyboard too.
    page.locator("section[data-partition=debug] .nodemap-cells a").first.focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"{server}/ui/nodes/n3")
    assert page.locator("#node-reason").inner_text() == "browser map"
    assert page.locator("#node-owner").inner_text().startswith("Slurm user root")
    assert page.locator("button.act").count() == 0


def test_open_pages_follow_a_drain_made_elsewhere(server: str, browser) -> None:  # type: ignore[no-untyped-def]
    """The map and a node's page, left open by a reader, show a drain made with scontrol and its
    resume, without a reload, within their data-live period plus the snapshot's refresh."""
    from slurmtower.api.routes.ui_nodes import MAP_LIVE_SECONDS, NODE_LIVE_SECONDS

    mapped = page_as(browser, server, READER, "/ui/nodes")
    node = page_as(browser, server, READER, "/ui/nodes/n2")
    cell = "section[data-partition=debug] .nodemap-cells a[href='/ui/nodes/n2']"
    assert mapped.locator(cell).get_attribute("class") == "idle"
    assert node.locator("#node-condition").inner_text() == "idle"
    mapped.evaluate("window.__unloaded = true")  # gone if the page were reloaded
    try:
        sh("scontrol", "update", "nodename=n2", "state=DRAIN", "reason=left open")
        mapped.wait_for_selector(f"{cell}.drained", timeout=(MAP_LIVE_SECONDS + 6) * 1000)
        node.wait_for_selector("#node-condition:text('drained')", timeout=(NODE_LIVE_SECONDS + 6) * 1000)
        assert node.locator("#node-reason").inner_text() == "left open"
        assert "left open" in mapped.locator("section.nodemap-held").inner_text()
    finally:
        sh("scontrol", "update", "nodename=n2", "state=RESUME")
    mapped.wait_for_selector(f"{cell}.idle", timeout=(MAP_LIVE_SECONDS + 6) * 1000)
    assert mapped.evaluate("window.__unloaded === true")
    # Keyboard focus stays on the cell it was on across a swap.
    mapped.locator(cell).focus()
    mapped.evaluate("document.getElementById('nodemap-live').dataset.seen = 'old'")
    wait_js(mapped, "!document.getElementById('nodemap-live').dataset.seen", timeout=MAP_LIVE_SECONDS + 6)
    assert mapped.evaluate("document.activeElement.getAttribute('href')") == "/ui/nodes/n2"


def test_an_operator_drains_and_resumes_from_the_node_page(server: str, browser) -> None:  # type: ignore[no-untyped-def]
    page = page_as(browser, server, OPERATOR, "/ui/nodes/n1")
    assert page.locator("h2").first.inner_text().startswith("Node n1")
    assert page.locator("button.resume").count() == 0
    page.click("button.drain")
    page.wait_for_selector("dialog#confirm[open]")
    page.fill("#confirm-reason", "browser timeline")
    page.click("#confirm-ok")
    page.wait_for_selector("#action-result.ok", timeout=20_000)
    wait_for(lambda: "DRAIN" in node_states()["n1"], 10, what="n1 drained from its page")
    assert "browser timeline [slurmtower:otto@api]" in sh("scontrol", "show", "node", "n1")
    # The page swaps its node part in after the action: no reload needed.
    page.wait_for_selector("#node-condition:text('drained')", timeout=15_000)
    page.wait_for_selector("#timeline-table tr[data-to=drained]", timeout=15_000)
    assert page.locator("#node-reason").inner_text() == "browser timeline"
    assert "otto, through the API or dashboard" in page.locator("#node-owner").inner_text()
    assert page.locator("#timeline-ongoing").count() == 1
    page.wait_for_timeout(1500)
    page.click("button.resume")
    page.wait_for_selector("dialog#confirm[open]")
    page.click("#confirm-ok")
    wait_for(lambda: node_states()["n1"] == "IDLE", 30, what="n1 back in service")
    page.wait_for_selector("#timeline-outages tr:not([data-ongoing])[data-seconds]", timeout=20_000)
    assert page.locator("#timeline-repairs").get_attribute("data-count") == "1"
    rows = page.locator("#timeline-table tbody tr").count()
    assert rows >= 3 and page.locator("#timeline-table caption").count() == 1
    assert float(page.locator("#timeline-drained").get_attribute("data-seconds") or 0) >= 1.5
    assert page.locator(".timeline-bar[role=img]").get_attribute("aria-label")
    # Tab from the back link reaches the drain button, and its focus is visible (an outline).
    page.focus(".node-back a")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "node-drain"
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    shoot(page, "node")

    reader = page_as(browser, server, READER, "/ui/nodes/n1")
    assert reader.locator("button.act").count() == 0 and reader.locator("dialog#confirm").count() == 0
    assert reader.locator("#timeline-table tr[data-to=drained]").count() >= 1
    missing = page_as(browser, server, READER, "/ui/nodes/n99")
    assert "There is no node named 'n99'" in missing.locator("[role=alert]").inner_text()


def test_the_map_of_1000_nodes_loads_quickly_in_chromium(scale_cluster: DevCluster, browser,  # type: ignore[no-untyped-def]
                                                         tmp_path: Any) -> None:
    s = load_settings(scale_cluster.tower_conf, environ={})
    s.state_dir = tmp_path
    s.api.refresh_interval = 30
    expected = sinfo_groups(scale_sh(scale_cluster, "sinfo", "-h", "-N", "-o", "%N|%R|%T"))
    with running_server(create_app(with_tokens(s))) as url:
        page = page_as(browser, url, READER, "/ui/nodes")
        groups = shown_groups(page)
        assert {p: set(g) for p, g in groups.items()} == {p: set(g) for p, g in expected.items()}
        assert page.locator(".nodemap-cells a").count() == sum(len(g) for g in expected.values())
        times = []
        for _ in range(3):
            page.reload()
            wait_js(page, "performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
            times.append(page.evaluate("""() => { const n = performance.getEntriesByType('navigation')[0];
                                                  return n.loadEventEnd - n.startTime; }"""))
        best = sorted(times)[1]
        print(f"\n/ui/nodes at 1,000 nodes in Chromium: load {best:.0f} ms (runs {[round(t) for t in times]})")
        assert best < SCALE_LOAD_MS
        shoot(page, "nodes-1000")
