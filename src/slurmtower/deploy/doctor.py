"""``slurmtower doctor``: checks of a deployment, each a :class:`CheckResult` with the fix.

Run as the service's user (the API's, or SlurmUser with the sensor's config), on the host it
runs on. Every Slurm command goes through the project's runner; nothing is changed: the
trigger probe names a node that does not exist, so slurmctld answers who may set triggers
without arming one, and the store's write probe is rolled back.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from slurmtower.deploy.discover import DEFAULT_SLURM_CONF, read_conf
from slurmtower.deploy.releases import judge_release
from slurmtower.errors import ConfigError, SlurmError, SlurmtowerError
from slurmtower.models.config import ClusterConfig
from slurmtower.settings import Settings
from slurmtower.slurm.cli_backend import CliSlurmClient
from slurmtower.slurm.runner import CommandRunner
from slurmtower.store.engine import make_store_engine, sqlite_file
from slurmtower.store.migrate import UPGRADE_COMMAND, current_state
from slurmtower.store.schema import VERSION_TABLE

__all__ = ["CHECKS", "DEPLOYMENT_CHECKS", "CheckResult", "Status", "doctor_failed", "run_checks"]

Status = Literal["ok", "warn", "fail", "skip"]
#: A node name no cluster has: strigger's answer to it tells whether we may set triggers.
PROBE_NODE = "slurmtower-doctor-probe"
_WRITE_PRIVILEGES_OK = {"SELECT", "USAGE", "SHOW VIEW"}


@dataclass(frozen=True)
class CheckResult:
    """One check: ``status`` (``ok``, ``warn``, ``fail``, ``skip``), what was found, the fix."""

    name: str
    status: Status
    detail: str
    fix: str | None = None
    cluster: str | None = None
    """The ``[[clusters]]`` entry checked (``None``: the deployment's, or its one cluster)."""

    def line(self) -> str:
        """The check as one line: ``FAIL store: ... -> fix: ...`` (``FAIL slurmctld [gpu]: ...``
        for one cluster of several)."""
        mark = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}[self.status]
        where = f" [{self.cluster}]" if self.cluster else ""
        return f"{mark} {self.name}{where}: {self.detail}" + (f" -> fix: {self.fix}" if self.fix else "")


@dataclass
class _Context:
    settings: Settings
    runner: CommandRunner
    client: CliSlurmClient
    user: str
    config: ClusterConfig | None = None
    config_error: str | None = None
    found: dict[str, str] = field(default_factory=dict)

    def slurmctld(self) -> ClusterConfig | None:
        """slurmctld's running config (asked once); None when it does not answer."""
        if self.config is None and self.config_error is None:
            try:
                self.config = self.client.config()
            except SlurmError as exc:
                self.config_error = exc.message
        return self.config


def _slurm_conf_path(settings: Settings) -> Path:
    if settings.slurm.slurm_conf is not None:
        return settings.slurm.slurm_conf
    env = os.environ.get("SLURM_CONF")
    return Path(env) if env else DEFAULT_SLURM_CONF


def _local_conf(settings: Settings) -> dict[str, str]:
    try:
        return read_conf(_slurm_conf_path(settings).read_text())
    except OSError:
        return {}


# -- the checks ----------------------------------------------------------------------------


def check_commands(ctx: _Context) -> CheckResult:
    try:
        version = ctx.client.version()
    except SlurmError as exc:
        return CheckResult("slurm-commands", "fail", exc.message,
                           "install Slurm's client commands of the cluster's release, or set slurm.bin_dir")
    ctx.found["version"] = str(version)
    return CheckResult("slurm-commands", "ok", f"sinfo {version} runs")


def check_munge(ctx: _Context) -> CheckResult:
    conf = _local_conf(ctx.settings)
    if conf.get("authtype", "auth/munge") != "auth/munge":
        return CheckResult("munge", "skip", f"AuthType is {conf['authtype']}")
    socket = None
    for part in conf.get("authinfo", "").split(","):
        key, _, value = part.strip().partition("=")
        if key.lower() == "socket" and value:
            socket = value
    where = ["-S", socket] if socket else []
    shown = socket or "munge's default socket"
    try:
        cred = ctx.runner.run(["munge", "-n", *where], timeout=10).stdout
        ctx.runner.run(["unmunge", *where], input=cred, timeout=10)
    except SlurmError as exc:
        return CheckResult("munge", "fail", f"munge does not answer on {shown}: {exc.message}",
                           "start munged (systemctl start munge) with the cluster's key, or correct "
                           "AuthInfo=socket=... in slurm.conf")
    return CheckResult("munge", "ok", f"a credential made and decoded on {shown}")


