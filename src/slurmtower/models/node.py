"""Nodes and their state, parsed once into a base state plus a set of flags."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "Node",
    "NodeFlag",
    "NodeReason",
    "NodeState",
    "node_sort_key",
    "parse_node_state",
]


class NodeState(StrEnum):
    """A node's base state (Slurm's ``NODE_STATE_BASE``); everything else is a flag."""

    UNKNOWN = "UNKNOWN"
    DOWN = "DOWN"
    IDLE = "IDLE"
    ALLOCATED = "ALLOCATED"
    ERROR = "ERROR"
    MIXED = "MIXED"
    FUTURE = "FUTURE"


class NodeFlag(StrEnum):
    """The node state flags Slurm prints (scontrol's ``State=IDLE+DRAIN+...`` names).

    :attr:`Node.flags` holds plain upper-case strings so that a flag a newer Slurm adds is
    kept rather than dropped; compare against these members (a ``StrEnum`` equals its value).
    """

    DRAIN = "DRAIN"
    NOT_RESPONDING = "NOT_RESPONDING"
    MAINTENANCE = "MAINTENANCE"
    RESERVED = "RESERVED"
    FAIL = "FAIL"
    COMPLETING = "COMPLETING"
    POWERED_DOWN = "POWERED_DOWN"
    POWERING_UP = "POWERING_UP"
    POWERING_DOWN = "POWERING_DOWN"
    POWER_DOWN = "POWER_DOWN"
    POWER_UP = "POWER_UP"
    POWER_DRAIN = "POWER_DRAIN"
    REBOOT_REQUESTED = "REBOOT_REQUESTED"
    REBOOT_ISSUED = "REBOOT_ISSUED"
    REBOOT_CANCEL = "REBOOT_CANCEL"
    CLOUD = "CLOUD"
    DYNAMIC_FUTURE = "DYNAMIC_FUTURE"
    DYNAMIC_NORM = "DYNAMIC_NORM"
    PLANNED = "PLANNED"
    INVALID_REG = "INVALID_REG"
    PERFCTRS = "PERFCTRS"
    BLOCKED = "BLOCKED"
    RESUME = "RESUME"
    UNDRAIN = "UNDRAIN"


# Spellings of base states across scontrol, sinfo (long and short forms) and 22.05 JSON.
_BASE_WORDS: dict[str, NodeState] = {
    "UNKNOWN": NodeState.UNKNOWN,
    "UNK": NodeState.UNKNOWN,
    "DOWN": NodeState.DOWN,
    "IDLE": NodeState.IDLE,
    "ALLOCATED": NodeState.ALLOCATED,
    "ALLOC": NodeState.ALLOCATED,
    "ERROR": NodeState.ERROR,
    "ERR": NodeState.ERROR,
    "MIXED": NodeState.MIXED,
    "MIX": NodeState.MIXED,
    "FUTURE": NodeState.FUTURE,
    "FUTR": NodeState.FUTURE,
}

# sinfo words that name a flag (or a combination) rather than a base state. sinfo folds the
# base state away for these, so the base is a best guess: a draining node is busy (MIXED is
# what scontrol shows for a partly used draining node), everything else is taken as IDLE.
_SINFO_WORDS: dict[str, tuple[NodeState, frozenset[str]]] = {
    "DRAIN": (NodeState.IDLE, frozenset({"DRAIN"})),
    "DRAINED": (NodeState.IDLE, frozenset({"DRAIN"})),
    "DRNG": (NodeState.MIXED, frozenset({"DRAIN"})),
    "DRAINING": (NodeState.MIXED, frozenset({"DRAIN"})),
    "FAIL": (NodeState.IDLE, frozenset({"DRAIN", "FAIL"})),
    "FAILG": (NodeState.MIXED, frozenset({"DRAIN", "FAIL"})),
    "FAILING": (NodeState.MIXED, frozenset({"DRAIN", "FAIL"})),
    "MAINT": (NodeState.IDLE, frozenset({"MAINTENANCE", "RESERVED"})),
    "RESV": (NodeState.IDLE, frozenset({"RESERVED"})),
    "RESERVED": (NodeState.IDLE, frozenset({"RESERVED"})),
    "COMP": (NodeState.IDLE, frozenset({"COMPLETING"})),
    "COMPLETING": (NodeState.IDLE, frozenset({"COMPLETING"})),
    "PLND": (NodeState.IDLE, frozenset({"PLANNED"})),
    "PLANNED": (NodeState.IDLE, frozenset({"PLANNED"})),
    "BOOT": (NodeState.UNKNOWN, frozenset({"REBOOT_ISSUED"})),
    "POW_DN": (NodeState.IDLE, frozenset({"POWER_DOWN"})),
    "POW_UP": (NodeState.IDLE, frozenset({"POWERING_UP"})),
    "NPC": (NodeState.IDLE, frozenset({"PERFCTRS"})),
    "INVAL": (NodeState.IDLE, frozenset({"INVALID_REG"})),
}

# Aliases of flag names (short or older spellings) to scontrol's names.
_FLAG_ALIASES: dict[str, str] = {
    "NO_RESPOND": "NOT_RESPONDING",
    "MAINT": "MAINTENANCE",
    "RES": "RESERVED",
    "POWERED_OFF": "POWERED_DOWN",
    "POWER_OFF": "POWER_DOWN",
}

# sinfo's one-character suffixes (``idle*``, ``mix-``, ``idle~`` ...).
_SUFFIX_FLAGS: dict[str, str] = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}

_SPLIT_RE = re.compile(r"[+,\s]+")
_DIGITS_RE = re.compile(r"(\d+)")


def node_sort_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """Natural order for node names: ``n2`` before ``n10``."""
    return tuple((0, int(p), p) if p.isdigit() else (1, 0, p) for p in _DIGITS_RE.split(name) if p)

_FLAG_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _normalise_flag(word: str) -> str:
    name = word.strip().upper().replace("-", "_").replace(" ", "_")
    return _FLAG_ALIASES.get(name, name)


def parse_node_state(
    state: str | Iterable[str], flags: Iterable[str] = ()
) -> tuple[NodeState, frozenset[str]]:
    """Split any spelling of a node state into its base state and its flags.

    Accepts 22.05 JSON (``"idle"`` with ``flags=["DRAIN"]`` from ``state_flags``), 24.11+
    JSON lists (``["IDLE", "DRAIN"]``), scontrol text (``"IDLE+DRAIN"``,
    ``"IDLE+MAINTENANCE+RESERVED"``) and sinfo's forms (``"idle*"``, ``"drain"``, ``"drng"``,
    ``"down*"``, ``"mix-"``, ``"maint"``). The order of flags does not matter. A word that is
    neither a base state nor a known sinfo word is kept as a flag; without any base state the
    base is :attr:`NodeState.UNKNOWN`.
    """
    if isinstance(state, str):
        words = [w for w in _SPLIT_RE.split(state) if w]
    else:
        words = [w for item in state for w in _SPLIT_RE.split(str(item)) if w]
    words.extend(str(f) for f in flags if str(f))

    base: NodeState | None = None
    guessed: NodeState | None = None
    found: set[str] = set()
    single = len(words) == 1
    for raw in words:
        word = raw.strip().upper()
        while word and word[-1] in _SUFFIX_FLAGS:
            found.add(_SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        if not word:
            continue
        if word in _BASE_WORDS:
            if base is None:
                base = _BASE_WORDS[word]
            continue
        # A lone word is sinfo's compact form ("drain", "drng", "maint"), which folds a base
        # state and flags into one name; in a list or "A+B" every other word is one flag.
        if single and word in _SINFO_WORDS:
            guessed, sinfo_flags = _SINFO_WORDS[word]
            found.update(sinfo_flags)
            continue
        found.add(_normalise_flag(word))
    return (base or guessed or NodeState.UNKNOWN), frozenset(found)


def _upper_flags(value: frozenset[str]) -> frozenset[str]:
    flags = frozenset(_normalise_flag(v) for v in value)
    for flag in flags:
        if not _FLAG_RE.match(flag):
            raise ValueError(f"not a node state flag name: {flag!r}")
    return flags


_FLAG_ORDER = {flag.value: i for i, flag in enumerate(NodeFlag)}


def state_text(state: str, flags: Iterable[str]) -> str:
    """A base state and flags the way scontrol prints them, e.g. ``IDLE+DRAIN`` (the flags
    in :class:`NodeFlag`'s order, unknown ones last)."""
    ordered = sorted(flags, key=lambda f: (_FLAG_ORDER.get(f, len(_FLAG_ORDER)), f))
    return "+".join([state, *ordered])


class Node(BaseModel):
    """One node as slurmctld reports it; a field a release does not report is ``None``."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    state: NodeState
    flags: Annotated[frozenset[str], AfterValidator(_upper_flags)] = frozenset()
    reason: str | None = None
    reason_set_by_user: str | None = None
    reason_changed_at: datetime | None = None
    state_as_of: datetime | None = None
    """Set on a live node whose state, flags and reason were read after its other fields (the
    sensor's poll, between two full reads of the nodes): when. ``None``: every field is of
    one read."""
    partitions: list[str] = Field(default_factory=list)
    cpus: int | None = None
    alloc_cpus: int | None = None
    idle_cpus: int | None = None
    effective_cpus: int | None = None
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    boards: int | None = None
    specialized_cores: int | None = None
    """Cores kept for Slurm's daemons (``CoreSpecCount``); 0: none."""
    specialized_cpus: str | None = None
    """The CPU ids kept for them (``CPUSpecList``, e.g. ``"0-1"``); ``None``: none."""
    specialized_memory_mib: int | None = None
    """Memory kept for them (``MemSpecLimit``); 0: none."""
    real_memory_mib: int | None = None
    alloc_memory_mib: int | None = None
    free_memory_mib: int | None = None
    tmp_disk_mib: int | None = None
    cpu_load: float | None = None
    """Load average (Slurm reports it in hundredths; here it is the plain load, e.g. 1.56)."""
    features: list[str] = Field(default_factory=list)
    active_features: list[str] = Field(default_factory=list)
    gres: str | None = None
    gres_used: str | None = None
    weight: int | None = None
    comment: str | None = None
    extra: str | None = None
    address: str | None = None
    hostname: str | None = None
    port: int | None = None
    boot_time: datetime | None = None
    slurmd_start_time: datetime | None = None
    last_busy: datetime | None = None
    resume_after: datetime | None = None
    suspend_time: timedelta | None = None
    """How long the node stays idle before power saving suspends it (its own ``SuspendTime``,
    26.05+). ``None``: never (``INFINITE``), or a release that does not report it."""
    slurmd_version: str | None = None
    architecture: str | None = None
    operating_system: str | None = None
    owner: str | None = None
    tres: str | None = None
    tres_used: str | None = None
    reservation: str | None = None
    """Name of the reservation the node is in (24.11+ JSON and text; ``None`` in 22.05 JSON)."""

    @field_validator("reason", "comment", "extra", "gres", "gres_used", "reservation", "owner", "tres_used",
                     "specialized_cpus")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None

    @property
    def is_busy(self) -> bool:
        """Running jobs (ALLOCATED or MIXED) or still completing some."""
        return self.state in (NodeState.ALLOCATED, NodeState.MIXED) or NodeFlag.COMPLETING in self.flags

    @property
    def is_drained(self) -> bool:
        """DRAIN set and no job left: the node can be worked on."""
        return NodeFlag.DRAIN in self.flags and not self.is_busy

    @property
    def is_draining(self) -> bool:
        """DRAIN set but jobs are still running."""
        return NodeFlag.DRAIN in self.flags and self.is_busy

    @property
    def is_down(self) -> bool:
        return self.state is NodeState.DOWN

    @property
    def is_responding(self) -> bool:
        return NodeFlag.NOT_RESPONDING not in self.flags

    @property
    def state_text(self) -> str:
        """The state the way scontrol prints it, e.g. ``IDLE+DRAIN``."""
        return state_text(self.state.value, self.flags)


class NodeReason(BaseModel):
    """One line of ``sinfo -R``: why a set of nodes is down or drained."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    nodes: str
    """Folded node list."""
    reason: str
    """As sinfo prints it: the default format cuts it to 20 characters."""
    user: str | None = None
    changed_at: datetime | None = None
