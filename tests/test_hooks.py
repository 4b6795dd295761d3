"""Alerts in (issue 15 items 4, 6): an Alertmanager payload drains a node through a rule, on the
real devcluster and a real HTTP server; refused posts record nothing; the generic webhook
takes signed requests only, once each."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.events.alerts import node_from_labels, parse_alertmanager, record_alerts
from slurmtower.events.store import EventStore
from slurmtower.rules.builtin import webhook_signature
from slurmtower.settings import Settings, TokenEntry, describe

from .auth_helpers import OPERATOR, READER, bearer, running_server, with_tokens
from .conftest import node_states, sh, wait_for

DATA = Path(__file__).parent / "data"
DOCS = Path(__file__).parents[1] / "docs" / "rules.md"
ALERTER = "stw_test_alerter_token"
GENERIC_SECRET = "generic-webhook-test-secret-0123456789"
MAX_BODY = 16384
JSON = {"Content-Type": "application/json"}


def docs_rule() -> str:
    """The Alertmanager rule example of docs/rules.md: the test runs exactly what the docs show."""
    found = re.search(r"```yaml\n(name: drain_on_filesystem_full\n.*?)```", DOCS.read_text(), re.S)
    assert found, "docs/rules.md lost its drain_on_filesystem_full example"
    return found.group(1)


@pytest.fixture()
def hooks_server(settings: Settings, clean_nodes: DevCluster, tmp_path: Path) -> Iterator[str]:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "drain_on_filesystem_full.yaml").write_text(docs_rule())
    settings.events.rules_dir = rules
    settings.events.poll_interval = 0.5
    settings.hooks.generic_secret = SecretStr(GENERIC_SECRET)
    settings.hooks.max_body_bytes = MAX_BODY
    with_tokens(settings, sensor=True)
    settings.auth.tokens = [*settings.auth.tokens,
                            TokenEntry(name="alertmanager", role="alerter", sha256=hash_token(ALERTER))]
    with running_server(create_app(settings)) as url:
        yield url


def _events(url: str, **params: Any) -> list[dict[str, Any]]:
    resp = httpx.get(f"{url}/events", params={"limit": 1000, **params}, headers=bearer(READER), timeout=30)
    assert resp.status_code == 200, resp.text
    found: list[dict[str, Any]] = resp.json()
    return found


def _alert_events(url: str) -> list[dict[str, Any]]:
    return [e for e in _events(url) if e["type"].startswith("alert.")]


def _post(url: str, body: bytes | Any, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/hooks/alertmanager", content=body, headers={**JSON, **headers}, timeout=30)


def _reason(node: str) -> str:
    out = sh("scontrol", "-o", "show", "node", node)
    found = re.search(r"Reason=(.*?)(?: \w+=|$)", out)
    return found.group(1) if found else ""


@pytest.mark.cluster
def test_an_alertmanager_payload_drains_its_node_through_a_rule(hooks_server: str) -> None:
    url = hooks_server
    firing = (DATA / "alertmanager-firing.json").read_bytes()
    assert "DRAIN" not in node_states()["n3"]
    resp = _post(url, firing, bearer(ALERTER))
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["received"] == 2 and answer["recorded"] == 2 and answer["duplicates"] == 0
    assert answer["truncated_alerts"] == 0

    events = {e["payload"]["alertname"]: e for e in _events(url, type="alert.firing")}
    assert set(events) == {"NodeFilesystemFull", "NodeClockNotSynchronising"}
    full = events["NodeFilesystemFull"]
    assert full["id"] in answer["events"]
    assert full["node"] == "n3" and full["source"] == "alertmanager"
    payload = full["payload"]
    assert payload["node"] == "n3" and payload["node_label"] == "instance" and payload["status"] == "firing"
    assert payload["labels"]["mountpoint"] == "/tmp" and payload["labels"]["instance"] == "n3:9100"
    assert payload["annotations"]["summary"] == "Filesystem has less than 3% space left."
    assert payload["starts_at"] == "2026-05-04T07:41:15.739266Z" and payload["ends_at"] is None
    assert payload["fingerprint"] == "4a8b6ec1d2f7a3c9" and payload["receiver"] == "slurmtower"
    assert payload["group_key"] == '{}/{severity=~"warning|critical"}:{job="node"}'
    assert payload["external_url"] == "http://alertmanager.example.org:9093"
    assert payload["generator_url"].startswith("http://prometheus.example.org:9090/graph?")
    assert events["NodeClockNotSynchronising"]["node"] == "n4"

    # The rule of docs/rules.md drains n3, as Slurm itself shows, and leaves n4 alone.
    wait_for(lambda: "DRAIN" in node_states()["n3"], 20, what="n3 drained by the rule")
    reason = _reason("n3")
    assert "NodeFilesystemFull on /tmp" in reason and "drain_on_filesystem_full" in reason, reason
    assert "DRAIN" not in node_states()["n4"]
    runs = httpx.get(f"{url}/events/rule-runs", params={"rule": "drain_on_filesystem_full"},
                     headers=bearer(READER), timeout=30).json()
    assert len(runs) == 1
    assert runs[0]["event_id"] == full["id"] and runs[0]["node"] == "n3" and runs[0]["outcome"] == "succeeded"

    # Alertmanager re-sends the group unchanged: nothing new; the resolved alert is recorded.
    again = _post(url, firing, bearer(ALERTER)).json()
    assert again["recorded"] == 0 and again["duplicates"] == 2
    resolved = _post(url, (DATA / "alertmanager-resolved.json").read_bytes(), bearer(ALERTER)).json()
    assert resolved["recorded"] == 1 and resolved["duplicates"] == 1
    [gone] = _events(url, type="alert.resolved")
    assert gone["node"] == "n3" and gone["payload"]["status"] == "resolved"
    assert gone["payload"]["ends_at"] == "2026-05-04T08:02:45.739266Z"
    assert gone["payload"]["fingerprint"] == "4a8b6ec1d2f7a3c9"
    assert len(_alert_events(url)) == 3
    time.sleep(1.5)  # a few sensor rounds: the rule ran once, for the firing alert only
    runs = httpx.get(f"{url}/events/rule-runs", params={"rule": "drain_on_filesystem_full"},
                     headers=bearer(READER), timeout=30).json()
    assert len(runs) == 1


def _cli_alert(settings: Settings, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``slurmtower alert ...`` on the test's store (the server's), as a cron job would run it."""
    import os

    from tests.sensor_helpers import SLURMTOWER

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMTOWER_")}
    env.update(SLURMTOWER_STORE_URL=settings.effective_store_url(), SLURMTOWER_STATE_DIR=str(settings.state_dir),
               SLURMTOWER_HOOKS__MAX_BODY_BYTES=str(MAX_BODY))
    return subprocess.run([SLURMTOWER, "alert", *args], input=stdin, capture_output=True, env=env, timeout=60,
                          check=False)


