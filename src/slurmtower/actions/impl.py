"""The actions of the StackStorm ``slurm`` pack, each over the :class:`SlurmClient`.

Every node action checks that all nodes exist before acting and acts on the whole node set
with one Slurm call (drain, down and resume: one per distinct reason, when some nodes have
other holders). Mutating actions fill ``run.before``/``run.after`` for the audit log
and honour ``dry_run`` by returning what they would do.

Drain, down and resume work on drain holds (:mod:`slurmtower.actions.holds`): a drain adds
the caller's hold beside the others', a resume releases the caller's and resumes a node only
when none is left; drain and down pass the circuit breaker first
(:mod:`slurmtower.actions.breaker`).

Slurm applies a node-state update node by node and answers the whole call with the last
error it met: ``scontrol update nodename=x[1-1000] state=resume`` over nodes whose slurmd
never registered clears their DRAIN, then refuses their UNKNOWN state ("Invalid node state
specified"). So drain, down and resume read the nodes again after the call, say per node
what happened (``result["outcome"]``, ``run.after[node]["outcome"]``), and report a
:data:`~slurmtower.actions.envelope.PARTIAL` outcome when some nodes changed and others did
not, or when Slurm complained about a call that changed nodes.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from slurmtower.actions.breaker import guard
from slurmtower.actions.holds import Hold, any_held, node_holds
from slurmtower.actions.ownership import (
    OwnerTag,
    holds_node,
    join_reason,
    reason_owner,
    sanitize_who,
    split_reason,
    tag_reason,
)
from slurmtower.actions.params import (
    ACCOUNTING_CRITERIA,
    ConfigGetParams,
    JobFindParams,
    JobGetParams,
    NodeDownParams,
    NodeDrainParams,
    NodeGetParams,
    NodeReserveParams,
    NodeResumeParams,
    NodeUnreserveParams,
    NodeUpdateParams,
    TriggerSetParams,
    TriggerUnsetParams,
)
from slurmtower.actions.registry import Run, action, node_snapshot
from slurmtower.actions.reservations import find_reservation, forget_owner, remember_owner, reservation_snapshot
from slurmtower.errors import (
    AccountingUnavailable,
    Conflict,
    InvalidInput,
    NotFound,
    SlurmRequestError,
)
from slurmtower.models import Job, JobState, Node, NodeFlag, NodeState, config_key, parse_job_state
from slurmtower.models.accounting import HistoryJob
from slurmtower.models.job import step_label
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.client import QUEUE_TEXT_FIELDS

__all__ = ["JOB_CRITERIA_SERVER_SIDE"]

log = logging.getLogger(__name__)

#: job.find criteria squeue applies itself, mapped to :meth:`SlurmClient.job_ids` filters.
JOB_CRITERIA_SERVER_SIDE = {
    "user": "users",
    "user_name": "users",
    "account": "accounts",
    "partition": "partitions",
    "state": "states",
    "job_state": "states",
    "name": "names",
    "job_name": "names",
    "job_id": "job_ids",
    "nodes": "nodes",
    "batch_host": "nodes",
}
# Seed (pyslurm) spellings of Job fields.
_JOB_ALIASES = {"user": "user_name", "job_state": "state", "job_name": "name", "jobid": "job_id"}
# Criteria accounting filters in SQL (AccountingDB.find_jobs keys).
_ACCT_KEYS = ACCOUNTING_CRITERIA  # what the document says include_finished matches on


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _existing(run: Run, nodes: str) -> tuple[NodeSet, list[Node]]:
    ns = NodeSet(nodes)
    found = run.client.nodes(ns)  # raises NotFound naming unknown nodes, before anything runs
    run.nodes = str(ns)
    return ns, found


def _shown_ids(run: Run, ids: Sequence[int]) -> list[int]:
    """``ids`` without the live jobs of hidden partitions."""
    policy = run.visibility()
    if not policy.hidden_partitions or not ids:
        return list(ids)
    return sorted({j.job_id for j in policy.jobs(run.client.queue(job_ids=list(ids)))})


def _job_dict(job: Job) -> dict[str, Any]:
    return job.model_dump(mode="json")


# -- configuration ---------------------------------------------------------------------------


@action("slurm.config.get", ConfigGetParams, mutating=False, permission="read")
def config_get(run: Run, p: ConfigGetParams) -> dict[str, Any]:
    """Get one (or all) slurmctld configuration items, snake_case names."""
    items = run.client.config().items
    if p.item is None:
        return dict(items)
    key = config_key(p.item)
    if key not in items:
        raise NotFound(f"unknown configuration item {p.item!r}{_suggest(key, sorted(items))}", param="item")
    return {key: items[key]}


# -- jobs -------------------------------------------------------------------------------------


def _criterion_value(key: str, value: Any) -> Any:
    if key in {"state", "job_state"}:
        if not isinstance(value, str):
            raise InvalidInput(f"criterias.{key} must be a job state name", param=f"criterias.{key}")
        state, _flags = parse_job_state(value)
        if state is JobState.UNKNOWN:
            raise InvalidInput(f"criterias.{key}: unknown job state {value!r}"
                               f"{_suggest(value.upper(), [s.value for s in JobState])}",
                               param=f"criterias.{key}")
        return state.value
    if key == "job_id":
        if type(value) is not int and not (isinstance(value, str) and value.isdigit()):
            raise InvalidInput("criterias.job_id must be an integer", param="criterias.job_id")
        return int(value)
    if key in {"nodes", "batch_host"}:
        if not isinstance(value, str):
            raise InvalidInput(f"criterias.{key} must be a node name or set", param=f"criterias.{key}")
        return NodeSet(value, param=f"criterias.{key}")
    if key in JOB_CRITERIA_SERVER_SIDE and not isinstance(value, str):
        raise InvalidInput(f"criterias.{key} must be a string", param=f"criterias.{key}")
    return value


def _equal(actual: Any, wanted: Any) -> bool:
    if isinstance(actual, list | tuple | set | frozenset):
        return wanted in actual or (isinstance(wanted, list) and sorted(map(str, wanted))
                                    == sorted(map(str, actual)))
    if actual is None or wanted is None:
        return actual is None and wanted is None
    if isinstance(actual, bool) or isinstance(wanted, bool):
        return bool(actual) == bool(wanted) and type(actual) is type(wanted)
    return str(actual) == str(wanted)


def _find_live(run: Run, criterias: Mapping[str, Any]) -> list[int]:
    filters: dict[str, Any] = {}
    residual: dict[str, Any] = {}
    for key, raw in criterias.items():
        value = _criterion_value(key, raw)
        target = JOB_CRITERIA_SERVER_SIDE.get(key)
        if target is None:
            field = _JOB_ALIASES.get(key, key)
            if field not in Job.model_fields:
                raise InvalidInput(f"criterias: unknown job field {key!r}{_suggest(field, list(Job.model_fields))}",
                                   param=f"criterias.{key}")
            residual[field] = value
            continue
        if target == "nodes":
            filters["nodes"] = value if "nodes" not in filters else filters["nodes"] & value
            if key == "batch_host":  # squeue matches any allocated node; the batch host is checked below
                residual["batch_host"] = value
        elif target == "job_ids":
            filters["job_ids"] = [value]
        else:
            filters.setdefault(target, []).append(value)
    if not residual:
        return run.client.job_ids(**filters)
    if set(residual) <= QUEUE_TEXT_FIELDS:
        # One squeue call: Slurm's filters, then the text form of the jobs they leave.
        candidates = run.client.queue(**filters)
    else:
        # A field only the full record has (exit code, restarts ...): details for the
        # narrowed ids only.
        ids = run.client.job_ids(**filters)
        candidates = run.client.jobs(ids) if ids else []
    out = []
    for job in candidates:
        ok = True
        for field, wanted in residual.items():
            if field == "batch_host":
                ok = job.batch_host is not None and job.batch_host in wanted
            else:
                value = getattr(job, field)
                ok = _equal(value.model_dump() if isinstance(value, BaseModel) else value, wanted)
            if not ok:
                break
        if ok:
            out.append(job.job_id)
    return sorted(set(out))


def _find_finished(run: Run, criterias: Mapping[str, Any]) -> list[int]:
    acct = run.accounting()
    if acct is None:
        raise AccountingUnavailable("include_finished needs the accounting database (accounting.url)")

    sql: dict[str, Any] = {}
    residual: dict[str, Any] = {}
    for key, raw in criterias.items():
        value = _criterion_value(key, raw)
        if key in _ACCT_KEYS:
            sql[_ACCT_KEYS[key]] = value
        elif key in {"nodes", "batch_host"} or key in HistoryJob.model_fields:
            residual[key] = value
        else:
            raise InvalidInput(f"criterias.{key} cannot be checked on finished jobs (accounting has no such "
                               "field)", param=f"criterias.{key}")
    ids = acct.find_jobs(sql)
    if not residual or not ids:
        return ids
    out = []
    for job_id, rows in acct.jobs_by_id(ids).items():
        for row in rows:
            dumped = row.model_dump()
            ok = True
            for key, wanted in residual.items():
                if key in {"nodes", "batch_host"}:
                    # accounting keeps the node list, not the batch host: any allocated node matches
                    ok = bool(row.nodes) and bool(NodeSet(row.nodes) & wanted)
                else:
                    ok = _equal(dumped[key], wanted)
                if not ok:
                    break
            if ok:
                out.append(job_id)
                break
    return out


@action("slurm.job.find", JobFindParams, mutating=False, permission="read")
def job_find(run: Run, p: JobFindParams) -> list[int]:
    """Find jobs matching criterias (job fields); Slurm filters what it can, a list of job ids."""
    ids = set(_shown_ids(run, _find_live(run, p.criterias)))
    if p.include_finished:
        ids.update(_find_finished(run, p.criterias))
    return sorted(ids)


def _missing_error(missing: Sequence[int], acct_configured: bool) -> NotFound:
    where = "slurmctld or accounting" if acct_configured else "slurmctld (accounting is not configured)"
    return NotFound(f"unknown job id(s) in {where}: {', '.join(map(str, missing))}", param="jobids")


@action("slurm.job.get", JobGetParams, mutating=False, permission="read")
def job_get(run: Run, p: JobGetParams) -> dict[str, list[dict[str, Any]]]:
    """Get job details keyed by job id; jobs that left slurmctld come from accounting."""
    result: dict[str, list[dict[str, Any]]] = {}
    for job in run.visibility().jobs(run.client.jobs(p.jobids)):
        result.setdefault(str(job.job_id), []).append(_job_dict(job))
    missing = [j for j in p.jobids if str(j) not in result]
    acct = run.accounting() if missing else None
    if missing and acct is not None:
        for job_id, rows in acct.jobs_by_id(missing).items():
            result[str(job_id)] = [{**r.model_dump(mode="json"), "from_accounting": True} for r in rows]
        missing = [j for j in missing if str(j) not in result]
    if missing:
        raise _missing_error(missing, acct is not None)
    return {str(j): result[str(j)] for j in p.jobids}


@action("slurm.job.step.get", JobGetParams, mutating=False, permission="read")
def job_step_get(run: Run, p: JobGetParams) -> dict[str, dict[str, Any]]:
    """Get job step details keyed by job id, then step id; finished jobs come from accounting."""
    live = set(_shown_ids(run, run.client.job_ids(job_ids=p.jobids)))
    result: dict[str, dict[str, Any]] = {str(j): {} for j in p.jobids if j in live}
    if live:
        for step in run.client.job_steps(sorted(live)):
            result[str(step.job_id)][step.step_id] = step.model_dump(mode="json")
    missing = [j for j in p.jobids if j not in live]
    acct = run.accounting() if missing else None
    if missing and acct is not None:
        known = acct.jobs_by_id(missing)
        steps = acct.steps_for_jobs(missing)
        for job_id in known:
            entry: dict[str, Any] = {}
            for hstep in steps.get(job_id, []):
                key = step_label(hstep.step_id)
                entry.setdefault(key, {**hstep.model_dump(mode="json"), "from_accounting": True})
            result[str(job_id)] = entry
        missing = [j for j in missing if str(j) not in result]
    if missing:
        raise _missing_error(missing, acct is not None)
    return {str(j): result[str(j)] for j in p.jobids}


# -- nodes ------------------------------------------------------------------------------------


@action("slurm.node.get", NodeGetParams, mutating=False, permission="read")
def node_get(run: Run, p: NodeGetParams) -> dict[str, dict[str, Any]]:
    """Get node details keyed by node name, with who holds each node (its holds, oldest first)."""
    read_at = _now()
    _ns, found = _existing(run, p.nodes)
    nodes = run.visibility().nodes(found)
    if found and not nodes:  # only nodes of hidden partitions: unknown, as hidden
        raise NotFound(f"unknown node(s): {p.nodes}", param="nodes")
    # Nodes all in service have no holds, whatever the store keeps: it is not opened (its stale
    # rows are forgotten by the next read of a held node, a drain or a resume).
    holds = node_holds(run.holds if any_held(nodes) else None, nodes, read_at=read_at)
    return {n.name: {**n.model_dump(mode="json"), "state_text": n.state_text, "reason_owner": reason_owner(n),
                     "holds": [h.as_dict() for h in holds[n.name]]}
            for n in nodes}


def _now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def _holds_locked(run: Run) -> Iterator[None]:
    """The holds lock of the store around a drain, down or resume (none without a store or
    for a dry run, which changes nothing)."""
    store = run.holds
    if store is None or run.dry_run:
        yield
        return
    with store.lock():
        yield


def _describe(holds: Sequence[Hold]) -> str:
    return ", ".join(h.holder + (f" ({h.reason!r})" if h.reason else "") for h in holds)


def _refuse(others: Mapping[str, Sequence[Hold]], verb: str) -> Conflict:
    return Conflict("; ".join(f"{n} is held by {_describe(hs)}" for n, hs in others.items())
                    + f" — not {verb}; pass force=true to release every hold",
                    holders={n: [h.holder for h in hs] for n, hs in others.items()})


def _breaker(run: Run, p: NodeDrainParams | NodeDownParams, ns: NodeSet, action: str) -> dict[str, Any] | None:
    """Refuse (:class:`BreakerTripped`) a drain or down past the circuit breaker's limits,
    or note its override; ``None`` when it does not trip (or is off)."""
    return guard(run, ns, action, override=p.override_breaker)


def _read_holds(run: Run, nodes: str) -> tuple[datetime, NodeSet, list[Node], dict[str, list[Hold]], str]:
    """Under the holds lock, before a drain, down or resume: when the nodes were read, their
    set, the nodes (also kept as ``run.before``), their holds, and the caller's name."""
    read_at = _now()
    ns, found = _existing(run, nodes)
    run.before = node_snapshot(found)
    return read_at, ns, found, node_holds(run.holds, found, read_at=read_at), sanitize_who(run.principal)


