"""Does the OpenAPI document tell the truth? schemathesis against ``slurmtower serve`` as users run it.

It brings up a devcluster of its own (``/var/lib/slurmtower/bench-openapi``, cluster ``benchoa``,
ports from 30400: never the default cluster, since an admin's fuzzer drains, downs, reserves and
cancels), starts ``slurmtower serve`` as users run it (authentication on, no anonymous reads,
the sensor and the load archiver on, one uvicorn worker, a state directory of its own) with an
admin token made for the run, and runs ``schemathesis run --checks all`` with that token for a
given time. It prints the findings by kind (schemathesis' check names: ``positive_data_acceptance``
is a schema-valid input refused, ``negative_data_rejection`` a schema-violating input accepted,
``status_code_conformance`` an undocumented status, ``content_type_conformance`` an undocumented
content type...), each with its operation and one reproduction, and the requests made.

The event streams (``/events/stream``, ``/clusters/{cluster}/events/stream``) are left out: a
valid request is answered with a stream that never ends.

Then it puts the cluster back as it found it: the serve process stopped (its sensor's triggers
cleared), jobs that appeared during the run cancelled, nodes whose state changed resumed (their
reason, weight and features set back), reservations and triggers made during the run deleted,
and the cluster stopped if the run brought it up.

Usage (as root, like ``slurmtower devcluster up``)::

    .venv/bin/python bench/openapi.py                            # 8 minutes
    .venv/bin/python bench/openapi.py --duration 60 --seed 1 --output bench/results/openapi-$(date +%F).md
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from api import Report, free_port  # bench/api.py's (the bench scripts run from bench/)

from slurmtower.api.security import hash_token, new_token
from slurmtower.devcluster import DevCluster

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = Path("/var/lib/slurmtower/bench-openapi")
BENCH_NAME = "benchoa"
BENCH_PORT_BASE = 30400
#: Answers that never end: a fuzzer would wait on them until its timeout.
STREAMS = r".*/events/stream$"
#: What schemathesis' checks mean, in this report's words.
KINDS = {
    "positive_data_acceptance": "schema-valid input refused",
    "negative_data_rejection": "schema-violating input accepted",
    "status_code_conformance": "undocumented status",
    "content_type_conformance": "undocumented content type",
    "response_schema_conformance": "answer not as its schema says",
    "response_headers_conformance": "undocumented or malformed header",
    "not_a_server_error": "5xx",
    "missing_required_header": "missing required header accepted",
    "unsupported_method": "undeclared method not answered 405",
    "allow_header_conformance": "405 without a right Allow header",
    "ignored_auth": "authentication ignored",
    "use_after_free": "deleted resource still answered",
    "ensure_resource_availability": "created resource not found",
    "object_level_authorization": "another principal's object readable",
}


#: Why a finding is left, by what it is: each a rule the document cannot state, or not this
#: change's to declare. A finding none of these explains is a disagreement to fix.
EXPLAINED: tuple[tuple[str, str], ...] = (
    ("reports", "a report's rules between parameters (end after start, at most 366 days, on the hour for a "
                "rollup table, a rollup's periods) or the cluster's own names (partitions, TRES): OpenAPI "
                "describes each parameter alone; the descriptions say them"),
    ("slurm", "Slurm refused what only the cluster knows (a node name squeue does not know, a feature the "
              "node does not have, a partition or time Slurm will not take): the failed execution's "
              "envelope, the status the document declares for it"),
    ("issue45", "issue 45's routes and actions (/requests, /reservations, slurm.reservation.*): rules between "
                "parameters and defaults (an end before the default start, an update with nothing to change, "
                "a create without a body) and names only slurmdbd knows (accounts, users); the schemas declare "
                "what one parameter alone can say"),
    ("issue46", "issue 46's /mcp: the MCP SDK's transport answers before slurmtower's code (its plain 400 "
                "without a Content-Type header for a body not sent as JSON)"),
    ("http", "uvicorn refused the request line (over its 16 KiB limit: a query of thousands of 4-byte "
             "characters) before the application saw it: no route's to document"),
)


#: The reports' refusals that are rules between parameters or the cluster's names.
_REPORT_RULES = ("end must be after start", "the range may cover at most", "must be on the hour",
                 "must be on a midnight", "must be on a first of a month", "gives more than", "is finer than the",
                 "do not apply to group_by=cluster", "no partition ", "the cluster tracks no ",
                 "increasing whole numbers", "jobs in this range")


def explain(finding: dict[str, Any]) -> str | None:
    """Which of :data:`EXPLAINED` a finding is (its key), or ``None``."""
    op, answer = finding["operation"], finding["answer"]
    path = op.split(" ", 1)[-1].removeprefix("/clusters/{cluster}")
    if answer.startswith("Invalid HTTP request received"):
        return "http"
    if path.startswith(("/requests", "/reservations", "/actions/slurm.reservation.")):
        return "issue45"
    if path == "/mcp":
        return "issue46"
    if path.startswith("/reports/") and finding["check"] == "positive_data_acceptance" and any(
            rule in answer for rule in _REPORT_RULES):
        return "reports"
    if finding["status"] == "400" and '"status":"failed"' in answer.replace(" ", ""):
        return "slurm"
    return None


class ClusterState:
    """What the fuzzer may change in the cluster, read with Slurm's own commands."""

    def __init__(self, cluster: DevCluster) -> None:
        self.env = cluster.command_env()
        self.jobs = self._jobs()
        self.nodes = self._nodes()
        self.reservations = self._reservations()
        self.triggers = self._triggers()

    def _run(self, *argv: str) -> str:
        return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=120,
                              env=self.env).stdout

    def _jobs(self) -> set[str]:
        return set(self._run("squeue", "-h", "-o", "%i").split())

    def _nodes(self) -> dict[str, dict[str, str]]:
        nodes: dict[str, dict[str, str]] = {}
        for line in self._run("scontrol", "-o", "show", "node").splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if "NodeName" in fields:
                reason = re.search(r"Reason=(.*?)(?: \[\S+@\S+\])?(?= \w+=|$)", line)
                fields["Reason"] = reason.group(1) if reason else ""
                nodes[fields["NodeName"]] = fields
        return nodes

    def _reservations(self) -> set[str]:
        return set(re.findall(r"ReservationName=(\S+)", self._run("scontrol", "-o", "show", "res")))

    def _triggers(self) -> set[str]:
        return {line.split()[0] for line in self._run("strigger", "--get").splitlines()[1:] if line.split()}

    def restore(self, out: Report) -> None:
        """Undo what happened since this state was read (``out``: one line per kind undone)."""
        now = ClusterState.__new__(ClusterState)
        now.env = self.env
        jobs = sorted(now._jobs() - self.jobs, key=lambda j: (len(j), j))
        if jobs:
            self._run("scancel", *jobs)
        out(f"- jobs cancelled: {len(jobs)}")
        reservations = sorted(now._reservations() - self.reservations)
        for name in reservations:
            self._run("scontrol", "delete", f"reservation={name}")
        out(f"- reservations deleted: {', '.join(reservations) or 'none'}")
        triggers = sorted(now._triggers() - self.triggers)
        for tid in triggers:
            self._run("strigger", "--clear", f"--id={tid}")
        out(f"- triggers cleared: {len(triggers)}")
        changed: list[str] = []
        for name, after in now._nodes().items():
            before = self.nodes.get(name)
            if before is None:
                continue
            if after.get("State") != before.get("State"):
                if "DRAIN" in after.get("State", "") or after.get("State", "").startswith("DOWN"):
                    self._run("scontrol", "update", f"nodename={name}", "state=resume")
                changed.append(f"{name} {after.get('State')} -> {before.get('State')}")
            for key, field in (("Weight", "weight"), ("AvailableFeatures", "availablefeatures"),
                               ("ActiveFeatures", "activefeatures"), ("Comment", "comment")):
                if after.get(key, "") != before.get(key, ""):
                    value = before.get(key, "")
                    self._run("scontrol", "update", f"nodename={name}",
                              f"{field}={'' if value in ('(null)', 'None') else value}")
                    changed.append(f"{name} {key} {after.get(key)} -> {value}")
        out(f"- nodes put back: {'; '.join(changed) or 'none changed'}")
        # Read back: what could not be undone is said, not hidden.
        again = ClusterState.__new__(ClusterState)
        again.env = self.env
        states = {n: f["State"] for n, f in again._nodes().items()}
        wrong = {n: s for n, s in states.items() if n in self.nodes and s != self.nodes[n]["State"]
                 and ("DRAIN" in s or s.startswith("DOWN"))}
        if wrong:
            out(f"- WARNING: nodes still not as before: {wrong}")


