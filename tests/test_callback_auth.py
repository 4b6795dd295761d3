"""Signed trigger callbacks: the verifier, the callback parser, and notify.py run for real."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from slurmtower.errors import AuthenticationError, ConfigError, InvalidInput, SlurmtowerError
from slurmtower.events import notify
from slurmtower.events.callback import (
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    CallbackVerifier,
    MemoryNonceStore,
    generate_key,
    install_notify_program,
    load_key,
    parse_callback,
    sign_request,
    triggered_event,
)
from slurmtower.events.store import EventStore
from slurmtower.models.event import SENSOR_TRIGGERED

KEY = b"0123456789abcdef0123456789abcdef"
SENSOR = str(uuid.uuid4())
PATH = f"/{SENSOR}/node/down"


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[EventStore]:
    s = EventStore(f"sqlite:///{tmp_path / 'events.db'}")
    yield s
    s.close()


@pytest.fixture()
def verifier(store: EventStore) -> CallbackVerifier:
    return CallbackVerifier(KEY, store, max_clock_skew=60)


def signed(body: bytes = b"n[3-4]", **kw: object) -> dict[str, str]:
    return sign_request(KEY, "POST", PATH, body, **kw)  # type: ignore[arg-type]


def test_a_signed_request_is_accepted(verifier: CallbackVerifier) -> None:
    headers = signed()
    result = verifier.verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    assert result.nonce == headers[HEADER_NONCE]
    assert abs(result.signed_at - datetime.now(UTC)) < timedelta(seconds=5)


def test_header_names_are_case_insensitive(verifier: CallbackVerifier) -> None:
    headers = {k.lower(): v for k, v in signed().items()}
    verifier.verify(method="post", path=PATH, headers=headers, body=b"n[3-4]")


@pytest.mark.parametrize("missing", [HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE])
def test_missing_header_is_a_400(verifier: CallbackVerifier, missing: str) -> None:
    headers = signed()
    del headers[missing]
    with pytest.raises(InvalidInput) as exc:
        verifier.verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    assert exc.value.http_status == 400
    assert exc.value.param == missing


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (HEADER_TIMESTAMP, "yesterday"),
        (HEADER_TIMESTAMP, "-5"),
        (HEADER_NONCE, "short"),
        (HEADER_NONCE, "x" * 20 + "/../"),
        (HEADER_SIGNATURE, "deadbeef"),
        (HEADER_SIGNATURE, "v1=" + "G" * 64),
        (HEADER_SIGNATURE, ""),
    ],
    ids=[
        "ts-word",
        "ts-negative",
        "nonce-short",
        "nonce-chars",
        "sig-no-version",
        "sig-not-hex",
        "sig-empty",
    ],
)
def test_malformed_header_is_a_400(verifier: CallbackVerifier, header: str, value: str) -> None:
    headers = signed()
    headers[header] = value
    with pytest.raises(InvalidInput) as exc:
        verifier.verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    assert exc.value.http_status == 400


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", PATH, b"n[1-4]"),
        ("POST", f"/{SENSOR}/node/up", b"n[3-4]"),
        ("PUT", PATH, b"n[3-4]"),
    ],
    ids=["other-body", "other-path", "other-method"],
)
def test_tampered_request_is_a_401_bad_signature(
    verifier: CallbackVerifier, method: str, path: str, body: bytes
) -> None:
    with pytest.raises(AuthenticationError) as exc:
        verifier.verify(method=method, path=path, headers=signed(), body=body)
    assert exc.value.http_status == 401
    assert exc.value.extra["reason"] == "bad_signature"


def test_request_signed_with_another_key_is_rejected(verifier: CallbackVerifier) -> None:
    headers = sign_request(b"x" * 32, "POST", PATH, b"n1")
    with pytest.raises(AuthenticationError) as exc:
        verifier.verify(method="POST", path=PATH, headers=headers, body=b"n1")
    assert exc.value.extra["reason"] == "bad_signature"


@pytest.mark.parametrize("offset", [-61, 61, -3600], ids=["past", "future", "hour-old"])
def test_stale_timestamp_is_a_401(verifier: CallbackVerifier, offset: int) -> None:
    headers = signed(timestamp=int(time.time()) + offset)
    with pytest.raises(AuthenticationError) as exc:
        verifier.verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    assert exc.value.extra["reason"] == "stale"


def test_replayed_request_is_a_401_even_after_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'replay.db'}"
    headers = signed()
    first = EventStore(url)
    CallbackVerifier(KEY, first).verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    first.close()
    restarted = EventStore(url)
    with pytest.raises(AuthenticationError) as exc:
        CallbackVerifier(KEY, restarted).verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    assert exc.value.extra["reason"] == "replayed"
    restarted.close()


def test_forged_requests_do_not_burn_nonces(verifier: CallbackVerifier) -> None:
    good = signed()
    forged = dict(good, **{HEADER_SIGNATURE: "v1=" + "0" * 64})
    with pytest.raises(AuthenticationError):
        verifier.verify(method="POST", path=PATH, headers=forged, body=b"n[3-4]")
    verifier.verify(method="POST", path=PATH, headers=good, body=b"n[3-4]")


def test_a_replay_after_the_skew_window_is_refused_as_stale() -> None:
    now = datetime.now(UTC)
    clock = [now]
    v = CallbackVerifier(KEY, MemoryNonceStore(), max_clock_skew=60, clock=lambda: clock[0])
    headers = signed(timestamp=int(now.timestamp()))
    v.verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    clock[0] = now + timedelta(seconds=120)  # nonce forgotten by now, timestamp too old
    with pytest.raises(AuthenticationError) as exc:
        v.verify(method="POST", path=PATH, headers=headers, body=b"n[3-4]")
    assert exc.value.extra["reason"] == "stale"


def test_verifier_refuses_a_short_key(store: EventStore) -> None:
    with pytest.raises(ConfigError):
        CallbackVerifier(b"short", store)


# -- key files --------------------------------------------------------------------------


def test_generated_key_file_is_private_and_loads(tmp_path: Path) -> None:
    path = generate_key(tmp_path / "state" / "sensor.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = load_key(path)
    assert len(key) == 64
    assert generate_key(path) == path and load_key(path) == key  # never overwritten


def test_world_readable_or_short_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_bytes(KEY)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="other users"):
        load_key(path)
    path.chmod(0o640)
    assert load_key(path) == KEY
    path.write_bytes(b"tiny\n")
    with pytest.raises(ConfigError, match="shorter"):
        load_key(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_key(tmp_path / "absent")


# -- what callbacks say -----------------------------------------------------------------


def test_parse_node_callback() -> None:
    cb = parse_callback(f"/cb/{SENSOR}/node/down", b"n[3-4]\n", sensor_uuid=SENSOR, prefix="/cb")
    assert (cb.sensor_uuid, cb.resource_class, cb.trigger_type) == (SENSOR, "node", "down")
    assert cb.nodes is not None and list(cb.nodes) == ["n3", "n4"]
    event = triggered_event(cb)
    assert event.type == SENSOR_TRIGGERED
    assert event.payload == {
        "uuid": SENSOR,
        "class": "node",
        "type": "down",
        "argument": "n[3-4]",
        "nodes": ["n3", "n4"],
    }


def test_parse_job_and_reconfig_callbacks() -> None:
    assert parse_callback(f"/{SENSOR}/job/fini", b"17").job_id == "17"
    cb = parse_callback(f"/{SENSOR}/reconfig/reconfig", b"reconfig")
    assert (cb.nodes, cb.job_id, cb.argument) == (None, None, "reconfig")


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/not-a-uuid/node/down", b"n1", "uuid"),
        (f"/{uuid.uuid4()}/node/down", b"n1", "uuid"),
        (f"/{SENSOR}/planet/down", b"n1", "class"),
        (f"/{SENSOR}/node/Down!", b"n1", "type"),
        (f"/{SENSOR}/node", b"n1", "path"),
        (f"/{SENSOR}/node/down", b"n[1-", "body"),
        (f"/{SENSOR}/node/down", b"", "body"),
        (f"/{SENSOR}/node/down", b"@all", "body"),
        (f"/{SENSOR}/job/fini", b"17; rm -rf /", "body"),
        (f"/{SENSOR}/node/down", b"\xff\xfe", "body"),
    ],
    ids=["bad-uuid", "other-sensor", "bad-class", "bad-type", "short-path", "bad-hostlist", "empty", "group",
         "bad-job", "not-utf8"],
)  # fmt: skip
def test_malformed_callbacks_are_invalid_input(path: str, body: bytes, param: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_callback(path, body, sensor_uuid=SENSOR)
    assert exc.value.param == param


# -- notify.py as Slurm runs it ---------------------------------------------------------


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1 that authenticates callbacks like the sensor will."""

    verifier: CallbackVerifier
    fail_first: int = 0
    hang: bool = False
    requests: list[dict[str, object]] = field(default_factory=list)
    url: str = ""


