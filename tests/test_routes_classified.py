"""Every route of the application declares who may call it, and behaves accordingly.

The application's routes are enumerated (not listed by hand): a route added without
``require(Perm.X)`` fails here. Mutating routes must refuse anonymous and reader callers
(401/403); read routes must refuse anonymous callers unless ``auth.anonymous_read`` opens them.
"""

from __future__ import annotations

import os
import re
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from slurmtower.actions import Catalogue
from slurmtower.api import create_app
from slurmtower.api.security import Perm, require
from slurmtower.settings import Settings
from tests.auth_helpers import READER, bearer, with_tokens
from tests.conftest import node_states

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
#: Mutating routes that check the permission per target rather than per route: the action
#: runner declares READ (read-only actions exist) and checks each action's permission.
PER_ACTION = {("POST", "/actions/{name}"), ("POST", "/clusters/{cluster}/actions/{name}"),
              # a request's withdrawal: its requester's, whatever its role (a user's request)
              ("POST", "/requests/{request_id}/withdraw"), ("POST", "/clusters/{cluster}/requests/{request_id}/withdraw")}
#: Mutating routes that authenticate themselves (HMAC-signed trigger callbacks from Slurm's
#: notify program, the generic alert webhook) and so declare PUBLIC; they must still refuse
#: unsigned callers.
SELF_AUTHENTICATED = {("POST", "/{sensor_uuid}/{resource_class}/{trigger_type}"), ("POST", "/hooks/generic"),
                      ("POST", "/clusters/{cluster}/hooks/generic")}
#: The dashboard's login and logout: public by nature (the login takes its credential in its
#: body; the logout ends only the caller's own session and needs the CSRF header). Without a
#: credential they start no session and change nothing (400, or 403 for the missing header).
SESSION_ROUTES = {("POST", "/ui/login"), ("POST", "/ui/logout")}
#: The agent endpoint (/mcp): one route for the protocol, which a reader's agent reaches for its
#: reads; each tool checks the role on the act (tests/test_mcp.py). A body that is no protocol
#: message is refused by the transport itself (400, or 406 without the Accept it needs).
AGENT_ENDPOINT = {("POST", "/mcp")}
#: FastAPI's generated API documentation (schema only, no cluster data): public by design.
FASTAPI_DOCS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def _calls(dependant: Dependant) -> Iterator[Any]:
    for dep in dependant.dependencies:
        yield dep.call
        yield from _calls(dep)


def declared(route: APIRoute) -> Perm | None:
    """The permission ``route`` declares through ``require(...)`` (``None``: none declared)."""
    perms = [c.__slurmtower_perm__ for c in _calls(route.dependant) if hasattr(c, "__slurmtower_perm__")]
    return max(perms) if perms else None


