"""What the scheduler weighs, read from Slurm: priority factors (``sprio``), their weights
(``sprio -w``), expected starts (``squeue --start``), the fair-share tree (``sshare``) and the
QOS and association limits with their use (``scontrol show assoc_mgr``).

Each is one RPC to slurmctld through the one :class:`~slurmtower.slurm.runner.CommandRunner`
(the formats and parsers: :mod:`slurmtower.slurm.adapters.scheduling`). slurmrestd has none of
them but ``/shares``: a REST client reads them through its command fallback
(:func:`scheduling_reads`). :class:`CachedScheduling` keeps each answer a short while, so
that explaining jobs on every request costs slurmctld at most one ``sprio`` and one
``squeue --start`` per job and interval, and the tree and limits once per interval.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from slurmtower.errors import SlurmError, SlurmtowerError, SlurmUnavailable, Unsupported
from slurmtower.models.scheduling import LimitsState, PriorityFactors, PriorityWeights, ShareRow, StartEstimate
from slurmtower.slurm.adapters import scheduling as sc
from slurmtower.slurm.cli_backend import CliSlurmClient
from slurmtower.slurm.runner import CommandResult, CommandRunner, classify_failure

__all__ = ["CachedScheduling", "CliSchedulingReads", "SchedulingReads", "cached_scheduling", "scheduling_reads"]

T = TypeVar("T")

#: The most jobs asked of sprio one by one when it refuses them together (24.11).
MAX_ALONE = 50
#: What sprio says where slurmctld runs priority/basic (no factors to show).
_BASIC = "supported priority plugin"


@runtime_checkable
class SchedulingReads(Protocol):
    """The scheduler's view of jobs and associations. Errors are :mod:`slurmtower.errors`
    types; :class:`~slurmtower.errors.Unsupported` where the cluster has no such thing
    (priority/basic: no factors, no fair share)."""

    def priority_factors(self, job_ids: Sequence[int] = ()) -> list[PriorityFactors]:
        """The factors of these pending jobs (all pending jobs when none given); a held or
        unknown job has none."""
        ...

    def priority_weights(self) -> PriorityWeights: ...

    def start_estimates(self, job_ids: Sequence[int] = ()) -> list[StartEstimate]:
        """The expected starts of these pending jobs (all when none given); unknown ids have none."""
        ...

    def shares(self) -> list[ShareRow]:
        """The whole fair-share tree (every account and user)."""
        ...

    def limits(self) -> LimitsState:
        """Every QOS and association with its limits and their use."""
        ...


class CliSchedulingReads:
    """:class:`SchedulingReads` over ``sprio``, ``squeue``, ``sshare`` and ``scontrol``."""

    def __init__(self, runner: CommandRunner | None = None) -> None:
        self.runner = runner or CommandRunner()

    def _ping(self) -> bool:
        try:
            return "UP" in self.runner.run(["scontrol", "ping"], timeout=10, check=False).stdout
        except SlurmUnavailable:
            return False

    def _run(self, argv: list[str]) -> CommandResult:
        res = self.runner.run(argv, check=False)
        if res.returncode == 0:
            return res
        message = (res.stderr or res.stdout).strip()
        if _BASIC in message.lower():
            raise Unsupported(f"{argv[0]}: slurmctld runs no priority/multifactor: {message.splitlines()[0]}")
        err = classify_failure(res.argv, res.returncode, message)
        if not isinstance(err, SlurmUnavailable) and not self._ping():
            raise SlurmUnavailable(f"slurmctld is not responding ({argv[0]}: {message[:200]})", argv=res.argv,
                                   returncode=res.returncode, stderr=res.stderr)
        raise err

    @staticmethod
    def _ids(job_ids: Sequence[int]) -> str:
        return ",".join(str(int(j)) for j in job_ids)

    def priority_factors(self, job_ids: Sequence[int] = ()) -> list[PriorityFactors]:
        wanted = list(dict.fromkeys(int(j) for j in job_ids))
        argv = ["sprio", "-h", "-o", sc.sprio_format()]
        try:
            res = self._run([*argv, f"--jobs={self._ids(wanted)}"] if wanted else argv)
        except SlurmtowerError as exc:
            if not wanted or "invalid job id" not in exc.message.lower():
                raise
            if len(wanted) == 1:
                return []  # held, or no longer pending: nothing to weigh
            # 24.11's sprio refuses the whole list for one job it does not weigh, naming another
            # of the list ("Invalid job id: 289" for the held 290): each job asked alone then.
            found: list[PriorityFactors] = []
            for job_id in wanted[:MAX_ALONE]:
                found += self.priority_factors([job_id])
            return found
        if _BASIC in (res.stdout + res.stderr).lower():  # 22.05's sprio says so with status 0
            raise Unsupported("sprio: slurmctld runs no priority/multifactor (priority/basic)")
        return sc.parse_sprio_text(res.stdout)

    def priority_weights(self) -> PriorityWeights:
        res = self._run(["sprio", "-w", "-h", "-o", sc.sprio_format()])
        if _BASIC in (res.stdout + res.stderr).lower():
            raise Unsupported("sprio: slurmctld runs no priority/multifactor (priority/basic)")
        return sc.parse_sprio_weights_text(res.stdout)

    def start_estimates(self, job_ids: Sequence[int] = ()) -> list[StartEstimate]:
        argv = ["squeue", "-h", "--start", "-o", sc.start_format()]
        if job_ids:
            argv.append(f"--jobs={self._ids(job_ids)}")
        res = self.runner.run(argv, check=False)
        if res.returncode != 0:
            if "invalid job id" in (res.stderr + res.stdout).lower():
                return []
            self._run(argv)  # raises the classified failure
        return sc.parse_start_text(res.stdout)

    def shares(self) -> list[ShareRow]:
        return sc.parse_sshare_text(self._run(["sshare", "-a", "-n", "-P", "-o", sc.sshare_format()]).stdout)

    def limits(self) -> LimitsState:
        return sc.parse_assoc_mgr_text(self._run(["scontrol", "show", "assoc_mgr", "flags=qos,assoc"]).stdout)


def scheduling_reads(client: object) -> SchedulingReads:
    """The :class:`SchedulingReads` of a Slurm client: its runner for the command backend, its
    command fallback for slurmrestd (which has no sprio, start estimates or assoc_mgr).

    Raises:
        Unsupported: a slurmrestd client without a command fallback.
    """
    if isinstance(client, CliSlurmClient):
        return CliSchedulingReads(client.runner)
    fallback = getattr(client, "fallback", None)
    if isinstance(fallback, CliSlurmClient):
        return CliSchedulingReads(fallback.runner)
    raise Unsupported(f"{type(client).__name__} cannot read priorities, fair share or limits (sprio, sshare and "
                      "scontrol show assoc_mgr need Slurm's commands: give slurmrestd a command fallback)")


class _Kept:
    """Answers kept until their time is up, and failures for as long (a failing command is
    not run again on every request)."""

    def __init__(self, ttl: float, clock: Callable[[], float], size: int = 10_000) -> None:
        self.ttl, self.clock, self.size = ttl, clock, size
        self._items: dict[Any, tuple[float, Any, SlurmtowerError | None]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, read: Callable[[], T]) -> T:
        now = self.clock()
        with self._lock:
            found = self._items.get(key)
        if found is not None and found[0] > now:
            if found[2] is not None:
                raise found[2]
            value: T = found[1]
            return value
        try:
            value = read()
        except (Unsupported, SlurmError) as exc:
            self._put(key, (now + self.ttl, None, exc))
            raise
        self._put(key, (now + self.ttl, value, None))
        return value

    def _put(self, key: Any, item: tuple[float, Any, SlurmtowerError | None]) -> None:
        with self._lock:
            if len(self._items) >= self.size:
                now = self.clock()
                for stale in [k for k, v in self._items.items() if v[0] <= now]:
                    del self._items[stale]
                if len(self._items) >= self.size:
                    self._items.clear()
            self._items[key] = item


class CachedScheduling:
    """A :class:`SchedulingReads` whose answers are kept a while: per job ``job_ttl`` seconds
    (factors and start), the weights ``weights_ttl``, the tree and the limits ``tree_ttl``.
    Thread-safe; two requests racing on one expired answer may both read it."""

    def __init__(self, reads: SchedulingReads, *, job_ttl: float = 10.0, tree_ttl: float = 15.0,
                 weights_ttl: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.reads = reads
        self._jobs = _Kept(job_ttl, clock)
        self._tree = _Kept(tree_ttl, clock, size=8)
        self._weights = _Kept(weights_ttl, clock, size=2)

    def priority_factors(self, job_ids: Sequence[int] = ()) -> list[PriorityFactors]:
        key = ("factors", tuple(sorted(set(job_ids))))
        return self._jobs.get(key, lambda: self.reads.priority_factors(job_ids))

    def priority_weights(self) -> PriorityWeights:
        return self._weights.get("weights", self.reads.priority_weights)

    def start_estimates(self, job_ids: Sequence[int] = ()) -> list[StartEstimate]:
        key = ("start", tuple(sorted(set(job_ids))))
        return self._jobs.get(key, lambda: self.reads.start_estimates(job_ids))

    def shares(self) -> list[ShareRow]:
        return self._tree.get("shares", self.reads.shares)

    def limits(self) -> LimitsState:
        return self._tree.get("limits", self.reads.limits)


#: One cache per Slurm client object (the service's client lives as long as the service).
_CACHES: weakref.WeakKeyDictionary[object, CachedScheduling] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def cached_scheduling(client: object) -> CachedScheduling:
    """The kept :class:`SchedulingReads` of ``client`` (made on first use, shared by every
    request that uses that client).

    Raises:
        Unsupported: as :func:`scheduling_reads`.
    """
    with _CACHES_LOCK:
        found = _CACHES.get(client)
        if found is None:
            found = _CACHES[client] = CachedScheduling(scheduling_reads(client))
        return found
