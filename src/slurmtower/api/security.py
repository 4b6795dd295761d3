"""Who is asking and what they may do. Every route declares one permission.

Roles and principals are :mod:`slurmtower.principal`'s (re-exported here). Anonymous
callers reach only ``public`` routes, and read routes when ``auth.anonymous_read`` is on.

Credentials, in the order they are tried:

1. ``Authorization: Bearer <token>`` (or, for the dashboard, the ``slurmtower_token``
   cookie): a token whose SHA-256 is listed in ``auth.tokens``;
2. the same bearer value as a JWT, verified against ``auth.jwt_key`` (an HMAC secret or a
   PEM public key) or the keys published at ``auth.jwt_jwks_url``; the role comes from the
   ``auth.jwt_role_claim`` claim (a string or a list: the highest known role wins) and the
   name from ``preferred_username``, ``name`` or ``sub``;
3. an ``authenticate_other`` hook in ``Services`` (tests, plugins): ``hook(token)``
   returns a :class:`Principal` or None; a plain function runs in a thread (it may look the
   token up in a database), a coroutine function on the event loop.

Checking a token costs microseconds, so it runs on the event loop: a thread hop per request
halves the throughput of cached reads and multiplies their p99. Only blocking work leaves
the loop: fetching the JWKS (when it is older than five minutes, or does not know a token's
``kid``) and a plain ``authenticate_other`` hook. The outcome is kept on the request, so the
cached fast path (:class:`~slurmtower.api.reads.FastReads`) and the route it may hand over
to check a request (and count a failure) once.

Failed attempts are counted per client address; past ``auth.login_failures_per_minute`` the
address gets 429 for every credential (even a right one) until the minute has passed. Failures
are logged with the address and the reason, never with the token. The count is the
deployment's (:class:`SharedLoginLimiter`): every failure is written to the store's
``login_failures`` table, which every worker process reads, so failures spread over workers
add up. The store is only touched for failures and for addresses this process has seen fail
within the minute, and never on the event loop; a request with a valid token from any other
address is answered from memory.

Cookie credentials are only honoured on mutating requests that also send the
``X-Slurmtower-Request: 1`` header: a cross-site form cannot add a custom header, so a
browser tricked into posting to slurmtower carries no authority (CSRF).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypeVar

import jwt
from fastapi import Depends, Request
from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.errors import AuthenticationError, PermissionDenied, SlurmtowerError
from slurmtower.principal import (
    ANONYMOUS,
    CSRF_HEADER,
    ROLE_PERM,
    TOKEN_COOKIE,
    Perm,
    Principal,
    hash_token,
    new_token,
)
from slurmtower.settings import AuthSettings, TokenEntry
from slurmtower.store.schema import login_failures

__all__ = [
    "ANONYMOUS",
    "CSRF_HEADER",
    "ROLE_PERM",
    "TOKEN_COOKIE",
    "CurrentPrincipal",
    "LoginFailureStore",
    "LoginLimiter",
    "LoginRateLimited",
    "Perm",
    "Principal",
    "SharedLoginLimiter",
    "authenticate",
    "declared_perm",
    "hash_token",
    "new_token",
    "require",
]

log = logging.getLogger("slurmtower.auth")

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: Seconds of clock skew allowed on a JWT's ``exp`` by default (``auth.jwt_leeway``).
JWT_LEEWAY = 30
#: The longest caller name taken from a credential (the audit's ``who`` holds 255).
MAX_NAME = 255


class LoginRateLimited(AuthenticationError):
    """Too many failed logins from one address in the last minute."""

    http_status = 429
    title = "too many failed logins"


class LoginLimiter:
    """Failed-login counter per client address over a sliding minute.

    Memory is bounded: at most ``max_addresses`` addresses are tracked, the least recently
    failing ones are forgotten first.
    """

    def __init__(self, per_minute: int, *, window: float = 60.0, max_addresses: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.window = window
        self.max_addresses = max_addresses
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> deque[float] | None:
        times = self._failures.get(address)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[address]
            return None
        return times

    def retry_after(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: it may now)."""
        if self.per_minute <= 0 or address not in self._failures:
            return 0.0  # the common case, answered without the lock
        with self._lock:
            now = self._clock()
            times = self._recent(address, now)
            if times is None or len(times) < self.per_minute:
                return 0.0
            return max(0.0, times[-self.per_minute] + self.window - now)

    def knows(self, address: str) -> bool:
        """Whether ``address`` failed within the window as far as this limiter knows
        (answered without the lock; an expired entry may still say yes)."""
        return address in self._failures

    def failed(self, address: str, at: float | None = None) -> None:
        """Count a failure of ``address`` (now, or at ``at`` on this limiter's clock)."""
        with self._lock:
            now = self._clock()
            times = self._recent(address, now) or deque()
            times.append(now if at is None else at)
            self._keep(address, times)

    def learn(self, address: str, times: Iterable[float]) -> None:
        """Replace what is known of ``address`` by these failure times (another process's
        count included: the store's)."""
        with self._lock:
            now = self._clock()
            recent = deque(sorted(t for t in times if t > now - self.window))
            if recent:
                self._keep(address, recent)
            else:
                self._failures.pop(address, None)

    def _keep(self, address: str, times: deque[float]) -> None:
        # Only the last per_minute failures matter for the decision.
        while len(times) > max(self.per_minute, 1):
            times.popleft()
        self._failures[address] = times
        self._failures.move_to_end(address)
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)


