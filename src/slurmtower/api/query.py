"""Query parameters as the routes declare them: each one's OpenAPI schema is the grammar its
check applies, written once.

A text parameter a route checks itself (a list of names, states, a node set, a time, a
cursor) is declared with :func:`checked`: the document carries the check's own regular
expression (or schema), so what the document calls valid is what the route takes; the route
refuses the rest with its own 400 naming the parameter (FastAPI does not check it again, or a
refusal would print the pattern). Numbers and enums are plain FastAPI types.

:func:`single_values`, a dependency of the whole app, refuses a declared query parameter given
twice unless it is a list (FastAPI would silently keep the last one), and a whole number that is
not written as one (pydantic's lax parsing took ``6\f``, `` 5``, ``5_0``, ``5.0`` for integers).
"""

from __future__ import annotations

import re
import types
import typing
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from slurmtower.api.params import TIME_SCHEMA
from slurmtower.errors import InvalidInput
from slurmtower.live.filters import NAMES_RE
from slurmtower.nodeset import SYNTAX as NODESET_SYNTAX

__all__ = ["NamesQuery", "NodesQuery", "TimeQuery", "checked", "single_values"]


def checked(description: str, grammar: re.Pattern[str] | dict[str, Any], *, max_length: int | None = None,
            alias: str | None = None, **extra: Any) -> Any:
    """``Query(...)`` of a text parameter the route checks against ``grammar`` (a compiled
    regular expression, or a JSON schema): the document declares it; ``extra`` adds keywords
    (``format``)."""
    schema = {"pattern": grammar.pattern} if isinstance(grammar, re.Pattern) else dict(grammar)
    return Query(description=description, max_length=max_length, alias=alias,
                 json_schema_extra={**schema, **extra})


#: A comma-separated list of names (:data:`slurmtower.live.filters.NAMES_RE`).
NamesQuery = Annotated[str | None, checked(
    "Comma-separated values; any of them matches (spaces around a value and empty ones are ignored).",
    NAMES_RE, max_length=4000)]
#: A node set (:mod:`slurmtower.nodeset`). Its ranges must ascend and keep their padding
#: (``n[1-4]``, ``n[01-10]``) and it may name at most 100,000 nodes: what a pattern cannot say
#: is the ``nodeset`` format's.
NodesQuery = Annotated[str | None, checked(
    "A node set, e.g. `n[1-100]` (jobs: running on any of them): names and bracketed ascending "
    "ranges, at most 100,000 nodes, no `@group`.", NODESET_SYNTAX, max_length=4000, format="nodeset")]
#: A time (:func:`slurmtower.accounting.query.parse_time`).
TimeQuery = Annotated[str | None, checked(
    "ISO 8601 (naive = UTC) or Unix seconds.", TIME_SCHEMA)]


def _is_int(annotation: Any) -> bool:
    """Whether a parameter's annotation is a whole number (``int | None`` ...)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _is_int(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _is_int(args[0])
    return annotation is int


def _is_list(annotation: Any) -> bool:
    """Whether a parameter's annotation is a list (``list[str] | None`` ...)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _is_list(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_is_list(a) for a in typing.get_args(annotation))
    return isinstance(origin, type) and issubclass(origin, Sequence | set | frozenset) and origin is not str


_SCALARS: dict[int, frozenset[str]] = {}
_INTS: dict[int, frozenset[str]] = {}
_WHOLE = re.compile(r"-?[0-9]+")


def _query_fields(dependant: Dependant) -> list[Any]:
    """The query parameters of ``dependant`` and of its dependencies."""
    fields = list(dependant.query_params)
    for sub in dependant.dependencies:
        fields += _query_fields(sub)
    return fields


def _scalar_params(route: APIRoute) -> frozenset[str]:
    """The query parameters ``route`` declares that are no list."""
    found = _SCALARS.get(id(route))
    if found is None:
        fields = _query_fields(route.dependant)
        found = frozenset(f.alias for f in fields if not _is_list(f.field_info.annotation))
        _SCALARS[id(route)] = found
        _INTS[id(route)] = frozenset(f.alias for f in fields if _is_int(f.field_info.annotation))
    return found


async def single_values(request: Request) -> None:
    """Refuse a query parameter the route declares, not as a list, given twice, and a whole
    number it declares that is not written as one.

    Raises :class:`InvalidInput` naming it.
    """
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not route.include_in_schema:
        return  # the dashboard's forms read their own parameters
    items = request.query_params.multi_items()
    counts = Counter(name for name, _ in items)
    scalars = _scalar_params(route)
    for name, n in counts.items():
        if n > 1 and name in scalars:
            raise InvalidInput(f"parameter {name!r} given twice", param=name)
    ints = _INTS[id(route)]
    for name, value in items:
        if name in ints and not _WHOLE.fullmatch(value):
            raise InvalidInput(f"{name} must be a whole number, not {value[:40]!r}", param=name)
