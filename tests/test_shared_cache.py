"""The deployment's shared snapshot without Slurm: the codec (no pickle, checked decoding) and
the election, publication, reading, takeover and fallback on a real Redis, with caches whose
"Slurm" is a function counting its calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import secrets
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from slurmtower.live.cache import SnapshotCache
from slurmtower.live.codec import MAGIC, decode_snapshot, encode_snapshot
from slurmtower.live.sharing import (
    FOLLOWER,
    REFRESHER,
    UNREACHABLE,
    SharedSnapshots,
    deployment_prefix,
)
from slurmtower.models import ControllerStats, Job, JobState, Node, NodeState, Partition
from slurmtower.models.stats import RpcStat
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.settings import Settings

from .redis_helpers import PrivateRedis

LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def _jobs() -> JobTable:
    return JobTable.from_jobs([
        Job(job_id=7, user_name="alice", account="physics", partition="batch", state=JobState.RUNNING,
            name="a", nodes="n[1-2]", cpus=4, memory_mib=400, submit_time=datetime(2026, 1, 2, tzinfo=UTC),
            time_limit=timedelta(hours=1)),
        Job(job_id=8, user_name=None, account="chemistry", partition="short,batch", state=JobState.PENDING,
            name="b \"quoted\"\nline"),
        Job(job_id=12, user_name="bob", account=None, partition=None, state=JobState.PENDING, name="é"),
    ])


def _nodes() -> NodeTable:
    return NodeTable.from_nodes([
        Node(name="n10", state=NodeState.IDLE, flags=frozenset({"DRAIN"}), partitions=["debug"], cpus=2),
        Node(name="n2", state=NodeState.ALLOCATED, partitions=["debug", "batch"], cpus=2),
    ])


def _partitions() -> list[Partition]:
    return [Partition(name="debug", state="UP", nodes="n[1-4]", max_time=timedelta(minutes=5), is_default=True,
                      allow_accounts=["physics"])]


def _stats() -> ControllerStats:
    return ControllerStats(slurm_time=datetime(2026, 12, 1, 12, tzinfo=UTC), jobs_pending=3,
                           rpcs_by_type=[RpcStat(name="REQUEST_JOB_INFO", count=5, total_time_us=900)])


# -- the codec ------------------------------------------------------------------------------
@pytest.mark.parametrize("compress", [0, 1], ids=["raw", "zlib"])
def test_tables_read_back_with_their_columns_and_filters(compress: int) -> None:
    jobs = _jobs()
    back = decode_snapshot("jobs", encode_snapshot("jobs", jobs, compress=compress))
    assert isinstance(back, JobTable) and back == jobs and back.jobs() == jobs.jobs()
    for column in ("user", "account", "partition", "state", "name", "nodes"):
        assert back.columns[column] == jobs.columns[column]
    assert back.columns["line"] == (None, None, None)  # rows made from models have no line digest
    assert back.select(partition={"batch"}) == [0, 1] and back.select(nodes={"n2"}) == [0]
    nodes = _nodes()
    back_nodes = decode_snapshot("nodes", encode_snapshot("nodes", nodes, compress=compress))
    assert back_nodes == nodes and back_nodes.keys == ("n2", "n10") and back_nodes.nodes() == nodes.nodes()
    assert back_nodes.columns == nodes.columns
    assert back_nodes.select(state={"DRAIN"}) == [1]


def test_a_tables_line_digests_read_back() -> None:
    # A queue read from squeue carries each line's digest (the same in every process and run):
    # kept or shared, a refresh worker goes on from them and parses only the lines that changed.
    jobs = _jobs()
    digests = (2**64 - 1, 0, 12345678901234567)
    read = JobTable(jobs.keys, jobs.fragments, {**jobs.columns, "line": digests})
    back = decode_snapshot("jobs", encode_snapshot("jobs", read, compress=1))
    assert back.columns["line"] == digests
    assert back.line_memo() == read.line_memo() == dict(zip(digests, jobs.keys, strict=True))


def test_models_read_back() -> None:
    assert decode_snapshot("partitions", encode_snapshot("partitions", _partitions())) == _partitions()
    assert decode_snapshot("stats", encode_snapshot("stats", _stats())) == _stats()
    empty = JobTable.from_jobs([])
    assert decode_snapshot("jobs", encode_snapshot("jobs", empty)) == empty


def test_a_blob_is_no_pickle_and_names_its_kind() -> None:
    blob = encode_snapshot("jobs", _jobs())
    assert blob.startswith(MAGIC)
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(blob)  # noqa: S301 - showing that it is not a pickle
    with pytest.raises(ValueError, match="expected 'NodeTable'"):
        decode_snapshot("nodes", blob)
    with pytest.raises(ValueError, match="holds a JobTable"):
        encode_snapshot("jobs", _nodes())


def _tampered(blob: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    (size,) = struct.unpack_from("<I", blob, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(blob[start:start + size])
    change(header)
    head = json.dumps(header).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + blob[start + size:]


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(header: dict[str, Any]) -> None:
        header[key] = value
    return change


def _column(index: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(header: dict[str, Any]) -> None:
        header["columns"][index][key] = value
    return change


BLOB = encode_snapshot("jobs", _jobs())


@pytest.mark.parametrize(("blob", "message"), [
    (b"\x80\x04garbage", "not a slurmtower snapshot"),
    (BLOB[:-3], "do not add up"),
    (BLOB + b"x", "do not add up"),
    (_tampered(BLOB, _set("rows", 2)), "bytes for 2 values"),
    (_tampered(BLOB, _set("kind", "os.system")), "kind"),
    (_tampered(BLOB, _column(0, "values", ["alice"])), "points past its values"),
    (_tampered(BLOB, _column(0, "values", [{"a": 1}, "b", "c"])), "bad values"),
    (_tampered(BLOB, _column(5, "sets", [["n1"]])), "bad sets"),
    (_tampered(BLOB, _column(0, "name", "line")), "columns must be"),
    (_tampered(BLOB, _set("compressed", True)), "do not inflate"),
], ids=["magic", "truncated", "trailing", "rows", "kind", "index", "value-type", "set-type", "column",
        "inflate"])
def test_malformed_blobs_are_refused(blob: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_snapshot("jobs", blob)


def test_keys_out_of_order_are_refused() -> None:
    blob = bytearray(BLOB)
    (size,) = struct.unpack_from("<I", blob, len(MAGIC))
    keys_at = len(MAGIC) + 4 + size
    struct.pack_into("<q", blob, keys_at, 99)  # job 7 becomes 99, ahead of 8 and 12
    with pytest.raises(ValueError, match="in order"):
        decode_snapshot("jobs", bytes(blob))


def test_prefix_names_the_deployment_without_the_password(tmp_path: Path) -> None:
    a = Settings(cluster_name="hpc1", store_url="postgresql+psycopg://tower:s3cret@db/tower")
    b = Settings(cluster_name="hpc1", store_url="postgresql+psycopg://tower:other@db/tower")
    c = Settings(cluster_name="hpc1", store_url="postgresql+psycopg://tower:s3cret@db/staging")
    d = Settings(cluster_name="hpc1", store_url="postgresql+psycopg://tower:s3cret@db/tower")
    d.api.hidden_partitions = ["admin"]
    assert deployment_prefix(a) == deployment_prefix(b)  # one deployment, whatever its password
    assert deployment_prefix(a).startswith("slurmtower:hpc1:") and "s3cret" not in deployment_prefix(a)
    assert len({deployment_prefix(a), deployment_prefix(c), deployment_prefix(d)}) == 3
    a.api.shared_cache_prefix = "site:prod"
    assert deployment_prefix(a) == "site:prod"


# -- election, publication, followers --------------------------------------------------------
class FakeSlurm:
    """What each resource's "Slurm" answers, and how often it was asked."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {"jobs": _jobs(), "nodes": _nodes(), "partitions": _partitions(),
                                       "stats": _stats()}
        self.calls: dict[str, int] = dict.fromkeys(self.values, 0)

    def reader(self, resource: str) -> Callable[[], Any]:
        def read() -> Any:
            self.calls[resource] += 1
            return self.values[resource]
        return read


