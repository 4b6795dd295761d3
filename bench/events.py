"""Latency and coverage of node events: strigger alone vs slurmtower's sensor, same run.

For each of N ``scontrol update`` changes (drain, resume, down, resume, cycled over the
nodes; each node changes every ``4 * gap`` seconds so strigger's 16 s passes can report
every state) it measures the time from just before ``scontrol update`` to

* **sensor**: the ``slurm.node.state`` event in the store (its observation time), from a
  real ``slurmtower sensor`` process with the default ``events.poll_interval``;
* **strigger alone**: the start of a trigger program (a tiny script logging ``time.time()``
  and its arguments) armed with ``--flags=PERM`` for down, drained, up and reconfig.

A change counts as *seen* when an event naming that node and that kind of change arrives
(drain -> ``drained``, down -> ``down``, resume from DOWN -> ``up``). Resume from DRAIN is
only ever reported as ``reconfig`` (no node): counted as not seen, its latency shown apart.

Run against your devcluster (``eval "$(slurmtower devcluster env)"`` first)::

    .venv/bin/python bench/events.py [--changes 32] [--gap 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sensor_helpers import SensorProcess  # noqa: E402

from slurmtower.devcluster import DevCluster  # noqa: E402
from slurmtower.models.event import NODE_STATE  # noqa: E402
from slurmtower.nodeset import NodeSet  # noqa: E402

NODES = ["n1", "n2", "n3", "n4"]
CYCLE = [("drain", "state=drain", "reason=bench"), ("resume_drain", "state=resume"),
         ("down", "state=down", "reason=bench"), ("resume_down", "state=resume")]
STRIGGER_FOR = {"drain": "drained", "down": "down", "resume_down": "up", "resume_drain": "reconfig"}

LOGGER = """import sys, time
with open(sys.argv[1], "a") as fh:
    fh.write(f"{time.time():.3f} {' '.join(sys.argv[2:])}\\n")
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(name: str, lat: list[float], seen: int, total: int) -> str:
    if not lat:
        return f"{name:<16} seen {seen}/{total} ({100 * seen / total:.0f} %)"
    return (f"{name:<16} p50 {statistics.median(lat):6.2f} s  p95 {pct(lat, 0.95):6.2f} s  "
            f"max {max(lat):6.2f} s  seen {seen}/{total} ({100 * seen / total:.0f} %)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=32)
    ap.add_argument("--gap", type=float, default=5.0, help="seconds between two changes")
    ap.add_argument("--tail", type=float, default=20.0, help="seconds to wait after the last change")
    args = ap.parse_args()
    cluster = DevCluster(log=lambda _m: None)
    if not cluster.is_up():
        print("devcluster is not up: slurmtower devcluster up", file=sys.stderr)
        return 2
    os.environ["SLURM_CONF"] = str(cluster.slurm_conf)
    subprocess.run(["scontrol", "update", "nodename=n[1-4]", "state=resume"], capture_output=True, check=False)
    time.sleep(2)

    sensor = SensorProcess(cluster, extra_env={"SLURMTOWER_EVENTS__POLL_INTERVAL": "1.0"})
    work = sensor.state_dir / "strigger-alone"
    work.mkdir()
    os.chmod(work, 0o777)
    script = work / "log.py"
    script.write_text(LOGGER)
    logfile = work / "fired.log"
    logfile.touch()
    shutil.chown(logfile, user="slurm")
    armed: list[str] = []
    try:
        sensor.start()
        for ev in ("down", "drained", "up", "reconfig"):
            flag = "--reconfig" if ev == "reconfig" else f"--{ev}"
            argv = ["runuser", "-u", "slurm", "--", "strigger", "--set"]
            argv += [flag] if ev == "reconfig" else ["--node", flag]
            argv += ["--flags=PERM", f"--program=/usr/bin/python3 {script} {logfile} {ev}"]
            subprocess.run(argv, check=True, capture_output=True)
            armed.append(ev)
        start_id = sensor.events()[-1].id or 0
        changes: list[tuple[float, str, str]] = []
        step = {n: 0 for n in NODES}
        t_next = time.time()
        for i in range(args.changes):
            node = NODES[i % len(NODES)]
            kind, *words = CYCLE[step[node] % len(CYCLE)]
            step[node] += 1
            time.sleep(max(0.0, t_next - time.time()))
            t0 = time.time()
            subprocess.run(["scontrol", "update", f"nodename={node}", *words], check=True, capture_output=True)
            changes.append((t0, node, kind))
            t_next = t0 + args.gap
        time.sleep(args.tail)

        events = [e for e in sensor.events(types=[NODE_STATE]) if (e.id or 0) > start_id]
        fired = []
        for line in logfile.read_text().splitlines():
            ts, ev, *rest = line.split()
            fired.append((float(ts), ev, set(NodeSet(rest[0])) if rest and ev != "reconfig" else set()))

        def sensor_match(t0: float, node: str, kind: str) -> float | None:
            for e in events:
                p = e.payload
                if e.node != node or e.time.timestamp() < t0:
                    continue
                ok = {"drain": "DRAIN" in p["flags_added"],
                      "resume_drain": "DRAIN" in p["flags_removed"],
                      "down": p["state"] == "DOWN" and p["previous_state"] != "DOWN",
                      "resume_down": p["previous_state"] == "DOWN" and p["state"] != "DOWN"}[kind]
                if ok:
                    return e.time.timestamp() - t0
            return None

        def strigger_match(t0: float, node: str, kind: str, *, reconfig: bool = False) -> float | None:
            want = STRIGGER_FOR[kind]
            for ts, ev, nodes in fired:
                if ts >= t0 and ev == want and (reconfig or node in nodes):
                    return ts - t0
            return None

        s_lat, t_lat, reconf = [], [], []
        rows = []
        for t0, node, kind in changes:
            s = sensor_match(t0, node, kind)
            t = None if kind == "resume_drain" else strigger_match(t0, node, kind)
            if kind == "resume_drain":
                r = strigger_match(t0, node, kind, reconfig=True)
                if r is not None:
                    reconf.append(r)
            if s is not None:
                s_lat.append(s)
            if t is not None:
                t_lat.append(t)
            rows.append((node, kind, s, t))
        total = len(changes)
        when = datetime.now(UTC).isoformat(timespec="seconds")
        print(f"# bench/events.py {when}: {total} changes, gap {args.gap} s, sensor poll 1.0 s")
        for node, kind, s, t in rows:
            fs = f"{s:6.2f}" if s is not None else "  miss"
            ft = f"{t:6.2f}" if t is not None else ("  n/a " if kind == "resume_drain" else "  miss")
            print(f"  {node} {kind:<13} sensor {fs} s   strigger {ft} s")
        print(summary("sensor", s_lat, len(s_lat), total))
        print(summary("strigger alone", t_lat, len(t_lat), total))
        if reconf:
            print(f"  (resume from DRAIN: strigger said only 'reconfig', no node, after "
                  f"p50 {statistics.median(reconf):.2f} s, max {max(reconf):.2f} s)")
        if s_lat and t_lat:
            print(f"ratio strigger/sensor: p50 {statistics.median(t_lat) / statistics.median(s_lat):.1f}x, "
                  f"max {max(t_lat) / max(s_lat):.1f}x; coverage {len(s_lat)}/{total} vs {len(t_lat)}/{total}")
        return 0
    finally:
        out = subprocess.run(["strigger", "--get"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines()[1:]:
            if str(script) in line.split():
                subprocess.run(["strigger", "--clear", f"--id={line.split()[0]}"], capture_output=True,
                               check=False)
        sensor.cleanup()
        subprocess.run(["scontrol", "update", "nodename=n[1-4]", "state=resume"], capture_output=True,
                       check=False)


if __name__ == "__main__":
    sys.exit(main())
