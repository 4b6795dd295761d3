"""The agent endpoint (issue 46) with the MCP SDK's own client, against a real ``slurmtower serve``
on the local cluster: over streamable HTTP (``/mcp``) and over stdio (``slurmtower mcp``).

One server for the module, with four tokens of its own: ``agent-otto`` (an operator's agent,
which may resume nodes itself: ``mcp.act_directly``), ``agent-rita`` (a reader's), ``agent-busy``
(the rate limit's) and the devcluster's ``demo-operator``, the person who approves. The circuit
breaker is on (half of ``debug`` per window), confirmations last ``CONFIRM_SECONDS``, pages are
small (``PAGE`` items, at most ``MOST``) so that a queue of ``HELD`` jobs takes several.

Set ``SLURMTOWER_MCP_TRANSCRIPT`` to a file to keep the drain's session (each call and answer):
the README's transcript is one.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tomllib
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import httpx2
import pytest
import yaml
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolRequestParams, CallToolResult

from slurmtower.actions import Catalogue
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.mcp.server import CALLER, AgentServer, Caller
from slurmtower.models.node import state_text
from slurmtower.principal import Principal
from slurmtower.runtime import Services, assemble
from slurmtower.settings import ClusterSettings, Settings

from .conftest import node_states, reason_of, restore_all_nodes, sh, wait_for
from .sensor_helpers import SLURMTOWER, serve_env
from .serve_helpers import ServeProcess

pytestmark = pytest.mark.cluster

AGENT = "stw_test_agent_otto_token"
READER_AGENT = "stw_test_agent_rita_token"
BUSY_AGENT = "stw_test_agent_busy_token"
CONFIRM_SECONDS = 8
PAGE, MOST = 10, 20
HELD = 45
CALLS_PER_MINUTE = 60
READS = ("slurmtower.queue", "slurmtower.nodes", "slurmtower.partitions", "slurmtower.reservations",
         "slurmtower.events", "slurmtower.node_timeline", "slurmtower.request", "slurmtower.requests")


class Served:
    def __init__(self, process: ServeProcess, cluster: DevCluster) -> None:
        self.process = process
        self.url = f"{process.url}/mcp"
        self.operator = cluster.demo_tokens()["operator"]  # demo-operator: the person who approves

    def http(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.process.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


@pytest.fixture(scope="module")
def served(devcluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    state_dir = tmp_path_factory.mktemp("mcp")
    config = tomllib.loads(devcluster.tower_conf.read_text())
    config["auth"]["tokens"] += [
        {"name": "agent-otto", "role": "operator", "sha256": hash_token(AGENT)},
        {"name": "agent-rita", "role": "reader", "sha256": hash_token(READER_AGENT)},
        {"name": "agent-busy", "role": "reader", "sha256": hash_token(BUSY_AGENT)},
    ]
    config["auth"]["anonymous_read"] = True  # still 401 at /mcp: an agent brings a credential
    config["api"]["hidden_partitions"] = ["short"]  # short n[3-4]: its jobs and its name leave every read
    config["actions"] = {"breaker_enabled": True, "breaker_share": 0.5, "breaker_cluster_share": 1.0,
                         "breaker_partition_shares": {"batch": 1.0, "short": 1.0}}
    config["mcp"] = {"confirm_seconds": CONFIRM_SECONDS, "page_size": PAGE, "max_page_size": MOST,
                     "calls_per_minute": CALLS_PER_MINUTE, "act_directly": {"agent-otto": ["slurm.node.resume"]}}
    path = state_dir / "slurmtower.yaml"
    path.write_text(yaml.safe_dump(config))
    env = serve_env(devcluster, state_dir, SLURMTOWER_EVENTS__SENSOR_ENABLED="false",
                    SLURMTOWER_ARCHIVER__ARCHIVE_USAGE_LOAD="false")
    env["SLURMTOWER_CONFIG"] = str(path)
    process = ServeProcess(env, state_dir / "serve.log", ("--host", "127.0.0.1", "--no-access-log"))
    restore_all_nodes(devcluster)
    try:
        process.start(timeout=60)
        yield Served(process, devcluster)
    finally:
        process.stop()
        restore_all_nodes(devcluster)


@asynccontextmanager
async def connected(served: Served, token: str) -> AsyncIterator[Client]:
    """The SDK's client on ``/mcp`` with ``token`` (streamable HTTP)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http, \
            Client(streamable_http_client(served.url, http_client=http)) as client:
        yield client


def body(result: CallToolResult) -> dict[str, Any]:
    """A tool's answer: its structured content, the same JSON as its text."""
    assert isinstance(result.structured_content, dict)
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


