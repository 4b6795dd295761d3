"""The action endpoints over HTTP: roles, envelopes, problems, and the audit's who."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.runtime import Services
from slurmtower.settings import Settings, TokenEntry
from slurmtower.slurm import CliSlurmClient

from .conftest import node_states, sh


class Http:
    """A synchronous face over ``httpx.ASGITransport``: requests go straight into the app.

    Unlike starlette's TestClient it does not run the lifespan, so the other route modules'
    background work (the sensor arms PERM triggers) stays out of these tests.
    """

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://tower") as http:
                return await http.request(method, url, **kwargs)

        return asyncio.run(go())

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

pytestmark = [pytest.mark.cluster, pytest.mark.release]

TOKENS = {"reader": "r-token-123", "operator": "o-token-456", "admin": "a-token-789"}


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


@pytest.fixture()
def http(settings: Settings, client: CliSlurmClient) -> Iterator[Http]:
    settings.auth.tokens = [TokenEntry(name=f"{role}-bot", role=role, sha256=hash_token(tok))  # type: ignore[arg-type]
                            for role, tok in TOKENS.items()]
    settings.auth.trigger_program_allowlist = ["/bin/echo"]
    app = create_app(services=Services(settings=settings, client=client))
    yield Http(app)


def test_catalogue_lists_json_schemas(http: Http) -> None:
    assert http.get("/actions").status_code == 401
    resp = http.get("/actions", headers=auth("reader"))
    assert resp.status_code == 200
    actions = {a["name"]: a for a in resp.json()}
    # the pack's 13, slurm.node.maintain, the 8 job control actions, slurm.job.why (besides the
    # reservations')
    reservations = {f"slurm.reservation.{v}" for v in ("create", "update", "delete")}
    assert reservations <= actions.keys() and all(actions[n]["permission"] == "operate" for n in reservations)
    assert len(actions.keys() - reservations) == 23 and actions["slurm.node.maintain"]["permission"] == "operate"
    assert {n for n, a in actions.items() if a["own_jobs"]} == {
        f"slurm.job.{v}" for v in ("cancel", "hold", "release", "requeue", "suspend", "resume", "signal", "update",
                                   "why")}
    drain = actions["slurm.node.drain"]
    assert drain["permission"] == "operate" and drain["mutating"] is True
    assert drain["parameters"]["required"] == ["nodes"]
    assert actions["slurm.trigger.set"]["permission"] == "admin"


def test_roles_401_403_200_and_audit_names_the_token(http: Http, clean_nodes: Any) -> None:
    body = {"nodes": "n[1-2]", "reason": "psu swap"}
    before = node_states()
    assert http.post("/actions/slurm.node.drain", json=body).status_code == 401
    denied = http.post("/actions/slurm.node.drain", json=body, headers=auth("reader"))
    assert denied.status_code == 403 and denied.headers["content-type"].startswith("application/problem+json")
    assert node_states() == before
    ok = http.post("/actions/slurm.node.drain", json=body, headers=auth("operator"))
    assert ok.status_code == 200, ok.text
    env = ok.json()
    assert env["status"] == "succeeded" and env["principal"] == "operator-bot" and env["via"] == "api"
    assert env["result"]["reason"] == "psu swap [slurmtower:operator-bot@api]"
    assert all("DRAIN" in node_states()[n] for n in ("n1", "n2"))
    got = http.get(f"/executions/{env['execution_id']}", headers=auth("reader"))
    assert got.status_code == 200 and got.json()["result"] == env["result"]
    audit = http.get("/audit", headers=auth("reader")).json()["records"]
    assert audit[0]["who"] == "operator-bot" and audit[0]["via"] == "api" and audit[0]["outcome"] == "succeeded"
    # admin is another owner: refused with 409 naming the holder
    refused = http.post("/actions/slurm.node.resume", json={"nodes": "n[1-2]"}, headers=auth("admin"))
    assert refused.status_code == 409
    assert "slurmtower:operator-bot@api" in refused.json()["detail"]
    assert refused.json()["holders"] == {"n1": ["slurmtower:operator-bot@api"], "n2": ["slurmtower:operator-bot@api"]}
    resumed = http.post("/actions/slurm.node.resume", json={"nodes": "n[1-2]"}, headers=auth("operator"))
    assert resumed.status_code == 200 and resumed.json()["status"] == "succeeded"


def test_read_action_needs_only_reader(http: Http) -> None:
    resp = http.post("/actions/slurm.node.get", json={"nodes": "n3"}, headers=auth("reader"))
    assert resp.status_code == 200 and list(resp.json()["result"]) == ["n3"]


@pytest.mark.parametrize(("name", "body", "status", "param"), [
    ("slurm.node.drian", {"nodes": "n1"}, 404, "action"),
    ("slurm.node.drain", {"nodes": "n1", "why": "x"}, 400, "why"),
    ("slurm.node.drain", {"nodes": ["n1", 2]}, 400, "nodes"),
    ("slurm.node.drain", {"nodes": "n[1-"}, 400, "nodes"),
    ("slurm.node.drain", {"nodes": "n1,zz1"}, 404, "nodes"),
    ("slurm.node.drain", {"nodes": "n1", "reason": ""}, 400, "reason"),
    ("slurm.node.reserve", {"nodes": "n1", "props": {"flags": ["MAINTENANCE"]}}, 400, "props.flags"),
    ("slurm.node.update", {"nodes": "n1", "infos": {"cpus": 1}}, 400, "infos"),
], ids=["unknown-action", "unknown-param", "wrong-type", "malformed-nodeset", "unknown-node", "empty-reason",
        "bad-flag", "not-updatable"])
def test_bad_input_is_a_4xx_problem_and_changes_nothing(http: Http, name: str, body: dict[str, Any],
                                                       status: int, param: str) -> None:
    before = node_states(), sh("scontrol", "-o", "show", "reservation", check=False)
    resp = http.post(f"/actions/{name}", json=body, headers=auth("operator"))
    assert resp.status_code == status, resp.text
    problem = resp.json()
    assert problem["status"] == status and problem["param"] == param and problem["detail"]
    assert (node_states(), sh("scontrol", "-o", "show", "reservation", check=False)) == before


def test_triggers_need_admin_and_an_allowed_program(http: Http) -> None:
    body = {"program": "/bin/echo api-test", "event": "down", "dry_run": True}
    assert http.post("/actions/slurm.trigger.set", json=body, headers=auth("operator")).status_code == 403
    bad = http.post("/actions/slurm.trigger.set", json={**body, "program": "/bin/sh -c id"}, headers=auth("admin"))
    assert bad.status_code == 403 and "allowlist" in bad.json()["detail"]
    ok = http.post("/actions/slurm.trigger.set", json=body, headers=auth("admin"))
    assert ok.status_code == 200 and ok.json()["dry_run"] is True


def test_unknown_execution_404(http: Http) -> None:
    assert http.get("/executions/nope", headers=auth("reader")).status_code == 404


def test_audit_keyset_pagination(http: Http) -> None:
    for _ in range(3):
        http.post("/actions/slurm.node.drain?dry_run=true", json={"nodes": "n1"}, headers=auth("operator"))
    page = http.get("/audit?limit=4", headers=auth("reader")).json()  # each: its intent, then its outcome
    assert len(page["records"]) == 4 and page["next_before"] is not None
    rest = http.get(f"/audit?limit=4&before={page['next_before']}", headers=auth("reader")).json()
    assert [r["outcome"] for r in rest["records"]] == ["dry_run", "intent"]


@pytest.mark.parametrize("how", ["declared", "chunked"])
def test_an_action_body_over_the_bound_is_a_413_and_runs_nothing(http: Http, how: str) -> None:
    """``api.max_action_body_bytes`` (1 MiB): a bigger body is refused before it is parsed,
    whether its Content-Length says so or it streams without one; nothing runs, nothing is
    recorded (the audit and the executions stay as they were)."""
    before = http.get("/audit", params={"limit": 1}, headers=auth("admin")).json()
    big = b'{"nodes": "n1", "reason": "' + b"x" * (2 << 20) + b'"}'

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: Transfer-Encoding chunked
        for i in range(0, len(big), 64 << 10):
            yield big[i:i + (64 << 10)]

    content: Any = big if how == "declared" else chunks()
    resp = http.post("/actions/slurm.node.drain", content=content, headers={
        **auth("operator"), "Content-Type": "application/json"})
    assert resp.status_code == 413 and resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["param"] == "body" and "api.max_action_body_bytes" in resp.json()["detail"]
    assert http.get("/audit", params={"limit": 1}, headers=auth("admin")).json() == before
    assert "DRAIN" not in node_states()["n1"]
    small = http.post("/actions/slurm.node.get", json={"nodes": "n1", "pad": "y" * 1000}, headers=auth("reader"))
    assert small.status_code == 400 and small.json()["param"] == "pad"  # read, parsed, refused by name


def test_a_refused_call_is_audited_with_its_parameters_cut_to_a_bound(http: Http) -> None:
    """Issue 21's reproduction: a refused call's parameters were stored whole (a 30 MB request,
    a 30 MB audit record that ``GET /audit`` sent to readers). Now a value over 4 KiB, or past
    16 KiB in all, is left out and named with its size in ``_cut``; the rest is kept."""
    body = {"nodes": "n1", "reason": "kept", "junk": "y" * 900_000, "_cut": {"forged": 1}}
    resp = http.post("/actions/slurm.node.drain", json=body, headers=auth("operator"))
    assert resp.status_code == 400 and resp.json()["param"] in {"junk", "_cut"}
    page = http.get("/audit", params={"limit": 2}, headers=auth("reader"))
    assert len(page.content) < 32_000
    record = page.json()["records"][0]
    assert record["outcome"] == "rejected" and record["who"] == "operator-bot"
    assert record["parameters"]["nodes"] == "n1" and record["parameters"]["reason"] == "kept"
    assert record["parameters"]["_cut"] == {"junk": 900_002, "_cut": 13}
    assert "DRAIN" not in node_states()["n1"]