def check_slurmctld(ctx: _Context) -> CheckResult:
    config = ctx.slurmctld()
    if config is None:
        message = ctx.config_error or "no answer"
        if "munge" in message.lower():
            fix = "start munged (systemctl start munge) or correct AuthInfo=socket=... in slurm.conf"
        else:
            fix = "start slurmctld, or point slurm.slurm_conf at the cluster's slurm.conf (SlurmctldHost, port)"
        return CheckResult("slurmctld", "fail", f"scontrol show config failed: {message}", fix)
    return CheckResult("slurmctld", "ok", f"cluster {config.get('ClusterName')} answers (scontrol show config)")


def check_release(ctx: _Context) -> CheckResult:
    try:
        version = ctx.client.version()
    except SlurmError:
        return CheckResult("slurm-release", "skip", "no Slurm commands")
    verdict = judge_release(version)
    return CheckResult("slurm-release", verdict.status, verdict.detail, verdict.fix)  # type: ignore[arg-type]


def check_operator(ctx: _Context) -> CheckResult:
    config = ctx.slurmctld()
    slurm_user = _slurm_user(config) if config is not None else None
    if ctx.user == slurm_user:
        return CheckResult("operator", "ok", f"{ctx.user} is SlurmUser: it may do every node action")
    try:
        out = ctx.runner.run(["sacctmgr", "-n", "-P", "show", "user", ctx.user, "format=User,AdminLevel"],
                             timeout=15).stdout
    except SlurmError as exc:
        return CheckResult("operator", "fail", f"sacctmgr failed: {exc.message}",
                           "start slurmdbd; the node actions need the AdminLevel it keeps")
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    add = f"sacctmgr -i add user {ctx.user} account=root adminlevel=Operator"
    if not rows:
        return CheckResult("operator", "fail", f"{ctx.user} is not a user in slurmdbd: node actions are refused", add)
    level = rows[0][1] if len(rows[0]) > 1 else "None"
    if level not in ("Operator", "Administrator"):
        return CheckResult("operator", "fail", f"{ctx.user} has AdminLevel {level}: node actions are refused",
                           f"sacctmgr -i modify user {ctx.user} set adminlevel=Operator")
    return CheckResult("operator", "ok", f"{ctx.user} has AdminLevel {level} in slurmdbd")


def _privileges(grant: str) -> tuple[set[str], bool]:
    """The privileges of one ``SHOW GRANTS`` line and whether it has the GRANT OPTION."""
    match = re.match(r"^GRANT (.+?) ON ", grant)
    if match is None:  # a role granted, or a proxy line
        return set(), False
    privileges = {p.strip().upper() for p in match[1].split(",")}
    return privileges, "WITH GRANT OPTION" in grant.upper()


def check_accounting(ctx: _Context) -> CheckResult:
    from slurmtower.accounting.db import AccountingDB  # deferred: SQLAlchemy's MySQL driver

    acct = ctx.settings.accounting
    if acct.url is None:
        return CheckResult("accounting-db", "warn", "accounting.url is not set: /history and the reports are off",
                           "set accounting.url to a read-only user of slurmdbd's database "
                           "(slurmtower init writes it from slurmdbd.conf)")
    try:
        db = AccountingDB.from_settings(ctx.settings)
    except SlurmtowerError as exc:
        return CheckResult("accounting-db", "fail", exc.message, "correct accounting.url / accounting.cluster")
    database = db.engine.url.database or "slurm_acct_db"
    select_only = f"GRANT SELECT ON `{database}`.* TO <the user>"
    try:
        try:
            db.ping()
        except SlurmtowerError:
            return CheckResult("accounting-db", "fail",
                               f"cannot read {db.tables.job.name} as {db.engine.url.username} on "
                               f"{db.engine.url.host}:{db.engine.url.port or 3306}",
                               f"{select_only}; check accounting.url's password and accounting.cluster")
        if db.engine.url.get_backend_name() not in ("mysql", "mariadb"):
            return CheckResult("accounting-db", "ok", f"reads {db.tables.job.name} (grants not checked off MySQL)")
        with db.engine.connect() as conn:
            who = str(conn.execute(text("SELECT CURRENT_USER()")).scalar())
            grants = [str(r[0]) for r in conn.execute(text("SHOW GRANTS"))]
    except SQLAlchemyError as exc:
        return CheckResult("accounting-db", "fail", f"the database failed: {type(exc).__name__}", select_only)
    finally:
        db.close()
    extra: set[str] = set()
    for grant in grants:
        privileges, grant_option = _privileges(grant)
        extra |= privileges - _WRITE_PRIVILEGES_OK
        if grant_option:
            extra.add("GRANT OPTION")
    if extra:
        user, _, host = who.partition("@")
        return CheckResult(
            "accounting-db", "fail",
            f"{who} may do more than read: {', '.join(sorted(extra))} (slurmtower only reads)",
            f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM '{user}'@'{host}'; "
            f"GRANT SELECT ON `{database}`.* TO '{user}'@'{host}'")
    return CheckResult("accounting-db", "ok", f"{who} reads {db.tables.job.name} and may only read")