def problem(result: CallToolResult) -> dict[str, Any]:
    """A refused call's problem (an error result, never a protocol error)."""
    assert result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    found: dict[str, Any] = result.structured_content["error"]
    assert result.content[0].text.endswith(found["detail"])  # type: ignore[union-attr]  # one line for the model
    return found


def audit(served: Served, **query: str) -> list[dict[str, Any]]:
    with served.http(served.operator) as http:
        resp = http.get("/audit", params=query)
    assert resp.status_code == 200, resp.text
    records: list[dict[str, Any]] = resp.json()["records"]
    return records


# -- the endpoint, its tools and resources ---------------------------------------------------------------


def test_the_endpoint_takes_a_token_even_where_anonymous_reads_are_open(served: Served) -> None:
    resp = httpx.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"Accept": "application/json, text/event-stream"})
    assert resp.status_code == 401 and resp.headers["content-type"] == "application/problem+json"
    wrong = httpx.post(served.url, json={}, headers={"Authorization": "Bearer not-a-token"})
    assert wrong.status_code == 401
    assert httpx.get(f"{served.process.url}/queue").status_code == 200  # the reads are open


def test_tools_resources_and_prompts_are_listed_with_valid_schemas(served: Served) -> None:
    async def run() -> None:
        async with connected(served, READER_AGENT) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert set(tools) == {*Catalogue.names(), *READS}
        for tool in tools.values():
            Draft202012Validator.check_schema(tool.input_schema)
            assert tool.input_schema["type"] == "object" and tool.description
            assert "\n" not in tool.description
        drain = tools["slurm.node.drain"]
        assert drain.description.startswith(Catalogue.spec("slurm.node.drain").description)
        props = drain.input_schema["properties"]
        assert {"nodes", "reason", "confirmation", "request_reason"} <= set(props) and "dry_run" not in props
        assert "cluster" not in props  # one cluster served
        assert drain.annotations is not None and drain.annotations.destructive_hint
        assert "confirmation" not in tools["slurm.node.get"].input_schema["properties"]
        # A tool's schema says what its action takes: the action's own parameters' schema.
        own = Catalogue.spec("slurm.job.cancel").params.model_json_schema()["properties"]
        assert tools["slurm.job.cancel"].input_schema["properties"]["jobids"] == own["jobids"]
        assert resources == {f"slurmtower://{r}" for r in ("queue", "nodes", "partitions", "reservations", "events",
                                                             "requests")}
        assert templates == ["slurmtower://nodes/{name}/timeline"]
        assert prompts == {"drain-for-maintenance", "why-pending", "flapping-nodes"}

    asyncio.run(run())


def test_a_read_is_the_cluster_as_slurm_shows_it(served: Served) -> None:
    async def run() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str]:
        async with connected(served, READER_AGENT) as client:
            nodes = body(await client.call_tool("slurmtower.nodes", {}))
            down = body(await client.call_tool("slurmtower.nodes", {"state": "down,drain"}))
            timeline = json.loads((await client.read_resource("slurmtower://nodes/n2/timeline")).contents[0].text)
            prompt = (await client.get_prompt("drain-for-maintenance", {"nodes": "n[1-2]", "reason": "disk"}))
        return nodes, down, timeline, prompt.messages[0].content.text  # type: ignore[union-attr]

    nodes, down, timeline, prompt = asyncio.run(run())
    want = node_states()
    assert nodes["count"] == len(want) == nodes["returned"] and nodes["next_cursor"] is None
    assert {n["name"]: state_text(n["state"], n.get("flags", [])) for n in nodes["nodes"]} == want
    assert down["count"] == sum("DOWN" in s or "DRAIN" in s for s in want.values())
    assert timeline["node"] == "n2" and timeline["state"] == want["n2"]
    assert 'slurm.node.drain with nodes="n[1-2]" and reason="disk"' in prompt


def test_bad_arguments_are_refused_naming_the_argument(served: Served) -> None:
    async def run() -> list[dict[str, Any]]:
        async with connected(served, READER_AGENT) as client:
            return [problem(await client.call_tool(name, args)) for name, args in (
                ("slurmtower.queue", {"state": "BOGUS"}),
                ("slurmtower.queue", {"bogus": 1}),
                ("slurmtower.nodes", {"nodes": "n["}),
                ("slurmtower.node_timeline", {"node": "n99"}),
                ("slurm.node.get", {"nodes": "n1", "confirmation": "0" * 32}),
            )]

    got = asyncio.run(run())
    assert [(p["status"], p.get("param")) for p in got] == [
        (400, "state"), (400, "bogus"), (400, "nodes"), (404, "node"), (400, "confirmation")]


