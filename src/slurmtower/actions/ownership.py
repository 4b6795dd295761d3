"""Drain ownership: who holds a node's DRAIN or DOWN, read from the reason Slurm shows.

slurmtower appends an owner tag to every reason it sets::

    disk swap [slurmtower:alice@cli]
    ^^^^^^^^^  ^^^^^^^^^^ ^^^^^ ^^^
    why        marker     who   through what (cli, api or rule)

``who`` is the principal (the Unix user for the CLI, the token or JWT subject for the API,
the rule name for a rule); characters outside ``[A-Za-z0-9_.:-]`` become ``_``. The tag is
always the last thing in the reason, so Slurm's own ``sinfo -R`` shows it, and any tool can
parse it back with :func:`parse_reason`. Slurm records when (``reason_changed_at``) and as
which Unix user (``reason_set_by_user``); the audit store records the rest.

A reason without a tag was set by someone else: a person with ``scontrol``, a health check,
slurmctld itself (``Not responding``). :func:`reason_owner` names such a holder by Slurm's
``reason_set_by_user`` (``user:root``) so the sensor can report it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from slurmtower.models import Node, NodeFlag, NodeState

__all__ = [
    "TAG_MARKER",
    "OwnerTag",
    "Via",
    "contains_tag",
    "holds_node",
    "parse_reason",
    "reason_owner",
    "sanitize_who",
    "tag_reason",
]

Via = Literal["cli", "api", "rule"]
TAG_MARKER = "slurmtower"

_TAG_RE = re.compile(r"\s*\[slurmtower:(?P<who>[A-Za-z0-9_.:\-]+)@(?P<via>cli|api|rule)\]\s*$")
_ANY_TAG_RE = re.compile(r"\[slurmtower:", re.IGNORECASE)
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
    """Whether text already carries something that looks like an owner tag."""
    return _ANY_TAG_RE.search(reason) is not None


def parse_reason(reason: str | None) -> tuple[str | None, OwnerTag | None]:
    """Split a node reason into (the reason text, the owner tag or ``None``)."""
    if not reason:
        return None, None
    match = _TAG_RE.search(reason)
    if match is None:
        return reason, None
    text = reason[: match.start()].strip()
    return text or None, OwnerTag(match["who"], match["via"])


def holds_node(node: Node) -> bool:
    """Whether the node is out of service by someone's decision (DRAIN, DOWN, FAIL)."""
    return node.state is NodeState.DOWN or NodeFlag.DRAIN in node.flags or NodeFlag.FAIL in node.flags


def reason_owner(node: Node) -> str | None:
    """Who holds the node's reason: ``slurmtower:alice@cli``, ``user:root``, or ``None``.

    ``None`` when the node has no reason at all.
    """
    if not node.reason:
        return None
    _text, tag = parse_reason(node.reason)
    if tag is not None:
        return tag.holder
    if node.reason_set_by_user:
        return f"user:{node.reason_set_by_user}"
    return "unknown"
