"""The snapshot cache stretches its interval when refreshing costs more than its CPU share."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from slurmtower.live.cache import SnapshotCache


def _burn(seconds: float) -> int:
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def test_interval_grows_with_the_measured_cost_and_keeps_the_cpu_share() -> None:
    async def scenario() -> tuple[float, float, int, float]:
        cache = SnapshotCache(refresh_interval=0.05, slurm_wait=5, cpu_share=0.25, controller_share=0)
        cache.register("costly", lambda: _burn(0.04))
        started_cpu, started = time.process_time(), time.monotonic()
        for _ in range(120):
            await cache.get("costly")
            await asyncio.sleep(0.01)
        # the refresh-ahead task of the last get may still run
        await asyncio.sleep(0.2)
        used = (time.process_time() - started_cpu) / (time.monotonic() - started)
        return cache.interval, cache.cost("costly"), cache.queries["costly"], used

    interval, cost, queries, used = asyncio.run(scenario())
    assert 0.03 <= cost <= 0.08  # the measured CPU of one refresh
    assert interval >= cost / 0.25 * 0.9  # 0.04 s of CPU at most a quarter of a core: >= 0.16 s
    assert queries < 120 * 0.01 / 0.05  # fewer rounds than the 0.05 s floor would have made
    assert used <= 0.25 * 1.6  # the whole loop (polling included) stays near the share


def test_a_fixed_interval_when_the_share_is_zero() -> None:
    cache = SnapshotCache(refresh_interval=0.05, slurm_wait=5, cpu_share=0, controller_share=0)
    cache.register("costly", lambda: _burn(0.04))

    async def scenario() -> None:
        for _ in range(3):
            await cache.get("costly")
            await asyncio.sleep(0.06)

    asyncio.run(scenario())
    assert cache.interval == 0.05
    assert cache.cost("costly") > 0  # measured, just not acted on


def test_the_interval_never_passes_its_ceiling() -> None:
    cache = SnapshotCache(refresh_interval=0.01, slurm_wait=5, cpu_share=0.01, max_interval=0.5)
    cache.register("costly", lambda: _burn(0.05))

    async def scenario() -> None:
        for _ in range(3):
            await cache.get("costly")
            await asyncio.sleep(0.02)

    asyncio.run(scenario())
    assert cache.interval == 0.5


def test_a_resource_nobody_reads_lately_does_not_stretch_the_interval_of_the_others() -> None:
    """The load archiver reads the nodes once a minute; a dashboard polls the queue. The
    nodes' cost counts while they are read (within two intervals), then no longer."""
    async def scenario() -> tuple[float, float, float]:
        clock = [0.0]
        cache = SnapshotCache(refresh_interval=0.1, slurm_wait=5, cpu_share=0.25, controller_share=0,
                              refresh_ahead=False, clock=lambda: clock[0])
        cache.register("queue", lambda: _burn(0.01))
        cache.register("nodes", lambda: _burn(0.2))
        for _ in range(3):  # two measured rounds of each (the first is a warm-up)
            clock[0] += 10
            await cache.get("queue")
            await cache.get("nodes")
        both = cache.interval
        clock[0] += 3 * both  # past two intervals: the nodes are not asked any more; the queue is
        await cache.get("queue")
        alone = cache.interval
        await cache.get("nodes")
        return both, alone, cache.interval

    both, alone, again = asyncio.run(scenario())
    assert both >= 0.2 / 0.25 * 0.9  # the nodes' 0.2 s at a quarter of a core: about 0.8 s
    assert alone < 0.25 < both  # the queue's 0.01 s alone: the 0.1 s floor
    assert again == pytest.approx(both, rel=0.1)  # read again, they count again


def _ages(refresh_ahead: bool) -> tuple[list[float], int, int]:
    """A client polls every 0.12 s for 1.5 s a resource refreshed every 0.3 s whose read
    takes 0.1 s: the data ages it sees, the rounds made, and the rounds made in the 0.75 s
    after it stopped polling."""
    async def scenario() -> tuple[list[float], int, int]:
        cache = SnapshotCache(refresh_interval=0.3, slurm_wait=5, cpu_share=0, controller_share=0,
                              refresh_ahead=refresh_ahead)
        cache.register("slow", lambda: time.sleep(0.1))
        ages: list[float] = []
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            snap = await cache.get("slow")
            ages.append(cache.clock() - snap.fetched_mono)
            await asyncio.sleep(0.12)
        made = cache.queries["slow"]
        await asyncio.sleep(0.75)  # two intervals and a half: nobody reads, the timer stops
        after = cache.queries["slow"] - made
        cache.close()
        return ages, made, after

    return asyncio.run(scenario())


