"""The ``/queue`` and ``/nodes`` filter language (squeue's words), shared by the API and the
dashboard: comma-separated values, state names and squeue's codes, node sets, pages and
their cursors. Every refusal is an :class:`~slurmtower.errors.InvalidInput` naming the
parameter.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmtower.errors import InvalidInput
from slurmtower.models import JobState, NodeFlag, NodeState
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.nodeset import NodeSet
from slurmtower.visibility import PrivateFreeRows

__all__ = [
    "JOB_STATE_WORDS",
    "MAX_LIMIT",
    "NODE_STATE_WORDS",
    "QueueFilter",
    "decode_cursor",
    "encode_cursor",
    "limit",
    "mapped",
    "node_set",
    "page",
    "page_rows",
    "words",
]

MAX_LIMIT = 100_000
LIST_RE = re.compile(r"^[^\x00-\x1f]{1,200}$")
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


def words(params: Mapping[str, str], name: str) -> list[str] | None:
    raw = params.get(name)
    if raw is None:
        return None
    found = [w.strip() for w in raw.split(",") if w.strip()]
    if not found or not all(LIST_RE.match(w) for w in found):
        raise InvalidInput(f"{name} must be a comma-separated list of names, not {raw[:60]!r}", param=name)
    return found


def mapped(params: Mapping[str, str], name: str, known: Mapping[str, str]) -> set[str] | None:
    given = words(params, name)
    if given is None:
        return None
    out = set()
    for word in given:
        value = known.get(word.upper().replace("-", "_"))
        if value is None:
            raise InvalidInput(f"{name}: {word[:40]!r} is not a known state "
                               f"(e.g. {', '.join(sorted(set(known.values()))[:8])} ...)", param=name)
        out.add(value)
    return out


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
    return base64.urlsafe_b64encode(json.dumps([kind, key]).encode()).decode().rstrip("=")


def decode_cursor(params: Mapping[str, str], kind: str) -> Any:
    raw = params.get("cursor")
    if raw is None:
        return None
    try:
        got = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        ok = isinstance(got, list) and len(got) == 2 and got[0] == kind
        key = got[1] if ok else None
        ok = ok and (isinstance(key, int) and not isinstance(key, bool) and 0 <= key < 2**63 if kind == "j"
                     else isinstance(key, str) and 0 < len(key) <= 200)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidInput("cursor is not one this service gave (take next_cursor of the previous page)",
                           param="cursor")
    return key


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
    return chosen, (encode_cursor(kind, table.keys[chosen[-1]]) if more and chosen else None)


#: Every job state word ``/queue`` takes: Slurm's names and squeue's codes.
JOB_STATE_WORDS: dict[str, str] = {**{s.value: s.value for s in JobState}, **JOB_STATE_CODES}


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
