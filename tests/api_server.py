"""Run a slurmtower app on a real loopback HTTP server (uvicorn in a thread) for tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from fastapi import FastAPI

from slurmtower.api import create_app
from slurmtower.settings import ApiSettings, Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: The server's keep-alive as ``slurmtower serve`` sets it (``api.keep_alive``): a client that
#: waits longer than uvicorn's own 5 s between two requests must not meet a closing connection.
KEEP_ALIVE = ApiSettings.model_fields["keep_alive"].default


@contextmanager
def serving(app: FastAPI, timeout: float = 20, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` (lifespan included) with uvicorn on ``port`` (default: a free one) of
    loopback in a thread, as ``slurmtower serve`` does; yields the base URL."""
    port = port or free_port()
    services = getattr(app.state, "services", None)
    options = services.settings.api.server_options() if services is not None else {
        "timeout_keep_alive": KEEP_ALIVE, "proxy_headers": False}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on", **options))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    end = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > end:
            raise RuntimeError("the test API server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@contextmanager
def running(app: FastAPI, timeout: float = 20) -> Iterator[httpx.Client]:
    """Serve ``app`` (lifespan included) on 127.0.0.1 and yield a client for it."""
    with serving(app, timeout) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield http


@contextmanager
def api_for(settings: Settings, *, archiver: bool = False) -> Iterator[httpx.Client]:
    """A real server of ``create_app(settings)`` with anonymous reads allowed."""
    settings.auth.anonymous_read = True
    settings.archiver.archive_usage_load = archiver
    settings.events.sensor_enabled = False  # the sensor arms triggers and polls on its own
    with running(create_app(settings)) as http:
        yield http
