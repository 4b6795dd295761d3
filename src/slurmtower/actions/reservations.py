"""Reservations a site plans: ``slurm.reservation.create``, ``.update`` and ``.delete``.

They go through the same Slurm calls as ``slurm.node.reserve`` and ``.unreserve``
(:meth:`~slurmtower.slurm.client.SlurmActs.create_reservation`, ``update_reservation``,
``delete_reservation``: ``scontrol``, or slurmrestd where it offers them), and like every
mutating action they have a dry run, an owner tag and an audit record.

**The window.** A start (now when omitted) and an end or a duration (minutes): a start in the
past, an end before the start, or a window longer than ``actions.reservation_max_days`` is
bad input naming the parameter. The nodes: a node set, a node count (from a partition, with
features, Slurm choosing), or a whole partition. Users and/or accounts; Slurm's flags
(``MAINT``, ``IGNORE_JOBS``, ``DAILY``, ``WEEKLY``, ``FLEX`` ...); TRES. Unknown nodes,
partitions, users or accounts (checked against slurmdbd where ``accounting.url`` is set) are
bad input too: nothing is asked of Slurm.

**Conflicts, named before acting.** Over the window (each occurrence of a recurring
reservation) the nodes are checked for: other reservations on them (``overlap``; accepted by
the flags ``MAINT`` or ``OVERLAP``, with which Slurm lets them overlap), nodes down, drained
or failing now (``unavailable``; accepted by ``MAINT``: a maintenance window on broken nodes),
running jobs that would still run when it starts (``jobs``; accepted by ``IGNORE_JOBS``), and
for a node count, too few such free nodes (``capacity``). A conflict not accepted refuses the
act (dry runs too) with a 409 listing every one (``conflicts``), unless ``force=true``; the
accepted ones are in the result (``accepted``).

**The breaker.** A ``MAINT`` reservation that starts within ``actions.breaker_window`` takes
its nodes out of service: it passes the node circuit breaker first, as a drain does
(:func:`~slurmtower.actions.breaker.guard`; ``override_breaker``: admins).

**Owners.** The owner tag (``[slurmtower:alice@api]``, with ``(approved by bob)`` before it when
an approved request runs it) goes into the reservation's ``Comment`` where the release has
one (23.02+), and always into slurmtower's store (:class:`~slurmtower.actions.request_store.ReservationOwners`):
the calendar names who made or asked for each reservation. A ``user`` acts (asks) only for
reservations whose users are itself, or whose accounts are its own.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from slurmtower.actions.breaker import guard
from slurmtower.actions.ownership import OwnerTag, holds_node, sanitize_who, tag_reason
from slurmtower.actions.params import (
    RESERVATION_FLAGS,
    RESV_NAME,
    StrList,
    _Mutating,
    _reason,
    _resv_name,
)
from slurmtower.actions.registry import Run, action
from slurmtower.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from slurmtower.models import Node, NodeFlag, Partition, Reservation, SlurmVersion
from slurmtower.nodeset import NodeSet, parse_nodeset
from slurmtower.principal import USER

__all__ = [
    "RECURRING",
    "ReservationCreateParams",
    "ReservationDeleteParams",
    "ReservationUpdateParams",
    "find_reservation",
    "forget_owner",
    "remember_owner",
    "reservation_snapshot",
    "spans",
]

#: Flags that repeat a reservation, and how often.
RECURRING = {"HOURLY": timedelta(hours=1), "DAILY": timedelta(days=1), "WEEKDAY": timedelta(days=1),
             "WEEKEND": timedelta(days=1), "WEEKLY": timedelta(days=7)}
#: Flags Slurm sets itself on a reservation (never asked for, never taken away).
_SLURM_SET = frozenset({"SPEC_NODES", "ALL_NODES", "PART_NODES"})
#: Minutes of grace for a start "now" given as a time a little in the past (clocks, typing).
_GRACE = timedelta(minutes=1)
_PARTITION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")
_FEATURES_RE = re.compile(r"^[A-Za-z0-9_.\-&|()\[\]*,:]{1,200}$")
_TRES_RE = re.compile(r"^[A-Za-z]+(/[A-Za-z0-9_:.\-]+)?=\d+(,[A-Za-z]+(/[A-Za-z0-9_:.\-]+)?=\d+)*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_OVERRIDE = ("Go on even when the circuit breaker would refuse (a MAINT reservation starting within "
             "actions.breaker_window takes its nodes out of service): admin only, never from a rule.")


def _flags(value: list[str]) -> list[str]:
    out = []
    for flag in value:
        name = flag.strip().upper()
        if name not in RESERVATION_FLAGS:
            raise ValueError(f"unknown reservation flag {flag!r} (known: {', '.join(RESERVATION_FLAGS)})")
        out.append(name)
    return list(dict.fromkeys(out))


def _names(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    for name in value:
        if not _NAME_RE.match(name) or len(name) > 64:
            raise ValueError(f"not a user or account name: {name!r}")
    return list(dict.fromkeys(value))


def _nodeset(value: Any) -> Any:
    """A node expression or a list of names -> the folded node set; ``None`` stays."""
    if value is None:
        return None
    if isinstance(value, str) or (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)):
        return str(parse_nodeset(value, param="nodes"))
    raise ValueError("must be a node set expression or a list of node names")


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.astimezone()  # a time without a zone is the host's local time, as scontrol's
    return value


def _comment(value: str | None) -> str | None:
    return None if value is None else _reason(value)


class _Window(_Mutating):
    start_time: datetime | None = Field(default=None, description="When it starts (ISO 8601); now when omitted.")
    end_time: datetime | None = Field(default=None, description="When it ends (ISO 8601); or give duration.")
    duration: int | None = Field(default=None, gt=0, le=10 * 366 * 24 * 60, description="Minutes; or give end_time.")
    comment: str | None = Field(default=None, description="Why (one line): Slurm shows it with slurmtower's owner "
                                                          "tag where the release keeps a comment (23.02+).")
    force: bool = Field(default=False, description="Go on despite the conflicts the check names (other "
                                                   "reservations, nodes out of service, running jobs).")
    override_breaker: bool = Field(default=False, description=_OVERRIDE)

    _check_times = field_validator("start_time", "end_time")(_aware)
    _check_comment = field_validator("comment")(_comment)


def _given(*names: str) -> list[dict[str, Any]]:
    """JSON Schema: each of ``names`` given and not null (one alternative each)."""
    return [{"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in names]


#: The rules between create's parameters (:meth:`ReservationCreateParams._complete`), for the schema.
_CREATE_RULES: dict[str, Any] = {"allOf": [
    {"anyOf": _given("end_time", "duration")},
    {"not": {"allOf": _given("end_time", "duration")}},
    {"anyOf": _given("nodes", "node_count", "partition")},
    {"anyOf": [{"required": [name], "properties": {name: {"anyOf": [{"type": "array", "minItems": 1},
                                                                      {"type": "string", "pattern": "[^ ,]"}]}}}
               for name in ("users", "accounts")]},
]}


#: update: not both end_time and duration (:meth:`ReservationUpdateParams._something`).
_UPDATE_RULES: dict[str, Any] = {"not": {"allOf": _given("end_time", "duration")}}


class ReservationCreateParams(_Window):
    model_config = ConfigDict(json_schema_extra=_CREATE_RULES)

    name: str | None = Field(default=None, description="The reservation's name; generated when omitted "
                                                       "(<first user or account>_<start yyyymmdd_HHMM>).",
                             json_schema_extra={"anyOf": [{"type": "string", "pattern": RESV_NAME}, {"type": "null"}]})
    nodes: str | None = Field(default=None, description="The nodes (n[1-4]); or node_count, or a partition.")
    node_count: int | None = Field(default=None, gt=0, le=1_000_000, description="How many nodes Slurm picks "
                                   "(from partition, with features).")
    partition: str | None = Field(default=None, description="The partition the nodes come from (all of its "
                                                            "nodes with neither nodes nor node_count).")
    features: str | None = Field(default=None, description="Node features the nodes must have (a&b, a|b).")
    users: StrList = Field(default=[], description="Users allowed in (this, accounts, or both).")
    accounts: StrList = Field(default=[], description="Accounts allowed in.")
    flags: StrList = Field(default=[], description="Reservation flags: " + ", ".join(RESERVATION_FLAGS) + ".")
    tres: str | None = Field(default=None, description="TRES to reserve, e.g. cpu=8 (with node_count or a "
                                                       "partition).")

    _check_name = field_validator("name")(lambda v: None if v is None else _resv_name(v))
    _check_flags = field_validator("flags")(_flags)
    _check_users = field_validator("users", "accounts")(_names)

    _check_nodes = field_validator("nodes", mode="before")(_nodeset)

    @field_validator("partition")
    @classmethod
    def _partition(cls, value: str | None) -> str | None:
        if value is not None and not _PARTITION_RE.match(value):
            raise ValueError(f"not a partition name: {value!r}")
        return value

    @field_validator("features")
    @classmethod
    def _features(cls, value: str | None) -> str | None:
        if value is not None and not _FEATURES_RE.match(value):
            raise ValueError(f"not a feature expression: {value!r}")
        return value

    @field_validator("tres")
    @classmethod
    def _tres(cls, value: str | None) -> str | None:
        if value is not None and not _TRES_RE.match(value):
            raise ValueError(f"not a TRES list (cpu=8,gres/gpu=2): {value!r}")
        return value

    @model_validator(mode="after")
    def _complete(self) -> ReservationCreateParams:
        # InvalidInput, not ValueError: it leaves pydantic as it is, naming the parameter.
        what = "slurm.reservation.create"
        if self.end_time is not None and self.duration is not None:
            raise InvalidInput(f"{what}: give end_time or duration, not both", param="duration")
        if self.end_time is None and self.duration is None:
            raise InvalidInput(f"{what}: give end_time or duration (minutes)", param="duration")
        if self.nodes is None and self.node_count is None and self.partition is None:
            raise InvalidInput(f"{what}: give nodes, node_count or partition", param="nodes")
        if not self.users and not self.accounts:
            raise InvalidInput(f"{what}: give users, accounts or both (who may use it)", param="users")
        return self


class ReservationUpdateParams(_Window):
    model_config = ConfigDict(json_schema_extra=_UPDATE_RULES)

    name: str = Field(description="The reservation to change.", json_schema_extra={"pattern": RESV_NAME})
    nodes: str | None = Field(default=None, description="Its new nodes (the whole list).")
    users: StrList | None = Field(default=None, description="Its new users (the whole list).")
    accounts: StrList | None = Field(default=None, description="Its new accounts (the whole list).")
    add_flags: StrList = Field(default=[], description="Flags to add.")
    remove_flags: StrList = Field(default=[], description="Flags to take away.")

    _check_name = field_validator("name")(_resv_name)
    _check_flags = field_validator("add_flags", "remove_flags")(_flags)
    _check_users = field_validator("users", "accounts")(_names)
    _check_nodes = field_validator("nodes", mode="before")(_nodeset)

    @model_validator(mode="after")
    def _something(self) -> ReservationUpdateParams:
        what = "slurm.reservation.update"
        if self.end_time is not None and self.duration is not None:
            raise InvalidInput(f"{what}: give end_time or duration, not both", param="duration")
        changes = (self.start_time, self.end_time, self.duration, self.nodes, self.users, self.accounts,
                   self.comment)
        if all(v is None for v in changes) and not self.add_flags and not self.remove_flags:
            raise InvalidInput(f"{what}: give something to change (start_time, end_time, duration, nodes, users, "
                               "accounts, add_flags, remove_flags, comment)", param="name")
        both = set(self.add_flags) & set(self.remove_flags)
        if both:
            raise InvalidInput(f"{what}: flag {sorted(both)[0]} both added and removed", param="remove_flags")
        return self


class ReservationDeleteParams(_Mutating):
    name: str = Field(description="The reservation to delete.", json_schema_extra={"pattern": RESV_NAME})
    _check_name = field_validator("name")(_resv_name)


# -- shared with slurm.node.reserve / unreserve ---------------------------------------------------


def find_reservation(run: Run, name: str) -> Reservation | None:
    """The reservation ``name`` as Slurm holds it now (``None``: none)."""
    return next((r for r in run.client.reservations() if r.name == name), None)


def reservation_snapshot(resv: Reservation | None) -> dict[str, Any]:
    """``{"reservation": ...}`` for the audit's before and after."""
    return {"reservation": resv.model_dump(mode="json") if resv is not None else None}


