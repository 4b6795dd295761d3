"""The agent endpoint: slurmtower over the Model Context Protocol (the official SDK, the
``mcp`` extra). ``/mcp`` on ``slurmtower serve`` (:mod:`slurmtower.api.routes.mcp`) and
``slurmtower mcp`` over stdio (:mod:`slurmtower.mcp.bridge`, relayed to a server's ``/mcp``).

Import the modules themselves: :mod:`slurmtower.mcp.server` (the server, its tools,
resources and prompts), :mod:`slurmtower.mcp.acting` (plan, confirmation, act),
:mod:`slurmtower.mcp.reads`, :mod:`slurmtower.mcp.prompts`."""

__all__: list[str] = []
