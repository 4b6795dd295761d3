"""``slurmtower mcp``: the agent endpoint over stdio (:mod:`slurmtower.mcp.bridge`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from slurmtower.cli.app import ConfigOpt, app, load_settings
from slurmtower.errors import ConfigError, InvalidInput

__all__: list[str] = []


def _token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise InvalidInput(f"--token-file {token_file}: {exc.strerror}", param="token-file") from None
    else:
        token = os.environ.get("SLURMTOWER_TOKEN", "").strip()
    if not token:
        raise InvalidInput("the agent's token: set SLURMTOWER_TOKEN or give --token-file", param="token")
    if any(not c.isprintable() or c.isspace() for c in token):
        raise InvalidInput("the token holds spaces or control characters", param="token")
    return token


@app.command("mcp")
def mcp_stdio(
    url: Annotated[str | None, typer.Option("--url", envvar="SLURMTOWER_URL", help=(
        "The server (http://host:8642) or its endpoint (.../mcp). Default: $SLURMTOWER_URL, else the config's "
        "api.host and api.port."))] = None,
    token_file: Annotated[Path | None, typer.Option("--token-file", help=(
        "A file holding the agent's token (default: $SLURMTOWER_TOKEN)."))] = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the agent endpoint (Model Context Protocol) on stdin/stdout, relayed to a server's /mcp."""
    try:
        from slurmtower.mcp.bridge import check_endpoint, endpoint_url, relay  # deferred: the mcp extra
    except ModuleNotFoundError as exc:
        raise ConfigError(f"slurmtower mcp needs the MCP SDK ({exc.name} is missing): pip install "
                          "'slurmtower[mcp]'", key="mcp") from None
    import anyio  # deferred: with the SDK

    token = _token(token_file)
    if url is None:
        api = load_settings(config).api
        host = "127.0.0.1" if api.host in ("0.0.0.0", "::", "") else api.host  # noqa: S104 - a listener's wildcard
        url = f"http://[{host}]:{api.port}" if ":" in host else f"http://{host}:{api.port}"
    endpoint = endpoint_url(url)
    check_endpoint(endpoint, token)
    anyio.run(relay, endpoint, token)
