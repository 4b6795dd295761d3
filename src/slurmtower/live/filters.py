"""The ``/queue`` and ``/nodes`` filter language (squeue's words), shared by the API and the
dashboard: comma-separated values, state names and squeue's codes, node sets, pages and
their cursors. Every refusal is an :class:`~slurmtower.errors.InvalidInput` naming the
parameter.

Each value's grammar is one regular expression here (:data:`NAMES_RE`, :data:`JOB_STATES_RE`,
:data:`NODE_STATES_RE`, :data:`JOB_CURSOR_RE`, :data:`NODE_CURSOR_RE`): the check refuses
exactly what it does not match, and the API's OpenAPI document declares the same pattern, so
what the document calls valid is what the routes take. A list is comma-separated; spaces
around an item and empty items are ignored, at least one item must be left.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmtower.errors import InvalidInput
from slurmtower.models import JobState, NodeFlag, NodeState
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.nodeset import NodeSet
from slurmtower.visibility import PrivateFreeRows

__all__ = [
    "JOB_CURSOR_RE",
    "JOB_STATES_RE",
    "JOB_STATE_WORDS",
    "MAX_LIMIT",
    "NAMES_RE",
    "NODE_CURSOR_RE",
    "NODE_STATES_RE",
    "NODE_STATE_WORDS",
    "QueueFilter",
    "decode_cursor",
    "encode_cursor",
    "limit",
    "mapped",
    "node_set",
    "page",
    "page_cursor",
    "page_rows",
    "words",
    "words_pattern",
]

MAX_LIMIT = 100_000
#: A list of names (users, accounts, partitions, job names): any text without control
#: characters, at least one item (a character other than a space or a comma).
NAMES_RE = re.compile(r"^[ ,]*[^\x00-\x1f ,][^\x00-\x1f]*$")
NODE_STATE_WORDS: Mapping[str, str] = {
    **{s.value: s.value for s in NodeState},
    **{f.value: f.value for f in NodeFlag},
    "ALLOC": "ALLOCATED", "MIX": "MIXED", "UNK": "UNKNOWN", "FUTR": "FUTURE", "ERR": "ERROR",
    "DRAINED": "DRAIN", "DRAINING": "DRAIN", "DRNG": "DRAIN", "NO_RESPOND": "NOT_RESPONDING",
    "MAINT": "MAINTENANCE", "RESV": "RESERVED", "COMP": "COMPLETING", "POWERED_OFF": "POWERED_DOWN",
}
JOB_STATE_CODES = {"PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CD": "COMPLETED", "CA": "CANCELLED",
                    "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED", "BF": "BOOT_FAIL",
                    "DL": "DEADLINE", "OOM": "OUT_OF_MEMORY", "CG": "COMPLETING", "CF": "CONFIGURING",
                    "RQ": "REQUEUED", "RH": "REQUEUE_HOLD", "RS": "RESIZING", "RV": "REVOKED",
                    "SI": "SIGNALING", "SE": "SPECIAL_EXIT", "SO": "STAGE_OUT", "ST": "STOPPED"}


def words_pattern(known: Iterable[str]) -> str:
    """The regular expression of a comma-separated list of ``known`` words, in any case, ``-``
    or ``_`` between their parts (``not-responding``); ASCII letters only, so that no other
    spelling folds to one of them (the dotless i upper-cases to ``I``)."""
    def spelled(word: str) -> str:
        return "".join(f"[{c}{c.lower()}]" if c.isalpha() else "[-_]" if c in "-_" else re.escape(c)
                       for c in word.upper())
    item = "(?:" + "|".join(spelled(w) for w in sorted(set(known), key=lambda w: (-len(w), w))) + ")"
    return rf"^[ ,]*{item}(?: *,[ ,]*{item})*[ ,]*$"


@functools.lru_cache(maxsize=8)
def _grammar(known: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(words_pattern(known))


def _items(raw: str) -> list[str]:
    return [w.strip(" ") for w in raw.split(",") if w.strip(" ")]


def words(params: Mapping[str, str], name: str) -> list[str] | None:
    """The names of list parameter ``name`` (:data:`NAMES_RE`); ``None`` when not given."""
    raw = params.get(name)
    if raw is None:
        return None
    if not NAMES_RE.match(raw):
        raise InvalidInput(f"{name} must be a comma-separated list of names, not {raw[:60]!r}", param=name)
    return _items(raw)


def mapped(params: Mapping[str, str], name: str, known: Mapping[str, str]) -> set[str] | None:
    """The states list parameter ``name`` names, as ``known`` maps its words (case and ``-``
    aside); ``None`` when not given. ``known`` is :data:`JOB_STATE_WORDS` or
    :data:`NODE_STATE_WORDS`, whose grammars are :data:`JOB_STATES_RE` and :data:`NODE_STATES_RE`."""
    raw = params.get(name)
    if raw is None:
        return None
    grammar = _grammar(tuple(known))
    if not grammar.match(raw):
        bad = next((w for w in _items(raw) if not grammar.match(w)), raw)
        raise InvalidInput(f"{name}: {bad[:40]!r} is not a known state "
                           f"(e.g. {', '.join(sorted(set(known.values()))[:8])} ...)", param=name)
    return {known[w.upper().replace("-", "_")] for w in _items(raw)}


def node_set(params: Mapping[str, str]) -> NodeSet | None:
    raw = params.get("nodes")
    if raw is None:
        return None
    try:
        found = NodeSet(raw)
    except InvalidInput as exc:
        raise InvalidInput(f"nodes: {exc.message}", param="nodes") from exc
    if not found:
        raise InvalidInput("nodes: empty node set", param="nodes")
    return found


def limit(params: Mapping[str, str]) -> int | None:
    raw = params.get("limit")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:  # int("²") raises
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {raw[:40]!r}", param="limit")
    return int(raw)


def encode_cursor(kind: str, key: Any) -> str:
    """An opaque page link of the dashboard's (``kind`` and ``key`` in base64 JSON)."""
    return base64.urlsafe_b64encode(json.dumps([kind, key]).encode()).decode().rstrip("=")


