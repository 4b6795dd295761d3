"""The string formats of slurmtower's OpenAPI document that a pattern cannot say, as hypothesis
strategies for schemathesis: what a client generating requests from the document must know.

``nodeset``: a node set expression (``n[1-4],x7``). Its characters are the parameter's pattern
(:data:`slurmtower.nodeset.SYNTAX`); what no regular expression says is that brackets match,
ranges ascend and keep their padding (``n[01-10]``), and that it names at most 100,000 nodes.
Generated ones name real nodes too (an admin's run drains them: the bench puts them back).

Registered with schemathesis by :func:`register` (``tests/test_fuzz.py``), and by schemathesis'
CLI when this module is its hooks module (``SCHEMATHESIS_HOOKS=tests.openapi_formats``,
``bench/openapi.py``).
"""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st

__all__ = ["NODE_NAMES", "nodesets", "register"]

#: The devcluster's nodes, so that generated sets name real ones too.
NODE_NAMES = ("n1", "n2", "n3", "n4")


@st.composite
def _range(draw: st.DrawFn) -> str:
    width = draw(st.integers(1, 3))
    low = draw(st.integers(0, 10**width - 1))
    high = draw(st.integers(low, min(10**width - 1, low + 50)))
    padded = draw(st.booleans()) and width > 1
    if not padded:
        return str(low) if low == high else f"{low}-{high}"
    return f"{low:0{width}d}" if low == high else f"{low:0{width}d}-{high:0{width}d}"


_PREFIX = st.from_regex(r"[a-z][a-z0-9_.-]{0,6}[a-z_.-]", fullmatch=True)
# No suffix after the brackets (n[1-4]-ib): slurmtower reads one, Slurm 22.05's hostlist does not
# (an unknown n[1-2]-ib is "unable to parse node list" there, a 400, where n[1-2] is a 404).
_BRACKETED = st.builds(lambda prefix, ranges: f"{prefix}[{','.join(ranges)}]", _PREFIX,
                       st.lists(_range(), min_size=1, max_size=3))
# No name starts with '-' (scontrol would take it for an option: nodeset.SYNTAX refuses it).
_NAME = st.sampled_from(NODE_NAMES) | st.from_regex(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,11}", fullmatch=True)


def nodesets() -> st.SearchStrategy[str]:
    """Node set expressions slurmtower takes: names and bracketed ascending ranges."""
    return st.lists(_NAME | _BRACKETED, min_size=1, max_size=4).map(",".join)


def register() -> None:
    """Teach schemathesis the document's own formats."""
    schemathesis.openapi.format("nodeset", nodesets())


register()
