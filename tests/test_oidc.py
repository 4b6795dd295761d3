"""Single sign-on against a real OpenID provider (panva's ``oidc-provider`` on loopback,
``tests/oidc_provider.py``), in Chromium: login with PKCE, groups mapped to roles, a person
with no mapped group refused, logout here and at the provider, an expired session, a replayed
``state``, CSRF on a drain from the dashboard; and the ID token's checks on their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import update

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.errors import AuthenticationError, PermissionDenied
from slurmtower.identity import OidcClient
from slurmtower.settings import Settings, load_settings
from slurmtower.store.engine import make_store_engine
from slurmtower.store.schema import web_sessions
from tests.api_server import free_port, serving
from tests.auth_helpers import with_tokens
from tests.conftest import node_states, wait_for
from tests.oidc_provider import CLIENT_ID, OidcProvider
from tests.ui_browser import browser  # noqa: F401 - the Chromium fixture

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    idp = OidcProvider(port=free_port(), tower_port=free_port())
    idp.start(tmp_path_factory.mktemp("oidc") / "provider.log")
    yield idp
    idp.stop()


@pytest.fixture(scope="module")
def tower_settings(devcluster: DevCluster, provider: OidcProvider,
                   tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = with_tokens(load_settings(devcluster.tower_conf, environ={}))
    settings.state_dir = tmp_path_factory.mktemp("tower")
    settings.actions.breaker_enabled = False
    settings.api.refresh_in_subprocess = False
    settings.archiver.archive_usage_load = False
    settings.auth.oidc = provider.settings()
    return settings


@pytest.fixture(scope="module")
def tower(tower_settings: Settings, provider: OidcProvider) -> Iterator[str]:
    """slurmtower with sign-on, at the address the provider's client redirects to."""
    with serving(create_app(tower_settings), 30, port=provider.tower_port) as url:
        yield url


def _sign_on(chromium: Any, tower: str, who: str) -> tuple[Any, Any]:
    """A new browser context signing on as ``who`` (the login page's link, the provider's
    sign-in and consent pages); returns (context, page) where the sign-on ended."""
    context = chromium.new_context()
    page = context.new_page()
    page.goto(f"{tower}/ui")
    page.wait_for_url(f"{tower}/ui/login")
    page.click("#sso")
    page.fill("input[name=login]", who)
    page.fill("input[name=password]", "any")
    page.click("button[type=submit]")
    page.click("button:has-text('Continue')")  # the provider's consent page
    page.wait_for_load_state()
    return context, page


def _session_of(context: Any) -> str:
    return next(c["value"] for c in context.cookies() if c["name"] == "slurmtower_session")


@pytest.mark.parametrize(("who", "role", "can_drain"), [("alice", "user", False), ("otto", "operator", True)])
def test_sign_on_maps_groups_to_roles(browser: Any, tower: str, who: str, role: str, can_drain: bool) -> None:  # noqa: F811
    context, page = _sign_on(browser, tower, who)
    assert page.url == f"{tower}/ui"
    assert page.locator("header .who").inner_text().split()[:2] == [who, role]
    cookie = next(c for c in context.cookies() if c["name"] == "slurmtower_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert page.evaluate("document.cookie") == ""  # no script can read it
    whoami = page.evaluate("fetch('/ui/whoami').then(r => r.json())")
    assert whoami == {"name": who, "role": role, "via": "oidc", "may_operate": can_drain}
    page.goto(f"{tower}/ui/nodes/n1")
    assert (page.locator("button.act").count() > 0) == can_drain
    context.close()


def test_a_person_without_a_mapped_group_is_refused(browser: Any, tower: str) -> None:  # noqa: F811
    context, page = _sign_on(browser, tower, "carol")
    assert page.url.startswith(f"{tower}/ui/login/oidc/callback")
    assert "none of their groups has a role here" in page.locator("#login-error").inner_text()
    assert not [c for c in context.cookies() if c["name"] == "slurmtower_session"]
    context.close()


def test_logout_ends_the_session_here_and_at_the_provider(browser: Any, tower: str,  # noqa: F811
                                                          provider: OidcProvider) -> None:
    context, page = _sign_on(browser, tower, "alice")
    sid = _session_of(context)
    page.click("#logout")
    page.wait_for_url(f"{provider.issuer}/session/end**")
    page.click("button[name=logout]")  # "Yes, sign me out"
    page.wait_for_url(f"{tower}/ui/login**")
    with httpx.Client(base_url=tower, headers={"Cookie": f"slurmtower_session={sid}"}) as http:
        assert http.get("/ui/whoami").status_code == 401  # the old id is dead, not just forgotten
    # Signed out at the provider too: signing on again asks for the password again.
    page.goto(f"{tower}/ui/login")
    page.click("#sso")
    assert page.locator("input[name=password]").count() == 1
    context.close()


def test_an_expired_session_sends_the_browser_to_the_login_page(browser: Any, tower: str,  # noqa: F811
                                                                 tower_settings: Settings) -> None:
    context, page = _sign_on(browser, tower, "alice")
    sid = _session_of(context)
    engine = make_store_engine(tower_settings.effective_store_url())
    from slurmtower.store.sessions import digest

    with engine.begin() as conn:  # the session's twelve hours are over
        conn.execute(update(web_sessions).where(web_sessions.c.id_hash == digest(sid))
                     .values(expires_at=time.time() - 1))
    engine.dispose()

    def refused() -> bool:
        return bool(page.goto(f"{tower}/ui").status == 401)

    wait_for(refused, timeout=10, step=1, what="the expired session to be refused")
    page.wait_for_url(f"{tower}/ui/login")  # the 401 page sends the browser on to log in
    context.close()


def test_a_replayed_state_is_refused(browser: Any, tower: str) -> None:  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    callbacks: list[str] = []
    page.on("request", lambda r: callbacks.append(r.url) if "/ui/login/oidc/callback" in r.url else None)
    page.goto(f"{tower}/ui/login")
    page.click("#sso")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "any")
    page.click("button[type=submit]")
    login_cookie = [c for c in context.cookies() if c["name"] == "slurmtower_login"]
    page.click("button:has-text('Continue')")
    page.wait_for_url(f"{tower}/ui")
    assert len(callbacks) == 1 and parse_qs(urlsplit(callbacks[0]).query)["state"]
    assert len(login_cookie) == 1 and login_cookie[0]["httpOnly"]
    # The same code and state again, from the same browser, its login cookie put back (the
    # callback cleared it): the store gives a sign-on out once.
    context.add_cookies(login_cookie)
    page.goto(callbacks[0])
    assert "unknown, used already or too old" in page.locator("#login-error").inner_text()
    # From another browser (no login cookie): refused before the store is even asked.
    other = browser.new_context().new_page()
    other.goto(callbacks[0])
    assert "not one this browser began" in other.locator("#login-error").inner_text()
    context.close()