def _set_out(run: Run, p: NodeDrainParams | NodeDownParams, state: str) -> dict[str, Any]:
    run.check_override(p.override_breaker, "circuit breaker")
    action = "slurm.node.drain" if state == "DRAIN" else "slurm.node.down"
    with _holds_locked(run):
        read_at, ns, nodes, current, me = _read_holds(run, p.nodes)
        tag = OwnerTag(me, run.via)
        # An approved request's act names its approver in the reason too (the tag is the requester's).
        text = p.reason if run.approved_by is None else f"{p.reason} (approved by {sanitize_who(run.approved_by)})"
        plan: dict[str, list[Hold]] = {}
        taken_over: dict[str, list[str]] = {}
        for node in nodes:
            held = current[node.name]
            mine = [h for h in held if h.who == me]
            since = min((h.since for h in mine if h.since is not None), default=read_at)
            new = Hold(node.name, tag.holder, text, since, state, run.execution_id, True)
            others = [h for h in held if h.who != me]
            if p.force and others:
                # Taking over: the others' holds go (today's force), yours is the only one.
                taken_over[node.name] = [h.holder for h in others]
                plan[node.name] = [new]
            elif mine:  # a new reason for your hold: it keeps its place and its start
                first = held.index(mine[0])
                plan[node.name] = [new if i == first else h for i, h in enumerate(held) if h.who != me or i == first]
            else:
                plan[node.name] = [*held, new]
        breaker = _breaker(run, p, ns, action)
        reason = tag_reason(text, who=run.principal, via=run.via)
        reasons = {name: join_reason([h.part() for h in holds]) for name, holds in plan.items()}
        with_others = {name: [h.holder for h in holds if h.holder != tag.holder]
                       for name, holds in plan.items() if len(holds) > 1}
        verb = "drain" if state == "DRAIN" else "down"
        result: dict[str, Any] = {"nodes": str(ns), "state": state, "reason": reason,
                                  "taken_over": [n.name for n in nodes if n.name in taken_over], "owner": tag.holder}
        if with_others:
            result["held_with"] = with_others
        if breaker is not None:
            result["breaker"] = breaker
        if run.dry_run:
            run.stdout.append(f"dry run: would {verb} {ns} with reason {reason!r}")
            for name, holders in with_others.items():
                run.stdout.append(f"dry run: {name} is also held by {', '.join(holders)}: reason {reasons[name]!r}")
            return {**result, "dry_run": True}
        groups: dict[str, list[str]] = {}
        for name, text in reasons.items():
            groups.setdefault(text, []).append(name)
        past = "drained" if state == "DRAIN" else "down"
        act = run.client.drain if state == "DRAIN" else run.client.down

        def call() -> None:
            # One Slurm call per distinct reason: every node without other holders in one.
            refused: SlurmRequestError | None = None
            for text, names in groups.items():
                try:
                    act(NodeSet(names), reason=text)
                except SlurmRequestError as exc:
                    refused = exc
            if refused is not None:
                raise refused

        def done(node: Node) -> str | None:
            reached = NodeFlag.DRAIN in node.flags if state == "DRAIN" else node.state is NodeState.DOWN
            named = {part.holder for part in split_reason(node.reason)}
            return past if reached and tag.holder in named else None

        after, outcome, complaint = _act_per_node(run, ns, ns, call, done)
        if run.holds is not None and outcome.get(past):
            run.holds.replace({name: plan[name] for name in outcome[past]})
    run.stdout.append(f"{verb}: {outcome.get(past) or 'no node'} ({reason})")
    for name, holders in with_others.items():
        run.stdout.append(f"{name} is also held by {', '.join(holders)}")
    if "unchanged" in outcome:
        run.stdout.append(f"unchanged: {outcome['unchanged']}")
    if complaint is not None:
        run.stdout.append(f"Slurm said: {complaint}")
    return {**result, "outcome": {k: str(v) for k, v in outcome.items()},
            "states": {n.name: n.state_text for n in after}}


