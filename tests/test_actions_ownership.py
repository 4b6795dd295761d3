"""Owner tags: the format drain reasons carry, parsed back by anyone (sensor included), and
the reasons naming several holds (slurmtower's own and outside ones) that drain holds write."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmtower.actions.ownership import (
    ReasonPart,
    contains_tag,
    join_reason,
    parse_reason,
    reason_holders,
    reason_owner,
    sanitize_who,
    split_reason,
    tag_reason,
)
from slurmtower.actions.params import NodeDrainParams
from slurmtower.models import Node, NodeState

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=60)


def test_tag_is_appended_in_the_documented_format() -> None:
    assert tag_reason("disk swap", who="alice", via="cli") == "disk swap [slurmtower:alice@cli]"


# A reason may not carry a tag of its own (the parameters refuse it): [user:...] is one now too.
@given(reason=_TEXT.filter(lambda s: bool(s.strip()) and not contains_tag(s)),
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


@given(parts=st.lists(st.tuples(_TEXT.filter(lambda s: bool(s.strip()) and not contains_tag(s)),
                                st.sampled_from(["slurmtower:alice@cli", "slurmtower:hc-1@rule", "slurmtower:bob@api",
                                                 "user:root", "unknown"])),
                      min_size=1, max_size=5))
def test_a_reason_naming_several_holds_round_trips(parts: list[tuple[str, str]]) -> None:
    held = [ReasonPart(text.strip(), holder) for text, holder in parts]
    back = split_reason(join_reason(held))
    assert [(p.text, p.holder) for p in back] == [(p.text, p.holder) for p in held]
    # parse_reason: the texts joined, the newest slurmtower tag
    text, tag = parse_reason(join_reason(held))
    assert text == "; ".join(p.text or "" for p in held)
    tagged = [p.holder for p in held if p.holder.startswith("slurmtower:")]
    assert (tag.holder if tag is not None else None) == (tagged[-1] if tagged else None)


def test_several_holds_in_one_reason_as_sinfo_shows_them() -> None:
    reason = "bad fan; psu [user:root]; disk swap [slurmtower:alice@cli]; ecc [slurmtower:hc@rule]"
    assert [(p.text, p.holder) for p in split_reason(reason)] == [
        ("bad fan; psu", "user:root"), ("disk swap", "slurmtower:alice@cli"), ("ecc", "slurmtower:hc@rule")]
    node = Node(name="n2", state=NodeState.IDLE, flags=frozenset({"DRAIN"}), reason=reason, reason_set_by_user="slurm")
    assert reason_owner(node) == "slurmtower:hc@rule"  # the newest holder, as the sensor reports it
    # text after the last tag: someone edited the reason outside slurmtower, it is one outside hold
    edited = "disk swap [slurmtower:alice@cli] and more"
    assert split_reason(edited) == [] and parse_reason(edited) == (edited, None)
    assert [(p.text, p.holder) for p in reason_holders(edited, "bob")] == [(edited, "user:bob")]
    assert reason_holders("bad fan [user:root]", "slurm")[0].holder == "user:root"  # kept by slurmtower
    assert reason_holders(None, "root") == []


def test_a_drain_reason_may_not_carry_a_holders_tag() -> None:
    for bad in ("x [user:root]", "x [slurmtower:a@cli]", "[SLURMTOWER:x"):
        with pytest.raises(ValueError, match="owner tag"):
            NodeDrainParams(nodes="n1", reason=bad)
    assert NodeDrainParams(nodes="n1", reason="a; b [user:]").reason == "a; b [user:]"
