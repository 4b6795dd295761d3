"""Rules wired into the running sensor: a node going down drains another, with its trace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.models.event import NODE_STATE

from .conftest import node_states, sh, wait_for
from .sensor_helpers import SensorProcess

pytestmark = pytest.mark.cluster

RULE = """
name: drain_n2_when_n1_down
description: n1 and n2 share a PSU; when n1 goes down, take n2 out of scheduling too.
trigger:
  type: slurm.node.state
criteria:
  trigger.node: {type: equals, pattern: n1}
  trigger.state: {type: equals, pattern: DOWN}
  trigger.previous_state: {type: nequals, pattern: DOWN}
action:
  ref: slurm.node.drain
  parameters:
    nodes: n2
    reason: "neighbour {{ trigger.node }} went down ({{ trigger.reason }})"
rate_limit: {max_runs: 1, per_seconds: 3600}
"""

BROKEN = """
name: broken
trigger: {type: slurm.node.state}
criteria:
  trigger.node: {type: no_such_operator, pattern: x}
action: {ref: slurm.node.drain}
"""


@pytest.fixture()
def rules_dir(clean_nodes: DevCluster) -> Iterator[Path]:
    d = clean_nodes.root / "slurmtower" / "rules-test"
    d.mkdir(parents=True, exist_ok=True)
    (d / "drain.yaml").write_text(RULE)
    (d / "broken.yaml").write_text(BROKEN)
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


def test_rule_drains_a_node_when_another_goes_down_with_its_trace(
    clean_nodes: DevCluster, rules_dir: Path
) -> None:
    sensor = SensorProcess(clean_nodes, extra_env={"SLURMTOWER_EVENTS__RULES_DIR": str(rules_dir)})
    try:
        sensor.start()  # the broken rule file does not stop the good one
        sh("scontrol", "update", "nodename=n1", "state=down", "reason=psu-test")
        wait_for(lambda: "DRAIN" in node_states()["n2"], 20, what="n2 drained by the rule")
        store = sensor.store()
        try:
            runs = wait_for(lambda: store.rule_runs(rule="drain_n2_when_n1_down"), 10, what="rule run")
        finally:
            store.close()
        assert len(runs) == 1
        run = runs[0]
        assert run.outcome == "succeeded" and run.action_ref == "slurm.node.drain"
        assert run.envelope["status"] == "succeeded"
        cause = next(e for e in sensor.events(types=[NODE_STATE]) if e.id == run.event_id)
        assert cause.node == "n1" and cause.payload["state"] == "DOWN"
        # The drain it made is owned by the rule, and the sensor recorded it too.
        drained = sensor.wait_events(
            lambda evs: [e for e in evs if e.node == "n2" and "DRAIN" in e.payload.get("flags_added", [])],
            10, "n2 drain event")
        n2 = [e for e in drained if e.node == "n2" and "DRAIN" in e.payload.get("flags_added", [])]
        assert len(n2) == 1
        assert "neighbour n1 went down (psu-test)" in n2[0].payload["reason"]
        assert n2[0].payload["reason_owner"] == "slurmtower:drain_n2_when_n1_down@rule"
        assert "rule not loaded" in sensor.log() and "broken.yaml" in sensor.log()
    finally:
        sensor.cleanup()


def test_rules_check_reports_each_broken_file(rules_dir: Path) -> None:
    import subprocess

    from .sensor_helpers import SLURMTOWER

    proc = subprocess.run([SLURMTOWER, "rules", "check", str(rules_dir)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "ok    drain_n2_when_n1_down" in proc.stdout
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and "broken.yaml" in errors[0] and "(rule broken)" in errors[0]
    examples = Path(__file__).resolve().parent.parent / "examples" / "rules"
    ok = subprocess.run([SLURMTOWER, "rules", "check", str(examples)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
