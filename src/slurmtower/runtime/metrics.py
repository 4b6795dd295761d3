"""``/metrics``: Prometheus text for the cluster, the event log, the API and slurmtower's own
load on slurmctld.

Each application gets a private :class:`CollectorRegistry` (several apps in one process, as in
the tests, never share or clash). Cluster gauges come from the shared snapshot cache, so a
scrape adds no Slurm query beyond one per resource per ``api.refresh_interval``; event and
rule-run counts come from slurmtower's own store, read at most once per interval.

With several worker processes (``serve --workers N``) a scrape lands on any one of them, so
the counters and histograms (HTTP requests, Slurm calls, snapshot queries) use
prometheus_client's multiprocess mode: ``serve`` gives the workers a fresh private directory
(:func:`multiprocess_dir`, in ``$PROMETHEUS_MULTIPROC_DIR``), each worker writes its values
to its own files there, and a scrape sums every worker's files, those of workers that have
died included (so totals never go down). The gauges computed at scrape from the snapshot and
the store (nodes, CPUs, jobs, events ...) are the answering worker's own, single values: every
worker sees the same cluster, summing them would count it N times.
``slurmtower_process_info`` names the process that answered; ``slurmtower_worker_processes``
counts the live workers. uvicorn's supervisor tells nobody when it replaces a dead worker, so
each worker marks itself dead (:func:`~prometheus_client.multiprocess.mark_process_dead`) when
it shuts down, and a scrape marks those whose process is gone (killed) as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest, values
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from slurmtower import __version__
from slurmtower.errors import ConfigError
from slurmtower.events.store import EventStore
from slurmtower.live.state import ClusterView
from slurmtower.models import NodeState
from slurmtower.models.event import (
    NODE_STATE,
    SECURITY,
    SENSOR_DOWN,
    SENSOR_TRIGGERED,
    SENSOR_UP,
    RuleRunOutcome,
)

if TYPE_CHECKING:
    from slurmtower.live.cache import SnapshotCache
    from slurmtower.runtime.services import Services

__all__ = ["MULTIPROCESS_VARIABLE", "AppMetrics", "multiprocess_dir"]

#: Where prometheus_client's multiprocess mode keeps the workers' files (set: that mode is on).
MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_RULE_OUTCOMES: tuple[str, ...] = RuleRunOutcome.__args__  # type: ignore[attr-defined]
_SNAPSHOT_QUERIES_HELP = "Slurm queries made by the shared snapshot cache, by resource"
#: Event types always exported (0 until one happens), so dashboards and alerts find them.
_EVENT_TYPES = (NODE_STATE, SENSOR_UP, SENSOR_DOWN, SENSOR_TRIGGERED, SECURITY)



@dataclass
class _StoreCounts:
    events: dict[str, int] = field(default_factory=dict)
    rule_runs: dict[str, int] = field(default_factory=dict)
    read_mono: float = float("-inf")


class _ClusterCollector:
    """Yields the gauges of the last cluster view and store counts handed to it."""

    def __init__(self, *, multiprocess: bool = False) -> None:
        #: Snapshot queries are then a multiprocess counter of their own (AppMetrics).
        self.multiprocess = multiprocess
        self.view: ClusterView | None = None
        self.view_error: str | None = None
        self.store: _StoreCounts | None = None
        self.cache_queries: Counter[str] = Counter()
        self.refresh_interval: float | None = None
        self.refresh_costs: dict[str, float] = {}
        self.refresh_controller: dict[str, float] = {}
        self.state_interval: float | None = None
        self.poll: tuple[float, float] | None = None
        """The sensor's poll here: (interval in force, slurmctld seconds per poll)."""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("slurmtower_cluster_up",
                               "1 when the last cluster snapshot was read from slurmctld, else 0")
        up.add_metric([], 0 if self.view is None or self.view.stale else 1)
        yield up
        if not self.multiprocess:
            queries = CounterMetricFamily("slurmtower_snapshot_queries", _SNAPSHOT_QUERIES_HELP,
                                          labels=["resource"])
            for resource, count in sorted(self.cache_queries.items()):
                queries.add_metric([resource], count)
            yield queries
        if self.refresh_interval is not None:
            yield GaugeMetricFamily(
                "slurmtower_refresh_interval_seconds",
                "The snapshot refresh interval in force (api.refresh_interval, or longer when refreshing "
                "would cost more than api.refresh_cpu_share of a core)", value=self.refresh_interval)
            cost = GaugeMetricFamily("slurmtower_refresh_cpu_seconds",
                                     "CPU seconds one refresh of a resource costs (moving average)",
                                     labels=["resource"])
            for resource, seconds in sorted(self.refresh_costs.items()):
                cost.add_metric([resource], seconds)
            yield cost
            ctld = GaugeMetricFamily("slurmtower_refresh_controller_seconds",
                                     "slurmctld seconds one refresh of a resource costs (sdiag's average "
                                     "time of its RPCs)", labels=["resource"])
            for resource, seconds in sorted(self.refresh_controller.items()):
                ctld.add_metric([resource], seconds)
            yield ctld
        if self.state_interval is not None:
            yield GaugeMetricFamily(
                "slurmtower_state_refresh_interval_seconds",
                "Seconds between two reads of the job states alone (api.state_refresh_interval, or "
                "longer to keep half of api.refresh_controller_share)", value=self.state_interval)
        if self.poll is not None:
            yield GaugeMetricFamily(
                "slurmtower_sensor_poll_interval_seconds",
                "Seconds between two node polls of the sensor (events.poll_interval, or longer to keep "
                "a quarter of api.refresh_controller_share)", value=self.poll[0])
            yield GaugeMetricFamily("slurmtower_sensor_poll_controller_seconds",
                                    "slurmctld seconds one node poll of the sensor costs (sdiag)", value=self.poll[1])
        view = self.view
        if view is not None:
            yield from _cluster_metrics(view)
        if self.store is not None:
            events = GaugeMetricFamily("slurmtower_events", "Events in slurmtower's event log, by type",
                                       labels=["type"])
            for kind in sorted({*_EVENT_TYPES, *self.store.events}):
                events.add_metric([kind], self.store.events.get(kind, 0))
            yield events
            runs = GaugeMetricFamily("slurmtower_rule_runs",
                                     "Rule runs in slurmtower's store (retention applies), by outcome",
                                     labels=["outcome"])
            for outcome in sorted({*_RULE_OUTCOMES, *self.store.rule_runs}):
                runs.add_metric([outcome], self.store.rule_runs.get(outcome, 0))
            yield runs


