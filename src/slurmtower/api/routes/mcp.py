"""/mcp: the agent endpoint (Model Context Protocol, streamable HTTP) on the API's port and tokens.

The caller is authenticated by the API's one credential check (``require``: a token, a JWT,
a session) and must bring a credential (401 without one, even where ``auth.anonymous_read``
opens the reads); its principal is handed to the MCP server (:mod:`slurmtower.mcp.server`),
which gives each tool the principal's role on the cluster it names. The transport is
stateless with JSON answers: any worker of a ``serve --workers N`` answers any call, and what
must outlive a call (a plan's confirmation) is in the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from slurmtower.api.deps import ServicesDep
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.security import Perm, Principal, authenticate, require
from slurmtower.errors import AuthenticationError, NotFound
from slurmtower.mcp.server import CALLER, AgentServer, Caller
from slurmtower.principal import ANONYMOUS
from slurmtower.runtime import Services

__all__ = ["router", "setup"]

router = APIRouter(tags=["agents"])


def setup(services: Services, app: FastAPI) -> None:
    """Build the MCP server and run its transport in the app's lifespan."""
    agent = AgentServer(services.settings)
    app.state.agent_server = agent
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        async with inner(application) as state, agent.running():
            yield state

    app.router.lifespan_context = lifespan


class _Relay(Response):
    """Hands the request to the MCP transport, which answers it itself."""

    def __init__(self, agent: AgentServer) -> None:
        super().__init__()
        self.agent = agent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.agent.handle(scope, receive, send)


#: The transport's own refusals (the MCP SDK's, before a tool runs): a JSON-RPC error, or its
#: plain-text 400 for a POST whose Content-Type is not application/json.
_TRANSPORT_REFUSALS: dict[int | str, dict[str, Any]] = {
    202: {"description": "A JSON-RPC notification or response (no `id` to answer): accepted, no body."},
    400: {"description": "Not a JSON-RPC message (a JSON-RPC error), or a body not sent as "
                         "`Content-Type: application/json` (plain text: `Invalid Content-Type header`).",
          "content": {"application/json": {"schema": {"type": "object"}},
                      "text/plain": {"schema": {"type": "string"}}}},
    406: {"description": "`Accept` names neither `application/json` nor `text/event-stream` (a JSON-RPC error).",
          "content": {"application/json": {"schema": {"type": "object"}}}},
    415: {"description": "The body is not JSON (a JSON-RPC error).",
          "content": {"application/json": {"schema": {"type": "object"}}}},
}
#: The body: one JSON-RPC message of the Model Context Protocol.
_MESSAGE = {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["jsonrpc", "method"],
    "properties": {"jsonrpc": {"const": "2.0"}, "method": {"type": "string"},
                   "id": {"type": ["integer", "string"]}, "params": {"type": "object"}}}}}}


@router.post("/mcp", response_model=None, openapi_extra={"requestBody": _MESSAGE}, responses={
    200: {"description": "The protocol's JSON-RPC answer (`application/json`): a result or a JSON-RPC error.",
          "content": {"application/json": {"schema": {"type": "object"}}}},
    **problems(*READ_PROBLEMS, 404), **_TRANSPORT_REFUSALS})
async def mcp(request: Request, services: ServicesDep,
              principal: Annotated[Principal, require(Perm.READ)]) -> Response:
    """The agent endpoint (Model Context Protocol, streamable HTTP): the catalogue as tools, the cluster as reads."""
    if principal is ANONYMOUS:
        raise AuthenticationError("the agent endpoint takes a credential (Authorization: Bearer <token>)")
    if not services.settings.mcp.enabled:
        raise NotFound("the agent endpoint is off (mcp.enabled)")
    # The principal as authenticated (its deployment role): each tool takes its role on the
    # cluster it names, as require() does for the cluster a request names.
    request.scope[CALLER] = Caller(await authenticate(request), services)
    return _Relay(request.app.state.agent_server)
