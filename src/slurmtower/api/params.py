"""What routes share in their OpenAPI declarations: id bounds and the problem responses.

Every error a route gives is an RFC 9457 problem (``application/problem+json``, drawn by
:func:`slurmtower.api.app.create_app`'s handlers from :mod:`slurmtower.errors`). Routes
declare the ones they can give with ``responses=problems(400, 401, ...)``; the ``Problem``
schema they point at is added to the document by :func:`add_problem_schema`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MAX_ID",
    "PROBLEM",
    "PROBLEM_SCHEMA",
    "READ_PROBLEMS",
    "add_problem_schema",
    "problems",
]

PROBLEM = "application/problem+json"

#: The largest id any store holds: ids and sequence numbers are signed 64-bit integers
#: (BIGINT; SQLite's INTEGER), and a larger one makes the database driver raise.
MAX_ID = 2**63 - 1

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "An RFC 9457 problem; further members (``param``, ``retry_after`` ...) may follow.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "A URI naming the problem (its error class)."},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "param": {"type": ["string", "null"], "description": "The offending parameter, when one is."},
    },
    "additionalProperties": True,
}

_DESCRIPTIONS = {
    400: "A bad parameter (named in `param`).",
    401: "Authentication required (no or bad credentials).",
    403: "The caller's role may not do this.",
    404: "No such thing (named in `detail`).",
    409: "Refused by a safety rule (e.g. a node drained by another owner).",
    422: "A parameter fails its declared type or bounds (named in `param`).",
    429: "Too many failed logins from this address; retry after `Retry-After` seconds.",
    503: "Slurm or a database does not answer.",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for these statuses, each an ``application/problem+json`` Problem."""
    return {
        status: {
            "description": _DESCRIPTIONS.get(status, "A problem."),
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


#: What every route behind ``require(Perm.READ)`` (or higher) can answer besides its own.
READ_PROBLEMS = (401, 403, 429)


def add_problem_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the ``Problem`` component to an OpenAPI document and describe FastAPI's 422
    answers as what the app really sends for them: a 400 problem. Returns ``schema``."""
    schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
            if "422" in responses:  # FastAPI's validation answer: the app sends it as a 400
                del responses["422"]
                responses.setdefault("400", problems(400)[400])
    return schema
