"""The dashboard's screenshots for the README and the documentation site (``make screenshots``).

Run with the local cluster's environment (``eval "$(slurmtower devcluster env)"``): it starts
``slurmtower serve`` on a free port with the cluster's config (plus a ``user`` token for alice),
sets a scene the pages can show (jobs of alice and bob running and pending, a node drained, a
maintenance reservation, a reservation alice asks for, a usage rollup), logs in to the real
dashboard with Debian's Chromium driven by Playwright (never a downloaded browser) and writes
one PNG per page into ``docs/screenshots/``. At the end it cancels its jobs, resumes the node,
deletes its reservation, denies the request and stops the service.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

The 1,000-node map (``nodes-1000.png``) needs the scale lab: the browser tests take it
(``tests/test_ui_nodes_browser.py``, into ``build/ui-screenshots``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, what: str, timeout: float = 60) -> Any:
    end = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        if time.monotonic() > end:
            raise SystemExit(f"screenshots: timed out waiting for {what}")
        time.sleep(0.3)


def ok(response: httpx.Response) -> httpx.Response:
    """``response`` when it succeeded; else exit, saying what the service answered."""
    if response.is_error:
        raise SystemExit(f"screenshots: {response.request.url.path}: {response.status_code} {response.text[:400]}")
    return response


def _listed(body: Any) -> list[Any]:
    """The items of a list answer (a bare list, or under ``events``)."""
    return body if isinstance(body, list) else list(body.get("events", []))


def sbatch(user: str, *args: str) -> str:
    # /tmp: a working directory every user may write the job's output to
    out = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir", "/tmp", *args],  # noqa: S108
                         check=True, capture_output=True, text=True, timeout=30)
    return out.stdout.strip().split(";")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    config = Path(os.environ.get("SLURMTOWER_CONFIG", ""))
    if not config.is_file():
        raise SystemExit('screenshots: run with the local cluster\'s environment: eval "$(slurmtower devcluster env)"')
    cluster_dir = Path(os.environ.get("SLURMTOWER_DEVCLUSTER_DIR", "/var/lib/slurmtower/devcluster"))
    tokens = json.loads((cluster_dir / "etc" / "demo-tokens.json").read_text())
    alice = secrets.token_urlsafe(24)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="slurmtower-shots-") as tmp:
        own = Path(tmp) / "slurmtower.toml"
        own.write_text(config.read_text() + "\n[[auth.tokens]]\nname = \"alice\"\nrole = \"user\"\n"
                       f"sha256 = \"{hashlib.sha256(alice.encode()).hexdigest()}\"\n")
        env = {**os.environ, "SLURMTOWER_CONFIG": str(own), "SLURMTOWER_API__PORT": str(port),
               "SLURMTOWER_API__REFRESH_INTERVAL": "1", "SLURMTOWER_ACTIONS__BREAKER_ENABLED": "false"}
        serve = subprocess.Popen([str(BIN / "slurmtower"), "serve", "--no-access-log"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "serve.log", "w"))  # noqa: SIM115
        operator = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['operator']}"}, timeout=30)
        jobs: list[str] = []
        request_id = None
        try:
            wait_for(lambda: httpx.get(f"{url}/ready", timeout=5).status_code == 200, "the service")
            jobs = [sbatch("alice", "--job-name", "sweep", "-n", "1", "--wrap", "sleep 900") for _ in range(3)]
            jobs += [sbatch("bob", "--job-name", "md-run", "-p", "batch", "-n", "2", "--wrap", "sleep 900")
                     for _ in range(3)]
            jobs.append(sbatch("alice", "--job-name", "post", "--hold", "--wrap", "true"))
            ok(operator.post("/actions/slurm.node.drain", json={"nodes": "n4", "reason": "fan swap"}))
            start = (datetime.now(UTC) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
            ok(operator.post("/actions/slurm.reservation.create", json={
                "name": "shots_maint", "nodes": "n[3-4]", "start_time": start.isoformat(), "duration": 240,
                "users": "root", "flags": "MAINT", "comment": "firmware", "force": True}))
            asked = httpx.post(f"{url}/actions/slurm.reservation.create?request_reason=thesis deadline",
                               headers={"Authorization": f"Bearer {alice}"}, timeout=30, json={
                                   "nodes": "n1", "start_time": (start + timedelta(days=1)).isoformat(),
                                   "duration": 480, "users": "alice"})
            request_id = asked.json().get("id") if asked.status_code == 202 else None
            subprocess.run([str(BIN / "slurmtower"), "devcluster", "rollup", "--dir", str(cluster_dir)],
                           check=False, capture_output=True, timeout=120)
            wait_for(lambda: len(operator.get("/queue", params={"user": "alice,bob"}).json().get("jobs", [])) >= 7,
                     "the jobs in the queue")
            wait_for(lambda: _listed(operator.get("/events", params={"node": "n4"}).json()), "n4's event")
            shoot(url, tokens, jobs[0], args.out)
        finally:
            if jobs:
                subprocess.run(["scancel", *jobs], check=False, capture_output=True, timeout=30)
            operator.post("/actions/slurm.node.resume", json={"nodes": "n4", "force": True})
            operator.post("/actions/slurm.reservation.delete", json={"name": "shots_maint"})
            if request_id is not None:
                operator.post(f"/requests/{request_id}/deny", json={"comment": "screenshots done"})
            operator.close()
            serve.terminate()
            serve.wait(30)


def shoot(url: str, tokens: dict[str, str], job: str, out: Path) -> None:
    """One full-page PNG of each page into ``out``, logged in as a reader or an operator."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    pages = {
        "reader": [("overview-reader", "/ui"), ("jobs", "/ui/jobs"), ("job", f"/ui/jobs/{job}"),
                   ("nodes", "/ui/nodes"), ("partitions", "/ui/partitions"), ("history", "/ui/history"),
                   ("fairshare", "/ui/fairshare")],
        "operator": [("node", "/ui/nodes/n4"), ("reservations", "/ui/reservations"), ("requests", "/ui/requests"),
                     ("reports", "/ui/reports")],
    }
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        for role, shots in pages.items():
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(f"{url}/ui")
            page.wait_for_url(f"{url}/ui/login")
            page.fill("#token", tokens[role])
            page.click("button[type=submit]")
            page.wait_for_url(f"{url}/ui")
            for name, path in shots:
                page.goto(f"{url}{path}")
                page.wait_for_load_state("networkidle")
                target = out / f"{name}.png"
                page.screenshot(path=str(target), full_page=True)
                print(target, target.stat().st_size)
            context.close()
        browser.close()


if __name__ == "__main__":
    main()
