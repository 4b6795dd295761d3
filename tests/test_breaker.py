"""The circuit breaker on the real 4-node cluster: partitions debug n[1-4], batch n[1-2], short n[3-4].

With ``breaker_share = 0.25`` debug takes one node per window: the first drain passes (1 of 4
is at the limit, not past it), the second node is refused with a Conflict naming the
partition, the share, the window and the node already out, the event
``slurmtower.breaker.tripped`` is recorded and nothing changes in Slurm. An admin's
``override_breaker`` passes (HTTP admin, the CLI), an operator's and a rule's are refused; a
rule draining on ``down`` events is stopped by it and its run records the refusal.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmtower.actions import Catalogue, rule_dispatcher
from slurmtower.actions.breaker import OVERRIDDEN, TRIPPED, BreakerTripped
from slurmtower.api import create_app
from slurmtower.devcluster import DevCluster
from slurmtower.errors import PermissionDenied
from slurmtower.events.store import EventStore
from slurmtower.models.event import NODE_STATE
from slurmtower.runtime import Services
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient

from .auth_helpers import ADMIN, OPERATOR, bearer, with_tokens
from .conftest import BREAKER_OFF, node_states, reason_of, sh, wait_for
from .sensor_helpers import SensorProcess
from .test_actions_api import Http

pytestmark = pytest.mark.cluster

SCRIPT = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "slurmtower")
#: One node of debug per window; batch, short and the cluster left out of the way.
BREAKER = {"breaker_enabled": True, "breaker_share": 0.25, "breaker_cluster_share": 1.0,
           "breaker_partition_shares": {"batch": 1.0, "short": 1.0}}


@pytest.fixture()
def armed(settings: Settings) -> Settings:
    for key, value in BREAKER.items():
        setattr(settings.actions, key, value)
    return settings


@pytest.fixture()
def catalogue(armed: Settings, client: CliSlurmClient, clean_nodes: Any) -> Iterator[Catalogue]:
    cat = Catalogue.from_settings(armed, client=client)
    yield cat
    cat.store.close()


def run(cat: Catalogue, name: str, params: dict[str, Any], who: str = "alice", via: str = "cli") -> Any:
    return cat.execute(name, params, principal=who, via=via)  # type: ignore[arg-type]


def events(cat: Catalogue, kind: str) -> list[Any]:
    store = EventStore(cat.store.engine, create=False)
    return store.query(types=[kind])


def cluster_nodes() -> dict[str, tuple[str, str]]:
    return {n: (s, reason_of(n)) for n, s in node_states().items()}


def test_the_second_node_of_debug_in_the_window_is_refused_with_an_event(catalogue: Catalogue) -> None:
    first = run(catalogue, "slurm.node.drain", {"nodes": "n1", "reason": "disk"})
    assert first.status == "succeeded"  # 1 of 4 out: at the limit, not past it
    assert events(catalogue, TRIPPED) == []
    before = cluster_nodes()
    with pytest.raises(BreakerTripped) as refused:
        run(catalogue, "slurm.node.drain", {"nodes": "n3", "reason": "ecc"}, who="bob")
    message = refused.value.message
    assert message.startswith("circuit breaker: slurm.node.drain of n3 would leave 2 of the 4 nodes of partition "
                              "debug out of service within 600 s, more than its limit of 25% (1 node); already "
                              "out in the window: n1 (1); nothing changed")
    assert "override_breaker=true" in message and "\n" not in message
    problem = refused.value.to_problem()
    assert problem["status"] == 409 and problem["title"] == "circuit breaker tripped"
    assert problem["breaker"]["partition"] == "debug" and problem["breaker"]["share"] == 0.25
    assert problem["breaker"]["window"] == 600 and problem["breaker"]["already_out"] == "n1"
    assert problem["breaker"]["already_out_count"] == 1
    assert cluster_nodes() == before  # nothing changed in Slurm
    (event,) = events(catalogue, TRIPPED)
    assert event.node == "n3" and event.source == "cli"
    assert event.payload["action"] == "slurm.node.drain" and event.payload["principal"] == "bob"
    (scope,) = event.payload["scopes"]
    assert scope == {"scope": "partition", "partition": "debug", "share": 0.25, "nodes": 4, "limit": 1,
                     "already_out": "n1", "already_out_count": 1, "requested": "n3", "requested_count": 1,
                     "would_be_out": 2}
    refusal = catalogue.store.list_audit(limit=1)[0]
    assert refusal.outcome == "refused" and "circuit breaker" in refusal.message
    assert event.payload["execution_id"] == refusal.execution_id
    # slurm.node.down counts the same; a dry run says it would trip and records no event
    with pytest.raises(BreakerTripped):
        run(catalogue, "slurm.node.down", {"nodes": "n4", "dry_run": True}, who="bob")
    assert len(events(catalogue, TRIPPED)) == 1
    # a second hold on n1, already out in the window, takes nothing more out: it passes
    assert run(catalogue, "slurm.node.drain", {"nodes": "n1", "reason": "ecc"}, who="bob").status == "succeeded"
    # once n1 is back in service it no longer counts
    run(catalogue, "slurm.node.resume", {"nodes": "n1", "force": True})
    wait_for(lambda: "DRAIN" not in node_states()["n1"], 10, what="n1 resumed")
    assert run(catalogue, "slurm.node.drain", {"nodes": "n3", "reason": "ecc"}, who="bob").status == "succeeded"


def test_a_bulk_drain_past_the_limit_is_refused_whole(catalogue: Catalogue) -> None:
    before = cluster_nodes()
    with pytest.raises(BreakerTripped, match=r"slurm.node.drain of n\[1-2\] would leave 2 of the 4 nodes of "
                                             r"partition debug .* already out in the window: none \(0\)"):
        run(catalogue, "slurm.node.drain", {"nodes": "n[1-2]", "reason": "rack"})
    assert cluster_nodes() == before


def test_the_cluster_share_and_a_node_out_since_before_the_window(catalogue: Catalogue, armed: Settings) -> None:
    armed.actions.breaker_share = 1.0
    armed.actions.breaker_cluster_share = 0.25
    armed.actions.breaker_window = 4.0
    sh("scontrol", "update", "nodename=n2", "state=drain", "reason=old outside drain")
    with pytest.raises(BreakerTripped, match="would leave 2 of the 4 nodes of the cluster .* within 4 s.*"
                                             r"already out in the window: n2 \(1\)"):
        run(catalogue, "slurm.node.drain", {"nodes": "n4", "reason": "x"})
    time.sleep(4.5)  # n2 is out since before the window now: it no longer counts
    assert run(catalogue, "slurm.node.drain", {"nodes": "n4", "reason": "x"}).status == "succeeded"
    # adding a hold to n2 (out for long) takes nothing out; n3 would be the second in the window
    assert run(catalogue, "slurm.node.drain", {"nodes": "n2", "reason": "y"}).status == "succeeded"
    with pytest.raises(BreakerTripped, match="already out in the window: n4"):
        run(catalogue, "slurm.node.drain", {"nodes": "n3", "reason": "x"})


def test_override_admin_passes_operator_and_rule_are_refused(armed: Settings, client: CliSlurmClient,
                                                              clean_nodes: Any) -> None:
    http = Http(create_app(services=Services(settings=with_tokens(armed), client=client)))
    ok = http.post("/actions/slurm.node.drain", json={"nodes": "n1", "reason": "a"}, headers=bearer(OPERATOR))
    assert ok.status_code == 200 and ok.json()["status"] == "succeeded", ok.text
    refused = http.post("/actions/slurm.node.drain", json={"nodes": "n3", "reason": "b"}, headers=bearer(OPERATOR))
    assert refused.status_code == 409 and refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["breaker"]["partition"] == "debug" and "circuit breaker" in refused.json()["detail"]
    body = {"nodes": "n3", "reason": "b", "override_breaker": True}
    denied = http.post("/actions/slurm.node.drain", json=body, headers=bearer(OPERATOR))
    assert denied.status_code == 403 and "override_breaker needs the admin role" in denied.json()["detail"]
    assert "DRAIN" not in node_states()["n3"]
    passed = http.post("/actions/slurm.node.drain", json=body, headers=bearer(ADMIN))
    assert passed.status_code == 200 and passed.json()["status"] == "succeeded", passed.text
    assert passed.json()["result"]["breaker"]["overridden"] is True
    assert "DRAIN" in node_states()["n3"]
    audit = http.get("/audit?limit=6", headers=bearer(ADMIN)).json()["records"]
    assert [(r["who"], r["outcome"]) for r in audit if r["outcome"] != "intent"][:3] == [
        ("ada", "succeeded"), ("otto", "refused"), ("otto", "refused")]
    cat = Catalogue.from_settings(armed, client=client)
    try:
        (overridden,) = events(cat, OVERRIDDEN)
        assert overridden.payload["principal"] == "ada" and overridden.payload["scopes"][0]["partition"] == "debug"
        assert len(events(cat, TRIPPED)) == 1  # the operator's plain refusal; the 403 never reached it
        with pytest.raises(PermissionDenied, match="a rule cannot override the circuit breaker"):
            rule_dispatcher(cat)("slurm.node.drain", {"nodes": "n4", "override_breaker": True}, {"rule": "r"})
    finally:
        cat.store.close()


def test_cli_refusal_is_one_line_exit_3_and_the_cli_may_override(devcluster: DevCluster, tmp_path: Path,
                                                                  clean_nodes: Any) -> None:
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path), BREAKER_OFF[0]: "true",
           "SLURMTOWER_ACTIONS__BREAKER_SHARE": "0.25", "SLURMTOWER_ACTIONS__BREAKER_CLUSTER_SHARE": "1",
           "SLURMTOWER_ACTIONS__BREAKER_PARTITION_SHARES": '{"batch": 1, "short": 1}'}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=60, check=False)

    assert cli("run", "slurm.node.drain", "nodes=n1", "reason=a").returncode == 0
    refused = cli("run", "slurm.node.drain", "nodes=n4", "reason=b")
    assert refused.returncode == 3 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert line.startswith("slurmtower: error: circuit breaker: slurm.node.drain of n4 would leave 2 of the 4 "
                           "nodes of partition debug out of service within 600 s")
    assert "DRAIN" not in node_states()["n4"]
    forced = cli("run", "slurm.node.drain", "nodes=n4", "reason=b", "override_breaker=true")
    assert forced.returncode == 0, forced.stderr
    assert yaml.safe_load(forced.stdout)["result"]["breaker"]["overridden"] is True
    assert "DRAIN" in node_states()["n4"]
    listed = cli("events", "--type", TRIPPED, "--output", "json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["node"] for line in listed.stdout.splitlines()] == ["n4"]


DOWN_RULE = """
name: drain_down_nodes
description: Keep a node that went down out of scheduling until an admin looks.
trigger:
  type: slurm.node.state
