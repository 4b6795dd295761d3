"""The dashboard's sessions, kept by the server in the store every process of a deployment shares.

A browser holds only an opaque id (256 bits) in an HttpOnly cookie; the store keeps its
SHA-256, who it belongs to, the role they had at login, the credential it was made from, and
three times: when it began, when it was last used, when it ends at the latest. A session ends
at its absolute end, after ``idle`` seconds unused, or at logout (:meth:`SessionStore.end`) in
any process; and no later than the credential it was made from (:attr:`SessionRow.credential_sha256`,
:attr:`SessionRow.credential_expires_at`: what :mod:`slurmtower.api.security` checks at every request).

The idle clock (``seen_at``) is written to the second: a use is recorded once it is
:data:`SEEN_PRECISION` newer than what the store holds, so a session idle for ``idle`` seconds
in every process ends within that second of its due time, never earlier.

OpenID Connect sign-ons under way (:meth:`SessionStore.begin_login`) keep their PKCE verifier
and nonce here, keyed by the SHA-256 of their ``state`` and bound to the browser that started
them (the SHA-256 of its login cookie): :meth:`SessionStore.take_login` gives one out once, to
that browser, within ``login_window`` seconds.

Blocking (SQLAlchemy): call it off the event loop.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.errors import SlurmtowerError
from slurmtower.store.engine import READ_ONLY
from slurmtower.store.schema import login_states, web_sessions

__all__ = ["SEEN_PRECISION", "IdentityStoreError", "LoginState", "SessionRow", "SessionStore", "digest"]

#: The longest ID token kept for the provider's logout (longer ones are not kept).
MAX_ID_TOKEN = 16384
#: Seconds a session's last use may be ahead of the one the store holds before it is written.
SEEN_PRECISION = 1.0


class IdentityStoreError(SlurmtowerError):
    http_status = 503
    exit_code = 69
    title = "the store of sessions and tokens is unavailable"


@contextmanager
def guarded(engine: Engine, what: str, *, write: bool = True) -> Iterator[Connection]:
    r"""A transaction (``write``) or a read-only connection of ``engine`` whose database errors
    become :class:`IdentityStoreError`\ s naming ``what`` could not be done."""
    try:
        # A read takes no write lock (SQLite: a deferred BEGIN): every request's credential
        # read would otherwise queue behind, and block, the sensor's writes.
        with engine.begin() if write else engine.execution_options(**READ_ONLY).connect() as conn:
            yield conn
    except SQLAlchemyError as exc:
        raise IdentityStoreError(f"cannot {what}: {exc.__class__.__name__}") from exc


def digest(value: str) -> str:
    """Hex SHA-256 of ``value``: what the store keeps of an id, a state or a cookie."""
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class SessionRow:
    name: str
    role: str
    via: str
    created_at: float
    expires_at: float
    """The absolute end (unix seconds); the idle end may come first."""
    id_token: str | None = None
    groups: tuple[str, ...] = ()
    """The person's groups that give a role on some cluster (``[[clusters]] roles``)."""
    seen_at: float = 0.0
    """The last use the store knows of (unix seconds)."""
    credential_sha256: str | None = None
    """The SHA-256 of the static token the session was made from (None: a sign-on, a JWT)."""
    credential_expires_at: float | None = None
    """When the credential the session was made from expires (None: never, or a sign-on)."""
    credential_revoked: bool = False
    """The token the session was made from is revoked (when read with its revocation)."""

    def ended(self, now: float, idle: float) -> str | None:
        """Why the session is over at ``now`` by its own times (None: it is not): its absolute
        end, ``idle`` seconds unused since :attr:`seen_at`, its credential's expiry."""
        if self.expires_at <= now:
            return "the session has ended: log in again"
        if self.seen_at + idle <= now:
            return "the session has ended (unused too long): log in again"
        if self.credential_expires_at is not None and self.credential_expires_at <= now:
            return "the credential the session was made from has expired: log in again"
        return None


#: The most groups a session keeps (only those some cluster gives a role), each at most 255 characters.
MAX_SESSION_GROUPS = 100


@dataclass(frozen=True)
class LoginState:
    verifier: str
    nonce: str


