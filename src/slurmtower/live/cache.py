"""The shared snapshot cache in front of slurmctld.

Every live read (``/queue``, ``/nodes``, ``/partitions``, ``/stats``, ``/usage``, the load
archiver) goes through one :class:`SnapshotCache`:

* **single flight**: concurrent requests for one resource share one in-flight Slurm query;
* **rate bound**: at most one Slurm query per resource per interval, however many clients
  poll (a failed query is not retried before the interval is over either); the interval is
  ``api.refresh_interval`` or longer when refreshing costs more than its CPU or slurmctld
  share (:attr:`SnapshotCache.interval`);
* **refresh ahead**: while clients read a resource, its next round starts on a timer, early
  by the time Slurm took to answer the last one, so that the new data is taken as the
  interval ends (``refresh_ahead``): a client polling the queue sees data between the round's
  own time and one interval old, not up to two intervals and its polling period. A snapshot
  past its interval (but younger than two) is still served while the one refreshing query
  runs, so in steady state no request waits for Slurm; ``X-Data-Age`` says exactly how old;
* **bounded wait**: a request waits at most ``api.slurm_wait`` seconds; then it gets a 503
  problem, or, with ``api.serve_stale``, the last snapshot marked ``"stale": true``;
* **off the serving GIL** (``api.refresh_in_subprocess``): resources registered with
  :meth:`SnapshotCache.offload` (the queue, the nodes) are read and parsed by a
  :class:`~slurmtower.live.worker.RefreshWorker` process; the queue crosses as deltas (only
  changed rows) applied here to a :class:`~slurmtower.models.table.JobTable`. Without a
  running worker (no lifespan, setting off) the round runs in a thread;
* **pre-serialized bytes**: each view of a snapshot is rendered to JSON and gzip once, and
  served with a weak ``ETag`` (``If-None-Match`` answers 304). Bodies carry ``fetched_at``
  and ``stale``; the ``X-Data-Age`` header (and ``Age``) give the age in seconds at the time
  of the response. The body holds the fetch time rather than an age so that its bytes (and
  their gzip) can be reused by every request until the next refresh.

With several API processes (``serve --workers N``, several hosts) each has its own cache:
alone, the bound is one query per resource per interval *per process*. With
``api.shared_cache_url`` the deployment's processes share one snapshot through Redis
(:mod:`slurmtower.live.sharing`): one elected refresher queries Slurm and publishes each round,
the others (*followers*) serve it; a process that cannot reach Redis refreshes alone.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import resource
import time
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic_core import to_json

from slurmtower.errors import SlurmtowerError, SlurmUnavailable, Unsupported
from slurmtower.live.hidden import hide_jobs, node_table
from slurmtower.live.sharing import Pulled, SharedSnapshots, SharedUnreachable
from slurmtower.live.states import NodeStateOverlay, StateClock, StateOverlay, apply_nodes
from slurmtower.live.states import apply as apply_states
from slurmtower.live.worker import OffloadSpec, RefreshWorker, render_bytes
from slurmtower.models import Node
from slurmtower.models.table import JobTable, NodeTable, StateDelta
from slurmtower.settings import Settings
from slurmtower.slurm.client import SlurmReads

__all__ = [
    "RESTORED",
    "Rendered",
    "Snapshot",
    "SnapshotCache",
    "build_cache",
    "query_key",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A rendered view larger than this keeps only its gzip.
KEEP_PLAIN_BYTES = 1 << 20
#: A refresh worker that read a queue this long in full is replaced (RefreshWorker.recycle).
RECYCLE_AFTER_ROWS = 5_000
#: Why a restored snapshot is served stale (the body's ``stale_reason``).
RESTORED = "kept from before the service started; the first read of Slurm is under way"
#: Filtered and paged views kept for the clients asking the same (bytes, all together).
QUERY_VIEW_BYTES = 16 << 20


@dataclass(frozen=True)
class Rendered:
    """A view of one or more snapshots, serialized once.

    A big view keeps only its gzip (``body`` is ``None``): the queue of 100,000 jobs is 45 MB
    of JSON and 4 MB compressed. A client that does not take gzip gets it inflated once per
    view (:meth:`plain`): the inflated bytes then live as long as the view (until the next
    refresh replaces it), so only views asked for uncompressed pay their memory, and every such
    request after the first is served from memory (inflating 1.8 MB per request held an
    uncompressed /queue at 2,000 jobs to a sixth of the gzipped throughput).
    """

    body: bytes | None
    gzip: bytes | None
    etag: str
    fetched_at: datetime
    fetched_mono: float
    stale: bool
    clocks: tuple[StateClock, ...] = field(default=(), repr=False, compare=False)
    """The state clocks of the snapshots it was made from (:mod:`slurmtower.live.states`)."""
    _plain: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def state_age(self, now: float) -> float:
        """Seconds since the states it holds were read (the oldest of its snapshots'; a state
        read that found nothing to change moves them without a new rendering)."""
        if not self.clocks:
            return max(0.0, now - self.fetched_mono)
        return max(0.0, max(now - c.mono for c in self.clocks))

    def plain(self) -> bytes:
        """The uncompressed body: :attr:`body`, or the gzip inflated once and kept."""
        if self.body is not None:
            return self.body
        if self._plain is None:
            # Two requests racing here inflate twice and keep one: harmless.
            object.__setattr__(self, "_plain", zlib.decompress(self.gzip or b"", wbits=31))
        assert self._plain is not None
        return self._plain


@dataclass(frozen=True)
class Snapshot(Generic[T]):
    """One answer of Slurm for one resource (typed reads: :class:`~slurmtower.live.state.LiveState`)."""

    resource: str
    value: T = field(repr=False)
    """What Slurm answered: models, or a compact table (:class:`~slurmtower.models.table.JobTable`)."""
    fetched_at: datetime
    fetched_mono: float
    generation: int
    stale: bool = False
    error: str | None = None
    """Why this stale snapshot is served (the failure of the latest query)."""
    clock: StateClock = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    """When its states were last read: its own read's time, or a later state read's
    (:mod:`slurmtower.live.states`)."""

    def __post_init__(self) -> None:
        if self.clock is None:
            object.__setattr__(self, "clock", StateClock(self.fetched_mono, self.fetched_at))


@dataclass
class _States:
    """The job states read alone between two full reads of the queue (23.11+)."""

    resource: str
    fetch: Callable[[bool], StateDelta]
    spec: OffloadSpec
    interval: float
    overlay: StateOverlay = field(default_factory=StateOverlay)
    enabled: bool = True
    full_next: bool = True
    """Ask the reader for every job's state (no table was there for the last one)."""
    inflight: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None
    controller: float = 0.0
    """slurmctld seconds one state read costs (moving average)."""
    cost: float = 0.0
    rounds: int = 0
    last_error: str | None = None


