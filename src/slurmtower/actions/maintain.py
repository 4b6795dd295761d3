"""``slurm.node.maintain``: maintenance of a node end to end, one step after the other.

drain -> MAINT reservation -> wait until the node runs no job (or a timeout) -> an optional
check (a program run by slurmtower, or the same command as a Slurm job on the node inside the
reservation) -> resume when the check passes (or when there is none), else the node stays
drained with the check's output in its reason.

Every step that changes Slurm is an action of its own (``slurm.node.drain``,
``slurm.node.reserve``, ``slurm.node.unreserve``, ``slurm.node.resume``), run through the
catalogue as the principal who asked for the maintenance, so each has its execution and
audit record; every step is also an event ``slurmtower.maintain.<step>`` in the event store
(``payload.run`` names the maintenance run). The events are the workflow's state: a run
whose last event is not ``finished`` goes on where it was, in whichever process leads the
``archiver`` role (:func:`Maintenance.advance`, a declared background task), after a restart
too. ``dry_run`` returns the plan and changes nothing.
"""

from __future__ import annotations

import logging
import shlex
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from slurmtower.actions.params import (
    REASON_PATTERN,
    RESV_NAME,
    NodeSetText,
    _Mutating,
    _reason,
    _resv_name,
    check_program,
)
from slurmtower.actions.registry import Run, action
from slurmtower.errors import InvalidInput, SlurmTimeout, SlurmtowerError, SlurmUnavailable
from slurmtower.models import JobState, NodeState
from slurmtower.models.event import Event
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.runner import CommandRunner

__all__ = ["EVENT_PREFIX", "TYPES", "Maintenance", "NodeMaintainParams"]

log = logging.getLogger(__name__)

EVENT_PREFIX = "slurmtower.maintain."
STEPS = ("started", "drained", "reserved", "idle", "check_started", "check_passed", "check_failed", "resumed",
         "still_held", "kept_drained", "timed_out", "failed", "finished")
TYPES = tuple(EVENT_PREFIX + s for s in STEPS)
#: How far back unfinished runs are looked for (a run waits at most its idle timeout plus its
#: check timeout, each at most 7 days).
HORIZON = timedelta(days=15)
_OUTPUT_MAX = 160
#: Seconds a run may stay at ``started`` or ``drained`` before :meth:`Maintenance.advance`
#: takes it for one a restart interrupted: ``start()`` drains and reserves in turn (each a
#: Slurm command of at most ``slurm.command_timeout``, 30 s), and a background round running
#: meanwhile must not reserve a second time.
START_GRACE = 90.0


#: A check command line the document offers: plain path names and arguments shlex reads as they are.
_CHECK = r"^(?:/[A-Za-z0-9_-][A-Za-z0-9_.-]*)+(?: [A-Za-z0-9_.,:=@%+/{} -]*)?$"