class SessionStore:
    """Sessions and sign-ons under way, in the store's ``web_sessions`` and ``login_states``.

    Args:
        engine: the store's engine.
        idle: seconds a session may go unused.
        lifetime: seconds a session lasts at most, used or not.
        login_window: seconds a sign-on may take at the provider.
    """

    def __init__(self, engine: Engine, *, idle: float, lifetime: float, login_window: float = 600.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self.idle = idle
        self.lifetime = lifetime
        self.login_window = login_window
        self._clock = clock
        self._purged_at = float("-inf")

    def create(self, *, name: str, role: str, via: str, id_token: str | None = None,
               groups: tuple[str, ...] = (), credential_sha256: str | None = None,
               credential_expires_at: float | None = None) -> str:
        """A new session; returns its id (for the cookie: the store keeps only its digest).

        ``credential_sha256``: the SHA-256 of the static token it is made from;
        ``credential_expires_at``: when the credential it is made from expires (unix seconds).
        """
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        row = {"id_hash": digest(sid), "name": name[:255], "role": role[:16], "via": via[:16],
               "created_at": now, "seen_at": now, "expires_at": now + self.lifetime,
               "id_token": id_token if id_token is not None and len(id_token) <= MAX_ID_TOKEN else None,
               "groups": [g for g in groups if len(g) <= 255][:MAX_SESSION_GROUPS] or None,
               "credential_sha256": credential_sha256, "credential_expires_at": credential_expires_at}
        with guarded(self._engine, "create a session") as conn:
            conn.execute(insert(web_sessions).values(**row))
            self._purge(conn, now)
        return sid

    def get(self, sid: str) -> SessionRow | None:
        """The live session ``sid`` names (None: unknown, ended, idle too long, past its end or
        its credential's expiry); this use is recorded (:meth:`touch`)."""
        now = self._clock()
        row = self.rows([digest(sid)]).get(digest(sid))
        if row is None or row.ended(now, self.idle) is not None:
            return None
        self.touch({digest(sid): now}, {digest(sid): row.seen_at})
        return replace(row, expires_at=min(row.expires_at, now + self.idle), seen_at=max(row.seen_at, now))

    def rows(self, keys: Collection[str]) -> dict[str, SessionRow]:
        """The sessions whose id digests (:func:`digest`) are ``keys``, as the store has them
        (ended or not: :meth:`SessionRow.ended` says), in one query."""
        if not keys:
            return {}
        with guarded(self._engine, "read sessions", write=False) as conn:
            found = conn.execute(select(web_sessions).where(web_sessions.c.id_hash.in_(list(keys)))).mappings().all()
        return {row["id_hash"]: session_row(row) for row in found}

    def touch(self, uses: Mapping[str, float], known: Mapping[str, float] | None = None) -> None:
        """Record uses of sessions (id digest -> when), those :data:`SEEN_PRECISION` or more
        newer than the store's last use (``known``: what it held, by digest, when read), in one
        statement; a later use another process wrote is never moved back."""
        known = known or {}
        due = [{"key": key, "at": at} for key, at in uses.items()
               if at - known.get(key, float("-inf")) >= SEEN_PRECISION]
        if not due:
            return
        table = web_sessions
        with guarded(self._engine, "record sessions' use") as conn:
            conn.execute(update(table).where(table.c.id_hash == bindparam("key"), table.c.seen_at < bindparam("at"))
                         .values(seen_at=bindparam("at")), due)

    def end(self, sid: str) -> SessionRow | None:
        """End the session ``sid`` (logout); returns what it was (its ID token for the provider)."""
        key = digest(sid)
        with guarded(self._engine, "end a session") as conn:
            row = conn.execute(select(web_sessions).where(web_sessions.c.id_hash == key)).mappings().first()
            conn.execute(delete(web_sessions).where(web_sessions.c.id_hash == key))
        return _session(row, expires_at=row["expires_at"]) if row is not None else None

    def begin_login(self, *, state: str, browser: str, verifier: str, nonce: str) -> None:
        """Keep a sign-on under way until :meth:`take_login`."""
        now = self._clock()
        with guarded(self._engine, "begin a sign-on") as conn:
            conn.execute(insert(login_states).values(state_hash=digest(state), browser_hash=digest(browser),
                                                     verifier=verifier, nonce=nonce, created_at=now))
            self._purge(conn, now)

    def take_login(self, *, state: str, browser: str) -> LoginState | None:
        """The sign-on ``state`` names, once, for the browser that began it within the window
        (None: unknown, taken already, another browser's, or too old)."""
        now = self._clock()
        key = digest(state)
        with guarded(self._engine, "take a sign-on") as conn:
            row = conn.execute(select(login_states).where(login_states.c.state_hash == key)).mappings().first()
            if row is None:
                return None
            taken = conn.execute(delete(login_states).where(login_states.c.state_hash == key))
        if (taken.rowcount != 1 or row["created_at"] + self.login_window <= now
                or not secrets.compare_digest(row["browser_hash"], digest(browser))):
            return None
        return LoginState(verifier=row["verifier"], nonce=row["nonce"])

    def _purge(self, conn: Connection, now: float) -> None:
        """Delete ended sessions and stale sign-ons, at most once a minute per process."""
        if now - self._purged_at < 60:
            return
        self._purged_at = now
        execute = conn.execute
        execute(delete(web_sessions).where(web_sessions.c.expires_at <= now))
        execute(delete(web_sessions).where(web_sessions.c.seen_at <= now - self.idle))
        execute(delete(web_sessions).where(web_sessions.c.credential_expires_at <= now))
        execute(delete(login_states).where(login_states.c.created_at <= now - self.login_window))


def session_row(row: Any) -> SessionRow:
    """The :class:`SessionRow` of a ``web_sessions`` row (a mapping), as stored."""
    return _session(row, expires_at=row["expires_at"])


def _session(row: Any, *, expires_at: float) -> SessionRow:
    return SessionRow(name=row["name"], role=row["role"], via=row["via"], created_at=row["created_at"],
                      expires_at=expires_at, id_token=row["id_token"],
                      groups=tuple(str(g) for g in (row["groups"] or [])[:MAX_SESSION_GROUPS]),
                      seen_at=row["seen_at"], credential_sha256=row["credential_sha256"],
                      credential_expires_at=row["credential_expires_at"],
                      credential_revoked=row.get("credential_revoked_at") is not None)
