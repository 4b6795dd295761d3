"""/load and the load archiver: one archiver per deployment, back-off, retention, the window;
``slurmtower serve --workers 2`` end to end; ``config show`` masks secrets."""

from __future__ import annotations

import itertools
import socket
import subprocess
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.live.archive import LoadArchive, LoadSample
from slurmtower.live.cache import SnapshotCache
from slurmtower.settings import Settings
from slurmtower.store.engine import make_store_engine

from .api_server import running
from .conftest import wait_for
from .sensor_helpers import SLURMTOWER, serve_env
from .serve_helpers import ServeProcess

pytestmark = pytest.mark.cluster



def archiving(settings: Settings, wait: float) -> Settings:
    settings.auth.anonymous_read = True
    settings.events.sensor_enabled = False
    settings.archiver.archive_usage_load = True
    settings.archiver.archive_wait_time = wait
    settings.api.leader_interval = 0.3  # the archiver role passes on within a round of elections
    return settings


def sample_at(ts: float, holder: str = "test") -> LoadSample:
    return LoadSample(time=datetime.fromtimestamp(ts, UTC), timestamp=ts, cpus_total=8, cpus_used=1,
                      memory_total_mib=8000, memory_used_mib=100, jobs_running=1, jobs_pending=0,
                      nodes_total=4, nodes_by_state={"IDLE": 4}, partitions={}, archiver=holder)


def test_two_workers_sharing_a_store_run_one_archiver(settings: Settings) -> None:
    first = archiving(settings, 0.5)
    second = first.model_copy(deep=True)
    with running(create_app(first)) as a, running(create_app(second)) as b:
        time.sleep(3.2)
        samples = a.get("/load?time=30").json()["samples"]
        seen_by_b = b.get("/load?time=30").json()["samples"]
        assert seen_by_b[:len(samples)] == samples  # one store: both see the same samples
    holders = {s["archiver"] for s in samples}
    assert len(holders) == 1
    # one sample per 0.5 s from one archiver: about 7, never the ~14 of two
    assert 3 <= len(samples) <= 9  # (the first waits for the cold refresh worker)
    gaps = [b["timestamp"] - a["timestamp"] for a, b in itertools.pairwise(samples)]
    assert min(gaps) > 0.3


def test_the_lease_passes_on_when_the_archiver_stops(settings: Settings) -> None:
    first = archiving(settings, 0.3)
    second = first.model_copy(deep=True)
    with ExitStack() as stack_a:
        a = stack_a.enter_context(running(create_app(first)))
        wait_for(lambda: a.get("/load?time=60").json()["count"] >= 1, 10, what="a first sample")
        with running(create_app(second)) as b:
            time.sleep(1.0)
            early = {s["archiver"] for s in b.get("/load?time=60").json()["samples"]}
            stack_a.close()  # the first worker stops and releases the lease
            time.sleep(1.5)
            late = b.get("/load?time=60").json()["samples"]
    assert len(early) == 1  # only the first worker sampled while it ran
    assert {s["archiver"] for s in late} - early  # then the second took over


def test_samples_agree_with_the_usage_route(settings: Settings) -> None:
    with running(create_app(archiving(settings, 0.5))) as http:
        wait_for(lambda: http.get("/load?time=30").json()["count"] >= 1, 10, what="a sample")
        sample = http.get("/load?time=30").json()["samples"][-1]
        usage = http.get("/usage").json()
    assert sample["cpus_total"] == usage["totals"]["cpus_total"] == 8
    assert sample["nodes_total"] == 4 and sum(sample["nodes_by_state"].values()) == 4
    assert set(sample["partitions"]) == set(usage["partitions"])


def test_failing_rounds_back_off_instead_of_spinning(settings: Settings, tmp_path: Path) -> None:
    # A real failure: Slurm's commands are pointed at an empty config file (they exit at once;
    # a missing one makes them look for slurmctld in DNS first, for up to a minute).
    settings.slurm.slurm_conf = tmp_path / "empty-slurm.conf"
    settings.slurm.slurm_conf.write_text("")
    app = create_app(archiving(settings, 0.05))
    cache: SnapshotCache = app.state.services.snapshots
    with running(app) as http:
        time.sleep(4)
        assert http.get("/load?time=60").json()["count"] == 0
    # rounds at 0 s, 2 s (back-off 2 s), then 4 s later: never the ~80 of a 0.05 s loop
    assert 1 <= cache.queries["nodes"] <= 3


def test_retention_drops_old_samples(settings: Settings) -> None:
    settings.archiver.retention_days = 1
    archive = LoadArchive(engine=make_store_engine(settings.effective_store_url()))
    now = time.time()
    archive.add(sample_at(now - 3 * 86400), retention_seconds=10 * 86400)
    archive.add(sample_at(now - 3600), retention_seconds=10 * 86400)
    assert len(archive.window(0, now)) == 2
    archive.add(sample_at(now), retention_seconds=settings.archiver.retention_days * 86400)
    assert [round(s.timestamp) for s in archive.window(0, now)] == [round(now - 3600), round(now)]


