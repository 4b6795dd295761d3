"""A bounded schemathesis run over a real server's ``/openapi.json`` (issue 12, items 3 and 12):
whatever the document allows a client to send, no answer is a 5xx.

Anonymous reads, so the reads run for real (Slurm, slurmdbd's MariaDB, the event and action
stores) and every mutating action is refused before it acts. Derandomised and 15 examples
per operation, so it is the same run every time and takes well under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from pydantic import SecretStr
from schemathesis import GenerationMode

from slurmtower.devcluster import DevCluster
from slurmtower.settings import load_settings

from .api_server import api_for

pytestmark = pytest.mark.cluster

#: Answers that never end: a fuzzer would wait on them forever.
STREAMS = ("/events/stream",)
EXAMPLES = 15
MIRROR_EXAMPLES = 5


PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1/postgres"
PG_DB = "st_test_fuzz"


@contextmanager
def _postgresql_store() -> Iterator[str]:
    import sqlalchemy as sa

    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)"))
            conn.execute(sa.text(f"CREATE DATABASE {PG_DB}"))
    except sa.exc.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {PG_ADMIN}: {exc.orig}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1/{PG_DB}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server_url(request: pytest.FixtureRequest, devcluster: DevCluster,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over slurmtower's default store (SQLite) and over PostgreSQL, which refuses
    more (NUL in text, integers past 64 bits) with driver errors of its own."""
    s = load_settings(devcluster.tower_conf, environ={})
    s.state_dir = Path(tmp_path_factory.mktemp("fuzz"))
    with ExitStack() as stack:
        if request.param == "postgresql":
            s.store_url = SecretStr(stack.enter_context(_postgresql_store()))
        http = stack.enter_context(api_for(s))
        yield str(http.base_url).rstrip("/")


def _operations(url: str) -> list[schemathesis.APIOperation]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    ops = [result.ok() for result in schema.get_all_operations()]
    return [op for op in ops if op.path not in STREAMS]


# Through hypothesis directly rather than schemathesis' pytest plugin, whose lazy fixture
# loading does not run on pytest 9 ('Function' object has no attribute '_nodeid').
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_request_the_document_describes_gets_a_5xx(server_url: str, mode: GenerationMode) -> None:
    operations = _operations(server_url)
    assert len(operations) >= 15
    failures: list[str] = []

    for op in operations:

        # The same routes under /clusters/{cluster}/ run the same handlers: what is theirs is
        # the cluster's name (an unknown one is a 404), which a few examples cover.
        examples = MIRROR_EXAMPLES if op.path.startswith("/clusters/{cluster}/") else EXAMPLES

        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            resp = case.call(base_url=server_url, timeout=15)
            if resp.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} query={case.query} "
                                f"headers={case.headers} body={case.body!r}: {resp.status_code} {resp.text[:300]}")

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # nothing to get wrong: no parameters, no body
    assert failures == []
