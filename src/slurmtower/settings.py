"""slurmtower's configuration: one settings object built at start-up, never at import.

Sources, lowest to highest precedence: defaults, one TOML or YAML file
(``--config`` or ``$SLURMTOWER_CONFIG``), environment variables ``SLURMTOWER_<SECTION>__<KEY>``
(e.g. ``SLURMTOWER_API__PORT=8080``). Unknown keys are an error naming the key. Secrets are
:class:`~pydantic.SecretStr` and are masked by :func:`describe`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from slurmtower.errors import ConfigError
from slurmtower.models import Job
from slurmtower.models.accounting import HistoryJob
from slurmtower.principal import ROLES, Role

__all__ = [
    "TOKEN_ROLES",
    "AccountingSettings",
    "ActionSettings",
    "ApiSettings",
    "ApprovalSettings",
    "ArchiverSettings",
    "AuthSettings",
    "ClusterSettings",
    "EventSettings",
    "ForwardTarget",
    "HookSettings",
    "McpSettings",
    "OidcSettings",
    "Settings",
    "SlurmSettings",
    "TokenEntry",
    "TwoPersonRule",
    "describe",
    "load_settings",
]

ENV_PREFIX = "SLURMTOWER_"
DEFAULT_STATE_DIR = Path("/var/lib/slurmtower")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SlurmSettings(_Section):
    backend: Literal["cli", "rest"] = "cli"
    """Where reads come from: the Slurm commands, or slurmrestd. Writes always use the CLI
    where slurmrestd cannot do them."""
    slurm_conf: Path | None = None
    """SLURM_CONF handed to every Slurm command (default: Slurm's own default)."""
    bin_dir: Path | None = None
    """Directory of the Slurm commands (default: PATH)."""
    slurm_user: str = "slurm"
    """SlurmUser: the only user that may set triggers."""
    command_timeout: float = 30.0
    rest_url: str | None = None
    """slurmrestd base URL, e.g. http://127.0.0.1:6820 or unix:/run/slurmrestd/slurmrestd.socket."""
    rest_user: str = "root"
    rest_token: SecretStr | None = None
    """A JWT for slurmrestd (X-SLURM-USER-TOKEN)."""
    rest_jwt_key_file: Path | None = None
    """Instead of a fixed token: the HS256 key file to mint short-lived tokens from."""
    rest_api_version: str | None = Field(default=None, pattern=r"^v0\.0\.\d+$")
    """Pin slurmrestd's API version (e.g. ``v0.0.44``); default: the newest offered that slurmtower
    parses. ``slurmtower info`` warns when the pinned version is deprecated."""


class AccountingSettings(_Section):
    url: SecretStr | None = None
    """SQLAlchemy URL of slurmdbd's database, e.g. mysql+pymysql://reader:pw@127.0.0.1/slurm_acct_db."""
    cluster: str | None = None
    """Cluster whose tables to read (default: the Slurm cluster name)."""
    job_table: str | None = None
    assoc_table: str | None = None
    step_table: str | None = None
    time_zone: str = "UTC"
    """The zone slurmdbd runs in: its day and month rollups follow its local midnights, and the
    usage reports cut days, weeks and months in it."""
    connect_timeout: float = 5.0
    query_timeout: float = 10.0
    request_wait: float = Field(default=4.0, gt=0)
    """How long an API request waits for the database before its 503 (the read goes on in its
    thread until connect_timeout / query_timeout end it)."""
    max_concurrency: int = Field(default=4, ge=1, le=64)
    """Database reads the API runs at once, in threads of their own (never the ones that serve
    authentication, the sensor and the snapshot); past that, a 503 at once."""


class ApiSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8642, ge=1, le=65535)
    #: The largest body ``POST /actions/{name}`` reads (bigger: 413, nothing run or recorded).
    max_action_body_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    trusted_proxies: list[str] = Field(default_factory=list, max_length=100)
    """Addresses or networks (``10.0.0.5``, ``10.0.0.0/24``) of the reverse proxies whose
    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed. Default: none, so a client's
    address is its connection's and no caller can name another (the failed-login limit and
    the callback guard count per address). Name your proxy here (``127.0.0.1`` when it runs
    on the same host)."""
    serve_index: bool = False
    refresh_interval: float = Field(default=2.0, gt=0)
    """At most one Slurm query per resource per this many seconds, whatever the client count
    (the shortest interval: it grows when refreshing costs more than ``refresh_cpu_share``)."""
    refresh_cpu_share: float = Field(default=0.25, ge=0, le=4)
    """The share of one core that refreshing every live resource once per interval may cost;
    when the measured rounds cost more (a big queue), the interval grows so they don't. 0: fixed."""
    refresh_controller_share: float = Field(default=0.045, ge=0, le=1)
    """The same for slurmctld: the share of its time that all of slurmtower's reads may take
    (each RPC type's time in sdiag, measured around the reads themselves): the sensor's node
    polls at most a quarter of it (``events.poll_interval`` stretched past that), the job
    state reads at most half, the full reads what is left (at least a quarter). 0: not bounded."""
    refresh_ahead: bool = True
    """While clients read a live resource, start its next Slurm read on a timer so that its
    data is taken as the interval ends (a 2 s poller of a queue refreshed every 6 s sees data
    0-6 s old instead of up to 14 s); off: the first request past the interval starts it."""
    max_refresh_interval: float = Field(default=60.0, gt=0)
    """The refresh interval grows past this many seconds only for slurmctld's share
    (``refresh_controller_share``), never for the CPU's; the state reads are never further
    apart (the sensor's polls: ``events.max_poll_interval``)."""
    slurm_wait: float = Field(default=4.0, gt=0)
    """How long a request waits for Slurm, in all (the resources of one view are asked at
    once), before answering with the last snapshot marked stale, or a 503 without one. A
    request joining a query that has already run this long answers at once."""
    serve_stale: bool = True
    """When Slurm does not answer, serve the last snapshot marked stale (``"stale": true``,
    ``X-Data-Stale``) instead of a 503. Off: a 503 problem even when a snapshot exists."""
    hidden_partitions: list[str] = Field(default_factory=list)
    """Partitions hidden everywhere (:mod:`slurmtower.visibility`): every route, read action,
    dashboard page and metric; a node only in hidden partitions is hidden too."""
    private_job_fields: list[str] = Field(default_factory=lambda: [
        "submit_line", "command", "work_dir", "standard_output", "standard_error"])
    """Job fields (live and accounting) that readers see only on their own jobs (a principal
    whose name is the job's user name), like Slurm's ``PrivateData=jobs``: submit lines often
    hold secrets. Operators and admins see them on every job."""
    readers_see_private_job_fields: bool = False
    """Readers see :attr:`private_job_fields` on every user's jobs too."""
    reports_for_readers: Literal["all", "totals", "none"] = "totals"
    """What readers see of the usage reports (``/reports``): every figure, totals only (the
    cluster, partitions, QOS and accounts, no one user's figures), or none."""
    reports_for_users: Literal["all", "own", "totals", "none"] = "own"
    """What the ``user`` role sees of the usage reports: every figure, their own usage and
    their accounts' totals (besides the cluster's, partitions' and QOS's), totals only, or none.
    Operators and admins see every figure."""

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"not an address or network: {entry!r}") from None
        return value

    def server_options(self) -> dict[str, Any]:
        """What the HTTP server (uvicorn) is told: the keep-alive, and which peers' forwarded
        headers to believe (none unless ``trusted_proxies`` names them)."""
        return {"timeout_keep_alive": self.keep_alive, "proxy_headers": bool(self.trusted_proxies),
                "forwarded_allow_ips": ",".join(self.trusted_proxies) or ""}

    @field_validator("private_job_fields")
    @classmethod
    def _known_job_fields(cls, value: list[str]) -> list[str]:

        known = set(Job.model_fields) | set(HistoryJob.model_fields)
        unknown = [f for f in value if f not in known]
        if unknown:
            raise ValueError(f"not job fields: {', '.join(unknown)}")
        return value
    workers: int = Field(default=1, ge=1)
    keep_alive: int = Field(default=75, ge=1, le=3600)
    """Seconds an idle HTTP/1.1 connection is kept open (uvicorn's ``timeout_keep_alive``).
    Longer than a proxy's idle upstream connections (nginx's upstream ``keepalive_timeout``,
    60 s; a cloud load balancer's idle timeout, 60 s), so a proxy never sends a request on
    a connection the server is closing that same moment (a reset: a 502 for a POST, which
    nginx does not retry elsewhere). uvicorn's own default is 5 s."""
    leader_interval: float = Field(default=2.0, gt=0, le=60)
    """How often a follower tries to become the deployment's leader (and the leader checks
    it still is): a dead leader is replaced within about this long plus the sensor's start."""
    keep_snapshots_interval: float = Field(default=30.0, ge=0, le=3600)
    """Every this many seconds, the snapshots this process read from Slurm are written to
    ``<state_dir>/snapshots`` (when they changed); a restarted service serves them at once,
    marked stale with their age, until its first read of Slurm (:mod:`slurmtower.live.keep`).
    0: nothing kept, nothing served before the first read."""
    keep_snapshots_max_age: float = Field(default=600.0, gt=0, le=7 * 86400)
    """A kept snapshot older than this many seconds is not served as the live data at start
    (a queue ten minutes old is not the queue); the job table in it still saves the first
    read's parsing (the refresh worker reads only the lines that changed since)."""
    state_refresh_interval: float = Field(default=1.5, ge=0.5, le=60)
    """Seconds between two reads of the job states alone (23.11+: ``squeue
    --only-job-state``, slurmctld packs each job's id and state only; slurmrestd's
    ``/jobs/state``), while clients read the queue: a job that started, ended or was held
    shows its new state within this long, however long the full records' interval is (the
    ``X-State-Age`` header). Grows when the reads cost more than half of
    ``refresh_controller_share``, to four times this at most (a busy scheduler's lock waits
    can make one read cost slurmctld a second). On 22.05 (no such read) the states are the
    full records'."""
    refresh_in_subprocess: bool = True
    """Read and render the job queue in a worker process (off the serving process's GIL),
    so a refresh of thousands of jobs does not stall the requests served meanwhile."""
    shared_cache_url: SecretStr | None = None
    """Redis URL of the deployment's shared snapshot, e.g. ``redis://127.0.0.1:6379/0``
    (``rediss://`` for TLS; user and password in the URL): one elected process queries Slurm,
    the others serve its snapshots. None: each process refreshes alone."""
    shared_cache_prefix: str | None = Field(default=None, min_length=1, max_length=200)
    """Key prefix naming the deployment on that Redis. Default: the cluster name and a digest of
    the store URL (processes sharing a store share it; two deployments never mix)."""
    shared_cache_timeout: float = Field(default=0.5, gt=0, le=30)
    """A Redis operation slower than this (or failing) makes the process refresh alone until
    Redis answers again (the values' GET and SET get ten times as long)."""
    shared_cache_compression: int = Field(default=0, ge=0, le=9)
    """zlib level of the shared tables' rows (0: none). 100,000 jobs: 50 MB raw, 10 MB at
    level 1, which costs the refresher ~0.3 s more per changed round; worth it across a slow
    link between hosts."""


