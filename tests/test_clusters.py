"""One tower over two local clusters (``[[clusters]]``): the default devcluster and a second
one of its own (its dir, name and ports, Debian's 22.05 as well: no other release here), both
served by one ``slurmtower serve`` as users run it (tokens, the sensor on, the archiver on).

Every answer for a cluster is checked against that cluster's own ``squeue``/``sinfo``/``sacct``;
a drain of one cluster's ``n1`` leaves the other's alone and is recorded (audit, holds, events)
with its cluster; a role per cluster holds; one cluster frozen (SIGSTOP of its slurmctld),
the other answers within its bounds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from slurmtower.actions import Catalogue
from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster, find_slurm_installs
from slurmtower.devcluster.several import write_clusters_config
from slurmtower.errors import ConfigError
from slurmtower.principal import ACTION_PERM, Perm, hash_token
from slurmtower.settings import load_settings
from tests.conftest import WORKER, restore_all_nodes, scale_sh, sh, wait_for
from tests.redis_helpers import PrivateRedis
from tests.sensor_helpers import SLURMTOWER, cluster_state_dir
from tests.serve_helpers import ServeProcess
from tests.test_routes_classified import MUTATING, classify
from tests.ui_browser import browser, page_as, shoot

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
__all__ = ["browser"]  # the fixture

N = int(WORKER.removeprefix("gw") or 0)
#: The second cluster's ports: clear of the workers' devclusters (26800 + 200 x N), the
#: scale labs and the release clusters.
SECOND_PORT_BASE = 28600 + 200 * N
NEWER_PORT_BASE = 29200 + 200 * N  # clear of the second clusters' (28600, 28800)
#: The tower's JWT settings (a site's identity provider, here a key of the test's own).
JWT_KEY = "clusters-test-" + "k" * 32
JWT_ISSUER = "https://idp.example"
#: The tower's ``alerter`` token (named ``alertmanager``, not named by the second cluster).
ALERTER = "stw_clusters_test_alerter_token"


def _states(cluster: DevCluster) -> dict[str, str]:
    out = scale_sh(cluster, "sinfo", "-h", "-N", "-o", "%N %T")
    return dict(line.split() for line in out.splitlines() if line.strip())


def _queue_ids(cluster: DevCluster) -> set[int]:
    return {int(x) for x in scale_sh(cluster, "squeue", "-h", "-r", "-t", "all", "-o", "%A").split()}


def _held_jobs(cluster: DevCluster, count: int, name: str) -> list[int]:
    ids = []
    for _ in range(count):
        out = scale_sh(cluster, "runuser", "-u", "alice", "--", "sbatch", "--parsable", "-H", "-J", name,
                  "-o", "/dev/null", "-D", "/tmp", "--wrap", "sleep 600")
        ids.append(int(out.strip().split(";")[0]))
    return ids


def multi_config(first: DevCluster, second: DevCluster, state_dir: Path, *,
                 tokens: Sequence[dict[str, str]] = (), **second_entry: Any) -> Path:
    """The two clusters' ``[[clusters]]`` configuration (the first the default), a fast sensor,
    the breaker off (as everywhere but its own tests); ``tokens`` join the first cluster's."""
    top: dict[str, Any] = {}
    if tokens:
        top["auth"] = {"tokens": [*tomllib.loads(first.tower_conf.read_text())["auth"]["tokens"], *tokens]}
    return write_clusters_config(state_dir / "clusters.yaml", [first, second], state_dir,
                                 [{}, {"label": "second cluster", **second_entry}],
                                 events={"poll_interval": 0.5}, actions={"breaker_enabled": False}, **top)


