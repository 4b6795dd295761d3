"""/ready: public, so cached (one check per 5 s for every caller), bounded, and never showing
why a check failed."""

from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from slurmtower.api import create_app
from slurmtower.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.cluster


def test_ready_checks_slurm_once_for_many_callers(settings: Settings) -> None:
    settings.events.sensor_enabled = False
    app = create_app(settings)
    services = app.state.services
    real_ping = services.client.ping
    calls = []
    lock = threading.Lock()

    def counted() -> bool:
        with lock:
            calls.append(time.monotonic())
        return bool(real_ping())

    services.client.ping = counted  # the real `scontrol ping`, counted
    with TestClient(app) as api, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _i: api.get("/ready"), range(40)))
    assert {a.status_code for a in answers} == {200}
    assert all(a.json()["slurmctld"] is True for a in answers)
    assert len(calls) == 1, calls


def test_ready_says_not_ok_without_error_text_and_in_bounded_time(settings: Settings, tmp_path: Path) -> None:
    """slurmctld unreachable (a slurm.conf pointing at a port where nothing listens)."""
    assert settings.slurm.slurm_conf is not None
    conf = Path(settings.slurm.slurm_conf).read_text()
    lines = [("SlurmctldPort=9" if line.startswith("SlurmctldPort=") else line) for line in conf.splitlines()]
    dead = tmp_path / "slurm.conf"
    dead.write_text("\n".join(lines) + "\n")
    settings.slurm.slurm_conf = dead
    settings.events.sensor_enabled = False
    settings.archiver.archive_usage_load = False
    with TestClient(create_app(settings)) as api:
        t0 = time.monotonic()
        resp = api.get("/ready")
        took = time.monotonic() - t0
    assert resp.status_code == 503
    body = resp.json()
    assert body["ready"] is False and body["slurmctld"] is False
    assert set(body) <= {"ready", "slurmctld", "accounting", "snapshot", "restored", "leads"}, body  # no error text
    assert body["restored"] == []  # a list of resource names, nothing else
    assert took <= 5.0, took
