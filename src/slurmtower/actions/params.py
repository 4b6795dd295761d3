"""Typed parameter models of the actions: their JSON Schemas are the contract.

Names and defaults follow the StackStorm ``slurm`` pack. Values from the command line arrive
as strings (``jobids=223473``, ``nodes=n[1-4]``, ``criterias='{"batch_host": "n1"}'``); the
``before`` validators turn them into the declared types, so the CLI, the HTTP API and rules
share one validation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from slurmtower.actions.ownership import contains_tag
from slurmtower.actions.schemas import uint_pattern
from slurmtower.errors import PermissionDenied
from slurmtower.models import Job, JobState
from slurmtower.models.accounting import HistoryJob
from slurmtower.nodeset import SYNTAX, parse_nodeset
from slurmtower.settings import Settings
from slurmtower.slurm.client import NODE_UPDATE_FIELDS

__all__ = [
    "ACCOUNTING_CRITERIA",
    "DEFAULT_RESERVATION",
    "REASON_PATTERN",
    "RESERVATION_FLAGS",
    "RESV_NAME",
    "TRIGGER_NODE_EVENTS",
    "UPDATABLE_NODE_FIELDS",
    "ConfigGetParams",
    "JobFindParams",
    "JobGetParams",
    "NodeDownParams",
    "NodeDrainParams",
    "NodeGetParams",
    "NodeReserveParams",
    "NodeResumeParams",
    "NodeUnreserveParams",
    "NodeUpdateParams",
    "ReservationProps",
    "TriggerSetParams",
    "TriggerUnsetParams",
    "canonical_program",
    "check_program",
    "clean_path",
    "program_allowed",
]

#: Reservation flags of Slurm 22.05 (scontrol(1), "Flags=").
RESERVATION_FLAGS = (
    "ANY_NODES", "DAILY", "FLEX", "HOURLY", "IGNORE_JOBS", "LICENSE_ONLY", "MAGNETIC", "MAINT",
    "NO_HOLD_JOBS_AFTER", "OVERLAP", "PART_NODES", "PURGE_COMP", "REPLACE", "REPLACE_DOWN",
    "SPEC_NODES", "STATIC_ALLOC", "TIME_FLOAT", "WEEKDAY", "WEEKEND", "WEEKLY",
)
#: The seed's node events for ``slurm.trigger.set``.
TRIGGER_NODE_EVENTS = ("burst_buffer", "drained", "down", "fail", "up", "idle", "reconfig")
#: ``infos`` keys of ``slurm.node.update``: what Slurm can update, minus state and reason,
#: which go through drain/down/resume so that ownership and audit apply.
UPDATABLE_NODE_FIELDS = tuple(k for k in NODE_UPDATE_FIELDS if k not in {"state", "reason"})
DEFAULT_RESERVATION = "slurmtower_maint"

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def _any_case(words: Iterable[str]) -> str:
    """An alternation of ``words`` in any case (ASCII letters)."""
    return "|".join("".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in w)
                    for w in sorted(words, key=lambda w: (-len(w), w)))


#: A reason as :func:`_reason` takes it: one line of 1-200 characters (spaces around it aside)
#: that carries no owner tag (``[slurmtower:...]``, ``[user:...]``, ``[unknown]``).
REASON_PATTERN = (r"^(?![\s\S]*\[" + _any_case(["slurmtower"]) + r":)"
                  r"(?![\s\S]*\[(?:user:[A-Za-z0-9_.\-]+|unknown)\])"
                  r" *[^ \n\r\t\x00](?:[^\n\r\t\x00]{0,198}[^ \n\r\t\x00])? *$")
_NAMES = r"^[ ,]*[A-Za-z0-9_][A-Za-z0-9_.\-]*(?: *,[ ,]*[A-Za-z0-9_][A-Za-z0-9_.\-]*)*[ ,]*$"
_FLAG = rf"(?:{_any_case(RESERVATION_FLAGS)})"


def _split_csv(value: Any) -> Any:
    """``"1,2,3"`` -> ``["1", "2", "3"]``; a scalar -> a one-item list; lists unchanged."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [value]
    return value


