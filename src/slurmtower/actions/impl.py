"""The actions of the StackStorm ``slurm`` pack, each over the :class:`SlurmClient`.

Every node action checks that all nodes exist before acting and acts on the whole node set
with one Slurm call. Mutating actions fill ``run.before``/``run.after`` for the audit log
and honour ``dry_run`` by returning what they would do.

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
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from slurmtower.actions.ownership import holds_node, parse_reason, reason_owner, sanitize_who, tag_reason
from slurmtower.actions.params import (
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
from slurmtower.errors import AccountingUnavailable, Conflict, InvalidInput, NotFound, SlurmRequestError
from slurmtower.models import Job, JobState, Node, NodeFlag, NodeState, Reservation, config_key, parse_job_state
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.client import QUEUE_TEXT_FIELDS

__all__ = ["JOB_CRITERIA_SERVER_SIDE"]

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
_ACCT_KEYS = {
    "user": "user", "user_name": "user", "account": "account", "partition": "partition",
    "state": "state", "job_state": "state", "name": "name", "job_name": "name", "job_id": "job_id",
    "array_job_id": "array_job_id", "user_id": "user_id",
}


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _existing(run: Run, nodes: str) -> tuple[NodeSet, list[Node]]:
    ns = NodeSet(nodes)
    found = run.client.nodes(ns)  # raises NotFound naming unknown nodes, before anything runs
    run.nodes = str(ns)
    return ns, found


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
        raise InvalidInput(f"unknown configuration item {p.item!r}{_suggest(key, sorted(items))}", param="item")
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
    from slurmtower.models.accounting import HistoryJob

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
    ids = set(_find_live(run, p.criterias))
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
    for job in run.client.jobs(p.jobids):
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


_STEP_NAMES = {-5: "batch", -4: "extern", -6: "interactive"}


@action("slurm.job.step.get", JobGetParams, mutating=False, permission="read")
def job_step_get(run: Run, p: JobGetParams) -> dict[str, dict[str, Any]]:
    """Get job step details keyed by job id, then step id; finished jobs come from accounting."""
    live = set(run.client.job_ids(job_ids=p.jobids))
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
                key = _STEP_NAMES.get(hstep.step_id, str(hstep.step_id))
                entry.setdefault(key, {**hstep.model_dump(mode="json"), "from_accounting": True})
            result[str(job_id)] = entry
        missing = [j for j in missing if str(j) not in result]
    if missing:
        raise _missing_error(missing, acct is not None)
    return {str(j): result[str(j)] for j in p.jobids}


# -- nodes ------------------------------------------------------------------------------------


@action("slurm.node.get", NodeGetParams, mutating=False, permission="read")
def node_get(run: Run, p: NodeGetParams) -> dict[str, dict[str, Any]]:
    """Get node details keyed by node name, with who holds each node's reason."""
    _ns, nodes = _existing(run, p.nodes)
    return {n.name: {**n.model_dump(mode="json"), "state_text": n.state_text, "reason_owner": reason_owner(n)}
            for n in nodes}


def _held_by_others(run: Run, nodes: list[Node]) -> list[Node]:
    """Nodes out of service by someone else's decision (another tag, or no tag at all)."""
    me = sanitize_who(run.principal)
    others = []
    for node in nodes:
        if not holds_node(node):
            continue
        _text, tag = parse_reason(node.reason)
        if tag is None or tag.who != me:
            others.append(node)
    return others


def _refuse(others: list[Node], verb: str) -> Conflict:
    return Conflict("; ".join(_holder(n) for n in others) + f" — not {verb}; pass force=true to override",
                    holders={n.name: reason_owner(n) for n in others})