def _cache(slurm: FakeSlurm, url: str, prefix: str, *, interval: float = 0.5, lease: float = 1.0,
           name: str = "p") -> SnapshotCache:
    cache = SnapshotCache(refresh_interval=interval, slurm_wait=3, cpu_share=0, controller_share=0)
    for resource in slurm.values:
        cache.register(resource, slurm.reader(resource))
    cache.shared = SharedSnapshots(url, prefix, timeout=0.3, lease_seconds=lease, identity=f"{name}-{prefix}")
    return cache


@pytest.fixture()
def prefix() -> Iterator[str]:
    name = f"slurmtower-test:{secrets.token_hex(4)}"
    yield name
    client = redis.Redis.from_url(LOCAL_REDIS)
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)
    client.close()


async def _elect(*caches: SnapshotCache) -> None:
    for cache in caches:
        await cache.shared_round()


@contextlib.asynccontextmanager
async def electing(*caches: SnapshotCache) -> AsyncIterator[None]:
    """Election rounds in the background, as the service's lifespan runs them."""
    async def loop(cache: SnapshotCache) -> None:
        while True:
            await asyncio.sleep(await cache.shared_round())

    tasks = [asyncio.create_task(loop(c)) for c in caches]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _close(*caches: SnapshotCache) -> None:
    for cache in caches:
        assert cache.shared is not None
        await cache.shared.close()


