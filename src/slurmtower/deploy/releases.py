"""What ``slurmtower doctor`` knows of Slurm releases: the range slurmtower parses and the
security fixes a release should have. The one table to update when SchedMD announces a fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters import DATA_PARSERS, KNOWN_DATA_PARSERS

__all__ = [
    "ADVISORIES",
    "OLDEST_SUPPORTED",
    "Advisory",
    "ReleaseVerdict",
    "judge_release",
    "newest_parsed",
]

#: The oldest release slurmtower reads (README: "Slurm 22.05 to 26.05").
OLDEST_SUPPORTED = SlurmVersion.parse("22.05")


def newest_parsed() -> SlurmVersion:
    """The newest release slurmtower parses: the one whose default JSON format is the newest
    format the adapters read (26.05 for v0.0.45; docs/slurm-releases.md)."""
    newest = max(KNOWN_DATA_PARSERS)
    entry = next(p for p in DATA_PARSERS if p.number == newest)
    return SlurmVersion.parse(entry.default_in)


@dataclass(frozen=True)
class Advisory:
    """A set of security fixes SchedMD released at once."""

    name: str
    fixed: tuple[str, ...]
    """The first fixed release of each maintained series (``25.05.9``, ``25.11.8``)."""

    def fixed_in(self, version: SlurmVersion) -> SlurmVersion | None:
        """The fixed release of ``version``'s series (None: the series got no fix)."""
        for text in self.fixed:
            fix = SlurmVersion.parse(text)
            if fix.key[:2] == version.key[:2]:
                return fix
        return None


#: Security advisories, newest first: add a line when SchedMD announces fixed releases.
ADVISORIES: tuple[Advisory, ...] = (
    Advisory("the September 2026 security advisories", fixed=("25.05.9", "25.11.8")),
)


@dataclass(frozen=True)
class ReleaseVerdict:
    """``status`` is ``ok``, ``warn`` or ``fail``; ``detail`` says why, ``fix`` what to do."""

    status: str
    detail: str
    fix: str | None = None


def judge_release(version: SlurmVersion) -> ReleaseVerdict:
    """Place ``version`` against :data:`ADVISORIES` and the range slurmtower parses.

    A release of a series an advisory fixed but below its fix fails; a series the advisory
    named no fix for (older, out of SchedMD's support) warns, as does a release past what
    slurmtower parses (its commands are asked for the newest format known, which works until
    Slurm removes it) or below the oldest one supported.
    """
    newest = newest_parsed()
    for advisory in ADVISORIES:
        fix = advisory.fixed_in(version)
        newest_fix = max(SlurmVersion.parse(f) for f in advisory.fixed)
        if fix is not None and version < fix:
            return ReleaseVerdict(
                "fail", f"Slurm {version} is below {fix}, which has the fixes of {advisory.name}",
                f"upgrade Slurm to {fix} or later")
        if fix is None and version < newest_fix:
            fixed = ", ".join(advisory.fixed)
            return ReleaseVerdict(
                "warn", f"Slurm {version}: {advisory.name} name fixes for {fixed} only",
                f"check SchedMD's advisory for {version.major}.{version.minor:02d}; upgrade to a maintained "
                f"release ({fixed} or later)")
    if version.key[:2] > newest.key[:2]:
        return ReleaseVerdict(
            "warn", f"Slurm {version} is newer than what slurmtower parses (up to {newest.major}."
            f"{newest.minor:02d}): it reads the older JSON formats the release still serves",
            "upgrade slurmtower (docs/slurm-releases.md)")
    if version < OLDEST_SUPPORTED:
        return ReleaseVerdict("warn", f"Slurm {version} is older than {OLDEST_SUPPORTED}, the oldest "
                              "slurmtower is tested on", "upgrade Slurm")
    return ReleaseVerdict("ok", f"Slurm {version}: no known security fix missing, within what "
                          f"slurmtower parses ({OLDEST_SUPPORTED}-{newest.major}.{newest.minor:02d})")
