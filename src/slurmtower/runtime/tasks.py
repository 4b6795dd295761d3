"""The one list of slurmtower's periodic work, and who runs each task.

A task is run either by every process (``needs_leader=False``) or by the process that leads
its role (``role``): the ``sensor`` role (the sensor's rounds and its forwarders) and the
``archiver`` role (load samples, the execution purge, maintenance runs) are separate, so a
``slurmtower sensor`` process and ``serve`` processes with the sensor off each lead what they
run. Roles are elected on the store (:class:`~slurmtower.store.leader.Leadership`): the one
lease mechanism, and each role is guarded there once.

==================  ==============  ====================================================
task                runs in          what
==================  ==============  ====================================================
shared-snapshot     every process   the Redis snapshot election and rounds (shared cache)
load-archiver       archiver         one load sample per ``archiver.archive_wait_time``
malloc-trim         every process   hands freed memory back after rounds that grew it
event-feed          every process   tails the event log for this process's SSE clients
sensor              sensor           arms the triggers, polls, runs rules, purges events
callback-refusals   every process   records refused callbacks, a count per minute
forward:<target>    sensor           forwards events to ``hooks.forward`` targets
execution-purge     archiver         drops executions past ``actions.retention_days``
maintenance         archiver         moves ``slurm.node.maintain`` runs on
request-expiry      archiver         expires requests past ``approvals.request_ttl_hours`` (an event each)
==================  ==============  ====================================================
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from slurmtower.errors import SlurmUnavailable
from slurmtower.live.archive import LoadArchive, take_sample
from slurmtower.live.malloc import Trimmer
from slurmtower.runtime.sensor import forward_tasks, refusals_task, sensor_task
from slurmtower.runtime.services import BackgroundTask, Services

__all__ = ["periodic_tasks"]

log = logging.getLogger(__name__)


def periodic_tasks(services: Services, parts: Collection[str]) -> list[BackgroundTask]:
    """The periodic work of a process running ``parts`` (:data:`slurmtower.runtime.build.PARTS`),
    in start order (they stop in reverse)."""
    settings = services.settings
    tasks: list[BackgroundTask] = []
    cache = services.snapshots
    if "live" in parts and cache is not None and cache.shared is not None:
        # Every process takes part in the election (a follower must be ready to take over).
        tasks.append(BackgroundTask(name="shared-snapshot", run=cache.shared_round, on_stop=cache.shared.close,
                                    needs_leader=False))
    if "live" in parts and services.keeper is not None:
        tasks.append(BackgroundTask(name="snapshot-keeper", run=services.keeper.round, needs_leader=False,
                                    max_backoff=settings.api.keep_snapshots_interval))
    if "live" in parts and cache is not None:
        tasks.append(_trimmer(Trimmer()))
    if "archive" in parts and services.load_archive is not None and settings.archiver.archive_usage_load:
        tasks.append(_archiver(services, services.load_archive))
    if "events" in parts and services.event_store is not None and services.sensor is not None:
        feed = services.event_feed
        if feed is not None:
            async def close_feed() -> None:
                await asyncio.to_thread(feed.close)

            tasks.append(BackgroundTask(name="event-feed", run=feed.round, on_stop=close_feed, max_backoff=5.0,
                                        needs_leader=False))
        if settings.events.sensor_enabled and not services.sensor_external:
            role = services.role_name("sensor")
            tasks.append(sensor_task(services.sensor, lambda: services.leadership(role).is_leader, role=role,
                                     pace=services.poll_pace))
            tasks.append(refusals_task(services.sensor))
            tasks.extend(forward_tasks(services, services.event_store))
    if "actions" in parts:
        tasks.extend(_action_tasks(services))
    return tasks


#: How often the trimmer looks at the process's size (a read of /proc/self/statm).
TRIM_CHECK_SECONDS = 5.0


def _trimmer(trimmer: Trimmer) -> BackgroundTask:
    async def round_() -> float:
        if trimmer.due():
            await asyncio.to_thread(trimmer.run)
        return TRIM_CHECK_SECONDS

    return BackgroundTask(name="malloc-trim", run=round_, needs_leader=False)


def _archiver(services: Services, archive: LoadArchive) -> BackgroundTask:
    settings = services.settings.archiver
    live = services.live()

    async def round_() -> float:
        nodes, jobs, partitions = await live.load()
        if nodes.stale or jobs.stale or partitions.stale:
            raise SlurmUnavailable("slurmctld does not answer: no load sample taken")
        node_list = await asyncio.to_thread(nodes.value.fresh_nodes)
        sample = await asyncio.to_thread(take_sample, node_list, jobs.value, partitions.value, live.hidden,
                                         archive.holder)
        await asyncio.to_thread(archive.add, sample, settings.retention_days * 86400)
        return settings.archive_wait_time

    return BackgroundTask(name="load-archiver", run=round_, role=services.role_name("archiver"),
                          max_backoff=settings.max_backoff)


def _action_tasks(services: Services) -> list[BackgroundTask]:
    settings = services.settings.actions

    async def purge_round() -> float:
        store = services.action_catalogue().store
        cutoff = datetime.now(UTC) - timedelta(days=settings.retention_days)
        purged = await asyncio.to_thread(store.purge_executions, older_than=cutoff)
        if purged:
            log.info("purged %d executions started before %s", purged, cutoff.isoformat())
        audit_cutoff = datetime.now(UTC) - timedelta(days=settings.audit_retention_days)
        purged = await asyncio.to_thread(store.purge_audit, older_than=audit_cutoff)
        if purged:
            log.info("purged %d audit records written before %s", purged, audit_cutoff.isoformat())
        return settings.purge_interval

    async def maintenance_round() -> float:
        # Maintenance runs (slurm.node.maintain) go on from their events: in the archiver's
        # leader, one step at a time, after a restart too.
        store = services.event_store
        if store is None:
            return settings.maintenance_interval
        from slurmtower.actions.maintain import Maintenance  # deferred: the catalogue's modules, first round only

        runner = Maintenance(services.action_catalogue(), store, state_dir=services.settings.state_dir)
        await asyncio.to_thread(runner.advance)
        return settings.maintenance_interval

    async def expiry_round() -> float:
        # Each expired request is an event (rules and hooks page on it) as soon as its time is
        # past, whether or not anyone reads it.
        expired = await asyncio.to_thread(services.action_catalogue().approvals().expire)
        if expired:
            log.info("expired %d request(s): %s", len(expired), ", ".join(str(r.id) for r in expired))
        return services.settings.approvals.expiry_interval

    return [BackgroundTask(name="execution-purge", run=purge_round, role="archiver"),
            BackgroundTask(name="maintenance", run=maintenance_round, role=services.role_name("archiver")),
            BackgroundTask(name="request-expiry", run=expiry_round, role=services.role_name("archiver"))]
