"""``slurmtower init``'s plan: the files a site installs, computed (:func:`plan_init`), shown
(:meth:`PlannedFile.shown`) or written (:func:`write_plan`) under a root (``/`` or a
packager's staging directory)."""

from __future__ import annotations

import errno
import grp
import os
import secrets
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmtower.deploy.conffile import render_config
from slurmtower.deploy.discover import SlurmSite
from slurmtower.deploy.units import (
    UnitParams,
    api_unit,
    nginx_snippet,
    sensor_unit,
    sysusers_entry,
    tmpfiles_entry,
)
from slurmtower.errors import ConfigError, Conflict, PermissionDenied

__all__ = [
    "DEFAULT_DB_USER",
    "InitPlan",
    "PlannedFile",
    "as_mapping",
    "default_slurmtower",
    "missing_groups",
    "plan_init",
    "write_plan",
]

DEFAULT_DB_USER = "slurmtower_ro"
_MASK = "********"


@dataclass(frozen=True)
class PlannedFile:
    """One file init writes: where (on the target system), what, with which mode and owner."""

    path: Path
    content: str
    mode: int
    group: str | None = None
    """Its group (owner root); applied when the group exists and init runs as root."""
    secret: str | None = None
    """A secret in :attr:`content`, masked when shown."""
    keep: bool = False
    """Never replaced, even with ``--force`` (a key the running sensor and triggers use)."""

    def shown(self) -> str:
        """The content with its secret masked (what ``--dry-run`` prints)."""
        return self.content.replace(self.secret, _MASK) if self.secret else self.content


@dataclass
class InitPlan:
    files: list[PlannedFile]
    notes: list[str] = field(default_factory=list)
    """What init could not find out, and what to do next."""


def default_slurmtower() -> Path:
    """The ``slurmtower`` script of this installation (beside this Python), for the units."""
    beside = Path(sys.executable).parent / "slurmtower"
    return beside if beside.exists() else Path(shutil.which("slurmtower") or beside)


def _grant_sql(user: str, password: str, site: SlurmSite) -> str:
    assert site.accounting is not None
    db = site.accounting
    local = db.host in ("localhost", "127.0.0.1", "::1")
    hosts = ["localhost", "127.0.0.1"] if local else ["%"]
    lines = [
        "-- slurmtower's read-only user of slurmdbd's database (run as MariaDB's root, e.g.",
        "-- `mariadb -uroot < accounting-grant.sql`). SELECT only: `slurmtower doctor` checks it.",
    ]
    if not local:
        lines.append("-- Replace '%' with the API host's address as the database server sees it.")
    for host in hosts:
        lines += [f"CREATE USER IF NOT EXISTS '{user}'@'{host}' IDENTIFIED BY '{password}';",
                  f"GRANT SELECT ON `{db.name}`.* TO '{user}'@'{host}';"]
    return "\n".join(lines) + "\n"