def test_load_time_and_offset_select_the_window(settings: Settings) -> None:
    settings.archiver.archive_wait_time = 60
    now = time.time()
    archive = LoadArchive(engine=make_store_engine(settings.effective_store_url()))
    for age in (30, 150, 200, 400):
        archive.add(sample_at(now - age), retention_seconds=10 * 86400)
    with running(create_app(archiving(settings, 60))) as http:
        # the archiver of this app adds a sample of its own "now": ages below count from there
        def ages(url: str) -> list[int]:
            body = http.get(url).json()
            return sorted(round(now - s["timestamp"]) for s in body["samples"] if s["archiver"] == "test")

        assert ages("/load") == [30]  # default: one archive interval
        assert ages("/load?time=60") == [30]
        assert ages("/load?time=60&offset=120") == [150]
        assert ages("/load?time=300&offset=120") == [150, 200, 400]
        assert ages("/load?time=1000") == [30, 150, 200, 400]


def _http_response(conn: socket.socket) -> bytes:
    """One whole HTTP/1.1 response (its head and Content-Length body) read from ``conn``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"the server closed the connection after {data[:200]!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = conn.recv(65536)
        assert chunk, "the server closed the connection inside a body"
        body += chunk
    assert len(body) == length, "more bytes than one response"
    return head


def test_serve_with_two_workers_runs_one_archiver(devcluster: DevCluster, tmp_path: Path) -> None:
    env = serve_env(devcluster, tmp_path, SLURMTOWER_AUTH__ANONYMOUS_READ="true",
                    SLURMTOWER_ARCHIVER__ARCHIVE_WAIT_TIME="0.5", SLURMTOWER_EVENTS__SENSOR_ENABLED="false")
    server = ServeProcess(env, tmp_path / "serve.log", ("--workers", "2"))
    try:
        server.start(timeout=30)
        base = server.url
        time.sleep(3)
        assert httpx.get(f"{base}/ready", timeout=20).json()["ready"] is True
        assert "/queue" in httpx.get(f"{base}/openapi.json").json()["paths"]
        assert httpx.get(f"{base}/docs").status_code == 200
        assert httpx.get(f"{base}/nodes").json()["count"] == 4
        samples = httpx.get(f"{base}/load?time=60").json()["samples"]
        assert len(samples) >= 3
        assert len({s["archiver"] for s in samples}) == 1
        # An idle connection outlives uvicorn's own 5 s keep-alive (api.keep_alive, 75 s): a
        # proxy's pooled upstream connection is not closed under its next request.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
            for idle in (6, 0):  # one idle spell past uvicorn's 5 s, then the same connection again
                conn.sendall(b"GET /health HTTP/1.1\r\nHost: tower\r\n\r\n")
                assert _http_response(conn).startswith(b"HTTP/1.1 200")
                time.sleep(idle)
    finally:
        server.stop()


def test_config_show_masks_secrets(devcluster: DevCluster, tmp_path: Path) -> None:
    password = devcluster.tower_conf.read_text().split("reader_dcapi:" if "reader_dcapi:" in
                                                       devcluster.tower_conf.read_text() else "://")[1]
    password = password.split("@")[0].split(":")[-1]
    assert len(password) >= 8
    env = serve_env(devcluster, tmp_path, SLURMTOWER_AUTH__JWT_KEY="very-secret-jwt-key",
               SLURMTOWER_AUTH__JWT_ISSUERS='["https://idp.test"]', SLURMTOWER_AUTH__JWT_AUDIENCE="slurmtower",
               SLURMTOWER_API__HIDDEN_PARTITIONS='["short"]')
    out = subprocess.run([SLURMTOWER, "config", "show"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert password not in out.stdout and "very-secret-jwt-key" not in out.stdout
    lines = {line.split()[0]: line for line in out.stdout.splitlines()}
    assert "**********" in lines["accounting.url"] and "(file)" in lines["accounting.url"]
    assert "**********" in lines["auth.jwt_key"] and "(env)" in lines["auth.jwt_key"]
    assert "short" in lines["api.hidden_partitions"] and "(env)" in lines["api.hidden_partitions"]
    as_json = subprocess.run([SLURMTOWER, "config", "show", "-o", "json"], env=env, capture_output=True,
                             text=True, timeout=30)
    assert password not in as_json.stdout and '"accounting.url"' in as_json.stdout


def test_unknown_config_key_is_an_error_naming_it(devcluster: DevCluster, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[api]\nrefresh_intervall = 3\n')
    env = serve_env(devcluster, tmp_path)
    out = subprocess.run([SLURMTOWER, "config", "show", "-c", str(bad)], env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("slurmtower: error:")
    assert "api.refresh_intervall" in out.stderr