def _walk(routes: list[Any], prefix: str = "", deps: tuple[Any, ...] = ()) -> Iterator[tuple[str, tuple[Any, ...], Any]]:
    """Every route with its full path prefix and router-level dependencies. FastAPI 0.165 keeps
    included routers as ``_IncludedRouter`` entries; older releases flatten them."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            ctx = route.include_context
            yield from _walk(inner.routes, prefix + ctx.prefix, (*deps, *ctx.dependencies))
        else:
            yield prefix, deps, route


def classify(app: FastAPI) -> tuple[list[tuple[str, str, Perm]], list[str]]:
    """(method, path, permission) for every route, and the routes declaring none."""
    rows: list[tuple[str, str, Perm]] = []
    missing: list[str] = []
    for prefix, deps, route in _walk(app.routes):
        path = prefix + getattr(route, "path", "")
        if path in FASTAPI_DOCS:
            continue
        if not isinstance(route, APIRoute):
            # Mounts and plain Starlette routes bypass the dependency system entirely.
            missing.append(f"{type(route).__name__} {path}")
            continue
        perms = [getattr(d.dependency, "__slurmtower_perm__", None) for d in deps]
        found = [p for p in [declared(route), *perms] if p is not None]
        perm = max(found) if found else None
        for method in sorted(route.methods - {"HEAD", "OPTIONS"}):
            if perm is None:
                missing.append(f"{method} {path}")
            else:
                rows.append((method, _plain(path), Perm(perm)))
    return rows, missing


def _plain(path: str) -> str:
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def _concrete(path: str) -> str:
    sample = {"sensor_uuid": str(uuid.uuid4()), "name": "slurm.node.drain", "resource_class": "node",
              "trigger_type": "down", "cluster": os.environ.get("SLURMTOWER_DEVCLUSTER_NAME", "tower")}
    return re.sub(r"\{(\w+)\}", lambda m: sample.get(m[1], "x1"), path)


@pytest.fixture(scope="module")
def module_settings(devcluster: object, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    from tests.conftest import load_settings

    s = load_settings(devcluster.tower_conf, environ={})  # type: ignore[attr-defined]
    s.state_dir = tmp_path_factory.mktemp("classified")
    return with_tokens(s)


@pytest.fixture(scope="module")
def app(module_settings: Settings) -> FastAPI:
    from slurmtower.api.routes.events import callback_router

    app = create_app(module_settings)
    # The trigger callback is served only where the sensor runs (off here): classify it too.
    app.include_router(callback_router)
    return app


@pytest.fixture(scope="module")
def api(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client


def test_every_route_declares_a_permission(app: FastAPI) -> None:
    rows, missing = classify(app)
    assert missing == []
    paths = {p for _m, p, _perm in rows}
    # The enumeration sees the whole application, not a hand-made list.
    for expected in ("/health", "/nodes", "/events/stream", "/actions/{name}", "/metrics", "/ui"):
        assert expected in paths


def test_a_route_without_a_permission_is_caught(module_settings: Settings) -> None:
    app = create_app(module_settings)

    @app.post("/oops")
    async def oops() -> dict[str, str]:
        return {}

    @app.get("/fine", dependencies=[require(Perm.READ)])
    async def fine() -> dict[str, str]:
        return {}

    _rows, missing = classify(app)
    assert missing == ["POST /oops"]


def test_mutating_routes_declare_operate_or_are_listed_exceptions(app: FastAPI) -> None:
    rows, _ = classify(app)
    for method, path, perm in rows:
        if method not in MUTATING:
            continue
        if (method, path) in PER_ACTION | AGENT_ENDPOINT:
            assert perm >= Perm.READ
        elif (method, path) in SELF_AUTHENTICATED | SESSION_ROUTES:
            assert perm == Perm.PUBLIC
        else:
            assert perm >= Perm.OPERATE, f"{method} {path} mutates but declares {perm.name}"


def test_mutating_routes_refuse_anonymous_and_reader_callers(app: FastAPI, api: TestClient) -> None:
    rows, _ = classify(app)
    checked = 0
    before = node_states()
    for method, path, _perm in rows:
        if method not in MUTATING:
            continue
        url = _concrete(path)
        body: dict[str, Any] = {"nodes": "n1", "reason": "classification test"}
        anon = api.request(method, url, json=body)
        if (method, path) in SESSION_ROUTES:
            assert anon.status_code in (400, 403) and "slurmtower_session=" not in anon.headers.get("set-cookie", "")
            continue
        assert anon.status_code == 401, f"{method} {path} anonymous -> {anon.status_code}"
        reader = api.request(method, url, json=body, headers=bearer(READER))
        if (method, path) in AGENT_ENDPOINT:
            assert reader.status_code in (400, 406), f"{method} {path} reader -> {reader.status_code}"
            continue
        assert reader.status_code in (401, 403), f"{method} {path} reader -> {reader.status_code}"
        checked += 1
    assert checked >= 2
    assert node_states() == before


def test_every_mutating_action_refuses_anonymous_and_reader_callers(api: TestClient) -> None:
    mutating = [n for n in Catalogue.names() if Catalogue.spec(n).permission in ("operate", "admin")]
    assert "slurm.node.drain" in mutating and "slurm.trigger.set" in mutating
    before = node_states()
    for name in mutating:
        anon = api.post(f"/actions/{name}", json={"nodes": "n1", "reason": "x"})
        assert anon.status_code == 401, f"{name} anonymous -> {anon.status_code}"
        reader = api.post(f"/actions/{name}", json={"nodes": "n1", "reason": "x"}, headers=bearer(READER))
        assert reader.status_code == 403, f"{name} reader -> {reader.status_code}"
    assert node_states() == before


def test_read_routes_refuse_anonymous_callers(app: FastAPI, api: TestClient) -> None:
    rows, _ = classify(app)
    for method, path, perm in rows:
        if method in MUTATING:
            continue
        resp = api.request(method, _concrete(path))
        if perm == Perm.PUBLIC:
            assert resp.status_code != 401, f"{method} {path} is public but said 401"
        else:
            assert resp.status_code == 401, f"{method} {path} anonymous -> {resp.status_code}"


def test_anonymous_read_opens_read_routes_only(module_settings: Settings) -> None:
    opened = module_settings.model_copy(deep=True)
    opened.auth.anonymous_read = True
    app = create_app(opened)
    rows, _ = classify(app)
    with TestClient(app) as api:
        for method, path, perm in rows:
            url = _concrete(path)
            # An invalid Last-Event-ID gets past authentication and answers at once, where a
            # valid request would stream forever.
            headers = {"Last-Event-ID": "not-an-id"} if path.endswith("/stream") else {}
            resp = api.request(method, url, headers=headers,
                               json={"nodes": "n1", "reason": "x"} if method in MUTATING else None)
            if (method, path) in SESSION_ROUTES:
                assert resp.status_code in (400, 403), f"{method} {path} opened -> {resp.status_code}"
            elif method in MUTATING:
                assert resp.status_code in (401, 403), f"{method} {path} opened -> {resp.status_code}"
            elif perm <= Perm.READ:
                assert resp.status_code not in (401, 403), f"{method} {path} opened -> {resp.status_code}"
            else:
                assert resp.status_code == 401, f"{method} {path} ({perm.name}) opened -> {resp.status_code}"