def test_one_refresher_and_a_follower_serve_the_same_round(prefix: str) -> None:
    async def scenario() -> None:
        slurm = FakeSlurm()
        a, b = _cache(slurm, LOCAL_REDIS, prefix, name="a"), _cache(slurm, LOCAL_REDIS, prefix, name="b")
        try:
            await _elect(a, b)
            assert a.shared is not None and b.shared is not None
            assert (a.shared.mode, b.shared.mode) == (REFRESHER, FOLLOWER)
            mine = await a.get("jobs")
            theirs = await b.get("jobs")
            assert theirs.value == mine.value and theirs.fetched_at == mine.fetched_at
            assert abs(theirs.fetched_mono - mine.fetched_mono) < 0.05
            assert slurm.calls["jobs"] == 1
            assert b.queries["jobs"] == 0 and b.shared_reads["jobs"] == 1
            # A follower asks for resources nobody else reads: the refresher reads them for it.
            async with electing(a, b):
                assert (await b.get("partitions")).value == _partitions()
                stats = await b.get("stats")
            assert stats.value == _stats() and slurm.calls["stats"] == 1 and a.queries["stats"] == 1
            assert slurm.calls["partitions"] == 1 and b.queries["partitions"] == 0
        finally:
            await _close(a, b)

    asyncio.run(scenario())


def test_unchanged_rounds_move_only_the_fetch_time(prefix: str) -> None:
    async def scenario() -> None:
        slurm = FakeSlurm()
        a, b = _cache(slurm, LOCAL_REDIS, prefix, name="a"), _cache(slurm, LOCAL_REDIS, prefix, name="b")
        try:
            await _elect(a, b)
            async with electing(a, b):
                first = await b.get("jobs")  # only b is asked: a refreshes because b wants it
                assert a.shared is not None and b.shared is not None
                # Three published rounds; on a loaded machine a round can miss its tick (a Redis
                # call timing out), so wait for them against a deadline rather than a fixed sleep.
                deadline = time.monotonic() + 15
                while a.shared.stats["rounds_published"] < 3 and time.monotonic() < deadline:
                    await asyncio.sleep(0.55)
                    await b.get("jobs")
                latest = await b.get("jobs")
                assert a.shared.stats["rounds_published"] >= 3 and slurm.calls["jobs"] >= 3
                assert a.shared.stats["values_stored"] == 1  # the same table: stored once
                assert b.shared.stats["values_read"] == 1
                assert latest.fetched_at > first.fetched_at and latest.value is first.value
                slurm.values["jobs"] = JobTable.from_jobs(_jobs().jobs()[:2])
                await asyncio.sleep(1.2)
                changed = await b.get("jobs")
                assert len(changed.value) == 2 and a.shared.stats["values_stored"] == 2
                assert b.queries["jobs"] == 0
        finally:
            await _close(a, b)

    asyncio.run(scenario())


def test_a_follower_takes_over_from_a_refresher_that_stopped_renewing(prefix: str) -> None:
    async def scenario() -> None:
        slurm = FakeSlurm()
        a, b = _cache(slurm, LOCAL_REDIS, prefix, name="a"), _cache(slurm, LOCAL_REDIS, prefix, name="b")
        try:
            await _elect(a, b)
            await a.get("nodes")
            await b.get("nodes")
            assert b.shared is not None and b.shared.following
            calls = slurm.calls["nodes"]
            start = time.monotonic()
            while not b.shared.refreshing:  # a is "killed": it neither renews nor resigns
                await b.shared_round()
                await asyncio.sleep(b.shared.tick)
                assert time.monotonic() - start < 3
            assert time.monotonic() - start >= 0.5  # not before the lease ran out
            await asyncio.sleep(0.6)
            await b.get("nodes")
            await asyncio.sleep(0.1)
            assert slurm.calls["nodes"] > calls and b.queries["nodes"] == slurm.calls["nodes"] - calls
            # The old refresher, back from a stall, can no longer publish: it follows.
            assert a.shared is not None
            assert await a.shared.publish("nodes", _nodes(), datetime.now(UTC), 0.5) == 0
            assert a.shared.following
        finally:
            await _close(a, b)

    asyncio.run(scenario())


