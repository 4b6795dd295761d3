"""The events HTTP surface of a real ``slurmtower sensor`` process: callbacks, /events, SSE."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.events.callback import sign_request
from slurmtower.models.event import NODE_STATE, SECURITY, SENSOR_TRIGGERED

from .sensor_helpers import SensorProcess

pytestmark = pytest.mark.cluster

TOKEN = "reader-token-for-events-tests"


@pytest.fixture(scope="module")
def sensor(devcluster: DevCluster) -> Iterator[SensorProcess]:
    entry = {"name": "tester", "role": "reader", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
    proc = SensorProcess(devcluster, extra_env={"SLURMTOWER_AUTH__TOKENS": json.dumps([entry])})
    proc.start()
    yield proc
    proc.cleanup()


@pytest.fixture()
def http(sensor: SensorProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sensor.url, timeout=10) as c:
        yield c


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _key(sensor: SensorProcess) -> bytes:
    return (sensor.state_dir / "sensor.key").read_bytes().strip()


def _path(sensor: SensorProcess, klass: str = "node", kind: str = "down") -> str:
    uuid = sensor.current_uuid()
    assert uuid
    return f"/{uuid}/{klass}/{kind}"


def _security_since(sensor: SensorProcess, last: int) -> list:  # type: ignore[type-arg]
    return [e for e in sensor.events(types=[SECURITY]) if e.id > last]


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
    resp = http.post(path, content=body, headers=headers)
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    refused = _security_since(sensor, last)
    assert len(refused) == 1
    assert refused[0].payload["status"] == status
    assert refused[0].payload["reason"] == reason
    assert refused[0].payload["path"] == path
    # A refused call rings no doorbell.
    assert not [e for e in sensor.events(since_id=last) if e.type in (SENSOR_TRIGGERED, NODE_STATE)
                and e.source == "trigger"]


def test_replayed_callback_is_refused(sensor: SensorProcess, http: httpx.Client) -> None:
    path = _path(sensor, "node", "up")
    body = b"n2"
    headers = sign_request(_key(sensor), "POST", path, body)
    assert http.post(path, content=body, headers=headers).status_code == 202
    last = _last(sensor)
    again = http.post(path, content=body, headers=headers)
    assert again.status_code == 401
    assert again.json()["reason"] == "replayed"
    refused = _security_since(sensor, last)
    assert [e.payload["reason"] for e in refused] == ["replayed"]


def test_callback_route_matches_only_uuids(sensor: SensorProcess, http: httpx.Client) -> None:
    last = _last(sensor)
    resp = http.post("/events/node/down", content=b"n1")
    assert resp.status_code in (404, 405)
    assert _security_since(sensor, last) == []


def test_events_need_a_reader(http: httpx.Client) -> None:
    assert http.get("/events").status_code == 401
    assert http.get("/events", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_events_filters(sensor: SensorProcess, http: httpx.Client) -> None:
    path = _path(sensor, "node", "down")
    body = b"n4"
    assert http.post(path, content=body, headers=sign_request(_key(sensor), "POST", path, body)).status_code == 202
    everything = http.get("/events", params={"limit": 1000}, headers=AUTH).json()
    assert [e["id"] for e in everything] == sorted(e["id"] for e in everything)
    first, middle = everything[0]["id"], everything[len(everything) // 2]["id"]
    after = http.get("/events", params={"since": middle, "limit": 1000}, headers=AUTH).json()
    assert after and all(e["id"] > middle for e in after)
    assert len(after) == len([e for e in everything if e["id"] > middle])
    nodes = http.get("/events", params={"node": "n1", "type": NODE_STATE}, headers=AUTH).json()
    assert nodes and all(e["node"] == "n1" and e["type"] == NODE_STATE for e in nodes)
    both = http.get("/events", params=[("type", SECURITY), ("type", SENSOR_TRIGGERED)], headers=AUTH).json()
    assert {e["type"] for e in both} == {SECURITY, SENSOR_TRIGGERED}
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert http.get("/events", params={"start": future}, headers=AUTH).json() == []
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    in_range = http.get("/events", params={"start": past, "end": future, "limit": 1000}, headers=AUTH).json()
    assert in_range[0]["id"] == first
    bad = http.get("/events", params={"start": future, "end": past}, headers=AUTH)
    assert bad.status_code == 400 and bad.json()["param"] == "end"
    naive = http.get("/events", params={"start": "2024-01-01T00:00:00"}, headers=AUTH)
    assert naive.status_code == 400 and naive.json()["param"] == "start"
    assert http.get("/events", params={"limit": 0}, headers=AUTH).status_code == 422


def test_stream_resumes_after_last_event_id(sensor: SensorProcess, http: httpx.Client) -> None:
    events = http.get("/events", params={"limit": 1000}, headers=AUTH).json()
    assert len(events) >= 3
    resume_from = events[-3]["id"]
    expected = [e["id"] for e in events if e["id"] > resume_from]
    got: list[int] = []
    headers = {**AUTH, "Last-Event-ID": str(resume_from)}
    with http.stream("GET", "/events/stream", headers=headers, timeout=10) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("id: "):
                got.append(int(line[4:]))
                if len(got) == len(expected):
                    break
    assert got == expected
    bad = http.get("/events/stream", headers={**AUTH, "Last-Event-ID": "abc"})
    assert bad.status_code == 400 and bad.json()["param"] == "Last-Event-ID"


def test_stream_delivers_new_events_live(sensor: SensorProcess, http: httpx.Client) -> None:
    with http.stream("GET", "/events/stream", params={"type": SENSOR_TRIGGERED}, headers=AUTH,
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
