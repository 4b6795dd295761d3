"""``/ui/login`` and ``/ui/logout``: how a person gets a dashboard session and ends it.

Two ways in, one kind of session (:mod:`slurmtower.store.sessions`, kept by the server in the
store every process shares; the browser holds only its opaque id, in an HttpOnly cookie):

* **a token** (small sites): the login form posts it once (``POST /ui/login``, a plain form:
  no script needed); it is checked as a bearer token is (static, JWT), counted by the
  failed-login limiter, and never kept;
* **single sign-on** (``auth.oidc``): ``GET /ui/login/oidc`` sends the browser to the provider
  with a fresh ``state``, nonce and PKCE verifier (kept in the store, bound to this browser by
  a short-lived HttpOnly cookie); ``GET /ui/login/oidc/callback`` takes them back once, has
  :class:`~slurmtower.identity.OidcClient` exchange the code and check the ID token, maps the
  person's groups to a role and starts the session.

Every login gets a new session id; a token's session remembers the token (its SHA-256) and
its expiry, so that revoking or expiring the token ends the session too
(:mod:`slurmtower.api.security` judges both at every request). ``POST /ui/logout`` (the CSRF
header required, as for every cookie-authenticated change) ends the session in the store, so
every process refuses it from its next request (an open event stream ends within a second),
clears the cookie and, for a single sign-on session, answers with the provider's logout URL
when it offers one.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from slurmtower.api.deps import services_of
from slurmtower.api.reads import read_capped
from slurmtower.api.security import Perm, require, session_store, static_token_sha256, verify_token
from slurmtower.dashboard.render import render
from slurmtower.errors import (
    AuthenticationError,
    IdentityProviderUnavailable,
    PayloadTooLarge,
    PermissionDenied,
)
from slurmtower.identity import OidcClient
from slurmtower.principal import CSRF_HEADER, LOGIN_COOKIE, SESSION_COOKIE
from slurmtower.store.sessions import IdentityStoreError, SessionStore

__all__ = ["router"]

router = APIRouter(prefix="/ui", tags=["dashboard"], include_in_schema=False)

#: The largest login form read (a token, a JWT).
MAX_LOGIN_BODY = 16384
#: Seconds a sign-on may take at the provider (the login cookie's life).
LOGIN_WINDOW = 600


def _oidc(request: Request) -> OidcClient | None:
    """The app's OpenID client (None: ``auth.oidc`` is not set)."""
    settings = services_of(request).settings.auth.oidc
    if settings is None:
        return None
    found: OidcClient | None = getattr(request.app.state, "slurmtower_oidc", None)
    if found is None or found.settings is not settings:
        found = OidcClient(settings)
        request.app.state.slurmtower_oidc = found
    return found


def _secure(request: Request) -> bool:
    """Behind TLS (the connection's scheme, or a trusted proxy's ``X-Forwarded-Proto``)."""
    return request.url.scheme == "https"


def _page(request: Request, *, error: str | None = None, status_code: int = 200) -> HTMLResponse:
    auth = services_of(request).settings.auth
    return render("login.html", status_code=status_code, error=error,
                  sso_label=auth.oidc.label if auth.oidc is not None else None,
                  idle_minutes=auth.session_idle_minutes, hours=auth.session_hours)