#: Families of the deployment, not of one cluster: never labelled by cluster.
_DEPLOYMENT_FAMILIES = frozenset({"slurmtower_events", "slurmtower_rule_runs"})


class _ClustersCollector:
    """Every cluster's gauges: one :class:`_ClusterCollector` per cluster, each family once
    with a ``cluster`` label on its samples when several clusters are served (a one-cluster
    deployment's scrape is unchanged)."""

    def __init__(self, *, multiprocess: bool, labelled: bool) -> None:
        self.multiprocess = multiprocess
        self.by_name: dict[str, _ClusterCollector] = {}
        self.labelled = labelled

    def of(self, name: str) -> _ClusterCollector:
        found = self.by_name.get(name)
        if found is None:
            found = self.by_name[name] = _ClusterCollector(multiprocess=self.multiprocess)
        return found

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        if not self.labelled:
            for collector in self.by_name.values():
                yield from collector.collect()
            return
        families: dict[str, Metric] = {}
        for name, collector in self.by_name.items():
            for metric in collector.collect():
                if metric.name in _DEPLOYMENT_FAMILIES:
                    families.setdefault(metric.name, metric)
                    continue
                merged = families.get(metric.name)
                if merged is None:
                    merged = families[metric.name] = Metric(metric.name, metric.documentation, metric.type)
                merged.samples.extend(s._replace(labels={**s.labels, "cluster": name}) for s in metric.samples)
        yield from families.values()