def test_a_refresher_that_stops_cleanly_hands_over_at_once(prefix: str) -> None:
    async def scenario() -> None:
        slurm = FakeSlurm()
        a = _cache(slurm, LOCAL_REDIS, prefix, name="a", lease=30)
        b = _cache(slurm, LOCAL_REDIS, prefix, name="b", lease=30)
        try:
            await _elect(a, b)
            assert a.shared is not None and b.shared is not None and a.shared.refreshing
            await a.shared.close()
            await b.shared_round()
            assert b.shared.refreshing
        finally:
            await _close(b)

    asyncio.run(scenario())


def test_without_redis_each_process_refreshes_alone_and_comes_back(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    server.start()

    async def scenario() -> None:
        slurm = FakeSlurm()
        a = _cache(slurm, server.url, "t", name="a")
        b = _cache(slurm, server.url, "t", name="b")
        try:
            await _elect(a, b)
            await a.get("jobs")
            await b.get("jobs")
            assert slurm.calls["jobs"] == 1
            server.stop()
            await asyncio.sleep(1.1)  # past two intervals: the next get waits for its round
            t0 = time.monotonic()
            await _elect(a, b)
            assert time.monotonic() - t0 < 2  # bounded by the timeout, no retries
            assert a.shared is not None and b.shared is not None
            assert (a.shared.mode, b.shared.mode) == (UNREACHABLE, UNREACHABLE)
            assert (await b.get("jobs")).value == _jobs()
            assert slurm.calls["jobs"] == 2 and b.queries["jobs"] == 1  # b read Slurm itself
            server.start()
            await asyncio.sleep(0.1)
            await _elect(a, b)
            assert {a.shared.mode, b.shared.mode} == {REFRESHER, FOLLOWER}
            follower = a if a.shared.following else b
            refresher = b if follower is a else a
            await asyncio.sleep(1.1)  # past two intervals: the next get waits for its round
            before = slurm.calls["jobs"]
            async with electing(a, b):  # the refresher reads what the follower wants
                got = await follower.get("jobs")
            assert got.value == _jobs() and slurm.calls["jobs"] == before + 1
            assert refresher.queries["jobs"] >= 1 and follower.shared_reads["jobs"] >= 1
        finally:
            await _close(a, b)

    try:
        asyncio.run(scenario())
    finally:
        server.stop()


def test_a_follower_whose_redis_dies_mid_round_reads_slurm(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    server.start()

    async def scenario() -> None:
        slurm = FakeSlurm()
        a = _cache(slurm, server.url, "t", name="a")
        b = _cache(slurm, server.url, "t", name="b")
        try:
            await _elect(a, b)
            await a.get("jobs")
            await b.get("jobs")
            server.stop()
            await asyncio.sleep(1.1)  # past two intervals: the next get waits for its round
            # b does not know yet (no election since): its round fails over to Slurm at once.
            assert b.shared is not None and b.shared.following
            got = await asyncio.wait_for(b.get("jobs"), 2)
            assert got.value == _jobs() and b.queries["jobs"] == 1 and b.shared.mode == UNREACHABLE
        finally:
            await _close(a, b)

    try:
        asyncio.run(scenario())
    finally:
        server.stop()


def test_an_unreadable_shared_value_is_not_served(prefix: str) -> None:
    async def scenario() -> None:
        slurm = FakeSlurm()
        a, b = _cache(slurm, LOCAL_REDIS, prefix, name="a"), _cache(slurm, LOCAL_REDIS, prefix, name="b")
        try:
            await _elect(a, b)
            await a.get("jobs")
            await asyncio.sleep(0.05)
            client = redis.Redis.from_url(LOCAL_REDIS)
            version = client.hget(f"{prefix}:meta:jobs", "version")
            assert isinstance(version, bytes)
            client.set(f"{prefix}:value:jobs:{version.decode()}", pickle.dumps(_jobs()))
            client.close()
            got = await b.get("jobs")
            assert got.value == _jobs() and b.queries["jobs"] == 1  # read from Slurm instead
            assert b.shared is not None and b.shared.mode == "own refresh: shared snapshot unreadable"
        finally:
            await _close(a, b)

    asyncio.run(scenario())