# -- acting: plan, confirmation, request, approval ---------------------------------------------------------


def test_a_drain_is_planned_confirmed_requested_approved_and_audited_with_the_agents_name(served: Served) -> None:
    transcript: list[dict[str, Any]] = []
    args = {"nodes": "n1", "reason": "disk swap"}

    async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = body(await client.call_tool(name, arguments))
        transcript.append({"call": name, "arguments": arguments, "answer": answer})
        return answer

    async def run() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with connected(served, AGENT) as client:
            planned = await call(client, "slurm.node.drain", args)
            assert "DRAIN" not in node_states()["n1"]  # the plan changed nothing
            asked = await call(client, "slurm.node.drain", {**args, "confirmation": planned["confirmation"],
                                                               "request_reason": "smartctl reports reallocated "
                                                                                 "sectors on /dev/sda"})
            assert "DRAIN" not in node_states()["n1"]  # a request changes nothing until a person approves it
            with served.http(served.operator) as http:
                resp = http.post(f"/requests/{asked['request']['id']}/approve", json={"comment": "go ahead"})
            assert resp.status_code == 200, resp.text
            transcript.append({"person": "demo-operator", "approves": f"POST /requests/{asked['request']['id']}"
                                                                      "/approve", "answer": resp.json()})
            followed = await call(client, "slurmtower.request", {"request_id": asked["request"]["id"]})
        return planned, asked, followed

    planned, asked, followed = asyncio.run(run())
    plan = planned["plan"]
    assert plan["dry_run"] and plan["via"] == "mcp" and plan["principal"] == "agent-otto"
    assert planned["acting"] == "request" and planned["confirmation"] == plan["execution_id"]
    request = asked["request"]
    assert request["state"] == "pending" and request["requester"] == "agent-otto" and request["via"] == "mcp"
    assert request["reason"].startswith("smartctl") and request["nodes"] == "n1"
    assert "agent endpoint" in request["why"] and request["plan"]["result"]
    assert "IDLE+DRAIN" in node_states()["n1"] and "slurmtower:agent-otto@mcp" in reason_of("n1")
    assert followed["state"] == "approved" and followed["decided_by"] == "demo-operator"
    acted = [r for r in audit(served, execution_id=followed["execution_id"]) if r["outcome"] == "succeeded"]
    assert [(r["who"], r["via"], r["approved_by"], r["request_id"]) for r in acted] == [
        ("agent-otto", "mcp", "demo-operator", request["id"])]
    dry = audit(served, execution_id=planned["confirmation"])
    assert {(r["who"], r["via"], r["outcome"]) for r in dry} >= {("agent-otto", "mcp", "dry_run")}
    out = os.environ.get("SLURMTOWER_MCP_TRANSCRIPT")
    if out:
        Path(out).write_text(json.dumps(transcript, indent=2, default=str))

    # mcp.act_directly lets this agent resume nodes itself: confirmed, it runs at once.
    async def resume() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connected(served, AGENT) as client:
            planned = body(await client.call_tool("slurm.node.resume", {"nodes": "n1"}))
            done = body(await client.call_tool("slurm.node.resume", {"nodes": "n1",
                                                                     "confirmation": planned["confirmation"]}))
        return planned, done

    planned, done = asyncio.run(resume())
    assert planned["acting"] == "direct"
    assert done["execution"]["status"] == "succeeded" and done["execution"]["via"] == "mcp"
    assert "DRAIN" not in node_states()["n1"]


