"""The agent endpoint: slurmtower as a Model Context Protocol server (the official SDK's).

Served as ``/mcp`` on ``slurmtower serve`` (:mod:`slurmtower.api.routes.mcp`: the protocol's
streamable HTTP transport, stateless, JSON answers, so any worker answers any call) and
relayed over stdio by ``slurmtower mcp`` (:mod:`slurmtower.mcp.bridge`). The HTTP route
authenticates the caller with the API's one credential check and hands its principal here
(:data:`CALLER` in the request's scope): an agent is its token's principal, with that
principal's role on each cluster, as over HTTP.

* **Tools**: every catalogue action (its parameters' JSON Schema, its one-line description;
  a mutating one plans first and acts on confirmation, :mod:`slurmtower.mcp.acting`), and the
  reads of :data:`slurmtower.mcp.reads.READS` (queue, nodes, partitions, reservations, events,
  a node's timeline, requests) with the API's filters and pages. Each takes ``cluster`` where
  the deployment serves several.
* **Resources**: the first page of each read (``slurmtower://queue`` ...) and a node's
  timeline (``slurmtower://nodes/{name}/timeline``), the default cluster's.
* **Prompts**: runbooks (:mod:`slurmtower.mcp.prompts`).

Library errors become the tool's error result (``isError``, the problem body as its
structured content) in :func:`refusal`, or a JSON-RPC error for a resource or a prompt: the
one place this adapter translates them. Calls are counted per principal
(``mcp.calls_per_minute``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError
from starlette.types import Receive, Scope, Send

from slurmtower import __version__
from slurmtower.actions import Catalogue, Envelope
from slurmtower.errors import AuthenticationError, ConfigError, InvalidInput, PermissionDenied, SlurmtowerError
from slurmtower.mcp import acting
from slurmtower.mcp.prompts import PROMPTS, render
from slurmtower.mcp.reads import READS, TimelineArgs
from slurmtower.models.request import ActionRequest
from slurmtower.principal import ANONYMOUS, Perm, Principal, role_on_cluster
from slurmtower.runtime import Services
from slurmtower.settings import McpSettings, Settings
from slurmtower.visibility import Hidden, Visibility

__all__ = ["CALLER", "AgentServer", "Caller", "RateLimited", "action_schema", "refusal"]

log = logging.getLogger(__name__)

#: The request scope's key the HTTP route puts the :class:`Caller` under.
CALLER = "slurmtower.mcp.caller"
#: Arguments every mutating tool takes beside its action's parameters.
_ACT_ARGS = ("confirmation", "request_reason")

INSTRUCTIONS = """slurmtower: a Slurm cluster's control tower. Read with the slurmtower.* tools (one page at a \
time: count, next_cursor) and the resources. Every slurm.* tool is a catalogue action. A mutating one acts in \
two calls with the same arguments: the first is its dry run and answers the plan and a confirmation id; the \
second, with confirmation=<id> (within the time the plan says) and request_reason=<why>, acts: by default it \
becomes a request a person approves (follow it with slurmtower.request). Holds, the circuit breaker and your \
role apply as to people; every step is audited with your name, via mcp."""


class RateLimited(SlurmtowerError):
    """A principal made more calls than ``mcp.calls_per_minute`` in the last minute."""

    http_status = 429
    exit_code = 75
    title = "too many calls"


@dataclass(frozen=True)
class Caller:
    """Who calls (its principal as authenticated: its deployment role) and the deployment's
    services (the default cluster's)."""

    principal: Principal
    services: Services


