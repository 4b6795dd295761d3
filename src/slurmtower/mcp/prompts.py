"""Runbooks an agent can be handed (MCP prompts): the steps, the tools they call, in plain words."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from slurmtower.errors import InvalidInput

__all__ = ["PROMPTS", "Runbook", "render"]


@dataclass(frozen=True)
class Runbook:
    name: str
    description: str
    arguments: tuple[tuple[str, str, bool], ...]
    """(name, description, required) of each argument."""
    text: Callable[[Mapping[str, str]], str]


def _maintenance(args: Mapping[str, str]) -> str:
    nodes, reason = args["nodes"], args["reason"]
    return f"""Drain {nodes} for maintenance ({reason}), then bring them back.

1. Read slurmtower.nodes with nodes="{nodes}": their state, reason and who already holds them.
2. Read slurmtower.queue with nodes="{nodes}" and state="RUNNING": the jobs a drain lets finish.
3. Read slurmtower.node_timeline for each node (days=7): has it been out often lately?
4. Call slurm.node.drain with nodes="{nodes}" and reason="{reason}". The first call is a dry run:
   show its plan to the person you work for, with the jobs still running.
5. Call slurm.node.drain again with the same arguments, confirmation=<the plan's confirmation> and
   request_reason=<why, for the person who approves>. It becomes a request a person approves
   (unless this deployment lets you act directly): follow it with slurmtower.request.
6. When the work is done, do the same with slurm.node.resume (nodes="{nodes}"): it releases your
   hold only; a node resumes when no other owner holds it (slurmtower.nodes shows the holds).
Never pass override_breaker: the circuit breaker is there to stop automation."""


def _pending(args: Mapping[str, str]) -> str:
    filters = ", ".join(f'{k}="{v}"' for k, v in args.items() if v)
    scope = f" ({filters})" if filters else ""
    return f"""Explain why jobs are pending{scope}.

1. Read slurmtower.queue with state="PENDING"{", " + filters if filters else ""} (page on with cursor=next_cursor).
2. Call slurm.job.why with jobids=[the ids] (at most 50 at a time): each job's reason in plain
   words, the facts that block it (a dependency, a limit, a reservation, a drained node, its
   priority and the jobs ahead) and what its owner can change.
3. Group the jobs by reason and say, per group, what would let them start and who can do it.
This is read-only: change nothing."""


def _flapping(args: Mapping[str, str]) -> str:
    hours = args.get("hours") or "24"
    if not hours.isdigit() or not 1 <= int(hours) <= 24 * 31:
        raise InvalidInput("hours must be a whole number from 1 to 744", param="hours")
    return f"""Find the nodes that flapped in the last {hours} hours.

1. Read slurmtower.events with type=["slurm.node.state"] and start=<now minus {hours} hours, ISO 8601
   with a time zone>; page on with before=next_before until none is left.
2. Count the state changes per node; a node that went out of service and back more than twice
   has flapped.
3. For each of those, read slurmtower.node_timeline (days=1 or 2): its outages, their reasons and
   owners, its time to repair.
4. Report the nodes, how often each went out, the reasons, and whether one owner (a health
   check, a rule, a person) keeps draining it. This is read-only: change nothing."""


PROMPTS: dict[str, Runbook] = {r.name: r for r in (
    Runbook("drain-for-maintenance", "Drain nodes for maintenance and bring them back, with a person's approval.",
            (("nodes", "The nodes (a node set: n[1-4]).", True),
             ("reason", "Why (Slurm shows it as the drain reason).", True)), _maintenance),
    Runbook("why-pending", "Why are these jobs pending, and what would let them start.",
            (("user", "Only this user's jobs.", False), ("partition", "Only this partition's jobs.", False)),
            _pending),
    Runbook("flapping-nodes", "Which nodes flapped (went out of service and back) lately.",
            (("hours", "How far back (hours, default 24).", False),), _flapping),
)}


def render(name: str, args: Mapping[str, str]) -> tuple[Runbook, str]:
    """The runbook ``name`` with its arguments filled in.

    Raises :class:`InvalidInput` naming a missing, unknown or bad argument (``NotFound``-like
    for an unknown runbook: ``name``)."""
    book = PROMPTS.get(name)
    if book is None:
        raise InvalidInput(f"no runbook {name[:60]!r} (known: {', '.join(PROMPTS)})", param="name")
    known = {a[0] for a in book.arguments}
    extra = sorted(set(args) - known)
    if extra:
        raise InvalidInput(f"{name}: unknown argument {extra[0][:40]!r} (known: {', '.join(sorted(known))})",
                           param=extra[0][:40])
    for arg, _, required in book.arguments:
        value = args.get(arg)
        if required and not (value and value.strip()):
            raise InvalidInput(f"{name}: missing argument {arg!r}", param=arg)
        if value is not None and (len(value) > 1000 or any(not c.isprintable() for c in value)):
            raise InvalidInput(f"{name}: {arg} must be printable text of at most 1000 characters", param=arg)
    return book, book.text({k: v.strip() for k, v in args.items()})