def _act_per_node(run: Run, acted: NodeSet, read: NodeSet, call: Callable[[], None],
                  done: Callable[[Node], str | None]) -> tuple[list[Node], dict[str, NodeSet], str | None]:
    """Make one Slurm call on ``acted``, read ``read`` again and say per node what happened.

    ``done`` names what happened to a node that reached the wanted state (``None``: it did
    not, it is ``unchanged``). Fills ``run.after`` (each acted node with its ``outcome``)
    and ``run.partial``. Returns the nodes read, the nodes of each outcome and what Slurm
    complained about, if it did; raises Slurm's refusal when the call changed no node.
    """
    refusal: SlurmRequestError | None = None
    try:
        call()
    except SlurmRequestError as exc:  # Slurm may have changed some nodes before refusing
        refusal = exc
    after = run.client.nodes(read)
    run.after = node_snapshot(after)
    names: dict[str, list[str]] = {}
    for node in after:
        if node.name in acted:
            what = done(node) or "unchanged"
            names.setdefault(what, []).append(node.name)
            run.after[node.name]["outcome"] = what
    outcome = {what: NodeSet(nodes) for what, nodes in sorted(names.items())}
    reached = [what for what in outcome if what != "unchanged"]
    if refusal is not None and not reached:
        raise refusal
    if refusal is not None or "unchanged" in outcome:
        parts = [f"{what}: {outcome[what]}" for what in outcome]
        slurm = f"; Slurm said: {refusal.message}" if refusal is not None else ""
        run.partial = f"{', '.join(parts)}{slurm}"
    return after, outcome, refusal.message if refusal is not None else None


