"""``slurmtower mcp``: the agent endpoint over stdio, for an agent that starts its MCP servers
as commands (on the same host, or wherever the CLI runs).

It is an MCP server on stdin/stdout whose every tool, resource and prompt is the one of a
running ``slurmtower serve``'s ``/mcp``, called with the agent's token (``$SLURMTOWER_TOKEN``):
the credential check, the roles, the plan and confirmation, the requests, the rate limit and
the audit stay the server's, decided in one place. It needs the ``mcp`` extra (the SDK), not
the ``server`` one: no Slurm, store or web framework on this side.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from slurmtower import __version__
from slurmtower.errors import AuthenticationError, InvalidInput, NotFound, PermissionDenied, SlurmtowerError

__all__ = ["check_endpoint", "relay"]

log = logging.getLogger(__name__)

#: Seconds the bridge waits for the server's answer to one call (an approval runs the act).
CALL_TIMEOUT = 300.0


def endpoint_url(url: str) -> str:
    """The ``/mcp`` URL of a server given by its base URL (``http://host:8642``) or by the
    endpoint's own URL.

    Raises :class:`InvalidInput` naming ``url`` for anything but an http(s) URL."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
        raise InvalidInput(f"--url must be an http(s) URL, not {url[:80]!r}", param="url")
    return url if url.endswith("/mcp") else f"{url}/mcp"


def check_endpoint(url: str, token: str, *, timeout: float = 10.0) -> None:
    """Ask the endpoint once whether it takes ``token``, so that a refusal is one line at start
    rather than an error for each of the agent's calls.

    Raises :class:`AuthenticationError` (401), :class:`PermissionDenied` (403, 429),
    :class:`NotFound` (no endpoint there), :class:`SlurmtowerError` (it does not answer)."""
    try:
        resp = httpx.post(url, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                          content=b"{}", timeout=timeout)
    except httpx.HTTPError as exc:
        raise SlurmtowerError(f"{url} does not answer: {exc}") from None
    detail = ""
    if resp.headers.get("content-type", "").startswith("application/problem+json"):
        detail = str(resp.json().get("detail", ""))
    if resp.status_code == 401:
        raise AuthenticationError(f"{url} refused the token: {detail or 'authentication required'}")
    if resp.status_code in (403, 429):
        raise PermissionDenied(f"{url}: {detail or resp.reason_phrase}")
    if resp.status_code == 404:
        raise NotFound(f"no agent endpoint at {url}: {detail or 'not found'}")
    if resp.status_code >= 500:
        raise SlurmtowerError(f"{url} answered {resp.status_code}")


async def relay(url: str, token: str) -> None:
    """Serve MCP on stdin/stdout until stdin closes, each request answered by ``url``'s
    (``serve``'s ``/mcp``) with ``token``."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(30.0, read=CALL_TIMEOUT))
    async with http, Client(streamable_http_client(url, http_client=http),
                            read_timeout_seconds=CALL_TIMEOUT) as remote:

        async def list_tools(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return await remote.list_tools(cursor=params.cursor if params else None, cache_mode="bypass")

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await remote.call_tool(params.name, dict(params.arguments or {}))

        async def list_resources(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
            return await remote.list_resources(cursor=params.cursor if params else None, cache_mode="bypass")

        async def list_templates(_ctx: Any,
                                 params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
            return await remote.list_resource_templates(cursor=params.cursor if params else None,
                                                        cache_mode="bypass")

        async def read_resource(_ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
            return await remote.read_resource(str(params.uri), cache_mode="bypass")

        async def list_prompts(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
            return await remote.list_prompts(cursor=params.cursor if params else None, cache_mode="bypass")

        async def get_prompt(_ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
            return await remote.get_prompt(params.name, dict(params.arguments or {}))

        server: Server[Any] = Server(
            "slurmtower", version=__version__, title="slurmtower (stdio)", instructions=remote.instructions,
            on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
            on_list_resource_templates=list_templates, on_read_resource=read_resource, on_list_prompts=list_prompts,
            on_get_prompt=get_prompt)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
