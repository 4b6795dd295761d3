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

from slurmtower.actions import Catalogue
from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.settings import Settings, load_settings

from .api_server import api_for, running
from .auth_helpers import OPERATOR, bearer, with_tokens

pytestmark = pytest.mark.cluster

PROBLEM = "application/problem+json"
#: Streams answer 200 and never end: only their documented shape is checked.
STREAMS = {"/events/stream"}


def _settings(devcluster: DevCluster, state_dir: Path) -> Settings:
    settings = with_tokens(load_settings(devcluster.tower_conf, environ={}))
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


#: An execution that failed in Slurm or a database is answered with its envelope and the failure's
#: status (the action ran: its record is the answer); every other refusal of an action is a problem.
FAILED_EXECUTION = {"400", "502", "503", "504"}


def test_every_error_response_is_a_problem_not_json(document: dict[str, Any]) -> None:
    def allowed(method: str, path: str, code: str) -> set[str]:
        if method == "POST" and re.search(r"/actions/slurm\.", path) and code in FAILED_EXECUTION:
            return {PROBLEM, "application/json"}
        # the agent endpoint's transport (the MCP SDK, before slurmtower's code) answers its own
        # refusals as JSON-RPC errors, and a body not sent as JSON with its plain-text 400
        if method == "POST" and path == "/mcp" and code in ("400", "406", "415"):
            return {"application/json", "text/plain"} if code == "400" else {"application/json"}
        return {PROBLEM}

    wrong = [f"{m} {p} {code}" for m, p, op in _operations(document) for code, resp in op["responses"].items()
             if int(code) >= 400 and set(resp.get("content", {})) != allowed(m, p, code)]
    assert wrong == []


def _schemas(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield schema
    for branch in schema.get("anyOf", []):
        yield from _schemas(branch)
    if isinstance(schema.get("items"), dict):
        yield from _schemas(schema["items"])


def test_no_parameter_is_null_and_no_text_parameter_takes_a_nul(document: dict[str, Any]) -> None:
    """A parameter is absent or a value (never null), and the app refuses a NUL anywhere (400):
    every text parameter says which texts it takes, none with a NUL."""
    wrong = []
    for method, path, op in _operations(document):
        for param in op.get("parameters", []):
            for schema in _schemas(param["schema"]):
                where = f"{method} {path} {param['name']}"
                if schema.get("type") == "null":
                    wrong.append(f"{where}: null")
                if schema.get("type") == "string" and not {"pattern", "enum", "format"} & set(schema):
                    wrong.append(f"{where}: any text")
                if "pattern" in schema and re.search(schema["pattern"], "a\x00") is not None:
                    wrong.append(f"{where}: a NUL")
    assert wrong == []


def test_a_declared_parameter_given_twice_is_refused_unless_a_list(api: httpx.Client) -> None:
    """FastAPI kept the last of two: ``who=a&who=b`` read the audit log of b."""
    for path, name in (("/audit", "who"), ("/events", "node"), ("/queue", "user"), ("/events/rule-runs", "rule")):
        resp = api.get(path, params=[(name, "a"), (name, "b")])
        assert resp.status_code == 400 and resp.json()["param"] == name, (path, resp.text)
    assert api.get("/events", params=[("type", "a"), ("type", "b")]).status_code == 200


@pytest.mark.parametrize("value", ["6\f", " 5", "5_0", "5.0", "+5"])
def test_a_whole_number_is_written_as_one(api: httpx.Client, value: str) -> None:
    """The document says integer; pydantic's lax parsing took all of these for 5 or 6."""
    for path, name in (("/events", "limit"), ("/audit", "limit"), ("/queue", "limit"), ("/load", "time")):
        resp = api.get(path, params={name: value})
        assert resp.status_code == 400 and resp.json()["param"] == name, (path, value, resp.text)


def test_each_action_has_its_own_operations_its_parameters_the_body(api: httpx.Client,
                                                                   document: dict[str, Any]) -> None:
    """POST /actions/{name} took any object, whatever the action wanted: each action is now
    documented at its own path, its parameters' schema (GET /actions/{name}'s) the body, and
    dry_run, Idempotency-Key and request_reason only where it changes something."""
    paths = document["paths"]
    assert "/actions/{name}" not in paths and "/clusters/{cluster}/actions/{name}" not in paths
    components = document["components"]["schemas"]
    for name in Catalogue.names():
        spec = Catalogue.spec(name)
        for prefix in ("", "/clusters/{cluster}"):
            item = paths[f"{prefix}/actions/{name}"]
            assert set(item) == {"get", "post"}
            content = item["post"]["requestBody"]["content"]["application/json"]["schema"]
            body = content if "properties" in content else content["anyOf"][0]
            described = api.get(f"/actions/{name}").json()["parameters"]
            http = {k for k, v in described["properties"].items() if not v.get("x-slurmtower-cli-only")}
            assert body["properties"].keys() == http, name  # maintain's wait is the CLI's
            for key, value in described.get("$defs", {}).items():
                assert components[key] == value
            query = {p["name"] for p in item["post"]["parameters"]}
            assert ({"dry_run", "idempotency-key", "request_reason"} <= query) == spec.mutating, (name, query)


def test_a_failed_execution_is_answered_with_the_envelope_its_operation_declares(
        api: httpx.Client, document: dict[str, Any]) -> None:
    """Slurm refuses the update (n1 has no such feature): a 400 with the failed execution's
    envelope, application/json, which the operation documents beside the problem."""
    resp = api.post("/actions/slurm.node.update", json={"nodes": "n1", "infos": {"active_features": "nosuch"}},
                    headers=bearer(OPERATOR))
    assert resp.status_code == 400 and resp.headers["content-type"] == "application/json", resp.text
    assert resp.json()["status"] == "failed" and resp.json()["error"]["status"] == 400
    declared = document["paths"]["/actions/slurm.node.update"]["post"]["responses"]["400"]["content"]
    assert set(declared) == {PROBLEM, "application/json"}


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
