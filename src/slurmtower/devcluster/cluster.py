"""A real local Slurm cluster for tests and demos: Debian's Slurm 22.05 on loopback, or a
Slurm installed under a prefix (``slurm_prefix``, e.g. ``/opt/slurm-26.05``) beside it.

munged -> MariaDB -> slurmdbd -> slurmctld -> one slurmd per node (``slurmd -N nX``, each on
its own port) -> accounts -> slurmrestd (JWT). Everything it writes lives under its own
directory (default ``/var/lib/slurmtower/devcluster``); it never touches ``/etc/slurm``.
It records which daemons it started, and :meth:`DevCluster.down` stops only those.

On a prefix install (``--slurm-prefix``) the daemons and commands are the prefix's (``sbin/``,
``bin/``); only munge and MariaDB come from Debian. What newer releases need on one host is
written in: ``cgroup.conf`` with ``CgroupPlugin=disabled`` (24.05+; 23.11's ``autodetect``),
no ``NodeHostname`` (24.11+ refuses four nodes on one host name), no ``SwitchType`` (gone in
24.11), and the job credential signed without munge (``cred/none``) where the build has it,
since munge rejects a credential replayed to the second slurmd of one host unless Slurm was
built with ``--enable-multiple-slurmd``.

The scale lab is the same cluster with ``nodes=N`` (4-5,000) node definitions: n1-n4 keep
their slurmd and run jobs, n5-nN have none (Slurm shows them ``down*``, "Not responding",
once SlurmdTimeout has passed), over overlapping site-like partitions; slurmctld is set for
a queue of 100,000+ jobs. The count is kept in ``etc/devcluster.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurmtower.devcluster.installs import DEFAULT_DIR
from slurmtower.errors import ConfigError, SlurmError, SlurmtowerError
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.runner import CommandRunner

__all__ = ["DEFAULT_DIR", "DevCluster", "DevClusterError", "RollUp", "SampleJobs"]


PACKAGES = [
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmdbd",
    "slurm-wlm-mysql-plugin",
    "slurm-wlm-basic-plugins",
    "munge",
    "slurmrestd",
    "slurm-wlm-jwt-plugin",
]
NODES = ["n1", "n2", "n3", "n4"]  # the nodes with a slurmd, whatever the node count
ACCOUNTS = {"physics": ["alice", "bob", "root"], "chemistry": ["bob"]}
#: A QOS with limits the accounts above may ask for (``--qos=capped``), beside ``normal`` (their
#: default): with the limits enforced (AccountingStorageEnforce), a second running job of one
#: user waits as ``QOSMaxJobsPerUserLimit``, a job asking more than its wall limit as
#: ``QOSMaxWallDurationPerJobLimit``.
QOS = {"capped": ("MaxJobsPerUser=1", "MaxWall=30", "Description=devcluster: one running job per user")}
USERS = ["alice", "bob"]
# the scale lab's extra principals (``nodes > 4``): more users and accounts to filter on
LAB_ACCOUNTS = {"biology": ["carol", "dave"], "astro": ["dave", "alice"]}
LAB_USERS = ["carol", "dave"]
MIN_NODES = len(NODES)
MAX_NODES = 10_000
# Every node n<i> listens (or, without a slurmd, would) on port_base + 100 + i.
NODE_PORT_OFFSET = 100
SYSTEM_MUNGE_PID = Path("/run/munge/munged.pid")


class DevClusterError(SlurmtowerError):
    exit_code = 1
    title = "devcluster error"


@dataclass(frozen=True)
class SampleJobs:
    """Job ids of the sample jobs, by the state each one ends in."""

    completed: int
    failed: int
    cancelled: int
    timeout: int
    pending: int
    running: int

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RollUp:
    """What :meth:`DevCluster.roll_up` rolled: the hours ``[start, end)`` (UTC)."""

    start: datetime
    end: datetime
    hours: int
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "hours": self.hours,
                "seconds": round(self.seconds, 3)}


def _wait(what: str, check: Callable[[], bool], timeout: float, step: float = 0.1) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, SlurmError):
            pass
        if time.monotonic() > end:
            raise DevClusterError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.3)
        return s.connect_ex((host, port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours is not alive
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


def _read_pid(path: Path) -> int | None:
    """The live daemon a pid file names: ``slurmd-n1.pid`` names a ``slurmd -N n1``,
    ``slurmctld.pid`` a ``slurmctld`` and so on. A pid whose process is another program is
    stale: pids are reused (32,768 of them wrap within minutes under a test run), and a
    slurmd killed by ``fail_node`` must not look alive in a stranger's pid."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _pid_alive(pid) and _runs(pid, path.name) else None


def _runs(pid: int, pidfile: str) -> bool:
    """Whether process ``pid`` is the daemon ``pidfile`` (``<program>[-<node>].pid``) is for."""
    program, _, node = pidfile.removesuffix(".pid").partition("-")
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except PermissionError:
        return True  # not ours to read: kill(0) said it lives
    except OSError:
        return False  # gone meanwhile
    name = os.path.basename(argv[0].decode(errors="replace")).split(":")[0] if argv and argv[0] else ""
    return name == program and (not node or node.encode() in argv)


#: slurmtower.toml: ``devcluster up`` rewrites what is above this line and keeps what is below.
USER_MARK = ("# -- your own settings below this line are kept by `devcluster up` (tokens: [[auth.tokens]];\n"
             "# -- a generated key above is changed with SLURMTOWER_* variables instead) --\n")


