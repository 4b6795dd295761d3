"""The typed service container: explicit parts, one action catalogue, no silent typos."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtower.api import create_app
from slurmtower.errors import ConfigError
from slurmtower.runtime import Services
from slurmtower.settings import Settings


def test_a_mistyped_route_module_is_an_error_at_start(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="unknown route module 'evnets'"):
        create_app(settings, route_modules=("health", "evnets"))


def test_routes_and_rules_share_one_action_catalogue(settings: Settings, tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    settings.events.rules_dir = rules
    settings.events.sensor_enabled = False
    app = create_app(settings)
    services: Services = app.state.services
    assert services.catalogue is not None  # the actions module built it
    assert services.sensor is not None and services.sensor.rules is not None
    dispatcher = services.sensor.rules._dispatcher
    # The rule engine's dispatcher runs the routes' catalogue: one store, one accounting reader.
    envelope = dispatcher("slurm.config.get", {"item": "cluster_name"}, {"rule": "t"})
    assert envelope["status"] == "succeeded"
    assert services.action_catalogue() is services.catalogue
    # The archiver, the execution purge, the maintenance runs and the requests' expiry are the
    # leader's; every process tails the event log for its SSE clients, keeps the snapshots it
    # read and hands the memory its rounds freed back to the system.
    assert {task.name: task.needs_leader for task in services.background} == {
        "snapshot-keeper": False, "malloc-trim": False, "load-archiver": True, "execution-purge": True, "maintenance": True,
        "request-expiry": True, "event-feed": False}
    assert {task.name: task.role for task in services.background if task.needs_leader} == {
        "load-archiver": "archiver", "execution-purge": "archiver", "maintenance": "archiver",
        "request-expiry": "archiver"}


def test_each_role_is_led_once_and_a_process_leads_only_what_it_runs(tmp_path: Path) -> None:
    """A ``slurmtower sensor`` process (sensor only) and ``serve`` processes with the sensor
    off (archiver only) on one store each lead their own role; two of a kind, one runs."""
    import asyncio

    from slurmtower.runtime import BackgroundTask

    ran: list[str] = []

    def services_with(*roles: str) -> Services:
        settings = Settings(state_dir=tmp_path, store_url=f"sqlite:///{tmp_path / 'store.db'}")
        services = Services(settings=settings, client=None)  # type: ignore[arg-type]
        for role in roles:
            async def run(role: str = role, me: Services = services) -> float:
                ran.append(f"{role}@{id(me)}")
                return 60.0
            services.background.append(BackgroundTask(name=role, run=run, role=role))
        return services

    async def main() -> None:
        sensor_proc, serve1, serve2 = services_with("sensor"), services_with("archiver"), services_with("archiver")
        for s in (sensor_proc, serve1, serve2):
            await s.start_background()
        await asyncio.sleep(0.2)
        assert sensor_proc.leads("sensor") and serve1.leads("archiver") and not serve2.leading
        assert sorted(r.split("@")[0] for r in ran) == ["archiver", "sensor"]
        await serve1.stop_background()  # a clean stop hands the archiver over
        await serve2._elect()
        assert serve2.leads("archiver")
        for s in (sensor_proc, serve2):
            await s.stop_background()

    asyncio.run(main())
