"""The JSON Schemas of the job actions' parameters that their validators' rules need spelled
out (:mod:`slurmtower.actions.jobs`): job id expressions, signals, the fields ``update``
takes, the ``criterias``, and "jobids or criterias". They are what ``GET /actions/{name}``
and the OpenAPI document say of each action, so a client generating requests from them
sends what the validators take.

What no schema says is left to the descriptions: a task range must ascend (``123_[1-5]``),
and Slurm itself judges a time (``now+1hour``), a partition or an account's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from slurmtower.nodeset import SYNTAX, parse_nodeset
from slurmtower.slurm.jobctl import JOB_UPDATE_FIELDS, MAX_JOB_IDS, SIGNALS

__all__ = ["CRITERIAS_SCHEMA", "JOBIDS_SCHEMA", "NO_NUL", "ONE_WAY", "SIGNAL_SCHEMA", "SQUEUE_STATES",
           "check_criterion", "no_nul", "update_fields_schema", "whole"]

#: No parameter holds a NUL (the models refuse one anywhere): the pattern of a text with none of
#: its own.
NO_NUL = r"^[^\x00]*$"


def no_nul(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an action's parameters) with :data:`NO_NUL` on every text that has no pattern,
    enum or format of its own, and on the names of free-form objects' members; returns it."""
    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") == "string" and not {"pattern", "enum", "const", "format"} & set(node):
            node["pattern"] = NO_NUL
        if (node.get("type") == "object" and node.get("additionalProperties", False) is not False
                and "propertyNames" not in node):
            node["propertyNames"] = {"pattern": NO_NUL}
        for key, value in node.items():
            if key != "propertyNames":
                walk(value)
    walk(schema)
    return schema

#: Slurm's largest job id (0x03FFFFFF): ids are 1 to this.
_MAX_JOB_ID = 0x03FFFFFF
_COUNT_MAX = 2**31 - 4


