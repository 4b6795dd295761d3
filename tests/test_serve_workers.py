"""``slurmtower serve --workers 2`` end to end: the command line reaches every worker,
/metrics adds up the workers' counters (whichever worker answers the scrape), and failed
logins on every worker count against one limit.

One keep-alive connection is served by one worker, so a client limited to one connection
talks to one worker, named by ``slurmtower_process_info`` in its scrapes.
"""

from __future__ import annotations

import inspect
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurmtower.devcluster import DevCluster
from slurmtower.settings import load_settings

from .api_server import free_port
from .conftest import wait_for
from .sensor_helpers import serve_env
from .serve_helpers import ServeProcess

pytestmark = pytest.mark.cluster

WORKERS = 2
LOGIN_FAILURES = 4

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(got: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in got.items() if n == name and labels.items() <= dict(ls).items())


def process_of(got: Samples) -> str:
    (process,) = [dict(ls)["process"] for (n, ls) in got if n == "slurmtower_process_info"]
    return process


class Served:
    """A running ``slurmtower serve --workers 2`` and the count of every response the tests got."""

    def __init__(self, process: ServeProcess, reader_token: str) -> None:
        self.process = process
        self.port = process.port
        self.reader_token = reader_token
        self.state_dir = process.log_path.parent
        self.base = process.url
        self.responses = 0

    def _count(self, _response: httpx.Response) -> None:
        self.responses += 1

    def connection(self) -> httpx.Client:
        """A client on one keep-alive connection (so one worker answers all its requests)."""
        return httpx.Client(base_url=self.base, timeout=30, limits=httpx.Limits(max_connections=1),
                            event_hooks={"response": [self._count]})

    def scrape(self, http: httpx.Client) -> tuple[int, Samples]:
        """(responses counted before this scrape, the scrape): the scrape's own request is
        counted when its response starts, after its body was made."""
        before = self.responses
        resp = http.get("/metrics")
        assert resp.status_code == 200, resp.text
        return before, samples(resp.text)

    def one_client_per_worker(self) -> dict[str, httpx.Client]:
        """A connected client per worker, found by opening connections until each worker answered."""
        found: dict[str, httpx.Client] = {}
        for _ in range(200):
            http = self.connection()
            process = process_of(self.scrape(http)[1])
            if process in found:
                http.close()
            else:
                found[process] = http
            if len(found) == WORKERS:
                return found
        raise AssertionError(f"200 connections reached only the workers {sorted(found)}")