def _owners(run: Run) -> Any:
    store = run.store
    if store is None:
        return None
    from slurmtower.actions.request_store import ReservationOwners  # deferred: SQLAlchemy, acting only

    return ReservationOwners(store.engine, cluster=store.cluster)


def remember_owner(run: Run, name: str, reason: str | None) -> str:
    """Record the caller (the requester of an approved request) as ``name``'s owner; its tag."""
    tag = OwnerTag(sanitize_who(run.principal), run.via)
    owners = _owners(run)
    if owners is not None and not run.dry_run:
        owners.set(name, owner=tag.holder, execution_id=run.execution_id or "", approved_by=run.approved_by,
                   request_id=run.request_id, reason=reason)
    return tag.holder


def forget_owner(run: Run, name: str) -> None:
    """``name`` is deleted: its owner row goes."""
    owners = _owners(run)
    if owners is not None and not run.dry_run:
        owners.forget([name])


# -- the window and its conflicts -----------------------------------------------------------------


def spans(start: datetime, end: datetime, flags: Sequence[str], until: datetime) -> Iterator[tuple[datetime, datetime]]:
    """Each occurrence (start, end) of a reservation that starts before ``until`` (one for a
    reservation that does not recur; at most 2,000)."""
    period = next((RECURRING[f] for f in flags if f in RECURRING), None)
    length = end - start
    for _ in range(2000):
        yield start, start + length
        if period is None:
            return
        start += period
        if start >= until:
            return