def test_refresh_ahead_keeps_the_data_within_one_interval_while_read_and_stops_after() -> None:
    ages, made, after = _ages(refresh_ahead=True)
    late, _, _ = _ages(refresh_ahead=False)
    steady, steady_late = sorted(ages[3:]), sorted(late[3:])
    # Data taken as the interval ends: never older than the interval and the read's own time
    # (with the event loop's slack); without the timer a poll finds it up to two intervals old.
    assert steady[-1] <= 0.3 + 0.1 + 0.08, steady
    assert steady_late[-1] > steady[-1], (steady, steady_late)
    assert statistics.median(steady) < statistics.median(steady_late)
    assert made >= 4  # about one round per interval while read
    assert after <= 2  # the rounds stop within two intervals of the last read


def test_slurmctlds_share_is_split_between_full_reads_state_reads_and_the_sensors_polls() -> None:
    """The deployment stays within api.refresh_controller_share: the state reads (while the
    queue is read) and the sensor's polls come out of it first (the state reads at most half
    of it, their interval stretched past that), the full reads get what is left (at least a
    quarter), so the full records' interval is the one that grows."""
    from slurmtower.live.worker import OffloadSpec
    from slurmtower.models.table import StateDelta

    cache = SnapshotCache(refresh_interval=1, slurm_wait=5, cpu_share=0, controller_share=0.05, max_interval=60)
    cache.register("jobs", lambda: None)
    entry = cache._entries["jobs"]
    entry.controller, entry.asked_mono = 0.3, cache.clock()  # a full read costs slurmctld 0.3 s
    assert cache.interval == pytest.approx(6.0)  # 0.3 s in 5 %
    cache.read_states("jobs", lambda full: StateDelta({}), OffloadSpec("job_states", "job_state_delta"), 1.5)
    assert cache.states is not None
    cache.states.controller = 0.015  # one state read: 1 % of slurmctld every 1.5 s
    cache.other_controller_load = lambda: 0.01  # the sensor's polls: 1 %
    assert cache.state_interval == 1.5
    assert cache.interval == pytest.approx(10.0)  # 0.3 s in the 3 % left
    cache.states.controller = 0.05  # costly state reads: at most half the share, every 2 s
    assert cache.state_interval == pytest.approx(2.0)
    assert cache.interval == pytest.approx(20.0)  # 0.3 s in the 1.5 % left
    cache.other_controller_load = lambda: 0.05  # the rest taken: the full reads keep a quarter
    assert cache.interval == pytest.approx(24.0)


def test_slurmctlds_share_bounds_the_full_reads_past_max_refresh_interval() -> None:
    """What the CPU asks is bounded by max_interval; what slurmctld's share asks is not (at
    200,000 jobs a full read took 1.6 s of slurmctld: every 60 s, 2.7 % on top of the state
    reads and the polls, past the share)."""
    cache = SnapshotCache(refresh_interval=1, slurm_wait=5, cpu_share=0.25, controller_share=0.04, max_interval=60)
    cache.register("jobs", lambda: None)
    entry = cache._entries["jobs"]
    entry.asked_mono = cache.clock()
    entry.cost = 100.0  # CPU alone would ask 400 s: held at 60
    assert cache.interval == pytest.approx(60.0)
    entry.controller = 1.6  # 1.6 s of slurmctld in the 4 % share: every 40 s
    assert cache.interval == pytest.approx(60.0)
    cache.other_controller_load = lambda: 0.03  # the polls take 3 %: 1 % left, every 160 s
    assert cache.interval == pytest.approx(160.0)


