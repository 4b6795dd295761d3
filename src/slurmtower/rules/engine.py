"""The rule engine: match events against rules, run their actions, record every run.

For each event, every enabled rule whose trigger type and criteria match is *run*:

1. **rate limit** - at most ``max_runs`` executed runs in the last ``per_seconds``
   (per rule, or per rule and node), counted from the ``rule_runs`` table, so the limit
   holds across restarts; otherwise the run is recorded as ``skipped_rate_limit``;
2. **cooldown** - no executed run in the last ``cooldown_seconds`` (per rule, or per
   rule and node); otherwise ``skipped_cooldown``;
3. **render** the action's parameters in the sandbox; a failure is ``render_error``;
4. **dispatch** - ``webhook`` and ``command`` run here, any other ref goes to the
   dispatcher (the action catalogue); the envelope decides ``succeeded``/``failed``.

Only ``succeeded`` and ``failed`` runs count toward rate limits and cooldowns. Every
outcome is stored in ``rule_runs`` with the event id and the envelope. Nothing raises
out of :meth:`RuleEngine.process`: a broken action or dispatcher is a ``failed`` run.

:meth:`RuleEngine.process_pending` consumes the event log from a stored cursor, so rules
see every event at least once across restarts; a rule already recorded for an event is
not run again for it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from slurmtower.errors import SlurmtowerError
from slurmtower.events.store import EventStore
from slurmtower.models.event import Event, RuleRun, RuleRunOutcome
from slurmtower.rules.builtin import WebhookOptions, failed_envelope, run_command, run_webhook
from slurmtower.rules.model import Rule
from slurmtower.rules.render import RenderError, make_environment, render_value
from slurmtower.slurm.runner import CommandRunner

__all__ = ["BUILTIN_ACTIONS", "EXECUTED_OUTCOMES", "Dispatcher", "RuleEngine"]

log = logging.getLogger(__name__)

#: ``(action_ref, params, context) -> envelope``: the action catalogue's entry point.
Dispatcher = Callable[[str, dict[str, Any], dict[str, Any]], dict[str, Any]]

BUILTIN_ACTIONS = ("webhook", "command")
EXECUTED_OUTCOMES: tuple[RuleRunOutcome, ...] = ("succeeded", "failed")
DEFAULT_CURSOR = "rules"


class RuleEngine:
    """Runs rules against events.

    Args:
        rules: the loaded rules (:func:`~slurmtower.rules.load_rules`).
        store: where runs are recorded and rate limits counted.
        dispatcher: the action catalogue; ``None`` makes every non-built-in action fail.
        config: exposed to templates as ``config`` (``notify_program``, ``callback_url`` ...);
            put no secrets here.
        webhook: options of the ``webhook`` action (secret, timeouts, retries, transport).
        command_runner: runner of the ``command`` action.
        clock: current time (tests).
    """

    def __init__(
        self,
        rules: Iterable[Rule],
        store: EventStore,
        dispatcher: Dispatcher | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        webhook: WebhookOptions | None = None,
        command_runner: CommandRunner | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._rules = list(rules)
        self._store = store
        self._dispatcher = dispatcher
        self._config = dict(config or {})
        self._webhook = webhook or WebhookOptions()
        self._runner = command_runner
        self._clock = clock or (lambda: datetime.now(UTC))
        self._env = make_environment()

    @property
    def rules(self) -> list[Rule]:
        return list(self._rules)

    def _context(self, event: Event, rule: Rule) -> dict[str, Any]:
        # A deep copy: an action must not be able to change the event other rules see.
        return {
            "trigger": copy.deepcopy(event.payload),
            "event": event.summary(),
            "config": copy.deepcopy(self._config),
            "rule": {"name": rule.name, "description": rule.description},
        }

    def matching_rules(self, event: Event) -> list[Rule]:
        """The enabled rules whose trigger type and criteria match ``event``."""
        context = {"trigger": event.payload, "event": event.summary()}
        return [r for r in self._rules if r.matches(event.type, context)]

    def process(self, event: Event) -> list[RuleRun]:
        """Run every matching rule for ``event``; returns the recorded runs."""
        runs: list[RuleRun] = []
        for rule in self.matching_rules(event):
            if event.id is not None and self._store.rule_runs(rule=rule.name, event_id=event.id, limit=1):
                continue  # already handled before a restart
            try:
                runs.append(self._run(rule, event))
            except Exception:  # the store itself failed; log and go on with other rules
                log.exception("rule %s failed on event %s", rule.name, event.id)
        return runs

    def process_pending(self, *, cursor: str = DEFAULT_CURSOR, batch: int = 500) -> list[RuleRun]:
        """Process the events logged since ``cursor`` (a name in the store), advancing it."""
        runs: list[RuleRun] = []
        # Each cluster's rules run on its own events, through its own catalogue.
        cursor = self._store.cursor_name(cursor)
        last = self._store.get_cursor(cursor)
        while True:
            events = self._store.query(since_id=last, limit=batch, own=True)
            for ev in events:
                runs.extend(self.process(ev))
                assert ev.id is not None
                last = ev.id
                self._store.set_cursor(cursor, last)
            if len(events) < batch:
                return runs

    def _skip_reason(self, rule: Rule, event: Event, now: datetime) -> tuple[RuleRunOutcome, str] | None:
        limit = rule.rate_limit
        if limit is not None:
            node = event.node if limit.per_node else None
            since = now - timedelta(seconds=limit.per_seconds)
            count = self._store.count_rule_runs(rule.name, since=since, outcomes=EXECUTED_OUTCOMES, node=node)
            if count >= limit.max_runs:
                scope = f" for node {node}" if node else ""
                return (
                    "skipped_rate_limit",
                    f"rate limit: {count} runs{scope} in the last {limit.per_seconds:g} s "
                    f"(max {limit.max_runs})",
                )
        if rule.cooldown_seconds is not None:
            node = event.node if rule.cooldown_per_node else None
            last = self._store.last_rule_run_start(rule.name, outcomes=EXECUTED_OUTCOMES, node=node)
            if last is not None and now - last < timedelta(seconds=rule.cooldown_seconds):
                scope = f" for node {node}" if node else ""
                return (
                    "skipped_cooldown",
                    f"cooldown{scope}: last run {(now - last).total_seconds():.1f} s ago "
                    f"(cooldown {rule.cooldown_seconds:g} s)",
                )
        return None

    def _run(self, rule: Rule, event: Event) -> RuleRun:
        started = self._clock()
        ref = rule.action.ref
        outcome: RuleRunOutcome
        skip = self._skip_reason(rule, event, started)
        if skip is not None:
            outcome, why = skip
            envelope: dict[str, Any] = {"status": "skipped", "reason": why}
        else:
            context = self._context(event, rule)
            try:
                params = render_value(rule.action.parameters, context, self._env)
            except RenderError as exc:
                outcome = "render_error"
                envelope = {"status": "failed", "reason": f"rendering parameters failed: {exc}"}
            else:
                envelope = self._dispatch(rule, event, ref, params, context)
                outcome = "succeeded" if envelope.get("status") == "succeeded" else "failed"
        run = RuleRun(
            rule=rule.name,
            event_id=event.id,
            node=event.node,
            action_ref=ref,
            started_at=started,
            ended_at=max(self._clock(), started),
            outcome=outcome,
            envelope=_jsonable(envelope),
        )
        stored = self._store.record_rule_run(run)
        log.info("rule %s on event %s: %s", rule.name, event.id, outcome)
        return stored

    def _dispatch(
        self, rule: Rule, event: Event, ref: str, params: Any, context: Mapping[str, Any]
    ) -> dict[str, Any]:
        if not isinstance(params, dict):
            return failed_envelope("action parameters must render to a mapping")
        try:
            if ref == "webhook":
                return run_webhook(
                    params,
                    options=self._webhook,
                    default_payload={
                        "rule": rule.name,
                        "event": context["event"],
                        "trigger": context["trigger"],
                    },
                    extra_headers={"X-Slurmtower-Rule": rule.name, "X-Slurmtower-Event-Id": str(event.id)},
                )
            if ref == "command":
                return run_command(params, runner=self._runner)
            if self._dispatcher is None:
                return failed_envelope(f"no action catalogue configured to run {ref!r}")
            action_context = {
                "origin": "rule",
                "rule": rule.name,
                "event_id": event.id,
                "event_type": event.type,
                "node": event.node,
            }
            envelope = self._dispatcher(ref, params, action_context)
        except SlurmtowerError as exc:
            return failed_envelope(exc.message, result=exc.to_problem())
        except Exception as exc:  # a buggy action must not stop the engine
            log.exception("action %s of rule %s raised", ref, rule.name)
            return failed_envelope(f"action raised {type(exc).__name__}: {exc}")
        if not isinstance(envelope, dict) or "status" not in envelope:
            return failed_envelope(f"action {ref!r} returned no envelope", result=repr(envelope)[:1000])
        return envelope


def _jsonable(value: Any) -> Any:
    """Make an envelope storable as JSON (datetimes, sets, odd objects become text)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