def plan_init(site: SlurmSite, *, params: UnitParams | None = None, db_user: str = DEFAULT_DB_USER,
              etc: Path = Path("/etc/slurmtower")) -> InitPlan:
    """The files for this site: ``slurmtower.toml`` (the API's) and ``sensor.toml``, the
    sensor's HMAC key, the accounting grant, the two units, sysusers.d and tmpfiles.d entries,
    the nginx snippet. Secrets are new random ones."""
    p = params or UnitParams(slurmtower=default_slurmtower(), config=etc / "slurmtower.toml",
                             sensor_config=etc / "sensor.toml", slurm_user=site.slurm_user)
    notes = list(site.notes)
    common: dict[str, Any] = {}
    if site.cluster_name:
        common["cluster_name"] = site.cluster_name
    if site.slurm_conf is not None:
        common["slurm.slurm_conf"] = site.slurm_conf
    common["slurm.slurm_user"] = site.slurm_user
    api: dict[str, Any] = {**common, "state_dir": p.state_dir, "api.host": "127.0.0.1", "api.port": p.port,
                           "api.trusted_proxies": ["127.0.0.1"], "events.sensor_enabled": False}
    key_file = etc / "sensor.key"
    sensor: dict[str, Any] = {**common, "state_dir": p.sensor_state_dir, "events.key_file": key_file}
    key = secrets.token_hex(32)
    files: list[PlannedFile] = []
    password: str | None = None
    if site.accounting is not None:
        password = secrets.token_urlsafe(24)
        api["accounting.url"] = site.accounting.url(db_user, password)
        files.append(PlannedFile(etc / "accounting-grant.sql", _grant_sql(db_user, password, site), 0o600,
                                 secret=password))
        notes.append(f"create the read-only database user: mariadb -uroot < {etc / 'accounting-grant.sql'}")
    files[:0] = [
        PlannedFile(etc / "slurmtower.toml", render_config(api, header=(
            "slurmtower's configuration (the API: slurmtower-api.service), written by `slurmtower init`. "
            "Every key is here with its description; the commented ones are at their defaults. "
            "`slurmtower config show` prints the effective values and their sources.")),
            0o640, group=p.service_user, secret=password),
        PlannedFile(etc / "sensor.toml", render_config(sensor, header=(
            "The node sensor's configuration (slurmtower-sensor.service, as SlurmUser), written by "
            "`slurmtower init`. For the API to show the sensor's events, give both files one "
            "store_url (PostgreSQL): the SQLite stores under the two state directories are apart.")),
            0o640, group=site.slurm_user),
        PlannedFile(key_file, f"{key}\n", 0o640, group=site.slurm_user, secret=key, keep=True),
        PlannedFile(Path("/etc/systemd/system/slurmtower-api.service"), api_unit(p), 0o644),
        PlannedFile(Path("/etc/systemd/system/slurmtower-sensor.service"), sensor_unit(p), 0o644),
        PlannedFile(Path("/etc/sysusers.d/slurmtower.conf"), sysusers_entry(p), 0o644),
        PlannedFile(Path("/etc/tmpfiles.d/slurmtower.conf"), tmpfiles_entry(p), 0o644),
        PlannedFile(etc / "nginx-slurmtower.conf", nginx_snippet(p), 0o644),
    ]
    notes += [
        "systemd-sysusers && systemd-tmpfiles --create && systemctl daemon-reload",
        f"sacctmgr -i add user {p.service_user} account=root adminlevel=Operator   (node actions)",
        "systemctl enable --now slurmtower-sensor slurmtower-api; then `slurmtower doctor` as "
        f"{p.service_user}",
    ]
    return InitPlan(files, notes)


def _target(root: Path, path: Path) -> Path:
    return root / path.relative_to("/")


def write_plan(plan: InitPlan, *, root: Path = Path("/"), force: bool = False) -> list[tuple[Path, str]]:
    """Write the plan's files under ``root``: nothing unless every file may be written.

    Returns ``(path, what)`` for each file: ``written``, ``replaced`` or ``kept`` (a key that
    exists). Raises :class:`Conflict` naming the files that exist when ``force`` is false.
    """
    targets = [(f, _target(root, f.path)) for f in plan.files]
    taken = [str(t) for f, t in targets if t.exists() and not f.keep]
    if taken and not force:
        raise Conflict(f"{', '.join(taken)} already exist{'s' if len(taken) == 1 else ''}: "
                       "pass --force to overwrite", paths=taken)
    done: list[tuple[Path, str]] = []
    for f, target in targets:
        if target.exists() and f.keep:
            done.append((target, "kept"))
            continue
        existed = target.exists()
        try:
            _write(f, target)
        except OSError as exc:
            cls = PermissionDenied if exc.errno in (errno.EACCES, errno.EPERM) else ConfigError
            raise cls(f"cannot write {target}: {exc.strerror} (run init as root, or give --root DIR)"
                      + (f"; written before it: {', '.join(str(p) for p, _ in done)}" if done else "")) from exc
        done.append((target, "replaced" if existed else "written"))
    return done


def _write(f: PlannedFile, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.init-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, f.mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(f.content)
    os.chmod(tmp, f.mode)
    _chgrp(tmp, f.group)
    os.replace(tmp, target)


def _chgrp(path: Path, group: str | None) -> None:
    if group is None or os.geteuid() != 0:
        return
    try:
        grp.getgrnam(group)
    except KeyError:
        return  # systemd-sysusers makes it: the note says to chgrp afterwards
    shutil.chown(path, group=group)


def missing_groups(plan: InitPlan) -> list[str]:
    """The groups the plan's files name that do not exist (yet) on this machine."""
    out: list[str] = []
    for f in plan.files:
        if f.group and f.group not in out:
            try:
                grp.getgrnam(f.group)
            except KeyError:
                out.append(f.group)
    return out


def as_mapping(plan: InitPlan) -> Mapping[str, Any]:
    """The plan as JSON-ready data, secrets masked."""
    return {"files": [{"path": str(f.path), "mode": f"{f.mode:04o}", "group": f.group, "keep": f.keep}
                      for f in plan.files], "notes": plan.notes}