def _overlaps(a: Sequence[tuple[datetime, datetime]], b: Sequence[tuple[datetime, datetime]]) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


@dataclass
class _Plan:
    """What an act would reserve: the window, the nodes and what stands in the way."""

    start: datetime
    end: datetime
    nodes: NodeSet | None
    """The nodes it takes (named, or a whole partition's); None when Slurm picks them."""
    conflicts: list[dict[str, Any]]
    accepted: list[dict[str, Any]]
    likely: NodeSet
    """The nodes it takes or most likely takes (the breaker's count)."""


def _describe_node(node: Node) -> str:
    reason = f" ({node.reason})" if node.reason else ""
    return f"{node.name} is {node.state_text}{reason}"


def _check(run: Run, *, name: str | None, start: datetime, end: datetime, flags: Sequence[str],
           nodes: NodeSet | None, node_count: int | None, partition: Partition | None, features: str | None,
           every: list[Node]) -> _Plan:
    """The conflicts of reserving ``nodes`` (or ``node_count`` of ``partition``'s) over the window."""
    wanted = set(flags)
    horizon = end + timedelta(days=8)
    mine = list(spans(start, end, flags, horizon))
    by_name = {n.name: n for n in every}
    candidates = (set(nodes) if nodes is not None
                  else set(NodeSet(partition.nodes)) if partition is not None and partition.nodes
                  else set(by_name))
    if nodes is None and features:
        needed = [f for f in re.split(r"[&|,()\[\]*]", features) if f and not f.isdigit()]
        anyof = "|" in features
        candidates = {n for n in candidates if n in by_name and (
            any(f in by_name[n].features for f in needed) if anyof else all(f in by_name[n].features for f in needed))}
    conflicts: list[dict[str, Any]] = []
    accepted: list[dict[str, Any]] = []

    def note(entry: dict[str, Any], accepting: str | None) -> None:
        if accepting is not None:
            accepted.append({**entry, "accepted_by": accepting})
        else:
            conflicts.append(entry)

    overlap_ok = next((f for f in ("MAINT", "OVERLAP") if f in wanted), None)
    taken: set[str] = set()
    for other in run.client.reservations():
        if other.name == name or not other.nodes or other.start_time is None:
            continue
        shared = candidates & set(NodeSet(other.nodes))
        if not shared:
            continue
        other_end = other.end_time or other.start_time + timedelta(days=3650)
        theirs = list(spans(other.start_time, other_end, other.flags, horizon))
        if not _overlaps(mine, theirs):
            continue
        taken |= shared
        on = NodeSet(sorted(shared))
        note({"kind": "overlap", "reservation": other.name, "nodes": str(on),
              "start_time": other.start_time.isoformat(), "end_time": other_end.isoformat(),
              "detail": f"reservation {other.name} holds {on} from {other.start_time:%Y-%m-%d %H:%M} to "
                        f"{other_end:%Y-%m-%d %H:%M}"}, overlap_ok)
    out = sorted(n for n in candidates if n in by_name and (holds_node(by_name[n])
                                                            or NodeFlag.NOT_RESPONDING in by_name[n].flags))
    if out and (nodes is not None or node_count is None):
        note({"kind": "unavailable", "nodes": str(NodeSet(out)),
              "detail": "; ".join(_describe_node(by_name[n]) for n in out[:10])
                        + (f" and {len(out) - 10} more" if len(out) > 10 else "")},
             "MAINT" if "MAINT" in wanted else None)
    busy: set[str] = set()
    if candidates:
        running = run.client.queue(states=["RUNNING", "SUSPENDED"], nodes=NodeSet(sorted(candidates)))
        hit = [j for j in run.visibility().jobs(running)
               if (name is None or j.reservation != name) and (j.end_time is None or j.end_time > start)]
        for job in hit:
            busy |= set(NodeSet(job.nodes)) & candidates if job.nodes else set()
        if hit and (nodes is not None or node_count is None):
            shown = ", ".join(f"{j.job_id} ({j.user_name}, until "
                              f"{j.end_time:%Y-%m-%d %H:%M})" if j.end_time else f"{j.job_id} ({j.user_name})"
                              for j in hit[:10])
            note({"kind": "jobs", "nodes": str(NodeSet(sorted(busy))), "jobs": [j.job_id for j in hit],
                  "detail": f"{len(hit)} running job(s) would still run when it starts: {shown}"
                            + (f" and {len(hit) - 10} more" if len(hit) > 10 else "")},
                 "IGNORE_JOBS" if "IGNORE_JOBS" in wanted else None)
    likely = NodeSet(sorted(candidates)) if nodes is not None or node_count is None else NodeSet()
    if nodes is None and node_count is not None:
        free = sorted(candidates - set(out) - (taken if overlap_ok is None else set())
                      - (busy if "IGNORE_JOBS" not in wanted else set()))
        likely = NodeSet(free[:node_count])
        if len(free) < node_count:
            where = f"partition {partition.name}" if partition is not None else "the cluster"
            conflicts.append({"kind": "capacity", "nodes": None,
                              "detail": f"{node_count} node(s) asked, {len(free)} of {where}"
                                        + (f" with features {features}" if features else "")
                                        + " free over the window"})
    return _Plan(start, end, nodes if nodes is not None else (likely if node_count is None else None),
                 conflicts, accepted, likely)