class NodeMaintainParams(_Mutating):
    # check_as_job needs a check; wait is the CLI's (the HTTP API's document leaves it out).
    model_config = ConfigDict(json_schema_extra={
        "if": {"required": ["check_as_job"], "properties": {"check_as_job": {"const": True}}},
        "then": {"required": ["check"], "properties": {"check": {"type": "string"}}}})

    nodes: NodeSetText = Field(description="Nodes to maintain (one maintenance run each).")
    reason: str = Field(default="maintenance", description="Why; the drain reason (with slurmtower's owner tag).",
                        json_schema_extra={"pattern": REASON_PATTERN})
    reservation_name: str | None = Field(default=None, description="The MAINT reservation to put each node in "
                                         "(default maint_<node>); created, and deleted at the end.",
                                         json_schema_extra={"anyOf": [{"type": "string", "pattern": RESV_NAME},
                                                                      {"type": "null"}]})
    idle_timeout: int = Field(default=3600, ge=0, le=7 * 86400, description="Seconds to wait for the node's "
                              "jobs to end; after that the node stays drained (outcome timed_out).")
    check: str | None = Field(default=None, max_length=1000, description="A check program and its arguments "
                              "({node} is replaced by the node name, else the name is the last argument); "
                              "exit 0 passes. From the API and rules it must be in auth.trigger_program_allowlist.",
                              # A part of what the validator takes (plain path names); beyond it,
                              # the allowlist refuses anyway (403) unless it names the program.
                              json_schema_extra={"anyOf": [
                                  {"type": "string", "pattern": _CHECK},
                                  {"type": "null"}]})
    check_as_job: bool = Field(default=False, description="Run the check as a Slurm job (sbatch) on the node, "
                               "inside the reservation, instead of on slurmtower's host.")
    check_timeout: int = Field(default=600, ge=1, le=7 * 86400, description="Seconds the check may take.")
    wait: bool = Field(default=False, description="CLI only: stay until every run has finished (else the "
                       "service's maintenance task moves them on; follow slurmtower.maintain.* events).",
                       json_schema_extra={"x-slurmtower-cli-only": True})
    _check_reason = field_validator("reason")(_reason)

    @field_validator("reservation_name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _resv_name(value)

    @model_validator(mode="after")
    def _check_for_the_job(self) -> NodeMaintainParams:
        if self.check_as_job and not self.check:
            raise ValueError("check_as_job needs a check")
        return self

    @field_validator("check")
    @classmethod
    def _check(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"check does not parse as a command line: {exc}") from None
        if not argv or not argv[0].startswith("/"):
            raise ValueError("check must start with an absolute program path")
        return value


def _argv(check: str, node: str) -> list[str]:
    argv = shlex.split(check)
    if any("{node}" in a for a in argv):
        return [a.replace("{node}", node) for a in argv]
    return [*argv, node]


def plan(node: str, p: NodeMaintainParams) -> list[str]:
    """The steps a run of ``node`` will take, in words."""
    resv = p.reservation_name or f"maint_{node}"
    steps = [f"drain {node} ({p.reason!r})", f"put {node} in reservation {resv} (MAINT, IGNORE_JOBS)",
             f"wait until {node} runs no job (at most {p.idle_timeout} s; then it stays drained)"]
    if p.check:
        where = f"as a Slurm job on {node} in {resv}" if p.check_as_job else "on slurmtower's host"
        steps.append(f"run the check {shlex.join(_argv(p.check, node))} {where} (at most {p.check_timeout} s)")
        steps.append(f"check passes: remove {node} from {resv} and resume it; fails: it stays drained with "
                     "the check's output in its reason")
    else:
        steps.append(f"remove {node} from {resv} and resume it")
    return steps


#: How a run ends when its node did not come back through it (an error, a failed check, jobs
#: that outlived ``idle_timeout``): an execution that waited for them ends failed or partial.
FAILED_OUTCOMES = frozenset({"failed", "check_failed", "timed_out"})


@action("slurm.node.maintain", NodeMaintainParams, mutating=True, permission="operate")
def node_maintain(run: Run, p: NodeMaintainParams) -> dict[str, Any]:
    """Maintain nodes: drain, MAINT reservation, wait until idle, check, resume or keep drained."""
    ns = NodeSet(p.nodes)
    nodes = run.client.nodes(ns)  # NotFound for an unknown name, before anything changes
    run.nodes = str(ns)
    plans = {n.name: plan(n.name, p) for n in nodes}
    if p.check and run.via in ("api", "rule"):

        program = shlex.split(p.check)[0]
        check_program(run.settings, program, shown=program, what="check program", param="check")
    if p.wait and run.via != "cli":
        raise InvalidInput("wait is for the CLI: over HTTP and in rules follow the slurmtower.maintain.* events",
                           param="wait")
    if run.dry_run:
        for node, steps in plans.items():
            run.stdout.append(f"dry run: {node}: " + "; ".join(steps))
        return {"nodes": str(ns), "plan": plans, "dry_run": True}
    if run.settings is None:
        raise InvalidInput("slurm.node.maintain needs slurmtower's store (settings)", param="nodes")
    maintenance = Maintenance.from_settings(run.settings, catalogue=run.catalogue)
    try:
        started = {n.name: maintenance.start(n.name, p, principal=run.principal, via=run.via) for n in nodes}
        maintenance.advance()  # an idle node goes on at once
        states = maintenance.states(started)
        interval = run.settings.actions.maintenance_interval
        while p.wait and not all(st.finished for st in states.values()):
            time.sleep(interval)
            maintenance.advance()
            states = maintenance.states(started)
    finally:
        maintenance.close()
    for node, st in states.items():
        run.stdout.append(f"{node}: maintenance {st.run_id}: {st.last}")
    failed = [node for node, st in states.items() if st.finished and st.outcome in FAILED_OUTCOMES]
    if failed:
        why = f"maintenance failed on {NodeSet(failed)} (see each run's slurmtower.maintain.* events)"
        if len(failed) == len(states):
            run.failed = why
        else:
            run.partial = why
    return {"nodes": str(ns), "plan": plans,
            "runs": {node: {"run": st.run_id, "step": st.last, "outcome": st.outcome} for node, st in states.items()}}


@dataclass
class RunState:
    """One maintenance run as its events tell it."""

    run_id: str
    node: str
    params: dict[str, Any]
    principal: str
    via: str
    started_at: datetime
    steps: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    last_at: datetime | None = None
    """When its last step was recorded."""

    @property
    def last(self) -> str:
        return self.steps[-1] if self.steps else "started"

    @property
    def finished(self) -> bool:
        return "finished" in self.steps

    @property
    def outcome(self) -> str | None:
        return self.data.get("outcome")

    @property
    def reservation(self) -> str:
        return str(self.params.get("reservation_name") or f"maint_{self.node}")


class Maintenance:
    """Starts maintenance runs and moves them on (``advance``), from their events."""

    def __init__(self, catalogue: Any, events: Any, *, state_dir: Path | None = None, close: bool = False,
                 close_catalogue: bool | None = None) -> None:
        """``catalogue`` runs the steps (drain, reserve, resume ...); ``close``: :meth:`close`
        closes the event store, and the catalogue's store too unless ``close_catalogue`` is False."""
        self.catalogue = catalogue
        self.events = events
        self.state_dir = state_dir
        self._close_events = close
        self._close_catalogue = close if close_catalogue is None else close_catalogue

    @classmethod
    def from_settings(cls, settings: Any, *, catalogue: Any) -> Maintenance:
        """Maintenance through ``catalogue`` on the settings' event store (closed by :meth:`close`)."""
        from slurmtower.events.store import EventStore  # deferred: SQLAlchemy, maintenance only

        events = EventStore(settings.effective_store_url()).scoped(settings.cluster_key())
        return cls(catalogue, events, state_dir=settings.state_dir, close=True, close_catalogue=False)

    def close(self) -> None:
        if self._close_catalogue:
            self.catalogue.close()
        if self._close_events:
            self.events.close()

    # -- events ---------------------------------------------------------------------------------
    def _record(self, state: RunState, step: str, **data: Any) -> None:
        payload = {"run": state.run_id, "step": step, **data}
        self.events.append([Event(type=EVENT_PREFIX + step, time=datetime.now(UTC), source="maintain",
                                  node=state.node, payload=payload)])
        state.steps.append(step)
        state.data.update(data)

    def runs(self) -> dict[str, RunState]:
        """Every run of the horizon, rebuilt from its events (oldest first)."""
        # the newest 10,000 steps (the store's page limit), oldest first
        found = self.events.query(types=list(TYPES), start=datetime.now(UTC) - HORIZON, limit=10_000, own=True,
                                  descending=True)[::-1]
        runs: dict[str, RunState] = {}
        for ev in found:
            p = ev.payload
            run_id = str(p.get("run") or "")
            if ev.type == EVENT_PREFIX + "started":
                runs[run_id] = RunState(run_id=run_id, node=ev.node or "", params=dict(p.get("params") or {}),
                                        principal=str(p.get("principal")), via=str(p.get("via")),
                                        started_at=ev.time, steps=["started"], last_at=ev.time)
            elif run_id in runs:
                runs[run_id].steps.append(str(p.get("step")))
                runs[run_id].last_at = ev.time
                runs[run_id].data.update({k: v for k, v in p.items() if k not in ("run", "step")})
        return runs

    def state(self, run_id: str) -> RunState:
        return self.runs()[run_id]

    def states(self, run_ids: dict[str, str]) -> dict[str, RunState]:
        """``{key: run id}`` -> ``{key: its state}``, from one read of the events."""
        runs = self.runs()
        return {key: runs[run_id] for key, run_id in run_ids.items()}

    # -- steps ----------------------------------------------------------------------------------
    def _act(self, state: RunState, name: str, params: dict[str, Any]) -> tuple[bool, str]:
        """Run one action as the run's principal: (succeeded, its execution id or the error)."""
        ok, ref, _result = self._act_result(state, name, params)
        return ok, ref

    def _act_result(self, state: RunState, name: str, params: dict[str, Any]) -> tuple[bool, str, Any]:
        try:
            env = self.catalogue.execute(name, params, principal=state.principal, via=state.via)
        except SlurmtowerError as exc:
            return False, exc.message, None
        if env.status == "succeeded":
            return True, env.execution_id, env.result
        return False, f"{name} {env.status}: {env.stderr or env.execution_id}", env.result

    def start(self, node: str, p: NodeMaintainParams, *, principal: str, via: str) -> str:
        """Record the run, drain the node and reserve it; returns the run id."""
        params = p.model_dump(mode="json", exclude={"dry_run", "nodes"})
        state = RunState(run_id=uuid.uuid4().hex[:12], node=node, params=params, principal=principal, via=via,
                         started_at=datetime.now(UTC))
        self._record(state, "started", params=params, principal=principal, via=via, plan=plan(node, p))
        state.steps = ["started"]
        ok, ref = self._act(state, "slurm.node.drain",
                            {"nodes": node, "reason": f"{p.reason} (maintenance {state.run_id})"})
        if not ok:
            self._finish(state, "failed", error=ref)
            return state.run_id
        self._record(state, "drained", execution_id=ref)
        ok, ref = self._act(state, "slurm.node.reserve", {"nodes": node, "reservation_name": state.reservation,
                                                          "props": {"flags": ["MAINT", "IGNORE_JOBS"]}})
        if not ok:
            self._finish(state, "failed", error=ref)
            return state.run_id
        self._record(state, "reserved", execution_id=ref, reservation=state.reservation)
        return state.run_id

    def _finish(self, state: RunState, outcome: str, **data: Any) -> None:
        if outcome == "failed":
            self._record(state, "failed", **data)
        self._record(state, "finished", outcome=outcome)

    def _release_reservation(self, state: RunState) -> None:
        ok, ref = self._act(state, "slurm.node.unreserve", {"nodes": state.node,
                                                            "reservation_name": state.reservation})
        if not ok:
            log.warning("maintenance %s: could not take %s out of %s: %s", state.run_id, state.node,
                        state.reservation, ref)

    def _keep_drained(self, state: RunState, why: str, outcome: str) -> None:
        ok, ref = self._act(state, "slurm.node.drain", {"nodes": state.node, "reason": why[:200]})
        self._record(state, "kept_drained", reason=why[:200], execution_id=ref if ok else None,
                     error=None if ok else ref)
        self._release_reservation(state)
        self._finish(state, outcome)

    def _resume(self, state: RunState, outcome: str) -> None:
        self._release_reservation(state)
        ok, ref, result = self._act_result(state, "slurm.node.resume", {"nodes": state.node})
        if not ok:
            self._finish(state, "failed", error=ref)
        elif isinstance(result, dict) and result.get("stays_out"):
            # the run's hold is released, another owner's is not: the node stays out for them
            held = (result.get("still_held") or {}).get(state.node) or []
            self._record(state, "still_held", execution_id=ref, holders=[h.get("holder") for h in held])
            self._finish(state, "still_held")
        else:
            self._record(state, "resumed", execution_id=ref)
            self._finish(state, outcome)

    def _idle(self, node: str) -> bool:
        found = self.catalogue.client.nodes(NodeSet(node))
        if not found:
            return False
        n = found[0]
        return (n.alloc_cpus or 0) == 0 and n.state not in (NodeState.ALLOCATED, NodeState.MIXED) and \
            "COMPLETING" not in n.flags

    def advance(self, now: datetime | None = None) -> int:
        """Move every unfinished run on by what can be done now; returns how many moved."""
        now = now or datetime.now(UTC)
        moved = 0
        for state in self.runs().values():
            if state.finished:
                continue
            try:
                before = len(state.steps)
                self._advance(state, now)
                moved += len(state.steps) > before
            except SlurmtowerError as exc:  # Slurm unreachable: the next round tries again
                log.warning("maintenance %s of %s: %s", state.run_id, state.node, exc.message)
        return moved

    def _advance(self, state: RunState, now: datetime) -> None:
        p = state.params
        last = state.last
        if last in ("started", "drained"):
            if state.last_at is not None and (now - state.last_at).total_seconds() < START_GRACE:
                return  # start() may be between its steps right now (here or in another process)
            # a restart between the steps of start(): the drain or the reservation again
            # (both are idempotent for the same owner and reservation)
            ok, ref = self._act(state, "slurm.node.drain", {"nodes": state.node,
                                                             "reason": f"{p['reason']} (maintenance {state.run_id})"})
            if not ok:
                self._finish(state, "failed", error=ref)
                return
            ok, ref = self._act(state, "slurm.node.reserve", {"nodes": state.node,
                                                              "reservation_name": state.reservation,
                                                              "props": {"flags": ["MAINT", "IGNORE_JOBS"]}})
            if not ok:
                self._finish(state, "failed", error=ref)
                return
            self._record(state, "reserved", execution_id=ref, reservation=state.reservation)
            last = "reserved"
        if last == "reserved":
            if not self._idle(state.node):
                waited = (now - state.started_at).total_seconds()
                if waited >= int(p["idle_timeout"]):
                    self._record(state, "timed_out", waited_s=round(waited))
                    self._keep_drained(state, f"maintenance {state.run_id}: jobs still running after "
                                       f"{int(p['idle_timeout'])} s", "timed_out")
                return
            self._record(state, "idle")
            last = "idle"
        if last == "idle":
            if not p.get("check"):
                self._resume(state, "resumed")
                return
            self._start_check(state)
            last = state.last
        if last == "check_started":
            self._poll_check(state, now)

    def _start_check(self, state: RunState) -> None:
        p = state.params
        argv = _argv(str(p["check"]), state.node)
        if not p.get("check_as_job"):
            try:
                # Every subprocess goes through the runner (its timeout, argv only, cwd /); the
                # check's own runner: a check program is no Slurm call in the metrics.
                proc = CommandRunner().run(argv, timeout=int(p["check_timeout"]), input="", check=False)
            except SlurmTimeout:
                self._record(state, "check_started", argv=argv, where="host")
                self._check_done(state, False, f"check timed out after {p['check_timeout']} s", None)
                return
            except SlurmUnavailable:
                self._record(state, "check_started", argv=argv, where="host")
                self._check_done(state, False, "check could not run: No such file or directory", None)
                return
            except OSError as exc:
                self._record(state, "check_started", argv=argv, where="host")
                self._check_done(state, False, f"check could not run: {exc.strerror}", None)
                return
            self._record(state, "check_started", argv=argv, where="host")
            self._check_done(state, proc.returncode == 0, (proc.stdout + proc.stderr).strip(), proc.returncode)
            return
        # A drained node starts no job, not even in its reservation: the drain comes off (the
        # run's own hold), the MAINT reservation keeps every other job away, the check job runs
        # in it; a failed check drains the node again.
        ok, ref = self._act(state, "slurm.node.resume", {"nodes": state.node})
        if not ok:
            self._finish(state, "failed", error=ref)
            return
        out = (self.state_dir or Path("/tmp")) / f"maintain-{state.run_id}.out"  # noqa: S108
        minutes = max(1, -(-int(p["check_timeout"]) // 60))
        job = self.catalogue.client.submit_batch(
            ["-J", f"maintain-{state.run_id}", "-w", state.node, "--reservation", state.reservation,
             "-t", str(minutes), "-o", str(out), "-e", str(out), "-D", "/"], shlex.join(argv))
        self._record(state, "check_started", argv=argv, where="job", job_id=job, output=str(out),
                     resume_execution_id=ref, check_started_at=datetime.now(UTC).isoformat())

    def _poll_check(self, state: RunState, now: datetime) -> None:
        job = state.data.get("job_id")
        if job is None:
            return
        found = self.catalogue.client.jobs([int(job)])
        if found and found[0].state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING):
            began = datetime.fromisoformat(str(state.data.get("check_started_at") or now.isoformat()))
            if (now - began).total_seconds() > int(state.params["check_timeout"]) + 60:
                self.catalogue.client.cancel_jobs([int(job)])
                self._check_done(state, False, f"the check job {job} did not end in "
                                 f"{state.params['check_timeout']} s", None)
            return
        output = ""
        path = Path(str(state.data.get("output") or ""))
        try:
            output = path.read_text(errors="replace").strip()
        except OSError:
            pass
        if not found:
            acct = self.catalogue._get_accounting()
            rows = acct.jobs_by_id([int(job)]).get(int(job), []) if acct is not None else []
            passed = bool(rows) and rows[0].state == "COMPLETED" and rows[0].exit_code == 0
            self._check_done(state, passed, output or (rows[0].state if rows else "the check job is gone"),
                             rows[0].exit_code if rows else None)
            return
        j = found[0]
        code = j.exit_code.return_code if j.exit_code is not None else None
        self._check_done(state, j.state is JobState.COMPLETED and code == 0, output or j.state.value, code)

    def _check_done(self, state: RunState, passed: bool, output: str, code: int | None) -> None:
        first = " ".join(output.split())[:_OUTPUT_MAX]
        if passed:
            self._record(state, "check_passed", exit_code=code, output=first)
            self._resume(state, "resumed")
            return
        self._record(state, "check_failed", exit_code=code, output=first)
        self._keep_drained(state, f"maintenance check failed: {first or f'exit {code}'}", "check_failed")
