"""Tokens, settings and a real uvicorn server for the auth, metrics and dashboard tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from pydantic import SecretStr

from slurmtower.api.security import hash_token
from slurmtower.principal import SESSION_COOKIE
from slurmtower.settings import Settings, TokenEntry
from tests.api_server import serving

READER = "stw_test_reader_token"
OPERATOR = "stw_test_operator_token"
ADMIN = "stw_test_admin_token"
JWT_SECRET = "jwt-test-secret-of-at-least-32-bytes!"
JWT_ISSUER = "https://idp.test/realms/hpc"
JWT_AUDIENCE = "slurmtower"


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


def module_app_settings(base: Settings, state_dir: Path) -> Settings:
    """A copy of ``base`` for a module's own app: :func:`with_tokens`, ``state_dir`` of its
    own, no load archiver, snapshots refreshed in the serving process."""
    s = with_tokens(base.model_copy(deep=True))
    s.state_dir = state_dir
    s.archiver.archive_usage_load = False
    s.api.refresh_in_subprocess = False
    return s


def log_in(client: Any, token: str) -> str:
    """Log ``client`` (a TestClient or an httpx client of the app) in through the login form
    with ``token``; returns the session id its cookie jar now holds."""
    resp = client.post("/ui/login", data={"token": token}, follow_redirects=False)
    assert resp.status_code == 303, resp.text
    sid = resp.cookies.get(SESSION_COOKIE)
    assert sid and sid != token
    client.cookies.set(SESSION_COOKIE, sid)
    return str(sid)


def with_jwt(settings: Settings, key: str | None = JWT_SECRET) -> Settings:
    """``settings`` accepting JWTs of :data:`JWT_ISSUER` for :data:`JWT_AUDIENCE` signed with ``key``."""
    settings.auth.jwt_key = SecretStr(key) if key is not None else None
    settings.auth.jwt_issuers = [JWT_ISSUER]
    settings.auth.jwt_audience = JWT_AUDIENCE
    return settings


@contextmanager
def running_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields the base URL."""
    with serving(app, 30) as url:
        httpx.get(f"{url}/health", timeout=5).raise_for_status()
        yield url