@action("slurm.node.drain", NodeDrainParams, mutating=True, permission="operate")
def node_drain(run: Run, p: NodeDrainParams) -> dict[str, Any]:
    """Drain nodes: your hold (a reason with slurmtower's owner tag) beside any other owner's."""
    return _set_out(run, p, "DRAIN")


@action("slurm.node.down", NodeDownParams, mutating=True, permission="operate")
def node_down(run: Run, p: NodeDownParams) -> dict[str, Any]:
    """Set nodes down: your hold (a reason with slurmtower's owner tag) beside any other owner's."""
    return _set_out(run, p, "DOWN")


@action("slurm.node.resume", NodeResumeParams, mutating=True, permission="operate")
def node_resume(run: Run, p: NodeResumeParams) -> dict[str, Any]:
    """Release your holds of nodes; a node resumes when no hold is left (force=true releases all)."""
    with _holds_locked(run):
        _read_at, ns, nodes, current, me = _read_holds(run, p.nodes)
        held = [n for n in nodes if holds_node(n)]
        resume: list[Node] = []
        keep: dict[str, list[Hold]] = {}
        released: dict[str, list[str]] = {}
        others: dict[str, list[Hold]] = {}
        forced: list[str] = []
        for node in held:
            holds = current[node.name]
            mine = [h for h in holds if h.who == me]
            rest = [h for h in holds if h.who != me]
            if p.force:
                resume.append(node)
                released[node.name] = [h.holder for h in holds]
                if rest:
                    forced.append(node.name)
            elif not mine:
                others[node.name] = holds
            elif rest:
                keep[node.name] = rest
                released[node.name] = [h.holder for h in mine]
            else:
                resume.append(node)
                released[node.name] = [h.holder for h in mine]
        if others:
            raise _refuse(others, "resumed")
        to_resume = NodeSet([n.name for n in resume])
        to_keep = NodeSet(list(keep))
        skipped = ns - to_resume - to_keep
        result: dict[str, Any] = {"nodes": str(to_resume), "skipped": str(skipped) or None, "forced": forced}
        if released:
            result["released"] = released
        if keep:
            # Your hold is gone, the others' stay: the node stays out of service (drained or down).
            result["still_held"] = {name: [h.as_dict() for h in holds] for name, holds in keep.items()}
            result["stays_out"] = str(to_keep)
        if skipped:
            run.stdout.append(f"not drained or down, left alone: {skipped}")
        if not to_resume and not to_keep:
            run.after = run.before
            run.stdout.append("nothing to resume")
            return result
        if run.dry_run:
            if to_resume:
                run.stdout.append(f"dry run: would resume {to_resume}")
            for name, holds in keep.items():
                run.stdout.append(f"dry run: would release your hold of {name}; it stays out of service, "
                                  f"held by {_describe(holds)}")
            return {**result, "dry_run": True}
        rewrite: dict[str, list[str]] = {}
        for name, holds in keep.items():
            rewrite.setdefault(join_reason([h.part() for h in holds]), []).append(name)
        mine_tags = {name: set(holders) for name, holders in released.items()}

        def call() -> None:
            refused: SlurmRequestError | None = None
            if to_resume:
                try:
                    run.client.resume(to_resume)
                except SlurmRequestError as exc:
                    refused = exc
            for text, names in rewrite.items():  # the reason names the holds left, the state stays
                try:
                    run.client.update_nodes(NodeSet(names), reason=text)
                except SlurmRequestError as exc:
                    refused = exc
            if refused is not None:
                raise refused

        def done(node: Node) -> str | None:
            if node.name in keep:
                named = {part.holder for part in split_reason(node.reason)}
                return "still_held" if holds_node(node) and not named & mine_tags[node.name] else None
            if holds_node(node):
                return None
            # Slurm clears DRAIN/FAIL first, then refuses to set a state for a node that never
            # registered (base state UNKNOWN): it takes jobs once its slurmd registers.
            return "drain_cleared" if node.state is NodeState.UNKNOWN else "resumed"

        after, outcome, complaint = _act_per_node(run, to_resume | to_keep, ns, call, done)
        if run.holds is not None:
            gone: dict[str, list[Hold]] = {}
            for what, names in outcome.items():
                if what in ("resumed", "drain_cleared"):
                    gone.update({name: [] for name in names})
                elif what == "still_held":
                    gone.update({name: keep[name] for name in names})
            run.holds.replace(gone)
    # Resuming sets NOT_RESPONDING until slurmd registers again: only the state before tells
    # whose slurmd was not answering (or never registered: UNKNOWN, flagged only once a ping
    # has failed).
    silent = NodeSet([n.name for n in resume if NodeFlag.NOT_RESPONDING in n.flags or n.state is NodeState.UNKNOWN])
    for what, names in outcome.items():
        run.stdout.append(f"{what.replace('_', ' ')}: {names}")
    for name, holds in keep.items():
        if name in outcome.get("still_held", NodeSet()):
            run.stdout.append(f"{name} stays out of service: still held by {_describe(holds)}")
    if silent:
        run.stdout.append(f"not responding before the resume (in service once their slurmd registers): {silent}")
    if complaint is not None:
        run.stdout.append(f"Slurm said: {complaint}")
    return {**result, "outcome": {k: str(v) for k, v in outcome.items()}, "not_responding": str(silent) or None,
            "states": {n.name: n.state_text for n in after}}


