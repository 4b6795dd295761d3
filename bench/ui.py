"""The dashboard's pages in Debian's Chromium at the scale lab's size: each page's load time.

Usage (root, loopback only)::

    .venv/bin/python bench/ui.py                       # 5,000 nodes; 10,000 and 100,000 jobs
    .venv/bin/python bench/ui.py --sizes 1000 --nodes 1000 --repeat 3

It brings up (or reuses) the scale lab of ``bench/scale.py`` (``/var/lib/slurmtower/scalelab``,
5,000 nodes), fills its queue with the same mix of jobs (single and arrays, four users, seven
partitions; held, waiting, 8 running), starts ``slurmtower serve`` as users run it (the lab's
slurmtower.toml: authentication on, the sensor and archiver on), logs in in headless Chromium
with the demo reader token and, for each page, measures ``--repeat`` loads after one warm-up
(the snapshot cache is warm, as for an admin who keeps the page open):

* **load**: navigation start to the ``load`` event (the page drawn with its styles and
  scripts; what the issue's "loads in <= 1 s" means), and to ``DOMContentLoaded``;
* **server**: the document's response time (request start to response end) and its size;
* **static**: the same HTML saved and served by a static file server (``python -m http.server``
  on loopback): the perfect-cache limit of a page of that size in this browser; the ratio
  load / static is what slurmtower's rendering and data cost on top.

It prints a markdown table (pages x sizes, median of the loads) and writes it to
``bench/results/ui-<date>.md``. At the end it cancels every job it submitted, stops serve,
the static server and the lab if it started it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import scale  # noqa: E402  (bench/scale.py: the lab, the queue, serve as users run it)

from slurmtower.devcluster import DevCluster  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RESULTS = Path(__file__).parent / "results"

_TIMING = """() => { const n = performance.getEntriesByType('navigation')[0];
  return {load: n.loadEventEnd, dom: n.domContentLoadedEventEnd, server: n.responseEnd - n.requestStart,
          size: n.transferSize || n.encodedBodySize}; }"""


def pages(job: int | None) -> list[tuple[str, str]]:
    """(label, path) of every page, with one job and one node of the lab."""
    out = [("overview", "/ui"), ("jobs", "/ui/jobs"), ("jobs, filtered (user, state)",
                                                       "/ui/jobs?user=alice&state=PENDING"),
           ("nodes (map)", "/ui/nodes"), ("node n2", "/ui/nodes/n2"), ("history", "/ui/history"),
           ("partitions", "/ui/partitions"), ("reservations", "/ui/reservations")]
    if job is not None:
        out.insert(3, (f"job {job}", f"/ui/jobs/{job}"))
    return out


def measure(page: Any, url: str, repeat: int) -> dict[str, float]:
    """Median timings of ``repeat`` loads of ``url`` after one warm-up."""
    runs = []
    for i in range(repeat + 1):
        response = page.goto(url, wait_until="load", timeout=120_000)
        if response is None or response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status if response else 'no response'}")
        if i:
            runs.append(page.evaluate(_TIMING))
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def static_copy(page: Any, url: str, folder: Path, name: str, static_url: str, repeat: int) -> dict[str, float]:
    """The page's HTML (as served) from a static server beside a copy of /ui/static: the
    perfect-cache limit of that page in this browser."""
    html = page.context.request.get(url).text()
    (folder / f"{name}.html").write_text(html)
    return measure(page, f"{static_url}/{name}.html", repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--sizes", default="10000,100000", help="queue sizes (jobs), ascending")
    ap.add_argument("--repeat", type=int, default=5, help="measured loads per page (after one warm-up)")
    ap.add_argument("--submit-workers", type=int, default=4)
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if os.geteuid() != 0:
        raise SystemExit("bench/ui.py runs as root (it brings up the lab and submits as its users)")
    if not Path(CHROMIUM).exists():
        raise SystemExit("Debian's chromium is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    cluster = DevCluster(root=scale.LAB_DIR, cluster_name=scale.LAB_NAME, port_base=scale.LAB_PORT_BASE,
                         nodes=args.nodes, log=lambda m: scale.log(f"  {m}"))
    was_up = cluster.is_up()
    was_nodes = DevCluster(root=scale.LAB_DIR, cluster_name=scale.LAB_NAME, port_base=scale.LAB_PORT_BASE).node_count
    scale.log(f"scale lab: {args.nodes} nodes ({'reused' if was_up else 'starting it'})")
    cluster.up()
    env = cluster.command_env()
    scale.cancel_leftovers(env)
    token = cluster.demo_tokens()["reader"]
    rng = random.Random(10)  # noqa: S311 - a reproducible queue
    queue = scale.Queue()
    columns: dict[int, dict[str, str]] = {}
    static_dir = Path(tempfile.mkdtemp(prefix="slurmtower-ui-bench-"))
    static_port = scale.free_port()
    # the static server serves the saved pages and a copy of /ui/static under the same path
    assets = static_dir / "ui" / "static"
    assets.mkdir(parents=True)
    static = subprocess.Popen([sys.executable, "-m", "http.server", str(static_port), "--bind", "127.0.0.1"],  # noqa: S603
                              cwd=static_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    static_url = f"http://127.0.0.1:{static_port}"
    try:
        scale.submit_running(queue, env)
        for size in sizes:
            scale.log(f"filling the queue to {size:,} jobs ...")
            scale.fill(queue, size, env, array_share=0.2, workers=args.submit_workers, rng=rng)
            scale.log(f"  {queue.jobs:,} jobs in {queue.records:,} records; measuring the pages ...")
            with scale.serving(cluster, cluster.root / "bench-ui-serve", access_log=True) as serve:
                serve.wait_ready({"Authorization": f"Bearer {token}"})
                for name in ("dashboard.css", "common.js", "dashboard.js", "uPlot.iife.min.js", "uPlot.min.css"):
                    (assets / name).write_bytes(httpx.get(f"{serve.url}/ui/static/{name}").content)
                col: dict[str, str] = {}
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                    context = browser.new_context(viewport={"width": 1280, "height": 900})
                    page = context.new_page()
                    page.goto(f"{serve.url}/ui/login")
                    page.fill("#token", token)
                    page.click("button[type=submit]")
                    page.wait_for_url(f"{serve.url}/ui")
                    running = queue.ids[0] if queue.ids else None
                    for label, path in pages(running):
                        try:
                            t = measure(page, f"{serve.url}{path}", args.repeat)
                        except RuntimeError as exc:
                            col[label] = f"n/a ({exc})"
                            scale.log(f"  {label}: {col[label]}")
                            continue
                        slug = "".join(ch if ch.isalnum() else "-" for ch in label)
                        s = static_copy(page, f"{serve.url}{path}", static_dir, slug, static_url, args.repeat)
                        col[label] = (f"{t['load']:.0f} ms (DOM {t['dom']:.0f}, server {t['server']:.0f}, "
                                      f"{t['size'] / 1024:.0f} KiB); static {s['load']:.0f} ms: "
                                      f"{scale.fmt_ratio(t['load'], s['load'])}")
                        scale.log(f"  {label}: {col[label]}")
                    browser.close()
            columns[size] = col
    finally:
        static.terminate()
        static.wait(10)
        shutil.rmtree(static_dir, ignore_errors=True)
        scale.log(f"cleaning up: cancelling {len(queue.ids):,} job ids ...")
        scale.cancel(queue.ids, env)
        scale.cancel_leftovers(env)
        if not was_up:
            cluster.down()
        elif was_nodes != args.nodes:
            DevCluster(root=scale.LAB_DIR, cluster_name=scale.LAB_NAME, port_base=scale.LAB_PORT_BASE,
                       nodes=was_nodes, log=lambda m: scale.log(f"  {m}")).up()
    if columns:
        header = [f"# slurmtower dashboard pages in Chromium, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
                  "Command: `" + " ".join([".venv/bin/python bench/ui.py", *sys.argv[1:]]) + "`", "",
                  f"{args.nodes:,} nodes (scale lab, Slurm 22.05), {os.cpu_count()} cores shared by Slurm, the "
                  f"service and the browser; slurmtower serve as users run it (auth on, reader token, sensor and "
                  f"archiver on); Debian's Chromium headless, warm cache, median of {args.repeat} loads after a "
                  f"warm-up. Load: navigation start to the load event. Static: the same HTML from a static file "
                  f"server (the perfect-cache limit); the ratio is load / static.", ""]
        text = scale.table(columns, header)
        print("\n" + text)
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"ui-{datetime.now(UTC):%Y-%m-%d}.md"
        out.write_text(text)
        scale.log(f"written to {out}")


if __name__ == "__main__":
    main()
