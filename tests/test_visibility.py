"""One visibility policy (issue 12 items 5 and 6): hidden partitions and private job fields.

The hidden-partition test enumerates the application (every GET route, every read action of
the catalogue, the dashboard pages and /metrics) rather than listing routes by hand, and
runs each as a reader while a real job waits in the hidden partition: a route or an action
added without the policy fails here. Records *about* nodes and partitions (events and their
payloads, audit records, availability rows, a breaker's 409) are made for real on the local
cluster and read on every path they leave by (issue 41 item 4).
"""

from __future__ import annotations

import getpass
import json
import re
import subprocess
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from slurmtower.actions import Catalogue
from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.models import Job, JobState, Node, NodeState
from slurmtower.models.table import JobTable
from slurmtower.settings import Settings, TokenEntry
from slurmtower.visibility import Visibility
from tests.auth_helpers import ADMIN, OPERATOR, READER, bearer, with_tokens
from tests.conftest import load_settings, sh, wait_for
from tests.test_routes_classified import FASTAPI_DOCS, _walk

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

HIDDEN = "batch"
#: A reader whose name is the job owner's: "the reader's own jobs".
OWNER_READER = "stw_test_owner_reader_token"
#: The same person with the ``user`` role: their own jobs too.
OWNER_USER = "stw_test_owner_user_token"
#: GET routes that carry no cluster data, or that the test cannot read to the end.
NOT_READ = {
    "/ui/static/{name}": "the dashboard's own script and style",
    "/ui/login": "the login form",
    "/events/stream": "an endless SSE stream (its events come from the same store reads as /events)",
}
#: Parameters each read action is run with, chosen to reach every job and node.
READ_ACTION_PARAMS: dict[str, dict[str, Any]] = {
    "slurm.config.get": {},
    "slurm.job.find": {"criterias": {"user_name": getpass.getuser()}, "include_finished": True},
    "slurm.job.get": {"jobids": ["{visible}"]},
    "slurm.job.step.get": {"jobids": ["{visible}"]},
    "slurm.job.why": {"jobids": ["{visible}"]},
    "slurm.node.get": {"nodes": "n[1-4]"},
}


def _sbatch(*args: str) -> int:
    out = sh("sbatch", "--parsable", "-o", "/tmp/stw-vis-%j.out", "-e", "/tmp/stw-vis-%j.err", "-D", "/tmp",
             "-A", "physics", "--hold", *args)
    return int(out.strip().split(";")[0])


def _script(marker: str) -> str:
    path = f"/tmp/{marker}-secret.sh"
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho \"$@\"\n")
    return path


@pytest.fixture(scope="module")
def jobs(devcluster: object) -> Iterator[dict[str, Any]]:
    """A held job in the hidden partition and one in a visible one, both with a secret in their
    submit line."""
    marker = f"stwvis{uuid.uuid4().hex[:8]}"
    script = _script(marker)
    hidden = _sbatch("-J", f"{marker}-hidden", "-p", HIDDEN, script, f"TOKEN={marker}-secret")
    visible = _sbatch("-J", f"{marker}-shown", "-p", "short", script, f"TOKEN={marker}-secret")
    wait_for(lambda: str(hidden) in sh("squeue", "-h", "-o", "%i"), 20, what="the hidden job queued")
    try:
        yield {"hidden": hidden, "visible": visible, "marker": marker}
    finally:
        subprocess.run(["scancel", str(hidden), str(visible)], capture_output=True, check=False)