_NODE_ATTR = {"available_features": "features", "cpu_bind": None}


def _update_snapshot(nodes: list[Node], keys: Sequence[str]) -> dict[str, Any]:
    snap = node_snapshot(nodes)
    for node in nodes:
        for key in keys:
            attr = _NODE_ATTR.get(key, key)
            if attr is not None:
                snap[node.name][key] = getattr(node, attr, None)
    return snap


@action("slurm.node.update", NodeUpdateParams, mutating=True, permission="operate")
def node_update(run: Run, p: NodeUpdateParams) -> dict[str, Any]:
    """Update node fields Slurm can update (features, weight, comment, extra, gres ...)."""
    ns, nodes = _existing(run, p.nodes)
    run.before = _update_snapshot(nodes, list(p.infos))
    if run.dry_run:
        run.stdout.append(f"dry run: would update {ns}: {p.infos}")
        return {"nodes": str(ns), "infos": p.infos, "dry_run": True}
    run.client.update_nodes(ns, **p.infos)
    run.after = _update_snapshot(run.client.nodes(ns), list(p.infos))
    return {"nodes": str(ns), "infos": p.infos}


# -- reservations -----------------------------------------------------------------------------


_reservation = find_reservation
_resv_snapshot = reservation_snapshot


@action("slurm.node.reserve", NodeReserveParams, mutating=True, permission="operate")
def node_reserve(run: Run, p: NodeReserveParams) -> dict[str, Any]:
    """Add nodes to a reservation, creating it when needed (default: infinite, root, MAINT)."""
    ns, nodes = _existing(run, p.nodes)
    resv = _reservation(run, p.reservation_name)
    run.before = {**_resv_snapshot(resv), "nodes": node_snapshot(nodes)}
    current = NodeSet(resv.nodes) if resv is not None and resv.nodes else NodeSet()
    wanted = current | ns
    result: dict[str, Any] = {"reservation": p.reservation_name, "created": resv is None, "nodes": str(wanted)}
    if resv is not None and wanted == current:
        run.after = run.before
        run.stdout.append(f"{ns} already in reservation {p.reservation_name}")
        return {**result, "changed": False}
    if run.dry_run:
        how = "update" if resv is not None else "create"
        run.stdout.append(f"dry run: would {how} reservation {p.reservation_name} with nodes {wanted}")
        return {**result, "dry_run": True}
    if resv is None:
        run.client.create_reservation(
            p.reservation_name,
            nodes=ns,
            start_time=p.props.start_time or "now",
            duration=timedelta(minutes=p.props.duration) if p.props.duration else None,
            users=p.props.users,
            flags=p.props.flags,
        )
        remember_owner(run, p.reservation_name, None)
    else:
        # 22.05 has no nodes+=: hand Slurm the full list.
        run.client.update_reservation(p.reservation_name, nodes=wanted)
        run.stdout.append("existing reservation: props left unchanged, nodes added")
    after = _reservation(run, p.reservation_name)
    run.after = {**_resv_snapshot(after), "nodes": node_snapshot(run.client.nodes(ns))}
    return {**result, "changed": True}


