"""What ``slurmtower init`` finds out instead of asking: the Slurm configuration in use
(``$SLURM_CONF``, ``/etc/slurm/slurm.conf``, else ``scontrol show config``) and slurmdbd's
database from ``slurmdbd.conf`` beside it, where this user may read it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmtower.errors import SlurmError
from slurmtower.slurm.cli_backend import CliSlurmClient
from slurmtower.slurm.runner import CommandRunner

__all__ = ["DEFAULT_SLURM_CONF", "AccountingDatabase", "SlurmSite", "discover", "read_conf"]

DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")
_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*(.*?)\s*$")


def read_conf(text: str) -> dict[str, str]:
    """The ``Key=Value`` lines of a Slurm config file, keys lower-cased, comments dropped; the
    last line of a key wins, as in Slurm. Node, partition and other multi-key lines keep only
    their first key (what init reads is never on one)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0]
        match = _LINE.match(line)
        if match is not None:
            out[match[1].lower()] = match[2]
    return out


@dataclass(frozen=True)
class AccountingDatabase:
    """slurmdbd's database, from ``slurmdbd.conf`` (``Storage*``)."""

    host: str
    port: int
    user: str | None
    """slurmdbd's own user (it writes: never the one slurmtower reads with)."""
    name: str

    def url(self, user: str, password: str) -> str:
        """A PyMySQL URL of this database for ``user``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"mysql+pymysql://{user}:{password}@{host}:{self.port}/{self.name}"


@dataclass(frozen=True)
class SlurmSite:
    """What was found, and where."""

    slurm_conf: Path | None
    """The slurm.conf read (None: none readable; the values came from scontrol)."""
    cluster_name: str | None
    slurm_user: str
    auth_socket: str | None
    """The munge socket named by ``AuthInfo=socket=...`` (None: munge's default)."""
    accounting: AccountingDatabase | None
    notes: list[str] = field(default_factory=list)
    """What could not be found, and why (for init's output)."""


def _auth_socket(auth_info: str | None) -> str | None:
    for part in (auth_info or "").split(","):
        key, _, value = part.strip().partition("=")
        if key.lower() == "socket" and value:
            return value
    return None


def _dbd(path: Path, notes: list[str]) -> AccountingDatabase | None:
    try:
        conf = read_conf(path.read_text())
    except FileNotFoundError:
        notes.append(f"no {path}: set accounting.url by hand for /history and the reports")
        return None
    except OSError as exc:
        notes.append(f"cannot read {path} ({exc.strerror}): run init as root or SlurmUser, or set "
                     "accounting.url by hand")
        return None
    if conf.get("storagetype", "accounting_storage/mysql") != "accounting_storage/mysql":
        notes.append(f"{path}: StorageType {conf['storagetype']} is not MySQL/MariaDB: accounting.url left unset")
        return None
    try:
        port = int(conf.get("storageport", "3306"))
    except ValueError:
        port = 3306
    return AccountingDatabase(host=conf.get("storagehost", "localhost"), port=port,
                              user=conf.get("storageuser"), name=conf.get("storageloc", "slurm_acct_db"))


def discover(runner: CommandRunner | None = None, *, environ: Mapping[str, str] | None = None) -> SlurmSite:
    """Find the Slurm configuration and slurmdbd's database.

    ``runner`` (with the environment to use) asks ``scontrol show config`` when no slurm.conf
    can be read (a configless client). Never raises for what is missing: it is in ``notes``.
    """
    env = dict(os.environ if environ is None else environ)
    notes: list[str] = []
    path = Path(env["SLURM_CONF"]) if env.get("SLURM_CONF") else DEFAULT_SLURM_CONF
    conf: dict[str, str] | None = None
    try:
        conf = read_conf(path.read_text())
    except OSError as exc:
        notes.append(f"cannot read {path} ({exc.strerror}): asked scontrol show config")
    if conf is None:
        runner = runner or CommandRunner(timeout=10, env={k: v for k, v in env.items() if k == "SLURM_CONF"})
        try:
            running = CliSlurmClient(runner).config()
        except SlurmError as exc:
            notes.append(f"scontrol show config failed: {exc.message}")
            return SlurmSite(None, None, "slurm", None, None, notes)
        slurm_user = re.sub(r"\(\d+\)$", "", running.get("SlurmUser") or "slurm")
        return SlurmSite(None, running.get("ClusterName"), slurm_user, _auth_socket(running.get("AuthInfo")),
                         None, notes)
    dbd_path = path.with_name("slurmdbd.conf")
    return SlurmSite(
        slurm_conf=path,
        cluster_name=conf.get("clustername"),
        slurm_user=conf.get("slurmuser", "slurm"),
        auth_socket=_auth_socket(conf.get("authinfo")),
        accounting=_dbd(dbd_path, notes),
        notes=notes,
    )