class Tower:
    """``slurmtower serve`` as users run it, on ``cluster``, with an admin token of its own."""

    def __init__(self, cluster: DevCluster) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = new_token()
        # SlurmUser must reach the sensor's notify program: a world-traversable directory.
        self.state_dir = cluster.root / f"bench-openapi-{os.getpid()}"
        self.state_dir.mkdir(parents=True)
        os.chmod(self.state_dir, 0o755)
        env = cluster.command_env()
        env.update({
            "SLURMTOWER_STATE_DIR": str(self.state_dir),
            "SLURMTOWER_AUTH__ANONYMOUS_READ": "false",
            "SLURMTOWER_EVENTS__SENSOR_ENABLED": "true",
            "SLURMTOWER_ARCHIVER__ARCHIVE_USAGE_LOAD": "true",
            "SLURMTOWER_AUTH__TOKENS": json.dumps([{"name": "bench-openapi-admin", "role": "admin",
                                                    "sha256": hash_token(self.token)}]),
        })
        self.log = (self.state_dir / "serve.log").open("wb")
        exe = str(Path(sys.executable).with_name("slurmtower"))
        self.proc = subprocess.Popen([exe, "serve", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--no-access-log"], env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.env = env
        end = time.monotonic() + 60
        while time.monotonic() < end and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit(f"slurmtower serve did not start (see {self.state_dir / 'serve.log'})")

    def background(self) -> str:
        """What the sensor and the archiver did, as one line (proof that they ran)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        sensor = httpx.get(f"{self.url}/events/sensor", headers=headers, timeout=30).json()
        load = httpx.get(f"{self.url}/load", params={"time": 3600}, headers=headers, timeout=30).json()
        return (f"sensor started={sensor.get('started')}, {len(sensor.get('triggers', []))} triggers armed; "
                f"archiver archiving={load.get('archiving')}, {load.get('count')} load samples")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()
        # A sensor that did not stop cleanly leaves its triggers: clear them.
        program = str(self.state_dir / "slurmtower-notify.py")
        out = subprocess.run(["strigger", "--get"], capture_output=True, text=True, check=False, timeout=30,
                             env=self.env).stdout
        for line in out.splitlines()[1:]:
            words = line.split()
            if program in words:
                subprocess.run(["strigger", "--clear", f"--id={words[0]}"], capture_output=True, check=False,
                               timeout=30, env=self.env)


def findings(ndjson: Path) -> tuple[list[dict[str, Any]], int, int]:
    """(the failures, one per check, operation, status and offending parameter; the test cases
    run; the requests made) from schemathesis' NDJSON events."""
    failures: dict[tuple[str, ...], dict[str, Any]] = {}
    cases = requests = 0
    for line in ndjson.read_text().splitlines():
        event = json.loads(line)
        (kind, body), = event.items()
        if kind != "ScenarioFinished":
            continue
        recorder = body.get("recorder", {})
        interactions = recorder.get("interactions", {})
        cases += len(recorder.get("cases", {}))
        requests += len(interactions)
        for case_id, checks in recorder.get("checks", {}).items():
            for check in checks:
                if check.get("status") != "failure":
                    continue
                info = (check.get("failure_info") or {}).get("failure", {})
                response = (interactions.get(case_id) or {}).get("response") or {}
                content = response.get("content") or {}
                text = (base64.b64decode(content["$base64"]).decode(errors="replace")
                        if "$base64" in content else str(content.get("string", "")))
                try:
                    param = str(json.loads(text).get("param") or "")
                except (ValueError, AttributeError):
                    param = ""
                status = str(response.get("status_code", ""))
                key = (check["name"], info.get("operation", recorder.get("label", "?")), status, param)
                if key in failures:
                    failures[key]["count"] += 1
                    continue
                case = (recorder.get("cases", {}).get(case_id) or {}).get("value", {})
                request = {k: case.get(k) for k in ("path_parameters", "query", "headers", "body") if case.get(k)}
                request.pop("headers", None) if set(request.get("headers") or {}) <= {"Authorization"} else None
                failures[key] = {"check": check["name"], "operation": key[1], "status": status, "param": param,
                                 "title": info.get("title", ""), "message": info.get("message", ""),
                                 "request": request, "answer": text[:300], "count": 1}
    return list(failures.values()), cases, requests


def render(out: Report, ndjson: Path) -> None:
    """The findings of schemathesis' NDJSON events: by kind, then each with its explanation."""
    found, cases, requests = findings(ndjson)
    why = {id(f): explain(f) for f in found}
    left = [f for f in found if why[id(f)] is None]
    out()
    out(f"test cases {cases}, requests made {requests}, findings {len(found)} "
        f"(by check, operation, status and parameter), {len(found) - len(left)} explained, {len(left)} not")
    out()
    out("| kind | check | findings | explained |")
    out("|---|---|---:|---:|")
    for check, count in Counter(f["check"] for f in found).most_common():
        known = sum(1 for f in found if f["check"] == check and why[id(f)] is not None)
        out(f"| {KINDS.get(check, check)} | {check} | {count} | {known} |")
    out()
    for key, text in EXPLAINED:
        n = sum(1 for f in found if why[id(f)] == key)
        if n:
            out(f"- explained, {key} ({n}): {text}")
    out()
    for f in sorted(found, key=lambda f: (why[id(f)] is not None, f["check"], f["operation"])):
        out(f"- **{f['check']}** {f['operation']} -> {f['status']}"
            f"{' (' + f['param'] + ')' if f['param'] else ''}, {f['count']} case(s): {f['title']}"
            f"{' [' + str(why[id(f)]) + ']' if why[id(f)] else ' [NOT EXPLAINED]'}")
        out(f"    request: `{json.dumps(f['request'], ensure_ascii=True, default=str)[:400]}`")
        out(f"    answer: `{' '.join(f['answer'].split())}`")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=480.0, help="schemathesis' time budget, seconds")
    ap.add_argument("--workers", type=int, default=1, help="schemathesis' concurrent workers")
    ap.add_argument("--seed", type=int, help="schemathesis' random seed (a run to repeat)")
    ap.add_argument("--output", type=Path, help="also write the report to this Markdown file")
    ap.add_argument("--keep", action="store_true", help="keep schemathesis' reports (the NDJSON events)")
    ap.add_argument("--include-path-regex", help="only the operations whose path matches (a run to iterate on)")
    ap.add_argument("--from-events", type=Path, help="no run: the report of a kept run's events.ndjson")
    args = ap.parse_args()
    if args.from_events is not None:
        render(Report(), args.from_events)
        return 0
    if os.geteuid() != 0:
        raise SystemExit("run as root: it brings up a devcluster of its own")

    out = Report()
    cluster = DevCluster(root=Path(os.environ.get("SLURMTOWER_BENCH_DEVCLUSTER_DIR", BENCH_DIR)),
                         cluster_name=BENCH_NAME, port_base=BENCH_PORT_BASE, log=lambda _m: None)
    was_up = cluster.is_up()
    cluster.up()
    out(f"# bench/openapi.py, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    out()
    out(f"devcluster {cluster.cluster_name} ({cluster.root}, {'already up' if was_up else 'brought up'}); "
        f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    before = ClusterState(cluster)
    tower: Tower | None = None
    reports = Path(cluster.root / f"schemathesis-{os.getpid()}")
    started = time.monotonic()
    try:
        tower = Tower(cluster)
        out(f"slurmtower serve on {tower.url}: authentication on (an admin token), anonymous reads off, "
            "sensor and archiver on")
        ndjson = reports / "events.ndjson"
        argv = [str(Path(sys.executable).with_name("schemathesis")), "run", f"{tower.url}/openapi.json",
                "--checks", "all", "--header", f"Authorization: Bearer {tower.token}",
                "--max-time", f"{args.duration:g}", "--workers", str(args.workers),
                "--exclude-path-regex", STREAMS, "--request-timeout", "60",
                "--report", "ndjson", "--report-ndjson-path", str(ndjson), "--no-color",
                "--suppress-health-check", "all"]
        if args.seed is not None:
            argv += ["--seed", str(args.seed)]
        if args.include_path_regex:
            argv += ["--include-path-regex", args.include_path_regex]
        shown = shlex.join(argv).replace(tower.token, "$ADMIN_TOKEN").replace(tower.url, "$URL")
        out(f"command: `{shown}`")
        t0 = time.monotonic()
        # The document's own formats (a node set), which no pattern says: tests/openapi_formats.py.
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.openapi_formats",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        run = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        took = time.monotonic() - t0
        (reports / "stdout.txt").write_text(run.stdout + run.stderr)
        out(f"schemathesis exited {run.returncode} after {took:.0f} s")
        out(f"background: {tower.background()}")
        summary = [line for line in run.stdout.splitlines() if re.search(r"test cases|API Operations|Tested|"
                                                                          r"generated|passed|failed", line)]
        for line in summary[-8:]:
            out(f"    {line.strip()}")
        render(out, ndjson)
    finally:
        out()
        out("cleanup:")
        if tower is not None:
            tower.stop()
            shutil.rmtree(tower.state_dir, ignore_errors=True)
        before.restore(out)
        if not was_up:
            cluster.down()
            out(f"- devcluster {cluster.cluster_name} stopped")
        if not args.keep:
            shutil.rmtree(reports, ignore_errors=True)
        else:
            out(f"- schemathesis' events kept in {reports}")
        out(f"total {time.monotonic() - started:.0f} s")
        if args.output is not None:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text("\n".join(out.lines) + "\n")
            print(f"report written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