def _cluster_metrics(view: ClusterView) -> Iterator[Metric]:
    age = GaugeMetricFamily("slurmtower_cluster_snapshot_age_seconds",
                            "Age of the cluster snapshot the gauges come from")
    age.add_metric([], max(0.0, time.time() - view.fetched_at.timestamp()))
    yield age
    by_state = Counter(n.state.value.lower() for n in view.nodes)
    nodes = GaugeMetricFamily("slurmtower_nodes", "Nodes by base state", labels=["state"])
    for state in NodeState:
        nodes.add_metric([state.value.lower()], by_state.get(state.value.lower(), 0))
    yield nodes
    flags = Counter(f.lower() for n in view.nodes for f in n.flags)
    by_flag = GaugeMetricFamily("slurmtower_node_flags", "Nodes carrying each state flag (drain, "
                                "not_responding, maintenance ...)", labels=["flag"])
    for flag in sorted({"drain", "not_responding", "fail", "maintenance", "reserved", *flags}):
        by_flag.add_metric([flag], flags.get(flag, 0))
    yield by_flag
    alloc = idle = other = total = 0
    for n in view.nodes:
        cpus = n.cpus or 0
        used = min(n.alloc_cpus or 0, cpus)
        total += cpus
        alloc += used
        # Like sinfo's %C: free CPUs on a drained, down or unresponsive node are "other".
        usable = n.state is not NodeState.DOWN and not ({"DRAIN", "FAIL", "NOT_RESPONDING"} & n.flags)
        if usable:
            idle += cpus - used
        else:
            other += cpus - used
    # Named like sinfo's %C split; "total" is a separate gauge because a _total suffix is
    # reserved for counters.
    by_use = GaugeMetricFamily("slurmtower_cpus", "CPUs by use: allocated to jobs, idle on nodes in "
                             "service, other (free on drained, down or unresponsive nodes)",
                             labels=["state"])
    for name, value in (("allocated", alloc), ("idle", idle), ("other", other)):
        by_use.add_metric([name], value)
    yield by_use
    configured = GaugeMetricFamily("slurmtower_cpus_configured", "CPUs configured on all nodes")
    configured.add_metric([], total)
    yield configured
    jobs: Counter[tuple[str, str]] = Counter()
    for (job_state, partition), count in view.jobs.count_by("state", "partition").items():
        jobs[(str(job_state).lower(), partition or "")] += count
    by_job = GaugeMetricFamily("slurmtower_jobs", "Jobs slurmctld knows, by state and partition",
                               labels=["state", "partition"])
    for (job_state, partition), count in sorted(jobs.items()):
        by_job.add_metric([job_state, partition], count)
    yield by_job


class _ProcessCollector:
    """Which process answered the scrape, how many workers live, and the leader's view."""

    def __init__(self, services: Services, *, multiprocess: bool) -> None:
        self.services = services
        self.multiprocess = multiprocess
        self.process = f"{socket.gethostname()}:{os.getpid()}"

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("slurmtower_process_info",
                                 "The slurmtower process that answered this scrape (host:pid), always 1",
                                 labels=["process", "version"])
        info.add_metric([self.process, __version__], 1)
        yield info
        if not self.multiprocess:
            workers = GaugeMetricFamily("slurmtower_worker_processes", _WORKERS_HELP)
            workers.add_metric([], 1)
            yield workers
        # The leader election (when this deployment runs one) as this process sees it.
        elections = self.services.elections if self.services is not None else {}
        if elections:
            leading = GaugeMetricFamily("slurmtower_leader",
                                        "1 when the answering process leads the role (sensor: the sensor, "
                                        "rules and purge; archiver: the load archiver), else 0",
                                        labels=["role", "identity"])
            for role, leader in sorted(elections.items()):
                leading.add_metric([role, str(leader.identity)], 1 if leader.is_leader else 0)
            yield leading


_WORKERS_HELP = "API worker processes alive (serve --workers)"


