"""A bounded schemathesis run over a real server's ``/openapi.json`` (issue 12, items 3 and 12;
issue 41, item 9): whatever the document allows a client to send, no answer is a 5xx, and the
document tells the truth: what it calls valid is taken, what it refuses is refused (4xx), every
status and content type answered is declared (schemathesis' own checks, as ``bench/openapi.py``
runs them with an admin's token for minutes).

Anonymous reads, so the reads run for real (Slurm, slurmdbd's MariaDB, the event and action
stores, the read-only actions) and every mutating action is refused before it acts.
Derandomised and 12 examples per operation (2 for the same routes under /clusters/{cluster},
each read-only action's and the reports'), so it is the same run every time.

What OpenAPI cannot say and a route refuses is listed in :data:`EXPLAINED`, each with why.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from pydantic import SecretStr
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup

from slurmtower.actions import Catalogue
from slurmtower.devcluster import DevCluster
from slurmtower.settings import load_settings

from . import openapi_formats  # noqa: F401 - the document's node set format, registered
from .api_server import api_for

pytestmark = pytest.mark.cluster

#: Answers that never end: a fuzzer would wait on them forever.
STREAMS = ("/events/stream",)
EXAMPLES = 12
MIRROR_EXAMPLES = 2
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, positive_data_acceptance,
          negative_data_rejection]
#: Refusals of schema-valid requests that OpenAPI cannot prevent, by path (under /clusters/{cluster}
#: too) and the parameter the 400 names, with why. Nothing else may refuse what the document allows.
EXPLAINED = {
    # Rules between parameters: end after start, at most 366 days apart, on the hour (or the
    # midnight, the first of a month) for a rollup source, periods of a rollup at least as
    # long as its grain and at most api.reports' number of them; users and accounts with
    # group_by=cluster. OpenAPI describes each parameter alone.
    "/reports/usage": {"start", "end", "period", "users", "accounts", "tres"},
    "/reports/efficiency": {"start", "end"},
    "/reports/waits": {"start", "end", "size_buckets"},  # size_buckets must also increase
    # The partitions Slurm has (tres: those slurmdbd tracks) are the cluster's, not the document's.
    "/reports/availability": {"start", "end", "partitions"},
    # Issue 45's routes, being written beside this change: their parameters are their authors' to
    # declare (/requests' state values; /reservations' range: end after start, at most 400 days).
    "/requests": {"state"},
    "/reservations": {"start", "end"},
}


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


def _explained(path: str, resp: Any) -> bool:
    """A 400 naming a parameter :data:`EXPLAINED` lists for ``path``."""
    if resp.status_code != 400:
        return False
    try:
        param = resp.json().get("param")
    except ValueError:
        return False
    return param in EXPLAINED.get(path.removeprefix("/clusters/{cluster}"), set())


def _operations(url: str) -> list[schemathesis.APIOperation]:
    """Every operation but the streams and, of the actions' (one route), those an anonymous
    caller only gets a 401 from and those under /clusters/{cluster} (the same handler again):
    tests/test_action_schemas.py checks every action's parameters against its schema."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    ops = [result.ok() for result in schema.get_all_operations()]
    reads = {n for n in Catalogue.names() if not Catalogue.spec(n).mutating}
    return [op for op in ops if op.path not in STREAMS and not (
        "/actions/slurm." in op.path and (op.path.startswith("/clusters/") or op.path.rsplit("/", 1)[1] not in reads))]


# Through hypothesis directly rather than schemathesis' pytest plugin, whose lazy fixture
# loading does not run on pytest 9 ('Function' object has no attribute '_nodeid').
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_request_the_document_describes_gets_a_5xx(server_url: str, mode: GenerationMode) -> None:
    operations = _operations(server_url)
    assert len(operations) >= 15
    failures: list[str] = []

    for op in operations:

        # The same routes under /clusters/{cluster}/ run the same handlers: what is theirs is
        # the cluster's name (an unknown one is a 404), which a few examples cover. So do the
        # read-only actions (one route) and the reports, whose requests are slow to draw (lists
        # of up to 100 names) and mostly refused for their range, which OpenAPI cannot state.
        examples = (MIRROR_EXAMPLES if op.path.startswith(("/clusters/{cluster}/", "/actions/", "/reports/"))
                    else EXAMPLES)

        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            resp = case.call(base_url=server_url, timeout=15)
            try:
                case.validate_response(resp, checks=CHECKS)
            except FailureGroup as group:
                if _explained(case.path, resp):
                    return
                failures.append(f"{case.method} {case.formatted_path} query={case.query} headers={case.headers} "
                                f"body={case.body!r:.300}: {resp.status_code} {resp.text[:300]}: "
                                + "; ".join(f.title for f in group.exceptions))

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # nothing to get wrong: no parameters, no body
    assert failures == []
