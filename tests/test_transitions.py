"""diff_states: one slurm.node.state event per node whose base state or flags changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from slurmtower.events.transitions import NodeSnapshot, diff_states, node_sort_key
from slurmtower.models.event import NODE_STATE, NodeTransition
from slurmtower.models.node import Node

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def snap(state: str, *flags: str, reason: str | None = None) -> NodeSnapshot:
    return NodeSnapshot(state=state, flags=frozenset(flags), reason=reason)


def test_unchanged_nodes_emit_nothing() -> None:
    states = {"n1": snap("IDLE"), "n2": snap("ALLOCATED")}
    assert diff_states(states, dict(states), source="poll", observed_at=T0) == []


def test_base_state_change_is_one_event_with_full_payload() -> None:
    before = {"n1": snap("IDLE"), "n2": snap("IDLE")}
    after = {"n1": snap("DOWN", "NOT_RESPONDING", reason="Not responding"), "n2": snap("IDLE")}
    (event,) = diff_states(before, after, source="trigger", observed_at=T0)
    assert event.type == NODE_STATE
    assert event.node == "n1"
    assert event.source == "trigger"
    assert event.time == T0
    assert event.id is None
    t = NodeTransition.model_validate(event.payload)
    assert (t.change, t.previous_state, t.state) == ("state", "IDLE", "DOWN")
    assert t.flags == ["NOT_RESPONDING"]
    assert t.flags_added == ["NOT_RESPONDING"]
    assert t.flags_removed == []
    assert t.reason == "Not responding"
    assert t.observed_at == T0


def test_flag_change_with_same_base_state_is_a_transition() -> None:
    before = {"n1": snap("IDLE")}
    after = {"n1": snap("IDLE", "DRAIN", reason="maint")}
    (event,) = diff_states(before, after, source="poll", observed_at=T0)
    assert event.payload["change"] == "flags"
    assert event.payload["flags_added"] == ["DRAIN"]
    assert event.payload["previous_flags"] == []


def test_reason_change_alone_is_not_a_transition() -> None:
    before = {"n1": snap("IDLE", "DRAIN", reason="disk")}
    after = {"n1": snap("IDLE", "DRAIN", reason="disk, replaced cable")}
    assert diff_states(before, after, source="poll", observed_at=T0) == []


def test_short_lived_not_responding_flag_is_two_transitions() -> None:
    s0 = {"n1": snap("ALLOCATED")}
    s1 = {"n1": snap("ALLOCATED", "NOT_RESPONDING")}
    s2 = {"n1": snap("ALLOCATED")}
    first = diff_states(s0, s1, source="poll", observed_at=T0)
    second = diff_states(s1, s2, source="poll", observed_at=T0 + timedelta(seconds=1))
    assert [e.payload["flags_added"] for e in first] == [["NOT_RESPONDING"]]
    assert [e.payload["flags_removed"] for e in second] == [["NOT_RESPONDING"]]


def test_appearing_and_disappearing_nodes() -> None:
    before = {"n1": snap("IDLE"), "n2": snap("IDLE")}
    after = {"n2": snap("IDLE"), "n3": snap("FUTURE")}
    events = diff_states(before, after, source="poll", observed_at=T0)
    by_node = {e.node: e.payload for e in events}
    assert by_node["n1"]["change"] == "disappeared"
    assert by_node["n1"]["state"] is None
    assert by_node["n1"]["previous_state"] == "IDLE"
    assert by_node["n3"]["change"] == "appeared"
    assert by_node["n3"]["previous_state"] is None
    assert "n2" not in by_node


def test_appeared_events_can_be_suppressed() -> None:
    events = diff_states({}, {"n1": snap("IDLE")}, source="startup", observed_at=T0, include_appeared=False)
    assert events == []


def test_partial_observation_does_not_make_other_nodes_disappear() -> None:
    before = {"n1": snap("IDLE"), "n2": snap("IDLE")}
    after = {"n2": snap("DOWN")}
    events = diff_states(before, after, source="trigger", observed_at=T0, partial=True)
    assert [(e.node, e.payload["change"]) for e in events] == [("n2", "state")]


def test_events_come_in_natural_node_order() -> None:
    after = {name: snap("DOWN") for name in ["n10", "n2", "n1", "gpu01"]}
    before = {name: snap("IDLE") for name in after}
    events = diff_states(before, after, source="poll", observed_at=T0)
    assert [e.node for e in events] == ["gpu01", "n1", "n2", "n10"]
    assert sorted(["n10", "n9"], key=node_sort_key) == ["n9", "n10"]


def test_observed_at_is_normalised_to_utc_and_naive_is_refused() -> None:
    cest = timezone(timedelta(hours=2))
    (event,) = diff_states({}, {"n1": snap("IDLE")}, source="poll", observed_at=T0.astimezone(cest))
    assert event.time.utcoffset() == timedelta(0)
    assert event.time == T0
    with pytest.raises(ValueError, match="timezone-aware"):
        diff_states({}, {}, source="poll", observed_at=datetime(2026, 1, 1))


def test_snapshot_from_a_parsed_node() -> None:
    node = Node(name="n1", state="IDLE", flags={"DRAIN"}, reason="x", reason_set_by_user="root")
    assert NodeSnapshot.from_node(node) == NodeSnapshot("IDLE", frozenset({"DRAIN"}), "x", "root")


def test_snapshot_accepts_any_iterable_of_flags() -> None:
    assert NodeSnapshot("IDLE", ["DRAIN"]).flags == frozenset({"DRAIN"})  # type: ignore[arg-type]
