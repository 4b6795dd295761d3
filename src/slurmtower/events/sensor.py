"""The sensor: Slurm triggers ring the doorbell, a poll of the node states tells the truth.

Lifecycle (:class:`Sensor`):

1. :meth:`Sensor.start` installs the notify program and the shared key where SlurmUser can
   execute / read them (key mode 0600, owned by SlurmUser), clears every trigger an earlier
   sensor of this installation left behind (recognised by the notify program's path in the
   trigger's program line, whatever UUID it carried), arms PERM triggers as SlurmUser, then
   records a ``startup`` observation (transitions that happened while no sensor ran) and
   ``slurm.sensor.trigger.up``.
2. Every ``events.poll_interval`` seconds (:meth:`Sensor.poll`) and on every authenticated
   callback (:meth:`Sensor.handle_callback`) it reads all node states once (one
   ``sinfo -O`` that folds nodes sharing a state into one line: a few lines at 5,000 nodes;
   when Slurm prints what was recorded last, the poll ends there) and lets the store diff
   them against the last stored states *in the same transaction* as it appends
   the ``slurm.node.state`` events and saves the new states. So a transition is recorded
   exactly once, including those strigger never reports (drain -> resume only fires
   ``reconfig``; ``down -> idle`` after a slurmd restart), and the ones that happened while
   the sensor was down (even after ``kill -9``).
3. :meth:`Sensor.stop` clears its triggers and records ``slurm.sensor.trigger.down``.

Why ``idle`` is not armed by default: a PERM ``--idle`` trigger fires on *every* 16 s pass
for as long as a node stays idle (measured on 22.05), so it is a 16 s heartbeat, not an
event. The poll already gives faster detection; add ``idle`` to
``events.node_trigger_events`` if you want it anyway.

Callbacks that fail authentication are refused (401, or 400 when malformed) and each one is
recorded as a ``slurmtower.security`` event. The rule engine, when configured, runs over
the log from its stored cursor after every observation.

Observations are serialised by one lock per sensor: a callback and a poll never interleave
"read Slurm" and "record", so an older reading can never be recorded after a newer one.
Run one sensor per store (``serve`` *or* ``slurmtower sensor``).
"""

from __future__ import annotations

import logging
import os
import pwd
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmtower.actions.ownership import reason_owner as owner_of
from slurmtower.errors import AuthenticationError, ConfigError, InvalidInput, SlurmtowerError
from slurmtower.events.callback import (
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    CallbackVerifier,
    generate_key,
    install_notify_program,
    load_key,
    parse_callback,
    triggered_event,
    write_key,
)
from slurmtower.events.store import EventStore
from slurmtower.events.transitions import NodeSnapshot
from slurmtower.models import Node
from slurmtower.models.event import SECURITY, SENSOR_DOWN, SENSOR_UP, Event
from slurmtower.settings import Settings
from slurmtower.slurm import SlurmClient
from slurmtower.store.deployment import deployment_value

__all__ = [
    "ArmedTrigger",
    "Sensor",
    "callback_url",
    "notify_program_file",
    "reason_owner",
    "snapshot_of",
]

log = logging.getLogger(__name__)

#: A node trigger event name -> the callback's trigger type (the seed's names).
_NODE_EVENTS = ("down", "drained", "up", "fail", "idle")

#: Refused callbacks are aggregated per source address over windows of this many seconds.
REFUSAL_WINDOW = 60.0


def notify_program_file(settings: Settings) -> Path:
    """Where the notify program is installed for SlurmUser."""
    return settings.events.notify_program or settings.state_dir / "slurmtower-notify.py"


def callback_url(settings: Settings) -> str:
    """Base URL the notify program posts to (``http://host:port``)."""
    port = settings.events.callback_port or settings.api.port
    host = settings.events.callback_host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _ownership_parser() -> Callable[[Node], str | None] | None:
    # The drain-ownership tag ("... [slurmtower:alice@cli]") is parsed by the actions package.
    return owner_of


def reason_owner(node: Node, parser: Callable[[Node], str | None] | None = None) -> str | None:
    """Who owns a node's reason: from the drain-ownership tag parser when available
    (``slurmtower:alice@cli``, ``user:root``), else the user Slurm recorded as its setter."""
    if not node.reason:
        return None
    if parser is not None:
        return parser(node)
    return node.reason_set_by_user or None