class AppMetrics:
    """The metrics of one application: its registry, request and Slurm-call instruments.

    Args:
        services: what the process runs on (for the leader gauge).
        multiprocess_dir: prometheus_client's multiprocess directory, when the process is one
            of several workers (``$PROMETHEUS_MULTIPROC_DIR``, which must have been set before
            prometheus_client was imported). None: a single process.

    Raises :class:`ConfigError` when ``multiprocess_dir`` is given but prometheus_client was
    imported without it (its counters would stay in this process's memory).
    """

    def __init__(self, services: Services, *, multiprocess_dir: Path | None = None) -> None:
        multiprocess = multiprocess_dir is not None
        if multiprocess and not getattr(values.ValueClass, "_multiprocess", False):
            raise ConfigError(f"{MULTIPROCESS_VARIABLE} must be set before prometheus_client is imported",
                              key=MULTIPROCESS_VARIABLE)
        self.multiprocess_dir = multiprocess_dir
        #: Holds the instruments; a scrape reads :attr:`scrape_registry`.
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = PromCounter("slurmtower_http_requests", "HTTP requests answered, by route",
                                    ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("slurmtower_http_request_duration_seconds",
                                 "Time to the response headers, by route", ["method", "route"],
                                 buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.slurm_calls = PromCounter("slurmtower_slurm_calls",
                                       "slurmtower's own calls to Slurm (slurmctld, slurmrestd), by kind",
                                       ["kind", "outcome"], registry=self.registry)
        self.slurm_latency = Histogram("slurmtower_slurm_call_duration_seconds",
                                       "Duration of slurmtower's own calls to Slurm, by kind", ["kind"],
                                       buckets=_LATENCY_BUCKETS, registry=self.registry)
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        #: Every cluster's gauges; :attr:`cluster` is the default cluster's.
        self.clusters = _ClustersCollector(multiprocess=multiprocess,
                                           labelled=bool(services.settings.deployment().clusters))
        self.cluster = self.clusters.of(services.name_or_default())
        self.processes = _ProcessCollector(services, multiprocess=multiprocess)
        self.snapshot_queries: PromCounter | None = None
        self.workers: Gauge | None = None
        self._observed_cache: SnapshotCache | None = None
        #: What a scrape reads: the instruments and the collectors computed at scrape.
        self.scrape_registry = self.registry
        if multiprocess_dir is not None:
            self.snapshot_queries = PromCounter("slurmtower_snapshot_queries", _SNAPSHOT_QUERIES_HELP,
                                                ["resource"], registry=self.registry)
            # Every live worker sets 1 in its own file; "livesum" adds those of the live ones.
            self.workers = Gauge("slurmtower_worker_processes", _WORKERS_HELP, multiprocess_mode="livesum",
                                 registry=self.registry)
            self.workers.set(1)
            # The instruments' values come from every worker's files, never from this memory.
            self.scrape_registry = CollectorRegistry(auto_describe=False)
            MultiProcessCollector(self.scrape_registry, path=str(multiprocess_dir))  # type: ignore[no-untyped-call]
        self.scrape_registry.register(self.clusters)
        self.scrape_registry.register(self.processes)
        self._store_lock = asyncio.Lock()

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request and its time to the response headers, by route template."""
        key = (method, route, status)
        children = self._request_children.get(key)
        if children is None:
            # Label lookups cost more than the observation: kept per (method, route, status),
            # whose values are bounded (route templates, not paths).
            children = (self.requests.labels(method, route, str(status)), self.latency.labels(method, route))
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def observe_cache(self, cache: SnapshotCache | None) -> None:
        """Count ``cache``'s Slurm queries in the multiprocess counter (once per cache)."""
        counter = self.snapshot_queries
        if counter is None or cache is None or cache is self._observed_cache:
            return
        self._observed_cache = cache
        for resource in cache.resources:
            counter.labels(resource)  # every resource exported from the start, 0 until queried
        for resource, count in cache.queries.items():
            counter.labels(resource).inc(count)
        cache.query_observers.append(lambda resource: counter.labels(resource).inc())

    def collect_text(self) -> bytes:
        """The scrape (blocking: in multiprocess mode it reads every worker's files)."""
        if self.multiprocess_dir is not None:
            _mark_dead_workers(self.multiprocess_dir)
        return generate_latest(self.scrape_registry)

    def close(self) -> None:
        """This worker stops: its live gauges leave the sum (its counters stay in the totals)."""
        if self.multiprocess_dir is not None:
            mark_process_dead(os.getpid(), str(self.multiprocess_dir))  # type: ignore[no-untyped-call]

    def slurm_call(self, kind: str, seconds: float, ok: bool) -> None:
        """Sink for :func:`slurmtower.slurm.observe.slurm_call_observer`."""
        self.slurm_calls.labels(kind, "ok" if ok else "error").inc()
        self.slurm_latency.labels(kind).observe(seconds)

    async def refresh(self, services: Services) -> None:
        """Bring every cluster's view and the store counts up to date (bounded by the refresh
        interval); the clusters at once, one that does not answer marked down."""
        await asyncio.gather(*(self._refresh_cluster(each) for each in services.every_cluster()))
        await self._refresh_store(services)

    async def _refresh_cluster(self, services: Services) -> None:
        gauges = self.clusters.of(services.name_or_default())
        try:
            gauges.view = await services.live().view()
            gauges.view_error = None
        except Exception as exc:  # a scrape reports the cluster down, it never fails
            gauges.view_error = str(exc)
            if gauges.view is not None:
                gauges.view = ClusterView(gauges.view.nodes, gauges.view.jobs, gauges.view.fetched_at, stale=True)
        cache = services.snapshots
        if services.parent is None:
            self.observe_cache(cache)
        if cache is not None:
            gauges.cache_queries = Counter(cache.queries)
            gauges.refresh_interval = cache.interval
            gauges.refresh_costs = {r: cache.cost(r) for r in cache.resources}
            gauges.refresh_controller = {r: cache.controller_cost(r) for r in cache.resources}
            gauges.state_interval = cache.state_interval if cache.states is not None and cache.states.enabled \
                else None
        pace = services.poll_pace
        gauges.poll = (pace.interval, pace.cost) if pace is not None and pace.cost > 0 else None

    async def _refresh_store(self, services: Services) -> None:
        store = services.event_store
        if store is None:
            return
        interval = services.settings.api.refresh_interval
        async with self._store_lock:
            current = self.cluster.store
            if current is not None and time.monotonic() - current.read_mono < interval:
                return
            try:
                hidden = await services.live().hidden_nodes()
            except Exception:  # noqa: BLE001 - no partitions snapshot: keep the last counts
                return
            self.cluster.store = await asyncio.to_thread(_store_counts, store, hidden)


def _store_counts(store: EventStore, hidden: frozenset[str]) -> _StoreCounts:
    events, runs = store.counts(hidden)
    return _StoreCounts(events=events, rule_runs=runs, read_mono=time.monotonic())


def _mark_dead_workers(directory: Path) -> None:
    """Mark dead the workers whose live-gauge files remain but whose process is gone."""
    for path in directory.glob("gauge_live*_*.db"):
        pid = path.stem.rpartition("_")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            mark_process_dead(int(pid), str(directory))  # type: ignore[no-untyped-call]
        except PermissionError:
            pass  # alive, another user's


@contextlib.contextmanager
def multiprocess_dir(state_dir: Path, port: int) -> Iterator[Path]:
    """A fresh, empty, private (0700) directory for the metric files of ``serve``'s workers
    on ``port``, under ``state_dir``; removed when the context exits.

    Raises :class:`ConfigError` when another ``serve`` on the same port and state directory
    holds it (emptying it would reset that one's counters).
    """
    directory = state_dir / f"metrics-{port}"
    lock_path = state_dir / f"metrics-{port}.lock"
    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"another slurmtower serve on port {port} uses {directory}",
                              key="api.port") from None
        # A crashed serve's files would add its old counts to this one's.
        if directory.is_symlink():
            directory.unlink()
        elif directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(mode=0o700)
        directory.chmod(0o700)  # whatever the umask
        try:
            yield directory
        finally:
            shutil.rmtree(directory, ignore_errors=True)