@pytest.fixture()
def receiver(store: EventStore) -> Iterator[Receiver]:
    state = Receiver(CallbackVerifier(KEY, store))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            record: dict[str, object] = {"path": self.path, "body": body, "headers": dict(self.headers)}
            state.requests.append(record)
            if state.hang:
                time.sleep(3)
                return
            if state.fail_first > 0:
                state.fail_first -= 1
                self._reply(503)
                return
            try:
                state.verifier.verify(method="POST", path=self.path, headers=dict(self.headers), body=body)
                record["callback"] = parse_callback(
                    self.path, body, sensor_uuid=SENSOR, prefix="/events/callback"
                )
            except SlurmtowerError as exc:
                record["error"] = exc
                self._reply(exc.http_status)
                return
            self._reply(204)

        def _reply(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/events/callback"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    """notify.py installed as a plain file, the way the sensor installs it."""
    return install_notify_program(tmp_path / "bin" / "slurmtower-notify.py")


@pytest.fixture()
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "sensor.key"
    path.write_bytes(KEY + b"\n")
    path.chmod(0o600)
    return path


def run_notify(
    program: Path, url: str, key_file: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    # -I -S: isolated, no site-packages: proves the program needs the standard library only.
    # A bare environment, like slurmctld's (no PYTHONPATH, no venv).
    argv = [sys.executable, "-I", "-S", str(program), "--url", url, "--key-file", str(key_file),
            "--sensor-uuid", SENSOR, *args]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": "/etc/slurm/slurm.conf"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd="/")


def test_installed_program_is_executable_and_standalone(program: Path) -> None:
    assert os.access(program, os.X_OK)
    assert "slurmtower" not in "".join(
        line for line in program.read_text().splitlines() if line.startswith(("import", "from"))
    )


def test_notify_delivers_a_signed_callback(program: Path, receiver: Receiver, key_file: Path) -> None:
    proc = run_notify(program, receiver.url, key_file, "node", "down", "n[3-4]")
    assert proc.returncode == 0, proc.stderr
    (req,) = receiver.requests
    assert req["path"] == f"/events/callback/{SENSOR}/node/down"
    assert req["body"] == b"n[3-4]"
    assert "error" not in req
    cb = req["callback"]
    assert cb.nodes is not None and str(cb.nodes) == "n[3-4]"  # type: ignore[attr-defined]


def test_notify_reconfig_uses_the_word_slurm_appends(
    program: Path, receiver: Receiver, key_file: Path
) -> None:
    proc = run_notify(program, receiver.url, key_file, "reconfig", "reconfig", "reconfig")
    assert proc.returncode == 0, proc.stderr
    assert receiver.requests[0]["body"] == b"reconfig"


def test_notify_retries_after_a_server_error(program: Path, receiver: Receiver, key_file: Path) -> None:
    receiver.fail_first = 1
    proc = run_notify(program, receiver.url, key_file, "node", "drained", "n1")
    assert proc.returncode == 0, proc.stderr
    assert len(receiver.requests) == 2
    nonces = {r["headers"][HEADER_NONCE] for r in receiver.requests}  # type: ignore[index]
    assert len(nonces) == 2  # each attempt is signed afresh


def test_notify_with_the_wrong_key_is_rejected_without_retry(
    program: Path, receiver: Receiver, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"z" * 32)
    proc = run_notify(program, receiver.url, wrong, "node", "down", "n1")
    assert proc.returncode == notify.EXIT_REJECTED
    (req,) = receiver.requests
    assert isinstance(req["error"], AuthenticationError)


def test_notify_gives_up_quickly_when_nobody_listens(program: Path, key_file: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    proc = run_notify(program, f"http://127.0.0.1:{port}", key_file, "node", "down", "n1")
    assert proc.returncode == notify.EXIT_UNDELIVERED
    assert time.monotonic() - started < 10
    assert "giving up" in proc.stderr


def test_notify_never_hangs_on_a_silent_receiver(program: Path, receiver: Receiver, key_file: Path) -> None:
    receiver.hang = True
    started = time.monotonic()
    proc = run_notify(
        program, receiver.url, key_file, "--timeout", "0.5", "--retries", "1", "node", "down", "n1"
    )
    assert proc.returncode == notify.EXIT_UNDELIVERED
    assert time.monotonic() - started < 5


def test_notify_without_a_readable_key_exits_3(program: Path, receiver: Receiver, tmp_path: Path) -> None:
    proc = run_notify(program, receiver.url, tmp_path / "missing.key", "node", "down", "n1")
    assert proc.returncode == notify.EXIT_KEY
    assert receiver.requests == []


def test_notify_signature_matches_the_library(verifier: CallbackVerifier) -> None:
    req = notify.build_request("http://127.0.0.1:1/cb/", SENSOR, "node", "down", "n1", KEY)
    path = f"/cb/{SENSOR}/node/down"
    assert req.full_url == f"http://127.0.0.1:1{path}"
    assert req.data == b"n1"
    verifier.verify(method="POST", path=path, headers=dict(req.header_items()), body=b"n1")