def test_an_alert_recorded_from_the_cli_drains_its_node_through_the_services_rule(
        hooks_server: str, settings: Settings, tmp_path: Path) -> None:
    """``slurmtower alert`` (a file or standard input) records what /hooks/alertmanager would, and
    the running service's rule engine acts on it; bad input is one line, exit != 0, nothing
    recorded."""
    url = hooks_server
    assert "DRAIN" not in node_states()["n3"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "4", "status": "firing", "alerts": [{"status": "burning", "labels": {}}]}')
    for args, stdin, named in ((["-f", "alertmanager", str(bad)], None, "alerts.0.status"),
                               (["-"], b"not json", "body"),
                               (["--format", "nagios", "-"], b"{}", "--format"),
                               ([str(tmp_path / "missing.json")], None, "missing.json"),
                               (["-"], b"[" * (MAX_BODY + 1), "max_body_bytes")):
        refused = _cli_alert(settings, *args, stdin=stdin)
        err = refused.stderr.decode().strip()
        assert refused.returncode != 0 and len(err.splitlines()) == 1 and named in err, (args, err)
        assert "Traceback" not in err
    assert _alert_events(url) == []

    firing = (DATA / "alertmanager-firing.json").read_bytes()
    done = _cli_alert(settings, "--output", "json", "-", stdin=firing)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["received"] == 2 and answer["recorded"] == 2 and answer["duplicates"] == 0
    events = {e["payload"]["alertname"]: e for e in _events(url, type="alert.firing")}
    assert events["NodeFilesystemFull"]["node"] == "n3" and events["NodeFilesystemFull"]["source"] == "alertmanager"
    assert sorted(e["id"] for e in events.values()) == sorted(answer["events"])
    wait_for(lambda: "DRAIN" in node_states()["n3"], 20, what="n3 drained by the service's rule")
    assert "NodeFilesystemFull on /tmp" in _reason("n3")
    # The same file again (a cron job's next round): copies left out, said in text.
    path = tmp_path / "firing.json"
    path.write_bytes(firing)
    again = _cli_alert(settings, str(path))
    assert again.returncode == 0 and again.stdout.decode().strip().endswith("2 alert(s): 0 recorded, 2 already recorded")
    assert len(_alert_events(url)) == 2


def _shape(**changes: Any) -> bytes:
    doc = json.loads((DATA / "alertmanager-firing.json").read_text())
    for path, value in changes.items():
        target = doc
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value is ...:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return json.dumps(doc).encode()


