"""Authentication of trigger callbacks, and parsing of what they say.

Slurm runs the notify program (:mod:`slurmtower.events.notify`) as SlurmUser; it POSTs to
``<callback url>/<sensor uuid>/<class>/<type>`` with Slurm's argument (a hostlist, a job
id or ``reconfig``) as the body. Every cluster user can read a trigger's program line
(``strigger --get``), so the URL and the UUID in it are *not* secrets. The request is
signed instead, with a key kept in a file only SlurmUser (and the receiver) can read:

``X-Slurmtower-Timestamp``
    Unix time in whole seconds when the request was signed.
``X-Slurmtower-Nonce``
    16 to 128 characters of ``[A-Za-z0-9_-]``, fresh per request.
``X-Slurmtower-Signature``
    ``v1=`` + hex HMAC-SHA256 with the key over the canonical string
    ``METHOD \\n PATH \\n TIMESTAMP \\n NONCE \\n hex(SHA-256(body))``.

:meth:`CallbackVerifier.verify` raises :class:`~slurmtower.errors.InvalidInput` (400)
for a missing or malformed header, and :class:`~slurmtower.errors.AuthenticationError`
(401) for a stale timestamp, a bad signature or a replayed nonce; the latter carries
``reason`` = ``stale`` / ``bad_signature`` / ``replayed`` in its ``extra``. Nonces are
remembered (in the event store, so across restarts) until the request's timestamp
leaves the clock-skew window, after which the timestamp check alone refuses a replay.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from slurmtower.errors import AuthenticationError, ConfigError, InvalidInput
from slurmtower.models.event import SENSOR_TRIGGERED, Event
from slurmtower.nodeset import NodeSet

__all__ = [
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "MIN_KEY_BYTES",
    "TRIGGER_CLASSES",
    "CallbackVerifier",
    "MemoryNonceStore",
    "NonceStore",
    "TriggerCallback",
    "VerifiedCallback",
    "canonical_request",
    "generate_key",
    "install_notify_program",
    "load_key",
    "notify_program_path",
    "parse_callback",
    "sign_request",
    "triggered_event",
    "write_key",
]

HEADER_TIMESTAMP = "X-Slurmtower-Timestamp"
HEADER_NONCE = "X-Slurmtower-Nonce"
HEADER_SIGNATURE = "X-Slurmtower-Signature"
MIN_KEY_BYTES = 16
SIGNATURE_VERSION = "v1"

#: Resource classes of Slurm triggers a callback URL may name.
TRIGGER_CLASSES = frozenset({"node", "job", "reconfig", "slurmctld", "slurmdbd", "database", "burst_buffer"})

_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
#: A signed request's timestamp header: Unix seconds.
TIMESTAMP_RE = re.compile(r"^[0-9]{1,12}$")
_SIGNATURE = re.compile(r"^v1=([0-9a-f]{64})$")
_WORD = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")
MAX_BODY_BYTES = 64 * 1024


class NonceStore(Protocol):
    """Remembers nonces; :class:`~slurmtower.events.store.EventStore` is one."""

    def remember_nonce(self, nonce: str, *, expires_at: datetime, now: datetime | None = None) -> bool: ...


class MemoryNonceStore:
    """A process-local :class:`NonceStore` (tests, tools); forgets on restart."""

    def __init__(self) -> None:
        self._seen: dict[str, datetime] = {}

    def remember_nonce(self, nonce: str, *, expires_at: datetime, now: datetime | None = None) -> bool:
        now = now or datetime.now(UTC)
        self._seen = {n: exp for n, exp in self._seen.items() if exp >= now}
        if nonce in self._seen:
            return False
        self._seen[nonce] = expires_at
        return True


# -- keys -------------------------------------------------------------------------------


def load_key(path: str | os.PathLike[str]) -> bytes:
    """Read the shared HMAC key (the file's bytes, surrounding whitespace stripped).

    Raises :class:`ConfigError` if the file is missing, unreadable, shorter than
    ``MIN_KEY_BYTES``, or readable or writable by "other" (it must be readable only by
    SlurmUser, and by the receiver's group if it runs as another user).
    """
    p = Path(path)
    try:
        st = p.stat()
        key = p.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read callback key file {p}: {exc.strerror}", key="events.key_file"
        ) from exc
    if st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        raise ConfigError(
            f"callback key file {p} is accessible by other users (mode {stat.S_IMODE(st.st_mode):o}); "
            "chmod 0600 or 0640",
            key="events.key_file",
        )
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"callback key in {p} is shorter than {MIN_KEY_BYTES} bytes", key="events.key_file")
    return key


def generate_key(path: str | os.PathLike[str], *, owner: str | None = None, group: str | None = None) -> Path:
    """Create a new random key file (mode 0600, 256 bits as hex) unless one exists.

    ``owner``/``group`` (names) are applied with ``chown`` when given (needs root);
    the file is created with the restrictive mode from the start, never widened.
    Returns the path.
    """
    p = Path(path)
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
    if owner is not None:
        shutil.chown(p, user=owner)
    if group is not None:
        shutil.chown(p, group=group)
    return p


def write_key(path: str | os.PathLike[str], key: str, *, owner: str | None = None) -> Path:
    """Write ``key`` to the key file atomically (a new file of mode 0600, then renamed over
    the old one), owned by ``owner`` when given: the deployment's key, kept in its store."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.strip() + "\n")
    if owner is not None:
        shutil.chown(tmp, user=owner)
    os.replace(tmp, p)
    return p


# -- signing ----------------------------------------------------------------------------


def canonical_request(method: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """The bytes that are signed: method, path, timestamp, nonce and the body's SHA-256."""
    digest = hashlib.sha256(body).hexdigest()
    return "\n".join([method.upper(), path, timestamp, nonce, digest]).encode()


def sign_request(
    key: bytes,
    method: str,
    path: str,
    body: bytes,
    *,
    timestamp: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The three authentication headers for a request (what the notify program sends)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    nonce = nonce or secrets.token_hex(16)
    mac = hmac.new(key, canonical_request(method, path, ts, nonce, body), hashlib.sha256).hexdigest()
    return {HEADER_TIMESTAMP: ts, HEADER_NONCE: nonce, HEADER_SIGNATURE: f"{SIGNATURE_VERSION}={mac}"}


@dataclass(frozen=True)
class VerifiedCallback:
    """An authenticated request: when it was signed and with which nonce."""

    signed_at: datetime
    nonce: str


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """The header ``name``, stripped (``None``: absent or empty). Mapping lookups are
    case-sensitive; HTTP header names are not."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value.strip() or None
    return None


def _header(headers: Mapping[str, str], name: str) -> str:
    value = header_value(headers, name)
    if value is None:
        raise InvalidInput(f"missing {name} header", param=name)
    return value


class CallbackVerifier:
    """Checks the signature, freshness and uniqueness of trigger callbacks.

    Args:
        key: the shared key (:func:`load_key`).
        nonces: where seen nonces are remembered (the event store).
        max_clock_skew: seconds a timestamp may differ from now, either way
            (``EventSettings.max_clock_skew``).
        clock: returns the current time (tests).
    """

    def __init__(
        self,
        key: bytes,
        nonces: NonceStore,
        *,
        max_clock_skew: float = 60.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(f"callback key shorter than {MIN_KEY_BYTES} bytes", key="events.key_file")
        self._key = key
        self._nonces = nonces
        self._skew = timedelta(seconds=max_clock_skew)
        self._clock = clock or (lambda: datetime.now(UTC))

    def verify(self, *, method: str, path: str, headers: Mapping[str, str], body: bytes) -> VerifiedCallback:
        """Authenticate one request, remembering its nonce.

        Raises :class:`InvalidInput` (400) for missing or malformed headers, and
        :class:`AuthenticationError` (401, ``extra["reason"]`` = ``stale``,
        ``bad_signature`` or ``replayed``) for a request that must not be trusted.
        """
        ts_text = _header(headers, HEADER_TIMESTAMP)
        nonce = _header(headers, HEADER_NONCE)
        sig_text = _header(headers, HEADER_SIGNATURE)
        if not TIMESTAMP_RE.match(ts_text):
            raise InvalidInput(f"{HEADER_TIMESTAMP} must be Unix seconds", param=HEADER_TIMESTAMP)
        if not _NONCE.match(nonce):
            raise InvalidInput(f"{HEADER_NONCE} must be 16-128 of [A-Za-z0-9_-]", param=HEADER_NONCE)
        sig = _SIGNATURE.match(sig_text)
        if sig is None:
            raise InvalidInput(f"{HEADER_SIGNATURE} must be v1=<64 hex digits>", param=HEADER_SIGNATURE)
        now = self._clock()
        signed_at = datetime.fromtimestamp(int(ts_text), UTC)
        if abs(now - signed_at) > self._skew:
            raise AuthenticationError(
                "callback timestamp outside the allowed clock skew", reason="stale", header=HEADER_TIMESTAMP
            )
        expected = hmac.new(
            self._key, canonical_request(method, path, ts_text, nonce, body), hashlib.sha256
        ).hexdigest()
        if not hmac.compare_digest(expected, sig.group(1)):
            raise AuthenticationError("callback signature does not match", reason="bad_signature")
        # Remember only authenticated nonces, so forged requests cannot fill the table.
        if not self._nonces.remember_nonce(nonce, expires_at=signed_at + self._skew, now=now):
            raise AuthenticationError("callback nonce already used", reason="replayed")
        return VerifiedCallback(signed_at=signed_at, nonce=nonce)


# -- what a callback says ---------------------------------------------------------------


@dataclass(frozen=True)
class TriggerCallback:
    """A parsed callback: ``POST /<uuid>/<class>/<type>`` with Slurm's argument as body.

    ``nodes`` is set for node triggers (the hostlist Slurm passed), ``job_id`` for job
    triggers; ``argument`` is the raw text either way.
    """

    sensor_uuid: str
    resource_class: str
    trigger_type: str
    argument: str
    nodes: NodeSet | None = None
    job_id: str | None = None


def parse_callback(
    path: str, body: bytes, *, sensor_uuid: str | None = None, prefix: str = ""
) -> TriggerCallback:
    """Parse a callback's path and body (after :meth:`CallbackVerifier.verify`).

    Args:
        path: the request path, ``[prefix]/<uuid>/<class>/<type>``.
        body: Slurm's argument (``n[3-4]``, ``17``, ``reconfig``), UTF-8.
        sensor_uuid: if given, the UUID the path must carry (the running sensor's).
        prefix: path prefix the receiver is mounted under.

    Raises :class:`InvalidInput` for a malformed path or body; for another sensor's UUID
    (a stale trigger left by an earlier sensor) it has ``param="uuid"``.
    """
    if prefix and not path.startswith(prefix.rstrip("/") + "/"):
        raise InvalidInput(f"callback path must start with {prefix}", param="path")
    rest = path[len(prefix.rstrip("/")) :] if prefix else path
    parts = rest.strip("/").split("/")
    if len(parts) != 3:
        raise InvalidInput("callback path must be /<uuid>/<class>/<type>", param="path")
    raw_uuid, klass, kind = parts
    try:
        parsed_uuid = str(uuid.UUID(raw_uuid))
    except ValueError as exc:
        raise InvalidInput("callback path does not start with a UUID", param="uuid") from exc
    if sensor_uuid is not None and parsed_uuid != str(uuid.UUID(sensor_uuid)):
        raise InvalidInput("callback for another sensor", param="uuid", sensor_uuid=parsed_uuid)
    if klass not in TRIGGER_CLASSES:
        raise InvalidInput(f"unknown trigger class {klass!r}", param="class")
    if not _WORD.match(kind):
        raise InvalidInput("malformed trigger type", param="type")
    if len(body) > MAX_BODY_BYTES:
        raise InvalidInput("callback body too large", param="body")
    try:
        argument = body.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise InvalidInput("callback body is not UTF-8", param="body") from exc
    nodes: NodeSet | None = None
    job_id: str | None = None
    if klass == "node":
        if not argument:
            raise InvalidInput("node callback without a node list", param="body")
        nodes = NodeSet(argument, param="body")
    elif klass == "job":
        if not _JOB_ID.match(argument):
            raise InvalidInput("job callback without a job id", param="body")
        job_id = argument
    return TriggerCallback(parsed_uuid, klass, kind, argument, nodes, job_id)


def triggered_event(callback: TriggerCallback, *, time: datetime | None = None) -> Event:
    """The ``slurm.sensor.trigger.triggered`` event for a callback (the seed's payload
    ``uuid``, ``class``, ``type``, plus ``argument`` and the node list)."""
    payload: dict[str, object] = {
        "uuid": callback.sensor_uuid,
        "class": callback.resource_class,
        "type": callback.trigger_type,
        "argument": callback.argument,
    }
    if callback.nodes is not None:
        payload["nodes"] = list(callback.nodes)
    if callback.job_id is not None:
        payload["job_id"] = callback.job_id
    return Event(type=SENSOR_TRIGGERED, time=time or datetime.now(UTC), source="trigger", payload=payload)


# -- the notify program -----------------------------------------------------------------


def notify_program_path() -> Path:
    """Where the notify program's source lives inside the installed package."""
    return Path(__file__).with_name("notify.py")


def install_notify_program(dest: str | os.PathLike[str], *, owner: str | None = None) -> Path:
    """Copy the notify program to ``dest`` (mode 0755) so SlurmUser can execute it.

    The file is self-contained (standard library only), so it runs under any
    ``python3`` on the controller host. Replaces ``dest`` atomically.
    """
    target = Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copyfile(notify_program_path(), tmp)
    os.chmod(tmp, 0o755)  # noqa: S103 - executable by SlurmUser; holds no secret
    if owner is not None:
        shutil.chown(tmp, user=owner)
    os.replace(tmp, target)
    return target
