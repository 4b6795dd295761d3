"""The dashboard's sessions: a token login becomes a server-kept session (an HttpOnly cookie
holding an opaque id, never the token), ended by logout in every process of a deployment,
by its idle and absolute timeouts; login CSRF; the security headers of every answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurmtower.api import create_app
from slurmtower.principal import SESSION_COOKIE, hash_token
from slurmtower.settings import Settings
from slurmtower.store.engine import make_store_engine
from slurmtower.store.sessions import SessionStore
from slurmtower.store.tokens import TokenLedger
from tests.api_server import serving
from tests.auth_helpers import ADMIN, OPERATOR, READER, bearer, log_in, with_tokens
from tests.conftest import node_states, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = [pytest.mark.cluster]

SLURMTOWER = str(Path(sys.executable).with_name("slurmtower"))


def _cookie(sid: str, **headers: str) -> dict[str, str]:
    """Request headers sending the session cookie ``sid`` (and ``headers``)."""
    return {"Cookie": f"{SESSION_COOKIE}={sid}", **headers}


@pytest.fixture()
def quiet(settings: Settings) -> Settings:
    with_tokens(settings)
    settings.api.refresh_interval = 120
    settings.archiver.archive_usage_load = False
    return settings


@pytest.fixture()
def api(quiet: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(quiet)) as client:
        yield client


def test_a_token_login_is_a_session_no_script_can_read(api: TestClient) -> None:
    resp = api.post("/ui/login", data={"token": OPERATOR}, follow_redirects=False)
    assert (resp.status_code, resp.headers["location"]) == (303, "/ui")
    cookie = resp.headers["set-cookie"]
    sid = resp.cookies[SESSION_COOKIE]
    assert OPERATOR not in cookie and len(sid) >= 40
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain HTTP here; behind TLS it is Secure (the next test)
    assert api.get("/ui/whoami", headers=_cookie(sid)).json() == {
        "name": "otto", "role": "operator", "via": "token", "may_operate": True}
    # Every login is a new session; the raw token as a cookie is no credential at all.
    again = api.post("/ui/login", data={"token": OPERATOR}, follow_redirects=False).cookies[SESSION_COOKIE]
    assert again != sid
    api.cookies.clear()
    assert api.get("/ui/whoami", headers={"Cookie": f"slurmtower_token={OPERATOR}"}).status_code == 401
    assert api.get("/ui/whoami", headers=_cookie(OPERATOR)).status_code == 401


def test_a_refused_login_is_a_page_and_counts_as_a_failed_login(quiet: Settings) -> None:
    quiet.auth.login_failures_per_minute = 3
    with TestClient(create_app(quiet)) as api:
        for _ in range(3):
            page = api.post("/ui/login", data={"token": "stw_wrong"}, follow_redirects=False)
            assert page.status_code == 401 and "login refused: invalid token" in page.text
            assert SESSION_COOKIE not in page.cookies
        limited = api.post("/ui/login", data={"token": READER}, follow_redirects=False)
        assert limited.status_code == 429 and "too many failed logins" in limited.text
        huge = api.post("/ui/login", content=b"token=" + b"x" * 20000,
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert huge.status_code == 413


def test_a_login_form_posted_from_another_site_is_refused(api: TestClient) -> None:
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
        resp = api.post("/ui/login", data={"token": READER}, headers=headers, follow_redirects=False)
        assert resp.status_code == 403 and SESSION_COOKIE not in resp.cookies, headers
    same = api.post("/ui/login", data={"token": READER}, follow_redirects=False,
                    headers={"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"})
    assert same.status_code == 303


def test_logout_ends_the_session_in_every_process(quiet: Settings) -> None:
    """Two apps on one store (two processes of a deployment): a session made on one is taken
    by the other; logging out on the first ends it on both, at their next request."""
    with TestClient(create_app(quiet)) as one, TestClient(create_app(quiet)) as two:
        sid = log_in(one, ADMIN)
        assert two.get("/ui/whoami", headers=_cookie(sid)).json()["name"] == "ada"
        refused = one.post("/ui/logout")  # a cookie-authenticated change needs the CSRF header
        assert refused.status_code == 403 and refused.json()["param"] == "x-slurmtower-request"
        out = one.post("/ui/logout", headers={"X-Slurmtower-Request": "1"})
        assert out.json() == {"ended": True, "next": "/ui/login"}
        assert 'slurmtower_session=""' in out.headers["set-cookie"]
        one.cookies.clear()
        assert one.get("/ui/whoami", headers=_cookie(sid)).status_code == 401
        assert two.get("/ui/whoami", headers=_cookie(sid)).status_code == 401
        page = one.get("/ui", headers=_cookie(sid, Accept="text/html"),
                       follow_redirects=False)
        assert page.status_code == 401 and "/ui/login" in page.text


def test_sessions_end_when_idle_and_at_their_absolute_end(quiet: Settings) -> None:
    """The store's clock moved by hand: unused for an hour, or twelve hours after login."""
    engine = make_store_engine(quiet.effective_store_url())
    from slurmtower.store.migrate import check_or_create

    check_or_create(engine)
    now = [1_000_000.0]
    store = SessionStore(engine, idle=3600, lifetime=12 * 3600, clock=lambda: now[0])
    sid = store.create(name="rita", role="reader", via="token")
    now[0] += 3599
    assert store.get(sid) is not None  # used: the idle clock starts again
    now[0] += 3599
    assert store.get(sid) is not None
    now[0] += 3601
    assert store.get(sid) is None  # an hour unused
    busy = store.create(name="rita", role="reader", via="token")
    for _ in range(14):  # 42,000 s, each step within the idle hour
        now[0] += 3000
        assert store.get(busy) is not None
    now[0] += 3000
    assert store.get(busy) is None  # used all along, but twelve hours are over
    # A sign-on under way is given out once, to the browser that began it, for ten minutes.
    store.begin_login(state="s1", browser="b1", verifier="v" * 43, nonce="n1")
    assert store.take_login(state="s1", browser="b2") is None  # another browser: and it is gone
    assert store.take_login(state="s1", browser="b1") is None
    store.begin_login(state="s2", browser="b1", verifier="v" * 43, nonce="n2")
    assert store.take_login(state="s2", browser="b1").nonce == "n2"  # type: ignore[union-attr]
    assert store.take_login(state="s2", browser="b1") is None  # replayed
    store.begin_login(state="s3", browser="b1", verifier="v" * 43, nonce="n3")
    now[0] += 601
    assert store.take_login(state="s3", browser="b1") is None  # too late
    engine.dispose()


