"""The trigger callback's HTTP side: the body read with a bound, handed to the sensor.

Shared by the API app (``POST /{uuid}/{class}/{type}`` where the sensor runs) and the sensor's
own callback app (``slurmtower sensor``): Starlette only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request

from slurmtower.api.reads import read_capped
from slurmtower.errors import PayloadTooLarge
from slurmtower.events.callback import MAX_BODY_BYTES
from slurmtower.events.sensor import Sensor

__all__ = ["receive_callback"]


async def _capped_body(request: Request, sensor: Sensor, client: str | None) -> bytes:
    """The body, read up to MAX_BODY_BYTES (413 past it, never read in full); a refusal is
    recorded as the sensor records every refused callback."""
    limit = MAX_BODY_BYTES

    def record() -> PayloadTooLarge:
        exc = PayloadTooLarge(f"callback body over {limit} bytes", reason="too_large", param="body")
        sensor.record_refusal(exc, method=request.method, path=request.url.path, client_addr=client)
        return exc

    async def refuse() -> PayloadTooLarge:
        return await asyncio.to_thread(record)

    return await read_capped(request, limit, refuse)


async def receive_callback(request: Request, sensor: Sensor) -> dict[str, Any]:
    """Check and record one callback (HMAC-signed, fresh, never seen: else the sensor raises
    401, or 400 when malformed); the ids of the events it stored."""
    client = request.client.host if request.client else None
    body = await _capped_body(request, sensor, client)
    stored = await asyncio.to_thread(
        sensor.handle_callback,
        method=request.method,
        path=request.url.path,
        headers=dict(request.headers),
        body=body,
        client_addr=client,
    )
    return {"accepted": True, "events": [e.id for e in stored]}