def test_the_sensors_poll_is_paced_within_its_part_of_the_share() -> None:
    """A poll that costs slurmctld more than a quarter of the share over events.poll_interval
    is spaced so it does not (at most max_refresh_interval apart); unmeasured or unbounded, the
    poll interval is the setting's."""
    from slurmtower.live.budget import POLL_PART, POLL_RPCS, PollPace, RpcMeter, poll_load

    totals = {"REQUEST_NODE_INFO": (10, 10_000), "REQUEST_PARTITION_INFO": (10, 1_000)}
    meter = RpcMeter(lambda: dict(totals))
    pace = PollPace(base=1.0, share=0.04, max_interval=60, meter=meter)
    assert pace.interval == 1.0 and pace.load == 0.0  # nothing measured yet

    def poll() -> None:  # one sinfo under a busy scheduler: 50 ms + 5 ms of slurmctld
        totals["REQUEST_NODE_INFO"] = (totals["REQUEST_NODE_INFO"][0] + 1, totals["REQUEST_NODE_INFO"][1] + 50_000)
        totals["REQUEST_PARTITION_INFO"] = (totals["REQUEST_PARTITION_INFO"][0] + 1,
                                            totals["REQUEST_PARTITION_INFO"][1] + 5_000)

    pace.poll(poll)
    assert pace.cost == pytest.approx(0.055)
    assert pace.interval == pytest.approx(0.055 / (0.04 * POLL_PART))  # 5.5 s: 1 % of slurmctld
    assert pace.load == pytest.approx(0.04 * POLL_PART)
    assert set(POLL_RPCS) == meter.measured
    pace.poll(poll)  # the next poll: costed from the last reading on (one sdiag read a poll)
    assert meter.reads == 3 and pace.cost == pytest.approx(0.055)
    pace.share = 0.0001
    assert pace.interval == 60.0  # at most max_interval apart
    pace.share = 0
    assert pace.interval == 1.0  # not bounded
    # a process without the sensor counts the polls at the pace the sensor keeps
    assert poll_load(0.055, 1.0, 0.04, 60) == pytest.approx(0.01)
    assert poll_load(0.005, 1.0, 0.04, 60) == pytest.approx(0.005)  # cheap polls: every second
    assert poll_load(0.0, 1.0, 0.04, 60) == 0.0


def test_a_read_is_costed_at_the_mean_of_its_types_calls_since_the_last_reading() -> None:
    """Lock waits come and go with the scheduler's cycles: each read is costed at once, by
    one sdiag reading after it, at the mean of every call of its types since the meter's
    previous reading (at most WINDOW s back; older, sdiag is read before the read too). A
    poll that cost a lot spaces the next one by itself: the polls keep their part over time."""
    from slurmtower.live.budget import WINDOW, PollPace, RpcMeter

    now = [0.0]
    totals = {"REQUEST_NODE_INFO": (0, 0), "REQUEST_PARTITION_INFO": (0, 0)}
    readings = [0]

    def read() -> dict[str, tuple[int, int]]:
        readings[0] += 1
        return dict(totals)

    def calls(n: int, us: int) -> None:
        c, t = totals["REQUEST_NODE_INFO"]
        totals["REQUEST_NODE_INFO"] = (c + n, t + n * us)
        c, t = totals["REQUEST_PARTITION_INFO"]
        totals["REQUEST_PARTITION_INFO"] = (c + n, t)

    pace = PollPace(base=1.0, share=0.04, max_interval=60, meter=RpcMeter(read, clock=lambda: now[0]))
    pace.poll(lambda: calls(1, 10_000))  # quiet: 10 ms, around the poll (two readings)
    assert readings[0] == 2 and pace.cost == pytest.approx(0.010) and pace.interval == 1.0
    now[0] += 1.0
    pace.poll(lambda: calls(1, 150_000))  # the scheduler's locks: 150 ms, seen at this very poll
    assert readings[0] == 3 and pace.cost == pytest.approx(0.150) and pace.interval == pytest.approx(15.0)
    calls(2, 60_000)  # the nodes' own reads meanwhile
    now[0] += 15.0
    pace.poll(lambda: calls(1, 30_000))  # (2 x 60 + 30) / 3 = 50 ms since the last reading
    assert readings[0] == 4 and pace.cost == pytest.approx(0.050) and pace.interval == pytest.approx(5.0)
    now[0] += WINDOW + 1  # too old a reading to start from: read sdiag before the poll too
    pace.poll(lambda: calls(1, 20_000))
    assert readings[0] == 6 and pace.cost == pytest.approx(0.020)


def test_the_state_reads_stretch_for_the_share_at_most_four_times() -> None:
    """The job states are the fast part: a costly state read (a busy scheduler's lock waits)
    spaces them for the share, but never past four state intervals (6 s by default)."""
    from slurmtower.live.cache import STATE_STRETCH
    from slurmtower.live.worker import OffloadSpec
    from slurmtower.models.table import StateDelta

    cache = SnapshotCache(refresh_interval=2, slurm_wait=5, cpu_share=0, controller_share=0.045, max_interval=60)
    cache.register("jobs", lambda: None)
    cache.read_states("jobs", lambda full: StateDelta({}), OffloadSpec("job_states", "job_state_delta"), 1.5)
    assert cache.states is not None
    cache.states.controller = 0.09  # 90 ms of lock waits: every 4 s keeps half of 4.5 %
    assert cache.state_interval == pytest.approx(4.0)
    cache.states.controller = 1.0  # a second: 44 s for the share, held at 6 s
    assert cache.state_interval == pytest.approx(STATE_STRETCH * 1.5) == 6.0
