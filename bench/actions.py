"""Benchmark the action catalogue against the devcluster (or any cluster you may drain).

Usage (with the devcluster's environment: ``eval "$(slurmtower devcluster env)"``)::

    python bench/actions.py              # 10 rounds over n[1-4]
    python bench/actions.py --rounds 20 --nodes 'n[1-4]'

It prints, as medians over the rounds, measured in this run:

1. drain + resume of the node set through the catalogue in ONE call each vs one catalogue
   call per node (the ratio is what bulk node sets save), and the same for bare ``scontrol``;
2. the catalogue's overhead over a bare ``scontrol update`` doing the same drain + resume
   (the catalogue also checks the nodes exist, reads the states before and after for the
   audit, and appends two audit records and two executions to SQLite).

The nodes must be idle and in service; they are resumed at the end of every round.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slurmtower.actions import ActionStore, Catalogue
from slurmtower.nodeset import NodeSet
from slurmtower.settings import load_settings


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", "update", *args], check=True, capture_output=True, timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--nodes", default="n[1-4]")
    args = parser.parse_args()
    nodes = NodeSet(args.nodes)
    settings = load_settings()
    with tempfile.TemporaryDirectory() as tmp:
        store = ActionStore(f"sqlite:///{Path(tmp) / 'bench.db'}")
        cat = Catalogue.from_settings(settings, store=store)

        def act(name: str, target: str, **extra: object) -> None:
            env = cat.execute(name, {"nodes": target, **extra}, principal="bench", via="cli")
            if env.status != "succeeded":
                raise SystemExit(f"{name} {target} failed: {env.stderr}")

        def cat_bulk() -> None:
            act("slurm.node.drain", str(nodes), reason="bench")
            act("slurm.node.resume", str(nodes))

        def cat_per_node() -> None:
            for n in nodes:
                act("slurm.node.drain", n, reason="bench")
            for n in nodes:
                act("slurm.node.resume", n)

        def bare_bulk() -> None:
            scontrol(f"nodename={nodes}", "state=DRAIN", "reason=bench")
            scontrol(f"nodename={nodes}", "state=RESUME")

        def bare_per_node() -> None:
            for n in nodes:
                scontrol(f"nodename={n}", "state=DRAIN", "reason=bench")
            for n in nodes:
                scontrol(f"nodename={n}", "state=RESUME")

        cases = {"catalogue, one call": cat_bulk, "catalogue, per node": cat_per_node,
                 "scontrol, one call": bare_bulk, "scontrol, per node": bare_per_node}
        times: dict[str, list[float]] = {k: [] for k in cases}
        cat_bulk()  # warm-up: imports, version detection, SQLite tables
        for _ in range(args.rounds):
            for label, fn in cases.items():
                times[label].append(timed(fn))
        cat.store.close()

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"drain + resume of {nodes} ({len(nodes)} nodes), median of {args.rounds} rounds")
    for label, value in med.items():
        print(f"  {label:<22} {value * 1000:8.1f} ms")
    print(f"bulk vs per node, catalogue: per-node / one-call = "
          f"{med['catalogue, per node'] / med['catalogue, one call']:.2f}x")
    print(f"bulk vs per node, scontrol:  per-node / one-call = "
          f"{med['scontrol, per node'] / med['scontrol, one call']:.2f}x")
    print(f"catalogue overhead over bare scontrol (one call): "
          f"{med['catalogue, one call'] / med['scontrol, one call']:.2f}x "
          f"(+{(med['catalogue, one call'] - med['scontrol, one call']) * 1000:.1f} ms per drain+resume)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
