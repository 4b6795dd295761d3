"""The Slurm release a document or command came from."""

from __future__ import annotations

import re
from functools import total_ordering

from pydantic import BaseModel, ConfigDict

__all__ = ["SlurmVersion"]

_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:-([0-9A-Za-z.\-]+))?")


@total_ordering
class SlurmVersion(BaseModel):
    """A Slurm release such as 24.11.7, ordered by (major, minor, micro).

    ``data_parser`` is the JSON format version the document was written with, e.g.
    ``"v0.0.38"`` (22.05's openapi plugin) or ``"v0.0.42"`` (24.11's data_parser), when known.
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    major: int
    minor: int
    micro: int = 0
    release: str = ""
    data_parser: str | None = None

    @classmethod
    def parse(cls, text: str, *, data_parser: str | None = None) -> SlurmVersion:
        """Parse ``"22.05.8"``, ``"slurm 24.11.7"``, ``"slurm-wlm 22.05.8"`` or ``"25.11.0-0rc1"``.

        Raises:
            ValueError: no version number in ``text``.
        """
        match = _VERSION_RE.search(text)
        if match is None:
            raise ValueError(f"no Slurm version in {text!r}")
        major, minor, micro = int(match[1]), int(match[2]), int(match[3] or 0)
        return cls(major=major, minor=minor, micro=micro, release=match[0], data_parser=data_parser)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.micro)

    def __str__(self) -> str:
        return self.release or f"{self.major}.{self.minor:02d}.{self.micro}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SlurmVersion):
            return self.key == other.key
        if isinstance(other, tuple):
            return self.key[: len(other)] == other
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, SlurmVersion):
            return self.key < other.key
        if isinstance(other, tuple):
            return self.key[: len(other)] < other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.key)