def _slurm_user(config: ClusterConfig) -> str:
    return re.sub(r"\(\d+\)$", "", config.get("SlurmUser") or "slurm")


def check_triggers(ctx: _Context) -> CheckResult:
    name = "sensor-triggers"
    if not ctx.settings.events.sensor_enabled:
        return CheckResult(name, "skip", "events.sensor_enabled = false: the sensor runs in its own unit",
                           "run `slurmtower doctor -c /etc/slurmtower/sensor.toml` as SlurmUser there")
    config = ctx.slurmctld()
    if config is None:
        return CheckResult(name, "skip", "slurmctld does not answer")
    cluster_user = _slurm_user(config)
    configured = ctx.settings.slurm.slurm_user
    # As root the sensor sets its triggers as slurm.slurm_user (runuser), as anyone else as itself.
    as_user = configured if os.geteuid() == 0 else None
    who = as_user or ctx.user
    try:
        res = ctx.runner.run(["strigger", "--set", f"--node={PROBE_NODE}", "--down", "--program=/bin/true"],
                             as_user=as_user, check=False, timeout=15)
    except SlurmError as exc:
        return CheckResult(name, "fail", exc.message, f"run the sensor as root or SlurmUser ({cluster_user})")
    answer = " ".join((res.stderr + res.stdout).split())
    if res.returncode == 0:  # a node by that name exists after all: take the trigger back
        ctx.client.clear_triggers([t.trigger_id for t in ctx.client.triggers() if t.program == "/bin/true"
                                   and t.res_id == PROBE_NODE])
    elif "invalid node" not in answer.lower():
        fix = (f"run the sensor as SlurmUser: User={cluster_user} in slurmtower-sensor.service"
               + (f", and slurm.slurm_user = \"{cluster_user}\"" if configured != cluster_user else ""))
        return CheckResult(name, "fail", f"slurmctld refuses triggers from {who}: {answer}", fix)
    if configured != cluster_user:
        return CheckResult(name, "fail", f"slurm.slurm_user is {configured}, the cluster's SlurmUser {cluster_user}",
                           f"slurm.slurm_user = \"{cluster_user}\"")
    return CheckResult(name, "ok", f"slurmctld takes node triggers from {who}")


def _can(path: Path, user: pwd.struct_passwd, want: int) -> bool:
    """``user`` has ``want`` (R_OK, X_OK ...) on ``path`` by its mode bits (root always)."""
    if user.pw_uid == 0:
        return True
    try:
        st = path.stat()
    except OSError:
        return False
    groups = {g for g in os.getgrouplist(user.pw_name, user.pw_gid)}
    shift = 6 if st.st_uid == user.pw_uid else 3 if st.st_gid in groups else 0
    bits = {os.R_OK: stat.S_IROTH, os.W_OK: stat.S_IWOTH, os.X_OK: stat.S_IXOTH}
    return all(st.st_mode & (bits[flag] << shift) for flag in bits if want & flag)