@pytest.fixture(scope="module")
def app(devcluster: object, tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    s = load_settings(devcluster.tower_conf, environ={})  # type: ignore[attr-defined]
    s.state_dir = tmp_path_factory.mktemp("visibility")
    s = with_tokens(s)
    s.auth.tokens.append(TokenEntry(name=getpass.getuser(), role="reader", sha256=hash_token(OWNER_READER)))
    s.auth.tokens.append(TokenEntry(name=getpass.getuser(), role="user", sha256=hash_token(OWNER_USER)))
    s.api.hidden_partitions = [HIDDEN]
    return create_app(s)


@pytest.fixture(scope="module")
def api(app: FastAPI, jobs: dict[str, Any]) -> Iterator[TestClient]:
    with TestClient(app) as client:
        # The queue snapshot holds both jobs before anything is read.
        wait_for(lambda: str(jobs["visible"]) in client.get("/queue", headers=bearer(READER)).text, 30,
                 what="the visible job in /queue")
        yield client


def _get_paths(app: FastAPI) -> list[str]:
    paths = []
    for prefix, _deps, route in _walk(app.routes):
        if not isinstance(route, APIRoute) or "GET" not in route.methods:
            continue
        path = prefix + route.path
        if path in FASTAPI_DOCS or path in NOT_READ:
            continue
        paths.append(re.sub(r"\{(\w+)(:\w+)?\}", "x1", path))
    return sorted(set(paths))


def _leaks(body: str, jobs: dict[str, Any], content_type: str = "application/json") -> list[str]:
    """What of the hidden partition and its job ``body`` shows: the partition's name, the job's
    id (as a job id in JSON, a job's link or row in a page, a job label in a scrape) or name."""
    job_id = jobs["hidden"]
    # The id as the job's own, not as any number: on a young cluster the hidden job's id (89,
    # say) is also another record's row id (data-run="89"), a count or a duration.
    if "json" in content_type:
        id_pattern = rf'"(?:job_id|array_job_id|het_job_id)":{job_id}\b|"{job_id}"'
    elif "html" in content_type:  # a page links a job, or marks its row
        id_pattern = rf'/jobs/{job_id}\b|data-job="{job_id}"|jobid={job_id}\b'
    else:  # a scrape would label it
        id_pattern = rf'\bjob(?:_?id)?="{job_id}"'
    if "html" in content_type and f"{jobs['marker']}-shown" in body:
        # a page showing the visible job links it: the form the id check looks for
        assert f"/jobs/{jobs['visible']}" in body, "pages show jobs otherwise now: update the check"
    return [w for w in (rf"\b{HIDDEN}\b", id_pattern, f"{jobs['marker']}-hidden") if re.search(w, body)]


def test_no_get_route_shows_a_hidden_partition_or_its_job(app: FastAPI, api: TestClient,
                                                          jobs: dict[str, Any]) -> None:
    paths = _get_paths(app)
    for expected in ("/queue", "/nodes", "/partitions", "/usage", "/history", "/metrics", "/ui",
                     "/ui/fragments/queue", "/ui/fragments/nodes"):
        assert expected in paths
    extra = ["/queue?partition=batch", f"/queue?user={getpass.getuser()}", "/nodes?partition=batch",
             "/nodes?nodes=n1", "/history?partition=batch", f"/history?jobid={jobs['hidden']}",
             f"/history?user={getpass.getuser()}", f"/jobs/{jobs['visible']}/why", f"/jobs/{jobs['hidden']}/why"]
    leaks = {}
    seen_visible = False
    for path in [*paths, *extra]:
        got = api.get(path, headers=bearer(READER))
        assert got.status_code < 500, (path, got.text[:300])
        seen_visible = seen_visible or str(jobs["visible"]) in got.text
        found = _leaks(got.text, jobs, got.headers.get("content-type", ""))
        if path.endswith("/actions"):  # the catalogue is static text: "batch" there is scancel's option, not the partition
            found = [w for w in found if w != rf"\b{HIDDEN}\b"]
        if found:
            leaks[path] = found
    assert leaks == {}
    assert seen_visible  # the visible job shows: the check reads real data


def test_no_read_action_shows_a_hidden_partition_or_its_job(api: TestClient, jobs: dict[str, Any]) -> None:
    reads = [n for n in Catalogue.names() if not Catalogue.spec(n).mutating]
    assert set(reads) <= set(READ_ACTION_PARAMS), "give a new read action its parameters here"
    leaks = {}
    for name in reads:
        params = {k: ([jobs["visible"]] if v == ["{visible}"] else v) for k, v in READ_ACTION_PARAMS[name].items()}
        got = api.post(f"/actions/{name}", json=params, headers=bearer(READER))
        assert got.status_code == 200, (name, got.text[:300])
        found = _leaks(got.text, jobs)
        result = got.json()["result"]
        if isinstance(result, list) and jobs["hidden"] in result:  # job ids (slurm.job.find)
            found.append("the job id")
        if found:
            leaks[name] = found
    assert leaks == {}
    # Asked by id, a hidden job is unknown, like one that does not exist.
    for name in ("slurm.job.get", "slurm.job.step.get", "slurm.job.why"):
        got = api.post(f"/actions/{name}", json={"jobids": [jobs["hidden"]]}, headers=bearer(READER))
        assert got.status_code == 404, (name, got.text[:300])
        assert jobs["marker"] not in got.text and not re.search(rf"\b{HIDDEN}\b", got.text)
    got = api.post("/actions/slurm.job.find", json={"criterias": {"partition": HIDDEN}}, headers=bearer(READER))
    assert got.json()["result"] == []


def test_a_node_only_in_hidden_partitions_is_hidden_and_a_shared_one_loses_the_name() -> None:
    policy = Visibility(hidden_partitions=frozenset({"secret"}))
    only = Node(name="n9", state=NodeState.IDLE, partitions=["secret"])
    both = Node(name="n1", state=NodeState.IDLE, partitions=["debug", "secret"])
    none = Node(name="n0", state=NodeState.IDLE)
    assert [n.name for n in policy.nodes([only, both, none])] == ["n1", "n0"]
    assert policy.nodes([both])[0].partitions == ["debug"]
    pending = Job(job_id=7, state=JobState.PENDING, partition="secret,debug")
    assert policy.jobs([pending])[0].partition == "debug"
    assert policy.jobs([Job(job_id=8, state=JobState.PENDING, partition="secret")]) == []


# -- private job fields ------------------------------------------------------------------------
PRIVATE = ("submit_line", "command", "work_dir", "standard_output", "standard_error")


def _job_of(rows: list[dict[str, Any]], job_id: int) -> dict[str, Any]:
    return next(r for r in rows if r["job_id"] == job_id)


def _get_job(api: TestClient, token: str, job_id: int) -> dict[str, Any]:
    got = api.post("/actions/slurm.job.get", json={"jobids": [job_id]}, headers=bearer(token))
    assert got.status_code == 200, got.text[:300]
    rows: list[dict[str, Any]] = got.json()["result"][str(job_id)]
    return rows[0]


@pytest.mark.parametrize("token", [OPERATOR, ADMIN, OWNER_READER, OWNER_USER],
                         ids=["operator", "admin", "owner-reader", "owner-user"])
def test_operators_admins_and_the_owner_see_private_job_fields(api: TestClient, jobs: dict[str, Any],
                                                               token: str) -> None:
    job = _get_job(api, token, jobs["visible"])
    assert f"{jobs['marker']}-secret" in job["command"]
    assert job["work_dir"] == "/tmp" and job["standard_output"].startswith("/tmp/stw-vis-")
    queued = _job_of(api.get("/queue", headers=bearer(token)).json()["jobs"], jobs["visible"])
    assert queued["work_dir"] == "/tmp"
    paged = _job_of(api.get(f"/queue?limit=100000&user={getpass.getuser()}", headers=bearer(token)).json()["jobs"],
                    jobs["visible"])
    assert paged["work_dir"] == "/tmp"
    page = api.get(f"/ui/jobs/{jobs['visible']}", headers=bearer(token))  # the dashboard's job page
    assert page.status_code == 200 and "/tmp/stw-vis-" in page.text
    assert "/tmp/stw-vis-" not in api.get(f"/ui/jobs/{jobs['visible']}", headers=bearer(READER)).text


def test_a_reader_sees_other_users_jobs_without_private_fields(api: TestClient, jobs: dict[str, Any]) -> None:
    job = _get_job(api, READER, jobs["visible"])
    assert job["name"] == f"{jobs['marker']}-shown"  # the job itself shows
    assert all(job.get(f) is None for f in PRIVATE), job
    for path in ("/queue", f"/queue?user={getpass.getuser()}", "/queue?limit=5", "/ui", "/ui/fragments/queue"):
        for _ in range(2):  # the second read is answered from the cached bytes
            got = api.get(path, headers=bearer(READER))
            assert got.status_code == 200
            assert f"{jobs['marker']}-secret" not in got.text and "/tmp/stw-vis-" not in got.text, path
            assert '"work_dir"' not in got.text, path
    # Readers share one cached private-free view (what FastReads answers from).
    cache = api.app.state.services.snapshots  # type: ignore[attr-defined]
    assert cache.fresh_view("queue~private-free", ("jobs",)) is not None
    # An operator's read in between does not change what the reader's cached view holds.
    api.get("/queue", headers=bearer(OPERATOR))
    assert "/tmp/stw-vis-" not in api.get("/queue", headers=bearer(READER)).text


def test_a_reader_sees_no_private_fields_in_history(api: TestClient, sample_jobs: dict[str, int]) -> None:
    user = getpass.getuser()
    deadline = time.monotonic() + 60
    while True:
        rows = api.get("/history?limit=50", headers=bearer(OPERATOR)).json()["jobs"]
        others = [r for r in rows if r["submit_line"] or r["work_dir"]]
        if others or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert others, "the operator sees submit lines and work dirs"
    for row in api.get("/history?limit=50", headers=bearer(READER)).json()["jobs"]:
        assert row["submit_line"] is None and row["work_dir"] is None, row
    for owner in (OWNER_READER, OWNER_USER):  # the reader, and the user role, who own jobs
        rows = api.get("/history?limit=50", headers=bearer(owner)).json()["jobs"]
        assert any(r["work_dir"] for r in rows if r["user_name"] == user), owner
        assert not any(r["work_dir"] for r in rows if r["user_name"] != user), owner


def test_readers_may_be_allowed_private_fields(devcluster: object, tmp_path: Any, jobs: dict[str, Any]) -> None:
    s: Settings = with_tokens(load_settings(devcluster.tower_conf, environ={}))  # type: ignore[attr-defined]
    s.state_dir = tmp_path
    s.api.readers_see_private_job_fields = True
    with TestClient(create_app(s)) as client:
        assert _get_job(client, READER, jobs["visible"])["work_dir"] == "/tmp"


def _debug_and_batch_hidden(devcluster: Any, tmp_path: Any) -> FastAPI:
    """An app with debug (every node) and batch (n[1-2]) hidden, on a store of its own."""
    s: Settings = with_tokens(load_settings(devcluster.tower_conf, environ={}))
    s.state_dir = tmp_path
    s.api.hidden_partitions = ["debug", HIDDEN]
    return create_app(s)


def test_nodes_only_in_hidden_partitions_leave_nodes_events_and_node_get(devcluster: object,
                                                                          tmp_path: Any) -> None:
    """debug (every node) and batch (n[1-2]) hidden: n1 and n2 are in hidden partitions only,
    n3 and n4 show with short alone."""
    from datetime import UTC, datetime

    from slurmtower.models.event import Event

    app = _debug_and_batch_hidden(devcluster, tmp_path)
    with TestClient(app) as client:
        store = app.state.services.event_store
        now = datetime.now(UTC)
        store.append([Event(type="test.visibility", time=now, source="test", node=n) for n in ("n1", "n3")])
        nodes = client.get("/nodes", headers=bearer(READER)).json()["nodes"]
        assert [(n["name"], n["partitions"]) for n in nodes] == [("n3", ["short"]), ("n4", ["short"])]
        events = client.get("/events?type=test.visibility", headers=bearer(READER)).json()
        assert [e["node"] for e in events] == ["n3"]
        # /metrics counts the events a reader may see: n3's, not n1's
        scrape = client.get("/metrics", headers=bearer(READER)).text
        assert 'slurmtower_events{type="test.visibility"} 1.0' in scrape, scrape[-2000:]
        got = client.post("/actions/slurm.node.get", json={"nodes": "n[1-4]"}, headers=bearer(READER))
        assert sorted(got.json()["result"]) == ["n3", "n4"]
        assert client.post("/actions/slurm.node.get", json={"nodes": "n1"},
                           headers=bearer(READER)).status_code == 404
        assert [p["name"] for p in client.get("/partitions", headers=bearer(READER)).json()["partitions"]] \
            == ["short"]


def test_nodes_only_in_hidden_partitions_leave_the_event_stream(devcluster: object, tmp_path: Any) -> None:
    """/events/stream (excluded from the enumeration above: it never ends) hides them too: of
    n1's and n3's events, replayed from before both, a reader's stream sends n3's only."""
    from datetime import UTC, datetime

    import httpx

    from slurmtower.models.event import Event
    from tests.auth_helpers import running_server

    app = _debug_and_batch_hidden(devcluster, tmp_path)
    with running_server(app) as url:
        store = app.state.services.event_store
        before = store.last_id() or 0
        now = datetime.now(UTC)
        store.append([Event(type="test.visibility", time=now, source="test", node=n) for n in ("n1", "n3", "n1")])
        store.append([Event(type="test.visibility.end", time=now, source="test")])
        nodes: list[str | None] = []
        with httpx.stream("GET", f"{url}/events/stream", params={"since": before},
                          headers=bearer(READER), timeout=httpx.Timeout(5.0, read=15.0)) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    ev = Event.model_validate_json(line[6:])
                    if ev.type == "test.visibility.end":
                        break
                    if ev.type == "test.visibility":
                        nodes.append(ev.node)
        assert nodes == ["n3"]


@pytest.mark.parametrize("text", ['echo "a,b" \\\\', 'x\\",\\"work_dir\\":\\"y', ',"work_dir":"', "用户 \x01"],
                         ids=["quotes-backslash", "escaped-key", "raw-key-text", "unicode-control"])
def test_the_private_free_queue_table_leaves_out_exactly_the_private_fields(text: str) -> None:
    job = Job(job_id=1, state=JobState.PENDING, user_name="alice", name=text, command=text, work_dir=text,
              submit_line=text, standard_output="/o", standard_error="/e", comment=text)
    table = JobTable.from_jobs([job, job.model_copy(update={"job_id": 2, "user_name": "bob"})])
    policy = Visibility()
    stripped = [Job.model_validate(j) for j in json.loads(policy.private_free_table(table).all_json())]
    assert all(j.name == text and j.comment == text for j in stripped)
    assert all(getattr(j, f) is None for j in stripped for f in PRIVATE)
    own = [Job.model_validate(j) for j in json.loads(policy.private_free_table(table, "alice").all_json())]
    assert own[0] == job and own[1].command is None
    # every row as the private fields' regular expression cuts it, byte for byte
    assert policy.private_free_table(table).all_json() == \
        b"[" + b",".join(policy._strip.sub(b"", f) for f in table.fragments) + b"]"  # type: ignore[union-attr]


def test_private_free_tables_are_made_once_per_table_and_go_with_it() -> None:
    """Every filtered read of one snapshot shares its private-free table; a snapshot the cache
    replaced is not kept alive by it (100,000 jobs each)."""
    import gc
    import weakref

    from slurmtower import visibility

    job = Job(job_id=1, state=JobState.PENDING, user_name="alice", command="/secret.sh")
    policy = Visibility()
    table = JobTable.from_jobs([job])
    first = policy.private_free_table(table)
    assert policy.private_free_table(table) is first
    assert policy.private_free_table(table, "alice") is not first  # alice's own variant
    gone = weakref.ref(table)
    key = id(table)
    del table, first
    gc.collect()
    assert gone() is None and key not in visibility._TABLES


def test_a_reader_may_not_search_by_private_fields(api: TestClient, jobs: dict[str, Any]) -> None:
    criterias = {"command": f"/tmp/{jobs['marker']}-secret.sh"}
    got = api.post("/actions/slurm.job.find", json={"criterias": criterias}, headers=bearer(READER))
    assert got.status_code == 403 and got.json()["param"] == "criterias.command"
    got = api.post("/actions/slurm.job.find", json={"criterias": criterias}, headers=bearer(OPERATOR))
    # (other sessions' suites may cancel every job of the shared cluster meanwhile)
    assert got.status_code == 200 and set(got.json()["result"]) <= {jobs["visible"]}


def test_an_anonymous_reader_owns_no_jobs() -> None:
    from slurmtower.api.security import ANONYMOUS, Principal

    policy = Visibility()
    assert not policy.sees_private(ANONYMOUS, "anonymous")
    assert policy.sees_private(Principal(name="alice", role="reader"), "alice")
    assert not policy.sees_private(Principal(name="alice", role="reader"), "bob")
    assert policy.sees_private(Principal(name="otto", role="operator"), "bob")
    assert policy.sees_private(Principal(name="alice", role="user"), "alice")
    assert not policy.sees_private(Principal(name="alice", role="user"), "bob")
    assert not Visibility(readers_see_private=True).sees_private(Principal(name="ursula", role="user"), "bob")
    assert Visibility(readers_see_private=True).sees_private(Principal(name="rita", role="reader"), "bob")


def test_rule_run_envelopes_show_jobs_as_the_action_would(devcluster: object, tmp_path: Any) -> None:
    from datetime import UTC, datetime

    from slurmtower.models.event import RuleRun

    s: Settings = with_tokens(load_settings(devcluster.tower_conf, environ={}))  # type: ignore[attr-defined]
    s.state_dir = tmp_path
    app = create_app(s)
    job = {"job_id": 42, "user_name": "bob", "submit_line": "sbatch --wrap 'curl -H token:s3cret'",
           "work_dir": "/home/bob"}
    with TestClient(app) as client:
        now = datetime.now(UTC)
        app.state.services.event_store.record_rule_run(RuleRun(
            rule="vis-test", event_id=None, action_ref="slurm.job.get", started_at=now, ended_at=now,
            outcome="succeeded", envelope={"status": "succeeded", "result": {"42": [job]}}))
        def shown(token: str) -> dict[str, Any]:
            runs = client.get("/events/rule-runs?rule=vis-test", headers=bearer(token)).json()
            return runs[0]["envelope"]["result"]["42"][0]  # type: ignore[no-any-return]
        assert shown(READER)["submit_line"] is None and shown(READER)["work_dir"] is None
        assert shown(OPERATOR)["submit_line"] == job["submit_line"]


# -- records about hidden nodes and partitions (issue 41 item 4) -------------------------------
def test_hidden_names_leave_records_by_their_structure_and_in_their_text() -> None:
    from datetime import UTC, datetime

    from slurmtower.models import Partition
    from slurmtower.models.event import Event
    from slurmtower.visibility import HIDDEN_TEXT

    parts = [Partition(name="debug", nodes="n[1-4]", state="UP"), Partition(name="batch", nodes="n[1-2]", state="UP"),
             Partition(name="short", nodes="n[3-4]", state="UP")]
    hidden = Visibility(hidden_partitions=frozenset({"debug", "batch"})).hiding(parts)
    assert (hidden.partitions, hidden.nodes) == ({"debug", "batch"}, {"n1", "n2"})
    assert hidden.text("partition debug: n[1-3] and n1. n10, n2-b, debugging") == \
        f"partition {HIDDEN_TEXT}: n3 and {HIDDEN_TEXT}. n10, n2-b, debugging"
    scopes = [{"scope": "partition", "partition": "debug", "already_out": "n1", "requested": "n3"},
              {"scope": "cluster", "partition": None, "already_out": "n[1,4]", "requested": "n3"}]
    assert hidden.scrub({"scopes": scopes, "before": {"n1": {}, "n3": {}}}) == {
        "scopes": [{"scope": "cluster", "partition": None, "already_out": "n4", "requested": "n3"}],
        "before": {"n3": {}}}
    now = datetime.now(UTC)
    on = [Event(type="t", time=now, source="t", payload={"nodes": nodes}) for nodes in (["n1", "n2"], ["n1", "n3"])]
    assert hidden.event(on[0]) is None and hidden.event(on[1]).payload == {"nodes": ["n3"]}  # type: ignore[union-attr]
    assert hidden.event(Event(type="t", time=now, source="t", node="n2")) is None
    assert hidden.but("n[1-3]").nodes == set() and hidden.but("n9").nodes == {"n1", "n2"}
    assert Visibility().hiding(parts).scrub(scopes) is scopes  # nothing hidden: nothing walked


#: debug (every node) and batch hidden: n[1-2] are in hidden partitions only, n[3-4] show with short.
HIDING = ["debug", HIDDEN]
#: One node of debug, and of the cluster, per window: n1 out, a drain of n3 trips both.
TRIP = {"breaker_enabled": True, "breaker_share": 0.25, "breaker_cluster_share": 0.25,
        "breaker_partition_shares": {HIDDEN: 1.0, "short": 1.0}}
#: A hidden name in JSON, a page or a stream: a partition, a node, a node set holding one.
HIDDEN_NAME = re.compile(r"\b(?:debug|batch|n1|n2)\b|n\[[12]")


def _hidden_names(text: str, marker: str) -> list[str]:
    return sorted({m.group(0) for m in HIDDEN_NAME.finditer(text)} | ({marker} if marker in text else set()))


def _stream(url: str, token: str, since: int, end_type: str) -> list[dict[str, Any]]:
    """The events a client of /events/stream gets from ``since`` up to one of ``end_type``."""
    import httpx

    got: list[dict[str, Any]] = []
    with httpx.stream("GET", f"{url}/events/stream", params={"since": since}, headers=bearer(token),
                      timeout=httpx.Timeout(5.0, read=15.0)) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line[6:]))
                if got[-1]["type"] == end_type:
                    return got
    raise AssertionError("the stream ended before its last event")


