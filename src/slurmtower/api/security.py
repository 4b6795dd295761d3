"""Who is asking and what they may do. Every route declares one permission.

Roles and principals are :mod:`slurmtower.principal`'s (re-exported here). Anonymous
callers reach only ``public`` routes, and read routes when ``auth.anonymous_read`` is on.

Credentials, in the order they are tried:

1. ``Authorization: Bearer <token>``: a token whose SHA-256 is listed in ``auth.tokens``;
2. the same bearer value as a JWT, verified against ``auth.jwt_key`` (an HMAC secret or a
   PEM public key) or the keys published at ``auth.jwt_jwks_url``; the role comes from the
   ``auth.jwt_role_claim`` claim (a string or a list: the highest known role wins) and the
   name from ``preferred_username``, ``name`` or ``sub``;
3. an ``authenticate_other`` hook in ``Services`` (tests, plugins): ``hook(token)``
   returns a :class:`Principal` or None; a plain function runs in a thread (it may look the
   token up in a database), a coroutine function on the event loop.

Checking a token's signature or digest costs microseconds, so it runs on the event loop: a
thread hop per request halves the throughput of cached reads and multiplies their p99. Only
blocking work leaves the loop: fetching the JWKS (when it is older than five minutes, or does
not know a token's ``kid``), a plain ``authenticate_other`` hook, and the store's word on
credentials (below). The outcome is kept on the request, so the cached fast path
(:class:`~slurmtower.api.reads.FastReads`) and the route it may hand over to check a request
(and count a failure) once.

**Whether a credential still holds is decided in one place** (:func:`_judge`), before every
read and every act, and again while a long answer (an event stream) goes on (:func:`lapsed`):

* a static token: its ``expires``, and the store's revocations (``slurmtower token revoke``,
  another process) as read *after the request arrived*: a revocation is effective at the next
  request, in every process of the deployment;
* a JWT or Slurm's own token: its signature, issuer, audience and ``exp`` (plus
  ``auth.jwt_leeway``). Nothing revokes a JWT before its ``exp``: keep them short-lived;
* a dashboard session (the store's row, read after the request arrived): its own ends (logout
  in any process, ``auth.session_idle_minutes`` unused, ``auth.session_hours`` after login)
  and the credential it was made from: a session made from a static token ends when that
  token is revoked, expires or leaves ``auth.tokens`` (and takes the entry's current name and
  role); one made from a JWT or Slurm token ends at its ``exp``, the credential's life being
  the most a login with it may give. A single sign-on session is not bound to the ID token's
  ``exp`` (minutes, by design of OpenID Connect: it proves the login, it is not the session);
  it lasts as the session settings say, and logging out at the provider is not seen here.

The store's word is read in a thread by one reader at a time (:class:`_StoreWord`): a request
waits for the next read that starts after it arrived, and all the requests arriving meanwhile
share that read, so a busy process has about one small read in flight, not one per request.
When the store does not answer, the revocations last read apply (logged) and sessions get 503.

Failed attempts are counted per client address; past ``auth.login_failures_per_minute`` the
address gets 429 for every credential (even a right one) until the minute has passed. Failures
are logged with the address and the reason, never with the token. The count is the
deployment's (:class:`SharedLoginLimiter`): every failure is written to the store's
``login_failures`` table, which every worker process reads, so failures spread over workers
add up. The store is only touched for failures and for addresses this process has seen fail
within the minute, and never on the event loop; a request with a valid token from any other
address is answered from memory.

Without an ``Authorization`` header, the dashboard's session cookie (``slurmtower_session``):
an opaque id of a session the server keeps in the store (:mod:`slurmtower.store.sessions`),
made at login (a token checked as above, or single sign-on: :mod:`slurmtower.api.routes.login`).
No credential is ever kept in a cookie. Session cookies are only honoured on mutating requests
that also send the ``X-Slurmtower-Request: 1`` header: a cross-site form cannot add a custom
header, so a browser tricked into posting to slurmtower carries no authority (CSRF).
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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import jwt
from fastapi import Depends, Request
from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.api.deps import cluster_of
from slurmtower.errors import AuthenticationError, PermissionDenied, SlurmtowerError
from slurmtower.identity import JwksKeys
from slurmtower.principal import (
    ANONYMOUS,
    CSRF_HEADER,
    MAX_NAME,
    ROLE_PERM,
    SESSION_COOKIE,
    Perm,
    Principal,
    hash_token,
    new_token,
    role_on_cluster,
)
from slurmtower.settings import AuthSettings, TokenEntry
from slurmtower.store.schema import login_failures
from slurmtower.store.sessions import SEEN_PRECISION, IdentityStoreError, SessionRow, SessionStore
from slurmtower.store.sessions import digest as session_digest
from slurmtower.store.tokens import CredentialReader, TokenLedger

__all__ = [
    "ANONYMOUS",
    "CSRF_HEADER",
    "ROLE_PERM",
    "SESSION_COOKIE",
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
    "lapsed",
    "new_token",
    "require",
    "session_store",
    "static_token_sha256",
    "verify_token",
]

log = logging.getLogger("slurmtower.auth")

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: Seconds of clock skew allowed on a JWT's ``exp`` by default (``auth.jwt_leeway``).
JWT_LEEWAY = 30


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


#: The most groups read from a JWT's groups claim.
MAX_JWT_GROUPS = 1000


class _JwtVerifier:
    """Verifies JWTs against a fixed key or the keys of a JWKS URL."""

    def __init__(self, auth: AuthSettings, role_groups: frozenset[str] = frozenset()) -> None:
        self._auth = auth
        #: The groups some cluster gives a role (``[[clusters]] roles``): what a JWT's groups keep.
        self.role_groups = role_groups
        self.jwks = JwksKeys(auth.jwt_jwks_url) if auth.jwt_jwks_url else None
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
                jwk = await self.jwks.key_for(token)
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
        role: str
        if slurm:
            assert auth.slurm_token_role is not None
            name: str | None = str(claims["sun"])
            role, via = auth.slurm_token_role, "slurm-jwt"
        else:
            raw_role = claims.get(auth.jwt_role_claim)
            roles = [raw_role] if isinstance(raw_role, str) else list(raw_role or [])
            known = [r for r in roles if isinstance(r, str) and r in ROLE_PERM]
            name = next((str(claims[c]) for c in ("preferred_username", "name", "sub") if claims.get(c)), None)
            role, via = (max(known, key=lambda r: ROLE_PERM[r]) if known else "none"), "jwt"
        if name is None:
            raise AuthenticationError("JWT names nobody (no sub claim)")
        if len(name) > MAX_NAME:
            raise AuthenticationError(f"JWT names a caller longer than {MAX_NAME} characters")
        groups: tuple[str, ...] = ()
        if self.role_groups:
            # the JWT's groups some cluster gives a role (group:<name>), the others not kept
            raw_groups = claims.get(auth.jwt_groups_claim)
            listed = [raw_groups] if isinstance(raw_groups, str) else raw_groups if isinstance(raw_groups, list) else []
            groups = tuple(g for g in listed[:MAX_JWT_GROUPS] if isinstance(g, str) and g in self.role_groups)
        return Principal(name=name, role=role, via=via, expires_at=float(claims["exp"]) + auth.jwt_leeway,
                         groups=groups)


def _looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


@dataclass(frozen=True)
class _Word:
    """What one read of the store said about credentials."""

    revoked: frozenset[str]
    """The SHA-256s of the revoked static tokens: all of them (:attr:`all_revoked`), or those
    the sessions read were made from."""
    sessions: dict[str, SessionRow]
    """The sessions asked for, by id digest (one missing: ended or unknown)."""
    sessions_error: IdentityStoreError | None = None
    """Why the sessions could not be read (their requests get it: 503)."""
    asked: frozenset[str] = frozenset()
    """The session id digests the read looked up."""
    whole: bool = True
    """Every part was read (not the revocations of an earlier read, the store failing)."""
    all_revoked: bool = True
    """:attr:`revoked` holds every revoked token (a bearer token's request asked for them)."""


class _StoreWord:
    """The store's word on this deployment's credentials (revoked static tokens, sessions),
    read for the requests that need it, in threads, by one reader at a time.

    A request waits for the next read that *starts after it arrived* (what another process
    revoked or ended before the request is seen by it), and every request arriving meanwhile
    shares that read: under load one small read is in flight at a time, not one per request.
    Uses are written after the answer, in the same way: a static token's at most once a minute
    (``token list``'s last use), a session's when it is :data:`SEEN_PRECISION` newer than the
    store's (the idle clock).

    A store with a change probe (SQLite: :meth:`TokenLedger.change_probe`) spares the read
    when nothing was committed to the store, by any process, since the last read began: that
    read's word is then the store's now (a sequential client would otherwise pay a thread hop
    and a read per request).

    When the store does not answer, the revocations last read apply (logged); sessions, which
    only the store knows, get :class:`IdentityStoreError` (503).
    """

    def __init__(self, ledger: TokenLedger | None, store: SessionStore | None,
                 reader: CredentialReader | None = None) -> None:
        self.ledger = ledger
        self.store = store
        self.reader = reader
        #: The revocations of the last read that answered.
        self.revoked: frozenset[str] = frozenset()
        #: Reads and writes made, reads spared by the change probe (for tests and the bench).
        self.reads = self.writes = self.spared = 0
        self._probe = ledger.change_probe() if ledger is not None else None
        #: The last whole word read, and the probe's value before that read began.
        self._last: tuple[int, _Word] | None = None
        self._next: asyncio.Future[_Word] | None = None
        self._keys: set[str] = set()
        self._all_revoked = False
        self._reader: asyncio.Task[None] | None = None
        self._token_uses: dict[str, tuple[str, float, str]] = {}
        self._queued_at: dict[str, float] = {}
        self._session_uses: dict[str, float] = {}
        self._session_seen: dict[str, float] = {}
        self._session_written: dict[str, float] = {}
        self._writer: asyncio.Task[None] | None = None

    async def word(self, session: str | None = None) -> _Word:
        """The store's word as of this call (with the session of id digest ``session``): of
        the next read that starts, or of the last one when nothing was committed since it began."""
        if self.reader is None:
            return _Word(revoked=frozenset(), sessions={})  # no store: nothing revoked, no session
        last = self._last
        if (last is not None and self._probe is not None
                and (session in last[1].asked if session is not None else last[1].all_revoked)
                and self._probe() == last[0]):
            self.spared += 1
            return last[1]  # nothing committed anywhere since that read began
        loop = asyncio.get_running_loop()
        found = self._next
        if found is None or found.get_loop() is not loop:  # (a test's app may outlive a loop)
            found = self._next = loop.create_future()
            self._keys, self._all_revoked = set(), False
        if session is not None:
            self._keys.add(session)
        else:
            self._all_revoked = True  # a bearer token's request: every revocation
        if self._reader is None or self._reader.done():
            self._reader = loop.create_task(self._read_all())
        return await asyncio.shield(found)

    async def _read_all(self) -> None:
        # One read at a time; the requests that arrived during one share the next.
        while self._next is not None:
            waiting, keys, revocations = self._next, self._keys, self._all_revoked
            self._next, self._keys, self._all_revoked = None, set(), False
            self.reads += 1
            # Taken before the read begins: equal later, nothing was committed since the read's view.
            version = self._probe() if self._probe is not None else None
            try:
                word = await asyncio.to_thread(self._read, keys, revocations)
            except Exception as exc:  # noqa: BLE001 - the waiting requests get it (none may hang)
                if not waiting.done():
                    waiting.set_exception(exc)
                continue
            if not waiting.done():
                waiting.set_result(word)
            self._last = (version, word) if version is not None and word.whole else None

    def _read(self, keys: set[str], revocations: bool) -> _Word:
        assert self.reader is not None
        try:
            revoked, rows = self.reader.read(keys, revocations=revocations)
        except IdentityStoreError as exc:
            log.warning("credentials: the store does not answer (%s); the last revocations read here apply",
                        exc.message)
            return _Word(revoked=self.revoked, sessions={}, sessions_error=exc, asked=frozenset(keys), whole=False)
        if revoked is None:  # sessions alone: the revocations of their tokens came with them
            return _Word(revoked=frozenset(r.credential_sha256 for r in rows.values()
                                           if r.credential_revoked and r.credential_sha256 is not None),
                         sessions=rows, asked=frozenset(keys), all_revoked=False)
        self.revoked = revoked
        return _Word(revoked=revoked, sessions=rows, asked=frozenset(keys))

    def token_used(self, sha256: str, name: str, address: str, now: float) -> None:
        """Note a use of a static token (written at most once a minute per token)."""
        if self.ledger is not None and now - self._queued_at.get(sha256, float("-inf")) > 60:
            self._queued_at[sha256] = now
            self._token_uses[sha256] = (name, now, address)
            self._write_uses()

    def session_used(self, key: str, now: float, seen_at: float) -> None:
        """Note a use of the session of id digest ``key`` (the store held ``seen_at``)."""
        # (what this process wrote lately counts too: the word may predate that write)
        seen_at = max(seen_at, self._session_written.get(key, seen_at))
        if now - seen_at >= SEEN_PRECISION:
            self._session_uses[key] = now
            self._session_seen.setdefault(key, seen_at)
            if len(self._session_written) > 10_000:
                self._session_written.clear()
            self._session_written[key] = now
            self._write_uses()

    def _write_uses(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_all())

    async def _write_all(self) -> None:
        # One writer at a time; the uses noted while it writes go in its next round.
        while self._token_uses or self._session_uses:
            tokens, self._token_uses = self._token_uses, {}
            sessions, self._session_uses = self._session_uses, {}
            seen, self._session_seen = self._session_seen, {}
            self.writes += 1
            try:
                await asyncio.to_thread(self._write, tokens, sessions, seen)
            except IdentityStoreError as exc:
                log.warning("credentials: uses of tokens and sessions not recorded (%s)", exc.message)

    def _write(self, tokens: dict[str, tuple[str, float, str]], sessions: dict[str, float],
               seen: dict[str, float]) -> None:
        if tokens and self.ledger is not None:
            self.ledger.used(tokens)
        if sessions and self.store is not None:
            self.store.touch(sessions, seen)


class _AuthState:
    """One app's limiter, JWT verifier, the store's word on credentials and table of static tokens."""

    def __init__(self, auth: AuthSettings, store: Engine | None = None,
                 role_groups: frozenset[str] = frozenset()) -> None:
        self.limiter = SharedLoginLimiter(auth.login_failures_per_minute,
                                          LoginFailureStore(store) if store is not None else None)
        self.verifier = _JwtVerifier(auth, role_groups)
        self.session_store = (SessionStore(store, idle=auth.session_idle_minutes * 60,
                                           lifetime=auth.session_hours * 3600)
                              if store is not None else None)
        self.word = _StoreWord(TokenLedger(store) if store is not None else None, self.session_store,
                               CredentialReader(store) if store is not None else None)
        self._auth = auth
        self._entries: list[TokenEntry] | None = None
        self._table: list[tuple[bytes, Principal, float | None]] = []
        self._by_digest: dict[str, tuple[bytes, Principal, float | None]] = {}
        #: token -> its entry of :meth:`tokens`, for tokens that matched one (at most one per
        #: entry: a token is its entry's preimage); emptied when the list is replaced.
        self.matched: dict[str, tuple[bytes, Principal, float | None]] = {}

    def tokens(self) -> list[tuple[bytes, Principal, float | None]]:
        """(hex SHA-256, principal, expiry as unix time) per ``auth.tokens`` entry, rebuilt
        when the list is replaced."""
        if self._entries is not self._auth.tokens:
            self._table = [(e.sha256.lower().encode(),
                            Principal(name=e.name, role=e.role,
                                      expires_at=e.expires.timestamp() if e.expires is not None else None),
                            e.expires.timestamp() if e.expires is not None else None)
                           for e in self._auth.tokens]
            self._by_digest = {entry[0].decode(): entry for entry in self._table}
            self._entries = self._auth.tokens
            self.matched = {}
        return self._table

    def token_entry(self, sha256: str) -> tuple[bytes, Principal, float | None] | None:
        """The ``auth.tokens`` entry of the token whose SHA-256 is ``sha256`` (None: none)."""
        self.tokens()
        return self._by_digest.get(sha256)

    @property
    def idle(self) -> float:
        return self._auth.session_idle_minutes * 60


def _state(request: Request) -> _AuthState:
    """The app's auth state, built on first use from the app's settings."""
    app = request.scope["app"]
    found: _AuthState | None = app.__dict__.get("slurmtower_auth")  # every request asks: no State lookup
    if found is None:
        services = app.state.services
        store = services.event_store  # the deployment's store (the events module opens it)
        found = _AuthState(services.settings.auth, store.engine if store is not None else None,
                           services.settings.role_groups())
        app.slurmtower_auth = app.state.slurmtower_auth = found  # (the state's: what tests inspect)
    return found


def client_address(request: Request) -> str:
    """The caller's address: the connection's peer, or what a proxy named in
    ``api.trusted_proxies`` forwarded (the server applies that list)."""
    client = request.scope.get("client")
    return str(client[0]) if client else "unknown"


def session_store(request: Request) -> SessionStore | None:
    """This app's store of sessions (the login routes make and end them; None: no store)."""
    return _state(request).session_store


def static_token_sha256(request: Request, token: str) -> str | None:
    """The SHA-256 of ``token`` when it is a static token of ``auth.tokens`` that
    :func:`verify_token` took (None: a JWT, a plugin's credential)."""
    entry = _state(request).matched.get(token)
    return entry[0].decode() if entry is not None else None


def _credential(request: Request) -> tuple[str, str] | None:
    """(token, where) from the Authorization header, or (session id, "session") from the
    dashboard's cookie."""
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("use 'Authorization: Bearer <token>'")
        return token.strip(), "header"
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        return cookie, "session"
    return None


async def verify_token(request: Request, token: str) -> Principal:
    """The principal a bearer token (static, JWT or the plugin hook's) names, counted by the
    failed-login limiter of the caller's address like a request carrying it.

    Raises :class:`AuthenticationError` (401) or :class:`LoginRateLimited` (429).
    """
    address = client_address(request)
    limiter = _state(request).limiter
    wait = await limiter.retry_after(address)
    if wait > 0:
        log.warning("refused login from %s: too many failures (retry in %.0f s)", address, wait)
        raise LoginRateLimited(f"too many failed logins from {address}; retry in {wait:.0f} s",
                               retry_after=round(wait + 0.5))
    try:
        return await _verify(request, token)
    except AuthenticationError as exc:
        await limiter.failed(address)
        # The token itself is never logged, not even a prefix of it.
        log.warning("failed login from %s: %s", address, exc.message)
        raise


async def _verify(request: Request, token: str, *, use: bool = True) -> Principal:
    state = _state(request)
    table = state.tokens()
    known = state.matched.get(token)
    if known is not None:
        digest, principal, expires = known
        match: tuple[Principal, float | None] | None = principal, expires
    else:
        digest = hash_token(token).encode()
        match = None
        # Compare against every entry so the time taken does not tell which one matched.
        for entry in table:
            if hmac.compare_digest(entry[0], digest) and match is None:
                match = entry[1], entry[2]
                state.matched[token] = entry
    if match is not None:
        principal, expires = match
        sha256 = digest.decode()
        _token_holds(principal, sha256, expires, (await state.word.word()).revoked)
        if use:
            state.word.token_used(sha256, principal.name, client_address(request), time.time())
        return principal
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
    # request.state's own dict (the scope's "state"), read directly: every request asks.
    kept = request.scope.setdefault("state", {})
    done: Principal | SlurmtowerError | None = kept.get("slurmtower_principal")
    if isinstance(done, Principal):
        return done
    if done is not None:
        raise done
    try:
        principal = await _authenticate(request)
    except SlurmtowerError as exc:
        kept["slurmtower_principal"] = exc
        raise
    kept["slurmtower_principal"] = principal
    return principal


def _token_holds(principal: Principal, sha256: str, expires: float | None, revoked: frozenset[str], *,
                 session: bool = False) -> None:
    """Raise :class:`AuthenticationError` unless the static token of ``principal`` (its
    SHA-256, its expiry) holds now: not expired, not among the ``revoked`` of the store's word."""
    of = f"the token of {principal.name}"
    after = ": the session made from it has ended" if session else ""
    if expires is not None and expires <= time.time():
        raise AuthenticationError(f"{of} expired at "
                                  f"{datetime.fromtimestamp(expires, UTC).isoformat(timespec='seconds')}{after}")
    if sha256 in revoked:
        raise AuthenticationError(f"{of} is revoked{after}")


async def _session_principal(state: _AuthState, sid: str, *, use: bool = True) -> Principal:
    """Who the session ``sid`` is, if it and the credential it was made from still hold.

    Raises :class:`AuthenticationError` (an ended session, or its credential revoked, expired
    or no longer configured) or :class:`IdentityStoreError` (the store does not answer).
    """
    if state.session_store is None or len(sid) > 100:
        raise AuthenticationError("the session has ended: log in again")
    key = session_digest(sid)
    word = await state.word.word(key)
    if word.sessions_error is not None:
        raise word.sessions_error
    row = word.sessions.get(key)
    if row is None:
        raise AuthenticationError("the session has ended: log in again")
    now = time.time()
    why = row.ended(now, state.idle)
    if why is not None:
        raise AuthenticationError(why)
    name, role, ends = row.name, row.role, [row.expires_at, row.seen_at + state.idle]
    if row.credential_expires_at is not None:
        ends.append(row.credential_expires_at)
    if row.credential_sha256 is not None:
        # The token's entry as the config has it now: removed, it no longer vouches for anyone;
        # its name and role are the session's.
        entry = state.token_entry(row.credential_sha256)
        if entry is None:
            raise AuthenticationError("the token the session was made from is no longer accepted here: log in again")
        _, token_principal, expires = entry
        name, role = token_principal.name, token_principal.role
        if expires is not None:
            ends.append(expires)
        _token_holds(token_principal, row.credential_sha256, expires, word.revoked, session=True)
    if use:
        state.word.session_used(key, now, row.seen_at)
    return Principal(name=name, role=role, via=row.via, expires_at=min(ends), groups=row.groups)


async def _judge(request: Request, value: str, where: str, *, use: bool = True) -> Principal:
    """The one decision on whether a credential holds now, and whose it is: a bearer token
    (static: its expiry and the store's revocations; a JWT or Slurm token: its signature,
    issuer and ``exp``; the plugin hook's) or a session (its own ends, and the credential it
    was made from, as a bearer token would be judged).

    Raises :class:`AuthenticationError` (401) or :class:`IdentityStoreError` (503).
    """
    if where == "header":
        return await _verify(request, value, use=use)
    return await _session_principal(_state(request), value, use=use)


async def _authenticate(request: Request) -> Principal:
    try:
        credential = _credential(request)
    except AuthenticationError as exc:
        log.warning("failed login from %s: %s", client_address(request), exc.message)
        raise
    if credential is None:
        return ANONYMOUS
    value, where = credential
    if where == "header":
        return await verify_token(request, value)
    # A session id is 256 random bits: nobody guesses one, so an unknown one (ended, expired)
    # is not a failed login to count.
    principal = await _judge(request, value, where)
    if request.method not in _SAFE_METHODS and request.headers.get(CSRF_HEADER) != "1":
        raise PermissionDenied(f"a request authenticated by the session cookie must send the {CSRF_HEADER}: 1 "
                               "header", param=CSRF_HEADER)
    return principal


async def lapsed(request: Request) -> str | None:
    """Why the credential a long answer (an event stream) was admitted with no longer admits
    it, judged afresh as a new request's would be (None: it still does): a revoked or expired
    token, a logout or an ended session, an expired JWT, a changed name or role, a store that
    does not answer. Not counted as a failed login."""
    admitted = request.scope.get("state", {}).get("slurmtower_principal")
    if not isinstance(admitted, Principal) or admitted is ANONYMOUS:
        return None
    try:
        credential = _credential(request)
        if credential is None:
            return "the request carries no credential"
        # Not a use: an open stream alone does not keep a session from going idle.
        now = await _judge(request, *credential, use=False)
    except SlurmtowerError as exc:
        return exc.message
    if (now.name, now.role) != (admitted.name, admitted.role):
        return f"the credential now names {now.name} ({now.role}), not {admitted.name} ({admitted.role})"
    return None


def require(perm: Perm, *, or_role: str | None = None):  # type: ignore[no-untyped-def]
    """A dependency that lets the route run only for callers with ``perm`` on the cluster the
    request is for (or, with ``or_role``, callers of that role there: the alert hooks'
    ``alerter``).

    Use it in ``dependencies=[require(Perm.READ)]`` or as a parameter to get the
    :class:`Principal` (with its role on that cluster). The dependency carries
    ``__slurmtower_perm__`` so that the route classification test can read each route's
    declared permission.
    """

    async def dependency(request: Request) -> Principal:
        # Async, so that FastAPI calls it on the event loop rather than in a thread.
        if perm == Perm.PUBLIC:
            # Public routes never fail on credentials (a stale cookie must not break /health,
            # a session cookie without the CSRF header must not block logging in again).
            try:
                return await authenticate(request)
            except (AuthenticationError, PermissionDenied):
                return ANONYMOUS
        principal = await authenticate(request)
        services = request.app.state.services
        settings = services.settings
        if services.clusters or settings.deployment().clusters:
            # The role the cluster the request is for gives (``[[clusters]] roles, max_role``).
            entry = services.cluster(cluster_of(request)).settings.cluster_entry()
            if entry is not None:
                principal = role_on_cluster(principal, entry.roles, entry.max_role)
        if principal is ANONYMOUS:
            if perm == Perm.READ and settings.auth.anonymous_read:
                return principal
            raise AuthenticationError("authentication required")
        if principal.perm < perm and (or_role is None or principal.role != or_role):
            raise PermissionDenied(f"{principal.name} ({principal.role}) may not do this: needs "
                                   f"{perm.name.lower()}" + (f" or the {or_role} role" if or_role else ""))
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