@dataclass
class DevCluster:
    """The local cluster rooted at ``root``; ``port_base`` shifts every port."""

    root: Path = field(default_factory=lambda: Path(os.environ.get("SLURMTOWER_DEVCLUSTER_DIR", DEFAULT_DIR)))
    # "" / 0: as this dir was last brought up with (etc/devcluster.json), else
    # $SLURMTOWER_DEVCLUSTER_NAME / _PORT_BASE, else tower / 26800
    cluster_name: str = ""
    port_base: int = 0
    runner: CommandRunner = field(default_factory=lambda: CommandRunner(timeout=120))
    log: Callable[[str], None] = print
    nodes: int | None = None
    """Node definitions (4-5,000); ``None``: the count this cluster's dir was brought up with, else 4."""
    slurm_prefix: Path | None = None
    """Where the Slurm it runs is installed (``<prefix>/sbin/slurmctld`` ...); ``None``: as this
    dir was brought up with, else Debian's packages (``/usr``)."""

    def __post_init__(self) -> None:
        # A dir's own record first: a shell that exported another cluster's env must not
        # bring this one up under that cluster's name and ports.
        saved = self._saved()
        if not self.cluster_name:
            name = saved.get("cluster_name")
            self.cluster_name = (name if isinstance(name, str) and name
                                 else os.environ.get("SLURMTOWER_DEVCLUSTER_NAME", "tower"))
        if not self.port_base:
            port = saved.get("port_base")
            self.port_base = (port if isinstance(port, int) and port > 0
                              else int(os.environ.get("SLURMTOWER_DEVCLUSTER_PORT_BASE", "26800")))
        if self.nodes is not None:
            self._check_node_count(self.nodes)
        if self.slurm_prefix is None:
            prefix = saved.get("slurm_prefix")
            self.slurm_prefix = Path(prefix) if isinstance(prefix, str) and prefix else None
        if self.slurm_prefix is not None:
            self.slurm_prefix = Path(self.slurm_prefix)
            if self.slurm_prefix == Path("/usr"):
                self.slurm_prefix = None

    # -- which Slurm --------------------------------------------------------------------
    @property
    def debian_slurm(self) -> bool:
        """Debian's packaged Slurm (installed by ``up``), not a prefix install."""
        return self.slurm_prefix is None

    def sbin(self, name: str) -> str:
        return str((self.slurm_prefix or Path("/usr")) / "sbin" / name)

    def bin_dir(self) -> Path:
        return (self.slurm_prefix or Path("/usr")) / "bin"

    def _check_prefix(self) -> None:
        if self.slurm_prefix is None:
            return
        needed = [Path(self.sbin(d)) for d in ("slurmctld", "slurmd", "slurmdbd", "slurmrestd")]
        needed += [self.bin_dir() / c for c in ("scontrol", "sinfo", "squeue", "sacct", "sacctmgr", "strigger")]
        missing = [str(p) for p in needed if not p.exists()]
        if missing:
            raise DevClusterError(f"--slurm-prefix {self.slurm_prefix} is not a Slurm install: "
                                  f"no {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")

    def _release(self) -> tuple[int, int]:
        """The prefix's Slurm release as (year, month), e.g. (26, 5); Debian's: (22, 5)."""
        if self.slurm_prefix is None:
            return (22, 5)
        out = subprocess.run([self.sbin("slurmctld"), "-V"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
        found = re.match(r"slurm (\d+)\.(\d+)", out.strip())
        if found is None:
            raise DevClusterError(f"{self.sbin('slurmctld')} -V printed no release: {out.strip()[:80]!r}")
        return int(found[1]), int(found[2])

    def _plugin(self, name: str) -> bool:
        """The prefix's Slurm has plugin ``name`` (e.g. ``cred_none``)."""
        assert self.slurm_prefix is not None
        return any((self.slurm_prefix / lib / "slurm" / f"{name}.so").exists() for lib in ("lib", "lib64"))

    def _check_ports_free(self) -> None:
        """Before starting anything: our controller's and slurmdbd's ports are ours or free. A
        --dir given without its own name and port base would otherwise start daemons on
        another cluster's ports and wait on that cluster's answers."""
        for what, port, pidfile in (("slurmctld", self.ctld_port, "slurmctld.pid"),
                                    ("slurmdbd", self.dbd_port, "slurmdbd.pid")):
            if _read_pid(self.run_dir / pidfile) is None and _port_open(port):
                raise DevClusterError(
                    f"port {port} ({what} of cluster {self.cluster_name} in {self.root}) is taken, by "
                    f"another cluster? Give this --dir its own SLURMTOWER_DEVCLUSTER_NAME and _PORT_BASE")

    def _check_node_count(self, count: int) -> None:
        if not MIN_NODES <= count <= MAX_NODES:
            raise DevClusterError(f"--nodes must be between {MIN_NODES} and {MAX_NODES}, not {count}")
        last = self.port_base + NODE_PORT_OFFSET + count
        if last > 65535:
            raise DevClusterError(f"port base {self.port_base} leaves no room for {count} nodes "
                                  f"(their ports would end at {last} > 65535)")

    # -- layout -----------------------------------------------------------------------
    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def tower_conf(self) -> Path:
        return self.etc / "slurmtower.toml"

    @property
    def jwt_key(self) -> Path:
        return self.etc / "jwt_hs256.key"

    @property
    def ctld_port(self) -> int:
        return self.port_base + 17

    @property
    def dbd_port(self) -> int:
        return self.port_base + 19

    @property
    def rest_port(self) -> int:
        return self.port_base + 20

    @property
    def api_port(self) -> int:
        return self.port_base + 42

    @property
    def own_mariadb_port(self) -> int:
        return self.port_base + 6

    def node_port(self, node: str) -> int:
        return self.port_base + NODE_PORT_OFFSET + int(node.lstrip("n"))

    @property
    def lab_file(self) -> Path:
        return self.etc / "devcluster.json"

    @property
    def node_count(self) -> int:
        """The number of node definitions: as asked, else as this dir was last brought up, else 4."""
        if self.nodes is not None:
            return self.nodes
        return self._saved_node_count() or MIN_NODES

    def _saved(self) -> dict[str, object]:
        """What ``up`` last wrote to etc/devcluster.json: nodes, cluster_name, port_base.

        A dir brought up before that file named them is read from its slurm.conf instead.
        """
        try:
            data = json.loads(self.lab_file.read_text())
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        if "cluster_name" not in data or "port_base" not in data:
            try:
                conf = dict(line.split("=", 1) for line in self.slurm_conf.read_text().splitlines()
                            if line[:1].isalpha() and "=" in line and " " not in line.split("=", 1)[0])
                data.setdefault("cluster_name", conf["ClusterName"].strip())
                data.setdefault("port_base", int(conf["SlurmctldPort"]) - 17)
            except (OSError, KeyError, ValueError):
                pass
        return data

    def _saved_node_count(self) -> int | None:
        count = self._saved().get("nodes")
        return count if isinstance(count, int) else None

    @property
    def all_nodes(self) -> str:
        """Every node definition as one folded hostlist, e.g. ``n[1-5000]``."""
        return f"n[1-{self.node_count}]"

    @property
    def is_lab(self) -> bool:
        return self.node_count > MIN_NODES

    def _accounts(self) -> dict[str, list[str]]:
        return {**ACCOUNTS, **LAB_ACCOUNTS} if self.is_lab else dict(ACCOUNTS)

    def _users(self) -> list[str]:
        return [*USERS, *LAB_USERS] if self.is_lab else list(USERS)

    @property
    def db_name(self) -> str:
        """The accounting database. A prefix install's carries its release: another release's
        slurmdbd must never find (and upgrade, or refuse) this one's schema."""
        if self.slurm_prefix is None:
            return f"st_acct_{self.cluster_name}"
        tag = "".join(ch for ch in self.slurm_prefix.name if ch.isalnum()).lower() or "prefix"
        return f"st_acct_{self.cluster_name}_{tag}"[:64]

    @property
    def state_file(self) -> Path:
        return self.root / "started.json"

    def _state(self) -> dict[str, object]:
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_state(self, **kv: object) -> None:
        state = self._state()
        state.update(kv)
        self.state_file.write_text(json.dumps(state, indent=1))

    def slurm_env(self) -> dict[str, str]:
        """A clean environment for the daemons (it leaks into trigger programs)."""
        return {
            "PATH": f"{self._path_head()}/usr/sbin:/usr/bin:/sbin:/bin",
            "SLURM_CONF": str(self.slurm_conf),
            "LANG": "C.UTF-8",
        }

    def _path_head(self) -> str:
        """PATH entries before the system's: the prefix's commands (a job's srun must be the
        controller's release: 22.05's against 26.05 fails "Incompatible versions")."""
        if self.slurm_prefix is None:
            return ""
        return f"{self.slurm_prefix}/bin:{self.slurm_prefix}/sbin:"

    def _cmd(self) -> CommandRunner:
        # Debian's cluster runs Debian's commands even where another release's are first on
        # PATH (a release suite's session): 26.05's scontrol cannot ping a 22.05 slurmctld.
        head = self._path_head() if self.slurm_prefix is not None else "/usr/bin:/usr/sbin:"
        env = {"SLURM_CONF": str(self.slurm_conf), "PATH": f"{head}{os.environ.get('PATH', '/usr/bin:/bin')}"}
        return CommandRunner(timeout=self.runner.timeout, env=env)

    # -- public -----------------------------------------------------------------------
    def env_exports(self) -> str:
        """Shell exports that point Slurm's commands and slurmtower at this cluster."""
        path = f"export PATH={self._path_head()}$PATH\n" if self.slurm_prefix is not None else ""
        return (
            path +
            f"export SLURM_CONF={self.slurm_conf}\n"
            f"export SLURMTOWER_CONFIG={self.tower_conf}\n"
            f"export SLURMTOWER_DEVCLUSTER_DIR={self.root}\n"
            f"export SLURMTOWER_DEVCLUSTER_NAME={self.cluster_name}\n"
            f"export SLURMTOWER_DEVCLUSTER_PORT_BASE={self.port_base}\n"
            f"export SLURMTOWER_URL=http://127.0.0.1:{self.api_port}\n"
            f"export SLURMTOWER_TOKEN={self.demo_tokens()['operator'] if self.etc.exists() else ''}\n"
        )

    def command_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) pointed at this cluster, for subprocesses.

        The same variables as :meth:`env_exports`, so several clusters can be used side by side
        from one process without touching ``os.environ``.
        """
        env = dict(os.environ if base is None else base)
        for line in self.env_exports().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.replace("$PATH", env.get("PATH", "/usr/bin:/bin"))
        return env

    def cancel_jobs(self) -> None:
        """Cancel every job of every user of this cluster (``scancel`` by user: no job list to pass)."""
        for user in ["root", *self._users()]:
            self._cmd().run(["scancel", "-u", user], timeout=300, check=False)

    def reset_node_states(self) -> None:
        """Restart slurmctld without its saved node states: every node as slurm.conf defines it.

        In 22.05 a node that never registered and is then drained and resumed (or undrained)
        turns IDLE, and ~20 s later DOWN "Not responding": the scale lab's ``unknown*`` nodes
        come back only this way. Jobs are kept.
        """
        self._stop([("slurmctld", _read_pid(self.run_dir / "slurmctld.pid"))])
        self.forget_node_states()
        self._start_slurmctld()
        self._wait_idle()

    def forget_node_states(self) -> None:
        """Remove slurmctld's saved node states (slurmctld stopped), so that its next start
        takes every node as slurm.conf defines it. The ``clustername`` file goes too: 26.05's
        slurmctld refuses to start without a node state file where that file says the
        cluster ran before ("fatal: No node state file ... to recover"; 23.11's only logs
        it); it writes the file again from slurmdbd's cluster id."""
        state = self.root / "state"
        for saved in [*state.glob("node_state*"), *state.glob("clustername")]:
            saved.unlink()

    def is_up(self) -> bool:
        if _read_pid(self.run_dir / "slurmctld.pid") is None:
            return False
        try:
            out = self._cmd().run(["scontrol", "ping"], timeout=10).stdout
        except SlurmError:
            return False
        return "UP" in out

    def _accounting_alive(self) -> bool:
        """slurmdbd runs and its MariaDB answers (either may die while slurmctld stays up)."""
        if _read_pid(self.run_dir / "slurmdbd.pid") is None:
            return False
        if self._state().get("own_mariadb"):
            return _read_pid(self.run_dir / "mariadbd.pid") is not None and _port_open(self.own_mariadb_port)
        return self._system_mariadb_alive()

    def up(self, *, fresh: bool = False, own_mariadb: bool = False) -> float:
        """Bring the cluster up (idempotent). Returns the seconds it took."""
        t0 = time.monotonic()
        if os.geteuid() != 0:
            raise DevClusterError("devcluster up must run as root (it starts Slurm's daemons)")
        if not fresh and self._state().get("own_mariadb"):
            own_mariadb = True  # a cluster started on its own MariaDB keeps it (and stops it at down)
        self._check_prefix()
        self.install_packages(own_mariadb=own_mariadb)
        self.upgrade_store()
        saved = self._saved_node_count() or MIN_NODES
        if self.node_count != saved and self.is_up():
            # Node definitions change only with a restart of slurmctld (and its slurmds).
            self.log(f"devcluster {self.cluster_name}: {saved} -> {self.node_count} nodes, restarting it")
            self.down()
        if fresh:
            if self.is_up():
                raise DevClusterError("the cluster is running: `slurmtower devcluster down` first")
            self._wipe()
        elif self.is_up() and all(
            _read_pid(self.run_dir / f"slurmd-{n}.pid") for n in NODES
        ) and self._rest_alive() and self._accounting_alive():
            if self._conf_current():
                self.log(f"devcluster {self.cluster_name} already up ({time.monotonic() - t0:.2f} s)")
                return time.monotonic() - t0
            # Written by an older slurmtower (another scheduling or enforcement setting): the
            # daemons read slurm.conf at start, so they start again on the new one.
            self.log(f"devcluster {self.cluster_name}: slurm.conf changed, restarting it")
            self.down()
        self._check_ports_free()
        self._prepare(own_mariadb=own_mariadb)
        self._start_munge()
        self._start_mariadb(own=own_mariadb)
        self._start_slurmdbd()
        self._start_slurmctld()
        self._start_slurmds()
        self._ensure_accounts()
        self._start_slurmrestd()
        self._wait_idle()
        took = time.monotonic() - t0
        self.log(f"devcluster {self.cluster_name} up in {took:.1f} s ({self.node_count} nodes): {self.slurm_conf}")
        return took

    def upgrade_store(self) -> None:
        """Bring the devcluster's own slurmtower store (SQLite under its dir) to this
        slurmtower's schema: a store made by an older checkout would refuse to open. Another
        store (``store_url`` set by the user in slurmtower.toml) is left to ``slurmtower db upgrade``."""
        if not self.tower_conf.exists():
            return
        from slurmtower.settings import load_settings  # deferred: the store's tools, only when the demo store is made
        from slurmtower.store.engine import (  # deferred: the store's tools, only when the demo store is made
            make_store_engine,  # deferred: the store's tools, only when the demo store is made
        )
        from slurmtower.store.migrate import upgrade  # deferred: alembic, only when the demo store is made

        url = load_settings(self.tower_conf, environ={}).effective_store_url()
        db = self.root / "slurmtower" / "slurmtower.db"
        if url != f"sqlite:///{db}" or not db.exists():
            return
        engine = make_store_engine(url)
        try:
            before, after = upgrade(engine)
        finally:
            engine.dispose()
        if before != after:
            self.log(f"devcluster {self.cluster_name}: its slurmtower store upgraded from {before.revision} "
                     f"to {after.revision}")

    def down(self) -> None:
        """Stop the daemons this devcluster started, newest first."""
        state = self._state()
        pids: list[tuple[str, int | None]] = [("slurmrestd", self._rest_pid())]
        pids += [(f"slurmd {n}", _read_pid(self.run_dir / f"slurmd-{n}.pid")) for n in NODES]
        self._stop(pids)
        self._stop([("slurmctld", _read_pid(self.run_dir / "slurmctld.pid"))])
        self._stop([("slurmdbd", _read_pid(self.run_dir / "slurmdbd.pid"))])
        if state.get("own_mariadb"):
            self._stop([("mariadbd", _read_pid(self.run_dir / "mariadbd.pid"))])
        if state.get("started_munge"):
            self._stop([("munged", _read_pid(SYSTEM_MUNGE_PID))])
            self._save_state(started_munge=False)
        self.log(f"devcluster {self.cluster_name} stopped")

    def status(self) -> dict[str, object]:
        daemons: dict[str, int | None] = {
            "slurmctld": _read_pid(self.run_dir / "slurmctld.pid"),
            "slurmdbd": _read_pid(self.run_dir / "slurmdbd.pid"),
            "slurmrestd": self._rest_pid(),
            "munged": _read_pid(SYSTEM_MUNGE_PID),
        }
        for n in NODES:
            daemons[f"slurmd-{n}"] = _read_pid(self.run_dir / f"slurmd-{n}.pid")
        nodes: dict[str, str] = {}
        if daemons["slurmctld"]:
            try:
                # grouped by state (sinfo -N takes 4 s at 5,000 nodes, this 30 ms)
                out = self._cmd().run(["sinfo", "-h", "-o", "%N %T"], timeout=30).stdout
                for line in out.splitlines():
                    if line.strip():
                        hostlist, state = line.split(None, 1)
                        nodes.update(dict.fromkeys(NodeSet(hostlist), state))
                nodes = dict(sorted(nodes.items(), key=lambda kv: int(kv[0].lstrip("n"))))
            except SlurmError as exc:
                nodes = {"error": exc.message}
        return {
            "dir": str(self.root),
            "cluster": self.cluster_name,
            "up": self.is_up(),
            "node_count": self.node_count,
            "daemons": daemons,
            "nodes": nodes,
            "slurmrestd": f"http://127.0.0.1:{self.rest_port}",
            "slurm_prefix": str(self.slurm_prefix) if self.slurm_prefix else None,
        }

    def fail_node(self, node: str) -> None:
        """Kill a node's slurmd with SIGKILL: slurmctld marks it DOWN within ~12 s."""
        self._check_node(node)
        pid = _read_pid(self.run_dir / f"slurmd-{node}.pid")
        if pid is None:
            raise DevClusterError(f"slurmd of {node} is not running")
        os.kill(pid, signal.SIGKILL)
        _wait(f"slurmd {node} to die", lambda: not _pid_alive(pid), 5)

    def restore_node(self, node: str) -> None:
        """Start a node's slurmd again; ReturnToService=1 brings it back to service."""
        self._check_node(node)
        if _read_pid(self.run_dir / f"slurmd-{node}.pid") is None:
            (self.run_dir / f"slurmd-{node}.pid").unlink(missing_ok=True)
            self._spawn_daemon([self.sbin("slurmd"), "-N", node])
            _wait(f"slurmd {node}", lambda: _port_open(self.node_port(node)), 10)

    def submit_sample_jobs(self) -> SampleJobs:
        """Submit jobs that end COMPLETED, FAILED, CANCELLED and TIMEOUT, one PENDING, one RUNNING.

        The TIMEOUT job needs 60-90 s to end (Slurm checks limits every 30 s); the
        CANCELLED one is cancelled once it runs.
        """

        def sbatch(user: str, *args: str) -> int:
            argv = ["sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args]  # noqa: S108
            out = self._cmd().run(argv, as_user=None if user == "root" else user, timeout=30).stdout
            return int(out.strip().split(";")[0])

        jobs = SampleJobs(
            timeout=sbatch("alice", "-J", "sample-timeout", "-A", "physics", "-p", "short", "-t", "1",
                           "--wrap", "sleep 600"),
            completed=sbatch("alice", "-J", "sample-ok", "-A", "physics", "-p", "batch", "-t", "5",
                             "--wrap", "sleep 1"),
            failed=sbatch("bob", "-J", "sample-fail", "-A", "chemistry", "-p", "debug", "-t", "5",
                          "--wrap", "echo bad >&2; exit 3"),
            cancelled=sbatch("bob", "-J", "sample-cancel", "-A", "physics", "-p", "debug", "-t", "5",
                             "--wrap", "sleep 600"),
            pending=sbatch("root", "-J", "sample-held", "-A", "physics", "-p", "debug", "-t", "5",
                           "--hold", "--wrap", "sleep 1"),
            running=sbatch("alice", "-J", "sample-run", "-A", "physics", "-p", "debug", "-t", "60",
                           "--wrap", "sleep 3000"),
        )

        def running(job: int) -> bool:
            out = self._cmd().run(["squeue", "-h", "-j", str(job), "-o", "%T"], timeout=10).stdout
            return out.strip() == "RUNNING"

        _wait(f"job {jobs.cancelled} to run", lambda: running(jobs.cancelled), 30, 0.3)
        self._cmd().run(["scancel", str(jobs.cancelled)], timeout=10)
        return jobs

    def roll_up(self, *, start: datetime | None = None, end: datetime | None = None,
                through: str = "hour") -> RollUp:
        """Make slurmdbd roll usage up now, for ``[start, end)``, the current hour included.

        slurmdbd fills ``<cluster>_usage_*`` and ``<cluster>_assoc_usage_*`` (what sreport
        reads) only for complete hours, when it starts and then once an hour, up to its
        ``<cluster>_last_ran_table``: jobs that just ran are in no rollup for up to an hour.
        Tests need those rollups, made by slurmdbd itself, at once. slurmdbd has the RPC for
        it: ``DBD_ROLL_USAGE``, which ``sacctmgr rollup <start> <end>`` sends (an operator
        command missing from sacctmgr's help; ``sacctmgr.c``). Given an end, slurmdbd
        (``as_mysql_usage.c``'s ``_cluster_rollup_usage``) rolls every hour from ``start``'s
        hour up to ``end``'s with the same ``as_mysql_hourly_rollup`` it runs each hour (then
        the days and months those cross), and, *because* an end was given, leaves
        ``last_ran_table`` alone: its own hourly rollup later rolls those hours again from
        where it was (rows are upserted), so nothing is lost or counted twice. It answers once
        the rollup is committed. No restart, no shifted clock: a daemon started under
        ``faketime`` past the hour would do the same rollup, but would stamp every row it
        writes in that hour with the shifted clock and would need ``last_ran_table`` put back.

        An hour rolled before it ends counts its rest as idle (as a finished hour whose nodes
        ran nothing then) and the jobs still running up to the hour's end; call it once the
        jobs to report have ended. Hours after the current one are rolled only while no job
        runs: slurmdbd never deletes a rollup row, and a running job's rows in hours it then
        does not reach would stay. Those later hours (idle) and days are rolled again by
        slurmdbd itself as they pass.

        Args:
            start: the first hour to roll (default: the current hour); aligned down to the hour.
            end: rolled up to this time's hour (default: per ``through``).
            through: with no ``end``: ``hour`` rolls up to the end of the current hour,
                ``day`` to the next midnight (the day tables too), ``month`` to the next first
                of a month (the month tables too; about a second for a whole month).

        Returns the hours rolled and the seconds it took. Raises :class:`DevClusterError`
        when slurmdbd refuses or the hour table lacks the hours afterwards.
        """
        t0 = time.monotonic()
        now = datetime.now().astimezone()  # slurmdbd rolls up in the machine's local time
        hour = now.replace(minute=0, second=0, microsecond=0)
        if through not in ("hour", "day", "month"):
            raise DevClusterError(f"through must be hour, day or month, not {through!r}")
        first = (start.astimezone() if start else hour).replace(minute=0, second=0, microsecond=0)
        if end is None:
            if through == "hour":
                end = hour + timedelta(hours=1)
            elif through == "day":
                end = (hour + timedelta(days=1)).replace(hour=0)
            else:
                end = (hour.replace(day=28, hour=0) + timedelta(days=4)).replace(day=1)
        last = end.astimezone().replace(minute=0, second=0, microsecond=0)
        if last <= first:
            raise DevClusterError(f"nothing to roll up: {last.isoformat()} is not after {first.isoformat()}")
        if last > hour + timedelta(hours=1):
            # slurmdbd upserts rollup rows and never deletes one: an hour rolled ahead with a job
            # running would keep that job's association usage for good if the job then ends
            # before that hour. The current hour is always safe (its real rollup rewrites every
            # association that ran in it); later ones only with nothing running.
            running = self._cmd().run(["squeue", "-h", "-t", "R,CG,S", "-o", "%A"], timeout=30).stdout.split()
            if running:
                raise DevClusterError(f"jobs {' '.join(running[:5])} are running: only the current hour can be "
                                      "rolled up (through=hour) until they end")
        fmt = "%Y-%m-%dT%H:%M:%S"  # sacctmgr's parse_time reads local time
        self._cmd().run(["sacctmgr", "-i", "rollup", first.strftime(fmt), last.strftime(fmt)], timeout=300)
        hours = int((last - first).total_seconds() // 3600)
        # The RPC answers after the commit: the cluster's hour rows (one per hour the cluster
        # was registered, whatever ran) are there now, or the rollup did not happen.
        table = f"`{self.db_name}`.`{self.cluster_name}_usage_hour_table`"
        out = self._sql(f"SELECT COUNT(*) FROM {table} WHERE id_tres = 1 AND time_start >= "
                        f"{int(first.timestamp())} AND time_start < {int(last.timestamp())}").strip()
        if not out.isdigit() or int(out) == 0:
            raise DevClusterError(f"sacctmgr rollup answered but {table} has no row in "
                                  f"[{first.isoformat()}, {last.isoformat()})")
        return RollUp(start=first.astimezone(UTC), end=last.astimezone(UTC), hours=hours,
                      seconds=time.monotonic() - t0)

    # -- steps ------------------------------------------------------------------------
    def install_packages(self, *, own_mariadb: bool = False) -> None:
        """apt-get install what is missing (never slurm-wlm-emulator); on a prefix install only
        munge (and MariaDB) come from Debian."""
        wanted = list(PACKAGES) if self.slurm_prefix is None else ["munge"]
        if (own_mariadb or not self._system_mariadb_alive()) and not Path("/usr/sbin/mariadbd").exists():
            wanted += ["mariadb-server"]
        missing = [p for p in wanted if not self._installed(p)]
        if missing:
            self.log(f"installing Debian packages: {' '.join(missing)}")
            env = {"DEBIAN_FRONTEND": "noninteractive"}
            runner = CommandRunner(timeout=900, env=env)
            runner.run(["apt-get", "update", "-qq"])
            runner.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing])
        # A previously installed emulator flips these alternatives to a front-end build.
        for name in ("slurmd", "slurmctld", "slurmstepd"):
            target = Path(f"/usr/sbin/{name}-wlm")
            if target.exists() and Path(f"/etc/alternatives/{name}").exists():
                self.runner.run(["update-alternatives", "--set", name, str(target)], check=False)

    def _installed(self, package: str) -> bool:
        res = self.runner.run(["dpkg-query", "-W", "-f=${Status}", package], timeout=30, check=False)
        return res.returncode == 0 and "install ok installed" in res.stdout

    def _system_mariadb_alive(self) -> bool:
        if not shutil.which("mariadb-admin"):
            return False
        res = self.runner.run(["mariadb-admin", "--connect-timeout=2", "ping"], timeout=15, check=False)
        return res.returncode == 0

    def _wipe(self) -> None:
        for sub in ("state", "spool", "log", "run", "mysql"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        if self._system_mariadb_alive():
            self._sql(f"DROP DATABASE IF EXISTS `{self.db_name}`", check=False)

    def _prepare(self, *, own_mariadb: bool) -> None:
        for user in self._users():
            try:
                pwd.getpwnam(user)
            except KeyError:
                self.runner.run(["useradd", "-m", "-s", "/bin/bash", user])
        for system_user in ("slurm", "slurmrestd"):  # Debian's slurm packages make "slurm"
            try:
                pwd.getpwnam(system_user)
            except KeyError:
                self.runner.run(["useradd", "-r", "-M", "-s", "/usr/sbin/nologin", system_user])
        slurm = pwd.getpwnam("slurm")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)  # noqa: S103 - SlurmUser must traverse it
        for parent in self.root.parents:
            if parent == Path("/"):
                break
            mode = parent.stat().st_mode
            if not mode & 0o001:
                raise ConfigError(f"{parent} must be traversable by the slurm user (mode o+x)")
        for sub in ("etc", "state", "run", "log", "spool", "slurmtower"):
            (self.root / sub).mkdir(exist_ok=True)
        for sub in ("state", "run", "log", "slurmtower"):
            os.chown(self.root / sub, slurm.pw_uid, slurm.pw_gid)
        for n in NODES:
            (self.root / "spool" / n).mkdir(exist_ok=True)
        if not self.jwt_key.exists():
            self.jwt_key.write_bytes(secrets.token_bytes(32))
        os.chown(self.jwt_key, slurm.pw_uid, slurm.pw_gid)
        os.chmod(self.jwt_key, 0o600)
        secret_file = self.etc / "db.secret"
        if not secret_file.exists():
            secret_file.write_text(json.dumps({"slurm": secrets.token_hex(12), "reader": secrets.token_hex(12)}))
            os.chmod(secret_file, 0o600)
        self._save_state(own_mariadb=own_mariadb)
        saved: dict[str, object] = {"nodes": self.node_count, "cluster_name": self.cluster_name,
                                    "port_base": self.port_base}
        if self.slurm_prefix is not None:
            saved["slurm_prefix"] = str(self.slurm_prefix)
        self.lab_file.write_text(json.dumps(saved) + "\n")
        self._write_configs(own_mariadb=own_mariadb)

    def _secrets(self) -> dict[str, str]:
        data: dict[str, str] = json.loads((self.etc / "db.secret").read_text())
        return data

    def _db_host_port(self) -> tuple[str, int]:
        if self._state().get("own_mariadb"):
            return "127.0.0.1", self.own_mariadb_port
        return "127.0.0.1", 3306

    def _slurm_conf_text(self) -> str:
        """The slurm.conf :meth:`up` writes (a running cluster whose file differs is restarted)."""
        r = self.root
        nodes_ports = f"[{self.node_port('n1')}-{self.node_port(NODES[-1])}]"
        slurm_conf = f"""# Written by slurmtower devcluster; do not edit (rewritten by `devcluster up`).
ClusterName={self.cluster_name}
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
SlurmctldPort={self.ctld_port}
SlurmdPort={self.port_base + 18}
AuthType=auth/munge
CredType={self._cred_type()}
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={self.jwt_key}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
MpiDefault=none
{"SwitchType=switch/none" if self.debian_slurm else "# SwitchType: no switch/none plugin since 24.11"}
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
ReturnToService=1
SlurmdTimeout=5
SlurmctldTimeout=10
MessageTimeout=3
InactiveLimit=0
KillWait=2
MinJobAge=60
OverTimeLimit=0
Waittime=0
HealthCheckInterval=0
DefMemPerCPU=100
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={self.dbd_port}
AccountingStorageEnforce=associations,limits,qos
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightFairshare=10000
PriorityWeightJobSize=1000
PriorityWeightPartition=1000
PriorityWeightQOS=1000
PriorityWeightTRES=CPU=1000,Mem=1000
PriorityMaxAge=1-0
PriorityCalcPeriod={5 if self.is_lab else 1}
NodeName=n[1-4] NodeAddr=127.0.0.1 {self._hostname()}Port={nodes_ports} CPUs=2 RealMemory=2000 \
  State=UNKNOWN Feature=dev
"""
        slurm_conf += self._lab_conf() if self.is_lab else """\
PartitionName=debug Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
PartitionName=batch Nodes=n[1-2] MaxTime=60 State=UP
PartitionName=short Nodes=n[3-4] MaxTime=5 DefaultTime=1 State=UP
"""
        return slurm_conf

    def _conf_current(self) -> bool:
        """The running cluster's slurm.conf is the one this slurmtower writes."""
        try:
            return self.slurm_conf.read_text() == self._slurm_conf_text()
        except OSError:
            return False

    def _write_configs(self, *, own_mariadb: bool) -> None:
        r = self.root
        slurm_conf = self._slurm_conf_text()
        host, port = self._db_host_port()
        sec = self._secrets()
        dbd_conf = f"""# Written by slurmtower devcluster
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={self.jwt_key}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=slurm
DebugLevel=info
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost={host}
StoragePort={port}
StorageUser=slurm_{self.cluster_name}
StoragePass={sec['slurm']}
StorageLoc={self.db_name}
"""
        self.slurm_conf.write_text(slurm_conf)
        os.chmod(self.slurm_conf, 0o644)
        cgroup = self.etc / "cgroup.conf"
        if self.debian_slurm:
            cgroup.unlink(missing_ok=True)
        else:
            # slurmd always loads the cgroup plugin (default autodetect). 24.05+ can turn it off
            # ("disabled"); 23.11 knows no such value ("cannot find cgroup plugin for disabled":
            # slurmd exits), so there it autodetects (this host's v1 hierarchies or v2), which
            # the jobs here never use (proctrack/linuxproc, task/none).
            plugin = "disabled" if self._release() >= (24, 5) else "autodetect"
            cgroup.write_text(f"# Written by slurmtower devcluster\nCgroupPlugin={plugin}\n")
            os.chmod(cgroup, 0o644)
        dbd = self.etc / "slurmdbd.conf"
        dbd.write_text(dbd_conf)
        slurm = pwd.getpwnam("slurm")
        os.chown(dbd, slurm.pw_uid, slurm.pw_gid)
        os.chmod(dbd, 0o600)
        tower = f"""# slurmtower settings for the devcluster (written by `slurmtower devcluster up`)
cluster_name = "{self.cluster_name}"
state_dir = "{r}/slurmtower"

[slurm]
slurm_conf = "{self.slurm_conf}"
{f'bin_dir = "{self.bin_dir()}"' if self.slurm_prefix is not None else ""}
rest_url = "http://127.0.0.1:{self.rest_port}"
rest_jwt_key_file = "{self.jwt_key}"

[accounting]
url = "mysql+pymysql://reader_{self.cluster_name}:{sec['reader']}@{host}:{port}/{self.db_name}"

[api]
host = "127.0.0.1"
port = {self.api_port}
serve_index = true
{self._token_entries()}"""
        kept = self._user_settings(tower)
        self.tower_conf.write_text(f"{tower}\n{USER_MARK}{kept}")
        os.chmod(self.tower_conf, 0o600)

    def _cred_type(self) -> str:
        if self.debian_slurm or not self._plugin("cred_none"):
            return "cred/munge"
        return "cred/none"

    def _hostname(self) -> str:
        # 22.05 needs NodeHostname=localhost for slurmd -N on one host; 24.11+ rejects a
        # hostname shared by several nodes ("Duplicated NodeHostName") and needs none.
        return "NodeHostname=localhost " if self.debian_slurm else ""

    def _user_settings(self, generated: str) -> str:
        """What a user added to slurmtower.toml, to keep when it is written again: the part
        below :data:`USER_MARK`, or (a file from before the mark) every ``[[auth.tokens]]``
        entry that ``up`` did not write itself."""
        try:
            existing = self.tower_conf.read_text()
        except OSError:
            return ""
        if USER_MARK in existing:
            return existing.split(USER_MARK, 1)[1]
        try:
            old = tomllib.loads(existing)
            ours = {t["name"] for t in tomllib.loads(generated).get("auth", {}).get("tokens", [])}
        except tomllib.TOMLDecodeError:
            return ""
        kept = []
        for entry in old.get("auth", {}).get("tokens", []):
            if entry.get("name") in ours:
                continue
            lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in entry.items())
            kept.append(f"[[auth.tokens]]\n{lines}")
        return "\n".join(kept)

    def _lab_conf(self) -> str:
        """The scale lab's nodes n5-nN (no slurmd), its partitions and its settings for a big queue."""
        n = self.node_count
        # n5..b1 compute, b1+1..b2 bigmem, b2+1..n gpu (empty ranges for a small n)
        b1 = max(MIN_NODES, n * 6 // 10)
        b2 = max(b1, n * 9 // 10)

        def span(first: int, last: int) -> str:
            return str(NodeSet(f"n[{first}-{last}]")) if first <= last else ""

        def nodes(*spans: str) -> str:
            return str(NodeSet([x for x in spans if x]))

        lines = []
        for first, last, hw in ((MIN_NODES + 1, b1, "CPUs=32 RealMemory=128000 Feature=compute"),
                                (b1 + 1, b2, "CPUs=64 RealMemory=1024000 Feature=bigmem"),
                                (b2 + 1, n, "CPUs=32 RealMemory=256000 Feature=gpu")):
            if first <= last:
                ports = f"[{self.node_port(f'n{first}')}-{self.node_port(f'n{last}')}]" if first < last \
                    else str(self.node_port(f"n{first}"))
                lines.append(f"NodeName={span(first, last)} NodeAddr=127.0.0.1 {self._hostname()}"
                             f"Port={ports} {hw} State=UNKNOWN")
        partitions = [
            ("debug", nodes(span(1, n)), "Default=YES MaxTime=INFINITE"),
            ("batch", "n[1-2]", "MaxTime=60"),
            ("short", "n[3-4]", "MaxTime=5 DefaultTime=1"),
            # site-like partitions that overlap each other; those with n1-n4 run jobs
            ("compute", nodes(span(1, b2)), "MaxTime=2-00:00:00"),
            ("bigmem", nodes("n[3-4]", span(b1 + 1, b2)), "MaxTime=2-00:00:00"),
            ("gpu", nodes("n[1-2]", span(b2 + 1, n)), "MaxTime=1-00:00:00"),
            ("long", nodes(span(max(n // 2 + 1, MIN_NODES + 1), n)), "MaxTime=7-00:00:00"),
        ]
        lines += [f"PartitionName={name} Nodes={members} {extra} State=UP"
                  for name, members, extra in partitions if members]
        # A queue of 100,000+ jobs (slurm.conf(5)): room for the jobs and array tasks (each
        # task counts against MaxJobCount), no scheduling attempt per submitted job (defer),
        # a scheduler and backfill that look at a bounded part of the queue.
        lines += [
            "MaxJobCount=250000",
            "MaxArraySize=100001",
            "SchedulerParameters=defer,batch_sched_delay=3,sched_min_interval=500000,"
            "default_queue_depth=100,partition_job_depth=50,bf_max_job_test=500,bf_interval=30,"
            "max_rpc_cnt=64",
        ]
        return "\n".join(lines) + "\n"

    @property
    def demo_tokens_file(self) -> Path:
        return self.etc / "demo-tokens.json"

    def demo_tokens(self) -> dict[str, str]:
        """Bearer tokens of the demo principals (one per role), made once per cluster."""
        try:
            data: dict[str, str] = json.loads(self.demo_tokens_file.read_text())
            return data
        except (OSError, ValueError):
            tokens = {role: secrets.token_urlsafe(24) for role in ("reader", "operator", "admin")}
            self.demo_tokens_file.write_text(json.dumps(tokens, indent=1))
            os.chmod(self.demo_tokens_file, 0o600)
            return tokens

    def _token_entries(self) -> str:
        entries = []
        for role, token in self.demo_tokens().items():
            digest = hashlib.sha256(token.encode()).hexdigest()
            entries.append(f'[[auth.tokens]]\nname = "demo-{role}"\nrole = "{role}"\nsha256 = "{digest}"\n')
        return "\n# demo principals; their tokens are in demo-tokens.json (0600)\n" + "\n".join(entries)

    def _spawn_daemon(self, argv: list[str]) -> None:
        """Start a self-daemonising Slurm daemon with a clean environment."""
        proc = subprocess.run(  # noqa: S603
            argv, env=self.slurm_env(), capture_output=True, text=True, timeout=60, check=False, cwd="/",
        )
        if proc.returncode != 0:
            raise DevClusterError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")

    def _background(self, argv: list[str], *, pidfile: Path, log: Path, env: dict[str, str],
                    make_pidfile: bool = True) -> None:
        """Start a foreground-only daemon detached from us (start-stop-daemon, from dpkg).

        ``pidfile`` identifies *our* instance (another one of the same binary may run);
        ``make_pidfile=False`` when the daemon writes it itself.
        """
        ssd = ["start-stop-daemon", "--start", "--background", "--no-close", "--exec", argv[0],
               "--pidfile", str(pidfile)]
        if make_pidfile:
            ssd.append("--make-pidfile")
        with open(log, "ab") as out:
            proc = subprocess.run(  # noqa: S603
                [*ssd, "--", *argv[1:]], env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                check=False, cwd="/", timeout=30,
            )
        if proc.returncode != 0:
            raise DevClusterError(f"could not start {argv[0]} (start-stop-daemon exit {proc.returncode}), see {log}")

    def _start_munge(self) -> None:
        if _read_pid(SYSTEM_MUNGE_PID) is not None:
            return
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            self.runner.run(["mungekey", "--create", f"--keyfile={key}"])
            shutil.chown(key, "munge", "munge")
            os.chmod(key, 0o600)
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        self.runner.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
        self._save_state(started_munge=True)
        _wait("munged", lambda: _read_pid(SYSTEM_MUNGE_PID) is not None, 10)

    def _sql(self, sql: str, *, check: bool = True) -> str:
        if self._state().get("own_mariadb"):
            argv = ["mariadb", "--protocol=socket", f"--socket={self.run_dir}/mysqld.sock", "-uroot"]
        else:
            argv = ["mariadb", "-uroot"]
        return self.runner.run([*argv, "-N", "-e", sql], timeout=30, check=check).stdout

    def _start_mariadb(self, *, own: bool) -> None:
        if not own and not self._system_mariadb_alive():
            # No MariaDB answers: fall back to our own.
            self._save_state(own_mariadb=True)
            self._write_configs(own_mariadb=True)
            own = True
        if own:
            datadir = self.root / "mysql"
            sock = self.run_dir / "mysqld.sock"
            if not datadir.exists():
                datadir.mkdir()
                shutil.chown(datadir, "mysql", "mysql")
                self.runner.run(
                    ["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=mysql",
                     "--auth-root-authentication-method=socket", "--skip-test-db"],
                    timeout=120,
                )
            if _read_pid(self.run_dir / "mariadbd.pid") is None:
                shutil.chown(self.run_dir, "slurm", "slurm")
                os.chmod(self.run_dir, 0o777)  # noqa: S103 - mysqld writes its socket here
                self._background(
                    ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
                     f"--port={self.own_mariadb_port}", "--bind-address=127.0.0.1", "--user=mysql",
                     f"--pid-file={self.run_dir}/mariadbd.pid", "--innodb-buffer-pool-size=256M"],
                    pidfile=self.run_dir / "mariadbd.pid", make_pidfile=False, log=self.log_dir / "mariadbd.log",
                    env=self.slurm_env(),
                )
                _wait("mariadbd", lambda: sock.exists() and _port_open(self.own_mariadb_port), 60)
        sec = self._secrets()
        c = self.cluster_name
        stmts = [f"CREATE DATABASE IF NOT EXISTS `{self.db_name}`"]
        for host in ("localhost", "127.0.0.1"):
            stmts += [
                f"CREATE USER IF NOT EXISTS 'slurm_{c}'@'{host}' IDENTIFIED BY '{sec['slurm']}'",
                f"ALTER USER 'slurm_{c}'@'{host}' IDENTIFIED BY '{sec['slurm']}'",
                f"GRANT ALL ON `{self.db_name}`.* TO 'slurm_{c}'@'{host}'",
                # slurmtower's own read-only user: SELECT only (see README)
                f"CREATE USER IF NOT EXISTS 'reader_{c}'@'{host}' IDENTIFIED BY '{sec['reader']}'",
                f"ALTER USER 'reader_{c}'@'{host}' IDENTIFIED BY '{sec['reader']}'",
                f"GRANT SELECT ON `{self.db_name}`.* TO 'reader_{c}'@'{host}'",
            ]
        self._sql("; ".join(stmts))

    def _start_slurmdbd(self) -> None:
        if _read_pid(self.run_dir / "slurmdbd.pid") is None:
            self._spawn_daemon([self.sbin("slurmdbd")])
        _wait("slurmdbd", lambda: _port_open(self.dbd_port), 30)

    def _start_slurmctld(self) -> None:
        if _read_pid(self.run_dir / "slurmctld.pid") is None:
            self._spawn_daemon([self.sbin("slurmctld")])
        _wait("slurmctld", lambda: "UP" in self._cmd().run(["scontrol", "ping"], timeout=5).stdout, 30, 0.2)

    def _start_slurmds(self) -> None:
        for n in NODES:
            if _read_pid(self.run_dir / f"slurmd-{n}.pid") is None:
                self._spawn_daemon([self.sbin("slurmd"), "-N", n])

    def _ensure_accounts(self) -> None:
        cmd = self._cmd()

        def registered() -> bool:
            out = cmd.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=10).stdout
            return self.cluster_name in out.split()

        _wait("cluster registration in slurmdbd", registered, 30, 0.3)
        out = cmd.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user"], timeout=20).stdout
        have = {tuple(line.split("|")) for line in out.splitlines()}
        wanted = self._accounts()
        accounts = [a for a in wanted if (a, "") not in have]
        if accounts:
            cmd.run(["sacctmgr", "-i", "add", "account", ",".join(accounts),
                     "Description=devcluster", "Organization=slurmtower"], timeout=20)
        for account, users in wanted.items():
            todo = [u for u in users if (account, u) not in have]
            if todo:
                cmd.run(["sacctmgr", "-i", "add", "user", ",".join(todo), f"Account={account}"], timeout=20)
        known = set(cmd.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], timeout=20).stdout.split())
        for name, settings in QOS.items():
            if name not in known:
                cmd.run(["sacctmgr", "-i", "add", "qos", name, *settings], timeout=20)
        out = cmd.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,qos"], timeout=20).stdout
        allowed = {account: set(qos.split(",")) for account, user, qos in
                   (line.split("|") for line in out.splitlines() if line.count("|") == 2) if not user}
        for name in QOS:
            todo = [a for a in wanted if name not in allowed.get(a, set())]
            if todo:
                cmd.run(["sacctmgr", "-i", "modify", "account", "where", f"name={','.join(todo)}", "set",
                         f"qos+={name}"], timeout=20)

    def _rest_pid(self) -> int | None:
        """slurmrestd's pid: from its pid file, or found by its command line (a lost pid file)."""
        pid = _read_pid(self.run_dir / "slurmrestd.pid")
        if pid is not None:
            return pid
        wanted = [self.sbin("slurmrestd").encode(), f"127.0.0.1:{self.rest_port}".encode()]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if all(w in cmdline for w in wanted):
                with contextlib.suppress(OSError):  # a cluster that never started has no run dir
                    (self.run_dir / "slurmrestd.pid").write_text(f"{entry.name}\n")
                return int(entry.name)
        return None

    def _rest_alive(self) -> bool:
        return self._rest_pid() is not None and _port_open(self.rest_port)

    def _start_slurmrestd(self) -> None:
        if self._rest_alive():
            return
        # SLURM_BITSTR_LEN=0: an array's pending tasks in full (past 64 characters slurmrestd
        # cuts the list with "...", and the tasks past the cut could not be counted).
        env = {**self.slurm_env(), "SLURM_JWT": "daemon", "SLURM_BITSTR_LEN": "0"}
        self._background(
            [self.sbin("slurmrestd"), "-a", "rest_auth/jwt", "-u", "slurmrestd", "-g", "slurmrestd",
             f"127.0.0.1:{self.rest_port}"],
            pidfile=self.run_dir / "slurmrestd.pid", log=self.log_dir / "slurmrestd.log", env=env,
        )
        _wait("slurmrestd", lambda: _port_open(self.rest_port), 15)

    def _wait_idle(self) -> None:
        cmd = self._cmd()

        def responding() -> bool:
            # only the nodes with a slurmd: the lab's others never respond
            out = cmd.run(["sinfo", "-h", "-N", "-n", ",".join(NODES), "-o", "%N %T"], timeout=10).stdout
            states = dict(line.split() for line in out.splitlines() if line.strip())
            return len(states) >= len(NODES) and not any(s.endswith("*") or s == "unknown"
                                                        for s in states.values())

        _wait("the nodes to respond", responding, 60, 0.2)

    def _stop(self, procs: list[tuple[str, int | None]]) -> None:
        live = [(name, pid) for name, pid in procs if pid is not None]
        for _name, pid in live:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 20
        while time.monotonic() < end and any(_pid_alive(pid) for _, pid in live):
            time.sleep(0.1)
        for name, pid in live:
            if _pid_alive(pid):
                self.log(f"{name} (pid {pid}) ignored SIGTERM: SIGKILL")
                os.kill(pid, signal.SIGKILL)

    def _check_node(self, node: str) -> None:
        if node not in NODES:
            if node.startswith("n") and node[1:].isdigit() and int(node[1:]) <= self.node_count:
                raise DevClusterError(f"{node} has no slurmd: in the devcluster only {', '.join(NODES)} run one")
            raise DevClusterError(f"unknown node {node!r}: the devcluster has {', '.join(NODES)}")
