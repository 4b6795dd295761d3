"""Rules: loading, criteria operators, sandboxed templates, limits, built-in actions, examples."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmtower.errors import ConfigError, InvalidInput, SlurmRequestError
from slurmtower.events.store import EventStore
from slurmtower.models.event import NODE_STATE, SENSOR_TRIGGERED, SENSOR_UP, Event
from slurmtower.rules import (
    RuleEngine,
    WebhookOptions,
    load_rules,
    parse_rule,
    run_command,
    webhook_signature,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "rules"
T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
SECRET = b"webhook-secret-0123456789"


def transition(node: str = "n1", state: str = "DOWN", **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "node": node,
        "change": "state",
        "previous_state": "IDLE",
        "previous_flags": [],
        "state": state,
        "flags": ["NOT_RESPONDING"],
        "flags_added": ["NOT_RESPONDING"],
        "flags_removed": [],
        "reason": "Not responding",
        "reason_owner": "slurm",
        "observed_at": T0.isoformat(),
        "source": "poll",
    }
    payload.update(extra)
    return payload


def node_event(node: str = "n1", state: str = "DOWN", **extra: Any) -> Event:
    return Event(type=NODE_STATE, time=T0, source="poll", node=node, payload=transition(node, state, **extra))


def rule_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "test_rule",
        "description": "for tests",
        "enabled": True,
        "trigger": {"type": NODE_STATE},
        "criteria": {"trigger.state": {"type": "equals", "pattern": "DOWN"}},
        "action": {
            "ref": "slurm.node.drain",
            "parameters": {"nodes": "{{ trigger.node }}", "reason": "down"},
        },
    }
    doc.update(over)
    return doc


@dataclass
class Catalogue:
    """A stand-in action catalogue that records what the engine asked it to run."""

    calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    fail: bool = False

    def __call__(self, ref: str, params: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((ref, params, context))
        if self.fail:
            raise SlurmRequestError("Invalid node name specified", argv=["scontrol"], returncode=1)
        return {"status": "succeeded", "result": {"ok": True}, "exit_code": 0, "stdout": "", "stderr": "",
                "execution_id": f"x{len(self.calls)}"}  # fmt: skip


@pytest.fixture()
def store() -> Iterator[EventStore]:
    s = EventStore("sqlite://")
    yield s
    s.close()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


# -- loading ----------------------------------------------------------------------------


def write(directory: Path, name: str, doc: Any) -> Path:
    path = directory / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def test_a_broken_rule_file_is_reported_by_file_and_name_while_others_load(tmp_path: Path) -> None:
    write(tmp_path, "a_good.yaml", rule_doc(name="good"))
    write(tmp_path, "b_bad_op.yaml", rule_doc(name="bad_op", criteria={"trigger.state": {"type": "frobs"}}))
    write(tmp_path, "c_bad_yaml.yml", "name: broken\ncriteria: [unclosed\n")
    write(
        tmp_path,
        "d_bad_regex.yaml",
        rule_doc(name="bad_re", criteria={"trigger.node": {"type": "regex", "pattern": "("}}),
    )
    write(
        tmp_path,
        "e_bad_tpl.yaml",
        rule_doc(name="bad_tpl", action={"ref": "x", "parameters": {"a": "{{ trigger.node "}}),
    )
    write(tmp_path, "f_unknown_key.yaml", rule_doc(name="typo", criterion={}))
    write(tmp_path, "g_dup.yaml", rule_doc(name="good"))
    write(
        tmp_path,
        "h_no_prefix.yaml",
        rule_doc(name="no_prefix", criteria={"state": {"type": "equals", "pattern": "DOWN"}}),
    )
    write(tmp_path, "notes.txt", "not a rule")
    rules, errors = load_rules(tmp_path)
    assert [r.name for r in rules] == ["good"]
    assert rules[0].source_file == str(tmp_path / "a_good.yaml")
    found = {e.file.name: e for e in errors}
    assert set(found) == {"b_bad_op.yaml", "c_bad_yaml.yml", "d_bad_regex.yaml", "e_bad_tpl.yaml",
                          "f_unknown_key.yaml", "g_dup.yaml", "h_no_prefix.yaml"}  # fmt: skip
    assert found["b_bad_op.yaml"].rule == "bad_op"
    assert "frobs" in found["b_bad_op.yaml"].message
    assert found["c_bad_yaml.yml"].rule is None
    assert "YAML" in found["c_bad_yaml.yml"].message
    assert "regular expression" in found["d_bad_regex.yaml"].message
    assert "template" in found["e_bad_tpl.yaml"].message
    assert "criterion" in found["f_unknown_key.yaml"].message
    assert "duplicate" in found["g_dup.yaml"].message
    assert "b_bad_op.yaml (rule bad_op): " in str(found["b_bad_op.yaml"])


def test_missing_rules_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_rules(tmp_path / "nope")


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    write(tmp_path, "evil.yaml", "!!python/object/apply:os.system ['true']\n")
    rules, errors = load_rules(tmp_path)
    assert rules == []
    assert len(errors) == 1


def test_shipped_example_rules_all_load() -> None:
    rules, errors = load_rules(EXAMPLES)
    assert errors == []
    names = {r.name for r in rules}
    assert {
        "slurm.sensor.trigger.setup.node_down.notify",
        "slurm.sensor.trigger.setup.node_drain.notify",
        "slurm.sensor.trigger.setup.node_down.reset",
        "slurm.sensor.trigger.setup.node_drain.reset",
    } <= names
    resets = [r for r in rules if r.name.endswith(".reset")]
    assert all(not r.enabled for r in resets)


# -- criteria ---------------------------------------------------------------------------


CASES = [
    ("trigger.state", "equals", "DOWN", True),
    ("trigger.state", "equals", "IDLE", False),
    ("trigger.state", "nequals", "IDLE", True),
    ("trigger.state", "iequals", "down", True),
    ("trigger.node", "regex", "^n[0-9]+$", True),
    ("trigger.node", "regex", "^gpu", False),
    ("trigger.reason", "iregex", "not RESP", True),
    ("trigger.node", "in", ["n1", "n2"], True),
    ("trigger.node", "nin", ["n1", "n2"], False),
    ("trigger.flags", "contains", "NOT_RESPONDING", True),
    ("trigger.flags", "ncontains", "DRAIN", True),
    ("trigger.reason", "contains", "respond", True),
    ("trigger.node", "startswith", "n", True),
    ("trigger.node", "endswith", "2", False),
    ("trigger.reason", "exists", None, True),
    ("trigger.missing", "exists", None, False),
    ("trigger.missing", "nexists", None, True),
    ("trigger.reason", "nexists", None, False),
    ("trigger.count", "gt", 2, True),
    ("trigger.count", "gt", 3, False),
    ("trigger.count", "lt", "10", True),
    ("trigger.node", "gt", 1, False),
    ("trigger.flags.0", "equals", "NOT_RESPONDING", True),
    ("trigger.nested.rack", "equals", "r1", True),
    ("trigger.missing", "nequals", "x", False),
    ("event.source", "equals", "poll", True),
    ("event.node", "equals", "n1", True),
    ("trigger.state", "greaterthan", 1, False),
    ("trigger.node", "inside", ["n1"], True),
]


@pytest.mark.parametrize(
    ("key", "op", "pattern", "expected"), CASES, ids=[f"{c[1]}-{c[0]}-{c[3]}" for c in CASES]
)
def test_criteria_operators(key: str, op: str, pattern: Any, expected: bool) -> None:
    rule = parse_rule(rule_doc(criteria={key: {"type": op, "pattern": pattern}}))
    event = node_event(count=3, nested={"rack": "r1"})
    assert rule.matches(event.type, {"trigger": event.payload, "event": event.summary()}) is expected


def test_a_rule_matches_on_the_events_cluster() -> None:
    """With ``[[clusters]]``, ``event.cluster`` names the cluster an event is of: a rule can
    keep to one cluster (an event of a one-cluster deployment has none)."""
    rule = parse_rule(rule_doc(criteria={"event.cluster": {"type": "equals", "pattern": "gpu"}}))
    alone = node_event()
    gpu, other = alone.model_copy(update={"cluster": "gpu"}), alone.model_copy(update={"cluster": "prod"})
    assert rule.matches(gpu.type, {"trigger": gpu.payload, "event": gpu.summary()})
    assert not rule.matches(other.type, {"trigger": other.payload, "event": other.summary()})
    assert not rule.matches(alone.type, {"trigger": alone.payload, "event": alone.summary()})


def test_several_criteria_on_one_key_must_all_hold() -> None:
    crit = {"trigger.node": [{"type": "startswith", "pattern": "n"}, {"type": "nequals", "pattern": "n1"}]}
    rule = parse_rule(rule_doc(criteria=crit))
    ctx1 = {"trigger": transition("n1"), "event": {}}
    ctx2 = {"trigger": transition("n2"), "event": {}}
    assert not rule.matches(NODE_STATE, ctx1)
    assert rule.matches(NODE_STATE, ctx2)


def test_disabled_rules_and_other_trigger_types_never_match(store: EventStore) -> None:
    disabled = parse_rule(rule_doc(name="off", enabled=False))
    other = parse_rule(rule_doc(name="other", trigger={"type": SENSOR_UP}))
    engine = RuleEngine([disabled, other], store, Catalogue())
    assert engine.process(node_event()) == []


@pytest.mark.parametrize(
    ("criteria", "needle"),
    [
        ({"trigger.node": {"type": "in", "pattern": "n1"}}, "list"),
        ({"trigger.count": {"type": "gt", "pattern": "many"}}, "number"),
        ({"trigger.node": {"type": "equals"}}, "pattern"),
    ],
    ids=["in-needs-list", "gt-needs-number", "needs-pattern"],
)
def test_bad_patterns_are_load_errors(criteria: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        parse_rule(rule_doc(criteria=criteria))


# -- templates --------------------------------------------------------------------------


def test_parameters_render_from_the_event_and_config(store: EventStore) -> None:
    cat = Catalogue()
    params = {
        "nodes": "{{ trigger.node }}",
        "all": "{{ trigger.flags }}",
        "reason": "slurmtower: {{ trigger.node }} went {{ trigger.state | lower }} (event {{ event.id }})",
        "program": "{{ config.notify_program }} node down",
        "folded": "{{ ['n1', 'n2', 'n3'] | nodeset }}",
        "static": 5,
    }
    rule = parse_rule(rule_doc(action={"ref": "slurm.node.drain", "parameters": params}))
    engine = RuleEngine([rule], store, cat, config={"notify_program": "/usr/bin/notify"})
    (stored,) = store.append([node_event("n7")])
    (run,) = engine.process(stored)
    assert run.outcome == "succeeded"
    ref, got, context = cat.calls[0]
    assert ref == "slurm.node.drain"
    assert got == {
        "nodes": "n7",
        "all": ["NOT_RESPONDING"],
        "reason": f"slurmtower: n7 went down (event {stored.id})",
        "program": "/usr/bin/notify node down",
        "folded": "n[1-3]",
        "static": 5,
    }
    assert context == {
        "origin": "rule",
        "rule": "test_rule",
        "event_id": stored.id,
        "event_type": NODE_STATE,
        "node": "n7",
    }


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ trigger.__class__.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ trigger.flags.append('DRAIN') }}",
        "{{ trigger.update({'node': 'n9'}) }}",
    ],
    ids=["str-mro", "dict-globals", "cycler-globals", "list-mutation", "dict-mutation"],
)
def test_sandbox_refuses_unsafe_templates(store: EventStore, template: str) -> None:
    cat = Catalogue()
    rule = parse_rule(rule_doc(action={"ref": "slurm.node.drain", "parameters": {"x": template}}))
    event = node_event()
    (run,) = RuleEngine([rule], store, cat).process(event)
    assert run.outcome == "render_error"
    assert "SecurityError" in run.envelope["reason"]
    assert cat.calls == []
    assert event.payload["flags"] == ["NOT_RESPONDING"]


def test_undefined_names_are_render_errors_not_empty_strings(store: EventStore) -> None:
    cat = Catalogue()
    rule = parse_rule(rule_doc(action={"ref": "a", "parameters": {"reason": "down: {{ trigger.nope }}"}}))
    (run,) = RuleEngine([rule], store, cat).process(node_event())
    assert run.outcome == "render_error"
    assert "nope" in run.envelope["reason"]
    assert cat.calls == []
    assert store.rule_runs()[0].outcome == "render_error"


# -- limits -----------------------------------------------------------------------------


def test_rate_limit_stops_a_flapping_rack(store: EventStore) -> None:
    cat = Catalogue()
    clock = Clock()
    rule = parse_rule(rule_doc(rate_limit={"max_runs": 2, "per_seconds": 60}))
    engine = RuleEngine([rule], store, cat, clock=clock)
    events = store.append([node_event(f"n{i}") for i in range(1, 6)])
    outcomes = [engine.process(e)[0].outcome for e in events]
    assert outcomes == [
        "succeeded",
        "succeeded",
        "skipped_rate_limit",
        "skipped_rate_limit",
        "skipped_rate_limit",
    ]
    assert [c[1]["nodes"] for c in cat.calls] == ["n1", "n2"]
    skipped = store.rule_runs(outcomes=["skipped_rate_limit"])
    assert [r.event_id for r in skipped] == [e.id for e in events[2:]]
    assert "rate limit" in skipped[0].envelope["reason"]
    clock.now = T0 + timedelta(seconds=61)
    (later,) = store.append([node_event("n6")])
    assert engine.process(later)[0].outcome == "succeeded"


def test_rate_limit_per_node_and_survives_an_engine_restart(store: EventStore) -> None:
    clock = Clock()
    rule = parse_rule(rule_doc(rate_limit={"max_runs": 1, "per_seconds": 600, "per_node": True}))
    first = RuleEngine([rule], store, Catalogue(), clock=clock)
    a, b, c = store.append([node_event("n1"), node_event("n2"), node_event("n1")])
    assert first.process(a)[0].outcome == "succeeded"
    restarted = RuleEngine([rule], store, Catalogue(), clock=clock)
    assert restarted.process(b)[0].outcome == "succeeded"
    assert restarted.process(c)[0].outcome == "skipped_rate_limit"


def test_cooldown_per_node(store: EventStore) -> None:
    clock = Clock()
    rule = parse_rule(rule_doc(cooldown_seconds=300, cooldown_per_node=True))
    engine = RuleEngine([rule], store, Catalogue(), clock=clock)
    e1, e2, e3, e4 = store.append([node_event("n1"), node_event("n1"), node_event("n2"), node_event("n1")])
    assert engine.process(e1)[0].outcome == "succeeded"
    clock.now = T0 + timedelta(seconds=100)
    run = engine.process(e2)[0]
    assert run.outcome == "skipped_cooldown"
    assert "cooldown for node n1" in run.envelope["reason"]
    assert engine.process(e3)[0].outcome == "succeeded"
    clock.now = T0 + timedelta(seconds=301)
    assert engine.process(e4)[0].outcome == "succeeded"


def test_cooldown_for_the_whole_rule(store: EventStore) -> None:
    clock = Clock()
    rule = parse_rule(rule_doc(cooldown_seconds=300))
    engine = RuleEngine([rule], store, Catalogue(), clock=clock)
    e1, e2 = store.append([node_event("n1"), node_event("n2")])
    assert engine.process(e1)[0].outcome == "succeeded"
    assert engine.process(e2)[0].outcome == "skipped_cooldown"


# -- dispatch ---------------------------------------------------------------------------


def test_failing_action_is_recorded_not_raised(store: EventStore) -> None:
    cat = Catalogue(fail=True)
    (event,) = store.append([node_event()])
    (run,) = RuleEngine([parse_rule(rule_doc())], store, cat).process(event)
    assert run.outcome == "failed"
    assert run.envelope["status"] == "failed"
    assert "Invalid node name" in run.envelope["stderr"]
    assert run.envelope["result"]["status"] == 400


def test_without_a_catalogue_catalogue_actions_fail(store: EventStore) -> None:
    (run,) = RuleEngine([parse_rule(rule_doc())], store).process(node_event())
    assert run.outcome == "failed"
    assert "no action catalogue" in run.envelope["stderr"]


def test_process_pending_follows_the_log_once(store: EventStore) -> None:
    cat = Catalogue()
    engine = RuleEngine([parse_rule(rule_doc())], store, cat)
    store.append([node_event("n1"), node_event("n2", state="IDLE"), node_event("n3")])
    runs = engine.process_pending()
    assert [r.node for r in runs] == ["n1", "n3"]
    assert engine.process_pending() == []
    # A restart with the cursor lost still does not repeat a recorded run.
    store.set_cursor("rules", 0)
    assert RuleEngine([parse_rule(rule_doc())], store, cat).process_pending() == []
    assert len(cat.calls) == 2


def test_sensor_triggered_event_matches_a_seed_style_rule(store: EventStore) -> None:
    rules, errors = load_rules(EXAMPLES)
    assert errors == []
    reset = next(r for r in rules if r.name == "slurm.sensor.trigger.setup.node_down.reset")
    enabled = reset.model_copy(update={"enabled": True})
    cat = Catalogue()
    config = {
        "notify_program": "/var/lib/slurmtower/notify.py",
        "python": "/usr/bin/python3",
        "callback_url": "http://127.0.0.1:8642/events/callback",
        "key_file": "/var/lib/slurmtower/sensor.key",
    }
    engine = RuleEngine([enabled], store, cat, config=config)
    payload = {
        "uuid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "class": "node",
        "type": "down",
        "argument": "n1",
    }
    (event,) = store.append([Event(type=SENSOR_TRIGGERED, time=T0, source="trigger", payload=payload)])
    (run,) = engine.process(event)
    assert run.outcome == "succeeded", run.envelope
    ref, params, _ = cat.calls[0]
    assert ref == "slurm.trigger.set"
    assert params["event"] == "down"
    assert params["program"].endswith(f"--sensor-uuid {payload['uuid']} node down")


# -- webhook against a real local HTTP server -------------------------------------------


@dataclass
class Hook:
    statuses: list[int]
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


@pytest.fixture()
def hook() -> Iterator[Hook]:
    state = Hook(statuses=[])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                   "at": time.monotonic()})  # fmt: skip
            status = state.statuses.pop(0) if state.statuses else 200
            reply = json.dumps({"received": True}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/slurm"
    yield state
    server.shutdown()
    server.server_close()


def webhook_rule(url: str, **params: Any) -> Any:
    return parse_rule(rule_doc(name="hook", action={"ref": "webhook", "parameters": {"url": url, **params}}))


def test_webhook_is_signed_and_retried_after_a_500(store: EventStore, hook: Hook) -> None:
    hook.statuses = [500]
    options = WebhookOptions(secret=SECRET, backoff_initial=0.2)
    payload = {"text": "{{ trigger.node }} is {{ trigger.state }}", "nodes": "{{ [trigger.node] }}"}
    rule = webhook_rule(hook.url, payload=payload, headers={"X-Team": "hpc"})
    (event,) = store.append([node_event("n4")])
    (run,) = RuleEngine([rule], store, webhook=options).process(event)
    assert run.outcome == "succeeded", run.envelope
    assert run.envelope["result"]["attempts"] == 2
    assert run.envelope["result"]["status_code"] == 200
    assert run.envelope["result"]["body"] == {"received": True}
    assert len(hook.requests) == 2
    assert hook.requests[1]["at"] - hook.requests[0]["at"] >= 0.15  # backed off
    for req in hook.requests:
        headers = req["headers"]
        assert json.loads(req["body"]) == {"text": "n4 is DOWN", "nodes": ["n4"]}
        ts = headers["X-Slurmtower-Timestamp"]
        expected = "sha256=" + hmac.new(SECRET, ts.encode() + b"." + req["body"], hashlib.sha256).hexdigest()
        assert headers["X-Slurmtower-Signature"] == expected
        assert headers["X-Team"] == "hpc"
        assert headers["X-Slurmtower-Rule"] == "hook"
        assert headers["X-Slurmtower-Event-Id"] == str(event.id)
    deliveries = {r["headers"]["X-Slurmtower-Delivery"] for r in hook.requests}
    assert deliveries == {run.envelope["execution_id"]}
    assert store.rule_runs(event_id=event.id)[0].envelope["result"]["attempts"] == 2


def test_webhook_default_payload_is_the_event(store: EventStore, hook: Hook) -> None:
    (event,) = store.append([node_event("n2")])
    (run,) = RuleEngine([webhook_rule(hook.url)], store, webhook=WebhookOptions(secret=SECRET)).process(event)
    assert run.outcome == "succeeded"
    body = json.loads(hook.requests[0]["body"])
    assert body["rule"] == "hook"
    assert body["event"]["id"] == event.id
    assert body["trigger"]["node"] == "n2"


def test_webhook_does_not_retry_a_client_error(store: EventStore, hook: Hook) -> None:
    hook.statuses = [404, 200]
    (run,) = RuleEngine(
        [webhook_rule(hook.url)], store, webhook=WebhookOptions(backoff_initial=0.05)
    ).process(node_event())
    assert run.outcome == "failed"
    assert run.envelope["result"]["status_code"] == 404
    assert len(hook.requests) == 1


def test_webhook_gives_up_within_its_time_budget(store: EventStore, hook: Hook) -> None:
    hook.statuses = [503] * 20
    options = WebhookOptions(max_attempts=10, max_seconds=1.0, backoff_initial=0.2, backoff_max=0.4)
    started = time.monotonic()
    (run,) = RuleEngine([webhook_rule(hook.url)], store, webhook=options).process(node_event())
    assert time.monotonic() - started < 3
    assert run.outcome == "failed"
    assert run.envelope["result"]["status_code"] == 503
    assert 2 <= len(hook.requests) < 10


def test_webhook_to_a_closed_port_fails_cleanly(store: EventStore) -> None:
    options = WebhookOptions(max_attempts=2, backoff_initial=0.05)
    (run,) = RuleEngine([webhook_rule("http://127.0.0.1:9/")], store, webhook=options).process(node_event())
    assert run.outcome == "failed"
    assert run.envelope["result"]["attempts"] == 2
    assert "ConnectError" in run.envelope["stderr"]


def test_webhook_signature_helper() -> None:
    sig = webhook_signature(b"k" * 16, "1700000000", b"{}")
    assert sig == "sha256=" + hmac.new(b"k" * 16, b"1700000000.{}", hashlib.sha256).hexdigest()


# -- command ----------------------------------------------------------------------------


def test_command_runs_without_a_shell_and_captures_output(store: EventStore) -> None:
    argv = ["/bin/echo", "node {{ trigger.node }}; rm -rf /", "$HOME"]
    rule = parse_rule(rule_doc(action={"ref": "command", "parameters": {"argv": argv, "timeout": 10}}))
    (run,) = RuleEngine([rule], store).process(node_event("n3"))
    assert run.outcome == "succeeded"
    assert run.envelope["stdout"] == "node n3; rm -rf / $HOME\n"
    assert run.envelope["exit_code"] == 0


def test_command_timeout_kills_it(store: EventStore) -> None:
    rule = parse_rule(
        rule_doc(action={"ref": "command", "parameters": {"argv": ["/bin/sleep", "30"], "timeout": 0.5}})
    )
    started = time.monotonic()
    (run,) = RuleEngine([rule], store).process(node_event())
    assert time.monotonic() - started < 5
    assert run.outcome == "failed"
    assert run.envelope["result"]["timed_out"] is True
    assert "timed out" in run.envelope["stderr"]


def test_command_failure_and_bad_parameters() -> None:
    failed = run_command({"argv": ["/bin/sh", "-c", "echo oops >&2; exit 3"], "timeout": 5})
    assert (failed["status"], failed["exit_code"], failed["stderr"]) == ("failed", 3, "oops\n")
    assert run_command({"argv": "echo hi"})["status"] == "failed"
    assert run_command({"argv": []})["status"] == "failed"
    assert run_command({"argv": ["/bin/true"], "timeout": -1})["status"] == "failed"
    assert "not installed" in run_command({"argv": ["/nonexistent/prog"]})["stderr"]


# -- public surface ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    ["slurmtower.rules", "slurmtower.events", "slurmtower.models.event", "slurmtower.events.notify"],
)
def test_public_names_are_exported(module: str) -> None:
    import importlib

    mod = importlib.import_module(module)
    assert mod.__all__ == sorted(mod.__all__, key=lambda n: (not n.isupper(), n))
    for name in mod.__all__:
        assert hasattr(mod, name), name


def test_every_shipped_example_runs_once_enabled_with_its_config_from_the_settings(
    store: EventStore, hook: Hook, tmp_path: Path
) -> None:
    """Each example under examples/rules, enabled, through the engine `serve` builds: the
    keys the templates read (config.webhook_url, config.chassis, config.python,
    config.key_file ...) come from the settings, and no run ends in render_error."""
    from slurmtower.runtime.sensor import build_rule_engine
    from slurmtower.settings import Settings

    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    names = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        doc["enabled"] = True
        names.append(doc["name"])
        (rules_dir / path.name).write_text(yaml.safe_dump(doc))
    settings = Settings(state_dir=tmp_path)
    settings.events.rules_dir = rules_dir
    settings.events.rules_config = {"webhook_url": hook.url,
                                    "chassis": {"n1": "n[1-2]", "n2": "n[1-2]", "n3": "n[3-4]", "n4": "n[3-4]"},
                                    "maintenance_partition": {"n2": "debug"}}
    cat = Catalogue()
    engine = build_rule_engine(settings, store, None, dispatcher=cat)  # type: ignore[arg-type]
    assert sorted(r.name for r in engine.rules) == sorted(names)
    uuid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    store.append([
        Event(type=SENSOR_UP, time=T0, source="sensor", payload={"uuid": uuid, "triggers": [], "poll_interval": 1}),
        Event(type=SENSOR_TRIGGERED, time=T0, source="trigger",
              payload={"uuid": uuid, "class": "node", "type": "down", "argument": "n1", "nodes": ["n1"]}),
        Event(type=SENSOR_TRIGGERED, time=T0, source="trigger",
              payload={"uuid": uuid, "class": "node", "type": "drained", "argument": "n3", "nodes": ["n3"]}),
        node_event("n1"),  # DOWN
        node_event("n3", state="IDLE", flags=["DRAIN"], flags_added=["DRAIN"], reason="disk"),
        Event(type="slurmtower.maintain.started", time=T0, source="maintain", node="n2",
              payload={"run": "r1", "step": "started"}),
    ])
    runs = engine.process_pending()
    by_rule = {r.rule: r for r in runs}
    assert sorted(by_rule) == sorted(names), sorted(by_rule)
    assert {r.rule: r.outcome for r in runs if r.outcome != "succeeded"} == {}, [r.envelope for r in runs]
    params = {ref: p for ref, p, _ in cat.calls}
    assert ("slurm.node.drain", "n[1-2]") in [(ref, p.get("nodes")) for ref, p, _ in cat.calls]
    assert params["slurm.trigger.set"]["program"].startswith(f"/usr/bin/python3 {tmp_path}/slurmtower-notify.py")
    assert f"--key-file {tmp_path}/sensor.key" in params["slurm.trigger.set"]["program"]
    assert len(hook.requests) == 1 and json.loads(hook.requests[0]["body"])["node"] == "n1"
    assert params["slurm.job.requeue"]["criterias"] == {"nodes": "n1", "state": "RUNNING"}
    assert params["slurm.job.hold"]["criterias"] == {"partition": "debug", "state": "PENDING"}


def test_rules_config_cannot_override_slurmtowers_own_keys(store: EventStore, tmp_path: Path) -> None:
    from slurmtower.runtime.sensor import build_rule_engine
    from slurmtower.settings import Settings

    settings = Settings(state_dir=tmp_path)
    settings.events.rules_dir = tmp_path
    settings.events.rules_config = {"notify_program": "/tmp/evil"}
    with pytest.raises(ConfigError, match="notify_program is set by slurmtower itself"):
        build_rule_engine(settings, store, None, dispatcher=Catalogue())  # type: ignore[arg-type]