def _refuse(what: str, conflicts: list[dict[str, Any]]) -> Conflict:
    first = "; ".join(c["detail"] for c in conflicts[:3])
    more = f" (and {len(conflicts) - 3} more)" if len(conflicts) > 3 else ""
    return Conflict(f"{what}: {len(conflicts)} conflict(s): {first}{more}; nothing changed (pass force=true to go "
                    "on anyway, or change the window or the nodes)", param="nodes", conflicts=conflicts)


def _window(run: Run, p: _Window, start: datetime, end: datetime, *, check_start: bool) -> None:
    now = datetime.now(UTC)
    if check_start and start < now - _GRACE:
        raise InvalidInput(f"start_time {start.isoformat()} is in the past", param="start_time")
    if end <= start:
        which = "end_time" if p.end_time is not None else "duration"
        raise InvalidInput(f"the reservation ends ({end.isoformat()}) before it starts ({start.isoformat()})",
                           param=which)
    if end < now and not check_start:
        raise InvalidInput(f"end_time {end.isoformat()} is in the past", param="end_time")
    most = run.settings.actions.reservation_max_days if run.settings is not None else 31.0
    if end - start > timedelta(days=most):
        which = "end_time" if p.end_time is not None else "duration"
        raise InvalidInput(f"the window is {(end - start).total_seconds() / 86400:.1f} days, longer than "
                           f"actions.reservation_max_days ({most:g})", param=which)