def tower_env(config: Path, **settings: str) -> dict[str, str]:
    """This process's environment without slurmtower's, prometheus_client's or Slurm's own
    variables, pointed at ``config`` (each cluster's SLURM_CONF is in it), plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMTOWER_", "PROMETHEUS_", "SLURM_CONF"))}
    return {**env, "SLURMTOWER_CONFIG": str(config), **settings}


@pytest.fixture(scope="module")
def second(devcluster: DevCluster) -> Iterator[DevCluster]:
    """A second local cluster, 4 nodes, brought up for this module and stopped after it."""
    cluster = DevCluster(root=Path(f"/var/lib/slurmtower/second-{WORKER or 'gw0'}"),
                         cluster_name=f"second{N or ''}", port_base=SECOND_PORT_BASE, nodes=4,
                         log=lambda _m: None)
    cluster.up()
    scale_sh(cluster, "scancel", "-u", "alice", check=False)
    try:
        yield cluster
    finally:
        scale_sh(cluster, "scancel", "-u", "alice", check=False)
        cluster.down()


@pytest.fixture(scope="module")
def tower(devcluster: DevCluster, second: DevCluster) -> Iterator[ServeProcess]:
    """``slurmtower serve`` over both clusters; the second one's readers and operators only
    read it (``max_role = reader``) except the demo admin, an operator there, and nora, who
    only posts its alerts there; an ``alerter`` token besides the demo tokens."""
    state = cluster_state_dir(devcluster, "clusters")
    config = multi_config(devcluster, second, state, max_role="reader",
                          roles={"demo-admin": "operator", "group:gpu-ops": "operator", "nora": "alerter"},
                          tokens=[{"name": "alertmanager", "role": "alerter", "sha256": hash_token(ALERTER)}])
    env = tower_env(config, SLURMTOWER_ACTIONS__BREAKER_ENABLED="false",
               SLURMTOWER_AUTH__JWT_KEY=JWT_KEY, SLURMTOWER_AUTH__JWT_ISSUERS=f'["{JWT_ISSUER}"]',
               SLURMTOWER_AUTH__JWT_AUDIENCE="slurmtower", SLURMTOWER_AUTH__JWT_ALGORITHMS='["HS256"]')
    serve = ServeProcess(env=env, log_path=state / "serve.log")
    serve.start(timeout=60)
    try:
        yield serve
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def tokens(devcluster: DevCluster) -> dict[str, str]:
    return devcluster.demo_tokens()


@pytest.fixture(scope="module")
def reader(tower: ServeProcess, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tower.url, timeout=30,
                      headers={"Authorization": f"Bearer {tokens['reader']}"}) as http:
        yield http


def _as(tower: ServeProcess, token: str) -> httpx.Client:
    return httpx.Client(base_url=tower.url, timeout=60, headers={"Authorization": f"Bearer {token}"})


# -- configuration ----------------------------------------------------------------------------


def _load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_settings(path, environ={})


def test_an_entry_with_an_unknown_key_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "clusters:\n- name: a\n  slurm: {slurm_conf: /a}\n- name: b\n  slurm: {slurmconf: /b}\n")
    assert "clusters[1] (b)" in err.value.message and "slurmconf" in err.value.message


def test_a_cluster_may_not_set_the_deployments_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "clusters:\n- name: a\n  api: {port: 9000}\n")
    assert "clusters[0].api.port is the deployment's" in err.value.message


@pytest.mark.parametrize(("text", "said"), [
    ("clusters:\n- name: a\n  slurm: {slurm_conf: /a}\n- name: a\n  slurm: {slurm_conf: /b}\n", "listed twice"),
    ("clusters:\n- {name: a, default: true, slurm: {slurm_conf: /a}}\n"
     "- {name: b, default: true, slurm: {slurm_conf: /b}}\n", "more than one default"),
    ("clusters:\n- {name: a, slurm: {slurm_conf: /a}}\n- {name: b, slurm: {slurm_conf: /a}}\n", "the same Slurm"),
    ("clusters:\n- {name: Prod}\n", "name"),
])
def test_clusters_that_cannot_run_together_are_refused(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert said in err.value.message


def test_each_cluster_gets_its_own_state_and_the_deployments_store(tmp_path: Path) -> None:
    s = _load(tmp_path, f"state_dir: {tmp_path}\nslurm: {{command_timeout: 7}}\nclusters:\n"
                        "- {name: a, slurm: {slurm_conf: /a}}\n"
                        "- {name: b, default: true, slurm: {slurm_conf: /b}, api: {hidden_partitions: [x]}}\n")
    assert s.cluster_names() == ["b", "a"]
    a, b = s.for_cluster("a"), s.for_cluster("b")
    assert (a.state_dir, b.state_dir) == (tmp_path / "clusters" / "a", tmp_path)
    assert a.effective_store_url() == b.effective_store_url() == f"sqlite:///{tmp_path / 'slurmtower.db'}"
    assert (a.slurm.command_timeout, str(a.slurm.slurm_conf), b.api.hidden_partitions) == (7, "/a", ["x"])
    assert (a.cluster_key(), b.cluster_key()) == ("a", "")
    assert a.effective_key_file() == tmp_path / "clusters" / "a" / "sensor.key"


def test_a_one_cluster_configuration_is_one_cluster(cluster_settings: Any) -> None:
    assert cluster_settings.clusters == []
    assert cluster_settings.cluster_names() == [cluster_settings.cluster_name]
    assert cluster_settings.for_cluster(cluster_settings.cluster_name) is cluster_settings
    assert cluster_settings.cluster_key() == "" and cluster_settings.cluster_label() is None


# -- one API ----------------------------------------------------------------------------------


def test_clusters_are_listed_with_their_release_and_readiness(reader: httpx.Client, devcluster: DevCluster,
                                                              second: DevCluster) -> None:
    body = reader.get("/clusters").json()
    assert body["default"] == devcluster.cluster_name
    got = {c["name"]: c for c in body["clusters"]}
    assert list(got) == [devcluster.cluster_name, second.cluster_name]
    release = sh("scontrol", "--version").split()[1]
    for c in got.values():
        assert c["ready"] is True and c["release"] == release and c["accounting"] is True and c["sensor"] is True
    assert got[second.cluster_name]["label"] == "second cluster" and got[second.cluster_name]["default"] is False
    one = reader.get(f"/clusters/{second.cluster_name}")
    assert one.status_code == 200 and one.json()["name"] == second.cluster_name
    ready = reader.get("/ready").json()
    assert ready["cluster"] == devcluster.cluster_name and ready["clusters"] == {second.cluster_name: True}
    assert reader.get(f"/clusters/{second.cluster_name}/ready").json()["ready"] is True


def test_each_clusters_queue_and_nodes_agree_with_its_own_squeue_and_sinfo(
        reader: httpx.Client, devcluster: DevCluster, second: DevCluster) -> None:
    mine = _held_jobs(second, 3, "mc-second")
    try:
        def agrees() -> bool:
            ok = True
            for cluster, paths in ((devcluster, ("/queue", f"/clusters/{devcluster.cluster_name}/queue")),
                                   (second, (f"/clusters/{second.cluster_name}/queue",
                                             f"/queue?cluster={second.cluster_name}"))):
                want = _queue_ids(cluster)
                for path in paths:
                    r = reader.get(path)
                    assert r.status_code == 200, r.text
                    ok = ok and {j["job_id"] for j in r.json()["jobs"]} == want
            return ok

        wait_for(agrees, 30, 0.5, what="both queues as their squeue says")
        assert set(mine) <= {j["job_id"] for j in reader.get(f"/clusters/{second.cluster_name}/queue").json()["jobs"]}
        assert not set(mine) & _queue_ids(devcluster) or set(mine) & _queue_ids(second)
        # filters and pages are the cluster's own
        page = reader.get(f"/clusters/{second.cluster_name}/queue",
                          params={"name": "mc-second", "state": "PENDING", "limit": 2}).json()
        pending = scale_sh(second, "squeue", "-h", "-n", "mc-second", "-t", "PD", "-o", "%A").split()
        assert page["count"] == len(pending) == 3 and page["returned"] == 2
        for cluster in (devcluster, second):
            nodes = reader.get("/nodes", params={"cluster": cluster.cluster_name}).json()["nodes"]
            assert sorted(n["name"] for n in nodes) == sorted(_states(cluster))
    finally:
        scale_sh(second, "scancel", *map(str, mine), check=False)


def test_each_clusters_history_is_its_own_sacct(reader: httpx.Client, devcluster: DevCluster,
                                                second: DevCluster) -> None:
    job = int(scale_sh(second, "runuser", "-u", "alice", "--", "sbatch", "--parsable", "-J", "mc-history",
                  "-o", "/dev/null", "-D", "/tmp", "--wrap", "true").strip().split(";")[0])

    def recorded() -> bool:
        out = scale_sh(second, "sacct", "-n", "-X", "-P", "-o", "JobIDRaw,State", "-j", str(job))
        return "COMPLETED" in out

    wait_for(recorded, 60, 0.5, what=f"job {job} completed in the second cluster's accounting")
    def listed() -> bool:
        ours = reader.get(f"/clusters/{second.cluster_name}/history", params={"jobname": "mc-history"}).json()
        assert "jobs" in ours, ours
        return job in {j["job_id"] for j in ours["jobs"]}

    # slurmdbd writes the job's end to its database a moment after sacct can see it
    wait_for(listed, 20, 0.5, what=f"job {job} in the second cluster's /history")
    theirs = reader.get("/history", params={"jobname": "mc-history"}).json()
    default_ids = {int(x.split("|")[0]) for x in sh("sacct", "-a", "-n", "-X", "-P", "-o", "JobIDRaw",
                                                    "--name", "mc-history", "-S", "now-1day").split()}
    assert {j["job_id"] for j in theirs["jobs"]} == default_ids


def test_a_drain_on_one_clusters_n1_leaves_the_others_alone_and_is_recorded_with_its_cluster(
        tower: ServeProcess, reader: httpx.Client, tokens: dict[str, str], devcluster: DevCluster,
        second: DevCluster) -> None:
    name = second.cluster_name
    restore_all_nodes(devcluster)
    last = max((e["id"] for e in reader.get("/events", params={"limit": 1000}).json()), default=0)
    with _as(tower, tokens["admin"]) as admin:
        r = admin.post(f"/clusters/{name}/actions/slurm.node.drain", json={"nodes": "n1", "reason": "mc drain"})
        assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
        execution = admin.get(f"/clusters/{name}/executions/{r.json()['execution_id']}").json()
        assert r.json()["cluster"] == execution["cluster"] == name
        try:
            assert "drain" in _states(second)["n1"] and "drain" not in _states(devcluster)["n1"]
            # once the second cluster's snapshot has the drain (a read older than it shows the node in service)
            wait_for(lambda: [n["name"] for n in reader.get(f"/clusters/{name}/nodes/holds").json()["nodes"]]
                     == ["n1"], 15, what="the second cluster's n1 held")
            assert reader.get("/nodes/holds").json()["nodes"] == []
            audit = admin.get(f"/clusters/{name}/audit", params={"action": "slurm.node.drain"}).json()["records"]
            assert audit[0]["cluster"] == name and audit[0]["nodes"] == "n1"
            assert all(rec["cluster"] != name for rec in admin.get("/audit").json()["records"])

            def drained_event() -> list[dict[str, Any]]:
                evs = reader.get(f"/clusters/{name}/events",
                                 params={"since": last, "type": "slurm.node.state", "node": "n1"}).json()
                return [e for e in evs if "DRAIN" in e["payload"]["flags"]]

            seen = wait_for(drained_event, 20, 0.2, what="the second cluster's drained n1 event")
            time.sleep(1.5)  # three more sensor polls: a second record of the same change would show
            again = drained_event()
            assert len(again) == len(seen) == 1 and again[0]["cluster"] == name
            other = reader.get("/events", params={"since": last, "node": "n1",
                                                  "cluster": devcluster.cluster_name}).json()
            assert other == []
        finally:
            r = admin.post(f"/clusters/{name}/actions/slurm.node.resume", json={"nodes": "n1"})
            assert r.status_code == 200, r.text
    wait_for(lambda: "drain" not in _states(second)["n1"], 20, what="the second cluster's n1 resumed")


def test_the_event_stream_filters_by_cluster(tower: ServeProcess, tokens: dict[str, str], devcluster: DevCluster,
                                             second: DevCluster) -> None:
    """``/clusters/{name}/events/stream`` carries that cluster's events only: a drain of n3 on
    both clusters, the second's stream shows the second's alone."""
    got: list[dict[str, Any]] = []
    done = threading.Event()

    def listen() -> None:
        with httpx.Client(base_url=tower.url, timeout=httpx.Timeout(30, read=20),
                          headers={"Authorization": f"Bearer {tokens['reader']}"}) as http, \
                http.stream("GET", f"/clusters/{second.cluster_name}/events/stream") as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    ev = json.loads(line[6:])
                    if ev["type"] == "slurm.node.state" and ev["node"] == "n3":
                        got.append(ev)
                if done.is_set():
                    return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    time.sleep(1)  # the stream is open (it starts after the newest event)
    for cluster in (devcluster, second):
        scale_sh(cluster, "scontrol", "update", "nodename=n3", "state=DRAIN", "reason=mc stream")
    try:
        wait_for(lambda: any("DRAIN" in e["payload"]["flags"] for e in got), 20, what="the second cluster's n3 on its stream")
        time.sleep(1.5)  # the default cluster's n3 is recorded meanwhile: it must not show
        assert {e["cluster"] for e in got} == {second.cluster_name}
    finally:
        done.set()
        for cluster in (devcluster, second):
            scale_sh(cluster, "scontrol", "update", "nodename=n3", "state=RESUME")
    restore_all_nodes(devcluster)


def test_an_alert_posted_for_a_cluster_is_that_clusters_event(tower: ServeProcess, tokens: dict[str, str],
                                                              reader: httpx.Client, devcluster: DevCluster,
                                                              second: DevCluster) -> None:
    """One Alertmanager per cluster, each posting to its cluster's hook: the same alert is an
    event of each cluster once (a copy re-sent to one cluster is a duplicate there only)."""
    firing = (Path(__file__).parent / "data" / "alertmanager-firing.json").read_bytes()
    last = max((e["id"] for e in reader.get("/events", params={"limit": 1000}).json()), default=0)
    headers = {"Content-Type": "application/json"}
    with _as(tower, tokens["admin"]) as admin:
        first = admin.post("/hooks/alertmanager", content=firing, headers=headers).json()
        theirs = admin.post(f"/clusters/{second.cluster_name}/hooks/alertmanager", content=firing,
                            headers=headers).json()
        again = admin.post(f"/clusters/{second.cluster_name}/hooks/alertmanager", content=firing,
                           headers=headers).json()
    assert (theirs["recorded"], theirs["duplicates"]) == (2, 0), theirs
    assert again["recorded"] == 0 and again["duplicates"] == 2
    events = [e for e in reader.get("/events", params={"since": last, "type": "alert.firing"}).json()]
    by_cluster = {c: sorted(e["id"] for e in events if e["cluster"] == c)
                  for c in (devcluster.cluster_name, second.cluster_name)}
    assert by_cluster[second.cluster_name] == sorted(theirs["events"])
    assert set(by_cluster[devcluster.cluster_name]) == set(first["events"])


def test_a_role_per_cluster_holds(tower: ServeProcess, tokens: dict[str, str], devcluster: DevCluster,
                                  second: DevCluster) -> None:
    body = {"nodes": "n2", "reason": "mc role", "dry_run": True}
    with _as(tower, tokens["operator"]) as operator:
        # an operator of the deployment, a reader on the second cluster (max_role)
        assert operator.post("/actions/slurm.node.drain", json=body).status_code == 200
        refused = operator.post(f"/clusters/{second.cluster_name}/actions/slurm.node.drain", json=body)
        assert refused.status_code == 403 and "reader" in refused.json()["detail"]
        assert operator.get(f"/clusters/{second.cluster_name}/queue").status_code == 200
    with _as(tower, tokens["admin"]) as admin:
        # the admin is named: an operator there (not an admin: admin actions are refused)
        assert admin.post(f"/clusters/{second.cluster_name}/actions/slurm.node.drain", json=body).status_code == 200
        refused = admin.post(f"/clusters/{second.cluster_name}/actions/slurm.trigger.unset", json={"id": 1})
        assert refused.status_code == 403 and "(operator)" in refused.json()["detail"]


def test_executions_and_idempotency_keys_are_each_clusters_own(tower: ServeProcess, tokens: dict[str, str],
                                                                devcluster: DevCluster, second: DevCluster) -> None:
    """An execution is read on its cluster only (on the other: 404, as an id never used); a
    principal's idempotency key is its own on each cluster: the same key on the other cluster
    runs there (not a 409 naming the first cluster's execution), and a retry on each cluster
    replays that cluster's execution; other parameters on one cluster are still a 409."""
    name, default = second.cluster_name, devcluster.cluster_name
    key = {"Idempotency-Key": f"mc-key-{time.time_ns()}"}
    body = {"nodes": "n2", "reason": "mc key", "dry_run": True}
    with _as(tower, tokens["admin"]) as admin:
        first = admin.post(f"/clusters/{default}/actions/slurm.node.drain", json=body, headers=key)
        assert first.status_code == 200 and first.json()["cluster"] == default, first.text
        ours = first.json()["execution_id"]
        assert admin.get(f"/clusters/{default}/executions/{ours}").json()["execution_id"] == ours
        assert admin.get(f"/executions/{ours}").json()["execution_id"] == ours
        for url in (f"/clusters/{name}/executions/{ours}", f"/executions/{ours}?cluster={name}",
                    f"/clusters/{name}/executions/{ours}?format=st2"):
            elsewhere = admin.get(url)
            assert elsewhere.status_code == 404 and elsewhere.json()["param"] == "execution_id", (url, elsewhere.text)
        theirs = admin.post(f"/clusters/{name}/actions/slurm.node.drain", json=body, headers=key)
        assert theirs.status_code == 200, theirs.text
        assert theirs.json()["execution_id"] != ours and theirs.json()["cluster"] == name
        assert admin.get(f"/clusters/{name}/executions/{theirs.json()['execution_id']}").status_code == 200
        assert admin.get(f"/executions/{theirs.json()['execution_id']}").status_code == 404
        for cluster, expected in ((name, theirs.json()["execution_id"]), (default, ours)):
            again = admin.post(f"/clusters/{cluster}/actions/slurm.node.drain", json=body, headers=key)
            assert again.status_code == 200 and again.json()["execution_id"] == expected, (cluster, again.text)
        other = admin.post(f"/clusters/{name}/actions/slurm.node.drain", json={**body, "reason": "mc other"},
                           headers=key)
        assert other.status_code == 409 and theirs.json()["execution_id"] in other.json()["detail"], other.text


def _jwt(key: str, **claims: Any) -> str:
    now = int(time.time())
    return jwt.encode({"iss": JWT_ISSUER, "aud": "slurmtower", "sub": "gina", "iat": now, "exp": now + 300,
                       **claims}, key, algorithm="HS256")


def test_a_role_per_cluster_from_a_jwts_groups(tower: ServeProcess, second: DevCluster) -> None:
    """gina reads everywhere (her JWT's role); her group gpu-ops makes her an operator on the
    second cluster only; without the group she reads there too; a JWT signed with another key
    names nobody."""
    body = {"nodes": "n2", "reason": "mc group", "dry_run": True}
    on_second = f"/clusters/{second.cluster_name}/actions/slurm.node.drain"
    with _as(tower, _jwt(JWT_KEY, role="reader", groups=["hpc", "gpu-ops"])) as gina:
        assert gina.post(on_second, json=body).status_code == 200
        refused = gina.post("/actions/slurm.node.drain", json=body)
        assert refused.status_code == 403 and "gina (reader)" in refused.json()["detail"]
    with _as(tower, _jwt(JWT_KEY, role="reader", groups=["hpc"])) as plain:
        assert plain.post(on_second, json=body).status_code == 403
        assert plain.get(f"/clusters/{second.cluster_name}/queue", params={"limit": 1}).status_code == 200
    with _as(tower, _jwt("another-key-" + "z" * 32, role="admin", groups=["gpu-ops"])) as forged:
        assert forged.post(on_second, json=body).status_code == 401
        assert forged.get("/clusters").status_code == 401


def test_every_route_of_a_cluster_goes_by_the_role_that_cluster_gives(
        tower: ServeProcess, tokens: dict[str, str], devcluster: DevCluster, second: DevCluster) -> None:
    """Every route under ``/clusters/{cluster}`` (enumerated from the application: a new one
    cannot forget), and its ``?cluster=`` twin, refuses a caller whose deployment role has the
    route's permission but whose role on the second cluster does not: nora (a reader, only an
    alerter there) every read, the demo operator (a reader there) the alert hook and every
    operator action, the demo admin (an operator there) every admin action. Alerts: the hook
    takes an alerter the cluster names (nora) and refuses one it does not (capped at reader)."""
    name = second.cluster_name
    firing = (Path(__file__).parent / "data" / "alertmanager-firing.json").read_bytes()
    nora = _jwt(JWT_KEY, sub="nora", role="reader")
    capped = {Perm.READ: nora, Perm.OPERATE: tokens["operator"], Perm.ADMIN: tokens["admin"]}
    rows, _ = classify(create_app(load_settings(Path(tower.env["SLURMTOWER_CONFIG"]), environ={})))
    walked = set()
    for method, path, perm in rows:
        if not (path == "/clusters/{cluster}" or path.startswith("/clusters/{cluster}/")) or perm == Perm.PUBLIC:
            continue
        own = path.replace("{cluster}", name).replace("{name}", "slurm.node.drain").replace("{execution_id}", "x1")
        flat = own.removeprefix(f"/clusters/{name}")
        for url in [own, *([f"{flat}?cluster={name}"] if flat else [])]:
            with _as(tower, capped[perm]) as caller:
                resp = caller.request(method, url, content=firing if "/hooks/" in url else None,
                                      json={"nodes": "n2", "reason": "mc walk"} if "/actions/" in url and
                                      method in MUTATING else None,
                                      headers={"Content-Type": "application/json"})
            assert resp.status_code == 403, f"{method} {url} ({perm.name}, capped) -> {resp.status_code} {resp.text}"
        walked.add((method, path))
    assert {("GET", "/clusters/{cluster}/queue"), ("POST", "/clusters/{cluster}/hooks/alertmanager"),
            ("GET", "/clusters/{cluster}/events/stream")} <= walked
    # An action's own permission, checked per action, is the cluster's role too.
    for action in Catalogue.names():
        needed = ACTION_PERM[Catalogue.spec(action).permission]
        if needed > Perm.READ:
            with _as(tower, capped[needed]) as caller:
                resp = caller.post(f"/clusters/{name}/actions/{action}", json={"nodes": "n2", "reason": "mc walk"})
            assert resp.status_code == 403, f"{action} ({needed.name}, capped) -> {resp.status_code} {resp.text}"
    # Each caller keeps its deployment role on the default cluster; nora posts the second's alerts.
    with _as(tower, nora) as caller:
        assert caller.get(f"/clusters/{devcluster.cluster_name}/queue", params={"limit": 1}).status_code == 200
        assert caller.post(f"/clusters/{name}/hooks/alertmanager", content=firing).status_code == 200
    with _as(tower, tokens["operator"]) as caller:
        assert caller.post("/hooks/alertmanager", content=firing).status_code == 200
    with _as(tower, ALERTER) as alerter:
        assert alerter.post("/hooks/alertmanager", content=firing).status_code == 200
        refused = alerter.post(f"/clusters/{name}/hooks/alertmanager", content=firing)
        assert refused.status_code == 403 and "alertmanager (none)" in refused.json()["detail"], refused.text
        assert alerter.get("/queue").status_code == 403 and alerter.get(f"/clusters/{name}/queue").status_code == 403


def test_bad_cluster_names_are_clear_errors(reader: httpx.Client) -> None:
    r = reader.get("/clusters/nope/queue")
    assert r.status_code == 404 and r.json()["param"] == "cluster" and "nope" in r.json()["detail"]
    r = reader.get("/queue", params={"cluster": "Bad Name"})
    assert r.status_code == 400 and r.json()["param"] == "cluster"
    r = reader.get("/queue", params=[("cluster", "a"), ("cluster", "b")])
    assert r.status_code == 400 and "twice" in r.json()["detail"]
    assert reader.get("/events", params={"cluster": "nope"}).status_code == 404


def test_metrics_are_labelled_by_cluster(reader: httpx.Client, devcluster: DevCluster, second: DevCluster) -> None:
    text = reader.get("/metrics").text
    for name in (devcluster.cluster_name, second.cluster_name):
        assert f'slurmtower_cluster_up{{cluster="{name}"}} 1.0' in text
        assert f'slurmtower_nodes{{cluster="{name}",state="idle"}}' in text or \
               f'slurmtower_nodes{{state="idle",cluster="{name}"}}' in text


def test_one_cluster_frozen_the_other_answers_within_its_bounds(reader: httpx.Client, devcluster: DevCluster,
                                                                 second: DevCluster) -> None:
    pid = int((second.run_dir / "slurmctld.pid").read_text().split()[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3)  # past the second cluster's refresh interval: its next round hangs
        slow = []
        for _ in range(20):
            t0 = time.perf_counter()
            r = reader.get("/queue", params={"limit": 10})
            slow.append(time.perf_counter() - t0)
            assert r.status_code == 200
            time.sleep(0.1)
        assert max(slow) < 1.0, slow
        t0 = time.perf_counter()
        frozen = reader.get(f"/clusters/{second.cluster_name}/queue", params={"limit": 10})
        took = time.perf_counter() - t0
        # its last snapshot, marked stale, or 503 when too old: within api.slurm_wait (4 s)
        assert took < 6.0 and frozen.status_code in (200, 503)
        if frozen.status_code == 200:  # the snapshot read before the freeze, said to be stale
            assert frozen.json()["stale"] is True and frozen.headers["x-data-stale"], frozen.headers
        listed = {c["name"]: c["ready"] for c in reader.get("/clusters").json()["clusters"]}
        assert listed == {devcluster.cluster_name: True, second.cluster_name: False}
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: reader.get(f"/clusters/{second.cluster_name}/ready").status_code == 200, 30,
             what="the second cluster ready again")


def _cli(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([SLURMTOWER, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode == 0) == ok, (args, proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def test_the_cli_answers_for_the_cluster_it_is_given(tower: ServeProcess, devcluster: DevCluster,
                                                     second: DevCluster, tmp_path: Path) -> None:
    """``--cluster`` on the commands that read or record one cluster's data: an alert recorded
    for the second cluster is its event (not the default's), ``events --cluster`` lists each
    cluster's own, ``info``, ``doctor`` and ``report`` ask that cluster's Slurm and
    accounting, and an unknown name is one line and exit 78 (a configuration error)."""
    env, name, default = tower.env, second.cluster_name, devcluster.cluster_name
    alert = json.loads((Path(__file__).parent / "data" / "alertmanager-firing.json").read_text())
    alert["alerts"] = alert["alerts"][:1]
    unique = time.time_ns()  # not a copy of another test's alert (the dedupe goes by fingerprint)
    alert["alerts"][0]["labels"]["alertname"] = f"CliClusterTest{unique}"
    alert["alerts"][0]["fingerprint"] = f"{unique:016x}"
    (tmp_path / "alert.json").write_text(json.dumps(alert))
    recorded = json.loads(_cli(env, "alert", str(tmp_path / "alert.json"), "--cluster", name, "-o", "json").stdout)
    assert recorded["recorded"] == 1, recorded

    def listed(cluster: str) -> dict[int, dict[str, Any]]:
        out = _cli(env, "events", "--cluster", cluster, "--type", "alert.firing", "--limit", "1000", "-o", "json")
        return {e["id"]: e for e in map(json.loads, out.stdout.splitlines())}

    theirs, ours = listed(name), listed(default)
    assert recorded["events"][0] in theirs and theirs[recorded["events"][0]]["cluster"] == name
    assert {e["cluster"] for e in theirs.values()} == {name}
    assert recorded["events"][0] not in ours and all(e["cluster"] != name for e in ours.values())
    text = _cli(env, "events", "--cluster", name, "--type", "alert.firing", "--limit", "5").stdout
    assert f"[{name}]" in text

    info = json.loads(_cli(env, "info", "--cluster", name, "-o", "json").stdout)
    assert info["cluster"] == name and info["rest"]["url"].endswith(f":{second.rest_port}"), info
    info = json.loads(_cli(env, "info", "-o", "json").stdout)
    assert info["cluster"] == default and info["rest"]["url"].endswith(f":{devcluster.rest_port}"), info

    proc = subprocess.run([SLURMTOWER, "doctor", "--cluster", name, "--check", "slurmctld", "--check", "store",
                           "-o", "json"], env=env, capture_output=True, text=True, timeout=120, check=False)
    results = json.loads(proc.stdout)
    assert [(r["name"], r["cluster"]) for r in results] == [("slurmctld", name), ("store", None)], results
    assert results[0]["status"] == "ok" and name in results[0]["detail"], results[0]
    every = json.loads(subprocess.run([SLURMTOWER, "doctor", "--check", "slurmctld", "-o", "json"], env=env,
                                      capture_output=True, text=True, timeout=120, check=False).stdout)
    assert sorted(r["cluster"] for r in every) == sorted([default, name])

    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = (end - timedelta(days=2)).isoformat()
    usage = json.loads(_cli(env, "report", "usage", "--cluster", name, "--start", start, "--end", end.isoformat(),
                            "--group-by", "cluster", "-o", "json").stdout)
    assert usage["cluster"] == name and {g["name"] for g in usage["groups"]} <= {name}, usage
    ours = json.loads(_cli(env, "report", "usage", "--start", start, "--end", end.isoformat(), "--group-by",
                           "cluster", "-o", "json").stdout)
    assert ours["cluster"] == default and {g["name"] for g in ours["groups"]} <= {default}, ours

    bad = _cli(env, "events", "--cluster", "nope", ok=False)
    assert bad.returncode == 78 and "nope" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


# -- one dashboard ----------------------------------------------------------------------------


def _cpus(cluster: DevCluster) -> str:
    alloc, _idle, _other, total = scale_sh(cluster, "sinfo", "-h", "-o", "%C").split()[0].split("/")
    return f"{alloc} / {total}"


@pytest.mark.browser
def test_the_dashboards_switcher_and_all_clusters_overview_in_chromium(
        tower: ServeProcess, browser: Any, tokens: dict[str, str], devcluster: DevCluster,  # noqa: F811
        second: DevCluster) -> None:
    first, other = devcluster.cluster_name, second.cluster_name
    scale_sh(second, "scontrol", "update", "nodename=n3", "state=DRAIN", "reason=mc browser")
    try:
        page = page_as(browser, tower.url, tokens["reader"])
        assert page.locator("#cluster-switch option").all_inner_texts() == [first, other]
        assert page.locator("#cluster-switch").input_value() == first
        # the switcher keeps the cluster in the URL; the pages and their links are that cluster's
        page.select_option("#cluster-switch", other)
        page.wait_for_url(f"{tower.url}/ui?cluster={other}")
        assert page.locator("header h1 .muted").inner_text() == other
        assert page.locator('[data-resource="CPUs"]').inner_text().startswith(_cpus(second))
        page.click('nav a[href^="/ui/nodes"]')
        page.wait_for_url(f"{tower.url}/ui/nodes?cluster={other}")
        page.goto(f"{tower.url}/ui/nodes/n3?cluster={other}")
        assert "mc browser" in page.locator("main").inner_text()
        page.goto(f"{tower.url}/ui/nodes/n3")
        assert "mc browser" not in page.locator("main").inner_text()
        # all clusters at once
        page.goto(f"{tower.url}/ui/clusters")
        rows = page.locator("table.clusters tbody tr")
        assert rows.count() == 2
        for cluster in (devcluster, second):
            row = page.locator(f'table.clusters tr[data-cluster="{cluster.cluster_name}"]')
            assert row.locator('[data-field="cpus"]').inner_text().startswith(_cpus(cluster))
            assert row.locator('[data-field="nodes"]').inner_text().startswith(f"{len(_states(cluster))}:")
        assert "drain" in page.locator(f'tr[data-cluster="{other}"] [data-field="nodes"]').inner_text()
        shoot(page, "clusters")
        page.click(f'tr[data-cluster="{other}"] th a')
        page.wait_for_url(f"{tower.url}/ui?cluster={other}")
    finally:
        scale_sh(second, "scontrol", "update", "nodename=n3", "state=RESUME")


def test_a_clusters_role_goes_by_name_then_by_its_highest_group_then_the_cap() -> None:
    from slurmtower.principal import ANONYMOUS, Principal, role_on_cluster

    roles = {"ann": "reader", "group:ops": "operator", "group:admins": "admin"}
    ann = Principal(name="ann", role="admin", groups=("admins",))
    assert role_on_cluster(ann, roles, None).role == "reader"  # her name first
    bob = Principal(name="bob", role="reader", groups=("ops", "admins", "other"))
    assert role_on_cluster(bob, roles, "reader").role == "admin"  # the highest of his groups
    carl = Principal(name="carl", role="operator", groups=("other",))
    assert role_on_cluster(carl, roles, "reader").role == "reader"  # capped
    assert role_on_cluster(carl, roles, None).role == "operator"
    assert role_on_cluster(ANONYMOUS, roles, "reader") is ANONYMOUS
    # an alerter capped below operate posts no alerts there, and reads nothing either
    alerter = Principal(name="am", role="alerter")
    assert role_on_cluster(alerter, roles, "reader").role == "none"
    assert role_on_cluster(alerter, roles, "operator").role == "alerter"
    assert role_on_cluster(alerter, {"am": "alerter"}, "reader").role == "alerter"


# -- a newer release beside 22.05, several processes ------------------------------------------

NEWER = find_slurm_installs()


@pytest.mark.skipif(not NEWER, reason="no Slurm besides Debian's 22.05 is installed here (/opt/slurm-*, "
                                      "$SLURMTOWER_TEST_SLURM_PREFIXES): both clusters run 22.05")
def test_a_cluster_of_a_newer_release_beside_the_default_one(devcluster: DevCluster, tokens: dict[str, str]) -> None:
    install = NEWER[-1]
    # A cluster of its own on that release (not the release suites': scripts/test.sh runs them
    # meanwhile, and this tower's sensor would arm triggers on it).
    name = f"newer{N or ''}"
    newer = DevCluster(root=Path(f"/var/lib/slurmtower/newer-{WORKER or 'gw0'}"), cluster_name=name,
                       port_base=NEWER_PORT_BASE, slurm_prefix=install.prefix, log=lambda _m: None)
    was_up = newer.is_up()
    newer.up()
    state = cluster_state_dir(devcluster, "clusters-newer")
    config = multi_config(devcluster, newer, state)
    env = tower_env(config)
    serve = ServeProcess(env=env, log_path=state / "serve.log")
    serve.start(timeout=60)
    try:
        with _as(serve, tokens["reader"]) as http:
            got = {c["name"]: c["release"] for c in http.get("/clusters").json()["clusters"]}
            assert got[name] == install.version and got[devcluster.cluster_name].startswith("22.05")
            nodes = http.get(f"/clusters/{name}/nodes").json()["nodes"]
            assert sorted(n["name"] for n in nodes) == sorted(_states(newer))
    finally:
        serve.stop()
        if not was_up:
            newer.down()


def test_two_processes_over_two_clusters_elect_one_leader_per_cluster_and_role(
        devcluster: DevCluster, second: DevCluster, tower: ServeProcess, pg_store: str, tmp_path: Path) -> None:
    """Two ``serve`` processes on one PostgreSQL store and one Redis (a site's prefix): the
    sensor and the archiver of each cluster are led once among them (four roles), each
    cluster's snapshot is shared between them under its own key (the same bytes, its own
    squeue's jobs), and the second cluster's transitions are recorded once whichever process
    leads its sensor."""
    redis_server = PrivateRedis(tmp_path)
    redis_server.start()
    state = cluster_state_dir(devcluster, "clusters-two")
    config = multi_config(devcluster, second, state)
    env = tower_env(config, SLURMTOWER_STORE_URL=pg_store, SLURMTOWER_ACTIONS__BREAKER_ENABLED="false",
               SLURMTOWER_API__SHARED_CACHE_URL=redis_server.url, SLURMTOWER_API__SHARED_CACHE_PREFIX="mc-test")
    tower.stop()  # the module's tower: its triggers out of the way while these two lead
    procs = [ServeProcess(env=env, log_path=state / f"serve-{i}.log") for i in range(2)]
    try:
        for p in procs:
            p.start(timeout=60)
        wanted = ["archiver", f"archiver@{second.cluster_name}", "sensor", f"sensor@{second.cluster_name}"]

        def leads() -> list[str] | None:
            got = [r for p in procs for r in httpx.get(f"{p.url}/ready", timeout=10).json()["leads"]]
            return sorted(got) if sorted(got) == wanted else None

        wait_for(leads, 30, 0.5, what="each cluster's sensor and archiver led once")
        token = devcluster.demo_tokens()["reader"]
        auth = {"Authorization": f"Bearer {token}"}
        mine = _held_jobs(second, 2, "mc-shared")
        try:
            for cluster, path in ((devcluster, "/queue"), (second, f"/clusters/{second.cluster_name}/queue")):
                def shared(cluster: DevCluster = cluster, path: str = path) -> bool:
                    got = [httpx.get(f"{p.url}{path}", headers=auth, timeout=10) for p in procs]
                    ids = [{j["job_id"] for j in r.json()["jobs"]} for r in got]
                    return got[0].headers["etag"] == got[1].headers["etag"] and ids[0] == ids[1] == _queue_ids(cluster)

                wait_for(shared, 30, 0.5, what=f"{cluster.cluster_name}'s snapshot shared by both processes")
            keys = {k.decode() for k in redis_server.client().scan_iter("mc-test*")}
            assert any(k.startswith(f"mc-test:{second.cluster_name}:") for k in keys), sorted(keys)[:10]
        finally:
            scale_sh(second, "scancel", *map(str, mine), check=False)
        last = max((e["id"] for e in httpx.get(f"{procs[0].url}/events", params={"limit": 1000}, timeout=10,
                                               headers={"Authorization": f"Bearer {token}"}).json()), default=0)
        scale_sh(second, "scontrol", "update", "nodename=n4", "state=DRAIN", "reason=mc two processes")
        try:
            def drained() -> list[dict[str, Any]]:
                evs = httpx.get(f"{procs[1].url}/clusters/{second.cluster_name}/events", timeout=10,
                                params={"since": last, "node": "n4", "type": "slurm.node.state"},
                                headers={"Authorization": f"Bearer {token}"}).json()
                return [e for e in evs if "DRAIN" in e["payload"]["flags"]]

            first = wait_for(drained, 20, 0.2, what="the second cluster's n4 drained, recorded")
            time.sleep(1.5)  # more polls of both processes: a second record would show
            assert drained() == first and len(first) == 1 and first[0]["cluster"] == second.cluster_name
        finally:
            scale_sh(second, "scontrol", "update", "nodename=n4", "state=RESUME")
    finally:
        for p in procs:
            p.stop()
        redis_server.stop()
        tower.start(timeout=60)
