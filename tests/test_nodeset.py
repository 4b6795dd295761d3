from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmtower.errors import NodeSetError
from slurmtower.nodeset import SYNTAX, NodeSet, parse_nodeset

from .openapi_formats import nodesets


def test_folds_and_keeps_zero_padding() -> None:
    ns = parse_nodeset("n01,n02,n03")
    assert str(ns) == "n[01-03]"
    assert list(parse_nodeset("n[01-03]")) == ["n01", "n02", "n03"]


def test_behaves_like_a_set() -> None:
    a = parse_nodeset("n[1-4]")
    b = parse_nodeset("n[3-6]")
    assert str(a | b) == "n[1-6]"
    assert str(a & b) == "n[3-4]"
    assert str(a - b) == "n[1-2]"
    assert len(a) == 4 and "n2" in a and "n9" not in a
    assert parse_nodeset(["n2", "n1"]) == "n[1-2]"


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("n[1-", "[1-"),
        ("n1,,n2", "(empty)"),
        ("n[a-b]", "n[a-b]"),
        ("n1]", "n1]"),
        ("n[1-2],x[3-1]", "x[3-1]"),
    ],
    ids=["unclosed", "empty-fragment", "letters-in-range", "unmatched", "reversed-range"],
)
def test_malformed_expression_names_the_bad_fragment(expr: str, fragment: str) -> None:
    with pytest.raises(NodeSetError) as exc:
        parse_nodeset(expr)
    assert fragment in str(exc.value)
    assert exc.value.param == "nodes"


@pytest.mark.parametrize("expr", ["@all", "@compute:rack1", "n[1-4]!n2", "n1 n2", "n1;reboot"])
def test_group_syntax_and_operators_are_refused(expr: str) -> None:
    with pytest.raises(NodeSetError):
        parse_nodeset(expr)


def test_empty_is_refused_and_huge_expansions_too() -> None:
    with pytest.raises(NodeSetError, match="empty"):
        parse_nodeset("  ")
    with pytest.raises(NodeSetError, match="expands to"):
        parse_nodeset("n[1-9999999]")


@given(st.sets(st.integers(min_value=0, max_value=500), min_size=1, max_size=40))
def test_fold_then_expand_round_trips(numbers: set[int]) -> None:
    names = [f"c{n:03d}" for n in sorted(numbers)]
    folded = str(NodeSet(names))
    assert list(parse_nodeset(folded)) == names


@pytest.mark.parametrize("expr", ["-x", "n1,-x", "[1-2],-a", "-n[1-2]"])
def test_a_name_starting_with_a_dash_is_refused(expr: str) -> None:
    """scontrol took ``-aes3mRih`` for its options (issue 41, item 9: an admin's drain of it was a
    502 with "scontrol: invalid option -- 'e'"): no node name starts with '-'."""
    with pytest.raises(NodeSetError, match="does not start with '-'"):
        parse_nodeset(expr)
    assert not SYNTAX.match(expr)


def test_a_bracket_holds_ranges_only() -> None:
    """ClusterShell read n[1,-3] as n-3 and n1."""
    with pytest.raises(NodeSetError, match="no range"):
        parse_nodeset("n[1,-3]")
    assert not SYNTAX.match("n[1,-3]")


@given(nodesets())
def test_every_node_set_of_the_documented_format_parses(expr: str) -> None:
    """The ``nodeset`` format (tests/openapi_formats.py) is what the API's documents promise."""
    assert SYNTAX.match(expr)
    assert parse_nodeset(expr)
