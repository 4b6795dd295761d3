"""What routes share in their OpenAPI declarations: id bounds, the problem responses and the
rules every parameter follows.

Every error a route gives is an RFC 9457 problem (``application/problem+json``, drawn by
:func:`slurmtower.api.app.create_app`'s handlers from :mod:`slurmtower.errors`). Routes
declare the ones they can give with ``responses=problems(400, 401, ...)``; the ``Problem``
schema they point at is added to the document by :func:`add_problem_schema`, which also
writes down what holds for every parameter (:func:`document_parameters`): none is ever null,
none carries a NUL character, none is given twice unless it is a list, and the ``cluster``
of ``/clusters/{cluster}/...`` is the path's.

The document is a contract a client may generate requests from (``bench/openapi.py`` runs
schemathesis against it): what it calls valid, the route takes; what a route refuses, it
declares (a pattern, a format, bounds, an enum) or answers with a declared problem.
"""

from __future__ import annotations

from typing import Any

from slurmtower.settings import CLUSTER_NAME

__all__ = [
    "CLUSTER_QUERY_SCHEMA",
    "MAX_ID",
    "NO_NUL",
    "PROBLEM",
    "PROBLEM_SCHEMA",
    "READ_PROBLEMS",
    "TIME_SCHEMA",
    "add_problem_schema",
    "document_parameters",
    "inline_schema",
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


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema with its ``$defs`` put in place of their ``$ref`` (a pydantic model's
    schema, for an operation's ``openapi_extra``: the document's ``#`` is not the model's)."""
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve({**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}})
            return {k: resolve(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


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
    return document_parameters(schema)


#: No text a client sends holds a NUL character: the app refuses one in the path and the query
#: (``_RefuseNul``, 400 naming the parameter) and in JSON bodies, since PostgreSQL refuses it in
#: any text. The pattern every text parameter without a stricter one of its own is declared with.
NO_NUL = r"^[^\x00]*$"

#: A time as ``/history``, the reports and ``/events`` take it
#: (:func:`slurmtower.accounting.query.parse_time`): RFC 3339, or Unix seconds. (A naive ISO
#: 8601 time, read as UTC, is taken too.)
TIME_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string", "format": "date-time"},
    {"type": "string", "pattern": r"^[0-9]{1,12}(\.[0-9]{1,9})?$"},
]}

#: ``?cluster=``: a cluster's name (:data:`slurmtower.settings.CLUSTER_NAME`); one this
#: deployment does not serve is a 404 naming it.
CLUSTER_QUERY_SCHEMA: dict[str, Any] = {"type": "string", "pattern": CLUSTER_NAME}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without FastAPI's ``{"type": "null"}`` branch (``X | None`` is how
    an optional parameter is typed; absent is how a client leaves it out)."""
    branches = schema.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        kept = [b for b in branches if b != {"type": "null"}]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        schema = {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}
    return schema


def _no_nul(schema: dict[str, Any]) -> None:
    """Give every text of ``schema`` (its array items and ``anyOf`` branches too) without a
    pattern, enum or format of its own the :data:`NO_NUL` pattern."""
    for branch in schema.get("anyOf", ()):
        _no_nul(branch)
    if isinstance(schema.get("items"), dict):
        _no_nul(schema["items"])
    if schema.get("type") == "string" and not {"pattern", "enum", "const", "format"} & set(schema):
        schema["pattern"] = NO_NUL


def document_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """Write down in an OpenAPI document what holds for every parameter; returns ``schema``.

    No parameter is null (:func:`_not_null`), no text holds a NUL (:data:`NO_NUL`), a query
    parameter that is no list may not be repeated (``explode`` lists aside: the app refuses a
    repeated one, 400 naming it), and under ``/clusters/{cluster}/`` the cluster is the path's
    (a ``?cluster=`` there may only repeat it: it is left out). Idempotent.
    """
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            params = operation.get("parameters", [])
            if path.startswith("/clusters/{cluster}/"):
                params = [p for p in params if not (p.get("in") == "query" and p.get("name") == "cluster")]
            for param in params:
                if "schema" in param:
                    param["schema"] = _not_null(param["schema"])
                    _no_nul(param["schema"])
            if params:
                operation["parameters"] = params
    return schema
