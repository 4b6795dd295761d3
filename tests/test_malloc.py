"""The allocator gives back what the rounds' threads freed (live/malloc.py), in a process of
its own: rows made, pickled and dropped by eight threads, a few kept between them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slurmtower.live import malloc

SCRIPT = r"""
import json, os, pickle, sys
from concurrent.futures import ThreadPoolExecutor
from slurmtower.live import malloc
tuned = malloc.tune() if sys.argv[1] == "tune" else False
keep = []
def work(i):
    rows = [os.urandom(300) + bytes(300) for _ in range(30000)]  # ~20 MB of 600-byte rows
    back = pickle.loads(pickle.dumps(rows))
    keep.append(back[::50])  # survivors among the freed rows, as a table's are
with ThreadPoolExecutor(8) as pool:
    list(pool.map(work, range(8)))
trimmer = malloc.Trimmer(grow=0)
trimmer.floor = 0
before = malloc.rss_bytes()
due = trimmer.due()
trimmer.run()
print(json.dumps({"tuned": tuned, "before": before, "after": malloc.rss_bytes(), "due": due}))
"""


def _run(mode: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.skipif(not malloc.available(), reason="not glibc: nothing to tune or trim")
def test_tuned_and_trimmed_the_threads_freed_memory_goes_back() -> None:
    plain, tuned = _run("plain"), _run("tune")
    assert tuned["tuned"] is True and tuned["due"] is True
    # Without either measure the freed rows stay in the threads' arenas...
    assert plain["before"] > 100 << 20, plain
    # ...tuned, fewer arenas hold them, and the trim gives back most of what is left.
    assert tuned["before"] < plain["before"], (plain, tuned)
    assert tuned["after"] < tuned["before"] * 0.6, tuned
    assert tuned["after"] < 100 << 20, tuned


def test_a_trimmer_is_due_only_when_the_process_grew() -> None:
    trimmer = malloc.Trimmer(grow=64 << 20)
    assert not trimmer.due()
    trimmer.floor -= 65 << 20
    assert trimmer.due()
    trimmer.run()
    assert trimmer.trims == 1 and not trimmer.due()