def test_every_answer_carries_the_security_headers(quiet: Settings) -> None:
    """CSP without inline script and no framing, nosniff, Referrer-Policy on pages, API
    answers and the cached fast path; HSTS only behind TLS, as a trusted proxy says."""
    quiet.api.trusted_proxies = ["127.0.0.1"]
    with serving(create_app(quiet)) as url, httpx.Client(base_url=url, timeout=10) as http:
        answers = [http.get("/ui/login"), http.get("/health"), http.get("/nodes", headers=bearer(READER)),
                   http.get("/nodes", headers=bearer(READER)), http.get("/nodes"), http.get("/openapi.json")]
        for resp in answers:
            csp = resp.headers["content-security-policy"]
            assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp, resp.url
            assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
            assert resp.headers["x-content-type-options"] == "nosniff"
            assert resp.headers["referrer-policy"] == "same-origin"
            assert "strict-transport-security" not in resp.headers
        tls = http.post("/ui/login", data={"token": READER}, headers={"X-Forwarded-Proto": "https"},
                        follow_redirects=False)
        assert tls.headers["strict-transport-security"] == "max-age=31536000"
        assert "Secure" in tls.headers["set-cookie"]
        assert "<script>" not in http.get("/ui/login").text
        # (a Secure cookie is not kept by a client speaking plain HTTP: read it off the header)
        sid = tls.headers["set-cookie"].split(";")[0].split("=", 1)[1]
        for path in ("/ui", "/ui/nodes/n1", "/ui/jobs"):
            page = http.get(path, headers=_cookie(sid, **{"X-Forwarded-Proto": "https"}))
            assert page.status_code == 200 and "<script>" not in page.text, path