@dataclass
class _Entry:
    fetch: Callable[[], Any]
    offload: OffloadSpec | None = None
    snapshot: Snapshot[Any] | None = None
    inflight: asyncio.Task[Snapshot[Any]] | None = None
    inflight_mono: float = 0.0
    timed_out: bool = False
    """A request gave up waiting for this resource and no round has succeeded since: the
    next requests answer at once (stale or 503) while rounds go on in the background."""
    """When the running round started: a request joining it waits only what is left of
    ``slurm_wait`` (a frozen slurmctld costs each request at most that, not a full wait each)."""
    last_error: SlurmtowerError | None = None
    last_error_mono: float = 0.0
    generation: int = 0
    cost: float = 0.0
    """CPU seconds one refresh costs (a moving average of the measured rounds)."""
    controller: float = 0.0
    """Seconds of slurmctld's time one refresh costs (sdiag's average of its RPCs)."""
    rounds: int = 0
    table: Any = None
    """For a resource read as deltas: the table the deltas apply to (before ``transform``)."""
    seq: int = -1
    """...and the number of the read it stands at."""
    asked_mono: float = float("-inf")
    """When a request last asked for the resource (a follower reads its announced rounds at once)."""
    own: bool = False
    """The snapshot is this process's own Slurm read (not the deployment's shared one)."""
    shared_seq: int | None = None
    """The shared round the snapshot is (None: not a shared one)..."""
    shared_version: str | None = None
    """...and its value's version."""
    publish_next: Snapshot[Any] | None = None
    """The refresher's round waiting to be published."""
    publishing: asyncio.Task[None] | None = None
    lead: float = 0.0
    """Seconds from a round's start to the moment its data was taken (the worker's hand-over
    and Slurm's answer): how early the next round starts (a moving average)."""
    ahead: asyncio.TimerHandle | None = None
    """The next round's timer while the resource is read (:meth:`SnapshotCache._schedule_ahead`)."""
    restored: bool = False
    """The snapshot is one kept from an earlier run (:meth:`SnapshotCache.restore`), served
    marked stale at once until the first round of this run replaces it."""
    base: Any = None
    """For the resource whose states are read alone: the value of the last full read, before
    the state reads' overlay (what is kept and shared)."""


@dataclass
class _View:
    key: tuple[Any, ...] | None = None
    rendered: Rendered | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    recipe: tuple[tuple[str, ...], Callable[..., Any], tuple[Any, ...]] | None = None
    """(resources, build, args) of the last render, to render ahead after a refresh."""
    used_mono: float = 0.0


#: The state reads are never more than this many times ``api.state_refresh_interval`` apart.
STATE_STRETCH = 4.0


