"""The typed service container: explicit parts, one action catalogue, no silent typos."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtower.api import create_app
from slurmtower.api.services import Services
from slurmtower.errors import ConfigError
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
    assert [task.needs_leader for task in services.background] == [True] * len(services.background)