def _nodes(value: Any) -> Any:
    """Any node expression or list of names -> the folded node set (``n[1-4]``)."""
    if isinstance(value, str | list | tuple):
        if isinstance(value, list | tuple) and not all(isinstance(v, str) for v in value):
            raise ValueError("must be a node set expression or a list of node names")
        return str(parse_nodeset(value, param="nodes"))
    return value


# What the HTTP API's document says of these (GET /actions/{name}, POST /actions/<name>): the
# forms the validators take, a list, one value, or a comma-separated string.
_NODESET_TEXT = {"type": "string", "pattern": SYNTAX.pattern, "format": "nodeset"}
_ID = "0*[1-9][0-9]{0,17}"
IntList = Annotated[list[int], BeforeValidator(_split_csv), WithJsonSchema({"anyOf": [
    {"type": "array", "minItems": 1,
     "items": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": f"^{_ID}$"}]}},
    {"type": "integer", "minimum": 1},
    {"type": "string", "pattern": rf"^ *{_ID} *(?:, *{_ID} *)*$"}]})]
"""Ids (job, trigger): 1 or more, each from 1 (a list, one, or a comma-separated string)."""
StrList = Annotated[list[str], BeforeValidator(_split_csv), WithJsonSchema({"anyOf": [
    {"type": "array", "items": {"type": "string"}},
    {"type": "string", "description": "comma-separated"}]})]
NodeSetText = Annotated[str, BeforeValidator(_nodes), WithJsonSchema({"anyOf": [
    _NODESET_TEXT, {"type": "array", "minItems": 1, "items": _NODESET_TEXT}]})]


def _nul_at(value: Any, path: str = "") -> str | None:
    """The path of the first text (or key) under ``value`` holding a NUL character."""
    if isinstance(value, str):
        return (path or "parameters") if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        here = f"{path}.{key}" if path else str(key)
        if isinstance(key, str) and "\x00" in key:
            return here.replace("\x00", "")
        found = _nul_at(item, here)
        if found is not None:
            return found
    return None


class _Params(BaseModel):
    # defer_build: a model's validator is built when its action first runs, not when the
    # catalogue loads (a CLI call builds one action's, not every action's).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        # No parameter holds a NUL: Slurm's commands take none in an argument (Python refuses
        # to run one: a 500), PostgreSQL none in text. The schemas say so (schemas.no_nul).
        where = _nul_at(value)
        if where is not None:
            raise ValueError(f"{where}: a NUL character is not allowed")
        return value


class _Mutating(_Params):
    dry_run: bool = Field(default=False, description="Return what would be done and change nothing.")


def _reason(value: str) -> str:
    text = value.strip(" ")
    if not text:
        raise ValueError("reason must not be empty")
    if any(c in text for c in "\n\r\t"):
        raise ValueError("reason must be one line")
    if contains_tag(text):
        raise ValueError("reason must not carry an owner tag ([slurmtower:...], [user:...]); slurmtower adds it")
    if len(text) > 200:
        raise ValueError("reason is longer than 200 characters")
    return text


class ConfigGetParams(_Params):
    item: str | None = Field(default=None, description="One configuration item, snake_case "
                             "(topology_plugin); all items when omitted.")


#: ``slurm.job.find``'s criterias: job fields (and their short names), each a value (which ones a
#: field takes is the field's).
_TEXT = {"type": "string", "pattern": r"^[^\x00]*$"}
_JOB_STATE = {"type": "string", "pattern": "^(?:" + _any_case(s.value for s in JobState if s is not JobState.UNKNOWN)
              + ")$"}
_FIND_CRITERIAS: dict[str, Any] = {
    "minProperties": 1,
    "propertyNames": {"enum": sorted({*Job.model_fields, "user", "job_state", "job_name", "jobid"})},
    "properties": {
        **dict.fromkeys(("user", "user_name", "account", "partition", "name", "job_name"), _TEXT),
        "state": _JOB_STATE, "job_state": _JOB_STATE,
        "nodes": {"type": "string", "pattern": SYNTAX.pattern, "format": "nodeset"},
        "batch_host": {"type": "string", "pattern": SYNTAX.pattern, "format": "nodeset"},
        "job_id": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+$"}]},
    },
    "additionalProperties": {"anyOf": [_TEXT, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]},
}


#: The criteria accounting filters in SQL (AccountingDB.find_jobs' keys), by criterion.
ACCOUNTING_CRITERIA = {
    "user": "user", "user_name": "user", "account": "account", "partition": "partition",
    "state": "state", "job_state": "state", "name": "name", "job_name": "name", "job_id": "job_id",
    "array_job_id": "array_job_id", "user_id": "user_id",
}
#: What ``include_finished`` can match on: accounting's fields (the rest is the live queue's).
_FINISHED = sorted({*ACCOUNTING_CRITERIA, "nodes", "batch_host", *HistoryJob.model_fields}
                   & set(_FIND_CRITERIAS["propertyNames"]["enum"]))


#: With include_finished: accounting's fields only, its ids as numbers.
_FINISHED_ONLY: dict[str, Any] = {
    "if": {"required": ["include_finished"], "properties": {"include_finished": {"const": True}}},
    "then": {"properties": {"criterias": {
        "propertyNames": {"enum": _FINISHED},
        "properties": {key: {"type": "integer"} for key in ("array_job_id", "user_id")}}}}}


class JobFindParams(_Params):
    model_config = ConfigDict(json_schema_extra=_FINISHED_ONLY)

    criterias: dict[str, Any] = Field(description="Job fields and the values they must equal, e.g. "
                                      '{"batch_host": "n1"} or {"user_name": "alice", "job_state": "RUNNING"}.',
                                      json_schema_extra=_FIND_CRITERIAS)
    include_finished: bool = Field(default=False, description="Also search jobs that left slurmctld, "
                                   "in the accounting database.")

    @field_validator("criterias")
    @classmethod
    def _non_empty(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("give at least one criterion")
        return value


#: Slurm's largest job id (MAX_JOB_ID).
_MAX_JOB_ID = 0x03FFFFFF
_JOB_ID: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": _MAX_JOB_ID}
_JOB_ID_TEXT = uint_pattern(_MAX_JOB_ID)
_JOB_IDS: dict[str, Any] = {"anyOf": [
    {"type": "array", "minItems": 1, "items": {"anyOf": [_JOB_ID, {"type": "string", "pattern": f"^{_JOB_ID_TEXT}$"}]}},
    _JOB_ID, {"type": "string", "pattern": rf"^ *{_JOB_ID_TEXT} *(?:, *{_JOB_ID_TEXT} *)*$"}]}


class JobGetParams(_Params):
    jobids: IntList = Field(min_length=1, description="Job ids to query (1-67108863).", json_schema_extra=_JOB_IDS)

    @field_validator("jobids")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(not 0 < v <= _MAX_JOB_ID for v in value):
            raise ValueError(f"job ids run from 1 to {_MAX_JOB_ID}")
        return list(dict.fromkeys(value))


class NodeGetParams(_Params):
    nodes: NodeSetText = Field(description="Nodes to query (n[1-4] or a list).")


_TAKE_OVER = ("Take the nodes over: release every other owner's hold (outside ones too), so that yours is "
              "the only one. Without it your hold is added beside theirs.")
_OVERRIDE = ("Go on even when the circuit breaker would refuse (too many nodes of a partition or of the "
             "cluster out of service within actions.breaker_window): admin only, never from a rule.")


class NodeDrainParams(_Mutating):
    nodes: NodeSetText = Field(description="Nodes to drain.")
    reason: str = Field(default="slurmtower: Drained using slurm.node.drain action",
                        description="Why; Slurm shows it with slurmtower's owner tag appended (beside the "
                                    "other holders' reasons of a node already held).",
                        json_schema_extra={"pattern": REASON_PATTERN})
    force: bool = Field(default=False, description=_TAKE_OVER)
    override_breaker: bool = Field(default=False, description=_OVERRIDE)
    _check_reason = field_validator("reason")(_reason)


class NodeDownParams(_Mutating):
    nodes: NodeSetText = Field(description="Nodes to set down.")
    reason: str = Field(default="slurmtower: Downed using slurm.node.down action",
                        description="Why; Slurm shows it with slurmtower's owner tag appended (beside the "
                                    "other holders' reasons of a node already held).",
                        json_schema_extra={"pattern": REASON_PATTERN})
    force: bool = Field(default=False, description=_TAKE_OVER)
    override_breaker: bool = Field(default=False, description=_OVERRIDE)
    _check_reason = field_validator("reason")(_reason)


class NodeResumeParams(_Mutating):
    nodes: NodeSetText = Field(description="Nodes to resume: your hold is released, and a node resumes once "
                                           "no hold is left (it stays drained while others hold it).")
    force: bool = Field(default=False, description="Release every hold of the nodes (other owners' and "
                                                   "outside ones too) and resume them.")


_LINE = {"type": "string", "pattern": r"^[^\n\r\x00]*$"}
#: ``slurm.node.update``'s infos: the fields Slurm updates, each one line, a number or a list.
_NODE_INFOS: dict[str, Any] = {
    "type": "object", "minProperties": 1,
    "propertyNames": {"enum": list(UPDATABLE_NODE_FIELDS)},
    "additionalProperties": {"anyOf": [_LINE, {"type": "integer"}, {"type": "array", "items": _LINE}]},
    "properties": {"weight": {"anyOf": [{"type": "string", "pattern": "^[0-9]+$"}, {"type": "integer", "minimum": 0}]}},
}


class NodeUpdateParams(_Mutating):
    nodes: NodeSetText = Field(description="Nodes to update.")
    infos: dict[str, Any] = Field(description="Fields to set: " + ", ".join(UPDATABLE_NODE_FIELDS) + ".",
                                  json_schema_extra=_NODE_INFOS)

    @field_validator("infos")
    @classmethod
    def _updatable(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("give at least one field to update")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in {"state", "reason"}:
                raise ValueError(f"{key!r} is set with slurm.node.drain, slurm.node.down or "
                                 "slurm.node.resume (ownership and audit apply there)")
            if key not in UPDATABLE_NODE_FIELDS:
                raise ValueError(f"Slurm cannot update node field {key!r} "
                                 f"(updatable: {', '.join(UPDATABLE_NODE_FIELDS)})")
            if isinstance(item, float) and item.is_integer():  # JSON's 5.0 is the integer 5
                item = int(item)
            if isinstance(item, list) and all(isinstance(v, str) for v in item):
                item = ",".join(item)
            if isinstance(item, bool) or not isinstance(item, str | int):
                raise ValueError(f"{key}: a string or an integer is expected")
            text = str(item)
            if any(c in text for c in "\n\r"):
                raise ValueError(f"{key}: must be one line")
            if key == "weight" and not (text.isascii() and text.isdigit()):
                raise ValueError("weight: a non-negative integer is expected")
            out[key] = text
        return out


def _iso_time(value: Any) -> Any:
    """An ISO 8601 text as its time (naive: this host's zone); nothing else but a time."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"an ISO 8601 time is expected, not {value[:40]!r}") from None
    if value is not None and not isinstance(value, datetime):
        raise ValueError("an ISO 8601 time is expected")
    return value


class ReservationProps(_Params):
    start_time: Annotated[datetime | None, BeforeValidator(_iso_time)] = Field(
        default=None, description="When it starts (ISO 8601; naive: this host's zone); now if omitted.",
        json_schema_extra={"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]})
    duration: int | None = Field(default=None, gt=0, description="Minutes; infinite if omitted.")
    users: StrList = Field(default=["root"], min_length=1, description="Users allowed in.",
                           json_schema_extra={"anyOf": [
                               {"type": "array", "minItems": 1,
                                "items": {"type": "string", "pattern": _NAME_RE.pattern}},
                               {"type": "string", "pattern": _NAMES}]})
    flags: StrList = Field(default=["MAINT", "IGNORE_JOBS", "OVERLAP"],
                           description="Reservation flags: " + ", ".join(RESERVATION_FLAGS) + " (any case).",
                           json_schema_extra={"anyOf": [
                               {"type": "array", "items": {"type": "string", "pattern": rf"^ *{_FLAG} *$"}},
                               {"type": "string", "pattern": rf"^[ ,]*(?:{_FLAG}(?: *,[ ,]*{_FLAG})*[ ,]*)?$"}]})

    @field_validator("users")
    @classmethod
    def _users(cls, value: list[str]) -> list[str]:
        for user in value:
            if not _NAME_RE.fullmatch(user):
                raise ValueError(f"not a user name: {user!r}")
        return value

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str]) -> list[str]:
        out = []
        for flag in value:
            name = flag.strip(" ").upper()
            if name not in RESERVATION_FLAGS:
                raise ValueError(f"unknown reservation flag {flag!r} (known: {', '.join(RESERVATION_FLAGS)})")
            out.append(name)
        return list(dict.fromkeys(out))

    @field_validator("start_time")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            try:
                return value.astimezone()
            except (OverflowError, OSError):
                raise ValueError("start_time is out of range") from None
        return value


#: A reservation's name (:func:`_resv_name`), as a pattern.
RESV_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$"


def _resv_name(value: str) -> str:
    if not _NAME_RE.fullmatch(value) or len(value) > 64:
        raise ValueError(f"not a reservation name: {value!r} (letters, digits, _ . -)")
    return value


class NodeReserveParams(_Mutating):
    nodes: NodeSetText = Field(description="Nodes to add to the reservation.")
    reservation_name: str = Field(default=DEFAULT_RESERVATION, description="Reservation to use; created "
                                  "when it does not exist.", json_schema_extra={"pattern": RESV_NAME})
    props: ReservationProps = Field(default=ReservationProps(), description="Properties of a new "
                                    "reservation: start_time, duration, users, flags.")
    _check_name = field_validator("reservation_name")(_resv_name)


class NodeUnreserveParams(_Mutating):
    nodes: NodeSetText = Field(description="Nodes to remove from the reservation.")
    reservation_name: str = Field(default=DEFAULT_RESERVATION, description="Reservation to use; deleted "
                                  "when it becomes empty.", json_schema_extra={"pattern": RESV_NAME})
    _check_name = field_validator("reservation_name")(_resv_name)


def clean_path(path: str) -> str | None:
    """``path`` with ``//`` and ``/./`` collapsed (``/`` stays ``/``); ``None`` when it is not
    absolute or has a ``..`` component (never resolved lexically: through a symlink ``..``
    leads elsewhere than the text says)."""
    if not path.startswith("/"):
        return None
    parts = path.split("/")
    if ".." in parts:
        return None
    return "/" + "/".join(p for p in parts if p not in ("", "."))


def canonical_program(value: str) -> str:
    """A trigger program with its executable in canonical form (:func:`clean_path`).

    slurmctld splits the program on spaces and runs the first word as SlurmUser, without a
    shell. Raises :class:`ValueError` for a relative executable, a ``..`` component, or
    whitespace other than spaces and control characters (which slurmctld would keep inside
    a word).
    """
    text = value.strip(" ")
    if any(not c.isprintable() for c in text):
        raise ValueError("program must be one line of printable text, its words separated by spaces")
    executable, sep, args = text.partition(" ")
    if not executable.startswith("/"):
        raise ValueError("program must start with an absolute path")
    clean = clean_path(executable)
    if clean is None:
        raise ValueError("program's path must not contain a '..' component")
    if clean == "/":
        raise ValueError("program must name a file, not /")
    return clean + sep + args


class TriggerSetParams(_Mutating):
    # The document's pattern is a part of what the validator takes (ASCII, plain path names): a
    # program beyond it is refused anyway unless auth.trigger_program_allowlist names it (403).
    program: str = Field(description="Absolute path of the program (with arguments) Slurm runs; it must be in "
                         "auth.trigger_program_allowlist.",
                         json_schema_extra={"pattern": r"^ *(?:/[A-Za-z0-9_-][A-Za-z0-9_.-]*)+(?: [\x20-\x7e]*)?$"})
    jobid: int | None = Field(default=None, gt=0, description="Job to hook (with fini).")
    offset: int = Field(default=0, ge=-32000, le=32000, description="Seconds between the event and the "
                        "program run.")
    fini: bool = Field(default=False, description="With jobid: on job completion (else at its time limit).")
    nodes: NodeSetText | None = Field(default=None, description="Nodes to watch (all when omitted).")
    event: str | None = Field(default=None,
                              description="Node event: " + ", ".join(TRIGGER_NODE_EVENTS) + " (any case).",
                              json_schema_extra={"anyOf": [
                                  {"type": "string", "pattern": rf"^ *(?:{_any_case(TRIGGER_NODE_EVENTS)}) *$"},
                                  {"type": "null"}]})

    @field_validator("program")
    @classmethod
    def _program(cls, value: str) -> str:
        return canonical_program(value)

    @field_validator("event")
    @classmethod
    def _event(cls, value: str | None) -> str | None:
        if value is None:
            return None
        name = value.strip(" ").lower()
        if name not in TRIGGER_NODE_EVENTS:
            raise ValueError(f"unknown event {value!r} (one of {', '.join(TRIGGER_NODE_EVENTS)})")
        return name


class TriggerUnsetParams(_Mutating):
    trigger_ids: IntList = Field(min_length=1, description="Trigger ids to clear.")

    @field_validator("trigger_ids")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(v <= 0 for v in value):
            raise ValueError("trigger ids are positive integers")
        return value
    user: str = Field(default="slurm", description="User the triggers belong to.",
                      json_schema_extra={"pattern": _NAME_RE.pattern})

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(f"not a user name: {value!r}")
        return value


# -- the trigger program allowlist ------------------------------------------------------------
def _real_parent_and_name(path: str) -> tuple[str, str]:
    real = os.path.realpath(path)  # symlinks followed as far as they exist on this host
    parent, _, name = real.rpartition("/")
    return parent or "/", name


def _entry_allows(entry: str, program: str, executable: str) -> bool:
    if " " in entry:  # a whole command line, arguments included
        try:
            wanted = canonical_program(entry)
        except ValueError:
            return False
        return program == wanted and os.path.realpath(executable) == os.path.realpath(wanted.partition(" ")[0])
    if not entry.endswith("*"):
        return clean_path(entry) == executable and os.path.realpath(entry) == os.path.realpath(executable)
    directory, _, stem = entry[:-1].rpartition("/")
    allowed_dir = clean_path(directory or "/")
    if allowed_dir is None or "*" in entry[:-1]:
        return False
    parent, _, name = executable.rpartition("/")
    if (parent or "/") != allowed_dir or not name.startswith(stem):
        return False
    real_parent, real_name = _real_parent_and_name(executable)
    return real_parent == os.path.realpath(allowed_dir) and real_name.startswith(stem)


def program_allowed(program: str, allowlist: Iterable[str]) -> bool:
    """Whether a trigger program is allowed by ``auth.trigger_program_allowlist``.

    The program's executable (its first space-separated word) must be absolute without a
    ``..`` component; ``//`` and ``/./`` are collapsed (:func:`canonical_program`). An entry
    allows, matched by whole path components:

    * ``/dir/name*``: an executable directly in ``/dir`` whose name starts with ``name``
      (``*`` never crosses a ``/``: ``/opt/hooks/*`` allows ``/opt/hooks/x``, not
      ``/opt/hooks/sub/x``, ``/opt/hooks-evil/x`` nor ``/opt/hooks/../x``; ``/opt/hooks*``
      allows ``/opt/hooks-a`` but nothing inside a directory);
    * an entry with a space: that whole command line;
    * any other entry: that executable, with any arguments.

    Where the path exists on this host its symlinks are followed too, and the resolved
    executable must match the resolved entry: a link out of an allowed directory is refused.
    """
    try:
        canonical = canonical_program(program)
    except ValueError:
        return False
    executable = canonical.partition(" ")[0]
    return any(_entry_allows(entry.strip(), canonical, executable) for entry in allowlist if entry.strip())


def check_program(settings: Settings | None, program: str, *, shown: str, what: str, param: str) -> None:
    """Refuse ``program`` (:class:`PermissionDenied` naming ``shown`` and ``param``) unless
    ``auth.trigger_program_allowlist`` allows it (:func:`program_allowed`)."""
    allowlist = settings.auth.trigger_program_allowlist if settings is not None else []
    if not program_allowed(program, allowlist):
        raise PermissionDenied(f"{what} {shown!r} is not in auth.trigger_program_allowlist", param=param)