@pytest.fixture(scope="module")
def served(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    state_dir = tmp_path_factory.mktemp("serve-workers")
    port = free_port()
    assert load_settings(devcluster.tower_conf, environ={}).api.port != port  # the option must win
    env = serve_env(devcluster, state_dir, SLURMTOWER_AUTH__ANONYMOUS_READ="true",
                    SLURMTOWER_EVENTS__SENSOR_ENABLED="false", SLURMTOWER_ARCHIVER__ARCHIVE_USAGE_LOAD="false",
                    SLURMTOWER_AUTH__LOGIN_FAILURES_PER_MINUTE=str(LOGIN_FAILURES))
    process = ServeProcess(env, state_dir / "serve.log",
                           ("--host", "127.0.0.1", "--workers", str(WORKERS), "--no-access-log"), port)
    server = Served(process, devcluster.demo_tokens()["reader"])

    def health() -> int:  # through a counted connection: the scrapes must see these requests too
        with server.connection() as http:
            return http.get("/health").status_code

    try:
        process.start(timeout=60, health=health)
        yield server
    finally:
        process.stop()


def test_every_serve_option_that_is_a_setting_is_exported_to_the_workers() -> None:
    from slurmtower.cli.api import OPTION_VARIABLES, serve

    # access_log is uvicorn's own option: its Config is handed to every worker.
    assert set(inspect.signature(serve).parameters) - {"access_log"} == set(OPTION_VARIABLES)


def test_every_worker_gets_the_port_given_on_the_command_line(served: Served) -> None:
    clients = served.one_client_per_worker()
    for process, http in clients.items():
        sensor = http.get("/events/sensor").json()
        assert sensor["callback_url"] == f"http://127.0.0.1:{served.port}", process
        assert process_of(served.scrape(http)[1]) == process  # still the same worker
        http.close()


def test_the_workers_metric_files_are_private_to_this_serve(served: Served) -> None:
    directory = served.state_dir / f"metrics-{served.port}"
    assert directory.stat().st_mode & 0o777 == 0o700
    assert {p.name.split("_")[0] for p in directory.glob("*.db")} >= {"counter", "histogram", "gauge"}


def test_a_scrape_on_any_worker_counts_every_request(served: Served) -> None:
    clients = served.one_client_per_worker()
    workers = sorted(clients)
    for i in range(25):  # 13 on one worker, 12 on the other
        assert clients[workers[i % 2]].get("/health").status_code == 200
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    answered = []
    for i in range(8):
        http = clients[workers[i % 2]] if i < 4 else served.connection()  # known workers, then any
        before, got = served.scrape(http)
        answered.append(process_of(got))
        assert total(got, "slurmtower_http_requests_total") == before
        assert total(got, "slurmtower_http_request_duration_seconds_count") == before
        assert total(got, "slurmtower_http_requests_total", route="/health") >= 25
        counters = {k: v for k, v in got.items()
                    if k[0].endswith(("_total", "_count", "_sum", "_bucket"))}
        for key, value in seen.items():
            assert counters.get(key, 0) >= value, f"{key} went down from {value} on {answered[-1]}"
        seen = counters
        # Computed from the cluster at scrape: one cluster's values, not one per worker.
        assert total(got, "slurmtower_nodes") == 4
        assert got[("slurmtower_cpus_configured", ())] == 8
        assert got[("slurmtower_worker_processes", ())] == WORKERS
        if i >= 4:
            http.close()
    assert set(answered[:4]) == set(workers)
    for http in clients.values():
        http.close()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (scripts/test.sh fetches it)")
def test_promtool_accepts_the_multiprocess_scrape(served: Served) -> None:
    with served.connection() as http:
        http.get("/nodes")
        text = http.get("/metrics").text
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_failed_logins_spread_over_the_workers_count_against_one_limit(served: Served) -> None:
    clients = served.one_client_per_worker()
    workers = sorted(clients)
    valid = {"Authorization": f"Bearer {served.reader_token}"}
    assert all(http.get("/ui/whoami", headers=valid).status_code == 200 for http in clients.values())
    for i in range(LOGIN_FAILURES):  # half on each worker: neither reaches the limit alone
        resp = clients[workers[i % 2]].get("/ui/whoami", headers={"Authorization": f"Bearer wrong-{i}"})
        assert resp.status_code == 401
    for process in workers:  # the next attempt is refused on both, even with a valid token
        http = clients[process]
        resp = http.get("/ui/whoami", headers=valid)
        assert resp.status_code == 429, process
        assert 1 <= int(resp.headers["retry-after"]) <= 60
        assert process_of(served.scrape(http)[1]) == process
        http.close()


def test_a_killed_worker_keeps_its_counts_and_leaves_the_live_count(served: Served) -> None:
    clients = served.one_client_per_worker()
    victim, survivor = sorted(clients)
    before, got = served.scrape(clients[survivor])
    assert total(got, "slurmtower_http_requests_total") == before
    clients[victim].close()
    os.kill(int(victim.rpartition(":")[2]), signal.SIGKILL)  # a worker of the serve this test started

    def replaced() -> Samples | None:
        with served.connection() as http:
            _, now = served.scrape(http)
        return now if process_of(now) != victim and now[("slurmtower_worker_processes", ())] == WORKERS \
            and len(list((served.state_dir / f"metrics-{served.port}").glob("gauge_livesum_*.db"))) == WORKERS \
            else None

    # uvicorn starts a new worker; a scrape marks the killed one dead.
    wait_for(replaced, 60, 0.5, what="uvicorn to replace the killed worker")
    after_before, after = served.scrape(clients[survivor])
    assert total(after, "slurmtower_http_requests_total") == after_before  # the victim's counts stay
    clients[survivor].close()