def _nodes(run: Run, nodes: str | None) -> tuple[NodeSet | None, list[Node]]:
    """The nodes asked for (unknown ones: bad input naming them) and every node of the cluster."""
    every = run.client.nodes()
    if nodes is None:
        return None, every
    ns = NodeSet(nodes)
    unknown = set(ns) - {n.name for n in every}
    if unknown:
        raise InvalidInput(f"unknown node(s): {NodeSet(sorted(unknown))}", param="nodes")
    return ns, every


def _partition(run: Run, name: str | None) -> Partition | None:
    if name is None:
        return None
    policy = run.visibility()
    found = next((p for p in run.client.partitions() if p.name == name and policy.shows_partition(p.name)), None)
    if found is None:
        raise InvalidInput(f"unknown partition {name!r}", param="partition")
    return found


def _known(run: Run, users: Sequence[str], accounts: Sequence[str]) -> None:
    """Unknown users or accounts are bad input (slurmdbd's, where the accounting database is
    configured; users by the password database otherwise: Slurm resolves them so)."""
    acct = run.accounting() if users or accounts else None
    if acct is not None:
        known = acct.users()
        names = {u.name for u in known}
        missing = [u for u in users if u not in names]
        if missing:
            raise InvalidInput(f"unknown user(s) in slurmdbd: {', '.join(missing)}", param="users")
        held = {a.account for u in known for a in u.associations}
        missing = [a for a in accounts if a not in held]
        if missing:
            raise InvalidInput(f"unknown account(s) in slurmdbd: {', '.join(missing)}", param="accounts")
        return
    for user in users:
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise InvalidInput(f"unknown user: {user}", param="users") from None


