"""Leader election on the store's own database: a file lock on SQLite, an advisory lock on
PostgreSQL; real processes killed with SIGKILL free the lead at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from slurmtower.store.engine import make_store_engine
from slurmtower.store.leader import Leadership

PG = "postgresql+psycopg://postgres@127.0.0.1/test"


@pytest.fixture(params=["sqlite-file", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite-file":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    engine = create_engine(PG, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:  # scripts/test.sh starts PostgreSQL
        pytest.fail(f"no PostgreSQL at {PG}: {exc.orig}")
    finally:
        engine.dispose()
    yield PG


def _leaders(url: str, n: int, name: str = "leader") -> list[Leadership]:
    # Each its own engine, as each process has; on PostgreSQL a name of its own per test run
    # (the database is shared with other tests).
    return [Leadership(make_store_engine(url), name=name) for _ in range(n)]


def test_one_leader_then_the_next_after_a_clean_resign(url: str) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    a, b, c = _leaders(url, 3, name)
    assert a.try_lead() is True
    assert (b.try_lead(), c.try_lead()) == (False, False)
    assert a.still_leading() and a.is_leader and not b.is_leader
    assert a.try_lead() is True  # re-entrant: the leader stays the leader
    a.resign()
    assert not a.is_leader
    assert b.try_lead() is True and c.try_lead() is False
    # Another role is another election.
    other = Leadership(make_store_engine(url), name=f"{name}-archiver")
    assert other.try_lead() is True
    b.resign()
    other.resign()


_HOLDER = """
import sys, time
from slurmtower.store.engine import make_store_engine
from slurmtower.store.leader import Leadership
lead = Leadership(make_store_engine(sys.argv[1]), name=sys.argv[2])
print("lead" if lead.try_lead() else "follow", flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_leader_frees_the_lead_at_once(url: str) -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, url, name], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "lead"
        (follower,) = _leaders(url, 1, name)
        assert follower.try_lead() is False
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        t0 = time.monotonic()
        while not follower.try_lead():
            assert time.monotonic() - t0 < 5, "the lead was not freed by the holder's death"
            time.sleep(0.05)
        assert follower.still_leading()
        follower.resign()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_leader_whose_connection_dies_steps_down() -> None:
    name = f"t-{uuid.uuid4().hex[:8]}"
    engine = create_engine(PG, connect_args={"connect_timeout": 3})
    try:
        a, b = _leaders(PG, 2, name)
        assert a.try_lead()
        assert a._conn is not None
        pid = a._conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as conn:  # the database drops the leader's session
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        assert a.still_leading() is False and a.is_leader is False
        assert b.try_lead() is True
        b.resign()
    finally:
        engine.dispose()
