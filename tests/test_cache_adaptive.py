"""The snapshot cache stretches its interval when refreshing costs more than its CPU share."""

from __future__ import annotations

import asyncio
import time

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