class LoginFailureStore:
    """The failed logins of a whole deployment: the store's ``login_failures`` table.

    Blocking (SQLAlchemy): call it off the event loop. Times are unix seconds, the clock every
    process (and host) of a deployment shares. Rows older than the window are deleted at most
    once per window, by whichever process records a failure.

    Args:
        engine: the store's engine (with its schema mapping, e.g. ``EventStore.engine``).
        window: seconds a failure counts.
    """

    def __init__(self, engine: Engine, *, window: float = 60.0) -> None:

        self._engine = engine
        self._table = login_failures
        self.window = window
        self._purged_at = float("-inf")

    def record(self, address: str, at: float, limit: int) -> list[float]:
        """Add a failure of ``address`` at ``at``; return the times of its last ``limit``
        failures within the window (this one included)."""
        table = self._table
        with self._engine.begin() as conn:
            conn.execute(insert(table).values(address=address[:255], at=at))
            if at - self._purged_at > self.window:
                conn.execute(delete(table).where(table.c.at <= at - self.window))
                self._purged_at = at
            return self._recent(conn, address, at, limit)

    def recent(self, address: str, now: float, limit: int) -> list[float]:
        """The times of the last ``limit`` failures of ``address`` within the window."""
        with self._engine.connect() as conn:
            return self._recent(conn, address, now, limit)

    def _recent(self, conn: Any, address: str, now: float, limit: int) -> list[float]:
        table = self._table
        rows = conn.execute(select(table.c.at)
                            .where(table.c.address == address[:255], table.c.at > now - self.window)
                            .order_by(table.c.at.desc()).limit(max(limit, 1)))
        return [float(at) for (at,) in rows]


_T = TypeVar("_T")
#: One thread per process runs the store's limiter calls: a flood of failed logins queues
#: there instead of taking the threads every route's blocking work shares.
_store_thread: ThreadPoolExecutor | None = None


async def _off_loop(call: Callable[..., _T], *args: Any) -> _T:
    global _store_thread
    if _store_thread is None:
        _store_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slurmtower-login-failures")
    return await asyncio.get_running_loop().run_in_executor(_store_thread, call, *args)