def whole(value: Any) -> Any:
    """``value``, a JSON number that is a whole one (``5.0``) as an integer: JSON Schema's
    ``integer`` is any such number, and a client's JSON library may write it so."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def uint_pattern(top: int) -> str:
    """A regular expression (no anchors) of the whole numbers 1 to ``top``, leading zeros allowed."""
    text = str(top)
    parts = [f"[1-9][0-9]{{0,{len(text) - 2}}}"] if len(text) > 1 else []
    for i, digit in enumerate(text):
        low = "1" if i == 0 else "0"
        if int(digit) > int(low):
            parts.append(f"{text[:i]}[{low}-{int(digit) - 1}][0-9]{{{len(text) - i - 1}}}")
    parts.append(text)
    return "0*(?:" + "|".join(parts) + ")"


def _any_case(words: Iterable[str]) -> str:
    return "|".join("".join(f"[{c}{c.lower()}]" if c.isalpha() else re.escape(c) for c in w)
                    for w in sorted(words, key=lambda w: (-len(w), w)))


_JOB = uint_pattern(_MAX_JOB_ID).replace("0*", "0{0,4}", 1)
#: One job id expression of at most 64 characters: ``123``, ``123_4``, ``123_[1,5]`` (a range
#: ``123_[1-5]`` too, ascending), ``123+1``.
_JOBID = rf"(?:{_JOB}(?:_[0-9]{{1,9}}|_\[[0-9]{{1,9}}(?:,[0-9]{{1,9}}){{0,3}}\]|\+[0-9]{{1,9}})?)"
#: Not a space as Python's ``str.strip`` has it (ECMA-262's ``\s`` leaves \x1c-\x1f out), nor a NUL.
_NOT_SPACE = "[^\x00\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
_ID_NUMBER = {"type": "integer", "minimum": 1, "maximum": _MAX_JOB_ID}

#: ``jobids``: a list of job id expressions (or numbers), one, or one comma-separated string.
JOBIDS_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "array", "minItems": 1, "maxItems": MAX_JOB_IDS,
     "items": {"anyOf": [_ID_NUMBER, {"type": "string", "pattern": rf"^ *{_JOBID} *$", "maxLength": 64}]}},
    _ID_NUMBER,
    {"type": "string", "pattern": rf"^ *{_JOBID} *(?:, *{_JOBID} *)*$"},
    {"type": "null"},
]}

_VALUE = {"type": "string", "maxLength": 200, "pattern": rf"^[^\n\r\x00]*{_NOT_SPACE}[^\n\r\x00]*$"}
#: The job states squeue's --states takes (names and codes, any case).
SQUEUE_STATES = (
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "COMPLETED", "CONFIGURING", "CANCELLED", "FAILED", "TIMEOUT",
    "PREEMPTED", "BOOT_FAIL", "NODE_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUE_FED", "REQUEUE_HOLD", "REQUEUED",
    "RESIZING", "REVOKED", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "PD", "R", "S", "CG", "CD", "CF",
    "CA", "F", "TO", "PR", "BF", "NF", "DL", "OOM", "RF", "RH", "RQ", "RS", "RV", "SI", "SE", "SO", "ST")
_STATE = f"(?:{_any_case(SQUEUE_STATES)})"
_STATES: dict[str, Any] = {"type": "string", "maxLength": 200, "pattern": rf"^[ ,]*{_STATE}(?: *,[ ,]*{_STATE})*[ ,]*$"}
_NODES: dict[str, Any] = {"type": "string", "maxLength": 200, "pattern": SYNTAX.pattern, "format": "nodeset"}


def _one_or_more(value: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [value, {"type": "array", "minItems": 1, "items": value}]}


def check_criterion(key: str, items: list[str]) -> None:
    """Refuse (:class:`ValueError`) a ``state`` value squeue would not take or a ``nodes`` value
    that is no node set, before Slurm is asked (:data:`CRITERIAS_SCHEMA`)."""
    if key == "state":
        grammar = re.compile(_STATES["pattern"])
        bad = next((v for v in items if not grammar.match(v)), None)
        if bad is not None:
            raise ValueError(f"state: {bad[:40]!r} is not a job state squeue takes "
                             f"({', '.join(SQUEUE_STATES[:9])} ...)")
    elif key == "nodes":
        for v in items:
            parse_nodeset(v, param="criterias.nodes")


#: ``criterias``: /queue's filters, each a value or a list of them: states as squeue takes them,
#: node sets, names.
CRITERIAS_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "object", "minProperties": 1,
     "propertyNames": {"enum": ["user", "account", "partition", "state", "name", "nodes"]},
     "properties": {"state": _one_or_more(_STATES), "nodes": _one_or_more(_NODES)},
     "additionalProperties": _one_or_more(_VALUE)},
    {"type": "null"},
]}

#: "Give jobids or criterias (one of them, not both)".
ONE_WAY: dict[str, Any] = {"oneOf": [
    {"required": ["jobids"], "properties": {"jobids": {"not": {"type": "null"}}}},
    {"required": ["criterias"], "properties": {"criterias": {"not": {"type": "null"}}}},
]}

#: A signal: a name (``USR1``, ``SIGTERM``, any case) or a number 1-64.
SIGNAL_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": rf"^ *(?:(?:[Ss][Ii][Gg])?(?:{_any_case(SIGNALS)})|{uint_pattern(64)}) *$",
}

_KIND_SCHEMAS: dict[str, dict[str, Any]] = {
    "minutes": {"anyOf": [{"type": "integer", "minimum": 0},
                          {"type": "string", "pattern": r"^(?:(?:[0-9]+-)?[0-9]+(?::[0-9]+){0,2}|"
                                                        + _any_case(["UNLIMITED", "INFINITE"]) + ")$"}]},
    "int": {"type": "integer", "minimum": -_COUNT_MAX, "maximum": _COUNT_MAX},
    "count": {"type": "integer", "minimum": 0, "maximum": _COUNT_MAX},
    "bool": {"type": "boolean"},
    "time": {"type": "string", "pattern": r"^[A-Za-z0-9:+\-/T]{1,64}$",
             "description": "a time Slurm reads: 2026-12-01T10:00, now+1hour ..."},
    "nodes": {"type": "string", "pattern": SYNTAX.pattern, "format": "nodeset"},
    "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.\-]{1,128}$"},
    "text": {"type": "string", "maxLength": 4096, "pattern": r"^[^\n\r\x00]*$"},
}


def update_fields_schema(exclude: Iterable[str] = ()) -> dict[str, Any]:
    """``infos`` of ``slurm.job.update``: the fields :data:`JOB_UPDATE_FIELDS` names (but
    ``exclude``), each with its kind's values."""
    fields = {name: _KIND_SCHEMAS[kind] for name, (_kw, _rest, kind) in JOB_UPDATE_FIELDS.items()
              if name not in set(exclude)}
    return {"type": "object", "minProperties": 1, "propertyNames": {"enum": list(fields)}, "properties": fields}
