"""``make run``'s command (scripts/run.sh): the service on the local cluster, and once it answers,
one block saying where to go: the dashboard, the API, how to log in, how to stop."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from slurmtower.devcluster import DevCluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_make_run_says_where_to_go_and_stops_on_ctrl_c(devcluster: DevCluster, tmp_path: Path) -> None:
    port = _free_port()
    env = {**devcluster.command_env(), "SLURMTOWER_API__PORT": str(port), "SLURMTOWER_STATE_DIR": str(tmp_path),
           "PATH": os.environ["PATH"]}
    os.chmod(tmp_path, 0o755)  # noqa: S103 - the sensor's notify program runs as SlurmUser
    proc = subprocess.Popen(["bash", "scripts/run.sh"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        end = time.monotonic() + 120
        while time.monotonic() < end and not any(line.startswith("  Stop:") for line in seen):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            seen.append(line.rstrip("\n"))
        text = "\n".join(seen)
        assert "slurmtower is running." in text, text
        assert f"  Dashboard   http://127.0.0.1:{port}/ui" in text
        assert f"  API         http://127.0.0.1:{port}/docs" in text
        tokens = devcluster.demo_tokens()
        for role, token in tokens.items():
            assert re.search(rf"^    {role}\s+{re.escape(token)}$", text, re.M), role
        # the block comes once the service answers: its addresses work, the tokens log in
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
        queue = httpx.get(f"http://127.0.0.1:{port}/queue", timeout=30,
                          headers={"Authorization": f"Bearer {tokens['reader']}"})
        assert queue.status_code == 200, queue.text[:200]
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at the terminal
        assert proc.wait(60) == 0
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