@pytest.mark.cluster
def test_refused_alert_posts_are_4xx_problems_and_record_nothing(hooks_server: str) -> None:
    url = hooks_server
    firing = (DATA / "alertmanager-firing.json").read_bytes()
    padded = _shape(alerts__0__annotations__description="x" * (MAX_BODY + 100))
    cases: list[tuple[str, dict[str, str], Any, int, str | None]] = [
        ("no token", {}, firing, 401, None),
        ("a reader's token", bearer(READER), firing, 403, None),
        ("an unknown token", bearer("stw_not_a_token"), firing, 401, None),
        ("not JSON", bearer(ALERTER), b'{"version": "4", "alerts": [', 400, "body"),
        ("not UTF-8", bearer(ALERTER), b"\xff\xfe{}", 400, "body"),
        ("a JSON list", bearer(ALERTER), b"[1, 2]", 400, "body"),
        ("alerts not a list", bearer(ALERTER), _shape(alerts="n3"), 400, "alerts"),
        ("no alerts", bearer(ALERTER), _shape(alerts=...), 400, "alerts"),
        ("a bad status", bearer(ALERTER), _shape(alerts__0__status="burning"), 400, "alerts.0.status"),
        ("a label not text", bearer(ALERTER), _shape(alerts__1__labels__instance=9100), 400,
         "alerts.1.labels.instance"),
        ("no labels", bearer(ALERTER), _shape(alerts__0__labels=...), 400, "alerts.0.labels"),
        ("a bad time", bearer(ALERTER), _shape(alerts__0__startsAt="yesterday"), 400, "alerts.0.startsAt"),
        ("another version", bearer(ALERTER), _shape(version="3"), 400, "version"),
        ("a NUL in a label", bearer(ALERTER), _shape(alerts__0__labels__instance="n3\x00:9100"), 400,
         "alerts.0.labels.instance"),
        ("oversized", bearer(ALERTER), padded, 413, "body"),
        # Sent chunked, without a Content-Length: the cap counts what arrives.
        ("oversized, chunked", bearer(ALERTER), iter([padded[i:i + 4096] for i in range(0, len(padded), 4096)]),
         413, "body"),
    ]
    for what, headers, body, status, param in cases:
        resp = _post(url, body, headers)
        assert resp.status_code == status, f"{what}: {resp.status_code} {resp.text}"
        assert resp.headers["content-type"].startswith("application/problem+json"), what
        problem = resp.json()
        assert problem["status"] == status, what
        if param is not None:
            assert problem["param"] == param, f"{what}: {problem}"
    assert _alert_events(url) == []
    # An alerter token opens nothing else: no reads, no actions.
    assert httpx.get(f"{url}/events", headers=bearer(ALERTER), timeout=30).status_code == 403
    drain = httpx.post(f"{url}/actions/slurm.node.drain", json={"nodes": "n3", "reason": "x"},
                       headers=bearer(ALERTER), timeout=30)
    assert drain.status_code == 403
    # An operator may post alerts too (a person testing the route).
    assert _post(url, firing, bearer(OPERATOR)).json()["recorded"] == 2
    assert "DRAIN" not in node_states()["n1"]


def _signed(body: bytes, *, ts: int | None = None, secret: str = GENERIC_SECRET) -> dict[str, str]:
    stamp = str(int(time.time()) if ts is None else ts)
    return {**JSON, "X-Slurmtower-Timestamp": stamp,
            "X-Slurmtower-Signature": webhook_signature(secret.encode(), stamp, body)}


