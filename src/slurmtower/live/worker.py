"""Snapshot refreshes in a worker process, outside the serving process's GIL.

Parsing a big answer of Slurm (the queue's changed lines, thousands of nodes) is Python
work that, in a thread of the serving process, holds the GIL in long stretches and stalls
the event loop that answers cached reads. A :class:`RefreshWorker` runs the round (Slurm
call, parse, visibility) in one spawned process, reused for every round, and hands back the
value pickled (a compact :class:`~slurmtower.models.table.JobTable` for the queue), or
"unchanged" when Slurm printed what it printed last time, with the CPU time the round cost
(its own and its commands': the cache adapts its interval to it) and the Slurm calls it
made, which the parent replays into its metrics.

A worker that dies or hangs fails that round (:class:`SlurmUnavailable`: a 503, or the stale
snapshot with ``api.serve_stale``); the next round starts a new worker and, until it runs,
reads in a thread of the serving process as without a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gzip
import hashlib
import logging
import multiprocessing
import os
import pickle
import resource
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_json

from slurmtower.errors import SlurmtowerError, SlurmUnavailable
from slurmtower.live import malloc
from slurmtower.live.budget import RpcMeter, sdiag_totals
from slurmtower.settings import Settings
from slurmtower.slurm import make_client

__all__ = ["OffloadSpec", "Offloaded", "RefreshWorker", "cpu_now", "die_with_parent", "render_bytes"]

log = logging.getLogger(__name__)

#: Bodies smaller than this are not worth compressing.
GZIP_MIN_BYTES = 512

CallRecord = tuple[str, float, bool]


@dataclass(frozen=True)
class OffloadSpec:
    """What the worker does for one resource: ``transform(client.<method>(), *args)``.

    ``transform`` (e.g. hiding partitions) must be a module-level function (it is pickled by
    reference); ``None`` keeps the value as read.
    """

    resource: str
    method: str
    transform: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    rpcs: tuple[str, ...] = ()
    """The slurmctld RPCs (sdiag's names) one read makes: their average time is the read's
    cost to slurmctld."""
    delta: str | None = None
    """A client method ``(full: bool) -> QueueDelta`` the worker calls instead of ``method``:
    only changed rows cross the process boundary, and the serving process applies them
    (and then ``transform``) to its table."""


@dataclass(frozen=True)
class Offloaded:
    """One round's result as it crosses the process boundary (bytes only, cheap to unpickle)."""

    calls: list[CallRecord] = field(default_factory=list)
    error: bytes | None = None
    """The pickled :class:`SlurmtowerError` the round raised."""
    value: bytes = b""
    """The pickled value; empty when :attr:`unchanged`."""
    unchanged: bool = False
    """Slurm's answer was the same as the previous round's: keep the value you have."""
    fetched_at: datetime | None = None
    age: float = 0.0
    """Seconds from the end of the Slurm call to the end of the round."""
    cpu_seconds: float = 0.0
    """CPU time the round cost: the worker's own and its Slurm commands'."""
    controller_seconds: float = 0.0
    """What the round's RPCs cost slurmctld: sdiag's average time of each (0 when unknown)."""


def cpu_now() -> float:
    """CPU seconds used so far by this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def render_bytes(data: bytes, fetched_at: datetime, stale: bool, stale_reason: str | None,
                 state_fetched_at: datetime | None = None) -> tuple[bytes, bytes | None, str]:
    """Body, gzip (None when small) and weak ETag of a view whose payload serializes to ``data``.

    The body's meta: ``fetched_at`` (when the oldest record it holds was read), and
    ``state_fetched_at`` (when the states it holds were read: later, where the job states are
    read alone between full reads; the same otherwise).

    The ETag covers the payload only, not ``fetched_at``: a refresh that changes nothing keeps it.
    """
    etag = 'W/"' + hashlib.blake2b(data, digest_size=12).hexdigest() + ('-s"' if stale else '"')
    meta: dict[str, Any] = {"fetched_at": fetched_at, "state_fetched_at": state_fetched_at or fetched_at,
                            "stale": stale}
    if stale:
        meta["stale_reason"] = stale_reason or "slurmctld did not answer"
    head = to_json(meta)
    body = head[:-1] + (b"," + data[1:] if data != b"{}" else b"}")
    packed = gzip.compress(body, compresslevel=6, mtime=0) if len(body) >= GZIP_MIN_BYTES else None
    return body, packed, etag


# -- the worker process's side --------------------------------------------------------------
_client: Any = None
_calls: list[CallRecord] = []


def _record(kind: str, seconds: float, ok: bool) -> None:
    _calls.append((kind, seconds, ok))


#: prctl(2)'s option: the signal the kernel sends this process when its parent dies.
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when ``parent`` dies, even by ``kill -9`` (Linux's
    ``PR_SET_PDEATHSIG``; elsewhere, nothing). A parent already gone: exit now."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        log.debug("prctl(PR_SET_PDEATHSIG) unavailable: the worker outlives a killed parent")
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _init_worker(settings: Settings, queue_memo: dict[int, int] | None = None, seq: int = 0,
                 parent: int | None = None) -> None:
    global _client
    # A serving process killed outright (kill -9, the OOM killer) takes its worker with it;
    # the multiprocessing resource tracker then sees its last writer go and exits too.
    if parent is not None:
        die_with_parent(parent)
    # The parent shuts the worker down in its lifespan; a Ctrl-C on the terminal's process
    # group must not kill a round half-way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    malloc.tune()  # squeue's output and the pickled deltas (MBs) mapped apart, returned when freed

    _client = make_client(settings, observers=[_record])
    resume = getattr(_client, "resume_queue", None)
    if queue_memo is not None and resume is not None:
        resume(queue_memo, seq)


def _pid() -> int:
    return os.getpid()


def _resume_queue(memo: dict[int, int], seq: int) -> int:
    resume = getattr(_client, "resume_queue", None)
    if resume is not None:
        resume(memo, seq)
    return len(memo)


def _pickled_error(exc: SlurmtowerError) -> bytes:
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)  # noqa: S301 - the bytes just made
    except Exception:  # an error that does not survive pickling: keep its class' meaning
        blob = pickle.dumps(SlurmUnavailable(exc.message))
    return blob


#: resource -> (the client's last answer, as returned), to tell an unchanged answer.
_last: dict[str, Any] = {}
def _rpc_totals_now() -> dict[str, tuple[int, int]] | None:
    """sdiag's (count, total_time_us) per RPC type now; None when sdiag does not answer."""
    return sdiag_totals(_client)


#: What one call of each RPC type costs slurmctld, measured around this process's reads.
_meter = RpcMeter(lambda: _rpc_totals_now())


def _run(spec: OffloadSpec, full: bool = False) -> Offloaded:
    _calls.clear()
    cpu0 = cpu_now()
    before = _meter.before(spec.rpcs)
    try:
        raw = getattr(_client, spec.delta)(full=full) if spec.delta is not None else getattr(_client, spec.method)()
    except SlurmtowerError as exc:
        return Offloaded(calls=list(_calls), error=_pickled_error(exc), cpu_seconds=cpu_now() - cpu0)
    except Exception as exc:
        log.exception("reading %s from Slurm failed", spec.resource)
        err = SlurmUnavailable(f"reading {spec.resource} from Slurm failed: {type(exc).__name__}",
                               resource=spec.resource)
        return Offloaded(calls=list(_calls), error=pickle.dumps(err), cpu_seconds=cpu_now() - cpu0)
    fetched_at, done = datetime.now(UTC), time.monotonic()
    controller = _meter.after(spec.rpcs, before)
    if spec.delta is not None:
        blob = pickle.dumps(raw, protocol=pickle.HIGHEST_PROTOCOL)
        return Offloaded(calls=list(_calls), value=blob, fetched_at=fetched_at, age=time.monotonic() - done,
                         cpu_seconds=cpu_now() - cpu0, controller_seconds=controller)
    # The client hands back the very object of its previous answer when Slurm printed the
    # same thing (CliSlurmClient.job_table / node_states): nothing to send again.
    if not full and spec.resource in _last and _last[spec.resource] is raw:
        return Offloaded(calls=list(_calls), unchanged=True, fetched_at=fetched_at,
                         age=time.monotonic() - done, cpu_seconds=cpu_now() - cpu0,
                         controller_seconds=controller)
    _last[spec.resource] = raw
    value = spec.transform(raw, *spec.args) if spec.transform is not None else raw
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return Offloaded(calls=list(_calls), value=blob, fetched_at=fetched_at, age=time.monotonic() - done,
                     cpu_seconds=cpu_now() - cpu0, controller_seconds=controller)


# -- the serving process's side -------------------------------------------------------------
class RefreshWorker:
    """One spawned worker process that runs snapshot refreshes, restarted after a crash.

    Args:
        settings: the settings the worker builds its own Slurm client from (the same client
            the serving process would build).
        report: receives every Slurm call the worker made, ``(kind, seconds, ok)``.
        timeout: a round that takes longer fails, and the worker is killed and replaced.
    """

    def __init__(self, settings: Settings, *, report: Callable[[str, float, bool], None],
                 timeout: float) -> None:
        self.settings = settings
        self.report = report
        self.timeout = timeout
        self._pool: ProcessPoolExecutor | None = None
        self._pid: Future[int] | None = None
        self._resume: tuple[dict[int, int], int] | None = None
        self.rounds = 0
        self.restarts = -1
        self.recycled = 0
        #: Rounds submitted and not yet answered; a recycle waits for them (:meth:`recycle`).
        self._inflight = 0
        self._recycle: tuple[dict[int, int], int] | None = None

    def start(self) -> None:
        """Spawn the worker now (its imports take a second), without waiting for it."""
        if self._pool is None:
            memo, seq = self._resume if self._resume is not None else (None, 0)
            self._resume = None
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker,
                                             initargs=(self.settings, memo, seq, os.getpid()))
            self._pid = self._pool.submit(_pid)
            self._pid.add_done_callback(_ignore)
            self.restarts += 1

    @property
    def pid(self) -> int | None:
        """The worker's process id, once it runs."""
        fut = self._pid
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        return fut.result()

    async def wait_ready(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the worker runs; True when it does."""
        self.start()
        fut = self._pid
        if fut is None:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), timeout)
        except (TimeoutError, Exception):
            return self.ready
        return self.ready

    @property
    def ready(self) -> bool:
        """True once the worker process has started and answered."""
        return self.pid is not None

    async def refresh(self, spec: OffloadSpec, *, full: bool = False) -> Offloaded:
        """Run one round for ``spec`` in the worker (``full``: send the value even when it did
        not change, for a caller that has none).

        Raises the :class:`SlurmtowerError` of the round, or :class:`SlurmUnavailable` when the
        worker died or did not finish within ``timeout``.
        """
        self.start()
        assert self._pool is not None
        pool = self._pool
        try:
            fut = pool.submit(_run, spec, full)
        except (BrokenProcessPool, RuntimeError):
            self._discard(pool)
            self.start()
            assert self._pool is not None
            pool = self._pool
            fut = pool.submit(_run, spec, full)
        self.rounds += 1
        self._inflight += 1
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(fut), timeout=self.timeout)
        except TimeoutError:
            log.error("the refresh worker took more than %g s for %s: replacing it", self.timeout, spec.resource)
            self._discard(pool, kill=True)
            raise SlurmUnavailable(f"reading {spec.resource} took more than {self.timeout:g} s",
                                   resource=spec.resource) from None
        except BrokenProcessPool:
            log.error("the refresh worker died while reading %s: starting a new one", spec.resource)
            self._discard(pool)
            raise SlurmUnavailable(f"the worker reading {spec.resource} from Slurm died",
                                   resource=spec.resource) from None
        finally:
            self._inflight -= 1
            if self._recycle is not None and self._inflight == 0:
                self._replace(*self._recycle)
        for call in result.calls:
            self.report(*call)
        if result.error is not None:
            err = pickle.loads(result.error)  # noqa: S301 - our own worker's bytes
            assert isinstance(err, SlurmtowerError)
            raise err
        return result

    def resume_queue(self, queue_memo: dict[int, int], seq: int) -> None:
        """Have the worker go on from ``queue_memo`` (a table the serving process holds at
        delta ``seq``, e.g. one kept by an earlier run) before its next round: a worker not
        spawned yet starts from it, a running one is told (rounds run in order)."""
        if self._pool is None:
            self._resume = (queue_memo, seq)
            return
        fut = self._pool.submit(_resume_queue, queue_memo, seq)
        fut.add_done_callback(_ignore)

    def recycle(self, queue_memo: dict[int, int], seq: int) -> None:
        """Replace the worker by a new one that goes on from ``queue_memo`` (the line hashes
        of the table the serving process holds, at delta ``seq``), once the rounds it runs
        (another resource's, asked meanwhile) are answered: they are not killed half-way.

        Reading a whole queue once (at start-up) leaves the worker's memory high for good:
        100,000 rows were made there and Python keeps the freed memory. Its successor knows
        the lines by their hashes and never makes those rows.
        """
        if self._pool is None:
            return
        if self._inflight:
            self._recycle = (queue_memo, seq)  # the last round to finish replaces it
            return
        self._replace(queue_memo, seq)

    def _replace(self, queue_memo: dict[int, int], seq: int) -> None:
        self._recycle = None
        pool = self._pool
        if pool is None:
            return
        self._resume = (queue_memo, seq)
        self.recycled += 1
        self._discard(pool, kill=True)
        self.start()

    def _discard(self, pool: ProcessPoolExecutor, *, kill: bool = False) -> None:
        if self._pool is not pool:
            return
        pid = self.pid
        self._pool, self._pid = None, None
        if kill and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pool.shutdown(wait=False, cancel_futures=True)

    async def close(self) -> None:
        """Stop the worker (waits for a running round, at most a few seconds, then kills it)."""
        pool, pid = self._pool, self.pid
        self._pool, self._pid = None, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True), 5)
        except TimeoutError:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await asyncio.to_thread(pool.shutdown, wait=True)


def _ignore(fut: Future[int]) -> None:
    if not fut.cancelled():
        fut.exception()