def test_a_token_past_its_expiry_is_refused(quiet: Settings) -> None:
    from datetime import UTC, datetime, timedelta

    from slurmtower.settings import TokenEntry

    past, future = datetime.now(UTC) - timedelta(seconds=1), datetime.now(UTC) + timedelta(days=1)
    quiet.auth.tokens = [TokenEntry(name="old", role="reader", sha256=hash_token("stw_old"), expires=past),
                         TokenEntry(name="new", role="reader", sha256=hash_token("stw_new"), expires=future)]
    with TestClient(create_app(quiet)) as api:
        resp = api.get("/nodes", headers=bearer("stw_old"))
        assert resp.status_code == 401 and resp.json()["detail"].startswith("the token of old expired at ")
        assert api.get("/nodes", headers=bearer("stw_new")).status_code == 200
    with pytest.raises(ValueError, match="time zone"):
        TokenEntry(name="x", role="reader", sha256=hash_token("x"), expires=datetime(2027, 1, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="sha256"):
        TokenEntry(name="x", role="reader", sha256="not-a-digest")


def test_a_revoked_token_is_refused_by_every_process_at_its_next_request(quiet: Settings, devcluster: Any) -> None:
    """Two apps on one store, both used by otto lately; ``slurmtower token revoke otto``
    (another process); the very next request with otto's token is refused by both, a read as an
    act (issue 41: a quiet process let it hold a job once more), the others go on. ``token list``
    shows the last use."""
    entries = [e.model_dump(mode="json") for e in quiet.auth.tokens]
    env = {**os.environ, "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(quiet.state_dir), "SLURMTOWER_AUTH__TOKENS": json.dumps(entries)}
    with TestClient(create_app(quiet)) as one, TestClient(create_app(quiet)) as two:
        for api in (one, two):
            assert api.get("/nodes", headers=bearer(OPERATOR)).status_code == 200
        out = subprocess.run([SLURMTOWER, "token", "revoke", "otto"], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("revoked the token of otto")
        held = one.post("/actions/slurm.node.drain", headers=bearer(OPERATOR),
                        json={"nodes": "n4", "reason": "a revoked token's drain"})
        assert (held.status_code, held.json()["detail"]) == (401, "the token of otto is revoked")
        for api in (two, one):
            resp = api.get("/nodes", headers=bearer(OPERATOR))
            assert (resp.status_code, resp.json()["detail"]) == (401, "the token of otto is revoked")
            assert api.get("/nodes", headers=bearer(READER)).status_code == 200
        assert "DRAIN" not in node_states()["n4"]
        ledger = TokenLedger.open(quiet.effective_store_url())
        wait_for(lambda: ledger.records().get(hash_token(READER), False) and ledger.records()[hash_token(READER)]
                 .last_used_at, timeout=5, what="rita's use to be recorded")
        ledger.close()
    listed = subprocess.run([SLURMTOWER, "token", "list", "-o", "json"], env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["otto"]["revoked"] and rows["otto"]["last_used"] and rows["otto"]["last_address"] == "testclient"
    assert rows["rita"]["revoked"] is None and rows["rita"]["last_used"]
    assert rows["ada"]["last_used"] is None  # never used
    again = subprocess.run([SLURMTOWER, "token", "revoke", "otto"], env=env, capture_output=True, text=True,
                           timeout=60, check=True)
    assert again.stdout.strip() == "the token of otto was already revoked"
    unknown = subprocess.run([SLURMTOWER, "token", "revoke", "nobody"], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "slurmtower: error: no token named 'nobody' in auth.tokens (known: rita, otto, ada)"


def test_a_session_keeps_the_groups_it_was_given_within_bounds(quiet: Settings) -> None:
    """What a sign-on hands the store of a person's groups (those some cluster gives a role)
    comes back with the session; more than the bound, or a name past 255 characters, is not kept."""
    from slurmtower.store.migrate import check_or_create
    from slurmtower.store.sessions import MAX_SESSION_GROUPS

    engine = make_store_engine(quiet.effective_store_url())
    check_or_create(engine)
    store = SessionStore(engine, idle=3600, lifetime=3600)
    sid = store.create(name="rita", role="reader", via="oidc", groups=("gpu-ops", "x" * 256, "hpc"))
    row = store.get(sid)
    assert row is not None and row.groups == ("gpu-ops", "hpc")
    many = store.create(name="otto", role="reader", via="oidc", groups=tuple(f"g{i}" for i in range(500)))
    row = store.get(many)
    assert row is not None and len(row.groups) == MAX_SESSION_GROUPS and row.groups[0] == "g0"
    plain = store.get(store.create(name="tok", role="reader", via="token"))
    assert plain is not None and plain.groups == ()