def test_a_confirmation_replayed_expired_or_for_other_parameters_does_nothing(served: Served) -> None:
    args = {"nodes": "n2", "reason": "fan check"}

    async def run() -> dict[str, dict[str, Any]]:
        async with connected(served, AGENT) as client:
            first = body(await client.call_tool("slurm.node.drain", args))["confirmation"]
            other = problem(await client.call_tool("slurm.node.drain", {**args, "nodes": "n3",
                                                                        "confirmation": first}))
            used = body(await client.call_tool("slurm.node.drain", {**args, "confirmation": first}))
            replayed = problem(await client.call_tool("slurm.node.drain", {**args, "confirmation": first}))
            plan = body(await client.call_tool("slurm.node.drain", args))
            expires = datetime.fromisoformat(plan["expires_at"])
            wait_for(lambda: datetime.now(UTC) >= expires, CONFIRM_SECONDS + 5, what="the confirmation to expire")
            expired = problem(await client.call_tool("slurm.node.drain", {**args,
                                                                          "confirmation": plan["confirmation"]}))
        async with connected(served, READER_AGENT) as client:  # another principal's confirmation
            stolen = problem(await client.call_tool("slurm.node.drain", {**args, "confirmation": first}))
        return {"other": other, "used": used, "replayed": replayed, "expired": expired, "stolen": stolen}

    got = asyncio.run(run())
    assert got["other"]["status"] == 409 and got["other"]["param"] == "confirmation"
    assert got["other"]["differ"] == ["nodes"] and "nothing was done" in got["other"]["detail"]
    assert got["used"]["request"]["state"] == "pending"  # the one use: a request, once
    assert got["replayed"]["status"] == 409 and "already used" in got["replayed"]["detail"]
    assert got["expired"]["status"] == 409 and "expired" in got["expired"]["detail"]
    assert got["stolen"]["status"] == 403  # a reader's agent: refused before anything
    with served.http(served.operator) as http:
        pending = http.get("/requests", params={"state": "pending", "requester": "agent-otto"}).json()["requests"]
        for req in pending:  # nothing runs: the test's requests are denied
            assert http.post(f"/requests/{req['id']}/deny", json={}).status_code == 200
    assert [r["nodes"] for r in pending] == ["n2"]
    assert not any("DRAIN" in node_states()[n] for n in ("n2", "n3"))


def test_a_readers_agent_is_refused_a_mutating_tool_before_any_dry_run(served: Served) -> None:
    async def run() -> dict[str, Any]:
        async with connected(served, READER_AGENT) as client:
            return problem(await client.call_tool("slurm.node.drain", {"nodes": "n3", "reason": "x"}))

    refused = asyncio.run(run())
    assert refused["status"] == 403 and "agent-rita (reader) may not run slurm.node.drain" in refused["detail"]
    assert audit(served, who="agent-rita") == []
    assert "DRAIN" not in node_states()["n3"]


def test_the_breaker_refuses_an_agents_plan_as_a_persons(served: Served) -> None:
    async def run() -> dict[str, Any]:
        async with connected(served, AGENT) as client:
            return problem(await client.call_tool("slurm.node.drain", {"nodes": "n[1-4]", "reason": "all of them"}))

    refused = asyncio.run(run())
    assert refused["status"] == 409 and refused["type"].endswith("/BreakerTripped")
    assert "debug" in refused["detail"]
    assert not any("DRAIN" in state for state in node_states().values())
    refusals = [r for r in audit(served, who="agent-otto", action="slurm.node.drain") if r["outcome"] == "refused"]
    assert refusals and refusals[0]["via"] == "mcp" and refusals[0]["parameters"]["nodes"] == "n[1-4]"


def test_calls_past_the_principals_rate_are_refused(served: Served) -> None:
    async def run() -> tuple[list[bool], dict[str, Any]]:
        async with connected(served, BUSY_AGENT) as client:
            errors = []
            for _ in range(CALLS_PER_MINUTE + 1):
                errors.append((await client.call_tool("slurmtower.partitions", {})).is_error)
        async with connected(served, READER_AGENT) as other:  # another principal is not slowed
            fine = body(await other.call_tool("slurmtower.partitions", {}))
        return errors, fine

    errors, fine = asyncio.run(run())
    assert errors == [False] * CALLS_PER_MINUTE + [True]
    assert [p["name"] for p in fine["partitions"]] == ["batch", "debug"]  # short is hidden


# -- pages ---------------------------------------------------------------------------------------------------


#: The held jobs' name: this run's own (an earlier run's cancelled ones stay in the queue a while).
HELD_NAME = f"mcp-held-{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def held(served: Served) -> Iterator[list[int]]:
    jobs = [int(sh("sbatch", "--parsable", "--hold", "-J", HELD_NAME, "-o", "/dev/null", "-D", "/tmp", *partition,
                   "--wrap", "true").split(";")[0]) for partition in [["-p", "short"]] + [[]] * HELD]
    try:
        yield jobs
    finally:
        sh("scancel", *map(str, jobs), check=False)