criteria:
  trigger.state: {type: equals, pattern: DOWN}
  trigger.previous_state: {type: nequals, pattern: DOWN}
action:
  ref: slurm.node.drain
  parameters:
    nodes: "{{ trigger.node }}"
    reason: "went down ({{ trigger.reason }})"
"""


def test_a_rule_draining_on_down_events_is_stopped_by_the_breaker(clean_nodes: DevCluster) -> None:
    rules = clean_nodes.root / "slurmtower" / "rules-breaker"
    rules.mkdir(parents=True, exist_ok=True)
    (rules / "drain_down.yaml").write_text(DOWN_RULE)
    extra = {"SLURMTOWER_EVENTS__RULES_DIR": str(rules), BREAKER_OFF[0]: "true",
             "SLURMTOWER_ACTIONS__BREAKER_SHARE": "0.25", "SLURMTOWER_ACTIONS__BREAKER_CLUSTER_SHARE": "1",
             "SLURMTOWER_ACTIONS__BREAKER_PARTITION_SHARES": '{"batch": 1, "short": 1}'}
    sensor = SensorProcess(clean_nodes, extra_env=extra)
    try:
        sensor.start()
        sh("scontrol", "update", "nodename=n1", "state=down", "reason=psu")
        wait_for(lambda: "DRAIN" in node_states()["n1"], 20, what="n1 drained by the rule")
        assert reason_of("n1") == "psu [user:root]; went down (psu) [slurmtower:drain_down_nodes@rule]"
        sh("scontrol", "update", "nodename=n3", "state=down", "reason=psu")
        store = sensor.store()
        try:
            runs = wait_for(lambda: [r for r in store.rule_runs(rule="drain_down_nodes") if r.node == "n3"], 20,
                            what="the rule's run for n3")
            (n3,) = runs
            assert n3.outcome == "failed" and n3.envelope["status"] == "failed"
            assert n3.envelope["stderr"].startswith("circuit breaker: slurm.node.drain of n3 would leave 2 of the 4 "
                                                    "nodes of partition debug")
            # n3 itself went down within the window: it counts once, with n1
            assert n3.envelope["result"]["breaker"]["already_out"] == "n[1,3]"
            (first,) = [r for r in store.rule_runs(rule="drain_down_nodes") if r.node == "n1"]
            assert first.outcome == "succeeded"
            (tripped,) = store.query(types=[TRIPPED])
            assert tripped.source == "rule" and tripped.payload["principal"] == "drain_down_nodes"
            cause = store.get(n3.event_id) if n3.event_id is not None else None
            assert cause is not None and cause.type == NODE_STATE and cause.payload["state"] == "DOWN"
        finally:
            store.close()
        states = node_states()
        assert states["n3"].startswith("DOWN") and "DRAIN" not in states["n3"]  # left as Slurm set it
        assert reason_of("n3") == "psu"
    finally:
        sensor.cleanup()
        for f in rules.iterdir():
            f.unlink()
        rules.rmdir()