@pytest.mark.cluster
def test_the_generic_webhook_takes_signed_fresh_requests_once(hooks_server: str) -> None:
    url = f"{hooks_server}/hooks/generic"
    now = datetime.now(UTC).isoformat()
    alert = {"status": "firing", "labels": {"alertname": "GpuXidError", "node": "n2.cluster.example.org", "xid": "79"},
             "annotations": {"summary": "GPU fell off the bus"}, "startsAt": now}
    body = json.dumps(alert).encode()
    headers = _signed(body)
    ok = httpx.post(url, content=body, headers=headers, timeout=30)
    assert ok.status_code == 200, ok.text
    assert ok.json()["recorded"] == 1
    [event] = _events(hooks_server, type="alert.firing", node="n2")
    assert event["source"] == "webhook" and event["payload"]["labels"]["xid"] == "79"
    assert event["payload"]["node_label"] == "node" and len(event["payload"]["fingerprint"]) == 16

    stale = int(time.time()) - 3600
    refused: list[tuple[str, bytes, dict[str, str], int, str | None]] = [
        ("the same request again", body, headers, 401, None),
        ("another secret", body, _signed(body, secret="not-the-secret-at-all-0123456789"), 401, None),
        ("an hour-old timestamp", body, _signed(body, ts=stale), 401, None),
        ("a tampered body", body.replace(b"79", b"48"), _signed(body), 401, None),
        ("unsigned", body, JSON, 401, None),
        ("a malformed timestamp", body, {**_signed(body), "X-Slurmtower-Timestamp": "yesterday"}, 400,
         "X-Slurmtower-Timestamp"),
        ("a malformed signature", body, {**_signed(body), "X-Slurmtower-Signature": "md5=abc"}, 400,
         "X-Slurmtower-Signature"),
        ("signed, not JSON", b"{oops", _signed(b"{oops"), 400, "body"),
        ("signed, wrong shape", b'{"status": "firing"}', _signed(b'{"status": "firing"}'), 400, "labels"),
    ]
    for what, content, hdrs, status, param in refused:
        resp = httpx.post(url, content=content, headers=hdrs, timeout=30)
        assert resp.status_code == status, f"{what}: {resp.status_code} {resp.text}"
        assert resp.headers["content-type"].startswith("application/problem+json"), what
        if param is not None:
            assert resp.json()["param"] == param, f"{what}: {resp.json()}"
    assert len(_alert_events(hooks_server)) == 1

    batch = json.dumps({"alerts": [
        {"status": "resolved", "labels": alert["labels"], "startsAt": now, "endsAt": datetime.now(UTC).isoformat()},
        {"status": "firing", "labels": {"alertname": "IbPortDown", "hostname": "n1", "port": "1"}},
    ]}).encode()
    two = httpx.post(url, content=batch, headers=_signed(batch), timeout=30)
    assert two.status_code == 200 and two.json()["recorded"] == 2
    nodes = sorted((e["type"], e["node"]) for e in _alert_events(hooks_server))
    assert nodes == [("alert.firing", "n1"), ("alert.firing", "n2"), ("alert.resolved", "n2")]
    assert "DRAIN" not in node_states()["n2"]  # the docs' rule matches NodeFilesystemFull only


def test_alerts_are_recorded_once_by_two_processes_on_postgresql(pg_store: str) -> None:
    """The dedupe keys live in the deployment's store: replicas behind one proxy record a
    re-sent group once, whichever takes each copy."""
    hooks = Settings().hooks
    data = json.loads((DATA / "alertmanager-firing.json").read_text())
    one, two = EventStore(pg_store), EventStore(pg_store)
    try:
        stored, dups = record_alerts(one, parse_alertmanager(data, hooks=hooks), dedupe_window=60)
        assert len(stored) == 2 and dups == 0
        assert {e.node for e in stored} == {"n3", "n4"}
        again, dups = record_alerts(two, parse_alertmanager(data, hooks=hooks), dedupe_window=60)
        assert again == [] and dups == 2
        data["alerts"][0]["status"] = "resolved"
        third, dups = record_alerts(two, parse_alertmanager(data, hooks=hooks), dedupe_window=60)
        assert [e.type for e in third] == ["alert.resolved"] and dups == 1
        assert [e.id for e in one.query(types=["alert.firing", "alert.resolved"])] == \
            [e.id for e in [*stored, *third]]
    finally:
        one.close()
        two.close()


def test_node_labels_give_the_host_part() -> None:
    names = ["node", "nodename", "hostname", "instance"]
    assert node_from_labels({"instance": "n3:9100"}, names) == ("n3", "instance")
    assert node_from_labels({"instance": "n3.hpc.example.org:9100"}, names) == ("n3", "instance")
    assert node_from_labels({"instance": "n3.hpc.example.org:9100"}, names, strip_domain=False) == \
        ("n3.hpc.example.org", "instance")
    assert node_from_labels({"instance": "http://gpu12:9400/metrics"}, names) == ("gpu12", "instance")
    assert node_from_labels({"instance": "n3:9100", "nodename": "c-042"}, names) == ("c-042", "nodename")
    # An address names no node: the next label does, or none.
    assert node_from_labels({"instance": "10.1.2.3:9100", "hostname": "n7"}, names) == ("n7", "hostname")
    assert node_from_labels({"instance": "[fe80::1]:9100"}, names) == (None, None)
    assert node_from_labels({"job": "node"}, names) == (None, None)


def test_hook_settings_mask_their_secret_and_tokens_take_the_alerter_role() -> None:
    settings = Settings.model_validate({"hooks": {"generic_secret": "generic-secret-value-0123456789"}})
    shown = repr(describe(settings))
    assert "generic-secret-value-0123456789" not in shown and "hooks.generic_secret" in shown
    out = subprocess.run([str(Path(sys.executable).with_name("slurmtower")), "token", "create", "--role", "alerter",
                          "--name", "alertmanager", "-o", "json"], capture_output=True, text=True, check=True)
    entry = json.loads(out.stdout)["entry"]
    assert entry["role"] == "alerter" and entry["sha256"] == hash_token(json.loads(out.stdout)["token"])
    assert TokenEntry.model_validate(entry).role == "alerter"