@action("slurm.node.unreserve", NodeUnreserveParams, mutating=True, permission="operate")
def node_unreserve(run: Run, p: NodeUnreserveParams) -> dict[str, Any]:
    """Remove nodes from a reservation; delete the reservation when it becomes empty."""
    ns, nodes = _existing(run, p.nodes)
    resv = _reservation(run, p.reservation_name)
    if resv is None:
        raise NotFound(f"unknown reservation {p.reservation_name!r}", param="reservation_name")
    run.before = {**_resv_snapshot(resv), "nodes": node_snapshot(nodes)}
    current = NodeSet(resv.nodes) if resv.nodes else NodeSet()
    remaining = current - ns
    result: dict[str, Any] = {"reservation": p.reservation_name, "removed": str(current & ns) or None,
                              "not_in_reservation": str(ns - current) or None,
                              "remaining": str(remaining) or None, "deleted": not remaining}
    if remaining == current:
        run.after = run.before
        run.stdout.append(f"{ns} not in reservation {p.reservation_name}: nothing to do")
        return {**result, "deleted": False, "changed": False}
    if run.dry_run:
        what = "delete" if not remaining else f"set nodes {remaining} on"
        run.stdout.append(f"dry run: would {what} reservation {p.reservation_name}")
        return {**result, "dry_run": True}
    if remaining:
        run.client.update_reservation(p.reservation_name, nodes=remaining)
    else:
        run.client.delete_reservation(p.reservation_name)
        forget_owner(run, p.reservation_name)
    run.after = {**_resv_snapshot(_reservation(run, p.reservation_name)),
                 "nodes": node_snapshot(run.client.nodes(ns))}
    return {**result, "changed": True}


