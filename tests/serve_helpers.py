"""``slurmtower serve`` as a subprocess: the tests of several processes, workers and restarts."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import wait_for
from tests.sensor_helpers import SLURMTOWER, free_port


@dataclass
class ServeProcess:
    """One ``slurmtower serve --port PORT ARGS`` in a session of its own, so its process
    group holds its workers and refresh workers; stdout and stderr go to ``log_path``."""

    env: dict[str, str]
    log_path: Path
    args: Sequence[str] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, *, timeout: float = 40, what: str = "slurmtower serve",
              health: Callable[[], int] | None = None) -> None:
        """Start it and wait until ``GET /health`` answers 200 (``health``: another way to ask,
        giving the status code); fails with the log's end when the process exits first."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([SLURMTOWER, "serve", "--port", str(self.port), *self.args],
                                         env=self.env, stdout=log, stderr=log, start_new_session=True)
        probe = health or (lambda: httpx.get(f"{self.url}/health", timeout=2).status_code)

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{what} exited with {self.proc.returncode}: {self.log()}")
            try:
                return probe() == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout, 0.2, what=what)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def kill(self) -> None:
        """``kill -9`` of its whole process group (workers and refresh workers too)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 30 s; nothing when it is not running."""
        if not self.running():
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
