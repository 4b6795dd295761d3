"""The dashboard's sessions, kept by the server in the store every process of a deployment shares.

A browser holds only an opaque id (256 bits) in an HttpOnly cookie; the store keeps its
SHA-256, who it belongs to, the role they had at login, and three times: when it began, when
it was last used, when it ends at the latest. A session ends at its absolute end, after
``idle`` seconds unused, or at logout (:meth:`SessionStore.end`) in any process.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.errors import SlurmtowerError
from slurmtower.store.schema import login_states, web_sessions

__all__ = ["IdentityStoreError", "LoginState", "SessionRow", "SessionStore", "digest"]

#: The longest ID token kept for the provider's logout (longer ones are not kept).
MAX_ID_TOKEN = 16384


class IdentityStoreError(SlurmtowerError):
    http_status = 503
    exit_code = 69
    title = "the store of sessions and tokens is unavailable"


@contextmanager
def guarded(engine: Engine, what: str, *, write: bool = True) -> Iterator[Connection]:
    r"""A transaction (``write``) or a connection of ``engine`` whose database errors become
    :class:`IdentityStoreError`\ s naming ``what`` could not be done."""
    try:
        with engine.begin() if write else engine.connect() as conn:
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
               groups: tuple[str, ...] = ()) -> str:
        """A new session; returns its id (for the cookie: the store keeps only its digest)."""
        sid = secrets.token_urlsafe(32)
        now = self._clock()
        row = {"id_hash": digest(sid), "name": name[:255], "role": role[:16], "via": via[:16],
               "created_at": now, "seen_at": now, "expires_at": now + self.lifetime,
               "id_token": id_token if id_token is not None and len(id_token) <= MAX_ID_TOKEN else None,
               "groups": [g for g in groups if len(g) <= 255][:MAX_SESSION_GROUPS] or None}
        with guarded(self._engine, "create a session") as conn:
            conn.execute(insert(web_sessions).values(**row))
            self._purge(conn, now)
        return sid

    def get(self, sid: str) -> SessionRow | None:
        """The live session ``sid`` names (None: unknown, ended, idle too long or past its end).

        A use more than a minute after the last one recorded is recorded (the idle clock).
        """
        now = self._clock()
        key = digest(sid)
        with guarded(self._engine, "read sessions", write=False) as conn:
            row = conn.execute(select(web_sessions).where(web_sessions.c.id_hash == key)).mappings().first()
        if row is None or row["expires_at"] <= now or row["seen_at"] + self.idle <= now:
            return None
        if now - row["seen_at"] > 60:
            with guarded(self._engine, "record a session's use") as conn:
                conn.execute(update(web_sessions).where(web_sessions.c.id_hash == key).values(seen_at=now))
        return _session(row, expires_at=min(row["expires_at"], now + self.idle))

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
        execute(delete(login_states).where(login_states.c.created_at <= now - self.login_window))

def _session(row: Any, *, expires_at: float) -> SessionRow:
    return SessionRow(name=row["name"], role=row["role"], via=row["via"], created_at=row["created_at"],
                      expires_at=expires_at, id_token=row["id_token"],
                      groups=tuple(str(g) for g in (row["groups"] or [])[:MAX_SESSION_GROUPS]))