class CallLimiter:
    """Calls per principal over a sliding minute (this process's count); memory bounded by
    the principals calling within the minute."""

    def __init__(self, per_minute: int, *, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.window = window
        self._clock = clock
        self._calls: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def take(self, who: str) -> None:
        """Count a call of ``who``; raises :class:`RateLimited` (with ``retry_after``) past the limit."""
        if self.per_minute <= 0:
            return
        with self._lock:
            now = self._clock()
            for name in [n for n, times in self._calls.items() if times[-1] <= now - self.window]:
                del self._calls[name]
            times = self._calls.setdefault(who, deque())
            while times and times[0] <= now - self.window:
                times.popleft()
            if len(times) >= self.per_minute:
                wait = times[0] + self.window - now
                raise RateLimited(f"{who} made {len(times)} calls in the last minute (mcp.calls_per_minute = "
                                  f"{self.per_minute}); retry in {wait:.0f} s", retry_after=round(wait + 0.5))
            times.append(now)


def _schema_of(model: type[BaseModel], several: bool) -> dict[str, Any]:
    schema = model.model_json_schema()
    if not several:
        schema.get("properties", {}).pop("cluster", None)
    schema.pop("title", None)
    return schema


def action_schema(name: str, *, several: bool) -> dict[str, Any]:
    """The input schema of action ``name``'s tool: its parameters' JSON Schema without
    ``dry_run`` (every first call of a mutating tool is one), with ``confirmation`` and
    ``request_reason`` for a mutating one and ``cluster`` where several are served."""
    spec = Catalogue.spec(name)
    schema = spec.params.model_json_schema()
    schema.pop("title", None)
    props: dict[str, Any] = schema.setdefault("properties", {})
    taken = {"cluster", *_ACT_ARGS} & set(props)
    if taken:  # an action parameter would be shadowed: a catalogue change must rename it
        raise AssertionError(f"{name}: parameter {sorted(taken)[0]!r} is the agent endpoint's")
    props.pop("dry_run", None)
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r != "dry_run"]
    if spec.mutating:
        props["confirmation"] = {
            "type": "string", "pattern": acting.CONFIRMATION_RE.pattern,
            "description": "Leave out for the plan (the dry run); then the plan's confirmation id, with the same "
                           "arguments, to act."}
        props["request_reason"] = {
            "type": "string", "maxLength": 1000,
            "description": "Why, for the person who approves the request the act becomes."}
    if several:
        props["cluster"] = {"type": "string", "maxLength": 40,
                            "description": "Which cluster (default: the deployment's default cluster)."}
    schema.setdefault("type", "object")
    return schema


def refusal(exc: SlurmtowerError) -> types.CallToolResult:
    """A library error as a tool's error result: one line for the model, the problem body
    (RFC 9457: status, title, detail, the parameter it names) as structured content."""
    problem = exc.to_problem()
    return types.CallToolResult(content=[types.TextContent(text=f"{exc.title} ({exc.http_status}): {exc.message}")],
                                structured_content={"error": problem}, is_error=True)


def _answer(body: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(body, default=str))],
                                structured_content=body, is_error=error)


def _caller(ctx: Any) -> Caller:
    request = getattr(ctx, "request", None)
    found = request.scope.get(CALLER) if request is not None else None
    if not isinstance(found, Caller):
        raise AuthenticationError("the agent endpoint answers authenticated calls only (serve's /mcp)")
    return found


def _mcp_error(exc: SlurmtowerError) -> MCPError:
    code = types.INVALID_PARAMS if exc.http_status in (400, 404) else types.INTERNAL_ERROR
    return MCPError(code, f"{exc.title} ({exc.http_status}): {exc.message}", data=exc.to_problem())


