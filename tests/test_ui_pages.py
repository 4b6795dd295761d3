"""The overview (/ui), /ui/partitions and /ui/reservations as HTML, checked against Slurm's own
commands (sinfo, squeue, scontrol) on the devcluster; roles and hidden partitions applied."""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape

import httpx
import pytest

from slurmtower.api import create_app
from slurmtower.settings import Settings
from tests.auth_helpers import READER, bearer, running_server, with_tokens
from tests.conftest import sh, wait_for

pytestmark = pytest.mark.cluster

RESV = "st_ui_resv"


@pytest.fixture()
def ui(settings: Settings, clean_nodes: object) -> Iterator[httpx.Client]:
    settings.api.refresh_interval = 0.5
    settings.events.poll_interval = 0.5
    with running_server(create_app(with_tokens(settings, sensor=True))) as url, \
            httpx.Client(base_url=url, headers=bearer(READER), timeout=30) as http:
        yield http


def rows(html: str, attr: str) -> dict[str, str]:
    """``<tr data-<attr>="x">...</tr>`` -> {x: the row's text}."""
    found = {}
    for m in re.finditer(rf'<tr[^>]*data-{attr}="([^"]+)"[^>]*>(.*?)</tr>', html, re.S):
        found[unescape(m[1])] = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", m[2]))).strip()
    return found


def cells(html: str, attr: str, css: str) -> dict[str, str]:
    """The ``<td class="... css ...">`` of each ``data-<attr>`` row, as text."""
    found = {}
    for m in re.finditer(rf'<tr[^>]*data-{attr}="([^"]+)"[^>]*>(.*?)</tr>', html, re.S):
        cell = re.search(rf'<td class="[^"]*\b{css}\b[^"]*">(.*?)</td>', m[2], re.S)
        if cell:
            found[unescape(m[1])] = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", cell[1]))).strip()
    return found


def sinfo_cpus() -> dict[str, str]:
    """``sinfo -o "%R %C"``: partition -> allocated/idle/other/total CPUs."""
    return dict(line.split() for line in sh("sinfo", "-h", "-o", "%R %C").splitlines() if line.strip())


def fresh(http: httpx.Client, path: str, check) -> str:  # type: ignore[no-untyped-def]
    """The page once ``check(html)`` holds (the snapshot follows Slurm within an interval)."""
    return str(wait_for(lambda: (lambda h: h if check(h) else None)(http.get(path).text), 15,
                        what=f"{path} to show the change"))


def test_partitions_page_counts_cpus_as_sinfo_does(ui: httpx.Client) -> None:
    page = ui.get("/ui/partitions")
    assert page.status_code == 200 and '<h2 class="page-title">Partitions</h2>' in page.text
    assert set(rows(page.text, "partition")) == set(sinfo_cpus())
    assert cells(page.text, "partition", "cpus") == sinfo_cpus()
    assert "(default)" in rows(page.text, "partition")["debug"]
    assert cells(page.text, "partition", "maxtime")["batch"] == "1:00:00"
    assert cells(page.text, "partition", "maxtime")["debug"] == "UNLIMITED"
    # A drained node's free CPUs become "other", as sinfo counts them.
    sh("scontrol", "update", "nodename=n3", "state=DRAIN", "reason=ui partitions test")
    html = fresh(ui, "/ui/partitions", lambda h: cells(h, "partition", "cpus").get("short", "").endswith("/2/4"))
    assert cells(html, "partition", "cpus") == sinfo_cpus()
    assert "drained" in rows(html, "partition")["short"]