# -- triggers ---------------------------------------------------------------------------------


def _trigger_snapshot(run: Run) -> dict[str, Any]:
    return {"triggers": [t.model_dump(mode="json") for t in run.client.triggers()]}


@action("slurm.trigger.set", TriggerSetParams, mutating=True, permission="admin")
def trigger_set(run: Run, p: TriggerSetParams) -> int | dict[str, Any]:
    """Set a Slurm trigger (strigger) on a node event or a job's end; returns the trigger id."""
    nodes: NodeSet | None = None
    if p.jobid is not None:
        if p.event is not None:
            raise InvalidInput("event is for node triggers; with jobid use fini=true (or false: at the time "
                               "limit)", param="event")
        if p.nodes is not None:
            raise InvalidInput("nodes cannot be combined with jobid", param="nodes")
        event = "fini" if p.fini else "time"
        if not run.client.job_ids(job_ids=[p.jobid]):
            raise NotFound(f"unknown job id {p.jobid}", param="jobid")
    else:
        if p.fini:
            raise InvalidInput("fini needs a jobid", param="fini")
        if p.event is None:
            raise InvalidInput("event is required for a node trigger (or give jobid)", param="event")
        event = p.event
        if p.nodes is not None:
            if event in {"reconfig", "burst_buffer"}:
                raise InvalidInput(f"event {event!r} does not take nodes", param="nodes")
            nodes, _found = _existing(run, p.nodes)
    run.before = _trigger_snapshot(run)
    spec = {"event": event, "program": p.program, "nodes": str(nodes) if nodes else None,
            "jobid": p.jobid, "offset": p.offset}
    if run.dry_run:
        run.stdout.append(f"dry run: would set trigger {spec}")
        return {"dry_run": True, "trigger": spec}
    trigger_id = run.client.set_trigger(event=event, program=p.program, nodes=nodes, job_id=p.jobid,
                                        offset=p.offset)
    run.after = _trigger_snapshot(run)
    run.stdout.append(f"trigger {trigger_id} set")
    return trigger_id


@action("slurm.trigger.unset", TriggerUnsetParams, mutating=True, permission="admin")
def trigger_unset(run: Run, p: TriggerUnsetParams) -> dict[str, Any]:
    """Clear Slurm triggers by id (user defaults to slurm)."""
    triggers = {t.trigger_id: t for t in run.client.triggers()}
    run.before = {"triggers": [t.model_dump(mode="json") for t in triggers.values()]}
    unknown = [i for i in p.trigger_ids if i not in triggers]
    if unknown:
        raise NotFound(f"unknown trigger id(s): {', '.join(map(str, unknown))}", param="trigger_ids")
    foreign = [i for i in p.trigger_ids if triggers[i].user != p.user]
    if foreign:
        raise InvalidInput("; ".join(f"trigger {i} belongs to {triggers[i].user}, not {p.user}" for i in foreign),
                           param="user")
    if run.dry_run:
        run.stdout.append(f"dry run: would clear triggers {p.trigger_ids}")
        return {"trigger_ids": p.trigger_ids, "dry_run": True}
    run.client.clear_triggers(p.trigger_ids, user=p.user)
    run.after = _trigger_snapshot(run)
    return {"trigger_ids": p.trigger_ids, "cleared": True}