#: ``/queue``'s cursor: the job id of the last job of the previous page (the next page starts
#: after it, whether or not that job is still in the queue).
JOB_CURSOR_RE = re.compile(r"^[0-9]{1,18}$")
#: ``/nodes``' cursor: the name of the last node of the previous page (in natural name order).
NODE_CURSOR_RE = re.compile(r"^[^\x00-\x1f]{1,200}$")
_CURSORS = {"j": JOB_CURSOR_RE, "n": NODE_CURSOR_RE}


def page_cursor(kind: str, key: Any) -> str:
    """The ``next_cursor`` after the row of ``key`` (``kind``: ``j`` jobs, ``n`` nodes)."""
    return str(key)


def decode_cursor(params: Mapping[str, str], kind: str) -> Any:
    """The key the ``cursor`` parameter names (:data:`JOB_CURSOR_RE`, :data:`NODE_CURSOR_RE`);
    ``None`` when not given."""
    raw = params.get("cursor")
    if raw is None:
        return None
    if not _CURSORS[kind].match(raw):
        what = "a job id" if kind == "j" else "a node name"
        raise InvalidInput(f"cursor must be {what} (next_cursor of the previous page), not {raw[:40]!r}",
                           param="cursor")
    return int(raw) if kind == "j" else raw


def page(table: JobTable | NodeTable | PrivateFreeRows, rows: Sequence[int], params: Mapping[str, str], kind: str,
          item: str) -> bytes:
    """``{"count": <matching>, "<item>": [...], "next_cursor": ...}`` for one page of ``rows``."""
    chosen, cursor = page_rows(table, rows, params, kind)
    return (b'{"count":%d,"returned":%d,"next_cursor":%s,"%s":%s}'
            % (len(rows), len(chosen), json.dumps(cursor).encode(), item.encode(), table.json_array(chosen)))


def page_rows(table: JobTable | NodeTable | PrivateFreeRows, rows: Sequence[int], params: Mapping[str, str],
               kind: str) -> tuple[Sequence[int], str | None]:
    """The rows of one page of ``rows`` (``limit``, ``cursor``) and the next page's cursor."""
    after = decode_cursor(params, kind)
    size = limit(params)
    start = table.after(rows, after)
    chosen = rows[start:] if size is None else rows[start:start + size]
    more = size is not None and start + size < len(rows)
    return chosen, (page_cursor(kind, table.keys[chosen[-1]]) if more and chosen else None)


#: Every job state word ``/queue`` takes: Slurm's names and squeue's codes.
JOB_STATE_WORDS: dict[str, str] = {**{s.value: s.value for s in JobState}, **JOB_STATE_CODES}
#: A list of job states (:data:`JOB_STATE_WORDS`) and of node states or flags (:data:`NODE_STATE_WORDS`).
JOB_STATES_RE = re.compile(words_pattern(JOB_STATE_WORDS))
NODE_STATES_RE = re.compile(words_pattern(NODE_STATE_WORDS))


@dataclass(frozen=True)
class QueueFilter:
    """squeue's filters of the queue as one value: each field is the set of accepted values
    (``None``: no filter). ``/queue``, ``/ui/jobs`` and the job listing take it."""

    user: frozenset[str] | None = None
    account: frozenset[str] | None = None
    partition: frozenset[str] | None = None
    state: frozenset[str] | None = None
    name: frozenset[str] | None = None
    nodes: frozenset[str] | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> QueueFilter:
        """The filters among ``params`` (raises :class:`InvalidInput` naming a bad one)."""
        def given(name: str) -> frozenset[str] | None:
            found = words(params, name)
            return frozenset(found) if found is not None else None

        states = mapped(params, "state", JOB_STATE_WORDS)
        nodes = node_set(params)
        return cls(user=given("user"), account=given("account"), partition=given("partition"),
                   state=frozenset(states) if states is not None else None, name=given("name"),
                   nodes=frozenset(nodes) if nodes is not None else None)

    def columns(self) -> dict[str, frozenset[str]]:
        """The filters in force, by queue table column."""
        return {k: v for k, v in vars(self).items() if v is not None}

    def __bool__(self) -> bool:
        return bool(self.columns())

    def rows(self, table: JobTable) -> Sequence[int]:
        """The rows of ``table`` every filter accepts, in job id order."""
        return table.select(**self.columns())