class ArchiverSettings(_Section):
    archive_usage_load: bool = True
    archive_wait_time: float = Field(default=60.0, gt=0)
    retention_days: float = Field(default=30.0, gt=0)
    max_backoff: float = Field(default=300.0, gt=0)


class ActionSettings(_Section):
    retention_days: float = Field(default=90.0, gt=0)
    """Executions (``GET /executions/{id}``) older than this are purged."""
    audit_retention_days: float = Field(default=400.0, gt=0)
    """Audit records older than this are purged (by the same task): a year and a month by
    default, for a yearly review."""
    purge_interval: float = Field(default=3600.0, gt=0)
    """Seconds between two purges of old executions (by the leader of the ``archiver`` role)."""
    record_reads: bool = False
    """Also keep the envelopes of read-only actions (``slurm.node.get`` ...); mutating ones
    are always kept."""
    maintenance_interval: float = Field(default=10.0, gt=0, le=3600)
    """Seconds between two rounds of the maintenance runs (``slurm.node.maintain``): how soon a
    node that became idle, or a check that ended, moves on."""
    breaker_enabled: bool = True
    """The circuit breaker of ``slurm.node.drain`` and ``slurm.node.down`` (every source: CLI,
    API, rules): see :mod:`slurmtower.actions.breaker` and the README."""
    breaker_share: float = Field(default=0.10, gt=0, le=1)
    """At most this share of a partition's nodes out of service for reasons that arose within
    ``breaker_window`` (slurmtower's drains and downs and those made outside it)."""
    breaker_cluster_share: float = Field(default=0.10, gt=0, le=1)
    """The same for the whole cluster."""
    breaker_window: float = Field(default=600.0, gt=0)
    """Seconds: a node out of service for longer than this no longer counts."""
    breaker_min_nodes: int = Field(default=1, ge=1)
    """The limit is never under this many nodes, however small the partition (10 % of 8 nodes:
    still one node per window)."""
    breaker_partition_shares: dict[str, float] = Field(default_factory=dict)
    """Per-partition shares instead of ``breaker_share``, e.g. ``{gpu = 0.05}``."""
    job_breaker_enabled: bool = True
    """The breaker of bulk job actions (every one: cancel, signal, hold, release, requeue,
    suspend, resume, update; jobs counted as Slurm counts them, each array task and het-job
    component): see :mod:`slurmtower.actions.jobs`."""
    job_breaker_share: float = Field(default=0.5, gt=0, le=1)
    """At most this share of the queue acted on within ``breaker_window`` ..."""
    job_breaker_min_jobs: int = Field(default=100, ge=1)
    """... and never fewer than this many jobs, however short the queue."""
    job_admin_comment_max: int = Field(default=1000, ge=0, le=10_000)
    """Set Slurm's ``AdminComment`` of the jobs a job action changes to who acted through
    slurmtower (``slurmtower: cancel by alice@api (<execution>)``; it replaces the one before)
    when the call acts on at most this many jobs: each is one RPC in slurmctld (a bigger call is
    named by its audit record and events only); 0: never."""

    reservation_max_days: float = Field(default=31.0, gt=0, le=3650)
    """The longest window ``slurm.reservation.create`` and ``.update`` accept (its end minus its
    start, in days); longer is bad input. ``slurm.node.reserve``'s open-ended maintenance
    reservations are not bounded by it."""

    @field_validator("breaker_partition_shares")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, v in value.items() if not 0 < v <= 1)
        if bad:
            raise ValueError(f"shares are in (0, 1]: {', '.join(bad)}")
        return value


