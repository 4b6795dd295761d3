"""No 5xx on bad input (issue 12, item 3): a real server over the devcluster answers every
malformed or out-of-range parameter with a 4xx problem naming it, and never shows a
database's own error text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from slurmtower.api.params import MAX_ID
from slurmtower.devcluster import DevCluster
from slurmtower.settings import Settings, load_settings

from .api_server import api_for

pytestmark = pytest.mark.cluster

BEYOND = str(MAX_ID + 1)  # 9223372036854775808: no signed 64-bit column holds it


def _settings(devcluster: DevCluster, state_dir: Path) -> Settings:
    settings = load_settings(devcluster.tower_conf, environ={})
    settings.state_dir = state_dir
    return settings


@pytest.fixture(scope="module")
def api(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with api_for(_settings(devcluster, tmp_path_factory.mktemp("bad-input"))) as http:
        yield http


def _assert_problem(resp: httpx.Response, param: str) -> None:
    assert resp.status_code == 400, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["param"] == param


@pytest.mark.parametrize(("url", "param"), [
    (f"/events?since={BEYOND}", "since"),
    (f"/events/rule-runs?event_id={BEYOND}", "event_id"),
    (f"/audit?before={BEYOND}", "before"),
    (f"/audit?before=-{BEYOND}", "before"),
    (f"/events/stream?since={BEYOND}", "since"),
    ("/history?jobid=" + "9" * 20, "jobid"),
    ("/history?associd=" + "9" * 20, "associd"),
    ("/history?offset=" + "9" * 20, "offset"),
], ids=lambda v: str(v)[:40])
def test_integers_beyond_64_bits_are_refused_naming_the_parameter(api: httpx.Client, url: str, param: str) -> None:
    _assert_problem(api.get(url), param)


def test_the_largest_64_bit_id_is_still_a_valid_id(api: httpx.Client) -> None:
    assert api.get(f"/events?since={MAX_ID}").json() == []
    assert api.get(f"/events/rule-runs?event_id={MAX_ID}").json() == []
    assert api.get(f"/audit?before={MAX_ID}").status_code == 200


def test_a_last_event_id_beyond_64_bits_is_a_400(api: httpx.Client) -> None:
    _assert_problem(api.get("/events/stream", headers={"Last-Event-ID": BEYOND}), "Last-Event-ID")


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59-10:00", "0001-01-01T00:00:00+10:00"], ids=["late", "early"])
@pytest.mark.parametrize("name", ["submitted_after", "submitted_before", "started_after", "started_before",
                                  "ended_after", "ended_before"])
def test_time_filters_beyond_the_calendar_in_utc_are_its_ends(api: httpx.Client, name: str, when: str) -> None:
    """An RFC 3339 time past year 9999 (or before year 1) once in UTC is a valid date-time for the
    OpenAPI document (issue 41, item 9), and as a bound it is the last (first) time there is: it
    keeps or leaves out everything, as it would (it was a 400, and before that a 500)."""
    resp = api.get("/history", params={name: when, "limit": 1000})
    assert resp.status_code == 200, resp.text
    everything = api.get("/history", params={"limit": 1000}).json()["jobs"]
    keeps = name.endswith("_before") == (when.startswith("9999"))
    if name.startswith("submitted"):  # started_* and ended_* also leave out the jobs that never did
        assert resp.json()["jobs"] == (everything if keeps else [])
    elif not keeps:
        assert resp.json()["jobs"] == []


@pytest.mark.parametrize("limit", ["²", "٣", "1e3"], ids=["superscript", "arabic-indic", "float"])
@pytest.mark.parametrize("route", ["/queue", "/nodes"])
def test_a_limit_of_unicode_digits_is_a_400(api: httpx.Client, route: str, limit: str) -> None:
    # str.isdigit() is true for '²', which int() refuses.
    _assert_problem(api.get(route, params={"limit": limit}), "limit")


@pytest.mark.parametrize("name", ["用户", "emoji-\U0001f600"], ids=["cjk", "emoji"])
def test_a_job_name_beyond_latin1_matches_nothing(api: httpx.Client, name: str) -> None:
    resp = api.get("/history", params={"jobname": name})
    assert resp.status_code == 200, resp.text
    assert resp.json()["jobs"] == []


def test_database_error_text_never_reaches_the_client(devcluster: DevCluster, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(devcluster, tmp_path)
    settings.accounting.cluster = "nosuchcluster"  # its tables do not exist: MariaDB says so
    with api_for(settings) as http:
        resp = http.get("/history")
    assert resp.status_code == 503
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert "nosuchcluster_job_table" not in resp.text and "exist" not in resp.text
    assert "nosuchcluster_job_table" in caplog.text  # the server's log has it


def test_the_action_store_keeps_the_database_text_for_the_log(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    from slurmtower.actions.store import ActionStore, StoreError

    with pytest.raises(StoreError) as err:
        ActionStore(f"sqlite:///{tmp_path}")  # a directory: SQLite cannot open it
    assert "unable to open" not in str(err.value.to_problem()) and str(tmp_path) not in err.value.message
    assert "unable to open database file" in caplog.text


PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1/postgres"


@pytest.fixture(scope="module")
def pg_api(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server whose own store is PostgreSQL, which refuses NUL in any text."""
    import sqlalchemy as sa
    from pydantic import SecretStr

    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    name = "st_test_bad_input"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
    except sa.exc.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {PG_ADMIN}: {exc.orig}")
    settings = _settings(devcluster, tmp_path_factory.mktemp("bad-input-pg"))
    settings.store_url = SecretStr(f"postgresql+psycopg://postgres@127.0.0.1/{name}")
    try:
        with api_for(settings) as http:
            yield http
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.mark.parametrize(("url", "param"), [
    ("/events?node=n1%00", "node"),
    ("/events?type=%00", "type"),
    ("/events/rule-runs?rule=%00", "rule"),
    ("/audit?who=%00", "who"),
    ("/audit?action=x%00y", "action"),
    ("/executions/%00", "path"),
    ("/history?jobname=%00", "jobname"),
], ids=lambda v: str(v)[:30])
def test_a_nul_character_is_a_400_naming_the_parameter(pg_api: httpx.Client, url: str, param: str) -> None:
    resp = pg_api.get(url)
    assert resp.status_code == 400, resp.text
    _assert_problem(resp, param)
    assert pg_api.get("/events?type=ok").json() == []