def _same_site(request: Request) -> bool:
    """Whether a state-changing browser request comes from this site's own pages: a login form
    posted from another site (login CSRF) is refused. Browsers say where a request comes from
    (``Sec-Fetch-Site``, else ``Origin``); a client that says neither is no browser."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in {"same-origin", "none"}
    origin = request.headers.get("origin")
    if origin is None:
        return True
    own = urlsplit(str(request.url))
    return origin == f"{own.scheme}://{own.netloc}"


def _store(request: Request) -> SessionStore:
    """Where this app keeps sessions and sign-ons under way (503 without a store)."""
    store = session_store(request)
    if store is None:
        raise IdentityStoreError("sessions need slurmtower's store, and this service has none")
    return store


async def _start_session(request: Request, *, name: str, role: str, via: str,
                         id_token: str | None = None, groups: tuple[str, ...] = (),
                         credential_sha256: str | None = None, credential_expires_at: float | None = None) -> str:
    # Of a person's groups the session keeps those some cluster gives a role (group:<name>).
    wanted = services_of(request).settings.role_groups()
    kept = tuple(g for g in groups if g in wanted)
    return await asyncio.to_thread(_store(request).create, name=name, role=role, via=via, id_token=id_token,
                                   groups=kept, credential_sha256=credential_sha256,
                                   credential_expires_at=credential_expires_at)


def _with_session(response: Response, request: Request, sid: str) -> Response:
    auth = services_of(request).settings.auth
    response.set_cookie(SESSION_COOKIE, sid, max_age=int(auth.session_hours * 3600), path="/",
                        httponly=True, secure=_secure(request), samesite="lax")
    return response


@router.get("/login", response_class=HTMLResponse, dependencies=[require(Perm.PUBLIC)])
async def login_page(request: Request) -> HTMLResponse:
    """The login page: a token form, and the single sign-on link when ``auth.oidc`` is set."""
    return _page(request)


@router.post("/login", response_class=HTMLResponse, dependencies=[require(Perm.PUBLIC)])
async def login_with_token(request: Request) -> Response:
    """A token posted from the login form becomes a session (the token is not kept)."""
    if not _same_site(request):
        return _page(request, error="this login form was posted from another site", status_code=403)

    async def too_long() -> Exception:
        return PayloadTooLarge("the token is too long", param="token")

    try:
        body = await read_capped(request, MAX_LOGIN_BODY, too_long)
    except PayloadTooLarge as exc:
        return _page(request, error=exc.message, status_code=413)
    fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=5)
    token = (fields.get("token") or [""])[0].strip()
    if not token:
        return _page(request, error="paste a token", status_code=400)
    try:
        principal = await verify_token(request, token)
    except AuthenticationError as exc:
        return _page(request, error=f"login refused: {exc.message}", status_code=exc.http_status)
    if principal.perm < Perm.READ:
        return _page(request, error=f"{principal.name} ({principal.role}) may not read the dashboard",
                     status_code=403)
    # The session remembers the credential: revoked, expired (a static token's expires, a
    # JWT's exp) or removed from the config, it ends the session at the next request.
    sid = await _start_session(request, name=principal.name, role=principal.role, via="token",
                               credential_sha256=static_token_sha256(request, token),
                               credential_expires_at=principal.expires_at)
    return _with_session(RedirectResponse("/ui", status_code=303), request, sid)


@router.get("/login/oidc", dependencies=[require(Perm.PUBLIC)])
async def login_with_oidc(request: Request) -> Response:
    """Off to the provider, with a fresh state, nonce and PKCE verifier."""
    oidc = _oidc(request)
    if oidc is None:
        return _page(request, error="single sign-on is not configured here (auth.oidc)", status_code=404)
    store = _store(request)
    state, nonce, verifier, browser = (secrets.token_urlsafe(32) for _ in range(4))
    try:
        url = await oidc.authorization_url(state=state, nonce=nonce, verifier=verifier)
    except IdentityProviderUnavailable as exc:
        return _page(request, error=exc.message, status_code=503)
    await asyncio.to_thread(store.begin_login, state=state, browser=browser, verifier=verifier, nonce=nonce)
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(LOGIN_COOKIE, browser, max_age=LOGIN_WINDOW, path="/ui/login", httponly=True,
                        secure=_secure(request), samesite="lax")
    return response


@router.get("/login/oidc/callback", dependencies=[require(Perm.PUBLIC)])
async def oidc_callback(
    request: Request,
    code: Annotated[str | None, Query(max_length=4096)] = None,
    state: Annotated[str | None, Query(max_length=512)] = None,
    error: Annotated[str | None, Query(max_length=200)] = None,
    error_description: Annotated[str | None, Query(max_length=1000)] = None,
) -> Response:
    """Back from the provider: the sign-on it names, once, for this browser; then the session."""
    oidc = _oidc(request)
    if oidc is None:
        return _page(request, error="single sign-on is not configured here (auth.oidc)", status_code=404)
    if error is not None:
        return _page(request, error=f"the identity provider refused: {error_description or error}",
                     status_code=401)
    browser = request.cookies.get(LOGIN_COOKIE)
    store = session_store(request)
    if not code or not state or not browser or store is None:
        return _page(request, error="this sign-on is not one this browser began: log in again", status_code=400)
    pending = await asyncio.to_thread(store.take_login, state=state, browser=browser)
    if pending is None:
        return _page(request, error="this sign-on is unknown, used already or too old: log in again",
                     status_code=400)
    try:
        person = await oidc.finish(code=code, verifier=pending.verifier, nonce=pending.nonce)
    except (AuthenticationError, PermissionDenied, IdentityProviderUnavailable) as exc:
        return _page(request, error=exc.message, status_code=exc.http_status)
    sid = await _start_session(request, name=person.name, role=person.role, via="oidc", id_token=person.id_token,
                               groups=person.groups)
    response = _with_session(RedirectResponse("/ui", status_code=303), request, sid)
    response.delete_cookie(LOGIN_COOKIE, path="/ui/login")
    return response


@router.post("/logout", dependencies=[require(Perm.PUBLIC)])
async def logout(request: Request) -> JSONResponse:
    """End this browser's session here (every process) and say where to go next: the
    provider's logout for a single sign-on session when it offers one, else the login page."""
    if request.headers.get(CSRF_HEADER) != "1":
        raise PermissionDenied(f"logging out needs the {CSRF_HEADER}: 1 header", param=CSRF_HEADER)
    sid = request.cookies.get(SESSION_COOKIE)
    then = "/ui/login"
    store = session_store(request)
    if sid and store is not None:
        ended = await asyncio.to_thread(store.end, sid)
        oidc = _oidc(request)
        if ended is not None and ended.via == "oidc" and oidc is not None:
            back = oidc.settings.redirect_url.removesuffix("/oidc/callback")
            then = await oidc.logout_url(id_token=ended.id_token, then=back) or then
    body: dict[str, Any] = {"ended": bool(sid), "next": then}
    response = JSONResponse(body)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, secure=_secure(request), samesite="lax")
    return response
