"""Tokens, settings and a real uvicorn server for the auth, metrics and dashboard tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from fastapi import FastAPI

from slurmtower.api.security import hash_token
from slurmtower.settings import Settings, TokenEntry

READER = "stw_test_reader_token"
OPERATOR = "stw_test_operator_token"
ADMIN = "stw_test_admin_token"
JWT_SECRET = "jwt-test-secret-of-at-least-32-bytes!"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def with_tokens(settings: Settings, *, sensor: bool = False) -> Settings:
    """``settings`` with a reader, an operator and an admin token (and the sensor off unless asked)."""
    settings.auth.tokens = [
        TokenEntry(name="rita", role="reader", sha256=hash_token(READER)),
        TokenEntry(name="otto", role="operator", sha256=hash_token(OPERATOR)),
        TokenEntry(name="ada", role="admin", sha256=hash_token(ADMIN)),
    ]
    settings.api.serve_index = False
    settings.events.sensor_enabled = sensor
    return settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("uvicorn did not start")
        time.sleep(0.05)
    try:
        httpx.get(f"{url}/health", timeout=5).raise_for_status()
        yield url
    finally:
        server.should_exit = True
        thread.join(30)
