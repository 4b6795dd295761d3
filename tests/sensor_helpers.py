"""A real ``slurmtower sensor`` process for the sensor and events API tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from slurmtower.devcluster import DevCluster
from slurmtower.events.store import EventStore
from slurmtower.events.transitions import NodeSnapshot
from slurmtower.models.event import NODE_STATE, Event

SLURMTOWER = str(Path(sys.executable).with_name("slurmtower"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_state_dir(cluster: DevCluster, label: str) -> Path:
    """A new state dir under the devcluster's root, not pytest's tmp (0700 for root):
    SlurmUser must be able to execute the notify program and read the key there."""
    path = cluster.root / "slurmtower" / f"{label}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    os.chmod(path, 0o755)
    return path


def serve_env(cluster: DevCluster, state_dir: Path, **settings: str) -> dict[str, str]:
    """This process's environment without slurmtower's (or prometheus_client's) variables,
    pointed at ``cluster`` with its own ``state_dir``, plus ``settings`` (``SLURMTOWER_...``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMTOWER_", "PROMETHEUS_"))}
    env.update(SLURM_CONF=str(cluster.slurm_conf), SLURMTOWER_CONFIG=str(cluster.tower_conf),
               SLURMTOWER_STATE_DIR=str(state_dir), **settings)
    return env


@dataclass
class SensorProcess:
    """``slurmtower sensor`` as a subprocess with a private state dir SlurmUser can reach."""

    cluster: DevCluster
    extra_env: dict[str, str] = field(default_factory=dict)
    state_dir: Path = field(init=False)
    port: int = field(init=False)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.state_dir = cluster_state_dir(self.cluster, "test")
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.state_dir / 'slurmtower.db'}"

    def env(self) -> dict[str, str]:
        env = serve_env(
            self.cluster, self.state_dir,
            SLURMTOWER_EVENTS__CALLBACK_PORT=str(self.port),
            SLURMTOWER_EVENTS__POLL_INTERVAL="0.5",
            # the circuit breaker off, as in conftest (tests/test_breaker.py turns it on)
            SLURMTOWER_ACTIONS__BREAKER_ENABLED="false",
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 30) -> None:
        ups_before = len(self.events(types=["slurm.sensor.trigger.up"])) if (self.state_dir / "slurmtower.db").exists() else 0
        with open(self.state_dir / "sensor.log", "ab") as log:
            self.proc = subprocess.Popen([SLURMTOWER, "sensor"], env=self.env(), stdout=log, stderr=log)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                self.proc = None
                raise AssertionError(f"sensor exited: {self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            self.stop()  # never left running (and its triggers armed) by a failed start
            raise AssertionError(f"sensor did not listen: {self.log()}")
        # Started = its own "up" event is stored (triggers armed, startup snapshot recorded);
        # after a restart the previous sensor's "up" is already there.
        try:
            self.wait_events(lambda evs: len([e for e in evs if e.type == "slurm.sensor.trigger.up"]) > ups_before,
                             timeout, "sensor up event")
        except BaseException:
            # Any failure (a store this checkout cannot open included): never left running,
            # polling slurmctld and holding its triggers, for the tests that follow.
            self.stop()
            raise

    def current_uuid(self) -> str | None:
        ups = [e for e in self.events() if e.type == "slurm.sensor.trigger.up"]
        return ups[-1].payload["uuid"] if ups else None

    def log(self) -> str:
        try:
            return (self.state_dir / "sensor.log").read_text()[-3000:]
        except OSError:
            return ""

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        # Clear any trigger a killed sensor of this test left behind.
        program = str(self.state_dir / "slurmtower-notify.py")
        env = {**os.environ, "SLURM_CONF": str(self.cluster.slurm_conf)}
        out = subprocess.run(["strigger", "--get"], capture_output=True, text=True, check=False, env=env).stdout
        for line in out.splitlines()[1:]:
            words = line.split()
            if program in words:
                subprocess.run(["strigger", "--clear", f"--id={words[0]}"], capture_output=True, check=False,
                               env=env)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    # -- reading the store ------------------------------------------------------------

    def store(self) -> EventStore:
        return EventStore(self.store_url)

    def events(self, **filters: Any) -> list[Event]:
        store = self.store()
        try:
            return store.query(limit=10000, **filters)
        finally:
            store.close()

    def node_events(self, node: str | None = None) -> list[Event]:
        return [e for e in self.events(types=[NODE_STATE]) if node is None or e.node == node]

    def known_states(self) -> dict[str, NodeSnapshot]:
        store = self.store()
        try:
            return store.load_node_states()
        finally:
            store.close()

    def wait_events(self, check: Any, timeout: float, what: str) -> list[Event]:
        end = time.monotonic() + timeout
        while True:
            evs = self.events()
            if check(evs):
                return evs
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; log: {self.log()}")
            time.sleep(0.2)


def condition(payload: dict[str, Any], prefix: str = "") -> tuple[str | None, tuple[str, ...]]:
    return payload[f"{prefix}state"], tuple(payload[f"{prefix}flags"])


def assert_chain_consistent(events: list[Event]) -> None:
    """Per node, every event starts where the previous one ended: nothing lost, nothing doubled."""
    last: dict[str, tuple[str | None, tuple[str, ...]]] = {}
    for ev in events:
        assert ev.node is not None
        before = condition(ev.payload, "previous_")
        after = condition(ev.payload)
        assert before != after, f"event {ev.id} is no transition: {ev.payload}"
        if ev.node in last:
            assert last[ev.node] == before, (
                f"event {ev.id} for {ev.node} starts at {before}, but the previous one ended at "
                f"{last[ev.node]}"
            )
        last[ev.node] = after
