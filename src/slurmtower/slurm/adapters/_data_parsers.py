"""The JSON formats slurmtower knows, one entry per ``v0.0.N``: the one list the others derive from.

The adapter chain's newest format (:data:`._chain.NEWEST`), the default format of each release
(:func:`._envelope.format_version` for a document whose meta names none) and the REST backend's
usable API versions all come from :data:`DATA_PARSERS`. v0.0.36-38 are the ``openapi/`` plugins
of 20.11-22.05 (there was no data_parser plugin before 23.02); from v0.0.39 on the CLI's
``--json`` and slurmrestd share ``data_parser/v0.0.N``.

Where the entries come from: the recordings under ``tests/fixtures/slurm/`` (which versions
slurmrestd offers and marks deprecated on 22.05, 24.11, 25.11 and 26.05, checked against each
folder's ``index.json`` by the tests), the release each format is the default of, and what is
announced for 26.11 (v0.0.46 its newest, v0.0.42 removed). The exact releases that dropped
v0.0.36-38 and v0.0.40 are not recorded (22.05 still serves 36-38, 24.11 none of them, 25.11
no 40): they are set to Slurm's usual window, and nothing here depends on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from slurmtower.models.version import SlurmVersion

__all__ = [
    "DATA_PARSERS",
    "KNOWN_DATA_PARSERS",
    "RELEASES",
    "DataParser",
    "data_parser",
    "data_parser_note",
    "deprecated_parsers",
    "newest_known",
    "served_by",
]

#: Slurm releases, oldest first (a data format is served from the release it is the default of
#: until the one that removes it).
RELEASES: tuple[str, ...] = (
    "20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05", "26.11",
)


def _key(release: str | SlurmVersion) -> tuple[int, int]:
    version = release if isinstance(release, SlurmVersion) else SlurmVersion.parse(release)
    return version.key[:2]


@dataclass(frozen=True)
class DataParser:
    """One JSON format ``v0.0.<number>`` and its life in Slurm."""

    number: int
    default_in: str
    """The release whose default it is (CLI ``--json`` and slurmrestd's newest)."""
    deprecated_in: str | None = None
    """The release whose slurmrestd marks every path of it ``deprecated``."""
    removed_in: str | None = None
    """The first release that no longer serves it."""
    parsed: bool = True
    """The adapters read it (every format up to the newest one the chain knows)."""

    @property
    def name(self) -> str:
        """``v0.0.45``."""
        return f"v0.0.{self.number}"

    @property
    def releases(self) -> tuple[str, ...]:
        """The releases that serve it, from :attr:`default_in` to before :attr:`removed_in`."""
        start = _key(self.default_in)
        end = _key(self.removed_in) if self.removed_in else (999, 0)
        return tuple(r for r in RELEASES if start <= _key(r) < end)

    def deprecated_on(self, release: str | SlurmVersion) -> bool:
        """``release`` still serves it but marks it deprecated."""
        key = _key(release)
        return (
            self.deprecated_in is not None
            and _key(self.deprecated_in) <= key
            and (self.removed_in is None or key < _key(self.removed_in))
        )


DATA_PARSERS: tuple[DataParser, ...] = (
    DataParser(36, default_in="20.11", removed_in="23.02"),
    DataParser(37, default_in="21.08", removed_in="23.11"),
    DataParser(38, default_in="22.05", removed_in="24.05"),
    DataParser(39, default_in="23.02", removed_in="24.11"),
    DataParser(40, default_in="23.11", removed_in="25.05"),
    DataParser(41, default_in="24.05", deprecated_in="25.11", removed_in="26.05"),
    DataParser(42, default_in="24.11", deprecated_in="26.05", removed_in="26.11"),
    DataParser(43, default_in="25.05"),
    DataParser(44, default_in="25.11"),
    DataParser(45, default_in="26.05"),
    # 26.11's newest: not read yet (no recording). The REST backend stays on v0.0.45 there.
    DataParser(46, default_in="26.11", parsed=False),
)

#: The ``v0.0.N`` numbers the adapters read (the REST backend uses the newest one offered).
KNOWN_DATA_PARSERS: frozenset[int] = frozenset(p.number for p in DATA_PARSERS if p.parsed)

_BY_NUMBER = {p.number: p for p in DATA_PARSERS}
_NUMBER_RE = re.compile(r"v0\.0\.(\d+)")


def _number(version: int | str) -> int:
    if isinstance(version, int):
        return version
    match = _NUMBER_RE.search(version)
    if match is None:
        raise ValueError(f"not a data_parser version: {version!r}")
    return int(match[1])


def data_parser(version: int | str) -> DataParser | None:
    """The entry of ``45``, ``"v0.0.45"`` or ``"data_parser/v0.0.45"``; ``None`` if unknown.

    Raises:
        ValueError: a string without ``v0.0.N``.
    """
    return _BY_NUMBER.get(_number(version))


def data_parser_note(version: int | str) -> str | None:
    """What Slurm does with a format, in a few words: ``"since Slurm 26.05, removed in 26.11"``
    for v0.0.42, ``"removed in Slurm 25.05"`` for v0.0.40; ``None`` for a current or unknown one.

    Raises:
        ValueError: a string without ``v0.0.N``.
    """
    entry = _BY_NUMBER.get(_number(version))
    if entry is None or (entry.deprecated_in is None and entry.removed_in is None):
        return None
    if entry.deprecated_in is None:
        return f"removed in Slurm {entry.removed_in}"
    removed = f", removed in {entry.removed_in}" if entry.removed_in else ""
    return f"since Slurm {entry.deprecated_in}{removed}"


def served_by(release: str | SlurmVersion) -> list[DataParser]:
    """The formats ``release`` serves (e.g. 26.05: v0.0.42-45), oldest first."""
    key = _key(release)
    return [
        p for p in DATA_PARSERS
        if _key(p.default_in) <= key and (p.removed_in is None or key < _key(p.removed_in))
    ]


def newest_known(offered: Iterable[int | str]) -> int | None:
    """The newest of ``offered`` that the adapters read (what the REST backend uses unpinned)."""
    numbers = [n for n in (_number(v) for v in offered) if n in KNOWN_DATA_PARSERS]
    return max(numbers, default=None)


def deprecated_parsers(
    offered: Iterable[int | str], release: str | SlurmVersion | None = None
) -> dict[int, str]:
    """Of the ``offered`` formats, those ``release`` marks deprecated, each with a sentence saying
    since when, when Slurm removes it and which one slurmtower reads instead.

    ``offered``: numbers or names (``42``, ``"v0.0.42"``, ``"data_parser/v0.0.42"``), e.g. what
    slurmrestd's OpenAPI document lists. ``release`` defaults to the one whose default is the
    newest format offered (v0.0.45 -> 26.05). On 26.05 offering v0.0.42-45::

        {42: "v0.0.42 is deprecated since Slurm 26.05 and removed in 26.11; slurmtower reads v0.0.45"}

    Raises:
        ValueError: a string without ``v0.0.N``.
    """
    numbers = sorted({_number(v) for v in offered})
    if release is None:
        known = [_BY_NUMBER[n] for n in numbers if n in _BY_NUMBER]
        if not known:
            return {}
        release = known[-1].default_in
    newest = newest_known(numbers)
    result: dict[int, str] = {}
    for number in numbers:
        entry = _BY_NUMBER.get(number)
        if entry is None or not entry.deprecated_on(release):
            continue
        text = f"{entry.name} is deprecated since Slurm {entry.deprecated_in}"
        if entry.removed_in:
            text += f" and removed in {entry.removed_in}"
        if newest is not None and newest != number:
            text += f"; slurmtower reads v0.0.{newest}"
        result[number] = text
    return result
