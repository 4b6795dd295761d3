"""Library errors as HTTP problems (RFC 9457): the one place the HTTP adapters translate them.

Every :class:`~slurmtower.errors.SlurmtowerError` names its HTTP status and problem type
(:meth:`~slurmtower.errors.SlurmtowerError.to_problem`); the API app and the sensor's
callback app both register :func:`slurmtower_problem` (Starlette only: no FastAPI import).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from slurmtower.api.params import PROBLEM
from slurmtower.errors import SlurmtowerError

__all__ = ["http_problem", "problem_response", "slurmtower_problem"]

log = logging.getLogger("slurmtower.api.app")


def problem_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


async def slurmtower_problem(_request: Request, exc: Exception) -> JSONResponse:
    """A library error as the problem its class names (status, type, title; never a trace)."""
    assert isinstance(exc, SlurmtowerError)
    if exc.http_status >= 500:
        log.warning("%s: %s", type(exc).__name__, exc.message)
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else {}
    retry_after = exc.extra.get("retry_after")
    if isinstance(retry_after, int | float) and retry_after > 0:
        headers["Retry-After"] = str(math.ceil(retry_after))  # whole seconds (RFC 9110)
    return problem_response(exc.http_status, exc.to_problem(), headers or None)


async def http_problem(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return problem_response(exc.status_code, {
        "type": "about:blank", "title": str(exc.detail), "status": exc.status_code, "detail": str(exc.detail),
    }, getattr(exc, "headers", None))
