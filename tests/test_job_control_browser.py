"""Job control in the dashboard, in Debian's Chromium: a job's buttons and the jobs list's
"act on this filter", each reviewed by a dry run listed in the confirmation before acting;
readers see no button, a user only on their own jobs. Checked against squeue."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.settings import TokenEntry, load_settings
from tests.auth_helpers import OPERATOR, READER, running_server, with_tokens
from tests.conftest import sh, submit, wait_for
from tests.ui_browser import browser, page_as, shoot, wait_js

pytestmark = [pytest.mark.browser, pytest.mark.cluster]

__all__ = ["browser"]  # the fixture, imported from tests.ui_browser

ALICE = "stw_test_user_alice_token"


def _state(job: int) -> str:
    return sh("squeue", "-h", "-j", str(job), "-o", "%T %r", check=False).strip()


@pytest.fixture(scope="module")
def jobs(devcluster: DevCluster) -> Iterator[dict[str, int]]:
    later = ("--begin=now+1hour", "-J", "uic-job", "--wrap", "sleep 300")
    out = {"alice": submit("alice", *later), "alice2": submit("alice", *later),
           "bob": submit("bob", "-p", "batch", *later), "bob2": submit("bob", "-p", "batch", *later)}
    yield out
    subprocess.run(["scancel", *map(str, out.values())], capture_output=True, check=False)


@pytest.fixture(scope="module")
def server(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory, jobs: dict[str, int]) -> Iterator[str]:
    settings = with_tokens(load_settings(devcluster.tower_conf, environ={}))
    settings.auth.tokens.append(TokenEntry(name="alice", role="user", sha256=hash_token(ALICE)))
    settings.state_dir = tmp_path_factory.mktemp("ui-job-control")
    settings.api.refresh_interval = 0.5
    with running_server(create_app(settings)) as url:
        yield url


def _review(page: Any, button: str) -> list[str]:
    """Click ``button``, wait for the confirmation, and return the dry run's list."""
    page.click(button)
    page.wait_for_selector("dialog#confirm[open]")
    return page.locator("#confirm-jobs li").all_inner_texts()


def test_a_reader_sees_no_job_button(browser: Any, server: str, jobs: dict[str, int]) -> None:
    reader = page_as(browser, server, READER, f"/ui/jobs/{jobs['alice']}")
    assert reader.locator(".job-actions").count() == 0 and reader.locator("dialog#confirm").count() == 0
    reader.goto(f"{server}/ui/jobs?user=alice")
    assert reader.locator("#jobs-act").count() == 0


def test_an_operator_holds_a_job_after_reviewing_it(browser: Any, server: str, jobs: dict[str, int]) -> None:
    job = jobs["alice"]
    operator = page_as(browser, server, OPERATOR, f"/ui/jobs/{job}")
    listed = _review(operator, "#job-hold")
    assert listed == [f"{job} (alice, PENDING): hold"]
    assert operator.inner_text("#confirm-title") == "Hold 1 of 1 job?"
    operator.click("#confirm-cancel")  # cancelling the confirmation changes nothing
    assert "JobHeld" not in _state(job)
    _review(operator, "#job-hold")
    shoot(operator, "job-control")
    operator.click("#confirm-ok")
    wait_js(operator, "document.getElementById('action-result').className === 'ok'")
    assert "1 held" in operator.inner_text("#action-result")
    assert _state(job) == "PENDING JobHeldAdmin"
    operator.reload()
    _review(operator, "#job-release")
    operator.click("#confirm-ok")
    wait_js(operator, "document.getElementById('action-result').className === 'ok'")
    wait_for(lambda: "JobHeld" not in _state(job), 10, what="released from the dashboard")


def test_the_jobs_list_acts_on_its_filter_listing_what_squeue_lists(browser: Any, server: str,
                                                                    jobs: dict[str, int]) -> None:
    operator = page_as(browser, server, OPERATOR, "/ui/jobs?user=bob&state=PD")
    operator.select_option("#jobs-act-action", "slurm.job.hold")
    listed = _review(operator, "#jobs-act-go")
    expected = sorted(sh("squeue", "-h", "-u", "bob", "-t", "PD", "-o", "%i").split())
    assert sorted(t.split(" ")[0] for t in listed) == expected and len(expected) == 2
    operator.click("#confirm-ok")
    wait_js(operator, "document.getElementById('action-result').className === 'ok'")
    assert all(_state(int(j)) == "PENDING JobHeldAdmin" for j in expected)
    assert "JobHeld" not in _state(jobs["alice2"])
    # no filter: the button says to filter first
    operator.goto(f"{server}/ui/jobs")
    assert operator.locator("#jobs-act-go").is_disabled()


def test_a_user_acts_on_their_own_jobs_only(browser: Any, server: str, jobs: dict[str, int]) -> None:
    alice = page_as(browser, server, ALICE, f"/ui/jobs/{jobs['bob']}")
    assert alice.locator(".job-actions").count() == 0  # bob's job: no button
    alice.goto(f"{server}/ui/jobs/{jobs['alice2']}")
    assert _review(alice, "#job-cancel") == [f"{jobs['alice2']} (alice, PENDING): cancel"]
    alice.click("#confirm-ok")
    wait_js(alice, "document.getElementById('action-result').className === 'ok'")
    wait_for(lambda: not _state(jobs["alice2"]).startswith("PENDING"), 10, what="cancelled by its owner")
    # her filter form acts on her jobs only, even with bob's named: the API refuses, the page says so
    alice.goto(f"{server}/ui/jobs?user=bob")
    alice.select_option("#jobs-act-action", "slurm.job.cancel")
    alice.click("#jobs-act-go")
    wait_js(alice, "document.getElementById('action-result').className === 'error'")
    assert "own jobs" in alice.inner_text("#action-result") and _state(jobs["bob2"]).startswith("PENDING")
