"""Who a person is, as their OpenID provider says: single sign-on's client side.

:class:`OidcClient` runs OpenID Connect's authorization code flow with PKCE (S256) against the
provider's discovery document, with Authlib's OAuth 2 client for the authorization URL and the
code exchange, and checks the ID token itself: signed by a key of the provider's JWKS (each
key pinned to the algorithm it publishes), ``iss`` exactly the configured issuer, ``aud`` this
client, not expired, and carrying the nonce this sign-on sent. The person's name comes from a
configured claim, their role from their groups through ``auth.oidc.roles``; a person with no
mapped group is refused. :class:`JwksKeys` (a JWKS, cached and re-read on an unknown ``kid``
at most every 10 s) also serves the API's machine tokens.

Network calls are the provider's only; nothing here keeps state between sign-ons (that is
the store's, :mod:`slurmtower.store.sessions`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import authlib.deprecate  # type: ignore[import-untyped]
import httpx
import jwt

with warnings.catch_warnings():
    # Authlib 1.9 asks for its httpx fork (httpx2) and warns when it runs on httpx itself
    # (its deprecate module, imported first, adds an "always" filter that this one overrides).
    warnings.simplefilter("ignore", authlib.deprecate.AuthlibDeprecationWarning)
    from authlib.common.errors import AuthlibBaseError  # type: ignore[import-untyped]
    from authlib.integrations.httpx_client import AsyncOAuth2Client  # type: ignore[import-untyped]

from slurmtower.errors import AuthenticationError, IdentityProviderUnavailable, PermissionDenied
from slurmtower.principal import MAX_NAME, ROLE_PERM
from slurmtower.settings import OidcSettings

__all__ = ["JwksKeys", "OidcClient", "Person"]

log = logging.getLogger("slurmtower.auth")

#: Seconds the provider's discovery document is kept.
DISCOVERY_LIFESPAN = 3600.0
#: Seconds of clock skew allowed on an ID token's times.
ID_TOKEN_LEEWAY = 30
#: The most groups taken from an ID token.
MAX_GROUPS = 1000


class JwksKeys:
    """The signing keys published at a JWKS URL, looked up without I/O.

    :meth:`lookup` runs on the event loop and says when a fetch is due: the set is older than
    ``lifespan`` or lacks the asked ``kid`` (a rotated key). :meth:`fetch` (blocking, run it in
    a thread) asks the URL at most once per ``cooldown``, so a stream of tokens naming unknown
    keys cannot hammer the identity provider; when the URL fails, the last good set is kept.
    """

    def __init__(self, url: str, *, lifespan: float = 300.0, cooldown: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self._client = jwt.PyJWKClient(url, cache_jwk_set=False, timeout=5)
        self.lifespan = lifespan
        self.cooldown = cooldown
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = float("-inf")
        self._tried_at = float("-inf")
        self._lock = threading.Lock()
        #: Fetches of the URL made (for tests).
        self.fetches = 0

    def _due(self, kid: str, now: float) -> bool:
        if now - self._tried_at < self.cooldown:
            return False
        return kid not in self._keys or now - self._fetched_at > self.lifespan

    def lookup(self, kid: str) -> jwt.PyJWK | None:
        """The key named ``kid``, or None when :meth:`fetch` must be called first.

        Raises :class:`jwt.PyJWKClientError` for a ``kid`` the set lacks when no fetch is due.
        """
        if self._due(kid, self._clock()):
            return None
        key = self._keys.get(kid)
        if key is None:
            raise jwt.PyJWKClientError(f"no signing key matches kid {kid!r}")
        return key

    async def key_for(self, token: str) -> jwt.PyJWK:
        """The key of the set that the token's header names (``kid``), fetched in a thread
        when due. Raises :class:`jwt.PyJWKClientError` for a token naming none or an unknown one."""
        kid = jwt.get_unverified_header(token).get("kid")
        if not isinstance(kid, str):
            raise jwt.PyJWKClientError("the token names no key (kid)")
        found = self.lookup(kid)
        return found if found is not None else await asyncio.to_thread(self.fetch, kid)

    def fetch(self, kid: str) -> jwt.PyJWK:
        """Fetch the set if still due (blocking) and return the key named ``kid``.

        Raises :class:`jwt.PyJWKClientError` when no key matches.
        """
        with self._lock:
            now = self._clock()
            if self._due(kid, now):
                self._tried_at = now
                self.fetches += 1
                try:
                    keys = self._client.get_signing_keys(refresh=True)
                except jwt.PyJWTError as exc:
                    if not self._keys:
                        raise jwt.PyJWKClientError(f"JWKS {self._client.uri} unavailable: {exc}") from exc
                    log.warning("JWKS %s unavailable, keeping the last keys: %s", self._client.uri, exc)
                else:
                    self._keys = {k.key_id: k for k in keys if k.key_id}
                    self._fetched_at = now
            key = self._keys.get(kid)
            if key is None:
                raise jwt.PyJWKClientError(f"no signing key matches kid {kid!r}")
            return key


@dataclass(frozen=True)
class Person:
    """Who signed on: their name, the role their groups map to, and the provider's ID token
    (for its logout)."""

    name: str
    role: str
    id_token: str
    groups: tuple[str, ...] = ()
    """Every group the ID token named (at most MAX_GROUPS)."""


class OidcClient:
    """One OpenID provider, as ``auth.oidc`` configures it."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self._discovery: dict[str, Any] | None = None
        self._discovered_at = float("-inf")
        self._lock = asyncio.Lock()
        self._jwks: JwksKeys | None = None

    def _known(self) -> dict[str, Any] | None:
        """The discovery document, while it is younger than :data:`DISCOVERY_LIFESPAN`."""
        if time.monotonic() - self._discovered_at < DISCOVERY_LIFESPAN:
            return self._discovery
        return None

    async def discovery(self) -> dict[str, Any]:
        """The provider's discovery document (cached for an hour); its ``issuer`` must be
        exactly the configured one."""
        if (known := self._known()) is not None:
            return known
        async with self._lock:
            if (known := self._known()) is not None:
                return known
            issuer = self.settings.issuer.rstrip("/")
            url = f"{issuer}/.well-known/openid-configuration"
            try:
                async with httpx.AsyncClient(timeout=self.settings.timeout) as http:
                    resp = await http.get(url)
                resp.raise_for_status()
                doc = resp.json()
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("OpenID discovery at %s failed: %s", url, exc)
                raise IdentityProviderUnavailable("the identity provider's discovery document cannot be read "
                                                  "(the log has the details)") from exc
            needed = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
            if not isinstance(doc, dict):
                doc = {}
            missing = [k for k in needed if not isinstance(doc.get(k), str)]
            if missing:
                raise IdentityProviderUnavailable("the identity provider's discovery document lacks "
                                                  + ", ".join(missing))
            if doc["issuer"] != self.settings.issuer:
                raise IdentityProviderUnavailable(f"the discovery document names issuer {doc['issuer']!r}, "
                                                  f"not auth.oidc.issuer {self.settings.issuer!r}")
            if self._jwks is None or self._jwks.url != doc["jwks_uri"]:
                self._jwks = JwksKeys(doc["jwks_uri"])
            self._discovery, self._discovered_at = doc, time.monotonic()
            return doc

    def _client(self) -> AsyncOAuth2Client:
        s = self.settings
        secret = s.client_secret.get_secret_value() if s.client_secret is not None else None
        return AsyncOAuth2Client(client_id=s.client_id, client_secret=secret, scope=" ".join(s.scopes),
                                 redirect_uri=s.redirect_url, code_challenge_method="S256",
                                 token_endpoint_auth_method="client_secret_basic" if secret else "none",
                                 timeout=s.timeout)

    async def authorization_url(self, *, state: str, nonce: str, verifier: str) -> str:
        """Where to send the browser to sign on (PKCE's challenge made from ``verifier``)."""
        doc = await self.discovery()
        async with self._client() as client:
            url, _ = client.create_authorization_url(doc["authorization_endpoint"], state=state, nonce=nonce,
                                                      code_verifier=verifier)
        return str(url)

    async def finish(self, *, code: str, verifier: str, nonce: str) -> Person:
        """Exchange the provider's ``code`` for tokens and check the ID token.

        Raises :class:`AuthenticationError` for a token that does not check out,
        :class:`PermissionDenied` for a person with no mapped group,
        :class:`IdentityProviderUnavailable` when the provider does not answer.
        """
        doc = await self.discovery()
        try:
            async with self._client() as client:
                token = await client.fetch_token(doc["token_endpoint"], code=code, code_verifier=verifier)
        except httpx.HTTPError as exc:
            log.warning("OpenID token endpoint %s failed: %s", doc["token_endpoint"], exc)
            raise IdentityProviderUnavailable("the identity provider's token endpoint does not answer") from exc
        except AuthlibBaseError as exc:  # the provider refused the code (an OAuth error answer)
            log.warning("OpenID token endpoint refused the code: %s", exc)
            raise AuthenticationError("the identity provider refused the sign-on (a code used twice, or too "
                                      "late): try again") from exc
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise AuthenticationError("the identity provider sent no ID token")
        claims = await self.verify_id_token(id_token, nonce=nonce)
        return self.person(claims, id_token)

    async def verify_id_token(self, id_token: str, *, nonce: str) -> dict[str, Any]:
        """The ID token's claims, checked (signature, issuer, audience, times, nonce)."""
        await self.discovery()
        assert self._jwks is not None
        try:
            jwk = await self._jwks.key_for(id_token)
            claims: dict[str, Any] = jwt.decode(
                id_token, jwk.key, algorithms=[jwk.algorithm_name], audience=self.settings.client_id,
                issuer=self.settings.issuer, leeway=ID_TOKEN_LEEWAY,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.PyJWKClientError as exc:
            raise AuthenticationError(f"the ID token's signing key is not the provider's: {exc}") from exc
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"the ID token does not check out: {exc}") from exc
        if not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
            raise AuthenticationError("the ID token's nonce is not this sign-on's")
        return claims

    def person(self, claims: dict[str, Any], id_token: str) -> Person:
        """Name and role from checked claims; :class:`PermissionDenied` without a mapped group."""
        s = self.settings
        name = claims.get(s.username_claim)
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise AuthenticationError(f"the ID token's {s.username_claim!r} claim names nobody usable")
        raw = claims.get(s.groups_claim)
        groups = [raw] if isinstance(raw, str) else list(raw)[:MAX_GROUPS] if isinstance(raw, list) else []
        roles = [s.roles[g] for g in groups if isinstance(g, str) and g in s.roles]
        if not roles:
            log.warning("sign-on refused for %s: none of their groups is in auth.oidc.roles", name)
            raise PermissionDenied(f"{name} signed on, but none of their groups has a role here (auth.oidc.roles)")
        role = max(roles, key=lambda r: ROLE_PERM.get(r, 0))
        return Person(name=name, role=role, id_token=id_token, groups=tuple(g for g in groups if isinstance(g, str)))

    async def logout_url(self, *, id_token: str | None, then: str) -> str | None:
        """The provider's logout (RP-initiated) for this session, back to ``then``; None when
        the provider offers none."""
        try:
            doc = await self.discovery()
        except IdentityProviderUnavailable:
            return None
        endpoint = doc.get("end_session_endpoint")
        if not isinstance(endpoint, str):
            return None
        query = {"client_id": self.settings.client_id, "post_logout_redirect_uri": then}
        if id_token:
            query["id_token_hint"] = id_token
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"