class EventSettings(_Section):
    poll_interval: float = Field(default=1.0, gt=0)
    """Seconds between two polls of the node states (transitions no trigger reports), or
    longer when a poll costs slurmctld more than a quarter of ``api.refresh_controller_share``
    over it (at most ``max_poll_interval``); rules run on the events others recorded
    (alerts) every this many seconds."""
    max_poll_interval: float = Field(default=10.0, gt=0, le=3600)
    """The node polls are never further apart than this, whatever they cost: a node event
    comes within it (Slurm runs its triggers every 15 s at most). At 10,000 nodes under a
    scheduler busy with 160,000 pending records one poll took slurmctld 0.1-1 s (its lock
    waits): then the polls alone may take more than the share, and the full reads get the
    quarter left to them."""
    retention_days: float = Field(default=90.0, gt=0)
    callback_host: str = "127.0.0.1"
    """Host the notify program posts to (the sensor's receiver)."""
    key_file: Path | None = None
    """HMAC key shared by the notify program and the receiver; readable by SlurmUser only.
    Default: <state_dir>/sensor.key."""
    max_clock_skew: float = 60.0
    job_triggers: list[int] = Field(default_factory=list)
    rules_dir: Path | None = None
    rules_config: dict[str, Any] = Field(default_factory=dict)
    """What rules read as ``config.<key>`` besides slurmtower's own keys (``notify_program``,
    ``python``, ``callback_url``, ``key_file``, ``cluster_name``): e.g. ``webhook_url`` for
    the webhook example, ``chassis`` (node -> the node set of its chassis) for the chassis
    one. Never put secrets here: templates may copy them into actions."""
    webhook_secret: SecretStr | None = None
    sensor_enabled: bool = True
    """Run the sensor inside ``slurmtower serve`` (off: only ``slurmtower sensor`` runs it)."""
    callback_port: int | None = Field(default=None, ge=1, le=65535)
    """Port the notify program posts to (default: api.port; ``slurmtower sensor`` listens here)."""
    node_trigger_events: list[str] = Field(default_factory=lambda: ["down", "drained", "up", "fail"])
    """Node strigger events armed as PERM triggers (plus ``reconfig``). ``idle`` is left out on
    purpose: a PERM idle trigger fires every 16 s for as long as a node stays idle."""
    notify_program: Path | None = None
    """Where the notify program is installed for SlurmUser (default: <state_dir>/slurmtower-notify.py);
    SlurmUser must be able to traverse its directory."""
    notify_python: Path = Path("/usr/bin/python3")
    """Interpreter that runs the notify program (standard library only)."""