def test_overview_counts_jobs_and_cpus_and_shows_elapsed_time(ui: httpx.Client) -> None:
    job = int(sh("sbatch", "--parsable", "-J", "st-ui-run", "-o", "/dev/null", "-D", "/tmp", "-t", "10", "-p", "batch",
                 "--wrap", "sleep 120").split(";")[0])
    held = int(sh("sbatch", "--parsable", "-J", "st-ui-held", "-o", "/dev/null", "-D", "/tmp", "--hold",
                  "--wrap", "true").split(";")[0])
    try:
        wait_for(lambda: sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING", 30, what="the job to run")
        time.sleep(2.5)
        html = fresh(ui, "/ui", lambda h: f'data-job="{job}"' in h and f'data-job="{held}"' in h
                     and re.search(rf'data-job="{job}".*?class="elapsed">\d', h, re.S))
        states = Counter(sh("squeue", "-h", "-t", "all", "-o", "%T").split())
        shown = {s: int(n) for s, n in re.findall(r'data-job-state="([A-Z_]+)">(\d+)<', html)}
        assert shown == dict(states)
        # CPUs allocated over the total, as slurmctld counts them node by node
        nodes = [dict(f.split("=", 1) for f in line.split() if "=" in f)
                 for line in sh("scontrol", "-o", "show", "node").splitlines()]
        used, total = sum(int(n["CPUAlloc"]) for n in nodes), sum(int(n["CPUTot"]) for n in nodes)
        assert re.search(rf'data-resource="CPUs">{used} / {total} ', html), re.findall(r'data-resource="CPUs">[^<]*', html)
        assert 'data-resource="GPUs"' not in html and "none on this cluster" in html  # the devcluster has none
        assert sorted(rows(html, "partition")) == sorted(sinfo_cpus())
        # elapsed: squeue's %M a moment ago, within the refresh interval; time left: limit minus it
        row = re.search(rf'data-job="{job}".*?class="elapsed">([^<]*)</td><td class="left">([^<]*)<', html, re.S)
        assert row is not None
        squeue_elapsed = sh("squeue", "-h", "-j", str(job), "-o", "%M").strip()

        def secs(text: str) -> int:
            parts = [int(p) for p in text.split(":")]
            return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))

        assert abs(secs(row[1]) - secs(squeue_elapsed)) <= 3, (row[1], squeue_elapsed)
        assert abs(secs(row[1]) + secs(row[2]) - 600) <= 3
        held_row = rows(html, "job")[str(held)]
        assert "PENDING" in held_row and "JobHeldUser" in held_row
    finally:
        subprocess.run(["scancel", str(job), str(held)], check=False, capture_output=True)


def test_overview_lists_the_last_events_of_the_store_when_it_opens(ui: httpx.Client) -> None:
    sh("scontrol", "update", "nodename=n4", "state=DRAIN", "reason=ui events test")
    # recorded by the sensor (trigger or poll), then on the page as it is served: no script needed
    # (the sensor's first poll may have recorded n4's state as it found it, "? -> IDLE", first)
    def texts(h: str) -> list[str]:
        lines = re.findall(r'data-node="n4" data-type="slurm.node.state"[^>]*>(.*?)</li>', h, re.S)
        return [re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", line))) for line in lines]

    html = fresh(ui, "/ui", lambda h: any("ui events test" in t for t in texts(h)))
    (text,) = [t for t in texts(html) if "ui events test" in t]
    assert "\u2192 IDLE+DRAIN (ui events test, user:root)" in text
    events = ui.get("/events", params={"node": "n4", "type": "slurm.node.state"}).json()
    assert events and events[-1]["payload"]["reason"] == "ui events test"


def test_reservations_page_shows_what_scontrol_holds(ui: httpx.Client) -> None:
    start = (datetime.now(UTC) + timedelta(hours=1)).astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    sh("scontrol", "create", "reservation", f"reservationname={RESV}", "nodes=n3", f"starttime={start}",
       "duration=30", "users=root", "flags=MAINT")
    try:
        html = ui.get("/ui/reservations").text
        row = rows(html, "reservation")[RESV]
        shown = sh("scontrol", "-o", "show", "reservation", RESV)
        fields = dict(f.split("=", 1) for f in shown.split() if "=" in f)
        assert "INACTIVE" in row and ("starts in 59:" in row or "starts in 1:00:" in row), row
        assert cells(html, "reservation", "rnodes")[RESV].startswith(fields["Nodes"])
        assert cells(html, "reservation", "rflags")[RESV] == fields["Flags"]
        assert " 30:00 " in row and "root" in row
    finally:
        sh("scontrol", "delete", f"reservationname={RESV}", check=False)
    assert RESV not in rows(ui.get("/ui/reservations").text, "reservation")


def test_hidden_partitions_are_left_out_of_every_page(settings: Settings) -> None:
    settings.api.hidden_partitions = ["short"]
    with running_server(create_app(with_tokens(settings))) as url, \
            httpx.Client(base_url=url, headers=bearer(READER), timeout=30) as http:
        assert "short" not in rows(http.get("/ui/partitions").text, "partition")
        assert set(rows(http.get("/ui/partitions").text, "partition")) == {"debug", "batch"}
        assert "short" not in rows(http.get("/ui").text, "partition")


def test_pages_need_a_login(ui: httpx.Client) -> None:
    for path in ("/ui/partitions", "/ui/reservations"):
        anonymous = httpx.get(f"{ui.base_url}{path}", headers={"Accept": "text/html"})
        assert anonymous.status_code == 401 and 'href="/ui/login"' in anonymous.text