@pytest.mark.cluster
def test_records_about_hidden_nodes_and_partitions_name_them_on_no_path(settings: Settings,
                                                                          clean_nodes: object) -> None:
    """With debug and batch hidden: an operator's audited drain of n1, trigger callbacks on
    n[1-2] and n[1-3], a drain of n3 refused by the breaker (n1 is out in debug and in the
    cluster), n1's drain in slurmdbd's event table. The store keeps every name; on the way out
    (/events, the stream, /ui's feed, /audit, /executions, /reports/availability, the 409) no
    caller sees n1, n2, debug, batch or n1's reason: readers and operators alike (hidden from
    everyone), only the operator's own answer names the node it asked for."""
    from datetime import UTC, datetime, timedelta

    import httpx

    from slurmtower.actions.breaker import TRIPPED
    from slurmtower.events.callback import sign_request
    from slurmtower.models.event import SENSOR_TRIGGERED, Event
    from tests.auth_helpers import running_server

    marker = f"stwhide{uuid.uuid4().hex[:8]}"
    settings.api.hidden_partitions = HIDING
    settings.api.refresh_interval = 0.5
    for key, value in TRIP.items():
        setattr(settings.actions, key, value)
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
    app = create_app(with_tokens(settings, sensor=True))
    with running_server(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        services = app.state.services
        store = services.event_store
        since = store.last_id() or 0
        drained = http.post("/actions/slurm.node.drain", json={"nodes": "n1", "reason": f"{marker} disk"},
                            headers=bearer(OPERATOR))
        assert drained.status_code == 200 and drained.json()["status"] == "succeeded", drained.text
        assert drained.json()["result"]["nodes"] == "n1"  # the operator's own words, in its own answer
        uuid_, key = services.sensor.status()["uuid"], services.sensor.ensure_key()
        path = f"/{uuid_}/node/drained"
        for nodes in (b"n[1-2]", b"n[1-3]"):  # what Slurm's strigger would post
            assert http.post(path, content=nodes, headers=sign_request(key, "POST", path, nodes)).status_code == 202
        refused = http.post("/actions/slurm.node.drain", json={"nodes": "n3", "reason": "ecc"},
                            headers=bearer(OPERATOR))
        assert refused.status_code == 409, refused.text

        # What a leak would show is there: the store holds every name.
        stored = store.query(since_id=since, limit=1000)
        (trip,) = [e for e in stored if e.type == TRIPPED]
        assert trip.node == "n3" and {s["partition"] for s in trip.payload["scopes"]} == {"debug", None}
        assert [e.payload["argument"] for e in stored if e.type == SENSOR_TRIGGERED] == ["n[1-2]", "n[1-3]"]
        audited = services.action_catalogue().store.list_audit(limit=10)
        assert any(r.nodes == "n1" and marker in r.parameters["reason"] for r in audited)
        local = (started.astimezone()).strftime("%Y-%m-%dT%H:%M:%S")
        wait_for(lambda: marker in sh("sacctmgr", "-n", "-P", "show", "event", "nodes=n1", f"start={local}",
                                      "format=NodeName,Reason"), 30, 0.3, what="n1's drain in slurmdbd")
        store.append([Event(type="test.visibility.end", time=datetime.now(UTC), source="test")])
        span = {"start": started.isoformat(), "end": (datetime.now(UTC) + timedelta(minutes=5)).isoformat()}

        for token in (READER, OPERATOR):
            events = http.get("/events", params={"since": since, "limit": 1000}, headers=bearer(token)).json()
            streamed = _stream(url, token, since, "test.visibility.end")
            feed = re.search(r'<ol id="feed".*?</ol>', http.get("/ui", headers=bearer(token)).text, re.S)
            assert feed is not None
            audit = http.get("/audit", params={"limit": 100}, headers=bearer(token)).json()
            (execution,) = {r["execution_id"] for r in audit["records"] if r["outcome"] == "refused"}
            envelope = http.get(f"/executions/{execution}", headers=bearer(token))
            report = http.get("/reports/availability", params=span, headers=bearer(token))
            assert envelope.status_code == report.status_code == 200, (envelope.text, report.text)
            shown = {"/events": json.dumps(events), "/events/stream": json.dumps(streamed), "/ui": feed.group(0),
                     "/audit": json.dumps(audit), "/executions": envelope.text,
                     "/reports/availability": report.text, "the 409": refused.text}
            leaks = {path: found for path, text in shown.items() if (found := _hidden_names(text, marker))}
            assert leaks == {}, token
            # ... and what is not hidden still shows, from the same reads
            assert any(e["type"] == TRIPPED and e["node"] == "n3" for e in events)
            assert [e["payload"]["nodes"] for e in events if e["type"] == SENSOR_TRIGGERED] == [["n3"]]
            ids = [e["id"] for e in events]
            assert [e["id"] for e in streamed] == ids[:ids.index(streamed[-1]["id"]) + 1]
            assert "node drained n3" in feed.group(0)
            assert any(r["nodes"] == "n3" and r["outcome"] == "refused" for r in audit["records"])
            assert envelope.json()["parameters"]["nodes"] == "n3"
            assert [p["partition"] for p in report.json()["partitions"]] == ["short"]
            assert "n3" in refused.json()["detail"] and refused.json()["breaker"]["scopes"][0]["scope"] == "cluster"