def test_a_cross_site_drain_carries_no_authority(browser: Any, tower: str, clean_nodes: Any) -> None:  # noqa: F811
    """An operator signed on; a page of another site posts a drain form to slurmtower, and a
    script of slurmtower's own origin posts without the CSRF header: neither drains."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    form = (f'<form id="f" method="post" action="{tower}/actions/slurm.node.drain" enctype="text/plain">'
            '<input name=\'{"nodes": "n2", "reason": "csrf", "x": "\' value=\'"}\'></form>'
            '<script>document.getElementById("f").submit()</script>').encode()

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(form)

        def log_message(self, *_args: object) -> None:
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    context, page = _sign_on(browser, tower, "otto")
    try:
        answers: list[int] = []
        page.on("response", lambda r: answers.append(r.status) if "/actions/" in r.url else None)
        page.goto(f"http://localhost:{evil.server_port}/")  # another site (another host name)
        wait_for(lambda: answers, timeout=10, what="the cross-site post")
        assert answers[0] in (401, 403)
        page.goto(f"{tower}/ui")
        status = page.evaluate("""fetch('/actions/slurm.node.drain', {method: 'POST',
            headers: {'Content-Type': 'application/json'},
            body: JSON.stringify({nodes: 'n2', reason: 'csrf'})}).then(r => r.status)""")
        assert status == 403
        assert "DRAIN" not in node_states()["n2"]
    finally:
        evil.shutdown()
        evil.server_close()
        context.close()


def _client(provider: OidcProvider) -> OidcClient:
    return OidcClient(provider.settings())


def _forged(provider: OidcProvider, **claims: Any) -> str:
    body = {"iss": provider.issuer, "aud": CLIENT_ID, "sub": "ada", "preferred_username": "ada",
            "groups": ["hpc-admins"], "nonce": "n", "iat": int(time.time()), "exp": int(time.time()) + 60, **claims}
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": claims.pop("kid", "unknown")})


def test_id_tokens_not_signed_by_the_provider_are_refused(provider: OidcProvider) -> None:
    """A token signed by another key, naming the provider's own key id or none it has."""
    client = _client(provider)
    jwks = httpx.get(f"{provider.issuer}/jwks", timeout=5).json()["keys"]
    for kid in ("unknown", jwks[0]["kid"]):
        with pytest.raises(AuthenticationError):
            asyncio.run(client.verify_id_token(_forged(provider, kid=kid), nonce="n"))


def test_groups_map_to_the_highest_role_and_unmapped_people_are_refused(provider: OidcProvider) -> None:
    client = _client(provider)
    both = client.person({"preferred_username": "otto", "groups": ["hpc-users", "hpc-staff"]}, "t")
    assert (both.name, both.role) == ("otto", "operator")
    with pytest.raises(PermissionDenied, match="none of their groups"):
        client.person({"preferred_username": "carol", "groups": ["finance"]}, "t")
    with pytest.raises(PermissionDenied):
        client.person({"preferred_username": "eve", "groups": "finance"}, "t")
    with pytest.raises(AuthenticationError, match="names nobody"):
        client.person({"preferred_username": "x" * 300, "groups": ["hpc-admins"]}, "t")


def test_a_discovery_document_of_another_issuer_is_refused(provider: OidcProvider) -> None:
    settings = provider.settings()
    settings.issuer = provider.issuer + "/"  # the provider says its issuer without the slash
    from slurmtower.errors import IdentityProviderUnavailable

    with pytest.raises(IdentityProviderUnavailable, match="names issuer"):
        asyncio.run(OidcClient(settings).discovery())


def test_oidc_without_a_role_map_refuses_to_start(tower_settings: Settings) -> None:
    from slurmtower.errors import ConfigError

    settings = tower_settings.model_copy(deep=True)
    assert settings.auth.oidc is not None
    settings.auth.oidc.roles = {}
    with pytest.raises(ConfigError, match="auth.oidc.roles"):
        create_app(settings)


