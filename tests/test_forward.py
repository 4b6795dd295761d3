"""Events out (issue 15 item 4): a drain made with scontrol reaches real HTTP receivers as a
CloudEvent and in StackStorm's webhook format; a receiver that is down gets the events once
it is back, without holding up the sensor; nothing is sent twice across a restart."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import select

from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.events.store import EventStore
from slurmtower.settings import ForwardTarget, Settings, describe
from slurmtower.store.schema import event_cursors

from .api_server import free_port
from .auth_helpers import READER, bearer, running_server, with_tokens
from .conftest import node_states, sh, wait_for

pytestmark = pytest.mark.cluster

ST2_KEY = "st2-api-key-for-the-test-0123"
FORWARD_SECRET = "forward-signing-secret-0123456789"
FORWARD_TOKEN = "bearer-token-of-the-receiver-0123"


class Receiver:
    """A real HTTP server on loopback, in a thread, keeping every POST it gets."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers.items()),
                                              "raw": raw, "body": json.loads(raw)})
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def got(self, path: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if path is None or r["path"] == path]


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def _settings(settings: Settings, targets: list[ForwardTarget]) -> Settings:
    settings.events.poll_interval = 0.5
    settings.hooks.forward = targets
    settings.hooks.forward_interval = 0.2
    settings.hooks.forward_max_backoff = 1.0
    return with_tokens(settings, sensor=True)


def _cursors(settings: Settings) -> dict[str, int]:
    store = EventStore(settings.effective_store_url())
    try:
        with store.engine.connect() as conn:
            return {str(n): int(i) for n, i in conn.execute(select(event_cursors.c.name, event_cursors.c.last_id))}
    finally:
        store.close()


def _wait_forwarding(settings: Settings) -> None:
    """Until every target has its cursor (a new target starts after the newest event)."""
    names = {f"forward:{t.name}" for t in settings.hooks.forward}
    wait_for(lambda: names <= set(_cursors(settings)), 20, what="the forwarders' cursors")


def _node_events(url: str, node: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{url}/events", params={"node": node, "type": "slurm.node.state", "limit": 1000},
                     headers=bearer(READER), timeout=30)
    assert resp.status_code == 200, resp.text
    found: list[dict[str, Any]] = resp.json()
    return found


def _drained(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if "DRAIN" in (e.get("data") or e.get("payload") or {}).get("flags_added", [])]


