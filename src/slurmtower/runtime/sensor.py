"""The sensor's wiring: the event store, the sensor with its rule engine, and their periodic
work (the sensor's rounds, refused-callback counts, forwarders), for ``slurmtower serve``
and ``slurmtower sensor`` alike."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from slurmtower.errors import ConfigError
from slurmtower.events.forward import forwarders
from slurmtower.events.sensor import Sensor, callback_url, notify_program_file
from slurmtower.events.store import EventStore
from slurmtower.rules import RuleEngine, WebhookOptions, load_rules
from slurmtower.runtime.services import BackgroundTask
from slurmtower.settings import Settings
from slurmtower.slurm.client import SlurmClient

if TYPE_CHECKING:
    from slurmtower.live.budget import PollPace
    from slurmtower.runtime.services import Services

__all__ = [
    "LazyDispatcher",
    "build_rule_engine",
    "build_sensor",
    "forward_tasks",
    "refusals_task",
    "rules_config",
    "sensor_task",
]

log = logging.getLogger(__name__)


def _catalogue_dispatcher(settings: Settings, client: SlurmClient) -> Any:
    """The action catalogue as the rule engine's dispatcher (rules act as principal ``<rule>``,
    via ``rule``: drains they make carry ``[slurmtower:<rule>@rule]``)."""
    from slurmtower.actions import Catalogue, rule_dispatcher  # deferred: the catalogue, first rule only

    return rule_dispatcher(Catalogue.from_settings(settings, client=client))


class LazyDispatcher:
    """The process's catalogue as the rule engine's dispatcher, built on the first rule run."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._dispatch: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._dispatch is None:
            from slurmtower.actions import rule_dispatcher  # deferred: the catalogue, first rule only

            self._dispatch = rule_dispatcher(self._services.action_catalogue())
        return self._dispatch(*args, **kwargs)


def rules_config(settings: Settings) -> dict[str, Any]:
    """The ``config`` mapping rules see: slurmtower's keys, then ``events.rules_config``.

    Raises :class:`ConfigError` when ``events.rules_config`` sets one of slurmtower's keys
    (a rule must not be able to point the notify program elsewhere by configuration typo).
    """
    own: dict[str, Any] = {
        "notify_program": str(notify_program_file(settings)),
        "python": str(settings.events.notify_python),
        "callback_url": callback_url(settings),
        "key_file": str(settings.effective_key_file()),
        "cluster_name": settings.cluster_name,
    }
    clash = sorted(set(own) & set(settings.events.rules_config))
    if clash:
        raise ConfigError(f"events.rules_config: {', '.join(clash)} is set by slurmtower itself",
                          key=f"events.rules_config.{clash[0]}")
    return {**own, **settings.events.rules_config}


def build_rule_engine(
    settings: Settings, store: EventStore, client: SlurmClient, *, dispatcher: Any = None
) -> Any:
    """The rule engine over ``events.rules_dir`` (``None`` when no directory is set).

    Rule files with errors are logged with their file and rule name; the others load.
    """
    if settings.events.rules_dir is None:
        return None
    rules, errors = load_rules(settings.events.rules_dir)
    for err in errors:
        log.error("rule not loaded: %s", err)
    secret = settings.events.webhook_secret
    return RuleEngine(
        rules,
        store,
        dispatcher if dispatcher is not None else _catalogue_dispatcher(settings, client),
        config=rules_config(settings),
        webhook=WebhookOptions(secret=secret.get_secret_value().encode() if secret else None),
    )


def build_sensor(
    settings: Settings,
    client: SlurmClient,
    store: EventStore | None = None,
    *,
    dispatcher: Any = None,
    arm_triggers: bool = True,
) -> Sensor:
    """A sensor over ``settings.effective_store_url()`` (or ``store``) with its rules."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    store = store or EventStore(settings.effective_store_url())
    engine = build_rule_engine(settings, store, client, dispatcher=dispatcher)
    return Sensor(settings, client, store, rules=engine, arm_triggers=arm_triggers)


def sensor_task(sensor: Sensor, leading: Any = None, *, role: str = "sensor",
                pace: PollPace | None = None) -> BackgroundTask:
    """The sensor as a background task (the leader's): start (arm triggers) once, then poll
    every ``events.poll_interval``, or as ``pace`` says (longer when a poll costs slurmctld
    more than its part of ``api.refresh_controller_share``: the rules still run on the events
    others recorded every ``events.poll_interval``); purge hourly. ``leading()`` tells at stop
    whether this process still leads: a process that lost the lead leaves the triggers to the
    new leader."""
    state: dict[str, float] = {"next_purge": 0.0, "next_poll": 0.0}

    async def run() -> float:
        loop = asyncio.get_running_loop()
        if not sensor.started:
            await asyncio.to_thread(sensor.start)
        else:
            if pace is None:
                await asyncio.to_thread(sensor.poll)
            elif loop.time() >= state["next_poll"]:
                started = loop.time()
                await asyncio.to_thread(pace.poll, sensor.poll)
                state["next_poll"] = started + pace.interval
            if sensor.rules is not None and sensor.settings.hooks.enabled:
                # Events recorded by other means (alerts posted to /hooks/*, in any process)
                # meet the rules within a round too, though no node changed.
                await asyncio.to_thread(sensor.run_rules)
        if loop.time() >= state["next_purge"]:
            days = sensor.settings.events.retention_days
            await asyncio.to_thread(sensor.store.purge, timedelta(days=days))
            state["next_purge"] = loop.time() + 3600.0
        base = sensor.settings.events.poll_interval
        if pace is None:
            return base
        return max(0.0, min(base, state["next_poll"] - loop.time()))

    async def on_stop() -> None:
        await asyncio.to_thread(sensor.stop, disarm=leading is None or bool(leading()))

    return BackgroundTask(name="sensor", run=run, on_stop=on_stop, max_backoff=60.0, needs_leader=True,
                          role=role)


def refusals_task(sensor: Sensor) -> BackgroundTask:
    """Every process: record the refused callbacks counted over minutes that are over."""

    async def run() -> float:
        await asyncio.to_thread(sensor.flush_refusals)
        return 15.0

    async def on_stop() -> None:
        await asyncio.to_thread(sensor.flush_refusals, datetime.now(UTC) + timedelta(minutes=2))

    return BackgroundTask(name="callback-refusals", run=run, on_stop=on_stop, needs_leader=False)


def forward_tasks(services: Services, store: EventStore) -> list[BackgroundTask]:
    """One task per ``hooks.forward`` target, the sensor leader's (:mod:`slurmtower.events.forward`)."""
    def registry() -> Any:
        return services.metrics.registry if services.metrics is not None else None

    settings = services.settings
    return [BackgroundTask(name=f"forward:{fwd.target.name}", run=fwd.round, on_stop=fwd.close,
                           max_backoff=settings.hooks.forward_max_backoff, role="sensor")
            for fwd in forwarders(settings, store, registry=registry)]
