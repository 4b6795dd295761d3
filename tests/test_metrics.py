"""/metrics: a clean Prometheus scrape with cluster, event, rule-run, API and Slurm-call metrics."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import Router

from slurmtower import __version__
from slurmtower.api import create_app
from slurmtower.models.event import Event, RuleRun
from slurmtower.settings import Settings
from tests.auth_helpers import READER, bearer, with_tokens
from tests.conftest import sh, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, parsed by prometheus_client's own parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture()
def api(settings: Settings) -> Iterator[TestClient]:
    settings.api.refresh_interval = 0.5
    with TestClient(create_app(with_tokens(settings))) as client:
        yield client


def test_metrics_need_a_reader(api: TestClient) -> None:
    assert api.get("/metrics").status_code == 401


@pytest.mark.cluster
def test_scrape_has_cluster_api_and_slurm_call_metrics(api: TestClient, clean_nodes: object) -> None:
    api.get("/nodes", headers=bearer(READER))
    resp = api.get("/metrics", headers=bearer(READER))
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    got = samples(resp.text)
    assert sum(v for (n, _), v in got.items() if n == "slurmtower_nodes") == 4
    assert got[("slurmtower_nodes", (("state", "idle"),))] + got[("slurmtower_nodes", (("state", "mixed"),))] \
        + got[("slurmtower_nodes", (("state", "allocated"),))] == 4
    assert got[("slurmtower_cpus_configured", ())] == 8
    assert got[("slurmtower_cpus", (("state", "allocated"),))] + got[("slurmtower_cpus", (("state", "idle"),))] == 8
    assert got[("slurmtower_cluster_up", ())] == 1
    # The request just made to /nodes, labelled by route template.
    assert got[("slurmtower_http_requests_total", (("method", "GET"), ("route", "/nodes"), ("status", "200")))] >= 1
    assert got[("slurmtower_http_request_duration_seconds_count", (("method", "GET"), ("route", "/nodes")))] >= 1
    # slurmtower's own calls to Slurm, by kind, with their latency.
    calls = {dict(labels)["kind"]: v for (n, labels), v in got.items() if n == "slurmtower_slurm_calls_total"}
    assert calls and sum(calls.values()) >= 1
    durations = [v for (n, _), v in got.items() if n == "slurmtower_slurm_call_duration_seconds_sum"]
    assert durations and all(v > 0 for v in durations)


def test_scrape_names_the_process_that_answered(api: TestClient) -> None:
    got = samples(api.get("/metrics", headers=bearer(READER)).text)
    process = f"{socket.gethostname()}:{os.getpid()}"
    assert got[("slurmtower_process_info", (("process", process), ("version", __version__)))] == 1
    assert got[("slurmtower_worker_processes", ())] == 1
    # The leader elections as this process sees them: the archiver's at least (the app runs it).
    elections = api.app.state.services.elections
    assert "archiver" in elections
    for role, leader in elections.items():
        key = ("slurmtower_leader", (("identity", leader.identity), ("role", role)))
        assert got[key] == int(leader.is_leader)
    assert got[("slurmtower_leader", (("identity", elections["archiver"].identity), ("role", "archiver")))] == 1


@pytest.mark.cluster
def test_answers_of_the_cached_fast_path_are_counted(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path answers in front of the middleware: it counts and times its answers itself."""
    settings.api.refresh_interval = 120  # the views stay fresh: the fast path answers
    settings.archiver.archive_usage_load = False
    routed = []
    route = Router.__call__

    async def counting_route(router: Router, *args: object) -> None:
        routed.append(1)
        await route(router, *args)  # type: ignore[arg-type]

    key = ("slurmtower_http_requests_total", (("method", "GET"), ("route", "/nodes"), ("status", "200")))
    timed = ("slurmtower_http_request_duration_seconds_count", (("method", "GET"), ("route", "/nodes")))
    with TestClient(create_app(with_tokens(settings))) as client:
        assert client.get("/nodes", headers=bearer(READER)).status_code == 200  # renders the view
        before = samples(client.get("/metrics", headers=bearer(READER)).text)
        monkeypatch.setattr(Router, "__call__", counting_route)
        for _ in range(5):
            assert client.get("/nodes", headers=bearer(READER)).status_code == 200
        monkeypatch.undo()
        after = samples(client.get("/metrics", headers=bearer(READER)).text)
    assert routed == []  # none of the five was routed
    assert after[key] - before[key] == 5
    assert after[timed] - before[timed] == 5


@pytest.mark.cluster
def test_drain_shows_in_node_flags_and_cpu_split(api: TestClient, clean_nodes: object) -> None:
    sh("scontrol", "update", "nodename=n3", "state=DRAIN", "reason=metrics test")

    def drained() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        got = samples(api.get("/metrics", headers=bearer(READER)).text)
        return got if got[("slurmtower_node_flags", (("flag", "drain"),))] == 1 else None

    got = wait_for(drained, 10, step=0.5, what="the drain in /metrics")
    assert got[("slurmtower_cpus", (("state", "other"),))] == 2
    assert got[("slurmtower_cpus", (("state", "idle"),))] + got[("slurmtower_cpus", (("state", "allocated"),))] == 6


@pytest.mark.cluster
def test_jobs_events_and_rule_runs_are_counted(api: TestClient, clean_nodes: object) -> None:
    job = sh("sbatch", "--parsable", "--hold", "-p", "batch", "--wrap", "true").strip()
    try:
        store = api.app.state.services.event_store
        now = datetime.now(UTC)
        store.append([Event(type="slurm.node.state", time=now, source="poll", node="n1"),
                      Event(type="slurm.node.state", time=now, source="poll", node="n2"),
                      Event(type="slurmtower.security", time=now, source="security")])
        store.record_rule_run(RuleRun(rule="r", event_id=None, action_ref="core.noop", started_at=now,
                                      ended_at=now, outcome="failed"))

        def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            got = samples(api.get("/metrics", headers=bearer(READER)).text)
            key = ("slurmtower_jobs", (("partition", "batch"), ("state", "pending")))
            return got if got.get(key, 0) >= 1 else None

        got = wait_for(counted, 10, step=0.5, what="the pending job in /metrics")
        assert got[("slurmtower_events", (("type", "slurm.node.state"),))] >= 2
        assert got[("slurmtower_events", (("type", "slurmtower.security"),))] >= 1
        assert got[("slurmtower_rule_runs", (("outcome", "failed"),))] == 1
        assert got[("slurmtower_rule_runs", (("outcome", "succeeded"),))] == 0
    finally:
        sh("scancel", job, check=False)


@pytest.mark.cluster
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (scripts/test.sh fetches it)")
def test_promtool_accepts_the_scrape(api: TestClient, clean_nodes: object) -> None:
    api.get("/nodes", headers=bearer(READER))
    text = api.get("/metrics", headers=bearer(READER)).text
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.cluster
def test_grafana_dashboard_uses_only_exported_metrics(api: TestClient, clean_nodes: object) -> None:
    import json
    import re
    from pathlib import Path

    api.get("/nodes", headers=bearer(READER))
    text = api.get("/metrics", headers=bearer(READER)).text
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    dashboard = json.loads((Path(__file__).parent.parent / "docs" / "grafana-dashboard.json").read_text())
    used = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"slurmtower_\w+", t["expr"])}
    assert len(used) >= 10
    assert used <= exported, used - exported