class ForwardTarget(_Section):
    """One receiver of forwarded events (``[[hooks.forward]]``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    """Names the target in logs, ``/metrics`` and its cursor in the store (keep it stable)."""
    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2000)
    format: Literal["cloudevents", "st2"] = "cloudevents"
    """``cloudevents``: a CloudEvents 1.0 JSON document (structured mode). ``st2``:
    StackStorm's webhook API (``.../api/v1/webhooks/<name>``: the event as JSON; the generic
    ``.../api/v1/webhooks/st2``: ``{"trigger": <event type>, "payload": <event payload>}``)."""
    types: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    """Event types sent, as shell globs (``slurm.node.*``, ``alert.*``)."""
    api_key: SecretStr | None = None
    """StackStorm API key, sent as ``St2-Api-Key``."""
    bearer_token: SecretStr | None = None
    """Sent as ``Authorization: Bearer ...``."""
    secret: SecretStr | None = None
    """Signs each request like the rules' webhook action (``X-Slurmtower-Signature``)."""
    timeout: float = Field(default=5.0, gt=0, le=120)
    """Seconds per attempt."""
    max_age: float = Field(default=86400.0, gt=0)
    """An event older than this when its turn comes (the receiver was down) is dropped, counted."""


class HookSettings(_Section):
    """Alerts in (``POST /hooks/alertmanager``, ``POST /hooks/generic``), events out (``forward``)."""

    enabled: bool = True
    """Accept alerts (the routes answer 404 when off; forwarding does not depend on it)."""
    node_labels: list[str] = Field(default_factory=lambda: ["node", "nodename", "hostname", "instance"])
    """Alert labels naming the node, first present wins; a ``host:port`` or URL gives its host."""
    strip_domain: bool = True
    """``n3.cluster.example.org`` names node ``n3``."""
    generic_secret: SecretStr | None = None
    """HMAC key of ``POST /hooks/generic`` (unset: that route refuses every request)."""
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Bodies over this are refused (413) before they are read in full."""
    dedupe_window: float = Field(default=86400.0, ge=0)
    """An alert already recorded in the same state (fingerprint, start time) within this many
    seconds is not recorded again (Alertmanager re-sends whole groups). 0: record every copy."""
    forward: list[ForwardTarget] = Field(default_factory=list)
    forward_interval: float = Field(default=1.0, gt=0, le=60)
    """Seconds between two reads of the event log by each forwarding target."""
    forward_max_backoff: float = Field(default=60.0, gt=0, le=3600)
    """Longest wait between two attempts at a receiver that does not take an event."""
    cloudevents_source: str | None = Field(default=None, min_length=1, max_length=500)
    """The CloudEvents ``source`` (default ``/slurmtower/<cluster name>``)."""

    @field_validator("forward")
    @classmethod
    def _unique_targets(cls, value: list[ForwardTarget]) -> list[ForwardTarget]:
        names = [t.name for t in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"forward target names must be unique: {', '.join(twice)}")
        return value


#: An action name or a shell glob of them, as ``[approvals]`` takes it (``slurm.trigger.*``).
ACTION_PATTERN = r"^slurm\.[a-z0-9_.*]{1,60}$"


def _default_requestable() -> dict[Role, list[str]]:
    return {"user": ["slurm.reservation.create"]}


class TwoPersonRule(_Section):
    """One act that needs a second person (``[[approvals.two_person]]``): whoever asks, an
    operator or admin other than the asker approves before it runs."""

    action: str = Field(pattern=ACTION_PATTERN)
    """The action (``slurm.node.drain``) or a glob of actions (``slurm.trigger.*``)."""
    more_than_nodes: int | None = Field(default=None, ge=0)
    """Only when the act names more nodes than this (its ``nodes``); unset: any size."""
    more_than_jobs: int | None = Field(default=None, ge=0)
    """Only when the act would change more jobs than this (its dry run's count: each array
    task and het-job component is one); unset: any size."""
    approver_role: Literal["operator", "admin"] = "operator"
    """The least role of the second person (``admin``: only an admin approves)."""


class ApprovalSettings(_Section):
    """Requests and approvals (``[approvals]``): who may ask for an act it may not do, who
    decides, and the acts that need two people (:mod:`slurmtower.actions.approvals`)."""

    requestable: dict[Role, list[str]] = Field(default_factory=_default_requestable)
    """Role -> the actions (names or globs) a caller of that role may *request* when it may
    not run them: the call answers 202 with a request and changes nothing until someone
    approves it. A ``user``'s reservation request must be for itself (its ``users``) or its
    accounts."""
    approver_role: Literal["operator", "admin"] = "operator"
    """The least role that decides a request (approve or deny); never the requester."""
    two_person: list[TwoPersonRule] = Field(default_factory=list, max_length=100)
    """Acts that need a second operator or admin, e.g. ``{action = "slurm.node.drain",
    more_than_nodes = 8}``, ``{action = "slurm.job.cancel", more_than_jobs = 100}``,
    ``{action = "slurm.trigger.*"}``: from every path (HTTP, CLI, rules), the act becomes a
    request that another person approves."""
    request_ttl_hours: float = Field(default=24.0, gt=0, le=24 * 90)
    """A pending request expires this long after it was made."""
    expiry_interval: float = Field(default=60.0, gt=0, le=3600)
    """Seconds between two sweeps that expire overdue requests (each expiry is an event)."""
    max_reason_length: int = Field(default=1000, ge=1, le=10_000)
    """The longest free-text reason a request or a decision's comment may carry."""

    @field_validator("requestable")
    @classmethod
    def _patterns(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        pattern = re.compile(ACTION_PATTERN)
        for role, names in value.items():
            bad = [n for n in names if not pattern.match(n)]
            if bad:
                raise ValueError(f"{role}: not an action name or glob: {bad[0]!r}")
        return value


class McpSettings(_Section):
    """The agent endpoint (``[mcp]``): ``/mcp`` on ``slurmtower serve`` and ``slurmtower mcp``
    over stdio (:mod:`slurmtower.mcp`). An agent's principal is its token's; what it may do is
    its role's, as over HTTP."""

    enabled: bool = True
    """Serve ``/mcp`` (off: the route answers 404)."""
    confirm_seconds: float = Field(default=300.0, gt=0, le=86400)
    """A mutating tool answers with its dry run's plan and a confirmation id; acting takes
    that id within this many seconds, once, with the same parameters."""
    act_directly: dict[str, list[str]] = Field(default_factory=dict, max_length=1000)
    """Principal (a token's name) -> the actions (names or globs) its agent runs at once when
    confirmed. Any other confirmed act becomes a request a person approves (``/requests``);
    a two-person rule (``approvals.two_person``) still applies."""
    page_size: int = Field(default=50, ge=1, le=1000)
    """Items in one page of a read tool or resource when the agent asks for no ``limit``."""
    max_page_size: int = Field(default=200, ge=1, le=5000)
    """The most items one page may hold (a larger ``limit`` is cut to it)."""
    max_answer_bytes: int = Field(default=256 * 1024, ge=4096, le=16 << 20)
    """The most JSON one answer holds: a catalogue read bigger than this is cut, with its counts."""
    calls_per_minute: int = Field(default=120, ge=0, le=100_000)
    """Tool calls, resource reads and prompts per principal per minute in one process (0: no
    limit); past it a call is refused (``429``) until the minute has passed."""

    @field_validator("act_directly")
    @classmethod
    def _direct(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        pattern = re.compile(ACTION_PATTERN)
        for name, names in value.items():
            bad = [n for n in names if not pattern.match(n)]
            if bad:
                raise ValueError(f"{name}: not an action name or glob: {bad[0]!r}")
        return value


class TokenEntry(_Section):
    name: str = Field(min_length=1, max_length=64)
    role: Role
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    """Hex SHA-256 of the token (``slurmtower token create`` prints the entry)."""
    expires: datetime | None = None
    """When the token stops being accepted (an aware time, e.g. ``2027-06-30T00:00:00Z``)."""

    @field_validator("expires")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("give the time zone (e.g. 2027-06-30T00:00:00Z)")
        return value


#: Token roles; ``alerter`` may post alerts (``POST /hooks/alertmanager``) and nothing else.
TOKEN_ROLES: tuple[str, ...] = ROLES


class OidcSettings(_Section):
    """Single sign-on for people (``[auth.oidc]``): OpenID Connect's authorization code flow
    with PKCE against the provider's discovery document."""

    issuer: str = Field(pattern=r"^https?://[^\s]+$", max_length=2000)
    """The provider's issuer URL (its discovery document is ``<issuer>/.well-known/openid-configuration``;
    the ID token's ``iss`` must be exactly this)."""
    client_id: str = Field(min_length=1, max_length=255)
    client_secret: SecretStr | None = None
    """None: a public client (PKCE alone)."""
    redirect_url: str = Field(pattern=r"^https?://[^\s]+/ui/login/oidc/callback$", max_length=2000)
    """This service's callback as the provider knows it, e.g.
    ``https://tower.example.org/ui/login/oidc/callback`` (never taken from a request's Host)."""
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"], max_length=20)
    username_claim: str = "preferred_username"
    """The claim naming the person: what "own jobs" compares with Slurm's user name."""
    groups_claim: str = "groups"
    """The claim listing the person's groups (a list or a string)."""
    roles: dict[str, Role] = Field(default_factory=dict)
    """Group -> role (``{hpc-admins = "admin", hpc-staff = "operator", hpc-users = "user"}``);
    the highest mapped role wins, and a person with no mapped group is refused."""
    label: str = Field(default="Log in with single sign-on", max_length=100)
    timeout: float = Field(default=10.0, gt=0, le=60)
    """Seconds for each request to the provider."""


class AuthSettings(_Section):
    tokens: list[TokenEntry] = Field(default_factory=list)
    anonymous_read: bool = False
    jwt_key: SecretStr | None = None
    """An HMAC secret (HS256/384/512) or a PEM public key (RS/PS/ES) that signs the JWTs
    accepted; with ``jwt_jwks_url`` instead, the keys published there."""
    jwt_key_file: Path | None = None
    """Instead of ``jwt_key``: a file holding it, read as bytes (Slurm's ``jwt_hs256.key``,
    which is often binary)."""
    jwt_jwks_url: str | None = None
    jwt_algorithms: list[str] = Field(default_factory=lambda: ["HS256", "RS256"])
    """Algorithms accepted at all; each key is further pinned to its own kind (an HMAC secret
    to HS*, a PEM key to the others, a JWKS key to the ``alg`` it publishes)."""
    jwt_issuers: list[str] = Field(default_factory=list, max_length=20)
    """The ``iss`` values accepted. Required with ``jwt_key`` or ``jwt_jwks_url`` (the service
    refuses to start without it): a token from any other issuer is refused."""
    jwt_audience: str | None = None
    """The ``aud`` a token must carry. Required with ``jwt_key`` or ``jwt_jwks_url``."""
    jwt_leeway: float = Field(default=30.0, ge=0, le=300)
    """Seconds of clock skew allowed on a JWT's ``exp``, ``nbf`` and ``iat``."""
    jwt_role_claim: str = "role"
    jwt_groups_claim: str = Field(default="groups", min_length=1, max_length=100)
    """The claim whose groups ``[[clusters]] roles`` may map (``group:<name>``)."""
    slurm_token_role: Role | None = None
    """Accept Slurm's own tokens (``scontrol token``: claims ``sun``, ``exp``, ``iat``, no issuer,
    signed with ``jwt_key`` = Slurm's ``jwt_hs256.key``) as this role, named by their ``sun``.
    Default: refused. Anyone who can run ``scontrol token`` gets this role, so keep it ``reader``
    unless every Slurm user should have more."""
    trigger_program_allowlist: list[str] = Field(default_factory=list)
    login_failures_per_minute: int = 10
    oidc: OidcSettings | None = None
    session_idle_minutes: float = Field(default=60.0, gt=0, le=7 * 24 * 60)
    """A dashboard session unused this long ends."""
    session_hours: float = Field(default=12.0, gt=0, le=30 * 24)
    """A dashboard session ends this long after its login, used or not."""

    def jwt_signing_key(self) -> str | bytes | None:
        """The key of ``jwt_key`` or ``jwt_key_file`` (None: neither is set)."""
        if self.jwt_key_file is not None:
            return self.jwt_key_file.read_bytes()
        return self.jwt_key.get_secret_value() if self.jwt_key is not None else None

    def check(self) -> None:
        """Refuse a JWT configuration that would accept tokens from anyone holding the key.

        Raises :class:`ConfigError` naming the missing key.
        """
        if self.oidc is not None and not self.oidc.roles:
            raise ConfigError("auth.oidc.roles maps no group to a role: nobody could log in",
                              key="auth.oidc.roles")
        if self.jwt_key is not None and self.jwt_key_file is not None:
            raise ConfigError("set auth.jwt_key or auth.jwt_key_file, not both", key="auth.jwt_key_file")
        has_key = self.jwt_key is not None or self.jwt_key_file is not None
        if self.slurm_token_role is not None and not has_key:
            raise ConfigError("auth.slurm_token_role needs auth.jwt_key (Slurm's jwt_hs256.key)",
                              key="auth.jwt_key")
        if not has_key and self.jwt_jwks_url is None:
            return
        if self.jwt_key_file is not None:
            try:
                self.jwt_signing_key()
            except OSError as exc:
                raise ConfigError(f"auth.jwt_key_file {self.jwt_key_file}: {exc.strerror}",
                                  key="auth.jwt_key_file") from exc
        only_slurm = self.slurm_token_role is not None and self.jwt_jwks_url is None and not self.jwt_issuers
        if only_slurm:
            return  # Slurm's tokens only: they carry no issuer and no audience
        for key, missing in (("auth.jwt_issuers", not self.jwt_issuers),
                             ("auth.jwt_audience", not self.jwt_audience)):
            if missing:
                raise ConfigError(f"{key} is required when JWTs are accepted (auth.jwt_key or "
                                  "auth.jwt_jwks_url): without it a token from any issuer is taken",
                                  key=key)


#: What one entry of ``[[clusters]]`` may set of its own, beside its name: the sections that
#: say how to reach its Slurm and its accounting, its sensor, its breakers, and the ``api``
#: keys of its snapshot refresh and what it hides. Everything else (the listener, auth, the
#: store, hooks) is the deployment's, one for every cluster.
CLUSTER_SECTIONS = ("slurm", "accounting", "events", "actions", "archiver")
CLUSTER_API_KEYS = frozenset({
    "hidden_partitions", "private_job_fields", "refresh_interval", "refresh_cpu_share",
    "refresh_controller_share", "refresh_ahead", "max_refresh_interval", "slurm_wait", "serve_stale",
    "refresh_in_subprocess", "keep_snapshots_interval", "keep_snapshots_max_age", "state_refresh_interval"})
#: A cluster's name as Slurm spells ClusterName (lower case, a URL path segment as it is).
CLUSTER_NAME = r"^[a-z0-9][a-z0-9_-]{0,39}$"


class ClusterSettings(_Section):
    """One entry of ``[[clusters]]``: a cluster this deployment serves.

    Its sections are merged over the top-level ones (``[slurm]``, ``[accounting]`` ... are the
    defaults of every cluster); :meth:`Settings.for_cluster` gives the settings the cluster's
    services run with. Checked when the file is loaded: an unknown key names its entry.
    """

    name: str = Field(pattern=CLUSTER_NAME)
    """The cluster's name in slurmtower's URLs (``/clusters/{name}/queue``), events and audit;
    its Slurm ClusterName and accounting cluster unless ``accounting.cluster`` says otherwise."""
    default: bool = False
    """Routes without a cluster answer for this one (default: the first entry)."""
    label: str | None = Field(default=None, max_length=100)
    slurm: dict[str, Any] = Field(default_factory=dict)
    accounting: dict[str, Any] = Field(default_factory=dict)
    events: dict[str, Any] = Field(default_factory=dict)
    actions: dict[str, Any] = Field(default_factory=dict)
    archiver: dict[str, Any] = Field(default_factory=dict)
    api: dict[str, Any] = Field(default_factory=dict)
    """Only the keys of :data:`CLUSTER_API_KEYS` (refresh and hidden partitions)."""
    roles: dict[str, Role] = Field(default_factory=dict, max_length=1000)
    """Roles on this cluster by principal name (a token's name, a person's login) or by group
    (``group:<name>``: a sign-on's groups, ``auth.oidc.groups_claim``, or a JWT's,
    ``auth.jwt_groups_claim``): a person who is an operator here and a reader elsewhere. It
    replaces the deployment role here (a name before its groups; of several groups the highest)."""
    max_role: Role | None = None
    """The highest role anyone not in ``roles`` has here (``reader``: the deployment's
    operators and admins only read this cluster). ``None``: their deployment role."""


class Settings(_Section):
    cluster_name: str | None = None
    """The Slurm cluster name (default: read from Slurm's config)."""
    clusters: list[ClusterSettings] = Field(default_factory=list, max_length=64)
    """Several clusters behind one tower (``[[clusters]]``); none: the one cluster the
    top-level sections describe, as before."""
    state_dir: Path = DEFAULT_STATE_DIR
    store_url: SecretStr | None = None
    """slurmtower's own store (events, audit, archive). Default: sqlite under state_dir."""
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    accounting: AccountingSettings = Field(default_factory=AccountingSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    archiver: ArchiverSettings = Field(default_factory=ArchiverSettings)
    actions: ActionSettings = Field(default_factory=ActionSettings)
    events: EventSettings = Field(default_factory=EventSettings)
    hooks: HookSettings = Field(default_factory=HookSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)

    @field_validator("state_dir")
    @classmethod
    def _abs(cls, v: Path) -> Path:
        return v.expanduser()

    def cluster_names(self) -> list[str]:
        """The clusters served, the default first (one name, ``cluster_name`` or ``default``,
        without ``[[clusters]]``)."""
        if not self.clusters:
            return [self.cluster_name or "default"]
        first = next((c for c in self.clusters if c.default), self.clusters[0])
        return [first.name, *(c.name for c in self.clusters if c is not first)]

    def for_cluster(self, name: str) -> Settings:
        """The settings ``name``'s services run with: the top-level sections with the cluster's
        own merged over them, its name as ``cluster_name``, one store for every cluster, and its
        own state (snapshots, the sensor's key and program) under ``state_dir/clusters/<name>``
        (the default cluster keeps ``state_dir``, so one cluster's files stay where they were).

        Raises :class:`ConfigError` naming the entry's bad key.
        """
        if not self.clusters:
            return self
        entry = next((c for c in self.clusters if c.name == name), None)
        if entry is None:
            raise ConfigError(f"no cluster {name!r} (clusters: {', '.join(self.cluster_names())})",
                              key="clusters")
        index = self.clusters.index(entry)
        base = self.model_dump(exclude={"clusters"})
        # the secrets as values (model_dump keeps SecretStr objects; validation takes them back)
        over: dict[str, Any] = {section: getattr(entry, section) for section in CLUSTER_SECTIONS}
        bad = sorted(set(entry.api) - CLUSTER_API_KEYS)
        if bad:
            raise ConfigError(f"clusters[{index}].api.{bad[0]} is the deployment's, not a cluster's "
                              f"(a cluster may set: {', '.join(sorted(CLUSTER_API_KEYS))})",
                              key=f"clusters.{index}.api.{bad[0]}")
        over["api"] = entry.api
        over["cluster_name"] = entry.name
        over["store_url"] = SecretStr(self.effective_store_url())
        if name != self.cluster_names()[0]:
            state = self.state_dir / "clusters" / entry.name
            over["state_dir"] = state
            if "key_file" not in entry.events:
                over["events"] = {**entry.events, "key_file": state / "sensor.key"}
        try:
            derived = Settings.model_validate(_merge(base, over))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            what = "unknown key" if err["type"] == "extra_forbidden" else f"invalid value ({err['msg']})"
            raise ConfigError(f"clusters[{index}] ({entry.name}): {what} {loc!r}",
                              key=f"clusters.{index}.{loc}") from exc
        object.__setattr__(derived, "_sources", getattr(self, "_sources", {}))
        object.__setattr__(derived, "_path", getattr(self, "_path", None))
        object.__setattr__(derived, "_deployment", self)
        return derived

    def cluster_key(self) -> str:
        """What the store's ``cluster`` column holds for this cluster's rows: ``''`` for the
        deployment's default cluster (a one-cluster deployment's rows never change), its name
        for the others."""
        deployment = self.deployment()
        if not deployment.clusters or self.cluster_name == deployment.cluster_names()[0]:
            return ""
        return self.cluster_name or ""

    def cluster_label(self) -> str | None:
        """The cluster's name as records show it; ``None`` in a one-cluster deployment."""
        return self.cluster_name if self.deployment().clusters else None

    def store_cluster(self) -> dict[str, Any]:
        """The keyword arguments of a store scoped to this cluster (``ActionStore``)."""
        return {"cluster": self.cluster_key(), "cluster_name": self.cluster_label()}

    def cluster_entry(self) -> ClusterSettings | None:
        """This cluster's ``[[clusters]]`` entry (``None`` in a one-cluster deployment)."""
        return next((c for c in self.deployment().clusters if c.name == self.cluster_name), None)

    def role_groups(self) -> frozenset[str]:
        """Every group some cluster gives a role (``group:<name>`` in ``[[clusters]] roles``):
        what a session or a JWT keeps of a person's groups."""
        return frozenset(key.removeprefix("group:") for c in self.deployment().clusters for key in c.roles
                         if key.startswith("group:"))

    def deployment(self) -> Settings:
        """The settings as loaded, every cluster in them (``self`` for a one-cluster file)."""
        # The instance's own dict: every authenticated request asks (api/security.py), and
        # pydantic's getattr of an absent private name raises on its way to the default.
        found: Settings = self.__dict__.get("_deployment", self)
        return found

    def effective_store_url(self) -> str:
        if self.store_url is not None:
            return self.store_url.get_secret_value()
        return f"sqlite:///{self.state_dir / 'slurmtower.db'}"

    def effective_key_file(self) -> Path:
        return self.events.key_file or self.state_dir / "sensor.key"

    def slurm_env(self) -> dict[str, str]:
        """Environment for Slurm commands."""
        env: dict[str, str] = {}
        if self.slurm.slurm_conf:
            env["SLURM_CONF"] = str(self.slurm.slurm_conf)
        if self.slurm.bin_dir:
            env["PATH"] = f"{self.slurm.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return env


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        if path.suffix in {".yaml", ".yml"}:
            data = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} does not parse: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


#: Variables for HTTP clients of slurmtower (``devcluster env`` exports them), not settings.
_CLIENT_VARS = {f"{ENV_PREFIX}URL", f"{ENV_PREFIX}TOKEN"}


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX) or key == f"{ENV_PREFIX}CONFIG":
            continue
        if key.startswith(f"{ENV_PREFIX}DEVCLUSTER_") or key in _CLIENT_VARS:
            # The devcluster instance, or a client's URL and token: not settings.
            continue
        path = key[len(ENV_PREFIX) :].lower().split("__")
        cur = out
        for part in path[:-1]:
            cur = cur.setdefault(part, {})
        leaf: Any = value
        if value.startswith(("[", "{")):
            try:
                leaf = yaml.safe_load(value)
            except yaml.YAMLError:
                leaf = value
        cur[path[-1]] = leaf
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _sources(file_data: dict[str, Any], env_data: dict[str, Any]) -> dict[str, str]:
    src: dict[str, str] = {}

    def walk(d: dict[str, Any], prefix: str, label: str) -> None:
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                walk(v, key + ".", label)
            else:
                src[key] = label

    walk(file_data, "", "file")
    walk(env_data, "", "env")
    return src


def load_settings(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Build the settings from defaults, the config file and the environment.

    Raises :class:`ConfigError` naming the unknown or invalid key.
    """
    environ = dict(os.environ if environ is None else environ)
    cfg_path = path or environ.get(f"{ENV_PREFIX}CONFIG")
    file_data = _read_file(Path(cfg_path)) if cfg_path else {}
    env_data = _env_overrides(environ)
    try:
        settings = Settings.model_validate(_merge(file_data, env_data))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"unknown config key {loc!r}", key=loc) from exc
        raise ConfigError(f"invalid config value for {loc!r}: {err['msg']}", key=loc) from exc
    settings.auth.check()
    object.__setattr__(settings, "_sources", _sources(file_data, env_data))
    object.__setattr__(settings, "_path", str(cfg_path) if cfg_path else None)
    _check_clusters(settings)
    return settings


def _check_clusters(settings: Settings) -> None:
    """Refuse a ``[[clusters]]`` list that cannot run: names twice, two defaults, an entry
    whose merged settings do not validate, two clusters on one slurm.conf or callback port."""
    seen: set[str] = set()
    for i, entry in enumerate(settings.clusters):
        if entry.name in seen:
            raise ConfigError(f"clusters[{i}]: cluster {entry.name!r} listed twice", key=f"clusters.{i}.name")
        seen.add(entry.name)
    defaults = [c.name for c in settings.clusters if c.default]
    if len(defaults) > 1:
        raise ConfigError(f"clusters: more than one default ({', '.join(defaults)})", key="clusters")
    confs: dict[str, str] = {}
    ports: dict[int, str] = {}
    for i, entry in enumerate(settings.clusters):  # i: the entry's place in the file, as errors name it
        name = entry.name
        derived = settings.for_cluster(name)
        where = (f"{derived.slurm.backend}:{derived.slurm.rest_url}" if derived.slurm.backend == "rest"
                 else str(derived.slurm.slurm_conf or "(default slurm.conf)"))
        if where in confs:
            raise ConfigError(f"clusters {confs[where]!r} and {name!r} reach the same Slurm ({where})",
                              key=f"clusters.{i}.slurm")
        confs[where] = name
        port = derived.events.callback_port
        if port is not None and derived.events.sensor_enabled:
            if port in ports:
                raise ConfigError(f"clusters {ports[port]!r} and {name!r} share the sensor's callback port {port}",
                                  key=f"clusters.{i}.events.callback_port")
            ports[port] = name


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """(key, value, source) for every setting, secrets masked."""
    sources: dict[str, str] = getattr(settings, "_sources", {})
    rows: list[tuple[str, str, str]] = []

    def walk(model: BaseModel, prefix: str) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            key = f"{prefix}{name}"
            if isinstance(value, BaseModel):
                walk(value, key + ".")
                continue
            if isinstance(value, SecretStr):
                shown = "**********"
            elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
                shown = repr([v.model_dump(exclude={"sha256"}) for v in value])
            else:
                shown = "" if value is None else str(value)
            rows.append((key, shown, sources.get(key, "default")))

    walk(settings, "")
    return rows