def _accounts_of(run: Run, user: str) -> set[str]:
    acct = run.accounting()
    if acct is None:
        return set()
    return {a.account for u in acct.users(user) for a in u.associations}


def _own(run: Run, users: Sequence[str], accounts: Sequence[str], what: str) -> None:
    """A ``user`` acts (asks) only for itself or its accounts."""
    if run.role != USER:
        return
    others = [u for u in users if u != run.principal]
    if others:
        raise PermissionDenied(f"{run.principal} may ask for reservations of its own only: {what} names users "
                               f"{', '.join(others)}", param="users")
    if accounts:
        theirs = _accounts_of(run, run.principal)
        foreign = [a for a in accounts if a not in theirs]
        if foreign:
            raise PermissionDenied(f"{run.principal} may ask for reservations of its own accounts only: "
                                   f"{', '.join(foreign)} " + ("is not one of them" if theirs else
                                                               "(no account of theirs is known)"),
                                   param="accounts")
    if not users and not accounts:
        raise PermissionDenied(f"{run.principal} may ask for reservations of its own only", param="users")


def _tagged(run: Run, text: str | None, name: str) -> str:
    base = text or f"reservation {name}"
    if run.approved_by:
        base = f"{base} (approved by {sanitize_who(run.approved_by)})"
    return tag_reason(base, who=run.principal, via=run.via)


def _has_comments(run: Run) -> bool:
    return run.client.version() >= SlurmVersion(major=23, minor=2)


def _new_name(p: ReservationCreateParams, start: datetime, run: Run, taken: set[str]) -> str:
    first = (p.users or p.accounts or [run.principal])[0]
    base = re.sub(r"[^A-Za-z0-9_.\-]", "_", first)[:40] + start.astimezone().strftime("_%Y%m%d_%H%M")
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def _breaker(run: Run, flags: Sequence[str], start: datetime, nodes: NodeSet, what: str,
             override: bool) -> dict[str, Any] | None:
    """A maintenance reservation starting within the breaker's window takes its nodes out of
    service now: the node breaker counts them as a drain's."""
    run.check_override(override, "circuit breaker")
    settings = run.settings.actions if run.settings is not None else None
    if "MAINT" not in flags or not nodes or settings is None:
        return None
    if start > datetime.now(UTC) + timedelta(seconds=settings.breaker_window):
        return None
    return guard(run, nodes, what, override=override)


