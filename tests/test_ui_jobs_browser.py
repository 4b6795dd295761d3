"""/ui/jobs, /ui/jobs/{id} and /ui/history in Debian's Chromium: what a person sees and does
(filter with the form, sort by a header, page, open a job, read its efficiency, filter the
history), checked against squeue and sacct, with and without JavaScript; a screenshot of each
page (jobs.png, job.png, history.png)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.settings import load_settings
from tests.auth_helpers import OPERATOR, READER, running_server, with_tokens
from tests.conftest import sh, wait_for
from tests.ui_browser import browser, page_as, shoot

pytestmark = [pytest.mark.browser, pytest.mark.cluster]

__all__ = ["browser"]  # the fixture, imported from tests.ui_browser


def _sbatch(user: str, *args: str) -> int:
    argv = ["sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args]
    if user != "root":
        argv = ["runuser", "-u", user, "--", *argv]
    return int(sh(*argv).strip().split(";")[0])


@pytest.fixture(scope="module")
def jobs(devcluster: DevCluster) -> Iterator[dict[str, int]]:
    """A finished job with steps (sampled each second, so its MaxRSS is recorded), running and
    held jobs of alice and bob."""
    out = {
        "done": _sbatch("alice", "-J", "uib-done", "-A", "physics", "-t", "5", "--mem=300M", "--acctg-freq=task=1",
                        "--wrap", "python3 -c \"import time; b=bytearray(120*2**20); t=time.time()\n"
                                  "while time.time()-t<2: pass\"; srun -n1 sleep 1"),
        "run_a": _sbatch("alice", "-J", "uib-run-a", "-A", "physics", "-p", "debug", "-t", "20", "--wrap", "sleep 600"),
        "run_b": _sbatch("bob", "-J", "uib-run-b", "-A", "chemistry", "-p", "batch", "-t", "8", "--wrap", "sleep 600"),
        **{f"held{i}": _sbatch("alice" if i % 2 else "bob", "-J", f"uib-held-{i}", "-A", "physics", "-t", "3",
                               "--hold", "--wrap", "true") for i in range(6)},
    }
    for key in ("run_a", "run_b"):
        wait_for(lambda k=key: sh("squeue", "-h", "-j", str(out[k]), "-o", "%T").strip() == "RUNNING", 60,
                 what=f"{key} to run")
    wait_for(lambda: "COMPLETED|" in sh("sacct", "-n", "-P", "-X", "-o", "State,End", "-j", str(out["done"])) and
             len(sh("sacct", "-n", "-P", "-o", "JobID", "-j", str(out["done"])).split()) == 3, 60, 0.5,
             what="the finished job in accounting")
    yield out
    subprocess.run(["scancel", *map(str, out.values())], capture_output=True, check=False)


@pytest.fixture(scope="module")
def server(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory, jobs: dict[str, int]) -> Iterator[str]:
    settings = with_tokens(load_settings(devcluster.tower_conf, environ={}))
    settings.state_dir = tmp_path_factory.mktemp("ui-jobs-browser")
    settings.api.refresh_interval = 0.5
    with running_server(create_app(settings)) as url:
        yield url


def _ids(page: Any) -> list[int]:
    return [int(x) for x in page.locator("table.jobs-table tbody tr[data-job]").evaluate_all(
        "rows => rows.map(r => r.dataset.job)")]


def _squeue_ids(*args: str) -> list[int]:
    return sorted(int(x) for x in sh("squeue", "-h", *args, "-o", "%i").split())


def _unlabelled(page: Any) -> list[str]:
    """Inputs and selects without a label (by id), as a screen reader would find them."""
    return list(page.evaluate("""() => [...document.querySelectorAll('main input, main select')]
        .filter(e => e.type !== 'hidden' && !(e.labels && e.labels.length)).map(e => e.name)"""))


def test_jobs_page_filters_sorts_pages_and_opens_a_job(server: str, browser: Any, jobs: dict[str, int]) -> None:
    page = page_as(browser, server, READER, "/ui/jobs?state=PD,R")
    assert page.locator("h2").first.inner_text() == "Jobs"
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Jobs"
    assert _ids(page) == _squeue_ids("-t", "PD,R")
    assert _unlabelled(page) == []
    row = page.locator(f'tr[data-job="{jobs["run_a"]}"]')
    elapsed = row.locator('td[data-col="elapsed"]').inner_text()
    used = sh("squeue", "-h", "-j", str(jobs["run_a"]), "-o", "%M").strip()
    assert abs(_seconds(elapsed) - _seconds(used)) <= 3
    held = page.locator(f'tr[data-job="{jobs["held0"]}"] td[data-col="reason"]').inner_text()
    assert held == sh("squeue", "-h", "-j", str(jobs["held0"]), "-o", "%r").strip() == "JobHeldUser"

    # The filter form: alice's jobs, as squeue -u alice lists them.
    page.fill("#jobs-user", "alice")
    page.click(".jobs-filters button[type=submit]")
    page.wait_for_url("**/ui/jobs?*user=alice*")
    assert _ids(page) == _squeue_ids("-t", "PD,R", "-u", "alice")
    assert page.locator("#jobs-user").input_value() == "alice"

    # A column header sorts; clicking it again reverses.
    page.click("th >> text=Name")
    names = page.locator('td[data-col="name"]').all_inner_texts()
    assert names == sorted(names)
    assert page.locator('th[aria-sort="ascending"]').inner_text().startswith("Name")
    page.click("th >> text=Name")
    assert page.locator('td[data-col="name"]').all_inner_texts() == sorted(names, reverse=True)

    # Pages of 2: next, then previous.
    page.goto(f"{server}/ui/jobs?state=PD,R&limit=2")
    first = _ids(page)
    page.click("a[rel=next]")
    second = _ids(page)
    assert len(first) == len(second) == 2 and first[-1] < second[0]
    page.click("a[rel=prev]")
    assert _ids(page) == first
    page.goto(f"{server}/ui/jobs?state=PD,R")
    shoot(page, "jobs")

    # A bad filter: the message, the page again, the field marked.
    page.goto(f"{server}/ui/jobs?state=NOPE")
    assert "is not a known state" in page.locator("[role=alert]").inner_text()
    assert page.locator("#jobs-state").get_attribute("aria-invalid") == "true"

    # Opening a job from the list.
    page.goto(f"{server}/ui/jobs?q=uib-run-b")
    page.click(f'tr[data-job="{jobs["run_b"]}"] td[data-col="id"] a')
    page.wait_for_url(f"**/ui/jobs/{jobs['run_b']}")
    assert page.locator('section[aria-labelledby="job-live"] dd[data-field="nodes"]').inner_text() == \
        sh("squeue", "-h", "-j", str(jobs["run_b"]), "-o", "%N").strip()
    assert page.locator('dd[data-field="work dir"]').inner_text().startswith("private")  # rita reads bob's job


def _seconds(text: str) -> int:
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def test_finished_job_page_shows_runs_steps_and_efficiency(server: str, browser: Any, jobs: dict[str, int]) -> None:
    job = jobs["done"]
    page = page_as(browser, server, OPERATOR, f"/ui/jobs/{job}")
    assert page.locator("h2").first.inner_text().startswith(f"Job {job}")
    run = page.locator('article[data-run="1"]')
    assert run.locator('[data-field="run state"]').inner_text() == "COMPLETED"
    steps = run.locator("table.jobs-steps tbody tr").evaluate_all("rows => rows.map(r => r.dataset.step)")
    want = [line.split(".", 1)[1] for line in sh("sacct", "-n", "-P", "-o", "JobID", "-j", str(job)).split()
            if "." in line]
    assert sorted(steps) == sorted(want)
    cpu = run.locator('dd[data-field="cpu efficiency"]').inner_text()
    mem = run.locator('dd[data-field="memory efficiency"]').inner_text()
    assert "%" in cpu and "CPU time over" in cpu and "max RSS of 300 MiB" in mem
    assert page.locator('dd[data-field="work dir"]').inner_text() == "/tmp"  # an operator sees it
    node = run.locator('dd[data-field="nodes"] a').first
    assert node.get_attribute("href") == f"/ui/nodes/{node.inner_text()}"
    shoot(page, "job")


def test_history_form_filters_and_pages_like_sacct(server: str, browser: Any, jobs: dict[str, int]) -> None:
    lo, hi = min(jobs.values()), max(jobs.values())
    page = page_as(browser, server, READER, "/ui/history")
    assert _unlabelled(page) == []
    page.fill("#history-jobid_from", str(lo))
    page.fill("#history-jobid_to", str(hi))
    page.select_option("#history-state", "COMPLETED")
    page.click(".jobs-filters button[type=submit]")
    page.wait_for_url("**/ui/history?*")
    want = sorted((int(x.split("|")[0]) for x in sh("sacct", "-a", "-X", "-D", "-n", "-P", "-s", "CD", "-o",
                                                    "JobIDRaw,State", "-j", ",".join(map(str, range(lo, hi + 1))))
                   .split() if x.endswith("|COMPLETED")), reverse=True)
    assert _ids(page) == want == [jobs["done"]]
    page.goto(f"{server}/ui/history?jobid_from={lo}&jobid_to={hi}&limit=3")
    first = _ids(page)
    assert first == sorted(first, reverse=True) and len(first) == 3
    page.click("a[rel=next]")
    assert _ids(page)[0] < first[-1]
    page.goto(f"{server}/ui/history?jobid_from={lo}&jobid_to={hi}")
    shoot(page, "history")
    page.goto(f"{server}/ui/history?submitted_after=yesterday")
    assert "submitted_after" in page.locator("[role=alert]").inner_text()
    assert page.locator("#history-submitted_after").get_attribute("aria-invalid") == "true"


def test_pages_read_without_javascript(server: str, browser: Any, jobs: dict[str, int]) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{server}/ui/login")  # the login form posts without a script too
    page.fill("#token", READER)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server}/ui")
    page.goto(f"{server}/ui/jobs")
    page.fill("#jobs-user", "bob")
    page.fill("#jobs-state", "R")
    page.click(".jobs-filters button[type=submit]")
    assert _ids(page) == _squeue_ids("-t", "R", "-u", "bob")
    page.click(f'tr[data-job="{jobs["run_b"]}"] td[data-col="id"] a')
    assert page.locator("#job-state").inner_text() == "RUNNING"
    page.goto(f"{server}/ui/history?user=alice&limit=5")
    assert len(_ids(page)) == 5 and set(page.locator('td[data-col="user"]').all_inner_texts()) == {"alice"}
    context.close()