class SnapshotCache:
    """Snapshots of Slurm resources shared by every request of one process.

    Args:
        refresh_interval: a snapshot younger than this is served without asking Slurm (the
            shortest interval: see :attr:`interval`).
        slurm_wait: how long a request waits for Slurm before giving up.
        serve_stale: on failure or timeout, serve the last snapshot marked stale (else 503).
        cpu_share: the share of one core that refreshing every resource once per interval
            may cost; the interval grows past ``refresh_interval`` when the measured rounds
            cost more (0 disables the adaptation).
        controller_share: the same for slurmctld's time (the RPCs' average time in sdiag,
            known when the refresh worker reads).
        refresh_ahead: while a resource is read, start its next round on a timer so that its
            data is taken as the interval ends (otherwise the first request past the interval
            starts it).
        clock: monotonic clock (tests may pass their own).
    """

    def __init__(
        self,
        *,
        refresh_interval: float,
        slurm_wait: float,
        serve_stale: bool = False,
        cpu_share: float = 0.25,
        controller_share: float = 0.045,
        max_interval: float = 60.0,
        refresh_ahead: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.refresh_interval = refresh_interval
        self.slurm_wait = slurm_wait
        self.serve_stale = serve_stale
        self.cpu_share = cpu_share
        self.controller_share = controller_share
        self.max_interval = max(max_interval, refresh_interval)
        self.refresh_ahead = refresh_ahead
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self._views: dict[str, _View] = {}
        self._queries: OrderedDict[Hashable, tuple[Any, Rendered]] = OrderedDict()
        self._query_bytes = 0
        self._building: dict[Hashable, asyncio.Task[Rendered]] = {}
        #: Slurm queries started, per resource (for tests and metrics).
        self.queries: Counter[str] = Counter()
        #: Called with the resource at each query started (the metrics' multiprocess counter).
        self.query_observers: list[Callable[[str], None]] = []
        #: Rounds of a delta-read resource that read (and sent) every row.
        self.full_reads: Counter[str] = Counter()
        #: Runs the rounds of offloaded resources while set (the app's lifespan sets it).
        self.worker: RefreshWorker | None = None
        #: The deployment's shared snapshot (``api.shared_cache_url``); None: refresh alone.
        self.shared: SharedSnapshots | None = None
        #: The refresher's interval, while following it.
        self.followed_interval: float | None = None
        #: Rounds read from the shared snapshot instead of Slurm, per resource.
        self.shared_reads: Counter[str] = Counter()
        #: The job states read alone between full reads (:meth:`read_states`); None: not read.
        self.states: _States | None = None
        #: Runs the state reads while set (a process apart from :attr:`worker`: a state read
        #: never waits behind a full read of the queue), made by :attr:`state_worker_factory`
        #: once the first read (in a thread) found the release reads states alone.
        self.state_worker: RefreshWorker | None = None
        self.state_worker_factory: Callable[[], RefreshWorker] | None = None
        #: Seconds of slurmctld's time per second that others' reads take of the share (the
        #: sensor's node polls in this process): set by the runtime.
        self.other_controller_load: Callable[[], float] = lambda: 0.0
        #: The node states the sensor of this process polls, put in the nodes' rows between
        #: their full reads (:meth:`node_states_seen`); None: no sensor here.
        self.node_states: NodeStateOverlay | None = None

    def register(self, resource: str, fetch: Callable[[], Any]) -> None:
        """Declare a resource and the (blocking) call that reads it from Slurm."""
        self._entries[resource] = _Entry(fetch=fetch)

    def offload(self, spec: OffloadSpec) -> None:
        """Let the refresh worker read ``spec.resource`` and render its ``spec.view`` too
        (``spec.build`` must be a module-level function: it is pickled by reference)."""
        self._entries[spec.resource].offload = spec

    def read_states(self, resource: str, fetch: Callable[[bool], StateDelta], spec: OffloadSpec,
                    interval: float) -> None:
        """Read the states of ``resource`` (the queue) alone, every ``interval`` seconds while
        clients read it (:mod:`slurmtower.live.states`): ``fetch(full)`` in a thread, or
        ``spec`` in :attr:`state_worker`. A reader that raises
        :class:`~slurmtower.errors.Unsupported` (22.05) turns them off for good."""
        self.states = _States(resource=resource, fetch=fetch, spec=spec, interval=interval)

    @property
    def resources(self) -> list[str]:
        return list(self._entries)

    @property
    def interval(self) -> float:
        """The refresh interval in force: ``refresh_interval``, or longer when one refresh of
        every resource clients read lately costs more than ``cpu_share`` of a core, or more
        than ``controller_share`` of slurmctld's time, over it (what the CPU asks at most
        ``max_interval``; what slurmctld's share asks, past it). A follower of the shared
        snapshot uses its refresher's."""
        if self.followed_interval is not None and self.shared is not None and self.shared.following:
            return max(self.refresh_interval, self.followed_interval)  # the refresher's bounds
        # (Asked several times per request: one pass over the entries, no lists.)
        cost = controller = 0.0
        for e in self._entries.values():
            cost += e.cost
            controller += e.controller
        every = self._interval_of(cost, controller)
        # What the share bounds is the refreshing of what clients read: a resource asked once
        # a minute (the load archiver's nodes) is read once a minute, and its cost must not
        # stretch the interval of the queue a dashboard polls. The window (two intervals of
        # every resource) is at least the one in which a read resource is refreshed ahead.
        since = self.clock() - 2 * every
        for e in self._entries.values():
            if e.asked_mono < since:
                cost -= e.cost
                controller -= e.controller
        return self._interval_of(cost, controller)

    def _controller_left(self) -> float:
        """The share of slurmctld's time the full reads may take: the share, less what the
        state reads (while the queue is read) and the others' reads (the sensor's node polls)
        take of it; at least a quarter of it."""
        share = self.controller_share
        used = self.other_controller_load()
        st = self.states
        if st is not None and st.enabled and st.controller > 0 \
                and self.clock() - self._entries[st.resource].asked_mono < 2 * self.max_interval:
            used += st.controller / self.state_interval
        return max(share / 4, share - used)

    @property
    def state_interval(self) -> float:
        """Seconds between two state reads: ``api.state_refresh_interval``, or longer when
        they would take more than half of slurmctld's share, at most
        :data:`STATE_STRETCH` times it (the states are the fast part: seconds old at any
        size, even when a busy scheduler's lock waits make a read cost slurmctld 0.1-1 s)."""
        st = self.states
        if st is None:
            return self.refresh_interval
        if self.controller_share > 0 and st.controller > 0:
            return min(STATE_STRETCH * st.interval, max(st.interval, st.controller / (self.controller_share / 2)))
        return st.interval

    def _interval_of(self, cost: float, controller: float) -> float:
        wanted = self.refresh_interval
        if self.cpu_share > 0:
            wanted = max(wanted, cost / self.cpu_share)
        wanted = min(self.max_interval, wanted)
        if self.controller_share > 0:
            # slurmctld's share is the one bound the interval passes ``max_interval`` for:
            # the controller serves the whole cluster, the full records' age says what it
            # costs (X-Data-Age), and the job states stay fresh between (X-State-Age).
            wanted = max(wanted, controller / self._controller_left())
        return wanted

    def cost(self, resource: str) -> float:
        """CPU seconds one refresh of ``resource`` costs (moving average; 0 before the first)."""
        return self._entries[resource].cost

    def controller_cost(self, resource: str) -> float:
        """slurmctld seconds one refresh of ``resource`` costs (0 when not known)."""
        return self._entries[resource].controller

    def peek(self, resource: str) -> Snapshot[Any] | None:
        """The last good snapshot, without asking Slurm."""
        return self._entries[resource].snapshot

    def restore(self, resource: str, value: Any, fetched_at: datetime) -> Snapshot[Any] | None:
        """Serve ``value``, a snapshot of ``resource`` kept from an earlier run
        (:mod:`slurmtower.live.keep`), until this run's first round replaces it: marked stale
        with :data:`RESTORED` as the reason, its age counted from ``fetched_at``, answered at
        once (no request waits for the first round). Nothing when a snapshot is here already."""
        entry = self._entries.get(resource)
        if entry is None or entry.snapshot is not None:
            return None
        entry.generation += 1
        snap = Snapshot(resource=resource, value=value, fetched_at=fetched_at, fetched_mono=self._mono(fetched_at),
                        generation=entry.generation, stale=True, error=RESTORED)
        entry.snapshot, entry.own, entry.restored = snap, False, True
        if self.states is not None and resource == self.states.resource and isinstance(value, JobTable):
            entry.base = value  # fresh states may be read over it until the first full read
        self.prime(resource, value)
        return snap

    def prime(self, resource: str, value: Any) -> bool:
        """Let the first read of a resource read as deltas start from ``value``, a table kept
        from an earlier run whose rows carry their squeue lines' digests: the refresh worker
        then parses only the lines that changed since (at 100,000 held jobs, none), and sends
        only those rows. Nothing (False) without a worker, a delta resource, or digests.
        May be called from a thread before the first round."""
        entry = self._entries.get(resource)
        worker = self.worker
        if entry is None or entry.offload is None or entry.offload.delta is None or worker is None \
                or entry.table is not None or not isinstance(value, JobTable) or not len(value):
            return False
        memo = value.line_memo()
        if len(memo) != len(value):
            return False  # rows without a digest (a table made from models)
        entry.table, entry.seq = value, 0
        worker.resume_queue(memo, 0)
        return True

    def _mono(self, fetched_at: datetime) -> float:
        """This cache's clock reading for the wall time ``fetched_at`` (in the past: its age)."""
        return self.clock() - max(0.0, (datetime.now(UTC) - fetched_at).total_seconds())

    def is_own(self, resource: str) -> bool:
        """The snapshot of ``resource`` is this process's own read of Slurm (not the shared
        one, not a restored one)."""
        return self._entries[resource].own

    def restored(self) -> list[str]:
        """The resources still served from a snapshot of an earlier run."""
        return [r for r, e in self._entries.items() if e.restored]

    async def get(self, resource: str) -> Snapshot[Any]:
        """A snapshot no older than ``refresh_interval`` (or a stale one, see the class doc).

        Raises :class:`SlurmUnavailable` (503) when Slurm does not answer in time and no stale
        snapshot may be served, or the error Slurm gave.
        """
        entry = self._entries[resource]
        now = self.clock()
        entry.asked_mono = now
        self._want_states(resource)
        snap = entry.snapshot
        if entry.restored and snap is not None:
            self.kick(resource)  # this run's first round, unless it runs
            return snap
        interval = self.interval
        if snap is not None and now - snap.fetched_mono < interval:
            return snap
        if entry.last_error is not None and now - entry.last_error_mono < interval:
            # Slurm failed a moment ago: don't ask again before the interval is over.
            return self._fallback(entry, entry.last_error)
        self.kick(resource, force=True)  # one round, unless one runs
        if snap is not None and now - snap.fetched_mono < 2 * interval:
            # Refresh ahead: a snapshot just past its interval is served while the one query
            # runs, so no request waits for Slurm in steady state (X-Data-Age stays honest).
            return snap
        if entry.last_error is not None or entry.timed_out:
            # The last round failed or hung: answer now (stale, or the error); the round
            # just started goes on, and its success ends this degraded mode.
            return self._fallback(entry, entry.last_error or SlurmUnavailable(
                f"slurmctld did not answer the {resource} query within {self.slurm_wait:g} s",
                resource=resource))
        inflight = entry.inflight
        assert inflight is not None  # kicked above
        try:
            while True:
                # The deadline moves when the round's Slurm query starts (a refresh worker
                # still spawning is not Slurm being slow); slices notice that.
                left = self.slurm_wait - (self.clock() - entry.inflight_mono)
                if left <= 0 or entry.timed_out:
                    raise TimeoutError
                try:
                    return await asyncio.wait_for(asyncio.shield(inflight), timeout=min(left, 0.25))
                except TimeoutError:
                    if inflight.done():
                        return inflight.result()
        except TimeoutError:
            entry.timed_out = True
            return self._fallback(entry, SlurmUnavailable(
                f"slurmctld did not answer the {resource} query within {self.slurm_wait:g} s",
                resource=resource))
        except SlurmtowerError as exc:
            return self._fallback(entry, exc)

    async def get_all(self, *resources: str) -> list[Snapshot[Any]]:
        """Snapshots of several resources, asked at once: a view built from three of them
        (``/usage``) waits at most ``slurm_wait`` in all, not once per resource."""
        return list(await asyncio.gather(*(self.get(r) for r in resources)))

    def kick(self, resource: str, *, force: bool = False) -> None:
        """Start a round of ``resource`` now, unless one runs or (without ``force``) its
        snapshot is younger than the interval or its last round failed within it."""
        entry = self._entries.get(resource)
        if entry is None or entry.inflight is not None:
            return
        now, interval = self.clock(), self.interval
        if not force and ((entry.snapshot is not None and now - entry.snapshot.fetched_mono < interval)
                          or (entry.last_error is not None and now - entry.last_error_mono < interval)):
            return
        entry.inflight = asyncio.get_running_loop().create_task(self._refresh(resource, entry))
        entry.inflight_mono = now
        entry.inflight.add_done_callback(_retrieve)

    async def shared_round(self) -> float:
        """One election round of the shared snapshot (a background task of every process);
        as the refresher, refresh what followers want. Returns the seconds to the next."""
        shared = self.shared
        if shared is None:
            return 60.0
        shared.on_round = self._announced
        for name in await shared.elect(self.resources):
            self.kick(name)
        return shared.tick

    def _announced(self, resource: str) -> None:
        # A follower reads an announced round at once when the resource is being read: its
        # next request then finds the new bytes instead of waiting for them.
        entry = self._entries.get(resource)
        if entry is not None and self.clock() - entry.asked_mono < 2 * self.interval:
            self.kick(resource, force=True)

    async def _refresh(self, resource: str, entry: _Entry) -> Snapshot[Any]:
        shared = self.shared
        if shared is not None and shared.following:
            try:
                followed = await self._follow(resource, entry, shared)
            except SharedUnreachable:
                followed = None  # Redis failed: this round reads Slurm, as without it
            except SlurmtowerError as exc:
                entry.last_error, entry.last_error_mono = exc, self.clock()
                entry.inflight = None
                raise
            except BaseException:
                entry.inflight = None
                raise
            if followed is not None:
                entry.inflight = None
                return followed
        self.queries[resource] += 1
        for observe in self.query_observers:
            observe(resource)
        started = asked = self.clock()
        worker, spec = self.worker, entry.offload
        fetched_mono: float | None = None
        fetched_at: datetime | None = None
        try:
            if worker is not None and spec is not None:
                worker.start()
                if not worker.ready:
                    # A table read in a thread here would stay behind in this process next
                    # to the worker's (the client's memo of 5,000 parsed nodes: 16 MB), and
                    # parse in this process's GIL at start-up: wait for the worker (it spawns
                    # in a second or two).
                    await worker.wait_ready(self.slurm_wait)
                entry.inflight_mono = asked = self.clock()  # Slurm is asked from now on
            if worker is not None and spec is not None and worker.ready:
                # (A worker still spawning would delay this round by its imports: the
                # round below runs in a thread meanwhile.)
                if spec.delta is not None:
                    result, value = await self._delta_round(worker, spec, entry)
                else:
                    result = await worker.refresh(spec, full=entry.snapshot is None or not entry.own)
                    if result.unchanged and entry.snapshot is not None:
                        value = entry.snapshot.value
                    else:
                        value = await asyncio.to_thread(pickle.loads, result.value)
                cost, controller = result.cpu_seconds, result.controller_seconds
                fetched_mono = self.clock() - result.age
                fetched_at = result.fetched_at
            else:
                value, cost = await asyncio.to_thread(_measured, entry.fetch, spec)
                controller = 0.0
            if fetched_mono is None:
                fetched_mono = self.clock()
            if fetched_at is None:
                fetched_at = datetime.now(UTC)
            clock: StateClock | None = None
            st = self.states
            if st is not None and st.enabled and resource == st.resource:
                # Before the round counts as done (inflight): a request meanwhile must not
                # start another round of the queue.
                value, clock = await self._states_on_full_read(entry, value, asked, fetched_mono, fetched_at)
            elif resource == "nodes" and self.node_states is not None:
                value, clock = await self._node_states_on_full_read(entry, value, asked, fetched_mono, fetched_at)
        except SlurmtowerError as exc:
            entry.last_error, entry.last_error_mono = exc, self.clock()
            raise
        except Exception as exc:
            log.exception("reading %s from Slurm failed", resource)
            err = SlurmUnavailable(f"reading {resource} from Slurm failed: {type(exc).__name__}",
                                   resource=resource)
            entry.last_error, entry.last_error_mono = err, self.clock()
            raise err from exc
        finally:
            entry.inflight = None
        entry.rounds += 1
        # The first round parses every line (the later ones only what changed): a warm-up,
        # not the cost of a refresh. Then a moving average, so one slow round (a scheduler
        # pass) does not double the interval.
        if entry.rounds == 2:
            entry.cost = cost
        elif entry.rounds > 2:
            entry.cost = 0.6 * entry.cost + 0.4 * cost
        entry.controller = controller if entry.rounds == 1 else 0.6 * entry.controller + 0.4 * controller
        entry.generation += 1
        entry.last_error = None
        entry.timed_out = False
        snap = Snapshot(resource=resource, value=value, fetched_at=fetched_at, fetched_mono=fetched_mono,
                        generation=entry.generation, clock=clock)  # type: ignore[arg-type]
        entry.snapshot, entry.own, entry.shared_seq, entry.shared_version = snap, True, None, None
        entry.restored = False
        lead = max(0.0, snap.fetched_mono - started)
        entry.lead = lead if entry.rounds <= 2 else 0.6 * entry.lead + 0.4 * lead
        self._schedule_ahead(resource, entry)
        self._render_ahead(resource)
        if shared is not None and shared.refreshing:
            # What Slurm's full read said, not the state reads' overlay (followers read no states).
            self._publish_soon(resource, entry, snap if entry.base is None else replace(snap, value=entry.base))
        return snap

    def _schedule_ahead(self, resource: str, entry: _Entry) -> None:
        """While clients read ``resource`` (asked within two intervals), start its next round
        ``entry.lead`` seconds before the snapshot just made is one interval old."""
        if entry.ahead is not None:
            entry.ahead.cancel()
            entry.ahead = None
        snap = entry.snapshot
        if not self.refresh_ahead or snap is None:
            return
        interval, now = self.interval, self.clock()
        if now - entry.asked_mono > 2 * interval:
            return
        delay = max(0.0, snap.fetched_mono + interval - entry.lead - now)
        entry.ahead = asyncio.get_running_loop().call_later(delay, self._ahead, resource)

    def _ahead(self, resource: str) -> None:
        entry = self._entries[resource]
        entry.ahead = None
        if self.clock() - entry.asked_mono <= 2 * self.interval:
            self.kick(resource, force=True)

    def close(self) -> None:
        """Cancel the rounds planned ahead (the service stops)."""
        for entry in self._entries.values():
            if entry.ahead is not None:
                entry.ahead.cancel()
                entry.ahead = None
        st = self.states
        if st is not None and st.timer is not None:
            st.timer.cancel()
            st.timer = None

    # -- the job states read alone ------------------------------------------------------------
    def _want_states(self, resource: str) -> None:
        """A client reads ``resource``: start its state reads unless they run or are planned."""
        st = self.states
        if st is None or resource != st.resource or not st.enabled or st.inflight is not None \
                or st.timer is not None or (self.shared is not None and self.shared.following):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        st.inflight = loop.create_task(self._state_round(st))
        st.inflight.add_done_callback(_retrieve)

    def _states_due(self, st: _States) -> None:
        st.timer = None
        if self.clock() - self._entries[st.resource].asked_mono <= 2 * self.interval:
            self._want_states(st.resource)

    async def _state_round(self, st: _States) -> None:
        """One state read, applied to the queue's snapshot (:mod:`slurmtower.live.states`)."""
        entry = self._entries[st.resource]
        started = ended = self.clock()
        delta: StateDelta | None = None
        try:
            worker = self.state_worker
            if worker is None and st.rounds > 0 and self.state_worker_factory is not None:
                worker = self.state_worker = self.state_worker_factory()
            if worker is not None:
                result = await worker.refresh(st.spec, full=st.full_next)
                ended = self.clock() - result.age  # when Slurm answered (not a worker's spawn)
                delta = await asyncio.to_thread(pickle.loads, result.value)
                cost, controller = result.cpu_seconds, result.controller_seconds
            else:
                delta, cost = await asyncio.to_thread(_measured_states, st.fetch, st.full_next)
                ended = self.clock()
                controller = 0.0
        except Unsupported as exc:
            st.enabled = False
            log.info("the job states are read with the full records only: %s", exc.message)
        except SlurmtowerError as exc:
            st.last_error = exc.message
        except Exception as exc:
            log.exception("reading the job states failed")
            st.last_error = type(exc).__name__
        finally:
            st.inflight = None
            if st.enabled:
                delay = max(0.1, self.state_interval - (self.clock() - started))
                st.timer = asyncio.get_running_loop().call_later(delay, self._states_due, st)
        if delta is None:
            return
        st.rounds += 1
        st.last_error = None
        st.cost = cost if st.rounds == 1 else 0.6 * st.cost + 0.4 * cost
        st.controller = controller if st.rounds == 1 else 0.6 * st.controller + 0.4 * controller
        # The states are as of Slurm's answer (as X-Data-Age counts the full reads' age).
        at = datetime.now(UTC) - timedelta(seconds=max(0.0, self.clock() - ended))
        table, snap = entry.base, entry.snapshot
        if not isinstance(table, JobTable) or snap is None:
            st.full_next = True  # no full read yet: the next state read gives every job's
            return
        st.full_next = False
        if not st.overlay.read(delta, table, ended, at):
            if ended > snap.clock.mono:
                snap.clock.mono, snap.clock.at = ended, at  # unchanged: confirmed as of now
            return
        value = await asyncio.to_thread(apply_states, table, st.overlay.frozen())
        if entry.base is not table or entry.snapshot is not snap:
            return  # a full read replaced the table meanwhile and applied the overlay itself
        entry.generation += 1
        entry.snapshot = Snapshot(resource=st.resource, value=value, fetched_at=snap.fetched_at,
                                  fetched_mono=snap.fetched_mono, generation=entry.generation, stale=snap.stale,
                                  error=snap.error, clock=StateClock(ended, at))
        self._render_ahead(st.resource)

    async def _states_on_full_read(self, entry: _Entry, value: Any, started: float, mono: float,
                                   at: datetime) -> tuple[Any, StateClock | None]:
        """A full read of the states' resource: (its value with the overlay still due, its
        clock); the value before the overlay becomes the entry's base. The overlay is changed
        on the event loop only (the state reads change it there too)."""
        st = self.states
        if st is None or not isinstance(value, JobTable):
            return value, None
        await asyncio.to_thread(value.positions)  # built off the loop (100,000 rows: ~20 ms)
        entry.base = value
        st.overlay.full_read(value, started)
        if st.overlay.read_at is not None and started < st.overlay.read_mono:
            # A state read began after this read did: its states hold where they differ.
            clock = StateClock(min(st.overlay.read_mono, mono), st.overlay.read_at)
            return await asyncio.to_thread(apply_states, value, st.overlay.frozen()), clock
        return value, StateClock(mono, at)

    # -- the node states the sensor polls ------------------------------------------------------
    def node_states_seen(self, nodes: list[Node], at: datetime) -> None:
        """The sensor read every node's state, flags and reason at ``at``: put what differs
        from the nodes' last full read in their rows (on the event loop)."""
        overlay = self.node_states
        if overlay is None or "nodes" not in self._entries:
            return
        entry = self._entries["nodes"]
        polled = self.clock() - max(0.0, (datetime.now(UTC) - at).total_seconds())
        table, snap = entry.base, entry.snapshot
        if not isinstance(table, NodeTable) or snap is None:
            overlay.polled, overlay.read_mono, overlay.read_at = nodes, polled, at
            return
        if not overlay.read(nodes, table, polled, at):
            if polled > snap.clock.mono:
                snap.clock.mono, snap.clock.at = polled, at
            return
        task = asyncio.get_running_loop().create_task(self._install_node_states(entry, table, snap, polled, at))
        task.add_done_callback(_retrieve)

    async def _install_node_states(self, entry: _Entry, table: NodeTable, snap: Snapshot[Any], polled: float,
                                   at: datetime) -> None:
        overlay = self.node_states
        assert overlay is not None
        value = await asyncio.to_thread(apply_nodes, table, overlay.frozen())
        if entry.base is not table or entry.snapshot is not snap:
            return  # replaced meanwhile (a full read, or a later poll's rows)
        entry.generation += 1
        entry.snapshot = Snapshot(resource="nodes", value=value, fetched_at=snap.fetched_at,
                                  fetched_mono=snap.fetched_mono, generation=entry.generation, stale=snap.stale,
                                  error=snap.error, clock=StateClock(polled, at))
        self._render_ahead("nodes")

    async def _node_states_on_full_read(self, entry: _Entry, value: Any, started: float, mono: float,
                                        at: datetime) -> tuple[Any, StateClock | None]:
        """As :meth:`_states_on_full_read`, for the nodes and the sensor's polls."""
        overlay = self.node_states
        if overlay is None or not isinstance(value, NodeTable):
            return value, None
        await asyncio.to_thread(value.positions)
        entry.base = value
        overlay.full_read(value, started)
        if overlay.states and overlay.read_at is not None:
            clock = StateClock(min(overlay.read_mono, mono), overlay.read_at)
            return await asyncio.to_thread(apply_nodes, value, overlay.frozen()), clock
        return value, StateClock(mono, at)

    def base_value(self, resource: str) -> Any:
        """The value of ``resource``'s last read as Slurm gave it (before the state reads'
        overlay): what is kept on disk and shared. None: no snapshot."""
        entry = self._entries[resource]
        if entry.base is not None:
            return entry.base
        return entry.snapshot.value if entry.snapshot is not None else None

    async def _follow(self, resource: str, entry: _Entry, shared: SharedSnapshots) -> Snapshot[Any] | None:
        """A follower's round: the refresher's newest round of ``resource``, waiting (up to
        ``slurm_wait``) for one younger than the interval. ``None``: this process stopped
        following meanwhile (it reads Slurm itself).

        Raises :class:`SharedUnreachable`, or :class:`SlurmUnavailable` when the refresher
        published no round in time.
        """
        # A little before the requests' own wait ends, so that they get this error's words.
        deadline = self.clock() + max(0.1, self.slurm_wait - 0.25)
        installed: Snapshot[Any] | None = None
        while shared.following:
            mark = shared.heard(resource)
            # Ask the refresher for rounds while this process is asked for them (not when it
            # only reads an announced round): it stops soon after the last reader here.
            asked = self.clock() - entry.asked_mono < self.interval
            pulled = await shared.pull(resource, seq=entry.shared_seq, version=entry.shared_version,
                                       want_seconds=2 * self.interval if asked else 0)
            if pulled is not None:
                installed = self._install(resource, entry, pulled)
                if self.clock() - installed.fetched_mono < self.interval:
                    return installed
            remaining = deadline - self.clock()
            if remaining <= 0:
                if installed is not None:
                    return installed
                raise SlurmUnavailable(f"the deployment's refresher published no {resource} within "
                                       f"{self.slurm_wait:g} s", resource=resource)
            await shared.wait_round(resource, mark, min(remaining, 0.5))
        return installed

    def _install(self, resource: str, entry: _Entry, pulled: Pulled) -> Snapshot[Any]:
        """Make a shared round this process's snapshot of ``resource``."""
        value = pulled.value if pulled.changed or entry.snapshot is None else entry.snapshot.value
        entry.generation += 1
        entry.timed_out = False
        snap = Snapshot(resource=resource, value=value, fetched_at=pulled.fetched_at,
                        fetched_mono=self._mono(pulled.fetched_at), generation=entry.generation)
        # The delta table and the worker's memo belong to this process's own reads: the next
        # own round (a takeover, a Redis outage) reads in full.
        entry.snapshot, entry.own, entry.table, entry.last_error = snap, False, None, None
        entry.base = None
        entry.shared_seq, entry.shared_version, entry.restored = pulled.seq, pulled.version, False
        if pulled.interval > 0:
            self.followed_interval = pulled.interval
        self.shared_reads[resource] += 1
        self._render_ahead(resource)
        return snap

    def _publish_soon(self, resource: str, entry: _Entry, snap: Snapshot[Any]) -> None:
        """Publish ``snap`` to the followers, after the round still being published (rounds
        that pile up meanwhile are skipped but the last)."""
        entry.publish_next = snap
        if entry.publishing is None or entry.publishing.done():
            entry.publishing = asyncio.get_running_loop().create_task(self._publish_rounds(resource, entry))
            entry.publishing.add_done_callback(_retrieve)

    async def _publish_rounds(self, resource: str, entry: _Entry) -> None:
        shared = self.shared
        while entry.publish_next is not None and shared is not None and shared.refreshing:
            snap, entry.publish_next = entry.publish_next, None
            try:
                await shared.publish(resource, snap.value, snap.fetched_at, self.interval)
            except SharedUnreachable:
                return  # this process refreshes alone now; the election brings it back
            except Exception:
                log.exception("publishing the %s snapshot failed", resource)
                return

    def _render_ahead(self, resource: str) -> None:
        """Render again, now, the views of ``resource`` that were asked for lately: their next
        reader gets bytes instead of waiting for them (a full queue of 100,000 jobs)."""
        now = self.clock()
        for view, state in self._views.items():
            if state.recipe is None or resource not in state.recipe[0] or now - state.used_mono > 2 * self.interval:
                continue
            resources, build, args = state.recipe
            snaps = [self._entries[r].snapshot for r in resources]
            ready = [s for s in snaps if s is not None]
            if len(ready) != len(snaps) or state.lock.locked():
                continue
            task = asyncio.get_running_loop().create_task(self._render(view, ready, build, args, asked=False))
            task.add_done_callback(_retrieve)

    async def _delta_round(self, worker: RefreshWorker, spec: OffloadSpec, entry: _Entry) -> tuple[Any, Any]:
        """One worker round of a resource read as deltas: (the round, the new value)."""
        async def read(full: bool) -> tuple[Any, Any]:
            result = await worker.refresh(spec, full=full)
            return result, await asyncio.to_thread(pickle.loads, result.value)

        def apart(delta: Any) -> bool:
            return not delta.full and (entry.table is None or delta.base != entry.seq)

        result, delta = await read(entry.table is None)
        if apart(delta):
            # The worker and this process went apart (a round lost to a timeout; a recycled
            # worker that started from the table as it was before a round in flight was
            # applied). With a table here, the worker is told its lines by their hashes and
            # sends what differs from them; without one (or a client that cannot resume),
            # every row.
            log.info("refresh of %s: delta %d on %d, have %d: reading again%s", spec.resource, delta.seq,
                     delta.base, entry.seq, "" if entry.table is not None else " in full")
            if entry.table is not None:
                worker.resume_queue(await asyncio.to_thread(entry.table.line_memo), entry.seq)
                result, delta = await read(False)
            if apart(delta):
                result, delta = await read(True)
        if delta.unchanged and entry.snapshot is not None:
            entry.seq = delta.seq
            return result, entry.snapshot.value

        def apply() -> tuple[Any, Any]:
            table = JobTable.from_delta(delta) if delta.full or entry.table is None else entry.table.apply(delta)
            shown = spec.transform(table, *spec.args) if spec.transform is not None else table
            return table, shown

        entry.table, value = await asyncio.to_thread(apply)
        entry.seq = delta.seq
        if delta.full:
            self.full_reads[spec.resource] += 1
        if delta.full and len(delta.keys) >= RECYCLE_AFTER_ROWS:
            worker.recycle(entry.table.line_memo(), entry.seq)
        return result, value

    def _fallback(self, entry: _Entry, exc: SlurmtowerError) -> Snapshot[Any]:
        if self.serve_stale and entry.snapshot is not None:
            return replace(entry.snapshot, stale=True, error=exc.message)
        raise exc

    async def query_view(self, key: Hashable, snapshots: Sequence[Snapshot[Any]],
                         build: Callable[[], bytes]) -> Rendered:
        """The bytes of a filtered or paged view (``build()`` gives its payload's JSON), built
        once per query and snapshot set: fifty clients asking for the same page share one
        rendering (and :class:`FastReads` answers the next ones from it). The last ones are
        kept up to :data:`QUERY_VIEW_BYTES` in all."""
        built_from = tuple((s.resource, s.generation, s.stale) for s in snapshots)
        found = self._queries.get(key)
        if found is not None and found[0] == built_from:
            self._queries.move_to_end(key)
            return found[1]
        pending = self._building.get((key, built_from))
        if pending is None:
            pending = asyncio.get_running_loop().create_task(self._build_query(key, built_from, snapshots, build))
            self._building[(key, built_from)] = pending
            pending.add_done_callback(lambda _t: self._building.pop((key, built_from), None))
            pending.add_done_callback(_retrieve)
        if found is not None and self._still_servable(found[1], snapshots):
            return found[1]  # render ahead, as for the full views
        return await asyncio.shield(pending)

    def _still_servable(self, rendered: Rendered | None, snapshots: Sequence[Snapshot[Any]]) -> bool:
        """``rendered`` may answer while the bytes of ``snapshots`` are made: not stale,
        neither are they, and younger than two intervals."""
        return (rendered is not None and not rendered.stale and not any(s.stale for s in snapshots)
                and self.clock() - rendered.fetched_mono < 2 * self.interval)

    async def _build_query(self, key: Hashable, built_from: Any, snapshots: Sequence[Snapshot[Any]],
                           build: Callable[[], bytes]) -> Rendered:
        oldest = min(snapshots, key=lambda s: s.fetched_mono)
        stale = any(s.stale for s in snapshots)
        errors = [s.error for s in snapshots if s.error]

        clocks = tuple(s.clock for s in snapshots)

        def work() -> Rendered:
            return _render(build(), oldest, stale, errors, clocks)

        rendered = await asyncio.to_thread(work)
        size = len(rendered.body or b"") + len(rendered.gzip or b"")
        if size <= QUERY_VIEW_BYTES // 4:
            old = self._queries.pop(key, None)
            if old is not None:
                self._query_bytes -= _size(old[1])
            self._queries[key] = (built_from, rendered)
            self._query_bytes += size
            while self._query_bytes > QUERY_VIEW_BYTES and self._queries:
                _, (_, dropped) = self._queries.popitem(last=False)
                self._query_bytes -= _size(dropped)
        return rendered

    def fresh_query(self, key: Hashable) -> Rendered | None:
        """The kept view of query ``key`` if it was built from the current, fresh snapshots."""
        found = self._queries.get(key)
        if found is None or not self._fresh(found[0]):
            return None
        return found[1]

    def _fresh(self, built: tuple[tuple[str, int, bool], ...]) -> bool:
        now = self.clock()
        interval = self.interval
        for name, generation, stale in built:
            entry = self._entries.get(name)
            if (stale or entry is None or entry.snapshot is None or entry.generation != generation
                    or entry.last_error is not None):
                return False
            age = now - entry.snapshot.fetched_mono
            if age >= interval and not (entry.inflight is not None and age < 2 * interval):
                return False
            entry.asked_mono = now  # a read answered from bytes is a read all the same
            self._want_states(name)
        return True

    def fresh_view(self, view: str, resources: Sequence[str]) -> Rendered | None:
        """The rendered ``view`` if it was built from the current, fresh snapshots, else None."""
        state = self._views.get(view)
        if state is None or state.rendered is None or state.key is None:
            return None
        built = state.key[0]
        if tuple(b[0] for b in built) != tuple(resources) or not self._fresh(built):
            return None
        return state.rendered

    async def render(
        self,
        view: str,
        snapshots: Sequence[Snapshot[Any]],
        build: Callable[..., dict[str, Any] | bytes],
        *args: Any,
    ) -> Rendered:
        """The JSON (and gzip) bytes of ``build(*values, *args)``, built once per snapshot set.

        ``build`` gets the snapshots' values and returns a JSON-able dict (models allowed) or
        the JSON of one object already serialized (bytes); ``fetched_at`` (the oldest
        snapshot's) and ``stale`` are added to it.
        """
        return await self._render(view, snapshots, build, args, asked=True)

    async def _render(self, view: str, snapshots: Sequence[Snapshot[Any]], build: Callable[..., dict[str, Any] | bytes],
                      args: tuple[Any, ...], *, asked: bool) -> Rendered:
        key = (tuple((s.resource, s.generation, s.stale) for s in snapshots), args)
        state = self._views.setdefault(view, _View())
        if asked:
            state.recipe, state.used_mono = (tuple(s.resource for s in snapshots), build, args), self.clock()
        if state.key == key and state.rendered is not None:
            return state.rendered
        if state.lock.locked() and self._still_servable(state.rendered, snapshots):
            # Render ahead: the new snapshot's bytes are being made; the previous ones (at
            # most two intervals old, X-Data-Age says how old) answer meanwhile.
            assert state.rendered is not None
            return state.rendered
        async with state.lock:
            if state.key == key and state.rendered is not None:
                return state.rendered
            oldest = min(snapshots, key=lambda s: s.fetched_mono)
            stale = any(s.stale for s in snapshots)
            errors = [s.error for s in snapshots if s.error]

            clocks = tuple(s.clock for s in snapshots)

            def work() -> Rendered:
                return _render(build(*[s.value for s in snapshots], *args), oldest, stale, errors, clocks)

            # Large views (thousands of jobs) take tens of ms to serialize and compress:
            # keep them off the event loop.
            rendered = await asyncio.to_thread(work)
            state.key, state.rendered = key, rendered
            return rendered


def _measured(fetch: Callable[[], Any], spec: OffloadSpec | None) -> tuple[Any, float]:
    """``fetch()`` (and the spec's transform) with the CPU time it cost: this thread's, and the
    Slurm commands' (children's time is process-wide: another thread's command finishing
    meanwhile counts too, so this is an upper bound)."""
    thread0, kids0 = time.thread_time(), _children_cpu()
    value = fetch()
    if spec is not None and spec.transform is not None:
        value = spec.transform(value, *spec.args)
    return value, (time.thread_time() - thread0) + (_children_cpu() - kids0)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _size(rendered: Rendered) -> int:
    return len(rendered.body or b"") + len(rendered.gzip or b"")


def query_key(path: str, params: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The key a filtered view of ``path`` is kept under (parameter order does not matter)."""
    return (path, tuple(sorted(params.items())))


def _retrieve(task: asyncio.Task[Any]) -> None:
    # The waiters may all have timed out: fetch the exception so asyncio does not log it.
    if not task.cancelled():
        task.exception()


def _render(payload: dict[str, Any] | bytes, oldest: Snapshot[Any], stale: bool, errors: list[str],
            clocks: tuple[StateClock, ...] = ()) -> Rendered:
    data = payload if isinstance(payload, bytes) else to_json(payload)
    state_at = min((c.at for c in clocks), default=oldest.fetched_at)
    body, packed, etag = render_bytes(data, oldest.fetched_at, stale, errors[0] if errors else None, state_at)
    keep = packed is None or len(body) < KEEP_PLAIN_BYTES
    return Rendered(body=body if keep else None, gzip=packed, etag=etag, fetched_at=oldest.fetched_at,
                    fetched_mono=oldest.fetched_mono, stale=stale, clocks=clocks)


def _measured_states(fetch: Callable[[bool], StateDelta], full: bool) -> tuple[StateDelta, float]:
    thread0, kids0 = time.thread_time(), _children_cpu()
    delta = fetch(full)
    return delta, (time.thread_time() - thread0) + (_children_cpu() - kids0)


def build_cache(settings: Settings, client: SlurmReads) -> SnapshotCache:
    """A cache for ``settings`` with the Slurm resources of ``client`` registered: ``jobs``,
    ``nodes``, ``partitions``, ``stats`` (sharing them through Redis when configured)."""
    api = settings.api
    cache = SnapshotCache(refresh_interval=api.refresh_interval, slurm_wait=api.slurm_wait,
                          serve_stale=api.serve_stale, cpu_share=api.refresh_cpu_share,
                          controller_share=api.refresh_controller_share,
                          max_interval=api.max_refresh_interval, refresh_ahead=api.refresh_ahead)
    if api.shared_cache_url is not None:
        cache.shared = SharedSnapshots.from_settings(settings)
    cache.register("jobs", client.job_table)
    cache.register("nodes", client.nodes)
    cache.register("partitions", client.partitions)
    cache.register("stats", client.stats)
    hidden = frozenset(settings.api.hidden_partitions)
    # Hidden partitions leave the queue and the nodes where they are read (the refresh worker),
    # so no view can forget them; the queue crosses as deltas.
    cache.offload(OffloadSpec(resource="jobs", method="job_table", delta="job_queue_delta", transform=hide_jobs,
                              args=(hidden,), rpcs=("REQUEST_JOB_INFO",)))
    cache.offload(OffloadSpec(resource="nodes", method="nodes", transform=node_table, args=(hidden,),
                              rpcs=("REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO")))
    # The job states alone between full reads, where the release reads them so (23.11+; the
    # first read finds out): the state worker's, or a thread's.
    cache.read_states("jobs", lambda full: client.job_state_delta(full=full),
                      OffloadSpec(resource="job_states", method="job_state_delta", delta="job_state_delta",
                                  rpcs=("REQUEST_JOB_STATE",)),
                      api.state_refresh_interval)
    return cache