def _window_dict(start: datetime, end: datetime) -> dict[str, Any]:
    return {"start_time": start.isoformat(), "end_time": end.isoformat(),
            "duration_minutes": int((end - start).total_seconds() // 60)}


# -- the actions -------------------------------------------------------------------------------------


@action("slurm.reservation.create", ReservationCreateParams, mutating=True, permission="operate")
def reservation_create(run: Run, p: ReservationCreateParams) -> dict[str, Any]:
    """Create a reservation (nodes, a node count or a partition, over a window), its conflicts named first."""
    now = datetime.now(UTC)
    start = p.start_time or now
    end = p.end_time or start + timedelta(minutes=p.duration or 0)
    _window(run, p, start, end, check_start=True)
    _own(run, p.users, p.accounts, "the reservation")
    ns, every = _nodes(run, p.nodes)
    partition = _partition(run, p.partition)
    _known(run, p.users, p.accounts)
    existing = {r.name for r in run.client.reservations()}
    name = p.name or _new_name(p, start, run, existing)
    if name in existing:
        raise Conflict(f"a reservation named {name} exists: nothing changed (slurm.reservation.update changes it)",
                       param="name")
    plan = _check(run, name=name, start=start, end=end, flags=p.flags, nodes=ns, node_count=p.node_count,
                  partition=partition, features=p.features, every=every)
    run.nodes = str(plan.nodes) if plan.nodes else None
    run.before = {"reservation": None}
    if plan.conflicts and not p.force:
        raise _refuse(f"slurm.reservation.create of {name}", plan.conflicts)
    breaker = _breaker(run, p.flags, start, plan.likely, "slurm.reservation.create", p.override_breaker)
    comment = _tagged(run, p.comment, name)
    owner = OwnerTag(sanitize_who(run.principal), run.via).holder
    result: dict[str, Any] = {
        "name": name, "generated_name": p.name is None, **_window_dict(start, end),
        "nodes": str(ns) if ns is not None else None, "node_count": p.node_count,
        "partition": p.partition, "features": p.features, "users": p.users, "accounts": p.accounts,
        "flags": p.flags, "tres": p.tres, "owner": owner, "approved_by": run.approved_by, "comment": comment,
        "conflicts": plan.conflicts, "accepted": plan.accepted,
    }
    if breaker is not None:
        result["breaker"] = breaker
    for entry in plan.accepted:
        run.stdout.append(f"accepted ({entry['accepted_by']}): {entry['detail']}")
    for entry in plan.conflicts:
        run.stdout.append(f"conflict (force=true): {entry['detail']}")
    where = str(ns) if ns is not None else f"{p.node_count or 'all'} node(s) of {p.partition or 'the cluster'}"
    if run.dry_run:
        run.stdout.append(f"dry run: would create reservation {name} on {where} from {start:%Y-%m-%d %H:%M} to "
                          f"{end:%Y-%m-%d %H:%M} for {', '.join([*p.users, *p.accounts])}")
        return {**result, "dry_run": True}
    comments = _has_comments(run)
    created = run.client.create_reservation(
        name, nodes=ns, start_time=start if p.start_time is not None else "now", end_time=end,
        node_count=p.node_count, partition=p.partition, features=p.features, users=p.users, accounts=p.accounts,
        flags=p.flags, tres=p.tres, comment=comment if comments else None)
    remember_owner(run, created, p.comment)
    if not comments:
        run.stdout.append("this Slurm release keeps no comment on a reservation: its owner is in slurmtower's store")
    after = find_reservation(run, created)
    run.after = reservation_snapshot(after)
    if after is not None and after.nodes:
        run.nodes = after.nodes
    run.stdout.append(f"reservation {created} created on {after.nodes if after and after.nodes else where}")
    return {**result, "name": created, "nodes": after.nodes if after is not None else result["nodes"],
            "created": True}


@action("slurm.reservation.update", ReservationUpdateParams, mutating=True, permission="operate")
def reservation_update(run: Run, p: ReservationUpdateParams) -> dict[str, Any]:
    """Change a reservation's window, nodes, users, accounts or flags, its conflicts named first."""
    resv = find_reservation(run, p.name)
    if resv is None:
        raise NotFound(f"unknown reservation {p.name!r}", param="name")
    run.before = reservation_snapshot(resv)
    run.nodes = resv.nodes
    _own(run, resv.users, resv.accounts, f"reservation {p.name}")
    users = p.users if p.users is not None else resv.users
    accounts = p.accounts if p.accounts is not None else resv.accounts
    if p.users is not None or p.accounts is not None:
        if not users and not accounts:
            raise InvalidInput("a reservation keeps users, accounts or both", param="users")
        _own(run, users, accounts, "the change")
        _known(run, p.users or [], p.accounts or [])
    now = datetime.now(UTC)
    old_start = resv.start_time or now
    old_end = resv.end_time or old_start
    start = p.start_time or old_start
    if p.end_time is not None:
        end = p.end_time
    elif p.duration is not None:
        end = start + timedelta(minutes=p.duration)
    else:
        end = start + (old_end - old_start)
    moved = (start, end) != (old_start, old_end)
    if moved:
        _window(run, p, start, end, check_start=p.start_time is not None)
    ns, every = _nodes(run, p.nodes)
    flags = [f for f in dict.fromkeys([*resv.flags, *p.add_flags]) if f not in p.remove_flags]
    nodes = ns if ns is not None else NodeSet(resv.nodes) if resv.nodes else None
    plan: _Plan | None = None
    taking = moved or ns is not None or bool({"MAINT", "OVERLAP", "IGNORE_JOBS"} & set(p.remove_flags))
    if taking and nodes is not None:
        plan = _check(run, name=p.name, start=start, end=end, flags=flags, nodes=nodes, node_count=None,
                      partition=None, features=None, every=every)
        if plan.conflicts and not p.force:
            raise _refuse(f"slurm.reservation.update of {p.name}", plan.conflicts)
    added = (nodes - NodeSet(resv.nodes or "")) if nodes is not None and "MAINT" in resv.flags else nodes
    breaker = _breaker(run, flags, start, added or NodeSet(), "slurm.reservation.update", p.override_breaker)
    changes: dict[str, Any] = {}
    if p.start_time is not None:
        changes["start_time"] = start.isoformat()
    if moved:  # the end too: Slurm keeps a moved reservation's end or its duration as it was made
        changes["end_time"] = end.isoformat()
    if ns is not None:
        changes["nodes"] = str(ns)
    if p.users is not None:
        changes["users"] = p.users
    if p.accounts is not None:
        changes["accounts"] = p.accounts
    add = [f for f in p.add_flags if f not in resv.flags]
    remove = [f for f in p.remove_flags if f in resv.flags and f not in _SLURM_SET]
    if add:
        changes["add_flags"] = add
    if remove:
        changes["remove_flags"] = remove
    comment = _tagged(run, p.comment, p.name) if p.comment is not None else None
    if comment is not None:
        changes["comment"] = comment
    result: dict[str, Any] = {"name": p.name, **_window_dict(start, end), "changes": changes, "flags": flags,
                              "nodes": str(nodes) if nodes is not None else None, "users": users, "accounts": accounts,
                              "conflicts": plan.conflicts if plan else [], "accepted": plan.accepted if plan else [],
                              "approved_by": run.approved_by}
    if breaker is not None:
        result["breaker"] = breaker
    if not changes:
        run.after = run.before
        run.stdout.append(f"reservation {p.name} already so: nothing to change")
        return {**result, "changed": False}
    if run.dry_run:
        run.stdout.append(f"dry run: would update reservation {p.name}: {changes}")
        return {**result, "dry_run": True}
    run.client.update_reservation(
        p.name, nodes=ns, start_time=p.start_time, end_time=end if "end_time" in changes else None,
        users=p.users, accounts=p.accounts, flags=add or None, remove_flags=remove or None,
        comment=comment if comment is not None and _has_comments(run) else None)
    after = find_reservation(run, p.name)
    run.after = reservation_snapshot(after)
    run.stdout.append(f"reservation {p.name} updated: {', '.join(changes)}")
    return {**result, "changed": True}


@action("slurm.reservation.delete", ReservationDeleteParams, mutating=True, permission="operate")
def reservation_delete(run: Run, p: ReservationDeleteParams) -> dict[str, Any]:
    """Delete a reservation (its jobs stay queued, without it)."""
    resv = find_reservation(run, p.name)
    if resv is None:
        raise NotFound(f"unknown reservation {p.name!r}", param="name")
    run.before = reservation_snapshot(resv)
    run.nodes = resv.nodes
    _own(run, resv.users, resv.accounts, f"reservation {p.name}")
    result = {"name": p.name, "nodes": resv.nodes, "approved_by": run.approved_by}
    if run.dry_run:
        run.stdout.append(f"dry run: would delete reservation {p.name}")
        return {**result, "dry_run": True}
    run.client.delete_reservation(p.name)
    forget_owner(run, p.name)
    run.after = reservation_snapshot(find_reservation(run, p.name))
    run.stdout.append(f"reservation {p.name} deleted")
    return {**result, "deleted": True}