def _forward_counts(url: str, target: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", headers=bearer(READER), timeout=30).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("slurmtower_forward_events_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("target") == target:
            counts[labels["outcome"]] = float(line.rsplit(" ", 1)[1])
    return counts


def test_a_drain_made_with_scontrol_reaches_cloudevents_and_st2_receivers(
        settings: Settings, clean_nodes: DevCluster, receiver: Receiver) -> None:
    _settings(settings, [
        ForwardTarget(name="ce", url=f"{receiver.url}/ce", types=["slurm.node.*"]),
        ForwardTarget(name="st2", url=f"{receiver.url}/api/v1/webhooks/slurmtower", format="st2",
                      api_key=SecretStr(ST2_KEY), types=["slurm.node.state"]),
        ForwardTarget(name="st2-trigger", url=f"{receiver.url}/api/v1/webhooks/st2", format="st2",
                      api_key=SecretStr(ST2_KEY), types=["slurm.node.state"]),
        ForwardTarget(name="alerts-only", url=f"{receiver.url}/alerts", types=["alert.*"]),
    ])
    with running_server(create_app(settings)) as url:
        _wait_forwarding(settings)
        sh("scontrol", "update", "nodename=n2", "state=drain", "reason=forwarded drain")
        wait_for(lambda: _drained([r["body"] for r in receiver.got("/ce")]), 20, what="the CloudEvent of n2's drain")
        [event] = _drained(_node_events(url, "n2"))
        wait_for(lambda: receiver.got("/api/v1/webhooks/slurmtower") and receiver.got("/api/v1/webhooks/st2"), 20,
                 what="the StackStorm webhooks")
        time.sleep(1.0)  # a few forwarding rounds: anything sent twice would be here now

    # CloudEvents 1.0, structured mode.
    [ce] = _drained([r["body"] for r in receiver.got("/ce")])
    [request] = [r for r in receiver.got("/ce") if r["body"] is ce]
    assert request["headers"]["Content-Type"].startswith("application/cloudevents+json")
    assert ce["specversion"] == "1.0" and ce["id"] == str(event["id"])
    assert ce["source"] == f"/slurmtower/{settings.cluster_name}" and ce["type"] == "slurm.node.state"
    assert ce["subject"] == "n2" and ce["datacontenttype"] == "application/json"
    assert datetime.fromisoformat(ce["time"]) == datetime.fromisoformat(event["time"])
    assert ce["data"] == event["payload"] and ce["slurmtowersource"] == event["source"]
    assert ce["data"]["reason"] == "forwarded drain" and ce["data"]["node"] == "n2"
    assert all(r["body"]["type"].startswith("slurm.node.") for r in receiver.got("/ce"))
    ids = [r["body"]["id"] for r in receiver.got("/ce")]
    assert len(ids) == len(set(ids))

    # StackStorm: a named webhook gets the event, the generic "st2" one the trigger and payload.
    [named] = [r for r in receiver.got("/api/v1/webhooks/slurmtower") if r["body"]["id"] == event["id"]]
    assert named["headers"]["St2-Api-Key"] == ST2_KEY
    assert named["headers"]["Content-Type"] == "application/json"
    assert named["body"] == event
    [generic] = [r for r in receiver.got("/api/v1/webhooks/st2")
                 if r["headers"]["X-Slurmtower-Event-Id"] == str(event["id"])]
    assert generic["headers"]["St2-Api-Key"] == ST2_KEY
    assert generic["body"] == {"trigger": "slurm.node.state", "payload": event["payload"]}
    assert receiver.got("/alerts") == []  # filtered out by type
    assert "DRAIN" in node_states()["n2"]


def _hanging_port() -> tuple[socket.socket, int]:
    """A port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock, int(sock.getsockname()[1])


def test_a_receiver_down_then_up_gets_the_events_after_the_retry(
        settings: Settings, clean_nodes: DevCluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="slurmtower.events.forward")
    late = Receiver()  # not started yet: connections are refused
    hang, hang_port = _hanging_port()
    _settings(settings, [
        ForwardTarget(name="late", url=f"{late.url}/hook?token=in-the-query", types=["slurm.node.state"],
                      secret=SecretStr(FORWARD_SECRET), bearer_token=SecretStr(FORWARD_TOKEN)),
        ForwardTarget(name="hang", url=f"http://127.0.0.1:{hang_port}/hook", types=["slurm.node.state"],
                      timeout=1.0),
    ])
    try:
        with running_server(create_app(settings)) as url:
            _wait_forwarding(settings)
            started = time.monotonic()
            sh("scontrol", "update", "nodename=n1", "state=drain", "reason=receiver down")
            # The sensor records the drain at once, whatever the receivers do.
            wait_for(lambda: _drained(_node_events(url, "n1")), 10, what="n1's drain recorded")
            assert time.monotonic() - started < 5
            wait_for(lambda: _forward_counts(url, "late").get("failed", 0) >= 2
                     and _forward_counts(url, "hang").get("failed", 0) >= 1, 30, what="failed attempts counted")
            assert _forward_counts(url, "late")["delivered"] == 0
            late.start()
            wait_for(lambda: _drained([r["body"] for r in late.got()]), 20, what="the drain after the retry")
            [event] = _drained(_node_events(url, "n1"))
            [got] = _drained([r["body"] for r in late.got()])
            assert got["id"] == str(event["id"]) and got["subject"] == "n1"
            counts = _forward_counts(url, "late")
            assert counts["delivered"] >= 1 and counts["rejected"] == 0 and counts["dropped"] == 0
            # Signed like the rules' webhook action, with the receiver's bearer token.
            request = late.got()[0]
            stamp = request["headers"]["X-Slurmtower-Timestamp"]
            mac = hmac.new(FORWARD_SECRET.encode(), stamp.encode() + b"." + request["raw"], hashlib.sha256)
            assert request["headers"]["X-Slurmtower-Signature"] == "sha256=" + mac.hexdigest()
            assert request["headers"]["Authorization"] == f"Bearer {FORWARD_TOKEN}"
            sh("scontrol", "update", "nodename=n1", "state=resume")
            wait_for(lambda: len(late.got()) >= 2, 20, what="the resume forwarded")
        failures = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
        assert any("late" in m for m in failures) and any("hang" in m for m in failures)
        for secret in (FORWARD_SECRET, FORWARD_TOKEN, "in-the-query"):
            assert secret not in caplog.text

        # Restarted: what was delivered is not sent again; a drain made while it was down is.
        delivered = [r["body"]["id"] for r in late.got()]
        sh("scontrol", "update", "nodename=n4", "state=drain", "reason=while slurmtower was down")
        with running_server(create_app(settings)) as url:
            wait_for(lambda: _drained([r["body"] for r in late.got() if r["body"]["subject"] == "n4"]), 30,
                     what="n4's drain after the restart")
            time.sleep(1.0)
        ids = [r["body"]["id"] for r in late.got()]
        assert len(ids) == len(set(ids)), ids
        assert ids[:len(delivered)] == delivered
        [n4] = _drained([r["body"] for r in late.got() if r["body"]["subject"] == "n4"])
        assert n4["slurmtowersource"] == "startup"
        assert n4["data"]["reason"] == "while slurmtower was down"
    finally:
        late.stop()
        hang.close()


def test_forward_settings_mask_their_secrets_and_are_checked() -> None:
    settings = Settings.model_validate({"hooks": {"forward": [
        {"name": "st2", "url": "https://st2.example.org/api/v1/webhooks/st2", "format": "st2",
         "api_key": "st2-api-key-value", "secret": "forward-secret-value", "bearer_token": "bearer-value"}]}})
    shown = repr(describe(settings))
    for secret in ("st2-api-key-value", "forward-secret-value", "bearer-value"):
        assert secret not in shown
    assert "https://st2.example.org/api/v1/webhooks/st2" in shown
    with pytest.raises(ValueError, match="unique"):
        Settings.model_validate({"hooks": {"forward": [{"name": "a", "url": "http://x/1"},
                                                       {"name": "a", "url": "http://x/2"}]}})
    for bad in ({"name": "a", "url": "ftp://x/1"}, {"name": "a b", "url": "http://x/1"},
                {"name": "a", "url": "http://x/1", "format": "xml"}, {"name": "a", "url": "http://x/1", "types": []}):
        with pytest.raises(ValueError):
            ForwardTarget.model_validate(bad)