def test_a_large_queue_comes_in_pages_with_counts(served: Served, held: list[int]) -> None:
    # The snapshot's next refresh (api.refresh_interval) holds them: the API's /queue reads it too.
    wait_for(lambda: httpx.get(f"{served.process.url}/queue", params={"name": HELD_NAME}).json()["count"] == HELD,
             30, 0.5, what="the held jobs in the queue")

    async def run() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
        async with connected(served, AGENT) as client:  # an operator's agent sees every private field
            operators = body(await client.call_tool("slurmtower.queue", {"name": HELD_NAME, "limit": 1}))
        async with connected(served, READER_AGENT) as client:
            pages = [body(await client.call_tool("slurmtower.queue", {"name": HELD_NAME}))]
            while pages[-1]["next_cursor"] is not None:
                pages.append(body(await client.call_tool("slurmtower.queue", {
                    "name": HELD_NAME, "limit": 1000, "cursor": pages[-1]["next_cursor"]})))
            resource = json.loads((await client.read_resource("slurmtower://queue")).contents[0].text)
        return pages, resource, operators

    pages, resource, operators = asyncio.run(run())
    assert [(p["count"], p["returned"]) for p in pages] == [(HELD, PAGE), (HELD, MOST), (HELD, HELD - PAGE - MOST)]
    ids = [j["job_id"] for p in pages for j in p["jobs"]]
    assert ids == sorted(held[1:])  # not the job of the hidden partition
    # root's jobs: a reader's agent sees them without their private fields (api.private_job_fields)
    assert operators["jobs"][0]["work_dir"] == "/tmp"
    assert not any("work_dir" in j or "submit_line" in j for p in pages for j in p["jobs"])
    assert resource["returned"] == PAGE and resource["count"] >= HELD


# -- stdio ---------------------------------------------------------------------------------------------------


def test_slurmtower_mcp_over_stdio_relays_the_endpoint_with_the_agents_token(served: Served) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMTOWER_")}
    params = StdioServerParameters(command=SLURMTOWER, args=["mcp", "--url", served.process.url],
                                   env={**env, "SLURMTOWER_TOKEN": AGENT})

    async def run() -> tuple[set[str], dict[str, Any], dict[str, Any]]:
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            nodes = body(await client.call_tool("slurmtower.nodes", {"nodes": "n[3-4]"}))
            planned = body(await client.call_tool("slurm.node.drain", {"nodes": "n4", "reason": "stdio"}))
        return tools, nodes, planned

    tools, nodes, planned = asyncio.run(run())
    assert tools == {*Catalogue.names(), *READS}
    assert [n["name"] for n in nodes["nodes"]] == ["n3", "n4"]
    assert planned["plan"]["principal"] == "agent-otto" and planned["plan"]["via"] == "mcp"
    assert sorted(r["outcome"] for r in audit(served, execution_id=planned["confirmation"])) == ["dry_run", "intent"]
    assert "DRAIN" not in node_states()["n4"]

    refused = subprocess.run([SLURMTOWER, "mcp", "--url", served.process.url], input="", capture_output=True,
                             text=True, timeout=60, env={**env, "SLURMTOWER_TOKEN": "not-a-token"})
    assert refused.returncode == 77 and refused.stdout == ""
    assert refused.stderr.startswith("slurmtower: error: ") and "refused the token" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


# -- several clusters ------------------------------------------------------------------------------------------


def test_where_several_clusters_are_served_each_tool_takes_one_and_the_role_there(tmp_path: Path) -> None:
    """In-process (no second Slurm cluster): the tools' schemas, the cluster each call names
    and the role it gives the agent there (``[[clusters]] roles``, ``max_role``); a refusal
    comes before any Slurm or store read."""
    settings = Settings(state_dir=tmp_path, clusters=[
        ClusterSettings(name="alpha"), ClusterSettings(name="beta", roles={"agent-otto": "reader"}),
        ClusterSettings(name="gamma", max_role="reader")])
    services = assemble(Services.from_settings(settings), {"live"})
    agent = AgentServer(services.settings)
    assert all("cluster" in t.input_schema["properties"] for t in agent.tools)
    caller = Caller(Principal(name="agent-otto", role="operator"), services)
    assert [(agent.on_cluster(caller, name)[0].name, agent.on_cluster(caller, name)[1].role)
            for name in (None, "alpha", "beta", "gamma")] == [
        ("alpha", "operator"), ("alpha", "operator"), ("beta", "reader"), ("gamma", "reader")]
    ctx = SimpleNamespace(request=SimpleNamespace(scope={CALLER: caller}))

    async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return problem(await agent._call_tool(ctx, CallToolRequestParams(name=name, arguments=arguments)))

    refused = asyncio.run(call("slurm.node.drain", {"nodes": "n1", "reason": "x", "cluster": "beta"}))
    assert refused["status"] == 403 and "agent-otto (reader)" in refused["detail"]
    unknown = asyncio.run(call("slurmtower.nodes", {"cluster": "delta"}))
    assert unknown["status"] == 404 and unknown["param"] == "cluster"
