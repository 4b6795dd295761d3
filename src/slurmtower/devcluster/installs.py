"""Slurm installs besides Debian's packages, found on this machine: for running the devcluster
(and the test suites that follow the release) on the release a site is about to deploy."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_DIR", "SEARCH_GLOB", "SlurmInstall", "find_slurm_installs", "release_cluster_layout"]

#: Where the default local cluster keeps its config and state.
DEFAULT_DIR = Path("/var/lib/slurmtower/devcluster")

#: Where installs are looked for besides ``$SLURMTOWER_TEST_SLURM_PREFIXES``.
SEARCH_GLOB = "/opt/slurm-*"
#: The variable naming more prefixes (``:`` or ``,`` separated).
PREFIXES_VAR = "SLURMTOWER_TEST_SLURM_PREFIXES"


@dataclass(frozen=True)
class SlurmInstall:
    prefix: Path
    version: str
    """What ``slurmctld -V`` prints after ``slurm``, e.g. ``26.05.3``."""

    @property
    def tag(self) -> str:
        """``26.05.3`` -> ``2605``: names this release's cluster, dir and database."""
        major, minor = [*self.version.split("."), "0"][:2]
        return f"{int(major):02d}{int(minor):02d}"


def _version(prefix: Path) -> str | None:
    # slurmctld -V answers without a slurm.conf; 26.05's sinfo -V reads the config first.
    slurmctld = prefix / "sbin" / "slurmctld"
    if not slurmctld.exists() or not (prefix / "bin" / "sinfo").exists():
        return None
    try:
        out = subprocess.run([str(slurmctld), "-V"], capture_output=True, text=True, timeout=20,  # noqa: S603
                             check=False, env={"PATH": "/usr/bin:/bin"}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"slurm (\d+\.\d+\.\d+\S*)", out.strip())
    return match[1] if match else None


def find_slurm_installs(environ: dict[str, str] | None = None) -> list[SlurmInstall]:
    """Prefixes named in ``$SLURMTOWER_TEST_SLURM_PREFIXES`` and ``/opt/slurm-*`` installs that hold
    slurmctld (answering ``-V``) and sinfo, oldest release first; ``/usr`` (Debian's) is left out."""
    env = os.environ if environ is None else environ
    named = [Path(p) for p in re.split(r"[:,]", env.get(PREFIXES_VAR, "")) if p.strip()]
    candidates = [*named, *sorted(Path("/").glob(SEARCH_GLOB.lstrip("/")))]
    found: dict[Path, SlurmInstall] = {}
    for prefix in candidates:
        prefix = prefix.resolve()
        if prefix in found or prefix == Path("/usr"):
            continue
        version = _version(prefix)
        if version is not None:
            found[prefix] = SlurmInstall(prefix, version)
    return sorted(found.values(), key=lambda i: [int(x) for x in re.findall(r"\d+", i.version)[:3]])


def release_cluster_layout(install: SlurmInstall) -> tuple[Path, str, int]:
    """Dir, cluster name and port base of the devcluster of one install, clear of the default
    cluster (26800-26904), the scale lab (14000-15100) and each other (16000-19999): one slot
    of 200 ports per release series (two a year, ten years before they wrap), so installs of
    different series never share a port (a hash of the prefix put 23.11 and 25.11 on one)."""
    major, minor = [int(x) for x in [*install.version.split("."), "0"][:2]]
    slot = ((major - 20) * 2 + (1 if minor > 6 else 0)) % 20
    return (Path(f"/var/lib/slurmtower/release-{install.tag}"), f"r{install.tag}", 16000 + 200 * slot)
