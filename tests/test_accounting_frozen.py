"""A frozen accounting database (a port that accepts connections and never answers, as a
SIGSTOPped MariaDB does): /history and /users give their 503 within 5 s, and nothing else
slows down: token checks, cached live reads, /events, /health, while 8 reads hang."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pydantic import SecretStr

from slurmtower.settings import Settings

from .api_server import running
from .auth_helpers import READER, bearer, with_tokens

pytestmark = pytest.mark.cluster


@pytest.fixture()
def frozen_db() -> Iterator[int]:
    """A TCP port that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def test_frozen_accounting_gives_503_in_bounded_time_and_slows_nothing_else(settings: Settings,
                                                                           frozen_db: int) -> None:
    from slurmtower.api import create_app

    settings = with_tokens(settings)
    settings.accounting.url = SecretStr(f"mysql+pymysql://reader:x@127.0.0.1:{frozen_db}/slurm_acct_db")
    settings.accounting.cluster = "tower"
    settings.events.sensor_enabled = False
    auth = bearer(READER)
    with running(create_app(settings)) as http:
        for path in ("/nodes", "/queue", "/usage"):  # warm the snapshots (a cold read is not the point)
            assert http.get(path, headers=auth).status_code == 200
        base = f"{http.base_url}"
        took: list[float] = []

        def history(_i: int) -> httpx.Response:
            start = time.monotonic()
            resp = httpx.get(f"{base}/history?limit=5", headers=auth, timeout=30)
            took.append(time.monotonic() - start)
            return resp

        with ThreadPoolExecutor(8) as pool:
            pending = [pool.submit(history, i) for i in range(8)]
            time.sleep(0.5)  # the 8 reads now hang on the database
            others = []
            for path in ("/health", "/nodes", "/queue", "/events?limit=5", "/nodes", "/usage"):
                start = time.monotonic()
                resp = http.get(path, headers=auth)
                others.append((path, resp.status_code, time.monotonic() - start))
            answers = [f.result() for f in pending]
        users_start = time.monotonic()
        users = http.get("/users", headers=auth)
        users_took = time.monotonic() - users_start
    assert [a.status_code for a in answers] == [503] * 8, [a.text for a in answers]
    assert max(took) <= 5.0, took
    for a in answers:
        assert a.headers["content-type"].startswith("application/problem+json")
        assert "pymysql" not in a.text and "Lost connection" not in a.text
    assert all(status == 200 for _p, status, _t in others), others
    assert max(t for _p, _s, t in others) < 1.0, others
    assert users.status_code == 503 and users_took <= 5.0, (users.text, users_took)