class SharedLoginLimiter:
    """A :class:`LoginLimiter` whose counts are the deployment's, through a
    :class:`LoginFailureStore` (without one, the process's own).

    In memory: the addresses this process has seen fail within the window. An address it has
    not seen is let through without touching the store (every valid token's request); one it
    has seen is looked up in the store (to add the failures other processes saw) unless it is
    already over the limit here. Each failure is written, and the store's count read back in
    the same transaction. When the store fails, the process's own count decides (logged).

    An address that failed only on other workers is checked here once it fails here too:
    the workers that never saw it may verify one attempt each before they know.
    """

    def __init__(self, per_minute: int, store: LoginFailureStore | None = None, *,
                 window: float = 60.0) -> None:
        self.per_minute = per_minute
        self.store = store
        self.local = LoginLimiter(per_minute, window=window, clock=time.time)
        #: Calls made to the store (for tests).
        self.store_calls = 0

    async def retry_after(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: it may now)."""
        local = self.local
        if self.per_minute <= 0 or not local.knows(address):
            return 0.0  # the common case: no lock, no store
        wait = local.retry_after(address)
        if wait > 0 or self.store is None:
            return wait
        self.store_calls += 1
        try:
            times = await _off_loop(self.store.recent, address, time.time(), self.per_minute)
        except SQLAlchemyError as exc:
            log.warning("login failures: the store does not answer (%s); counting this process's only", exc)
            return wait
        local.learn(address, times)
        return local.retry_after(address)

    async def failed(self, address: str) -> None:
        """Count a failed login from ``address``, in the store too."""
        if self.per_minute <= 0:
            return
        now = time.time()
        self.local.failed(address, now)
        if self.store is None:
            return
        self.store_calls += 1
        try:
            times = await _off_loop(self.store.record, address, now, self.per_minute)
        except SQLAlchemyError as exc:
            log.warning("login failures: the store does not answer (%s); counting this process's only", exc)
            return
        self.local.learn(address, times)


class _JwksKeys:
    """The signing keys published at a JWKS URL, looked up without I/O.

    :meth:`lookup` runs on the event loop and says when a fetch is due: the set is older than
    ``lifespan`` or lacks the asked ``kid`` (a rotated key). :meth:`fetch` (blocking, run it in
    a thread) asks the URL at most once per ``cooldown``, so a stream of tokens naming unknown
    keys cannot hammer the identity provider; when the URL fails, the last good set is kept.
    """

    def __init__(self, url: str, *, lifespan: float = 300.0, cooldown: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
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


class _JwtVerifier:
    """Verifies JWTs against a fixed key or the keys of a JWKS URL."""

    def __init__(self, auth: AuthSettings) -> None:
        self._auth = auth
        self.jwks = _JwksKeys(auth.jwt_jwks_url) if auth.jwt_jwks_url else None
        self.key = auth.jwt_signing_key()

    @property
    def enabled(self) -> bool:
        return self.key is not None or self.jwks is not None

    async def verify(self, token: str) -> Principal:
        """The token's principal, checked on the event loop (only a JWKS fetch goes to a thread).

        A token with an ``iss`` must name one of ``auth.jwt_issuers`` and carry
        ``auth.jwt_audience``; one without (Slurm's own, naming its user in ``sun``) is taken
        only when ``auth.slurm_token_role`` is set, as that role.

        Raises :class:`AuthenticationError` for a bad, expired, foreign or unknown-key token.
        """
        auth = self._auth
        key: Any
        algorithms = list(auth.jwt_algorithms)
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
            slurm = "iss" not in unverified and "sun" in unverified
            if slurm and auth.slurm_token_role is None:
                raise AuthenticationError("Slurm's own tokens are not accepted here (auth.slurm_token_role)")
            if self.jwks is not None and not slurm:
                kid = jwt.get_unverified_header(token).get("kid")
                if not isinstance(kid, str):
                    raise jwt.PyJWKClientError("the token names no key (kid)")
                jwk = self.jwks.lookup(kid)
                if jwk is None:
                    jwk = await asyncio.to_thread(self.jwks.fetch, kid)
                key = jwk.key
                # Pinned to the key's own algorithm, never an HMAC one.
                algorithms = [a for a in algorithms if a == jwk.algorithm_name and not a.startswith("HS")]
            else:
                if self.key is None:
                    raise AuthenticationError("Slurm's own tokens need auth.jwt_key")
                key = self.key
                # Never let a public key double as an HMAC secret (algorithm confusion).
                is_pem = (key.encode() if isinstance(key, str) else key).lstrip().startswith(b"-----BEGIN")
                algorithms = [a for a in algorithms if a.startswith("HS") != is_pem]
            if slurm:
                claims: dict[str, Any] = jwt.decode(
                    token, key, algorithms=[a for a in algorithms if a.startswith("HS")],
                    options={"require": ["exp", "sun"], "verify_aud": False}, leeway=auth.jwt_leeway)
            else:
                claims = jwt.decode(
                    token, key, algorithms=algorithms, audience=auth.jwt_audience, issuer=auth.jwt_issuers,
                    options={"require": ["exp", "iss", "aud"]}, leeway=auth.jwt_leeway)
        except jwt.PyJWKClientError as exc:
            raise AuthenticationError(f"JWT signing key not found: {exc}") from exc
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError("JWT expired") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthenticationError("JWT from an issuer not accepted here (auth.jwt_issuers)") from exc
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"invalid JWT: {exc}") from exc
        expires_at = float(claims["exp"]) + auth.jwt_leeway
        if slurm:
            assert auth.slurm_token_role is not None
            if len(str(claims["sun"])) > MAX_NAME:
                raise AuthenticationError(f"JWT names a caller longer than {MAX_NAME} characters")
            return Principal(name=str(claims["sun"]), role=auth.slurm_token_role, via="slurm-jwt",
                             expires_at=expires_at)
        raw_role = claims.get(auth.jwt_role_claim)
        roles = [raw_role] if isinstance(raw_role, str) else list(raw_role or [])
        known = [r for r in roles if isinstance(r, str) and r in ROLE_PERM]
        name = next((str(claims[c]) for c in ("preferred_username", "name", "sub") if claims.get(c)), None)
        if name is None:
            raise AuthenticationError("JWT names nobody (no sub claim)")
        if len(name) > MAX_NAME:
            raise AuthenticationError(f"JWT names a caller longer than {MAX_NAME} characters")
        role = max(known, key=lambda r: ROLE_PERM[r]) if known else "none"
        return Principal(name=name, role=role, via="jwt", expires_at=expires_at)


def _looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


class _AuthState:
    """One app's limiter, JWT verifier and table of static tokens."""

    def __init__(self, auth: AuthSettings, store: Engine | None = None) -> None:
        self.limiter = SharedLoginLimiter(auth.login_failures_per_minute,
                                          LoginFailureStore(store) if store is not None else None)
        self.verifier = _JwtVerifier(auth)
        self._auth = auth
        self._entries: list[TokenEntry] | None = None
        self._table: list[tuple[bytes, Principal]] = []

    def tokens(self) -> list[tuple[bytes, Principal]]:
        """(hex SHA-256, principal) per ``auth.tokens`` entry, rebuilt when the list is replaced."""
        if self._entries is not self._auth.tokens:
            self._table = [(e.sha256.lower().encode(), Principal(name=e.name, role=e.role))
                           for e in self._auth.tokens]
            self._entries = self._auth.tokens
        return self._table


def _state(request: Request) -> _AuthState:
    """The app's auth state, built on first use from the app's settings."""
    app_state = request.app.state
    found: _AuthState | None = getattr(app_state, "slurmtower_auth", None)
    if found is None:
        services = request.app.state.services
        store = services.event_store  # the deployment's store (the events module opens it)
        found = _AuthState(services.settings.auth, store.engine if store is not None else None)
        app_state.slurmtower_auth = found
    return found


def _client_address(request: Request) -> str:
    client = request.scope.get("client")
    return str(client[0]) if client else "unknown"


def _credential(request: Request) -> tuple[str, str] | None:
    """(token, where) from the Authorization header or the dashboard cookie."""
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("use 'Authorization: Bearer <token>'")
        return token.strip(), "header"
    cookie = request.cookies.get(TOKEN_COOKIE)
    if cookie:
        return cookie, "cookie"
    return None


async def _verify(request: Request, token: str) -> Principal:
    state = _state(request)
    digest = hash_token(token).encode()
    match: Principal | None = None
    # Compare against every entry so the time taken does not tell which one matched.
    for expected, principal in state.tokens():
        if hmac.compare_digest(expected, digest) and match is None:
            match = principal
    if match is not None:
        return match
    verifier = state.verifier
    if verifier.enabled and _looks_like_jwt(token):
        return await verifier.verify(token)
    extra: Callable[[str], Any] | None = request.app.state.services.authenticate_other
    found: Principal | None = None
    if extra is not None:
        found = await extra(token) if inspect.iscoroutinefunction(extra) else await asyncio.to_thread(extra, token)
    if found is None:
        raise AuthenticationError("invalid token")
    return found


async def authenticate(request: Request) -> Principal:
    """The caller's principal (anonymous when no credentials were sent).

    Checked once per request: a second call (the fast path, then the route) gets the same
    principal or the same error, so a failed login is counted once.

    Raises :class:`AuthenticationError` for bad credentials (401) and
    :class:`LoginRateLimited` (429) for an address with too many recent failures.
    """
    done: Principal | SlurmtowerError | None = getattr(request.state, "slurmtower_principal", None)
    if isinstance(done, Principal):
        return done
    if done is not None:
        raise done
    try:
        principal = await _authenticate(request)
    except SlurmtowerError as exc:
        request.state.slurmtower_principal = exc
        raise
    request.state.slurmtower_principal = principal
    return principal


async def _authenticate(request: Request) -> Principal:
    address = _client_address(request)
    try:
        credential = _credential(request)
    except AuthenticationError as exc:
        log.warning("failed login from %s: %s", address, exc.message)
        raise
    if credential is None:
        return ANONYMOUS
    token, where = credential
    limiter = _state(request).limiter
    wait = await limiter.retry_after(address)
    if wait > 0:
        log.warning("refused login from %s: too many failures (retry in %.0f s)", address, wait)
        raise LoginRateLimited(f"too many failed logins from {address}; retry in {wait:.0f} s",
                               retry_after=round(wait + 0.5))
    try:
        principal = await _verify(request, token)
    except AuthenticationError as exc:
        await limiter.failed(address)
        # The token itself is never logged, not even a prefix of it.
        log.warning("failed login from %s via %s: %s", address, where, exc.message)
        raise
    if (where == "cookie" and request.method not in _SAFE_METHODS
            and request.headers.get(CSRF_HEADER) != "1"):
        raise PermissionDenied(f"a request authenticated by cookie must send the {CSRF_HEADER}: 1 "
                               "header", param=CSRF_HEADER)
    return principal


def require(perm: Perm):  # type: ignore[no-untyped-def]
    """A dependency that lets the route run only for callers with ``perm``.

    Use it in ``dependencies=[require(Perm.READ)]`` or as a parameter to get the
    :class:`Principal`. The dependency carries ``__slurmtower_perm__`` so that the route
    classification test can read each route's declared permission.
    """

    async def dependency(request: Request) -> Principal:
        # Async, so that FastAPI calls it on the event loop rather than in a thread.
        if perm == Perm.PUBLIC:
            # Public routes never fail on credentials (a stale cookie must not break /health).
            try:
                return await authenticate(request)
            except AuthenticationError:
                return ANONYMOUS
        principal = await authenticate(request)
        settings = request.app.state.services.settings
        if principal is ANONYMOUS:
            if perm == Perm.READ and settings.auth.anonymous_read:
                return principal
            raise AuthenticationError("authentication required")
        if principal.perm < perm:
            raise PermissionDenied(f"{principal.name} ({principal.role}) may not do this: needs "
                                   f"{perm.name.lower()}")
        return principal

    dependency.__slurmtower_perm__ = perm  # type: ignore[attr-defined]
    return Depends(dependency)


def declared_perm(dependant_calls: list[Any]) -> Perm | None:
    """The permission declared by the first ``require(...)`` among these dependency callables."""
    for call in dependant_calls:
        found = getattr(call, "__slurmtower_perm__", None)
        if found is not None:
            return Perm(found)
    return None


CurrentPrincipal = Annotated[Principal, Depends(authenticate)]