def snapshot_of(node: Node, parser: Callable[[Node], str | None] | None = None) -> NodeSnapshot:
    """The part of a node the sensor compares and stores."""
    return NodeSnapshot(
        state=str(node.state.value),
        flags=frozenset(node.flags),
        reason=node.reason or None,
        reason_owner=reason_owner(node, parser),
    )


@dataclass(frozen=True)
class ArmedTrigger:
    """A trigger this sensor set: Slurm's id, the strigger event and the program line."""

    trigger_id: int
    event: str
    program: str


class Sensor:
    """Node-state sensor over one Slurm cluster and one event store.

    Args:
        settings: the ``events`` section, ``state_dir``, ``slurm.slurm_user`` and the API
            port are used.
        client: the Slurm client (node reads, triggers).
        store: the event store.
        rules: a rule engine run after every observation (``None``: no rules).
        arm_triggers: set Slurm triggers at start (off: poll only, e.g. tests of callbacks).
        clock: current time (tests).
    """

    def __init__(
        self,
        settings: Settings,
        client: SlurmClient,
        store: EventStore,
        *,
        rules: Any = None,
        arm_triggers: bool = True,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.store = store
        self.rules = rules
        self.arm_triggers = arm_triggers
        self._uuid: str | None = None
        #: Whether this process leads the deployment (rules run only there); set by the
        #: service (``None``: a sensor alone, which always does).
        self.leading: Callable[[], bool] | None = None
        #: This process's name in the events it records (``host:pid:...``).
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        self._clock = clock or (lambda: datetime.now(UTC))
        self._observe_lock = threading.Lock()
        self._rules_lock = threading.Lock()
        self._owner = _ownership_parser()
        self._verifier: CallbackVerifier | None = None
        self.armed: list[ArmedTrigger] = []
        self.started = False
        self.last_poll: float | None = None
        #: The node list recorded last (the sensor is the store's only recorder of states).
        self._recorded: list[Node] | None = None
        self.listeners: list[Callable[[list[Event]], None]] = []
        #: Called with every poll's nodes and the time they were read (the live nodes' states
        #: between their full reads: SnapshotCache.node_states_seen); from the polling thread.
        self.poll_observers: list[Callable[[list[Node], datetime], None]] = []
        #: Refused callbacks counted per (address, minute) until the minute is over.
        self._refusals: dict[tuple[str, int], dict[str, Any]] = {}
        self._refusals_lock = threading.Lock()

    def _deployment_name(self, name: str) -> str:
        """``name`` in the store's deployment values for this sensor's cluster (the default
        cluster's as before; ``sensor_uuid@gpu`` for another): a sensor, its UUID and its
        callback key per cluster."""
        key = self.settings.cluster_key()
        return f"{name}@{key}" if key else name

    @property
    def uuid(self) -> str:
        """The deployment's sensor UUID: one for every process on this store (any of them
        accepts a callback), kept in the store so it survives restarts and failovers."""
        if self._uuid is None:
            value = deployment_value(self.store.engine, self._deployment_name("sensor_uuid"),
                                     lambda: str(uuid.uuid4()), schema=self.store.schema)
            assert value is not None
            self._uuid = value
        return self._uuid

    # -- files --------------------------------------------------------------------------

    @property
    def key_file(self) -> Path:
        return self.settings.effective_key_file()

    @property
    def notify_program(self) -> Path:
        return notify_program_file(self.settings)

    def _slurm_user(self) -> str | None:
        name = self.settings.slurm.slurm_user
        try:
            pwd.getpwnam(name)
        except KeyError:
            return None
        return name

    def ensure_key(self) -> bytes:
        """The deployment's callback key, in the store and in the key file (0600, owned by
        SlurmUser when running as root) for the notify program.

        The first process keeps the key of an existing key file (an upgrade keeps its
        triggers working) or a new one in the store; every process then verifies callbacks
        with the stored key and rewrites its key file when it differs.
        """
        owner = self._slurm_user() if os.geteuid() == 0 else None

        def from_file() -> str:
            generate_key(self.key_file, owner=owner)
            return load_key(self.key_file).decode()

        key = deployment_value(self.store.engine, self._deployment_name("sensor_key"), from_file,
                               schema=self.store.schema)
        assert key is not None
        try:
            current = load_key(self.key_file).decode()
        except ConfigError:
            current = None
        if current != key:
            write_key(self.key_file, key, owner=owner)
        return key.encode()

    def verifier(self) -> CallbackVerifier:
        """The callback verifier (loads or creates the key on first use)."""
        if self._verifier is None:
            self._verifier = CallbackVerifier(
                self.ensure_key(), self.store, max_clock_skew=self.settings.events.max_clock_skew
            )
        return self._verifier

    def install(self) -> Path:
        """Install the notify program and the key for SlurmUser; returns the program path."""
        self.verifier()
        owner = self._slurm_user() if os.geteuid() == 0 else None
        return install_notify_program(self.notify_program, owner=owner)

    # -- triggers -----------------------------------------------------------------------

    def program_line(self, resource_class: str, trigger_type: str) -> str:
        """The ``--program`` value for one trigger (the key is never on it)."""
        words = [
            str(self.settings.events.notify_python),
            str(self.notify_program),
            "--url",
            callback_url(self.settings),
            "--key-file",
            str(self.key_file),
            "--sensor-uuid",
            self.uuid,
            "--timeout",
            "3",
            "--deadline",
            "10",
            resource_class,
            trigger_type,
        ]
        # strigger splits the program line on blanks itself; no word here has one.
        return " ".join(words)

    def _is_ours(self, program: str) -> bool:
        words = program.split()
        if len(words) < 2:
            return False
        if words[1] == str(self.notify_program):
            return True
        if "--sensor-uuid" in words and words.index("--sensor-uuid") + 1 < len(words):
            # Armed by another process of this deployment (another host's state dir): ours
            # to keep or replace, never a second set.
            return words[words.index("--sensor-uuid") + 1] == self.uuid
        # An orphan: the notify program of a slurmtower whose state dir is gone (its
        # trigger can only fail every time it fires).
        return words[1].endswith("/slurmtower-notify.py") and not Path(words[1]).exists()

    def clear_stale_triggers(self) -> list[int]:
        """Clear every trigger whose program is this installation's notify program."""
        stale = [t.trigger_id for t in self.client.triggers() if self._is_ours(t.program)]
        if stale:
            self.client.clear_triggers(stale)
        return stale

    def _wanted_triggers(self) -> list[tuple[str, str, int | None]]:
        wanted: list[tuple[str, str, int | None]] = []
        for ev in self.settings.events.node_trigger_events:
            if ev not in _NODE_EVENTS:
                raise ConfigError(
                    f"events.node_trigger_events: {ev!r} is not one of {', '.join(_NODE_EVENTS)}",
                    key="events.node_trigger_events",
                )
            wanted.append(("node", ev, None))
        wanted.append(("reconfig", "reconfig", None))
        wanted.extend(("job", "fini", job_id) for job_id in self.settings.events.job_triggers)
        return wanted

    def arm(self) -> list[ArmedTrigger]:
        """Make the armed triggers exactly the wanted ones: keep those of this deployment
        that are already set (a new leader after a failover finds its predecessor's), arm
        the missing ones, clear every other trigger of this installation (stale UUIDs,
        duplicates)."""
        wanted = {(self.program_line(klass, ev), "" if job_id is None else str(job_id)): (ev, job_id)
                  for klass, ev, job_id in self._wanted_triggers()}
        kept: dict[tuple[str, str], ArmedTrigger] = {}
        stale: list[int] = []
        for trig in self.client.triggers():
            if not self._is_ours(trig.program):
                continue
            key = (trig.program, trig.res_id if trig.res_type == "job" else "")
            ev_job = wanted.get(key)
            if ev_job is None or key in kept or trig.is_permanent != (ev_job[1] is None):
                stale.append(trig.trigger_id)
            else:
                kept[key] = ArmedTrigger(trig.trigger_id, ev_job[0], trig.program)
        if stale:
            self.client.clear_triggers(stale)
        armed: list[ArmedTrigger] = []
        for key, (ev, job_id) in wanted.items():
            if key in kept:
                armed.append(kept[key])
                continue
            # A job trigger is one-shot by nature (a job ends once).
            tid = self.client.set_trigger(event=ev, program=key[0], job_id=job_id, perm=job_id is None)
            armed.append(ArmedTrigger(tid, ev, key[0]))
        self.armed = armed
        log.info("sensor %s: %d triggers kept, %d armed, %d stale cleared", self.uuid, len(kept),
                 len(armed) - len(kept), len(stale))
        return armed

    def disarm(self) -> None:
        """Clear the triggers this sensor armed (and any other stale ones of ours)."""
        self.clear_stale_triggers()
        self.armed = []

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> list[Event]:
        """Install, arm, record the ``startup`` observation and ``slurm.sensor.trigger.up``."""
        self.install()
        if self.arm_triggers:
            self.arm()
        up = Event(
            type=SENSOR_UP,
            time=self._clock(),
            source="sensor",
            payload={
                "uuid": self.uuid,
                "process": self.process,
                "triggers": [{"id": t.trigger_id, "event": t.event} for t in self.armed],
                "poll_interval": self.settings.events.poll_interval,
            },
        )
        stored = self.observe("startup", extra_events=[up])
        self.started = True
        log.info("sensor %s up: %d triggers armed", self.uuid, len(self.armed))
        return stored

    def stop(self, *, disarm: bool = True) -> list[Event]:
        """Clear the triggers and record ``slurm.sensor.trigger.down`` (a clean stop).

        ``disarm=False`` leaves the triggers armed: this process stopped leading and
        another may already have taken them over.
        """
        if not self.started:
            return []
        self.started = False
        try:
            if self.arm_triggers and disarm:
                self.disarm()
        except SlurmtowerError as exc:  # still record that the sensor stopped
            log.warning("sensor %s could not clear its triggers: %s", self.uuid, exc.message)
        down = Event(type=SENSOR_DOWN, time=self._clock(), source="sensor",
                     payload={"uuid": self.uuid, "disarmed": bool(self.arm_triggers and disarm)})
        stored = self.store.append([down])
        self._notify(stored)
        return stored

    # -- observing ----------------------------------------------------------------------

    def observe(self, source: str, *, extra_events: Iterable[Event] = ()) -> list[Event]:
        """Read every node once and record the transitions since the last stored states.

        Returns the stored events (``extra_events`` first), then runs the rules.
        """
        extras = list(extra_events)
        with self._observe_lock:
            nodes = self.client.node_states()
            observed_at = self._clock()
            for observer in self.poll_observers:
                try:
                    observer(nodes, observed_at)
                except Exception:  # an observer must not break sensing
                    log.exception("poll observer failed")
            if nodes is self._recorded and not extras:
                # Slurm printed exactly what was recorded last time (the client hands back
                # the same list): nothing can have changed, skip the store's diff.
                self.last_poll = time.monotonic()
                return []
            current = {n.name: snapshot_of(n, self._owner) for n in nodes}
            stored = self.store.record_snapshot(
                current, source=source, observed_at=observed_at, extra_events=extras
            )
            self._recorded = nodes
            self.last_poll = time.monotonic()
        self._notify(stored)
        self.run_rules()
        return stored

    def poll(self) -> list[Event]:
        """One periodic observation (``source="poll"``)."""
        return self.observe("poll")

    def run_rules(self) -> None:
        """Run the rule engine over every event logged since its cursor (on the leader:
        a follower that records a callback leaves its events to the leader's next round)."""
        if self.rules is None or (self.leading is not None and not self.leading()):
            return
        with self._rules_lock:
            self.rules.process_pending()

    def _notify(self, events: list[Event]) -> None:
        if not events:
            return
        for listener in list(self.listeners):
            try:
                listener(events)
            except Exception:  # a listener must not break sensing
                log.exception("event listener failed")

    # -- callbacks ----------------------------------------------------------------------

    def handle_callback(
        self,
        *,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        client_addr: str | None = None,
    ) -> list[Event]:
        """Authenticate a trigger callback, record it, and observe (the doorbell).

        Raises :class:`InvalidInput` (400) or :class:`AuthenticationError` (401) after
        recording a ``slurmtower.security`` event for the refused call.
        """
        try:
            names = {k.lower() for k in headers}
            if not names & {HEADER_SIGNATURE.lower(), HEADER_NONCE.lower(), HEADER_TIMESTAMP.lower()}:
                # No attempt at authentication at all: a forged or foreign call, not a
                # malformed one of ours.
                raise AuthenticationError("callback is not signed", reason="unsigned")
            self.verifier().verify(method=method, path=path, headers=headers, body=body)
            callback = parse_callback(path, body, sensor_uuid=self.uuid)
        except (InvalidInput, AuthenticationError) as exc:
            self.record_refusal(exc, method=method, path=path, client_addr=client_addr)
            raise
        return self.observe("trigger", extra_events=[triggered_event(callback, time=self._clock())])

    def record_refusal(
        self, exc: SlurmtowerError, *, method: str, path: str, client_addr: str | None
    ) -> Event | None:
        """Record a refused callback as a ``slurmtower.security`` event, aggregated.

        The first refusal from an address in a minute is recorded at once (and logged);
        the next ones of that minute are only counted, and recorded as one event with their
        count when the minute is over (:meth:`flush_refusals`): a flood of forged calls
        costs two rows and two log lines per source and minute, not one per request.
        Returns the event stored now, if any.
        """
        reason = exc.extra.get("reason") or ("malformed" if exc.http_status == 400 else "refused")
        now = self._clock()
        minute = int(now.timestamp() // REFUSAL_WINDOW)
        key = (client_addr or "?", minute)
        self.flush_refusals(now)
        with self._refusals_lock:
            window = self._refusals.get(key)
            if window is not None:
                window["count"] += 1
                window["reasons"][reason] = window["reasons"].get(reason, 0) + 1
                window["last"] = now
                return None
            self._refusals[key] = {"count": 0, "reasons": {}, "first": now, "last": now, "path": path[:500],
                                   "method": method}
        payload: dict[str, Any] = {
            "what": "callback_refused",
            "status": exc.http_status,
            "reason": reason,
            "detail": exc.message,
            "param": exc.extra.get("param"),
            "method": method,
            "path": path[:500],
            "client": client_addr,
            "count": 1,
        }
        event = Event(type=SECURITY, time=now, source="security", payload=payload)
        stored = self.store.append([event])
        log.warning("refused trigger callback %s %s from %s: %s (more from this address in the next "
                    "minute are counted, not logged)", method, path[:200], client_addr, exc.message)
        self._notify(stored)
        return stored[0]

    def flush_refusals(self, now: datetime | None = None) -> list[Event]:
        """Record the counted refusals of every minute that is over (one event per source)."""
        now = now or self._clock()
        minute = int(now.timestamp() // REFUSAL_WINDOW)
        with self._refusals_lock:
            done = [k for k in self._refusals if k[1] < minute]
            closed = [(k, self._refusals.pop(k)) for k in done]
        events = [
            Event(type=SECURITY, time=now, source="security", payload={
                "what": "callback_refused", "repeated": True, "client": addr, "count": w["count"],
                "reasons": w["reasons"], "method": w["method"], "path": w["path"],
                "first": w["first"].isoformat(), "last": w["last"].isoformat(),
                "window_start": datetime.fromtimestamp(m * REFUSAL_WINDOW, UTC).isoformat(),
            })
            for (addr, m), w in closed if w["count"] > 0
        ]
        if not events:
            return []
        stored = self.store.append(events)
        for ev in stored:
            log.warning("refused %d more trigger callbacks from %s in the minute from %s", ev.payload["count"],
                        ev.payload["client"], ev.payload["window_start"])
        self._notify(stored)
        return stored

    def status(self) -> dict[str, Any]:
        """What the sensor is doing (for ``/events/sensor``)."""
        return {
            "uuid": self.uuid,
            "process": self.process,
            "leading": self.leading() if self.leading is not None else self.started,
            "started": self.started,
            "triggers": [{"id": t.trigger_id, "event": t.event} for t in self.armed],
            "poll_interval": self.settings.events.poll_interval,
            "seconds_since_poll": None if self.last_poll is None else time.monotonic() - self.last_poll,
            "callback_url": callback_url(self.settings),
            "notify_program": str(self.notify_program),
            "rules": 0 if self.rules is None else len(self.rules.rules),
        }