class AgentServer:
    """The MCP server over a deployment's services, and its streamable HTTP transport.

    Args:
        settings: the deployment's settings (``[mcp]``; whether several clusters are served).
    """

    RESOURCES: ClassVar[dict[str, str]] = {
        "queue": "slurmtower.queue", "nodes": "slurmtower.nodes", "partitions": "slurmtower.partitions",
        "reservations": "slurmtower.reservations", "events": "slurmtower.events", "requests": "slurmtower.requests",
    }

    def __init__(self, settings: Settings) -> None:
        self.settings: McpSettings = settings.mcp
        self.several = len(settings.deployment().cluster_names()) > 1
        self.limiter = CallLimiter(self.settings.calls_per_minute)
        self.server: Server[Any] = Server(
            "slurmtower", version=__version__, title="slurmtower", instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool, on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates, on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts, on_get_prompt=self._get_prompt)
        self.max_body = settings.api.max_action_body_bytes
        self.manager: StreamableHTTPSessionManager | None = None
        self.tools = self._tools()

    # -- the transport --------------------------------------------------------------------
    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The transport and its task group, for the app's lifespan (a manager runs once: each
        lifespan has its own)."""
        manager = StreamableHTTPSessionManager(self.server, json_response=True, stateless=True,
                                               max_request_body_size=self.max_body)
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request of the protocol (its :data:`CALLER` set by the route).

        Raises :class:`ConfigError` outside the app's lifespan (the transport is not running)."""
        if self.manager is None:
            raise ConfigError("the agent endpoint's transport is not running (outside the app's lifespan)")
        await self.manager.handle_request(scope, receive, send)

    # -- who, where -------------------------------------------------------------------------
    def on_cluster(self, caller: Caller, name: str | None) -> tuple[Services, Principal]:
        """The services of cluster ``name`` (``None``: the default) and the caller's principal
        with its role there (``[[clusters]] roles, max_role``), which must at least read."""
        if name is not None and not isinstance(name, str):
            raise InvalidInput("cluster must be a cluster's name", param="cluster")
        services = caller.services.cluster(name)
        principal = caller.principal
        entry = services.settings.cluster_entry()
        if entry is not None:
            principal = role_on_cluster(principal, entry.roles, entry.max_role)
        if principal is ANONYMOUS or principal.perm < Perm.READ:
            raise PermissionDenied(f"{principal.name} ({principal.role}) may not read cluster "
                                   f"{services.name_or_default()}", param="cluster")
        return services, principal

    # -- tools ------------------------------------------------------------------------------
    def _tools(self) -> list[types.Tool]:
        tools = []
        for name, (model, description, _read) in READS.items():
            tools.append(types.Tool(name=name, description=description, input_schema=_schema_of(model, self.several),
                                    annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False)))
        for name in Catalogue.names():
            spec = Catalogue.spec(name)
            description = spec.description
            if spec.mutating:
                description += (" Two calls: the first answers the dry run's plan and a confirmation id; the "
                                "second, with confirmation, acts (by default a request a person approves).")
            tools.append(types.Tool(
                name=name, description=description, input_schema=action_schema(name, several=self.several),
                annotations=types.ToolAnnotations(read_only_hint=not spec.mutating, destructive_hint=spec.mutating,
                                                  idempotent_hint=not spec.mutating, open_world_hint=False)))
        return tools

    async def _list_tools(self, _ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            caller = _caller(ctx)
            self.limiter.take(caller.principal.name)
            arguments = dict(params.arguments or {})
            if params.name in READS:
                return _answer(await self.read(caller, params.name, arguments))
            return await self._action(caller, params.name, arguments)
        except SlurmtowerError as exc:
            return refusal(exc)

    async def read(self, caller: Caller, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run read tool ``name`` (:data:`~slurmtower.mcp.reads.READS`) for ``caller``."""
        model, _description, run = READS[name]
        try:
            args = model.model_validate(arguments)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "arguments"
            known = ", ".join(model.model_fields)
            hint = f" (known: {known})" if err["type"] == "extra_forbidden" else ""
            raise InvalidInput(f"{name}: {where}: {err['msg']}{hint}", param=where) from None
        if args.cluster is not None and not self.several:
            raise InvalidInput("cluster: this deployment serves one cluster", param="cluster")
        services, principal = self.on_cluster(caller, args.cluster)
        if name == "slurmtower.events":
            services = caller.services  # every cluster's events unless one is named
        body: dict[str, Any] = await run(services, principal, args, self.settings)
        return body

    async def _action(self, caller: Caller, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        spec = Catalogue.spec(name)
        cluster = arguments.pop("cluster", None)
        if cluster is not None and not self.several:
            raise InvalidInput("cluster: this deployment serves one cluster", param="cluster")
        services, principal = self.on_cluster(caller, cluster)
        approvals = services.action_catalogue().approvals()
        live = services.live()
        if not spec.mutating:
            extra = sorted(set(arguments) & {*_ACT_ARGS, "dry_run"})
            if extra:
                raise InvalidInput(f"{name} changes nothing: it takes no {extra[0]}", param=extra[0])
            Visibility.from_settings(services.settings).check_search(arguments, principal)
            hidden = await live.hiding()  # read before acting, as the API does
            env = await asyncio.to_thread(acting.run_read, approvals, name, arguments, principal=principal.name,
                                          role=principal.role)
            return _answer(self._envelope(services, env, principal, hidden), error=env.status == "failed")
        if "dry_run" in arguments:
            raise InvalidInput(f"{name}: dry_run is not taken here: the first call is the dry run, the second "
                               "(with confirmation) acts", param="dry_run")
        confirmation = arguments.pop("confirmation", None)
        reason = arguments.pop("request_reason", None)
        for key, value in (("confirmation", confirmation), ("request_reason", reason)):
            if value is not None and not isinstance(value, str):
                raise InvalidInput(f"{key} must be a string", param=key)
        hidden = await live.hiding()
        if confirmation is None:
            planned = await asyncio.to_thread(acting.plan, approvals, spec, arguments, principal=principal.name,
                                              role=principal.role, settings=self.settings)
            shown = self._envelope(services, planned.envelope, principal, hidden)
            if planned.envelope.status == "failed":
                return _answer({"plan": shown, "confirmation": None}, error=True)
            then = ("it runs at once (mcp.act_directly)" if planned.direct
                    else "it becomes a request a person approves (follow it with slurmtower.request)")
            return _answer({
                "plan": shown, "confirmation": planned.confirmation, "expires_at": planned.expires_at.isoformat(),
                "acting": "direct" if planned.direct else "request",
                "next": f"Nothing has changed. To act, call {name} again with the same arguments, "
                        f"confirmation=\"{planned.confirmation}\" and request_reason=<why> before "
                        f"{planned.expires_at:%H:%M:%S} UTC: {then}."})
        done = await asyncio.to_thread(acting.act, approvals, spec, arguments, confirmation,
                                       principal=principal.name, role=principal.role, settings=self.settings,
                                       reason=reason)
        if isinstance(done, ActionRequest):
            seen = hidden.but(done.nodes) if done.requester == principal.name else hidden
            return _answer({"request": seen.scrub(done.model_dump(mode="json")),
                            "next": f"Nothing has changed yet: request {done.id} waits for an "
                                    f"{done.approver_role}'s approval until {done.expires_at:%Y-%m-%d %H:%M} UTC "
                                    f"(slurmtower.request request_id={done.id})."})
        return _answer({"execution": self._envelope(services, done, principal, hidden)},
                       error=done.status == "failed")

    def _envelope(self, services: Services, env: Envelope, principal: Principal, hidden: Hidden) -> dict[str, Any]:
        """The envelope as ``principal`` sees it (as ``POST /actions`` shows it: private job
        fields, hidden nodes and partitions but those it named), its result cut to
        ``mcp.max_page_size`` items and ``mcp.max_answer_bytes``, with the counts."""
        body = env.model_dump(mode="json")
        body["result"] = Visibility.from_settings(services.settings).records(body.get("result"), principal)
        if env.principal == principal.name:
            nodes = env.parameters.get("nodes")
            hidden = hidden.but(nodes if isinstance(nodes, str) else None)
        shown: dict[str, Any] = hidden.scrub(body)
        result, most = shown.get("result"), self.settings.max_page_size
        if isinstance(result, list | dict) and len(result) > most:
            shown["result_count"], shown["result_returned"] = len(result), most
            shown["result"] = result[:most] if isinstance(result, list) else dict(list(result.items())[:most])
        size = len(json.dumps(shown, default=str))
        if size > self.settings.max_answer_bytes:
            shown["result"] = None
            shown["result_cut"] = (f"the answer was {size} bytes, more than mcp.max_answer_bytes "
                                   f"({self.settings.max_answer_bytes}): narrow the parameters")
            shown["stdout"] = shown.get("stdout", "")[:1000]
        return shown

    # -- resources --------------------------------------------------------------------------
    async def _list_resources(self, _ctx: Any,
                              _params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=f"slurmtower://{key}", name=key, mime_type="application/json",
                           description=f"{READS[tool][1]} The first page, default filters; the tool {tool} takes "
                                       "filters, cursors and the cluster.")
            for key, tool in self.RESOURCES.items()])

    async def _list_templates(self, _ctx: Any,
                              _params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template="slurmtower://nodes/{name}/timeline", name="node-timeline",
                                   mime_type="application/json", description=READS["slurmtower.node_timeline"][1]),
        ])

    async def _read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            caller = _caller(ctx)
            self.limiter.take(caller.principal.name)
            path = uri.removeprefix("slurmtower://")
            if path in self.RESOURCES:
                body = await self.read(caller, self.RESOURCES[path], {})
            elif path.startswith("nodes/") and path.endswith("/timeline") and path.count("/") == 2:
                node = path.split("/")[1]
                TimelineArgs(node=node)  # a name's bounds, checked before anything is read
                body = await self.read(caller, "slurmtower.node_timeline", {"node": node})
            else:
                raise InvalidInput(f"no resource {uri[:200]!r} (resources: slurmtower://queue, slurmtower://nodes, "
                                   "... and slurmtower://nodes/{name}/timeline)", param="uri")
        except ValidationError:
            raise MCPError(types.INVALID_PARAMS, f"not a node name: {uri[:200]!r}") from None
        except SlurmtowerError as exc:
            raise _mcp_error(exc) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type="application/json", text=json.dumps(body, default=str))])

    # -- prompts ----------------------------------------------------------------------------
    async def _list_prompts(self, _ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[
            types.Prompt(name=book.name, description=book.description, arguments=[
                types.PromptArgument(name=arg, description=text, required=required)
                for arg, text, required in book.arguments])
            for book in PROMPTS.values()])

    async def _get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        try:
            caller = _caller(ctx)
            self.limiter.take(caller.principal.name)
            book, text = render(params.name, dict(params.arguments or {}))
        except SlurmtowerError as exc:
            raise _mcp_error(exc) from None
        return types.GetPromptResult(description=book.description, messages=[
            types.PromptMessage(role="user", content=types.TextContent(text=text))])