def _reachable(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first directory above ``path`` that ``user`` cannot traverse (None: all can)."""
    for parent in reversed(path.parents):
        if parent.exists() and not _can(parent, user, os.X_OK):
            return parent
    return None


def check_notify_program(ctx: _Context) -> CheckResult:
    from slurmtower.events.sensor import notify_program_file  # deferred: the sensor's imports

    name = "notify-program"
    if not ctx.settings.events.sensor_enabled:
        return CheckResult(name, "skip", "the sensor runs in its own unit")
    config = ctx.slurmctld()
    if config is None:
        return CheckResult(name, "skip", "slurmctld does not answer")
    try:
        slurm = pwd.getpwnam(_slurm_user(config))
    except KeyError:
        return CheckResult(name, "fail", f"SlurmUser {_slurm_user(config)} does not exist on this host",
                           "run the sensor on the slurmctld host")
    python = ctx.settings.events.notify_python
    program = notify_program_file(ctx.settings)
    key = ctx.settings.effective_key_file()
    problems: list[str] = []
    if not _can(python, slurm, os.X_OK):
        problems.append(f"{slurm.pw_name} cannot run {python}")
    for path, want in ((program, os.R_OK), (key, os.R_OK)):
        blocked = _reachable(path, slurm)
        if blocked is not None:
            problems.append(f"{slurm.pw_name} cannot enter {blocked}")
        elif path.exists() and not _can(path, slurm, want):
            problems.append(f"{slurm.pw_name} cannot read {path}")
    if problems:
        return CheckResult(name, "fail", "; ".join(dict.fromkeys(problems)),
                           f"let {slurm.pw_name} traverse the state directory and read the notify program and "
                           f"key (the sensor installs them when it runs as {slurm.pw_name} or root), and set "
                           "events.notify_python to a Python 3 it may run")
    installed = "installed" if program.exists() else "installed by the sensor at its start"
    return CheckResult(name, "ok", f"{slurm.pw_name} may run {python} {program} ({installed}) and read {key}")


def check_store(ctx: _Context) -> CheckResult:
    url = ctx.settings.effective_store_url()
    parsed = make_url(url)
    where = parsed.render_as_string(hide_password=True)
    db_file = sqlite_file(parsed)
    if db_file is not None and not db_file.exists():
        directory = next((p for p in [db_file.parent, *db_file.parent.parents] if p.exists()), Path("/"))
        if not os.access(directory, os.W_OK | os.X_OK):
            return CheckResult("store", "fail", f"{ctx.user} cannot create {db_file} ({directory} is not writable)",
                               f"chown {ctx.user} {db_file.parent} (the unit's StateDirectory= does it)")
        return CheckResult("store", "ok", f"{where}: empty, created at the head revision on first start")
    if db_file is not None and not (os.access(db_file, os.R_OK | os.W_OK) and os.access(db_file.parent, os.W_OK)):
        return CheckResult("store", "fail", f"{ctx.user} cannot write {db_file} and its directory",
                           f"chown -R {ctx.user} {db_file.parent}")
    engine = make_store_engine(url)
    try:
        state = current_state(engine)
        if not state.known:
            return CheckResult("store", "fail", f"{where} is at {state.revision}, newer than this slurmtower "
                               f"({state.head})", "upgrade slurmtower")
        if state.empty:
            return CheckResult("store", "ok", f"{where}: empty, created at the head revision on first start")
        if not state.up_to_date:
            return CheckResult("store", "fail", f"{where} is at {state.revision}, this slurmtower needs {state.head}",
                               f"stop the deployment's processes, back the store up, run `{UPGRADE_COMMAND}`")
        if db_file is None:
            with engine.connect() as conn, conn.begin() as tx:  # rolled back: a write probe only
                conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = version_num"))
                tx.rollback()
    except SlurmtowerError as exc:
        return CheckResult("store", "fail", exc.message, f"back the store up, run `{UPGRADE_COMMAND}`")
    except SQLAlchemyError as exc:
        return CheckResult("store", "fail", f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                           "give the service's user write access to the store (store_url)")
    finally:
        engine.dispose()
    return CheckResult("store", "ok", f"{where} is at {state.head} and writable")


def check_clock(ctx: _Context, clock: Callable[[], float] = time.time) -> CheckResult:
    if ctx.slurmctld() is None:
        return CheckResult("clock", "skip", "slurmctld does not answer")
    before = clock()
    try:
        stats = ctx.client.stats()
    except SlurmError as exc:
        return CheckResult("clock", "fail", f"sdiag failed: {exc.message}", "start slurmctld")
    after = clock()
    if stats.slurm_time is None:
        return CheckResult("clock", "skip", "sdiag gives no time")
    skew = stats.slurm_time.timestamp() - (before + after) / 2
    limit = ctx.settings.events.max_clock_skew
    text_ = f"slurmctld's clock is {skew:+.1f} s from this host's (sdiag, 1 s resolution)"
    fix = "synchronise both hosts' clocks (chrony or systemd-timesyncd against one NTP server)"
    if abs(skew) > limit:
        return CheckResult("clock", "fail", f"{text_}: over events.max_clock_skew ({limit:g} s), callbacks are refused",
                           fix)
    if abs(skew) > 5:
        return CheckResult("clock", "warn", text_, fix)
    return CheckResult("clock", "ok", text_)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_tls_proxy(ctx: _Context) -> CheckResult:
    api = ctx.settings.api
    nets = [ipaddress.ip_network(p, strict=False) for p in api.trusted_proxies]
    if any(n.prefixlen == 0 for n in nets):
        return CheckResult("tls-proxy", "fail", "api.trusted_proxies believes every address: any client can name "
                           "another in X-Forwarded-For", "name only the proxy (127.0.0.1 on the same host)")
    oidc = ctx.settings.auth.oidc
    if oidc is not None and oidc.redirect_url.startswith("https://") and not nets:
        return CheckResult("tls-proxy", "fail", "single sign-on is on https but api.trusted_proxies is empty: the "
                           "proxy's X-Forwarded-Proto is ignored, the session cookie is not Secure",
                           "api.trusted_proxies = [\"127.0.0.1\"] (the proxy's address)")
    if oidc is not None and oidc.redirect_url.startswith("http://") and not _loopback(api.host):
        return CheckResult("tls-proxy", "fail", "single sign-on redirects to plain http", "serve it behind the TLS "
                           "proxy and set auth.oidc.redirect_url to https://")
    if not _loopback(api.host) and not nets:
        return CheckResult("tls-proxy", "warn", f"the API serves plain HTTP on {api.host}:{api.port} with no proxy "
                           "named", "bind api.host = \"127.0.0.1\" behind nginx (slurmtower init writes a snippet)")
    if not nets:
        return CheckResult("tls-proxy", "ok", f"the API listens on {api.host}:{api.port}; no proxy named "
                           "(api.trusted_proxies: add the proxy's address if one forwards to it)")
    return CheckResult("tls-proxy", "ok", f"the API listens on {api.host}:{api.port} behind "
                       f"{', '.join(api.trusted_proxies)}")


#: The checks in the order they run, by name.
CHECKS: dict[str, Callable[[_Context], CheckResult]] = {
    "slurm-commands": check_commands,
    "munge": check_munge,
    "slurmctld": check_slurmctld,
    "slurm-release": check_release,
    "operator": check_operator,
    "accounting-db": check_accounting,
    "sensor-triggers": check_triggers,
    "notify-program": check_notify_program,
    "store": check_store,
    "clock": check_clock,
    "tls-proxy": check_tls_proxy,
}


#: The checks of the deployment as a whole (one store, one listening API); the others are run
#: once per cluster of ``[[clusters]]`` (its Slurm, munge, accounting, sensor and clock).
DEPLOYMENT_CHECKS = frozenset({"store", "tls-proxy"})


def run_checks(settings: Settings, *, only: Iterable[str] | None = None,
               runner: CommandRunner | None = None, cluster: str | None = None) -> list[CheckResult]:
    """Run the checks (all, or those named in ``only``) as this process's user: with
    ``[[clusters]]``, each cluster's (or ``cluster``'s only) with its own Slurm, then the
    deployment's.

    Raises:
        KeyError: a name in ``only`` that is no check.
        ConfigError: ``cluster`` is not one of the deployment's clusters.
    """
    names = list(only) if only else list(CHECKS)
    for n in names:
        if n not in CHECKS:
            raise KeyError(n)
    user = pwd.getpwuid(os.geteuid()).pw_name

    def context(each: Settings) -> _Context:
        run = runner or CommandRunner(timeout=each.slurm.command_timeout, env=each.slurm_env())
        return _Context(settings=each, runner=run, client=CliSlurmClient(run, slurm_user=each.slurm.slurm_user),
                        user=user)

    deployment = settings.deployment()
    if not deployment.clusters:
        if cluster is not None and cluster != deployment.cluster_names()[0]:
            raise ConfigError(f"no cluster {cluster!r} (clusters: {deployment.cluster_names()[0]})", key="clusters")
        ctx = context(deployment)
        return [CHECKS[n](ctx) for n in names]
    chosen = [cluster] if cluster is not None else deployment.cluster_names()
    results: list[CheckResult] = []
    for name in chosen:
        ctx = context(deployment.for_cluster(name))  # ConfigError for an unknown name
        results.extend(replace(CHECKS[n](ctx), cluster=name) for n in names if n not in DEPLOYMENT_CHECKS)
    ctx = context(deployment.for_cluster(deployment.cluster_names()[0]))
    results.extend(CHECKS[n](ctx) for n in names if n in DEPLOYMENT_CHECKS)
    return results


def doctor_failed(results: Iterable[CheckResult]) -> bool:
    """Any check failed (doctor's exit status is then non-zero)."""
    return any(r.status == "fail" for r in results)
