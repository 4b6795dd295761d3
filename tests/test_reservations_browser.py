"""The reservation calendar and the requests page in Debian's Chromium: an operator sees every
reservation on the timeline, checks a window (its conflict named before anything is
submitted) and reserves a free one; a user asks for one (a request drawn apart, counted in the
navigation), and an operator approves it from /ui/requests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.settings import Settings, TokenEntry
from tests.auth_helpers import OPERATOR, module_app_settings, running_server
from tests.conftest import sh, wait_for
from tests.test_reservations import clear_reservations, reservations
from tests.ui_browser import browser, page_as, shoot, wait_js  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.cluster

ALICE = "stw_test_alice_browser_user"


@pytest.fixture(scope="module")
def tower(cluster_settings: Settings, tmp_path_factory: pytest.TempPathFactory,
          devcluster: DevCluster) -> Iterator[str]:
    settings = module_app_settings(cluster_settings, tmp_path_factory.mktemp("calendar"))
    settings.auth.tokens += [TokenEntry(name="alice", role="user", sha256=hash_token(ALICE))]
    clear_reservations()
    with running_server(create_app(settings)) as url:
        yield url
    clear_reservations()


def local(hours: float) -> str:
    """What a datetime-local field holds ``hours`` from now (the browser's zone is this host's)."""
    return (datetime.now().astimezone() + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M")


def test_the_calendar_checks_reserves_and_a_users_request_is_approved(tower: str, browser: Any) -> None:  # noqa: F811
    start = (datetime.now(UTC) + timedelta(hours=2)).astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    sh("scontrol", "create", "reservation", "reservationname=st_cal", "nodes=n[1-2]", f"starttime={start}",
       "duration=180", "users=root", "flags=MAINT")
    otto = page_as(browser, tower, OPERATOR, "/ui/reservations")
    assert otto.locator('nav a[aria-current="page"]').inner_text() == "Reservations"
    # the maintenance window on its partitions' and nodes' lanes, and in the table
    for lane in ("partition:debug", "partition:batch", "node:n1", "node:n2"):
        assert otto.locator(f'[data-lane="{lane}"] .bar.maint[data-bar="st_cal"]').count() == 1, lane
    assert otto.locator('[data-lane="node:n3"]').count() == 0
    assert "INACTIVE" in otto.locator('tr[data-reservation="st_cal"]').inner_text()
    # a window on n1 that overlaps it: the check names the conflict, nothing is made
    otto.fill("#r-nodes", "n1")
    otto.fill("#r-start", local(2.5))
    otto.fill("#r-users", "bob")
    otto.click("#reserve-check")
    otto.wait_for_selector('#reserve-conflicts li[data-kind="overlap"]')
    assert "st_cal" in otto.locator("#reserve-conflicts").inner_text()
    assert set(reservations()) == {"st_cal"}
    shoot(otto, "reservations-conflict")
    # a free window: no conflict, then reserved
    otto.fill("#r-start", local(30))
    otto.fill("#r-name", "st_free")
    otto.click("#reserve-check")
    wait_js(otto, "document.getElementById('reserve-result').textContent.startsWith('No conflict')")
    assert otto.locator("#reserve-conflicts").is_hidden()
    otto.click("#reserve-submit")
    wait_js(otto, "document.getElementById('reserve-result').textContent.startsWith('Created st_free')")
    wait_for(lambda: "st_free" in reservations(), 10, what="st_free in Slurm")
    assert reservations()["st_free"]["Users"] == "bob"
    otto.wait_for_selector('tr[data-reservation="st_free"]')  # the page reloads
    assert otto.locator('tr[data-reservation="st_free"] td.rowner').inner_text() == "slurmtower:otto@api"

    # alice asks: a request, drawn apart, counted beside "Requests"
    alice = page_as(browser, tower, ALICE, "/ui/reservations")
    assert alice.locator("#reserve-submit").inner_text() == "Ask for it"
    assert alice.locator("#r-users").input_value() == "alice"
    alice.fill("#r-nodes", "n3")
    alice.fill("#r-start", local(40))
    alice.fill("#r-comment", "thesis runs")
    alice.click("#reserve-submit")
    wait_js(alice, "document.getElementById('reserve-result').textContent.startsWith('Requested: request')")
    request_id = alice.locator("#reserve-result").inner_text().split()[2]
    alice.wait_for_selector(f'[data-lane^="request:"] .bar.req[data-request="{request_id}"]')
    assert not any(n.startswith("alice_") for n in reservations())
    wait_js(alice, "document.getElementById('nav-requests-count').textContent === '1'")
    shoot(alice, "reservations-request")

    # otto approves it from /ui/requests
    otto.goto(f"{tower}/ui/requests")
    wait_js(otto, "!document.getElementById('nav-requests-count').hidden")
    row = otto.locator(f'tr[data-request="{request_id}"]')
    assert row.locator("td.qwho").inner_text().startswith("alice user via api")
    assert "on n3 for alice" in row.locator("td.qwhat").inner_text()
    assert row.locator("td.qwhat .qcomment").inner_text() == "thesis runs"
    shoot(otto, "requests")
    otto.once("dialog", lambda dialog: dialog.accept("fine"))
    row.locator('button[data-verb="approve"]').click()
    wait_js(otto, f"document.getElementById('request-result').textContent === 'request {request_id}: approved'")
    made = [n for n in reservations() if n.startswith("alice_")]
    assert len(made) == 1 and reservations()[made[0]]["Users"] == "alice"
    otto.goto(f"{tower}/ui/requests?state=approved")
    assert "otto: fine" in otto.locator(f'tr[data-request="{request_id}"] td.qdecision').inner_text()
    # the requester's page has no decision buttons, only its own rows
    alice.goto(f"{tower}/ui/requests?state=all")
    assert alice.locator("button.decide").count() == 0
    assert alice.locator(f'tr[data-request="{request_id}"]').count() == 1

