"""Drain ownership: who holds a node's DRAIN or DOWN, read from the reason Slurm shows.

slurmtower appends an owner tag to every reason it sets::

    disk swap [slurmtower:alice@cli]
    ^^^^^^^^^  ^^^^^^^^^^ ^^^^^ ^^^
    why        marker     who   through what (cli, api, rule or mcp: an agent)

``who`` is the principal (the Unix user for the CLI, the token or JWT subject for the API,
the rule name for a rule); characters outside ``[A-Za-z0-9_.:-]`` become ``_``. The tag is
always the last thing in the reason, so Slurm's own ``sinfo -R`` shows it, and any tool can
parse it back with :func:`parse_reason`. Slurm records when (``reason_changed_at``) and as
which Unix user (``reason_set_by_user``); the audit store records the rest.

A reason without a tag was set by someone else: a person with ``scontrol``, a health check,
slurmctld itself (``Not responding``). :func:`reason_owner` names such a holder by Slurm's
``reason_set_by_user`` (``user:root``) so the sensor can report it too.

Several owners can hold one node (:mod:`slurmtower.actions.holds`): the reason then names
each hold, oldest first, joined by ``"; "``, each with its holder's tag; a hold made outside
slurmtower that slurmtower kept when it added its own is tagged ``[user:<name>]``::

    bad fan [user:root]; disk swap [slurmtower:alice@cli]; ecc errors [slurmtower:hc@rule]

Tags delimit the parts (a reason slurmtower sets may not contain one), so a part's text may
hold ``;`` too. :func:`split_reason` gives the parts, :func:`join_reason` builds the reason
from them, :func:`parse_reason` still gives one (text, tag) pair: the parts' texts joined,
and the newest slurmtower tag.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from slurmtower.models import Node, NodeFlag, NodeState

__all__ = [
    "REASON_SEPARATOR",
    "TAG_MARKER",
    "OwnerTag",
    "ReasonPart",
    "Via",
    "contains_tag",
    "holds_node",
    "join_reason",
    "outside_holder",
    "parse_reason",
    "reason_holders",
    "reason_owner",
    "sanitize_who",
    "split_reason",
    "tag_reason",
]

Via = Literal["cli", "api", "rule", "mcp"]
TAG_MARKER = "slurmtower"

REASON_SEPARATOR = "; "
"""Between the parts of a reason naming several holds."""

# One hold's tag: slurmtower's own, or an outside holder slurmtower kept (user:<name>, or
# "unknown" when Slurm did not say who set the reason).
_HOLD_TAG_RE = re.compile(
    r"\[(?:slurmtower:(?P<who>[A-Za-z0-9_.:\-]+)@(?P<via>cli|api|rule|mcp)|(?P<outside>user:[A-Za-z0-9_.\-]+|unknown))\]"
)
_ANY_TAG_RE = re.compile(r"\[slurmtower:", re.IGNORECASE)
_SEPARATOR_RE = re.compile(r"^\s*;\s?")
_BAD_WHO = re.compile(r"[^A-Za-z0-9_.:\-]")


@dataclass(frozen=True)
class OwnerTag:
    """The owner part of a reason slurmtower set."""

    who: str
    via: str

    def __str__(self) -> str:
        return f"[{TAG_MARKER}:{self.who}@{self.via}]"

    @property
    def holder(self) -> str:
        """``slurmtower:alice@cli``: how a refusal names the holder."""
        return f"{TAG_MARKER}:{self.who}@{self.via}"


def sanitize_who(who: str) -> str:
    """A principal name as it appears in a tag (never empty, no brackets or spaces)."""
    cleaned = _BAD_WHO.sub("_", who.strip())
    return cleaned or "unknown"


def tag_reason(reason: str, *, who: str, via: Via) -> str:
    """``reason`` with the owner tag appended: ``disk swap [slurmtower:alice@cli]``."""
    return f"{reason.strip()} {OwnerTag(sanitize_who(who), via)}"


def contains_tag(reason: str) -> bool:
    """Whether text already carries something that looks like an owner tag (slurmtower's,
    or a kept outside holder's ``[user:root]``)."""
    return _ANY_TAG_RE.search(reason) is not None or _HOLD_TAG_RE.search(reason) is not None


@dataclass(frozen=True)
class ReasonPart:
    """One hold as the reason Slurm shows names it."""

    text: str | None
    """Why (``None``: the part is only a tag)."""
    holder: str
    """``slurmtower:alice@cli``, ``user:root`` or ``unknown``."""
    tag: OwnerTag | None = None
    """slurmtower's tag (``None`` for an outside holder)."""

    def __str__(self) -> str:
        return f"{self.text} [{self.holder}]" if self.text else f"[{self.holder}]"


def split_reason(reason: str | None) -> list[ReasonPart]:
    """The holds a reason names, oldest first; ``[]`` for a reason that does not end with a
    holder's tag (set outside slurmtower: one hold of Slurm's ``reason_set_by_user``)."""
    if not reason:
        return []
    parts: list[ReasonPart] = []
    pos = 0
    for match in _HOLD_TAG_RE.finditer(reason):
        chunk = reason[pos:match.start()]
        if parts:
            chunk = _SEPARATOR_RE.sub("", chunk, count=1)
        text = chunk.strip() or None
        if match["outside"] is not None:
            parts.append(ReasonPart(text, match["outside"]))
        else:
            tag = OwnerTag(match["who"], match["via"])
            parts.append(ReasonPart(text, tag.holder, tag))
        pos = match.end()
    if not parts or reason[pos:].strip():
        return []
    return parts


def join_reason(parts: Sequence[ReasonPart]) -> str:
    """The reason naming every part's hold: ``a [slurmtower:x@cli]; b [user:root]``."""
    return REASON_SEPARATOR.join(str(p) for p in parts)


def parse_reason(reason: str | None) -> tuple[str | None, OwnerTag | None]:
    """Split a node reason into (the reason text, the owner tag or ``None``).

    A reason naming several holds gives their texts joined by ``"; "`` and the newest
    slurmtower tag (``None`` when only outside holders are named)."""
    if not reason:
        return None, None
    parts = split_reason(reason)
    if not parts:
        return reason, None
    texts = [p.text for p in parts if p.text]
    tags = [p.tag for p in parts if p.tag is not None]
    return REASON_SEPARATOR.join(texts) or None, tags[-1] if tags else None


def holds_node(node: Node) -> bool:
    """Whether the node is out of service by someone's decision (DRAIN, DOWN, FAIL)."""
    return node.state is NodeState.DOWN or NodeFlag.DRAIN in node.flags or NodeFlag.FAIL in node.flags


def outside_holder(set_by_user: str | None) -> str:
    """The holder of a reason set outside slurmtower: ``user:root`` (``unknown`` when Slurm
    did not say who set it)."""
    name = _BAD_WHO.sub("_", set_by_user.strip()).replace(":", "_") if set_by_user else ""
    return f"user:{name}" if name else "unknown"


def reason_holders(reason: str | None, set_by_user: str | None) -> list[ReasonPart]:
    """Every hold a reason names, oldest first: its tagged parts, or the whole reason as one
    outside hold by ``set_by_user``; ``[]`` without a reason."""
    if not reason:
        return []
    return split_reason(reason) or [ReasonPart(reason.strip() or None, outside_holder(set_by_user))]


def reason_owner(node: Node) -> str | None:
    """Who holds the node's reason: ``slurmtower:alice@cli``, ``user:root``, or ``None``.

    ``None`` when the node has no reason at all. A reason naming several holds gives the
    newest holder (the last one named); :func:`reason_holders` gives them all.
    """
    if not node.reason:
        return None
    return reason_holders(node.reason, node.reason_set_by_user)[-1].holder
