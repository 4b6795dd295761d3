"""Rule criteria: StackStorm-style operators applied to dotted paths of an event.

A criterion names a field (``trigger.state``, ``trigger.flags``, ``event.source``) and an
operator with a pattern. ``trigger.`` is the event's payload, ``event.`` its metadata
(``id``, ``type``, ``time``, ``source``, ``node``). Path segments that are integers index
lists (``trigger.flags.0``).

A criterion on a field that is absent (or ``None``) is *not* satisfied, whatever the
operator, except ``nexists`` (satisfied) - so ``nequals`` never matches an event that
lacks the field altogether.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from slurmtower.errors import InvalidInput

__all__ = ["MISSING", "OPERATORS", "check_pattern", "evaluate", "lookup"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()
"""Returned by :func:`lookup` for a path that leads nowhere."""


def lookup(context: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` in ``context`` (dicts by key, lists by index), or MISSING."""
    cur: Any = context
    for part in path.split("."):
        if isinstance(cur, Mapping):
            if part not in cur:
                return MISSING
            cur = cur[part]
        elif isinstance(cur, list | tuple) and part.lstrip("-").isdigit():
            idx = int(part)
            if not -len(cur) <= idx < len(cur):
                return MISSING
            cur = cur[idx]
        else:
            return MISSING
    return MISSING if cur is None else cur


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _compare(value: Any, pattern: Any, op: Callable[[float, float], bool]) -> bool:
    a, b = _number(value), _number(pattern)
    if a is None or b is None:
        return False
    return op(a, b)


def _contains(value: Any, pattern: Any) -> bool:
    if isinstance(value, str):
        return _text(pattern) in value
    if isinstance(value, Mapping):
        return pattern in value
    if isinstance(value, list | tuple | set | frozenset):
        return pattern in value or _text(pattern) in {_text(v) for v in value}
    return False


def _equals(value: Any, pattern: Any) -> bool:
    if value == pattern:
        return True
    # YAML gives ``pattern: 3`` as an int while the payload may hold "3"; compare as text
    # for scalars only (a list never equals a string).
    scalars = (str, int, float)
    return isinstance(value, scalars) and isinstance(pattern, scalars) and _text(value) == _text(pattern)


def _regex(flags: int) -> Callable[[Any, Any], bool]:
    def match(value: Any, pattern: Any) -> bool:
        compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(_text(pattern), flags)
        if isinstance(value, list | tuple | set | frozenset):
            return any(compiled.search(_text(v)) for v in value)
        return compiled.search(_text(value)) is not None

    return match


def _in(value: Any, pattern: Any) -> bool:
    return any(_equals(value, p) for p in pattern)


OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": _equals,
    "nequals": lambda v, p: not _equals(v, p),
    "iequals": lambda v, p: _text(v).casefold() == _text(p).casefold(),
    "regex": _regex(0),
    "iregex": _regex(re.IGNORECASE),
    "in": _in,
    "nin": lambda v, p: not _in(v, p),
    "contains": _contains,
    "ncontains": lambda v, p: not _contains(v, p),
    "startswith": lambda v, p: _text(v).startswith(_text(p)),
    "endswith": lambda v, p: _text(v).endswith(_text(p)),
    "exists": lambda v, p: True,
    "nexists": lambda v, p: False,
    "gt": lambda v, p: _compare(v, p, lambda a, b: a > b),
    "lt": lambda v, p: _compare(v, p, lambda a, b: a < b),
    "gte": lambda v, p: _compare(v, p, lambda a, b: a >= b),
    "lte": lambda v, p: _compare(v, p, lambda a, b: a <= b),
}

#: StackStorm's names for the same operators.
ALIASES = {
    "eq": "equals",
    "neq": "nequals",
    "greaterthan": "gt",
    "lessthan": "lt",
    "inside": "in",
    "ninside": "nin",
    "match_regex": "regex",
}


def check_pattern(operator: str, pattern: Any, *, param: str) -> tuple[str, Any]:
    """Validate an operator and its pattern at load time; returns (operator, prepared pattern).

    Regexes are compiled here, so a bad one is a load error rather than a silent miss.
    Raises :class:`InvalidInput` naming ``param``.
    """
    op = ALIASES.get(operator, operator)
    if op not in OPERATORS:
        known = ", ".join(sorted(OPERATORS))
        raise InvalidInput(f"unknown criteria type {operator!r} (known: {known})", param=param)
    if op in ("exists", "nexists"):
        return op, None
    if pattern is None:
        raise InvalidInput(f"criteria type {op!r} needs a pattern", param=param)
    if op in ("regex", "iregex"):
        try:
            return op, re.compile(_text(pattern), re.IGNORECASE if op == "iregex" else 0)
        except re.error as exc:
            raise InvalidInput(f"bad regular expression {pattern!r}: {exc}", param=param) from exc
    if op in ("in", "nin"):
        if not isinstance(pattern, list):
            raise InvalidInput(f"criteria type {op!r} needs a list pattern", param=param)
        return op, pattern
    if op in ("gt", "lt", "gte", "lte") and _number(pattern) is None:
        raise InvalidInput(f"criteria type {op!r} needs a number pattern", param=param)
    return op, pattern


def evaluate(operator: str, value: Any, pattern: Any) -> bool:
    """Apply one operator (already validated) to a looked-up ``value``."""
    if value is MISSING:
        return operator == "nexists"
    return OPERATORS[operator](value, pattern)