def _set_out(run: Run, p: NodeDrainParams | NodeDownParams, state: str) -> dict[str, Any]:
    ns, nodes = _existing(run, p.nodes)
    run.before = node_snapshot(nodes)
    # Re-draining another owner's node would replace their reason and tag, and so let the
    # new owner resume it without force: that takeover needs force too.
    others = _held_by_others(run, nodes)
    if others and not p.force:
        raise _refuse(others, "drained" if state == "DRAIN" else "downed")
    reason = tag_reason(p.reason, who=run.principal, via=run.via)
    verb = "drain" if state == "DRAIN" else "down"
    if run.dry_run:
        run.stdout.append(f"dry run: would {verb} {ns} with reason {reason!r}")
        return {"nodes": str(ns), "state": state, "reason": reason, "dry_run": True}
    tag = parse_reason(reason)[1]
    past = "drained" if state == "DRAIN" else "down"

    def done(node: Node) -> str | None:
        held = NodeFlag.DRAIN in node.flags if state == "DRAIN" else node.state is NodeState.DOWN
        return past if held and parse_reason(node.reason)[1] == tag else None

    act = run.client.drain if state == "DRAIN" else run.client.down
    after, outcome, complaint = _act_per_node(run, ns, ns, lambda: act(ns, reason=reason), done)
    run.stdout.append(f"{verb}: {outcome.get(past) or 'no node'} ({reason})")
    if "unchanged" in outcome:
        run.stdout.append(f"unchanged: {outcome['unchanged']}")
    if complaint is not None:
        run.stdout.append(f"Slurm said: {complaint}")
    return {"nodes": str(ns), "state": state, "reason": reason, "taken_over": [n.name for n in others],
            "owner": f"slurmtower:{sanitize_who(run.principal)}@{run.via}",
            "outcome": {k: str(v) for k, v in outcome.items()},
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
    """Drain nodes with a reason carrying slurmtower's owner tag."""
    return _set_out(run, p, "DRAIN")


@action("slurm.node.down", NodeDownParams, mutating=True, permission="operate")
def node_down(run: Run, p: NodeDownParams) -> dict[str, Any]:
    """Set nodes down with a reason carrying slurmtower's owner tag."""
    return _set_out(run, p, "DOWN")


def _holder(node: Node) -> str:
    owner = reason_owner(node) or "unknown"
    text, _tag = parse_reason(node.reason)
    return f"{node.name} is held by {owner}" + (f" ({text!r})" if text else "")


@action("slurm.node.resume", NodeResumeParams, mutating=True, permission="operate")
def node_resume(run: Run, p: NodeResumeParams) -> dict[str, Any]:
    """Resume drained or down nodes; nodes held by another owner need force=true."""
    ns, nodes = _existing(run, p.nodes)
    run.before = node_snapshot(nodes)
    held = [n for n in nodes if holds_node(n)]
    others = _held_by_others(run, nodes)
    if others and not p.force:
        raise _refuse(others, "resumed")
    to_resume = NodeSet([n.name for n in held])
    skipped = ns - to_resume
    result: dict[str, Any] = {"nodes": str(to_resume), "skipped": str(skipped) or None,
                              "forced": [n.name for n in others]}
    if skipped:
        run.stdout.append(f"not drained or down, left alone: {skipped}")
    if not to_resume:
        run.after = run.before
        run.stdout.append("nothing to resume")
        return result
    if run.dry_run:
        run.stdout.append(f"dry run: would resume {to_resume}")
        return {**result, "dry_run": True}

    def done(node: Node) -> str | None:
        if holds_node(node):
            return None
        # Slurm clears DRAIN/FAIL first, then refuses to set a state for a node that never
        # registered (base state UNKNOWN): it takes jobs once its slurmd registers.
        return "drain_cleared" if node.state is NodeState.UNKNOWN else "resumed"

    after, outcome, complaint = _act_per_node(run, to_resume, ns, lambda: run.client.resume(to_resume), done)
    # Resuming sets NOT_RESPONDING until slurmd registers again: only the state before tells
    # whose slurmd was not answering (or never registered: UNKNOWN, flagged only once a ping
    # has failed).
    silent = NodeSet([n.name for n in held if NodeFlag.NOT_RESPONDING in n.flags or n.state is NodeState.UNKNOWN])
    for what, names in outcome.items():
        run.stdout.append(f"{what.replace('_', ' ')}: {names}")
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


def _reservation(run: Run, name: str) -> Reservation | None:
    return next((r for r in run.client.reservations() if r.name == name), None)


def _resv_snapshot(resv: Reservation | None) -> dict[str, Any]:
    return {"reservation": resv.model_dump(mode="json") if resv is not None else None}


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
