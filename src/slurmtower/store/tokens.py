"""What the store knows of the static tokens of ``auth.tokens``: which are revoked, and when
and from where each was last used.

The tokens themselves are in the config (by their SHA-256); the store adds what must change
without a restart and be the same in every process: ``slurmtower token revoke`` marks a token
revoked here, and every process refuses it, and the dashboard sessions made from it, from its
next request (:meth:`TokenLedger.revoked` is read for every request that needs it, the
requests arriving together sharing one read: :mod:`slurmtower.api.security`). Uses are
written at most once a minute per token and process.

Blocking (SQLAlchemy): call it off the event loop.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from slurmtower.store.engine import READ_ONLY, make_store_engine, sqlite_file
from slurmtower.store.revision import ensure_current
from slurmtower.store.schema import token_state, web_sessions
from slurmtower.store.sessions import IdentityStoreError, SessionRow, guarded, session_row

__all__ = ["CredentialReader", "TokenLedger", "TokenRecord"]


@dataclass(frozen=True)
class TokenRecord:
    sha256: str
    name: str
    revoked_at: float | None
    last_used_at: float | None
    last_address: str | None


class TokenLedger:
    """The ``token_state`` table: revocations and last uses of static tokens, by SHA-256."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @classmethod
    def open(cls, url: str) -> TokenLedger:
        """The ledger of the store at ``url`` (the CLI's; it must be at this slurmtower's revision)."""
        engine = make_store_engine(url)
        try:
            ensure_current(engine)
        except SQLAlchemyError as exc:
            engine.dispose()
            raise IdentityStoreError(f"cannot open the store: {exc.__class__.__name__}") from exc
        return cls(engine)

    def close(self) -> None:
        self._engine.dispose()

    def change_probe(self) -> Callable[[], int | None] | None:
        """A probe whose value changes whenever any connection, of any process, commits to the
        store: SQLite's ``PRAGMA data_version`` on a connection of its own (a read of the
        WAL index in shared memory, microseconds: it may run on the event loop); None where
        the store has none (PostgreSQL, in-memory SQLite). The probe gives None when it fails."""
        path = sqlite_file(self._engine.url)
        if path is None:
            return None
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        weakref.finalize(self, conn.close)

        def probe() -> int | None:
            try:
                return int(conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return None

        return probe

    def records(self) -> dict[str, TokenRecord]:
        """Every token the store knows, by SHA-256."""
        with guarded(self._engine, "read the tokens' state", write=False) as conn:
            rows = conn.execute(select(token_state)).mappings().all()
        return {r["sha256"]: TokenRecord(**dict(r)) for r in rows}

    def revoked(self) -> frozenset[str]:
        """The SHA-256s of the revoked tokens."""
        with guarded(self._engine, "read the revoked tokens", write=False) as conn:
            rows = conn.execute(select(token_state.c.sha256).where(token_state.c.revoked_at.is_not(None)))
            return frozenset(sha for (sha,) in rows)

    def revoke(self, sha256: str, name: str, at: float) -> bool:
        """Mark the token revoked (for good: a new token replaces it); False if it was already."""
        return self._upsert(sha256, name, {"revoked_at": at}, only_if_null="revoked_at")

    def used(self, uses: dict[str, tuple[str, float, str]]) -> None:
        """Record uses: SHA-256 -> (name, when, from which address)."""
        for sha256, (name, at, address) in uses.items():
            self._upsert(sha256, name, {"last_used_at": at, "last_address": address[:255]})

    def _upsert(self, sha256: str, name: str, values: dict[str, object], *, only_if_null: str | None = None) -> bool:
        with guarded(self._engine, "write the tokens' state") as conn:
            stmt = update(token_state).where(token_state.c.sha256 == sha256)
            if only_if_null is not None:
                stmt = stmt.where(token_state.c[only_if_null].is_(None))
            if conn.execute(stmt.values(**values)).rowcount:
                return True
            exists = conn.execute(select(token_state.c.sha256).where(token_state.c.sha256 == sha256)).first()
            if exists is not None:
                return False
            try:
                with conn.begin_nested():
                    conn.execute(insert(token_state).values(sha256=sha256, name=name[:255], **values))
            except IntegrityError:  # another process wrote it meanwhile
                conn.execute(stmt.values(**values))
            return True


_REVOKED = select(token_state.c.sha256).where(token_state.c.revoked_at.is_not(None))
#: Sessions with the revocation of the token each was made from: one query for a session's request.
_SESSIONS = (select(web_sessions, token_state.c.revoked_at.label("credential_revoked_at"))
             .select_from(web_sessions.outerjoin(token_state,
                                                 token_state.c.sha256 == web_sessions.c.credential_sha256)))


class CredentialReader:
    """What a request may need of the store to judge its credential, in one read: the revoked
    static tokens and the sessions asked for.

    A session comes with the revocation of the token it was made from (a join), so the
    requests of sessions alone need one query; the whole set of revocations is read for
    bearer tokens. On a server database (PostgreSQL) the reads go over one connection kept for them, in
    autocommit: a read is its statements' round trips alone (no pool checkout and ping, no
    BEGIN and ROLLBACK: 450 -> 170 us on loopback). SQLite reads from the pool (a kept
    connection would hold its first snapshot). One caller at a time (from any thread).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._keep = engine.dialect.name != "sqlite"
        self._conn: Connection | None = None

    def read(self, keys: Collection[str], *, revocations: bool = True
             ) -> tuple[frozenset[str] | None, dict[str, SessionRow]]:
        """(the SHA-256s of the revoked tokens, when ``revocations`` are asked; the sessions
        whose id digests are ``keys`` as the store has them, ended or not, each saying whether
        the token it was made from is revoked). Raises :class:`IdentityStoreError`."""
        for attempt in (1, 2):
            fresh = self._conn is None
            try:
                if not self._keep:
                    with self._engine.execution_options(**READ_ONLY).connect() as conn:
                        return self._read(conn, keys, revocations)
                if self._conn is None:
                    self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                return self._read(self._conn, keys, revocations)
            except SQLAlchemyError as exc:
                self.close()
                # A kept connection the server dropped (a restart) is opened again, once.
                if attempt == 2 or fresh or not self._keep:
                    raise IdentityStoreError(f"cannot read credentials: {exc.__class__.__name__}") from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _read(conn: Connection, keys: Collection[str], revocations: bool
              ) -> tuple[frozenset[str] | None, dict[str, SessionRow]]:
        revoked = frozenset(sha for (sha,) in conn.execute(_REVOKED)) if revocations else None
        if not keys:
            return revoked, {}
        found = conn.execute(_SESSIONS.where(web_sessions.c.id_hash.in_(list(keys)))).mappings()
        return revoked, {row["id_hash"]: session_row(row) for row in found}

    def close(self) -> None:
        """Give the kept connection back (a later read opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except SQLAlchemyError:
                conn.invalidate()
