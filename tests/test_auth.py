"""Authentication: hashed tokens, JWTs (key and JWKS URL), anonymous access, the failed-login
limit, cookie + CSRF header, ``slurmtower token create``, drain over HTTP by role, and
credentials checked on the event loop so the cached fast path serves them."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.routing import Router

from slurmtower.api import create_app
from slurmtower.api.security import LoginLimiter, hash_token
from slurmtower.principal import SESSION_COOKIE
from slurmtower.settings import Settings
from tests.auth_helpers import (
    ADMIN,
    JWT_AUDIENCE,
    JWT_ISSUER,
    JWT_SECRET,
    OPERATOR,
    READER,
    bearer,
    log_in,
    with_jwt,
    with_tokens,
)
from tests.conftest import node_states, sh, wait_for

with warnings.catch_warnings():
    # Starlette asks for httpx2 at import time; the TestClient works with httpx.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture()
def auth_settings(settings: Settings) -> Settings:
    return with_tokens(settings)


@pytest.fixture()
def api(auth_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(auth_settings)) as client:
        yield client


def _jwt(claims: dict[str, object], key: str | object = JWT_SECRET, alg: str = "HS256",
         headers: dict[str, str] | None = None) -> str:
    """A JWT of the test issuer for the test audience; a claim given as None is left out."""
    body = {"exp": int(time.time()) + 300, "iss": JWT_ISSUER, "aud": JWT_AUDIENCE, **claims}
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, key, algorithm=alg, headers=headers)  # type: ignore[arg-type]


def test_health_is_public_and_read_routes_are_not(api: TestClient) -> None:
    assert api.get("/health").status_code == 200
    resp = api.get("/nodes")
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"] == "Bearer"
    assert resp.json()["detail"] == "authentication required"
    assert api.get("/nodes", headers=bearer(READER)).status_code == 200


def test_anonymous_read_opens_read_routes_but_not_actions(auth_settings: Settings) -> None:
    auth_settings.auth.anonymous_read = True
    with TestClient(create_app(auth_settings)) as api:
        assert api.get("/nodes").status_code == 200
        assert api.get("/metrics").status_code == 200
        resp = api.post("/actions/slurm.node.drain", json={"nodes": "n1", "reason": "x"})
        assert resp.status_code in (401, 403)
        assert "anonymous" in resp.json()["detail"] or resp.status_code == 401
    assert "DRAIN" not in node_states()["n1"]


def test_wrong_scheme_and_unknown_token_are_401_and_never_logged(
        api: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="slurmtower.auth")
    resp = api.get("/nodes", headers={"Authorization": "Basic dXNlcjpwdw=="})
    assert resp.status_code == 401
    assert "Bearer" in resp.json()["detail"]
    secret = "stw_not_a_real_token_but_secret_looking"
    resp = api.get("/nodes", headers=bearer(secret))
    assert resp.status_code == 401
    assert resp.json()["detail"] == "invalid token"
    assert "failed login from testclient" in caplog.text
    assert secret not in caplog.text
    assert secret[:12] not in caplog.text


def test_reader_cannot_operate_and_error_names_the_role(api: TestClient) -> None:
    resp = api.post("/actions/slurm.node.drain", json={"nodes": "n1", "reason": "x"}, headers=bearer(READER))
    assert resp.status_code == 403
    assert "rita (reader)" in resp.json()["detail"]


def test_failed_logins_are_rate_limited_per_address(auth_settings: Settings) -> None:
    auth_settings.auth.login_failures_per_minute = 3
    with TestClient(create_app(auth_settings)) as api:
        for _ in range(3):
            assert api.get("/nodes", headers=bearer("wrong")).status_code == 401
        # Blocked now, even with a valid token, from this address ...
        resp = api.get("/nodes", headers=bearer(READER))
        assert resp.status_code == 429
        assert resp.json()["retry_after"] >= 1
        # ... but not from another one.
        with TestClient(api.app, client=("10.1.2.3", 5000)) as other:
            assert other.get("/ui/whoami", headers=bearer(READER)).json()["name"] == "rita"
        # Public routes still answer.
        assert api.get("/health").status_code == 200


def test_failed_logins_on_two_apps_sharing_a_store_add_up(auth_settings: Settings) -> None:
    auth_settings.auth.login_failures_per_minute = 4
    other_settings = auth_settings.model_copy(deep=True)  # the same state_dir: one store
    with TestClient(create_app(auth_settings)) as a, TestClient(create_app(other_settings)) as b:
        # A valid token from an address that never failed: answered without the store.
        assert a.get("/ui/whoami", headers=bearer(READER)).status_code == 200
        limiter_a = a.app.state.slurmtower_auth.limiter
        assert limiter_a.store_calls == 0
        for i in range(4):  # two failures on each app
            assert (a, b)[i % 2].get("/ui/whoami", headers=bearer(f"wrong-{i}")).status_code == 401
        for api in (a, b):  # each saw 2, the deployment 4: the fifth attempt is refused
            resp = api.get("/ui/whoami", headers=bearer(READER))
            assert resp.status_code == 429
            assert 1 <= int(resp.headers["retry-after"]) <= 60
            assert resp.json()["retry_after"] == int(resp.headers["retry-after"])


def test_login_limiter_forgets_failures_after_the_window() -> None:
    now = [1000.0]
    limiter = LoginLimiter(2, window=60, clock=lambda: now[0])
    limiter.failed("a")
    limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(60)
    assert limiter.retry_after("b") == 0
    now[0] += 30
    assert limiter.retry_after("a") == pytest.approx(30)
    now[0] += 31
    assert limiter.retry_after("a") == 0


def test_jwt_with_shared_key_gives_role_from_claim(auth_settings: Settings) -> None:
    with_jwt(auth_settings)
    with TestClient(create_app(auth_settings)) as api:
        op = _jwt({"sub": "jo", "role": ["reader", "operator"]})
        assert api.get("/ui/whoami", headers=bearer(op)).json() == {
            "name": "jo", "role": "operator", "via": "jwt", "may_operate": True}
        reader = _jwt({"preferred_username": "max", "role": "reader"})
        assert api.get("/ui/whoami", headers=bearer(reader)).json()["role"] == "reader"
        no_role = _jwt({"sub": "nobody"})
        assert api.get("/nodes", headers=bearer(no_role)).status_code == 403
        expired = _jwt({"sub": "jo", "role": "admin", "exp": int(time.time()) - 3600})
        resp = api.get("/nodes", headers=bearer(expired))
        assert (resp.status_code, resp.json()["detail"]) == (401, "JWT expired")
        forged = _jwt({"sub": "jo", "role": "admin"}, key="another-secret-of-at-least-32-bytes!!")
        assert api.get("/nodes", headers=bearer(forged)).status_code == 401
        unsigned = jwt.encode({"sub": "jo", "role": "admin", "exp": int(time.time()) + 60}, None,
                              algorithm="none")
        assert api.get("/nodes", headers=bearer(unsigned)).status_code == 401


@pytest.fixture()
def jwks_server() -> Iterator[tuple[str, object]]:
    """A real HTTP server publishing one RSA public key as a JWKS; yields (url, private key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/jwks.json", key
    server.shutdown()
    server.server_close()


def test_jwt_verified_against_jwks_url(auth_settings: Settings, jwks_server: tuple[str, object]) -> None:
    url, key = jwks_server
    with_jwt(auth_settings, key=None)
    auth_settings.auth.jwt_jwks_url = url
    with TestClient(create_app(auth_settings)) as api:
        good = _jwt({"sub": "kim", "role": "admin", "aud": "slurmtower"}, key=key, alg="RS256",
                    headers={"kid": "k1"})
        assert api.get("/ui/whoami", headers=bearer(good)).json()["role"] == "admin"
        wrong_aud = _jwt({"sub": "kim", "role": "admin", "aud": "other"}, key=key, alg="RS256",
                         headers={"kid": "k1"})
        assert api.get("/nodes", headers=bearer(wrong_aud)).status_code == 401
        # An HMAC token must not pass against a JWKS-only configuration.
        hs = _jwt({"sub": "kim", "role": "admin", "aud": "slurmtower"}, headers={"kid": "k1"})
        assert api.get("/nodes", headers=bearer(hs)).status_code == 401


def test_session_cookie_needs_csrf_header_for_mutations(api: TestClient) -> None:
    log_in(api, OPERATOR)
    assert api.get("/ui/whoami").json()["name"] == "otto"
    resp = api.post("/actions/slurm.node.drain", json={"nodes": "n1", "reason": "csrf?", "dry_run": True})
    assert resp.status_code == 403
    assert resp.json()["param"] == "x-slurmtower-request"


def test_token_create_prints_a_token_once_with_its_config_entry(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("slurmtower")
    out = subprocess.run([str(exe), "token", "create", "--role", "operator", "--name", "otto", "-o", "json"],
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["entry"] == {"name": "otto", "role": "operator", "sha256": hash_token(data["token"])}
    assert len(data["token"]) > 40
    text = subprocess.run([str(exe), "token", "create", "--role", "reader", "--name", "rita"],
                          capture_output=True, text=True, check=True).stdout
    token = text.splitlines()[0].removeprefix("token: ")
    assert f'sha256 = "{hash_token(token)}"' in text
    assert "[[auth.tokens]]" in text
    bad = subprocess.run([str(exe), "token", "create", "--role", "root", "--name", "x"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "slurmtower: error: --role 'root' is not one of user, reader, operator, admin, alerter"]
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[[auth.tokens]]\nname = "otto"\nrole = "reader"\nsha256 = "{"0" * 64}"\n')
    dup = subprocess.run([str(exe), "token", "create", "--role", "reader", "--name", "otto", "-c", str(cfg)],
                         capture_output=True, text=True)
    assert dup.returncode == 2
    assert "already has a token" in dup.stderr


@pytest.mark.cluster
def test_drain_over_http_needs_an_operator_and_audit_names_the_token(
        auth_settings: Settings, clean_nodes: object) -> None:
    body = {"nodes": "n2", "reason": "fan noise"}
    with TestClient(create_app(auth_settings)) as api:
        assert api.post("/actions/slurm.node.drain", json=body).status_code == 401
        assert api.post("/actions/slurm.node.drain", json=body, headers=bearer(READER)).status_code == 403
        assert "DRAIN" not in node_states()["n2"]
        resp = api.post("/actions/slurm.node.drain", json=body, headers=bearer(OPERATOR))
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "succeeded"
        assert resp.json()["principal"] == "otto"
        wait_for(lambda: "DRAIN" in node_states()["n2"], 10, what="n2 drained")
        assert "otto" in sh("scontrol", "show", "node", "n2")
        audit = api.get("/audit", headers=bearer(ADMIN))
        assert audit.status_code == 200
        assert "otto" in audit.text and "slurm.node.drain" in audit.text


# --- credentials are checked on the event loop, and the cached fast path serves them --------


class _Hops:
    """Counts thread hops (asyncio executor jobs, anyio worker threads) and requests that got
    as far as FastAPI's router (the cached fast path answers before routing)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads = 0
        self.routed = 0
        run_in_executor = asyncio.BaseEventLoop.run_in_executor
        run_sync = anyio.to_thread.run_sync
        route = Router.__call__

        def counting_executor(loop: asyncio.BaseEventLoop, *args: Any) -> Any:
            self.threads += 1
            return run_in_executor(loop, *args)

        async def counting_run_sync(*args: Any, **kwargs: Any) -> Any:
            self.threads += 1
            return await run_sync(*args, **kwargs)

        async def counting_route(router: Router, *args: Any) -> None:
            self.routed += 1
            await route(router, *args)

        monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", counting_executor)
        monkeypatch.setattr(anyio.to_thread, "run_sync", counting_run_sync)
        monkeypatch.setattr(Router, "__call__", counting_route)

    def reset(self) -> None:
        self.threads = self.routed = 0


@pytest.fixture()
def quiet_settings(auth_settings: Settings) -> Settings:
    """Token settings with no background work and snapshots that stay fresh for the test."""
    auth_settings.api.refresh_interval = 120
    auth_settings.api.refresh_in_subprocess = False
    auth_settings.archiver.archive_usage_load = False
    with_jwt(auth_settings)
    return auth_settings


def _warm(api: TestClient, *paths: str) -> None:
    for path in paths:
        assert api.get(path, headers=bearer(READER)).status_code == 200


@pytest.mark.parametrize("credential", ["reader token", "admin token", "jwt", "cookie"])
def test_token_reads_are_answered_on_the_event_loop_by_the_fast_path(
        quiet_settings: Settings, monkeypatch: pytest.MonkeyPatch, credential: str) -> None:
    with TestClient(create_app(quiet_settings)) as api:
        _warm(api, "/nodes", "/queue")
        headers = {
            "reader token": bearer(READER),
            "admin token": bearer(ADMIN),
            "jwt": bearer(_jwt({"sub": "jo", "role": "reader"})),
            "cookie": {"Cookie": f"{SESSION_COOKIE}={log_in(api, READER)}"},
        }[credential]
        api.cookies.clear()
        for path in ("/nodes", "/queue"):  # each caller's view rendered once (readers: the private-free queue)
            assert api.get(path, headers=headers).status_code == 200
        word = api.app.state.slurmtower_auth.word  # type: ignore[attr-defined]
        hops, reads, writes, spared = _Hops(monkeypatch), word.reads, word.writes, word.spared
        for _ in range(20):
            for path in ("/nodes", "/queue"):
                assert api.get(path, headers=headers).status_code == 200
        # The store's word on static tokens and sessions (revocations, logouts) is the only
        # thread hop: read for each request that comes after the last read, unless nothing
        # was committed to the store since that read began (SQLite's data_version says so, on
        # the loop): then the request is spared the read (requests arriving together share
        # one: test_credentials.py). Their uses are written in threads too.
        stored = 0 if credential == "jwt" else 40
        assert (word.reads - reads + word.spared - spared, hops.routed) == (stored, 0)
        assert word.reads - reads <= stored // 4  # the store changed little meanwhile
        assert hops.threads == word.reads - reads + word.writes - writes
        # A route off the fast path checks the credential the same way.
        assert api.get("/ui/whoami", headers=headers).json()["role"] in ("reader", "admin")
        assert (word.reads - reads + word.spared - spared, hops.routed) == (stored + (credential != "jwt"), 1)


def test_refusals_on_the_fast_path_are_problems_and_each_failure_counts_once(
        quiet_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    quiet_settings.auth.login_failures_per_minute = 3
    with TestClient(create_app(quiet_settings)) as api:
        _warm(api, "/nodes")
        hops = _Hops(monkeypatch)
        refused = [
            ({}, 401, "authentication required"),
            (bearer(_jwt({"sub": "jo"})), 403, "jo (none) may not do this: needs read"),
            ({"Authorization": "Basic dXNlcjpwdw=="}, 401, "use 'Authorization: Bearer <token>'"),
        ]
        for headers, status, detail in refused:
            resp = api.get("/nodes", headers=headers)
            assert (resp.status_code, resp.json()["detail"]) == (status, detail)
            assert resp.headers["content-type"] == "application/problem+json"
        # Three failed logins (the fast path and the route both look at each request) ...
        expired = _jwt({"sub": "jo", "role": "admin", "exp": int(time.time()) - 3600})
        for headers, detail in ((bearer("wrong"), "invalid token"), (bearer(expired), "JWT expired"),
                                (bearer("wrong again"), "invalid token")):
            resp = api.get("/nodes", headers=headers)
            assert (resp.status_code, resp.json()["detail"]) == (401, detail)
            assert resp.headers["www-authenticate"] == "Bearer"
        # ... block the address: the limit counted each of them once.
        resp = api.get("/nodes", headers=bearer(READER))
        assert resp.status_code == 429
        assert resp.json()["retry_after"] >= 1
        # Only the shared limiter's store calls leave the loop: each failure's write, the
        # look-ups of the address once it has failed; none once it is over the limit here.
        limiter = api.app.state.slurmtower_auth.limiter
        assert limiter.store_calls == 3 + 2
        assert hops.threads == limiter.store_calls


def test_jwks_is_fetched_in_a_thread_then_its_keys_are_used_on_the_event_loop(
        quiet_settings: Settings, jwks_server: tuple[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    url, key = jwks_server
    with_jwt(quiet_settings, key=None)
    quiet_settings.auth.jwt_jwks_url = url
    token = _jwt({"sub": "kim", "role": "reader"}, key=key, alg="RS256", headers={"kid": "k1"})
    with TestClient(create_app(quiet_settings)) as api:
        _warm(api, "/nodes")
        hops = _Hops(monkeypatch)
        assert api.get("/nodes", headers=bearer(token)).status_code == 200
        assert hops.threads == 1  # the fetch
        jwks = api.app.state.slurmtower_auth.verifier.jwks  # type: ignore[attr-defined]
        assert jwks.fetches == 1
        hops.reset()
        for _ in range(20):
            assert api.get("/nodes", headers=bearer(token)).status_code == 200
        assert (hops.threads, hops.routed, jwks.fetches) == (0, 0, 1)
        # A key the set lacks, just after a fetch: refused on the loop, the JWKS is not asked.
        other = _jwt({"sub": "kim", "role": "admin"}, key=key, alg="RS256", headers={"kid": "k2"})
        resp = api.get("/nodes", headers=bearer(other))
        assert resp.status_code == 401
        assert resp.json()["detail"] == "JWT signing key not found: no signing key matches kid 'k2'"
        # (The failed logins' store calls leave the loop too: not the JWKS's.)
        limiter = api.app.state.slurmtower_auth.limiter
        assert (hops.threads - limiter.store_calls, jwks.fetches) == (0, 1)
        # Once the cooldown is over, the set is fetched again (in a thread): a rotated key?
        jwks.cooldown = 0.0
        assert api.get("/nodes", headers=bearer(other)).status_code == 401
        assert (hops.threads - limiter.store_calls, jwks.fetches) == (1, 2)


def test_jwks_keys_expire_and_survive_an_unreachable_endpoint(jwks_server: tuple[str, object]) -> None:
    from slurmtower.identity import JwksKeys

    url, _key = jwks_server
    now = [1000.0]
    keys = JwksKeys(url, lifespan=300, cooldown=10, clock=lambda: now[0])
    assert keys.lookup("k1") is None  # nothing fetched yet
    first = keys.fetch("k1")
    assert keys.lookup("k1") is first
    now[0] += 301
    assert keys.lookup("k1") is None  # too old: fetch again
    keys._client.uri = "http://127.0.0.1:9/gone.json"  # noqa: SLF001 - the endpoint goes away
    assert keys.fetch("k1") is first
    assert keys.lookup("k1") is first  # no retry before the cooldown is over
    assert keys.fetches == 2


@pytest.mark.parametrize("kind", ["function", "coroutine function"])
def test_authenticate_other_hook_runs_in_a_thread_unless_async(
        quiet_settings: Settings, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    from slurmtower.api.security import Principal

    def lookup(token: str) -> Principal | None:
        return Principal(name="plug", role="reader", via="plugin") if token == "plugin-token" else None

    async def async_lookup(token: str) -> Principal | None:
        return lookup(token)

    app = create_app(quiet_settings)
    app.state.services.authenticate_other = lookup if kind == "function" else async_lookup
    with TestClient(app) as api:
        _warm(api, "/nodes")
        hops = _Hops(monkeypatch)
        assert api.get("/nodes", headers=bearer("plugin-token")).status_code == 200
        assert api.get("/nodes", headers=bearer("not-plugin")).status_code == 401
        # Besides the hook: the failure written to the shared limiter's store.
        assert api.app.state.slurmtower_auth.limiter.store_calls == 1
        assert hops.threads == (2 if kind == "function" else 0) + 1


def test_a_replaced_token_list_takes_effect(quiet_settings: Settings) -> None:
    from slurmtower.settings import TokenEntry

    with TestClient(create_app(quiet_settings)) as api:
        assert api.get("/ui/whoami", headers=bearer(READER)).json()["name"] == "rita"
        quiet_settings.auth.tokens = [TokenEntry(name="nina", role="reader", sha256=hash_token("stw_new"))]
        assert api.get("/ui/whoami", headers=bearer("stw_new")).json()["name"] == "nina"
        assert api.get("/ui/whoami", headers=bearer(READER)).status_code == 401


def test_an_event_stream_ends_when_its_jwt_expires(auth_settings: Settings) -> None:
    """A JWT accepted within its clock-skew leeway, 3 s before that runs out: the stream
    says so and ends then, instead of streaming for as long as the client stays."""
    import httpx

    from slurmtower.api.security import JWT_LEEWAY
    from tests.api_server import running

    with_jwt(auth_settings)
    auth_settings.archiver.archive_usage_load = False
    token = _jwt({"sub": "jo", "role": "reader", "exp": int(time.time()) - JWT_LEEWAY + 3})
    with running(create_app(auth_settings)) as http:
        t0 = time.monotonic()
        lines = []
        with http.stream("GET", "/events/stream", headers={"Authorization": f"Bearer {token}"},
                         timeout=httpx.Timeout(20)) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                lines.append(line)
        took = time.monotonic() - t0
    assert "event: slurmtower.stream.ended" in lines, lines
    assert lines[lines.index("event: slurmtower.stream.ended") + 1] == 'data: {"reason": "JWT expired"}', lines
    assert 1.0 <= took <= 6.0, took


def test_a_jwt_from_another_issuer_or_for_another_audience_is_refused(auth_settings: Settings) -> None:
    """Issue 21's reproduction: a token from ``https://evil.example`` signed with the
    configured key was taken as admin. Now only ``auth.jwt_issuers`` and ``auth.jwt_audience``
    are; nothing is run or audited for the refused ones."""
    with_jwt(auth_settings)
    with TestClient(create_app(auth_settings)) as api:
        evil = _jwt({"sub": "mallory", "role": "admin", "iss": "https://evil.example"})
        resp = api.post("/actions/slurm.reservation.create", headers=bearer(evil),
                        json={"reservation": "mallory", "nodes": "n1", "duration": "10", "users": "root"})
        assert (resp.status_code, resp.json()["detail"]) == (
            401, "JWT from an issuer not accepted here (auth.jwt_issuers)")
        for claims in ({"aud": "another-service"}, {"aud": None}, {"iss": None}):
            token = _jwt({"sub": "mallory", "role": "admin", **claims})
            assert api.get("/nodes", headers=bearer(token)).status_code == 401, claims
        too_long = _jwt({"sub": "m" * 300, "role": "admin"})
        assert api.get("/nodes", headers=bearer(too_long)).status_code == 401
        good = _jwt({"sub": "jo", "role": "admin"})
        assert api.get("/ui/whoami", headers=bearer(good)).json()["name"] == "jo"
        audit = api.get("/audit", headers=bearer(ADMIN), params={"who": "mallory"}).json()
        assert audit["records"] == []
    assert "mallory" not in sh("scontrol", "show", "reservation")


@pytest.mark.parametrize("missing", ["auth.jwt_issuers", "auth.jwt_audience"])
def test_jwts_without_issuers_or_audience_refuse_to_start(settings: Settings, missing: str) -> None:
    from slurmtower.errors import ConfigError
    from slurmtower.settings import load_settings

    with_jwt(settings)
    setattr(settings.auth, missing.split(".")[1], [] if missing.endswith("issuers") else None)
    with pytest.raises(ConfigError) as err:
        create_app(settings)
    assert err.value.extra["key"] == missing
    env = {"SLURMTOWER_AUTH__JWT_KEY": JWT_SECRET, "SLURMTOWER_AUTH__JWT_AUDIENCE": JWT_AUDIENCE,
           "SLURMTOWER_AUTH__JWT_ISSUERS": f'["{JWT_ISSUER}"]'}
    env.pop(f"SLURMTOWER_{missing.upper().replace('.', '__')}")
    with pytest.raises(ConfigError, match=missing.replace(".", r"\.")):
        load_settings(environ=env)


def test_slurm_own_tokens_are_refused_unless_a_role_is_set(auth_settings: Settings, devcluster: Any) -> None:
    """``scontrol token`` from the local cluster, with ``jwt_key`` = its ``jwt_hs256.key``:
    refused by default, taken as ``auth.slurm_token_role`` (named by its ``sun``) when set."""
    out = sh("scontrol", "token", "username=alice", "lifespan=120")
    token = out.strip().split("=", 1)[1]
    with_jwt(auth_settings, key=None)
    auth_settings.auth.jwt_key_file = devcluster.jwt_key
    with TestClient(create_app(auth_settings)) as api:
        resp = api.get("/ui/whoami", headers=bearer(token))
        assert (resp.status_code, resp.json()["detail"]) == (
            401, "Slurm's own tokens are not accepted here (auth.slurm_token_role)")
    auth_settings.auth.slurm_token_role = "reader"
    with TestClient(create_app(auth_settings)) as api:
        assert api.get("/ui/whoami", headers=bearer(token)).json() == {
            "name": "alice", "role": "reader", "via": "slurm-jwt", "may_operate": False}
        # An issuer's token still needs the issuer's claims; a Slurm token with a forged sun fails.
        forged = jwt.encode({"sun": "root", "exp": int(time.time()) + 60}, "not-slurms-key-of-32-bytes-or-more!",
                            algorithm="HS256")
        assert api.get("/nodes", headers=bearer(forged)).status_code == 401


def test_a_jwks_key_is_pinned_to_the_algorithm_it_publishes(auth_settings: Settings,
                                                          jwks_server: tuple[str, object]) -> None:
    url, key = jwks_server
    with_jwt(auth_settings, key=None)
    auth_settings.auth.jwt_jwks_url = url
    auth_settings.auth.jwt_algorithms = ["RS256", "PS256"]
    with TestClient(create_app(auth_settings)) as api:
        rs = _jwt({"sub": "kim", "role": "admin"}, key=key, alg="RS256", headers={"kid": "k1"})
        assert api.get("/ui/whoami", headers=bearer(rs)).json()["role"] == "admin"
        ps = _jwt({"sub": "kim", "role": "admin"}, key=key, alg="PS256", headers={"kid": "k1"})
        assert api.get("/nodes", headers=bearer(ps)).status_code == 401


def _from(url: str, source: str) -> httpx.Client:
    """A client connecting from ``source`` (any 127.x.y.z is a loopback address of this host)."""
    return httpx.Client(base_url=url, timeout=10, transport=httpx.HTTPTransport(local_address=source))


def test_forwarded_for_is_believed_only_from_a_named_proxy(quiet_settings: Settings) -> None:
    """Issue 21's reproductions: with no proxy named, 40 bad tokens each naming another
    ``X-Forwarded-For`` were 40 x 401 (no limit), and 12 naming 10.9.9.9 locked a valid admin
    out of that address. Now the limiter counts the real peer; a named proxy's header counts."""
    from tests.api_server import serving

    quiet_settings.auth.login_failures_per_minute = 10
    with serving(create_app(quiet_settings)) as url:
        # 127.0.0.1: the peer uvicorn believed by default (this test's store is its own).
        with _from(url, "127.0.0.1") as mallory:
            codes = [mallory.get("/nodes", headers={**bearer(f"stw_bad{n}"), "X-Forwarded-For": f"10.7.0.{n}"})
                     .status_code for n in range(40)]
            assert codes == [401] * 10 + [429] * 30
            # Past the limit, even a valid credential from there is told to wait ...
            resp = mallory.get("/nodes", headers=bearer(ADMIN))
            assert resp.status_code == 429 and "retry in" in resp.json()["detail"]
        # ... and works from anywhere else, whatever header the bad ones named.
        with _from(url, "127.0.21.2") as admin:
            assert admin.get("/nodes", headers={**bearer(ADMIN), "X-Forwarded-For": "10.7.0.3"}).status_code == 200
            assert admin.get("/nodes", headers=bearer(ADMIN)).status_code == 200
    quiet_settings.api.trusted_proxies = ["127.0.22.1"]
    with serving(create_app(quiet_settings)) as url:
        with _from(url, "127.0.22.1") as proxy:
            for _ in range(10):
                assert proxy.get("/nodes", headers={**bearer("stw_bad"), "X-Forwarded-For": "10.9.9.9"}).status_code == 401
            # The proxy's clients are told apart by the header: 10.9.9.9 is locked out, not the proxy.
            assert proxy.get("/nodes", headers={**bearer(ADMIN), "X-Forwarded-For": "10.9.9.9"}).status_code == 429
            assert proxy.get("/nodes", headers={**bearer(ADMIN), "X-Forwarded-For": "10.9.9.8"}).status_code == 200
        with _from(url, "127.0.22.2") as stranger:
            # Not a named proxy: its header is ignored, so it cannot lock out 10.9.9.8.
            for _ in range(10):
                stranger.get("/nodes", headers={**bearer("stw_bad"), "X-Forwarded-For": "10.9.9.8"})
        with _from(url, "127.0.22.1") as proxy:
            assert proxy.get("/nodes", headers={**bearer(ADMIN), "X-Forwarded-For": "10.9.9.8"}).status_code == 200


def test_trusted_proxies_must_be_addresses(settings: Settings) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="not an address or network: 'proxy.example'"):
        settings.api.trusted_proxies = ["proxy.example"]
