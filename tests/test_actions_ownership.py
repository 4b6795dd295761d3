"""Owner tags: the format drain reasons carry, parsed back by anyone (sensor included)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmtower.actions.ownership import parse_reason, reason_owner, sanitize_who, tag_reason
from slurmtower.models import Node, NodeState


def test_tag_is_appended_in_the_documented_format() -> None:
    assert tag_reason("disk swap", who="alice", via="cli") == "disk swap [slurmtower:alice@cli]"


@given(reason=st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=60)
       .filter(lambda s: s.strip() and "[slurmtower:" not in s.lower()),
       who=st.text(min_size=1, max_size=20), via=st.sampled_from(["cli", "api", "rule"]))
def test_tag_round_trips(reason: str, who: str, via: str) -> None:
    text, tag = parse_reason(tag_reason(reason, who=who, via=via))  # type: ignore[arg-type]
    assert tag is not None
    assert tag.who == sanitize_who(who)
    assert tag.via == via
    assert text == reason.strip()


@pytest.mark.parametrize("reason", ["Not responding", "disk [slurmtower:alice]", "x [slurmtower:a@web]"],
                         ids=["slurm", "no-via", "bad-via"])
def test_reason_without_a_valid_tag_has_no_owner_tag(reason: str) -> None:
    assert parse_reason(reason) == (reason, None)


def test_reason_owner_names_the_tag_or_slurms_user() -> None:
    tagged = Node(name="n1", state=NodeState.IDLE, flags=frozenset({"DRAIN"}),
                  reason="x [slurmtower:bob@api]", reason_set_by_user="root")
    person = Node(name="n2", state=NodeState.IDLE, flags=frozenset({"DRAIN"}), reason="bad dimm",
                  reason_set_by_user="root")
    clear = Node(name="n3", state=NodeState.IDLE)
    assert reason_owner(tagged) == "slurmtower:bob@api"
    assert reason_owner(person) == "user:root"
    assert reason_owner(clear) is None


def test_sanitize_keeps_tag_parseable() -> None:
    assert sanitize_who("a b]@c") == "a_b__c"
    assert sanitize_who("  ") == "unknown"
