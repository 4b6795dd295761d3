"""What sharing a snapshot through Redis costs at a real queue's size (no Slurm needed).

Usage::

    python bench/snapshot_codec.py                        # 50,000 and 100,000 synthetic jobs
    python bench/snapshot_codec.py --sizes 100000 --redis redis://127.0.0.1:6379/0 --output bench/results/x.md

Builds a :class:`~slurmtower.models.table.JobTable` of N jobs shaped like the text-form
queue (a third running on 1-16 nodes of 5,000, the rest pending; 400 users, 40 accounts,
the scale lab's partitions) and a 5,000-node :class:`~slurmtower.models.table.NodeTable`,
then times :func:`~slurmtower.live.codec.encode_snapshot` and
:func:`~slurmtower.live.codec.decode_snapshot` (best of ``--repeat``; "digest": the
content address the refresher computes for a changed value) with the
fragments stored as they are and zlib level 1, the blob sizes, and with ``--redis`` a SET
and a GET of the blob on that server (key ``slurmtower-bench:<pid>``, deleted at the end).
Compare with pickle, which the refresh worker uses inside one process.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slurmtower.live.codec import blob_digest, decode_snapshot, encode_snapshot
from slurmtower.models import Job, JobState, Node, NodeState
from slurmtower.models.table import JobTable, NodeTable

PARTITIONS = ["debug", "compute", "bigmem", "gpu", "long", "batch,short", "compute,bigmem"]


def synthetic_jobs(n: int, seed: int = 1) -> JobTable:
    rng = random.Random(seed)
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    jobs = []
    for i in range(n):
        running = rng.random() < 0.33
        first = rng.randrange(1, 4990)
        width = rng.randrange(1, 17)
        user = f"user{rng.randrange(400):03d}"
        jobs.append(Job(
            job_id=1000 + i, name=f"sim-{rng.choice(['md', 'cfd', 'train', 'post'])}-{i % 997}",
            user_name=user, user_id=10000 + int(user[4:]), group_id=100, account=f"acct{rng.randrange(40)}",
            partition=rng.choice(PARTITIONS), qos="normal",
            state=JobState.RUNNING if running else JobState.PENDING,
            state_reason=None if running else rng.choice(["Priority", "Resources", "JobHeldUser"]),
            nodes=(f"n[{first}-{first + width - 1}]" if width > 1 else f"n{first}") if running else None,
            node_count=width, cpus=width * 2, tasks=width, memory_mib=width * 2000,
            time_limit=timedelta(hours=rng.randrange(1, 48)), submit_time=t0 + timedelta(seconds=i),
            start_time=t0 + timedelta(seconds=i + 60) if running else None, priority=rng.randrange(1, 10**6),
            work_dir=f"/home/{user}/runs/{i % 50}", command=f"/home/{user}/runs/{i % 50}/job.sh",
            standard_output=f"/home/{user}/runs/{i % 50}/slurm-%j.out",
        ))
    return JobTable.from_jobs(jobs)


def synthetic_nodes(n: int = 5000) -> NodeTable:
    states = [NodeState.IDLE, NodeState.ALLOCATED, NodeState.MIXED, NodeState.UNKNOWN]
    return NodeTable.from_nodes(Node(name=f"n{i}", state=states[i % 4], partitions=["debug", "compute"],
                                     cpus=64, real_memory_mib=256000, features=["compute"])
                                for i in range(1, n + 1))


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[50_000, 100_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--redis", help="also SET/GET the blobs on this Redis URL")
    ap.add_argument("--output", type=Path)
    args = ap.parse_args()
    client = None
    if args.redis:
        import redis

        client = redis.Redis.from_url(args.redis, socket_timeout=30)
    key = f"slurmtower-bench:{os.getpid()}"
    lines = [f"# Snapshot codec, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}", "",
             "| table | rows | fragments | codec | blob | encode | digest | decode | SET | GET | pickle dump / load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines))
    tables: list[tuple[str, str, JobTable | NodeTable]] = [
        ("jobs", f"jobs {n:,}", synthetic_jobs(n)) for n in args.sizes]
    tables.append(("nodes", "nodes 5,000", synthetic_nodes()))
    try:
        for resource, label, table in tables:
            frag_mb = sum(len(f) for f in table.fragments) / 1e6
            p_dump, pickled = best(lambda t=table: pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL), args.repeat)
            p_load, _ = best(lambda b=pickled: pickle.loads(b), args.repeat)  # noqa: S301 - our own bytes
            for level in (0, 1):
                enc, blob = best(lambda t=table, lv=level, r=resource: encode_snapshot(r, t, compress=lv),
                                 args.repeat)
                dig, _ = best(lambda b=blob: blob_digest(b), args.repeat)
                dec, back = best(lambda b=blob, r=resource: decode_snapshot(r, b), args.repeat)
                assert back == table and back.columns.keys() == table.columns.keys()
                set_s = get_s = float("nan")
                if client is not None:
                    set_s, _ = best(lambda b=blob: client.set(key, b), args.repeat)
                    get_s, got = best(lambda: client.get(key), args.repeat)
                    assert got == blob
                row = (f"| {label} | {len(table):,} | {frag_mb:.1f} MB | {'zlib 1' if level else 'raw'} | "
                       f"{len(blob) / 1e6:.1f} MB | {enc * 1e3:.0f} ms | {dig * 1e3:.0f} ms | {dec * 1e3:.0f} ms | "
                       f"{set_s * 1e3:.0f} ms | {get_s * 1e3:.0f} ms | "
                       f"{p_dump * 1e3:.0f} / {p_load * 1e3:.0f} ms |")
                print(row)
                lines.append(row)
    finally:
        if client is not None:
            client.delete(key)
    if args.output:
        args.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
