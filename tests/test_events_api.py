"""The events' HTTP surface: a real ``slurmtower sensor`` process takes the callbacks, an API on
its store (``slurmtower serve``'s app, the sensor not run there) serves /events and the SSE stream."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from slurmtower.api import create_app
from slurmtower.api.routes import events as events_routes
from slurmtower.devcluster import DevCluster
from slurmtower.events.callback import sign_request
from slurmtower.events.feed import MAX_PENDING_EVENTS
from slurmtower.events.store import EventStore
from slurmtower.models.event import NODE_STATE, SECURITY, SENSOR_TRIGGERED, Event
from slurmtower.settings import load_settings

from .api_server import running
from .conftest import wait_for
from .sensor_helpers import SensorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.release]

TOKEN = "reader-token-for-events-tests"
SLURMTOWER = str(Path(sys.executable).with_name("slurmtower"))


@pytest.fixture(scope="module")
def sensor(devcluster: DevCluster) -> Iterator[SensorProcess]:
    entry = {"name": "tester", "role": "reader", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
    proc = SensorProcess(devcluster, extra_env={"SLURMTOWER_AUTH__TOKENS": json.dumps([entry])})
    proc.start()
    yield proc
    proc.cleanup()


@pytest.fixture()
def http(sensor: SensorProcess) -> Iterator[httpx.Client]:
    """The sensor process: callbacks, /health, /ready."""
    with httpx.Client(base_url=sensor.url, timeout=10) as c:
        yield c


@pytest.fixture(scope="module")
def api_app(devcluster: DevCluster, sensor: SensorProcess) -> FastAPI:
    """``slurmtower serve``'s app on the sensor's store, its own sensor not run."""
    entry = {"name": "tester", "role": "reader", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
    settings = load_settings(devcluster.tower_conf, environ={"SLURMTOWER_AUTH__TOKENS": json.dumps([entry])})
    settings.state_dir = sensor.state_dir
    settings.events.sensor_enabled = False
    settings.archiver.archive_usage_load = False
    settings.api.refresh_in_subprocess = False
    return create_app(settings)


@pytest.fixture(scope="module")
def api(api_app: FastAPI) -> Iterator[httpx.Client]:
    """The API (:func:`api_app`) on a real loopback server."""
    with running(api_app) as client:
        yield client


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _key(sensor: SensorProcess) -> bytes:
    return (sensor.state_dir / "sensor.key").read_bytes().strip()


def _path(sensor: SensorProcess, klass: str = "node", kind: str = "down") -> str:
    uuid = sensor.current_uuid()
    assert uuid
    return f"/{uuid}/{klass}/{kind}"


def _security_since(sensor: SensorProcess, last: int) -> list:  # type: ignore[type-arg]
    return [e for e in sensor.events(types=[SECURITY]) if e.id > last]


_SOURCES = iter(range(1, 1 << 16))


def _source() -> str:
    """A loopback address of its own for one test, to connect from (127.0.0.0/8 is all local)."""
    n = next(_SOURCES)
    return f"127.{20 + time.time_ns() % 200}.{n >> 8}.{1 + n % 250}"


def _post_from(source: str, sensor: SensorProcess, path: str, **kwargs: Any) -> httpx.Response:
    """POST to the sensor from the address ``source``: a real peer address, not a header."""
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=sensor.url, timeout=10, transport=transport) as client:
        return client.post(path, **kwargs)


def _last(sensor: SensorProcess) -> int:
    evs = sensor.events()
    return evs[-1].id if evs else 0


def test_signed_callback_is_accepted_and_rings_the_doorbell(sensor: SensorProcess, http: httpx.Client) -> None:
    path = _path(sensor, "node", "drained")
    body = b"n[3-4]"
    resp = http.post(path, content=body, headers=sign_request(_key(sensor), "POST", path, body))
    assert resp.status_code == 202, resp.text
    ids = resp.json()["events"]
    stored = sensor.events(since_id=ids[0] - 1)
    triggered = next(e for e in stored if e.id == ids[0])
    assert triggered.type == SENSOR_TRIGGERED
    assert triggered.payload["class"] == "node" and triggered.payload["type"] == "drained"
    assert triggered.payload["nodes"] == ["n3", "n4"]


@pytest.mark.parametrize(
    ("case", "status", "reason"),
    [
        ("unsigned", 401, "unsigned"),
        ("bad_signature", 401, "bad_signature"),
        ("stale", 401, "stale"),
        ("wrong_body", 401, "bad_signature"),
        ("malformed_nonce", 400, "malformed"),
        ("bad_node_list", 400, "malformed"),
        ("unknown_class", 400, "malformed"),
    ],
    ids=lambda v: str(v),
)
def test_refused_callbacks_are_recorded_as_security_events(
    sensor: SensorProcess, http: httpx.Client, case: str, status: int, reason: str
) -> None:
    last = _last(sensor)
    key = _key(sensor)
    path = _path(sensor)
    body = b"n1"
    headers = sign_request(key, "POST", path, body)
    if case == "unsigned":
        headers = {}
    elif case == "bad_signature":
        headers = sign_request(b"not-the-key-but-long-enough", "POST", path, body)
    elif case == "stale":
        headers = sign_request(key, "POST", path, body, timestamp=int(time.time()) - 3600)
    elif case == "wrong_body":
        body = b"n[1-4]"
    elif case == "malformed_nonce":
        headers["X-Slurmtower-Nonce"] = "short!"
    elif case == "bad_node_list":
        body = b"n[1-"
        headers = sign_request(key, "POST", path, body)
    elif case == "unknown_class":
        path = _path(sensor, "toaster", "down")
        headers = sign_request(key, "POST", path, body)
    # Refusals are aggregated per source and minute: each case comes from its own address.
    resp = _post_from(_source(), sensor, path, content=body, headers=headers)
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    refused = _security_since(sensor, last)
    assert len(refused) == 1
    assert refused[0].payload["status"] == status
    assert refused[0].payload["reason"] == reason
    assert refused[0].payload["path"] == path
    # A refused call rings no doorbell: an accepted one is recorded first as a trigger event
    # naming its argument (Slurm's own doorbells, for drains other tests made on this cluster
    # a moment ago, may arrive meanwhile: those name their own node list).
    assert not [e for e in sensor.events(since_id=last) if e.type == SENSOR_TRIGGERED
                and e.source == "trigger" and e.payload.get("argument") == body.decode()]


def test_replayed_callback_is_refused(sensor: SensorProcess, http: httpx.Client) -> None:
    path = _path(sensor, "node", "up")
    body = b"n2"
    headers = sign_request(_key(sensor), "POST", path, body)
    assert http.post(path, content=body, headers=headers).status_code == 202
    last = _last(sensor)
    again = _post_from(_source(), sensor, path, content=body, headers=headers)
    assert again.status_code == 401
    assert again.json()["reason"] == "replayed"
    refused = _security_since(sensor, last)
    assert [e.payload["reason"] for e in refused] == ["replayed"]


def test_callback_route_matches_only_uuids(sensor: SensorProcess, http: httpx.Client) -> None:
    last = _last(sensor)
    resp = http.post("/events/node/down", content=b"n1")
    assert resp.status_code in (404, 405)
    assert _security_since(sensor, last) == []


def test_the_sensor_process_serves_its_callback_health_and_ready_only(sensor: SensorProcess,
                                                                     http: httpx.Client) -> None:
    """``slurmtower sensor`` is not the API: no /events, no OpenAPI document, no dashboard;
    /ready says slurmctld answers, that it leads the sensor and how many triggers it armed."""
    assert http.get("/health").json()["status"] == "ok"
    ready = http.get("/ready").json()
    assert ready["ready"] is True and ready["slurmctld"] is True
    assert ready["leads"] == ["sensor"] and ready["triggers"] >= 1
    for path in ("/events", "/events/sensor", "/openapi.json", "/ui/", "/queue"):
        missing = http.get(path, headers=AUTH)
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json", path
    wrong = http.get(_path(sensor))  # the callback takes POST only
    assert wrong.status_code == 405 and wrong.json()["status"] == 405


def test_the_sensor_process_does_not_load_the_web_framework() -> None:
    """The sensor's app is Starlette only: building it (and the CLI) loads no FastAPI."""
    import subprocess
    import sys

    code = ("import sys; from slurmtower.api.sensor_app import create_sensor_app; "
            "from slurmtower.cli.main import main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'fastapi'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_events_need_a_reader(api: httpx.Client) -> None:
    assert api.get("/events").status_code == 401
    assert api.get("/events", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_events_filters(sensor: SensorProcess, http: httpx.Client, api: httpx.Client) -> None:
    path = _path(sensor, "node", "down")
    body = b"n4"
    assert http.post(path, content=body, headers=sign_request(_key(sensor), "POST", path, body)).status_code == 202
    everything = api.get("/events", params={"limit": 1000}, headers=AUTH).json()
    assert [e["id"] for e in everything] == sorted(e["id"] for e in everything)
    first, middle = everything[0]["id"], everything[len(everything) // 2]["id"]
    after = api.get("/events", params={"since": middle, "limit": 1000}, headers=AUTH).json()
    assert after and all(e["id"] > middle for e in after)
    assert len(after) == len([e for e in everything if e["id"] > middle])
    nodes = api.get("/events", params={"node": "n1", "type": NODE_STATE}, headers=AUTH).json()
    assert nodes and all(e["node"] == "n1" and e["type"] == NODE_STATE for e in nodes)
    both = api.get("/events", params=[("type", SECURITY), ("type", SENSOR_TRIGGERED), ("limit", 1000)],
                   headers=AUTH).json()
    assert {e["type"] for e in both} == {SECURITY, SENSOR_TRIGGERED}
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert api.get("/events", params={"start": future}, headers=AUTH).json() == []
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    in_range = api.get("/events", params={"start": past, "end": future, "limit": 1000}, headers=AUTH).json()
    assert in_range[0]["id"] == first
    # An empty range holds no event (no refusal: the document cannot say that end must follow start).
    assert api.get("/events", params={"start": future, "end": past}, headers=AUTH).json() == []
    # an empty range does not spare the other checks: an unknown cluster is still a 404 (schemathesis)
    unknown = api.get("/events", params={"start": future, "end": past, "cluster": "nosuch"}, headers=AUTH)
    assert unknown.status_code == 404, unknown.text
    # Times as /history and the reports take them: naive is UTC, Unix seconds too.
    naive = api.get("/events", params={"start": past.removesuffix("+00:00"), "limit": 1000}, headers=AUTH).json()
    assert naive == in_range
    unix = api.get("/events", params={"start": str(int(datetime.now(UTC).timestamp()) - 3600), "limit": 1000},
                   headers=AUTH).json()
    assert unix == in_range
    assert api.get("/events", params={"start": "yesterday"}, headers=AUTH).json()["param"] == "start"
    assert api.get("/events", params={"limit": 0}, headers=AUTH).status_code == 400


def test_events_without_a_lower_bound_are_the_newest_and_page_back_and_forth(sensor: SensorProcess,
                                                                             api: httpx.Client) -> None:
    """``/events?limit=N`` is the newest N (as ``slurmtower events --limit N``), oldest first;
    ``before`` = a page's first id gives the page before it, ``since`` = its last id the page
    after it."""
    everything = [e["id"] for e in api.get("/events", params={"limit": 1000}, headers=AUTH).json()]
    assert len(everything) >= 6 and everything == sorted(everything)
    newest = [e["id"] for e in api.get("/events", params={"limit": 3}, headers=AUTH).json()]
    assert newest == everything[-3:]  # was the oldest three
    back = [e["id"] for e in api.get("/events", params={"limit": 3, "before": newest[0]}, headers=AUTH).json()]
    assert back == everything[-6:-3]
    forth = [e["id"] for e in api.get("/events", params={"limit": 3, "since": back[-1]}, headers=AUTH).json()]
    assert forth == newest
    cli = subprocess.run([SLURMTOWER, "events", "--limit", "3", "-o", "json"], capture_output=True, text=True,
                         timeout=60, check=True, env=sensor.env())
    assert [json.loads(line)["id"] for line in cli.stdout.splitlines()] == newest


def test_stream_resumes_after_last_event_id(sensor: SensorProcess, api: httpx.Client) -> None:
    events = api.get("/events", params={"limit": 1000}, headers=AUTH).json()
    assert len(events) >= 3
    resume_from = events[-3]["id"]
    expected = [e["id"] for e in events if e["id"] > resume_from]
    got: list[int] = []
    headers = {**AUTH, "Last-Event-ID": str(resume_from)}
    with api.stream("GET", "/events/stream", headers=headers, timeout=10) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("id: "):
                got.append(int(line[4:]))
                if len(got) == len(expected):
                    break
    assert got == expected
    bad = api.get("/events/stream", headers={**AUTH, "Last-Event-ID": "abc"})
    assert bad.status_code == 400 and bad.json()["param"] == "Last-Event-ID"


def test_stream_delivers_new_events_live(sensor: SensorProcess, api: httpx.Client) -> None:
    with api.stream("GET", "/events/stream", params={"type": SENSOR_TRIGGERED}, headers=AUTH,
                     timeout=10) as resp:
        path = _path(sensor, "node", "fail")
        body = b"n2"
        t0 = time.monotonic()
        with httpx.Client(base_url=sensor.url) as other:
            assert other.post(path, content=body,
                              headers=sign_request(_key(sensor), "POST", path, body)).status_code == 202
        for line in resp.iter_lines():
            if line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == SENSOR_TRIGGERED and data["payload"]["type"] == "fail"
                break
        assert time.monotonic() - t0 < 5


def test_a_flood_of_refused_callbacks_is_one_event_per_source_and_minute(
    sensor: SensorProcess, http: httpx.Client
) -> None:
    """200 unsigned POSTs from one address, each naming another ``X-Forwarded-For`` (no proxy
    is trusted): one security event now (the rest are counted and recorded as one more when
    the minute is over), one log line; another address, its own."""
    last = _last(sensor)
    path = _path(sensor)
    flood, other = _source(), _source()
    log_before = sensor.log().count("refused trigger callback")
    with httpx.Client(base_url=sensor.url, timeout=10,
                      transport=httpx.HTTPTransport(local_address=flood)) as client:
        for n in range(200):
            forged = {"X-Forwarded-For": f"10.66.{n >> 8}.{n & 255}"}
            assert client.post(path, content=b"n1", headers=forged).status_code == 401
    assert _post_from(other, sensor, path, content=b"n1").status_code == 401
    refused = _security_since(sensor, last)
    assert sorted(e.payload["client"] for e in refused) == sorted([flood, other])
    assert all(e.payload["count"] == 1 for e in refused)
    assert sensor.log().count("refused trigger callback") - log_before <= 2


def test_an_oversized_callback_is_refused_before_it_is_read(sensor: SensorProcess, http: httpx.Client) -> None:
    """A chunked body that never ends: the answer (413) comes once 64 KiB are in, not after
    the whole body (a raw socket sends two 64 KiB chunks and then waits)."""
    import socket
    from urllib.parse import urlsplit

    path = _path(sensor)
    last = _last(sensor)
    source = _source()
    url = urlsplit(sensor.url)
    with socket.create_connection((url.hostname, url.port), timeout=5, source_address=(source, 0)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"x" * 65536
        for _ in range(2):
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        head = sock.recv(200)  # no terminating chunk is ever sent
    assert head.startswith(b"HTTP/1.1 413"), head
    declared = _post_from(source, sensor, path, content=b"x" * (200 << 10))
    assert declared.status_code == 413  # refused on its Content-Length
    refused = _security_since(sensor, last)
    assert [e.payload["reason"] for e in refused] == ["too_large"]
    assert refused[0].payload["status"] == 413


def test_refusals_of_a_minute_are_recorded_once_with_their_count(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The aggregation itself, on a real store with the sensor's clock moved by hand."""
    from slurmtower.errors import AuthenticationError
    from slurmtower.events.sensor import Sensor
    from slurmtower.events.store import EventStore
    from slurmtower.settings import Settings

    now = [datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)]
    store = EventStore(f"sqlite:///{tmp_path / 'store.db'}")
    sensor = Sensor(Settings(state_dir=tmp_path), None, store, clock=lambda: now[0])  # type: ignore[arg-type]
    exc = AuthenticationError("callback is not signed", reason="unsigned")
    for _ in range(10_000):
        sensor.record_refusal(exc, method="POST", path="/x/node/down", client_addr="10.0.0.9")
        now[0] += timedelta(milliseconds=5)  # 50 s of refusals
    sensor.record_refusal(exc, method="POST", path="/x/node/down", client_addr="10.0.0.8")
    assert len(store.query(types=[SECURITY])) == 2  # the first of each source, at once
    now[0] = datetime(2026, 12, 1, 12, 1, 1, tzinfo=UTC)
    flushed = sensor.flush_refusals()
    assert [(e.payload["client"], e.payload["count"], e.payload["reasons"]) for e in flushed] == [
        ("10.0.0.9", 9_999, {"unsigned": 9_999})]
    assert len(store.query(types=[SECURITY])) == 3
    assert sensor.flush_refusals() == []


def test_no_callback_route_where_the_sensor_does_not_run(settings) -> None:  # type: ignore[no-untyped-def]
    import uuid as uuid_mod
    import warnings

    from slurmtower.api import create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    settings.events.sensor_enabled = False
    with TestClient(create_app(settings)) as api:
        resp = api.post(f"/{uuid_mod.uuid4()}/node/down", content=b"n1")
    assert resp.status_code in (404, 405)


def test_the_store_file_is_created_readable_by_its_owner_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import stat

    from slurmtower.events.store import EventStore

    EventStore(f"sqlite:///{tmp_path / 'new' / 'slurmtower.db'}").append([])
    for name in ("slurmtower.db", "slurmtower.db-wal"):
        path = tmp_path / "new" / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, name


FLOOD = "test.stream.flood"


def test_a_stream_client_that_does_not_read_is_cut_off_and_a_reader_is_not(
        sensor: SensorProcess, api_app: FastAPI, api: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends its request and never reads, beside one that reads everything, while
    3,000 events of 8 KiB are recorded (24 MB: more than the connection's buffers hold; three
    times the events a subscription may hold): the server never holds more than
    MAX_PENDING_EVENTS events for either, cuts the stalled one off once a write has waited
    STREAM_SEND_TIMEOUT (its connection ends: end of file once what was sent is read), and the
    reader gets every event, in order, and stays subscribed. Last in the module: the flood is
    in the store the other tests read."""
    monkeypatch.setattr(events_routes, "STREAM_SEND_TIMEOUT", 2.0)
    feed = api_app.state.services.event_feed
    store = EventStore(sensor.store_url)
    base = store.last_id() or 0

    def flood(first: int, count: int) -> None:
        store.append([Event(type=FLOOD, time=datetime.now(UTC), source="test", payload={"n": i, "pad": "x" * 8192})
                      for i in range(first, first + count)])

    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((api.base_url.host, api.base_url.port))
    stalled.sendall(f"GET /events/stream?type={FLOOD} HTTP/1.1\r\nHost: tower\r\nAuthorization: Bearer "
                    f"{TOKEN}\r\n\r\n".encode())
    got: list[int] = []

    def read() -> None:
        with api.stream("GET", "/events/stream", params={"type": FLOOD}, headers=AUTH,
                        timeout=httpx.Timeout(10, read=60)) as resp:
            for line in resp.iter_lines():
                if line.startswith("id: "):
                    got.append(int(line[4:]))
                    if len(got) == 3001:  # the last one, sent after the cut
                        return

    reader = threading.Thread(target=read, daemon=True)
    try:
        reader.start()
        wait_for(lambda: feed.subscribers == 2, 10, 0.05, what="both clients subscribed")
        held: list[int] = []
        for n in range(6):
            flood(n * 500, 500)
            for _ in range(10):  # what the subscriptions hold while the feed hands the events out
                held += [sub.pending for sub in feed.subscriptions]
                time.sleep(0.02)
        assert held and max(held) <= MAX_PENDING_EVENTS, max(held)
        wait_for(lambda: len(got) == 3000, 60, 0.1, what="the reader's 3,000 events")
        t0 = time.monotonic()
        wait_for(lambda: feed.subscribers == 1, 2.0 + 10, 0.05, what="the stalled client cut off")
        assert time.monotonic() - t0 < 2.0 + 10
        # the reader, still subscribed, gets what comes next
        flood(3000, 1)
        reader.join(30)
        assert not reader.is_alive() and len(got) == 3001, len(got)
        assert got == sorted(got) and len(set(got)) == 3001 and got[0] > base
        # the stalled client's connection ends once it reads what was sent before the cut
        stalled.settimeout(10)
        while stalled.recv(1 << 16):
            pass
    finally:
        store.close()
        stalled.close()
        reader.join(40)
