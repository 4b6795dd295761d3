"""The OpenAPI document tells the truth (issue 12, item 4): every route declares the query
parameters it accepts and the problem responses it can give, checked against what a real
server answers rather than against a list kept by hand."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.settings import Settings, load_settings

from .api_server import api_for, running

pytestmark = pytest.mark.cluster

PROBLEM = "application/problem+json"
#: Streams answer 200 and never end: only their documented shape is checked.
STREAMS = {"/events/stream"}


def _settings(devcluster: DevCluster, state_dir: Path) -> Settings:
    settings = load_settings(devcluster.tower_conf, environ={})
    settings.state_dir = state_dir
    settings.events.sensor_enabled = False
    settings.archiver.archive_usage_load = False
    return settings


@pytest.fixture(scope="module")
def api(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """Anonymous reads allowed: the routes answer their 400s without a token."""
    with api_for(_settings(devcluster, tmp_path_factory.mktemp("openapi"))) as http:
        yield http


@pytest.fixture(scope="module")
def closed(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """No anonymous reads: every route behind require(READ) answers 401 to an anonymous caller."""
    settings = _settings(devcluster, tmp_path_factory.mktemp("openapi-closed"))
    settings.auth.anonymous_read = False
    with running(create_app(settings)) as http:
        yield http


@pytest.fixture(scope="module")
def document(api: httpx.Client) -> dict[str, Any]:
    resp = api.get("/openapi.json")
    assert resp.status_code == 200
    doc: dict[str, Any] = resp.json()
    return doc


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def _url(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "no-such-thing", path)


def _query_params(op: dict[str, Any]) -> set[str]:
    return {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}


def _documents_problem(op: dict[str, Any], status: int) -> bool:
    resp = op["responses"].get(str(status))
    if resp is None:
        return False
    return resp.get("content", {}).get(PROBLEM, {}).get("schema", {}).get("$ref") == "#/components/schemas/Problem"


def test_the_problem_schema_is_a_component(document: dict[str, Any]) -> None:
    problem = document["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail"} <= set(problem["required"])


def test_every_error_response_is_a_problem_not_json(document: dict[str, Any]) -> None:
    wrong = [f"{m} {p} {code}" for m, p, op in _operations(document) for code, resp in op["responses"].items()
             if int(code) >= 400 and set(resp.get("content", {})) != {PROBLEM}]
    assert wrong == []


@pytest.mark.parametrize("route", ["/history", "/users", "/load"])
def test_routes_reading_the_raw_query_declare_their_parameters(document: dict[str, Any], route: str) -> None:
    declared = _query_params(document["paths"][route]["get"])
    want = {
        "/history": {"limit", "offset", "cursor", "user", "partition", "account", "jobname", "associd", "state",
                     "jobid", "submitted_after", "submitted_before", "started_after", "started_before",
                     "ended_after", "ended_before"},
        "/users": {"name"},
        "/load": {"time", "offset"},
    }[route]
    assert declared == want


def test_every_parameter_has_a_description(document: dict[str, Any]) -> None:
    bare = [f"{m} {p} {q['name']}" for m, p, op in _operations(document) for q in op.get("parameters", [])
            if not q.get("description")]
    assert bare == []


def test_every_route_refusing_an_unknown_parameter_declares_exactly_the_ones_it_knows(
        api: httpx.Client, document: dict[str, Any]) -> None:
    checked = 0
    for method, path, op in _operations(document):
        if method != "GET" or path in STREAMS:
            continue
        resp = api.get(_url(path), params={"zz_unknown": "1"})
        if resp.status_code != 400:
            continue
        checked += 1
        assert _documents_problem(op, 400), f"{path} answers 400 but does not document it"
        known = re.search(r"\(known: ([^)]*)\)", resp.json()["detail"])
        assert known, f"{path}: {resp.json()['detail']}"
        names = set() if known.group(1) == "none" else set(known.group(1).split(", "))
        assert names == _query_params(op), path
    assert checked >= 8  # queue, nodes, partitions, stats, usage, history, users, load


def test_every_route_that_needs_a_login_documents_401_403_and_429(
        closed: httpx.Client, document: dict[str, Any]) -> None:
    guarded = 0
    for method, path, op in _operations(document):
        if path in ("/{sensor_uuid}/{resource_class}/{trigger_type}", "/hooks/generic",
                    "/clusters/{cluster}/hooks/generic"):
            continue  # signed (the notify program, the generic webhook's sender), not logged in
        resp = closed.request(method, _url(path))
        if resp.status_code != 401:
            continue
        guarded += 1
        missing = [s for s in (401, 403, 429) if not _documents_problem(op, s)]
        assert missing == [], f"{method} {path} does not document {missing}"
    assert guarded >= 15


def test_every_route_with_a_path_parameter_documents_404(document: dict[str, Any]) -> None:
    missing = [f"{m} {p}" for m, p, op in _operations(document)
               if any(q["in"] == "path" for q in op.get("parameters", [])) and not _documents_problem(op, 404)
               and not p.startswith("/{sensor_uuid}")]
    assert missing == []
