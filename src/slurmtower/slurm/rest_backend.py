"""The slurmrestd backend: reads over slurmrestd's REST API, returning the same models.

It detects the API versions the server offers (``/openapi/v3``) and uses the newest one it
knows (or the one ``slurm.rest_api_version`` pins); what it can do comes from the same
document: a ``POST`` on ``node/{node_name}`` (node updates, 23.02+), ``GET conf`` (the running
configuration, 26.05+), ``POST reservation`` and ``DELETE reservation/{reservation_name}``
(reservations created, updated and deleted: 25.05+, API v0.0.43 on), and which versions
slurmrestd marks ``deprecated`` (v0.0.42 on 26.05). What slurmrestd cannot do is said clearly:
22.05's slurmrestd (v0.0.36-38) cannot update nodes or reservations, set triggers or read
slurmctld's config; no release sets triggers over REST, none before 25.05 changes reservations.
Such operations go to ``fallback`` (a CLI client) when one is given, and raise
:class:`Unsupported` otherwise.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import httpx
import jwt

from slurmtower.errors import (
    InvalidInput,
    SlurmError,
    SlurmRequestError,
    SlurmTimeout,
    SlurmUnavailable,
    Unsupported,
)
from slurmtower.models import (
    ClusterConfig,
    ControllerStats,
    Job,
    JobStep,
    Node,
    Partition,
    Reservation,
    SlurmVersion,
    Trigger,
)
from slurmtower.models.table import JobTable, QueueDelta, StateDelta
from slurmtower.nodeset import NodeSet
from slurmtower.slurm import adapters as ad
from slurmtower.slurm.adapters._values import number
from slurmtower.slurm.client import Capabilities, SlurmClient, select_nodes
from slurmtower.slurm.runner import CallObserver

__all__ = ["RestSlurmClient"]

_API_RE = re.compile(r"^/slurm/(v0\.0\.(\d+))/")
#: API versions this backend can parse (adapters cover each of them).
_KNOWN = ad.KNOWN_DATA_PARSERS
#: Seconds our clock's update_time is set back, when slurmrestd gives no last_update.
_CLOCK_MARGIN = 5.0
_UNCHANGED = "__unchanged__"


def _all_deprecated(paths: dict[str, Any], version: str) -> bool:
    """slurmrestd marks every operation of ``version`` deprecated (26.05: v0.0.42)."""
    ops = [op for p, item in paths.items() if p.startswith((f"/slurm/{version}/", f"/slurmdb/{version}/"))
           and isinstance(item, dict) for op in item.values() if isinstance(op, dict)]
    return bool(ops) and all(op.get("deprecated") is True for op in ops)


def _no_changes(doc: dict[str, Any]) -> bool:
    """23.02+ answers an unchanged update_time with a warning and no jobs."""
    warnings = doc.get("warnings") or []
    texts = [str(w.get("description") or w) if isinstance(w, dict) else str(w) for w in warnings]
    return any("no job changes since" in t.lower() for t in texts)


def _reservation_flags(spec: dict[str, Any], api: str) -> frozenset[str]:
    """The flags a reservation description takes in ``api`` (``NO_MAINT`` ... remove one)."""
    schemas = (spec.get("components") or {}).get("schemas") or {}
    desc = schemas.get(f"{api}_reservation_desc_msg") or {}
    items = ((desc.get("properties") or {}).get("flags") or {}).get("items") or {}
    return frozenset(str(f) for f in items.get("enum") or ())


def _no_val(number: int) -> dict[str, Any]:
    """A ``uint32/64_no_val_struct`` holding ``number``."""
    return {"set": True, "infinite": False, "number": number}


def _tres_list(text: str) -> list[dict[str, Any]]:
    """``cpu=4,gres/gpu=2`` as the API's TRES list."""
    out: list[dict[str, Any]] = []
    for part in text.split(","):
        key, _, count = part.partition("=")
        kind, _, name = key.partition("/")
        entry: dict[str, Any] = {"type": kind, "count": int(count)}
        if name:
            entry["name"] = name
        out.append(entry)
    return out


_READS = ("nodes", "node_states", "jobs", "job_table", "job_ids", "queue", "partitions", "reservations", "stats",
          "ping")


#: Up to this many nodes or job ids, a read asks /node/{name} or /job/{id} for each
#: instead of parsing every node or job of the cluster.
_SINGLE_READS = 16


class RestSlurmClient:
    """A :class:`~slurmtower.slurm.client.SlurmClient` over slurmrestd (JWT auth)."""

    def __init__(
        self,
        base_url: str,
        *,
        user: str = "root",
        token: str | None = None,
        jwt_key_file: Path | None = None,
        timeout: float = 30.0,
        fallback: SlurmClient | None = None,
        transport: httpx.BaseTransport | None = None,
        observers: list[CallObserver] | None = None,
        api_version: str | None = None,
    ) -> None:
        if base_url.startswith("unix:"):
            transport = transport or httpx.HTTPTransport(uds=base_url[len("unix:"):])
            base_url = "http://slurmrestd"
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)
        self.user = user
        self._token = token
        self._key_file = jwt_key_file
        self._minted: tuple[str, float] | None = None
        self.fallback = fallback
        self.observers = observers if observers is not None else []
        self._api: str | None = None
        self._api_versions: tuple[str, ...] = ()
        self._api_paths: dict[str, dict[str, Any]] = {}
        self._deprecated: tuple[str, ...] = ()
        self._resv_flags: frozenset[str] = frozenset()
        self.pin = api_version
        self._version: SlurmVersion | None = None
        self._lock = threading.Lock()
        self._queue: JobTable | None = None
        self._queue_since: float | None = None
        self._delta_seq = 0

    def close(self) -> None:
        self._http.close()

    # -- plumbing ---------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        token = self._token
        if token is None and self._key_file is not None:
            now = time.time()
            if self._minted is None or self._minted[1] - now < 60:
                key = self._key_file.read_bytes()
                exp = now + 900
                minted = jwt.encode({"exp": int(exp), "iat": int(now), "sun": self.user}, key, algorithm="HS256")
                self._minted = (minted, exp)
            token = self._minted[0]
        headers = {"X-SLURM-USER-NAME": self.user}
        if token:
            headers["X-SLURM-USER-TOKEN"] = token
        return headers

    def _get(self, path: str, *, kind: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        started = time.monotonic()
        ok = False
        try:
            resp = self._http.get(path, headers=self._headers(), params=params)
            ok = resp.status_code < 400
            if resp.status_code == 304:
                # 22.05 (v0.0.38) answers an unchanged update_time with 304 and no body.
                return {_UNCHANGED: True}
        except httpx.TimeoutException as exc:
            raise SlurmTimeout(f"slurmrestd {path} timed out", argv=["GET", path]) from exc
        except httpx.TransportError as exc:
            raise SlurmUnavailable(f"slurmrestd unreachable: {exc}", argv=["GET", path]) from exc
        finally:
            for observer in self.observers:
                observer(f"rest {kind}", time.monotonic() - started, ok)
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        errors = doc.get("errors") or [] if isinstance(doc, dict) else []
        if resp.status_code >= 400 or errors:
            msg = "; ".join(str(e.get("description") or e.get("error") or e) for e in errors) or resp.text[:200]
            if resp.status_code in (401, 403):
                raise SlurmRequestError(f"slurmrestd refused authentication: {msg}", argv=["GET", path])
            if "unable to contact" in msg.lower() or "unable to load" in msg.lower():
                raise SlurmUnavailable(f"slurmrestd: {msg}", argv=["GET", path], returncode=resp.status_code)
            raise SlurmRequestError(f"slurmrestd: {msg}", argv=["GET", path], returncode=resp.status_code)
        if not isinstance(doc, dict):
            raise SlurmError(f"slurmrestd {path} returned non-object JSON", argv=["GET", path])
        return doc

    def _detect(self) -> str:
        if self._api is None:
            with self._lock:
                if self._api is None:
                    spec = self._get("/openapi/v3", kind="openapi")
                    versions = sorted(
                        {int(m[2]) for p in spec.get("paths", {}) if (m := _API_RE.match(p))}
                    )
                    usable = [v for v in versions if v in _KNOWN]
                    if not usable:
                        raise Unsupported(f"slurmrestd offers no known API version ({versions})")
                    offered = tuple(f"v0.0.{v}" for v in versions)
                    api = f"v0.0.{usable[-1]}"
                    if self.pin is not None:
                        if self.pin not in offered:
                            raise Unsupported(f"slurm.rest_api_version {self.pin} is not offered by "
                                              f"this slurmrestd ({', '.join(offered)})")
                        api = self.pin
                    paths: dict[str, dict[str, Any]] = spec.get("paths") or {}
                    self._api_paths = {p.split(f"/slurm/{api}/", 1)[1]: ops for p, ops in paths.items()
                                       if p.startswith(f"/slurm/{api}/") and isinstance(ops, dict)}
                    self._deprecated = tuple(v for v in offered if _all_deprecated(paths, v))
                    self._resv_flags = _reservation_flags(spec, api)
                    self._api_versions = offered
                    self._api = api
        return self._api

    def _offers(self, method: str, path: str) -> bool:
        """The API in use has this operation (``path`` relative to ``/slurm/<version>/``)."""
        self._detect()
        return method in (self._api_paths.get(path) or {})

    def api_status(self) -> dict[str, object]:
        """The API version in use, those offered, those slurmrestd marks deprecated, and the
        newest this backend knows (what it uses without a pin)."""
        api = self._detect()
        newest = max((v for v in self._api_versions if int(v.rsplit(".", 1)[1]) in _KNOWN),
                     key=lambda v: int(v.rsplit(".", 1)[1]))
        return {"api": api, "offered": list(self._api_versions), "deprecated": list(self._deprecated),
                "newest_known": newest, "pinned": self.pin is not None}

    def _slurm(self, what: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        api = self._detect()
        doc = self._get(f"/slurm/{api}/{what}", kind=what.split("/")[0], params=params)
        if doc.get(_UNCHANGED):
            return doc
        if self._version is None:
            self._version = ad.detect_version(doc)
        return doc

    def _unsupported(self, op: str) -> SlurmClient:
        if self.fallback is not None:
            return self.fallback
        raise Unsupported(f"slurmrestd {self._api or ''} cannot {op}; use the CLI backend".replace("  ", " "))

    # -- detection --------------------------------------------------------------------
    def version(self) -> SlurmVersion:
        if self._version is None:
            self._slurm("ping")
        assert self._version is not None
        return self._version

    def capabilities(self) -> Capabilities:
        version = self.version()
        node_update = self._offers("post", "node/{node_name}")
        config = self._offers("get", "conf")
        reservations = self._reservations_offered()
        unsupported = {
            "triggers": "slurmrestd cannot read or set triggers",
            "set_trigger": "slurmrestd cannot read or set triggers",
            "job_steps": "slurmrestd has no step listing",
        }
        if not reservations:
            why = f"slurmrestd {self._api} cannot create, update or delete reservations (25.05+ can)"
            unsupported |= {"create_reservation": why, "update_reservation": why, "delete_reservation": why}
        if not node_update:
            unsupported["update_nodes"] = f"slurmrestd {self._api} cannot update nodes (23.02+ can)"
        if not config:
            unsupported["config"] = f"slurmrestd {self._api} has no slurmctld configuration endpoint (26.05+ has)"
        return Capabilities(
            backend="rest",
            version=version,
            rest_node_update=node_update,
            rest_reservations=reservations,
            reservation_comment=version >= SlurmVersion(major=23, minor=2),
            config_json=config,
            json_filters=True,
            rest_api_versions=self._api_versions,
            reads=(*_READS, "config") if config else _READS,
            writes=((("update_nodes", "drain", "down", "resume", "undrain") if node_update else ())
                    + (("create_reservation", "update_reservation", "delete_reservation") if reservations else ())),
            unsupported=unsupported,
        )

    # -- reads ------------------------------------------------------------------------
    def ping(self) -> bool:
        doc = self._slurm("ping")
        pings = doc.get("pings") or []
        return any(str(p.get("ping") or p.get("pinged") or "").upper() in {"UP", "RESPONDING"} or
                   p.get("responding") is True for p in pings)

    def nodes(self, nodes: NodeSet | None = None) -> list[Node]:
        if nodes is not None and len(nodes) <= _SINGLE_READS:
            return self._some_nodes(nodes)
        result = ad.parse_nodes_json(self._slurm("nodes"))
        return select_nodes(result, nodes)

    def _some_nodes(self, nodes: NodeSet) -> list[Node]:
        # /node/{name} takes one name (no hostlist): one request per node, not all of them.
        found: list[Node] = []
        for name in nodes:
            try:
                found += ad.parse_nodes_json(self._slurm(f"node/{name}"))
            except SlurmRequestError as exc:
                # 22.05: "Invalid node name specified"; 26.05: "Failure to query node n5"
                text = exc.message.lower()
                if "invalid node name" not in text and f"failure to query node {name}" not in text:
                    raise
        return select_nodes(found, nodes)

    def _some_jobs(self, job_ids: Sequence[int]) -> list[Job]:
        found: list[Job] = []
        for job_id in sorted({int(j) for j in job_ids}):
            try:
                found += ad.parse_jobs_json(self._slurm(f"job/{job_id}"))
            except SlurmRequestError as exc:
                # 22.05: "Unable to find JobId=9" (slurm_load_job's "Invalid job id specified")
                if not any(w in exc.message.lower() for w in ("invalid job id", "unable to find jobid")):
                    raise
        return found

    def _jobs_read(self, job_ids: Sequence[int] | None) -> list[Job]:
        """The records slurmctld answers for ``job_ids`` (each with its array's tasks and het
        job's components), or every record."""
        if job_ids is not None and len(job_ids) <= _SINGLE_READS:
            return self._some_jobs(job_ids)
        return ad.parse_jobs_json(self._slurm("jobs"))

    def jobs(self, job_ids: Sequence[int] | None = None) -> list[Job]:
        result = self._jobs_read(job_ids)
        if job_ids is None:
            return result
        wanted = {int(j) for j in job_ids}
        return [j for j in result if j.job_id in wanted]

    def job_table(self) -> JobTable:
        # Ask only for what changed: slurmctld compares update_time with its last job change
        # and, when nothing changed, answers without packing a single job. 22.05 (v0.0.38)
        # says so with a 304; 23.02+ with a "No job changes since update_time" warning and
        # the `last_update` of the previous answer to send back. Our own clock is the
        # fallback, a few seconds early so a change near the last read is never missed.
        with self._lock:
            previous, since = self._queue, self._queue_since
        asked = time.time()
        params = {"update_time": str(int(since))} if previous is not None and since is not None else None
        doc = self._slurm("jobs", params)
        if previous is not None and (doc.get(_UNCHANGED) or _no_changes(doc)):
            return previous
        table = JobTable.from_jobs(ad.parse_jobs_json(doc))
        last = doc.get("last_update")
        stamp = number(last) if last is not None else None
        with self._lock:
            self._queue = table
            self._queue_since = float(stamp) if stamp else asked - _CLOCK_MARGIN
        return table

    def job_queue_delta(self, *, full: bool = False) -> QueueDelta:
        previous = self._queue
        table = self.job_table()
        with self._lock:
            base = self._delta_seq
            self._delta_seq += 1
        if table is previous and not full:
            return QueueDelta(keys=(), rows={}, unchanged=True, seq=base + 1, base=base)
        cols = [table.columns[c] for c in JobTable._COLUMNS]
        rows = {k: (table.fragments[i], tuple(c[i] for c in cols)) for i, k in enumerate(table.keys)}
        return QueueDelta(keys=table.keys, rows=rows, full=True, seq=base + 1, base=base)

    def job_state_delta(self, *, full: bool = False) -> StateDelta:
        # slurmrestd's /jobs/state (23.11+) names an array's pending tasks one by one
        # ("107_1"), where the queue table holds the array's one record: not used.
        raise Unsupported("the REST backend reads the job states with the full records")

    def node_states(self) -> list[Node]:
        # No update_time for nodes: 22.05's slurmrestd (v0.0.38) answers an unchanged
        # /nodes?update_time= with a 500 "Unspecified error" (measured), which cannot be told
        # from a real failure; the sensor reads nodes in full on this backend.
        return self.nodes()

    def job_ids(
        self,
        *,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
        partitions: Sequence[str] = (),
        states: Sequence[str] = (),
        names: Sequence[str] = (),
        nodes: NodeSet | None = None,
        job_ids: Sequence[int] = (),
    ) -> list[int]:
        return sorted({j.job_id for j in self.queue(users=users, accounts=accounts, partitions=partitions,
                                                    states=states, names=names, nodes=nodes, job_ids=job_ids)})

    def job_count(
        self,
        *,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
        partitions: Sequence[str] = (),
        states: Sequence[str] = (),
        names: Sequence[str] = (),
        nodes: NodeSet | None = None,
        job_ids: Sequence[int] = (),
    ) -> int:
        return sum(j.job_count for j in self.queue(users=users, accounts=accounts, partitions=partitions,
                                                   states=states, names=names, nodes=nodes, job_ids=job_ids))

    def queue(
        self,
        *,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
        partitions: Sequence[str] = (),
        states: Sequence[str] = (),
        names: Sequence[str] = (),
        nodes: NodeSet | None = None,
        job_ids: Sequence[int] = (),
    ) -> list[Job]:
        # slurmrestd's /jobs has no filters: every job, filtered here. As squeue --jobs, an id
        # names its job, its array's tasks and its het job's components.
        node_names = set(nodes) if nodes is not None else None
        wanted = {int(j) for j in job_ids}
        out = []
        for job in self._jobs_read(job_ids or None):
            if wanted and not wanted & {job.job_id, job.array_job_id, job.het_job_id}:
                continue
            if users and job.user_name not in users:
                continue
            if accounts and job.account not in accounts:
                continue
            if partitions and job.partition not in partitions:
                continue
            if states and (job.state is None or job.state.value not in {s.upper() for s in states}):
                continue
            if names and job.name not in names:
                continue
            if node_names is not None and not (node_names & set(NodeSet(job.nodes or "") if job.nodes else ())):
                continue
            out.append(job)
        return out

    def job_steps(self, job_ids: Sequence[int] | None = None) -> list[JobStep]:
        return self._unsupported("list job steps").job_steps(job_ids)

    def partitions(self) -> list[Partition]:
        return ad.parse_partitions_json(self._slurm("partitions"))

    def reservations(self) -> list[Reservation]:
        return ad.parse_reservations_json(self._slurm("reservations"))

    def config(self) -> ClusterConfig:
        if self._offers("get", "conf"):
            return ad.parse_config_json(self._slurm("conf"))
        return self._unsupported("read slurmctld's configuration").config()

    def stats(self) -> ControllerStats:
        return ad.parse_sdiag_json(self._slurm("diag"))

    def submit_batch(self, args: Sequence[str], command: str) -> int:
        return self._unsupported("submit batch jobs").submit_batch(args, command)

    def cancel_jobs(self, job_ids: Sequence[int]) -> None:
        self._unsupported("cancel jobs").cancel_jobs(job_ids)

    def triggers(self) -> list[Trigger]:
        return self._unsupported("read triggers").triggers()

    # -- acts -------------------------------------------------------------------------
    def update_nodes(self, nodes: NodeSet, *, state: str | None = None, reason: str | None = None,
                     **fields: str) -> None:
        api = self._detect()
        if not self._offers("post", "node/{node_name}"):
            self._unsupported(f"update nodes (API {api})").update_nodes(nodes, state=state, reason=reason,
                                                                          **fields)
            return
        body: dict[str, Any] = {k: v for k, v in fields.items()}
        if state is not None:
            body["state"] = [state.upper()]
        if reason is not None:
            body["reason"] = reason
        # One request for the whole set (slurmrestd accepts a hostlist in the path).
        started = time.monotonic()
        ok = False
        try:
            # The hostlist percent-encoded: 26.05 refuses a raw "[" ("Invalid or unknown URL path").
            resp = self._http.post(f"/slurm/{api}/node/{quote(str(nodes), safe='')}", json=body,
                                   headers=self._headers())
            ok = resp.status_code < 400
        except httpx.TransportError as exc:
            raise SlurmUnavailable(f"slurmrestd unreachable: {exc}") from exc
        finally:
            for observer in self.observers:
                observer("rest node_update", time.monotonic() - started, ok)
        if not ok:
            raise SlurmRequestError(f"slurmrestd refused the node update: {resp.text[:300]}",
                                    returncode=resp.status_code)

    def drain(self, nodes: NodeSet, *, reason: str) -> None:
        self.update_nodes(nodes, state="DRAIN", reason=reason)

    def down(self, nodes: NodeSet, *, reason: str) -> None:
        self.update_nodes(nodes, state="DOWN", reason=reason)

    def resume(self, nodes: NodeSet) -> None:
        self.update_nodes(nodes, state="RESUME")

    def undrain(self, nodes: NodeSet) -> None:
        self.update_nodes(nodes, state="UNDRAIN")

    def _reservations_offered(self) -> bool:
        return self._offers("post", "reservation") and self._offers("delete", "reservation/{reservation_name}")

    def _send(self, method: str, path: str, *, kind: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A write to slurmrestd: its answer, or the errors it names as a typed error."""
        started = time.monotonic()
        ok = False
        try:
            resp = self._http.request(method, path, json=body, headers=self._headers())
            ok = resp.status_code < 400
        except httpx.TimeoutException as exc:
            raise SlurmTimeout(f"slurmrestd {path} timed out", argv=[method, path]) from exc
        except httpx.TransportError as exc:
            raise SlurmUnavailable(f"slurmrestd unreachable: {exc}", argv=[method, path]) from exc
        finally:
            for observer in self.observers:
                observer(f"rest {kind}", time.monotonic() - started, ok)
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        errors = (doc.get("errors") or []) if isinstance(doc, dict) else []
        if resp.status_code >= 400 or errors:
            # slurmrestd says "Error creating reservation x" and, apart, Slurm's reason.
            msg = "; ".join(str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
                            for e in errors) or resp.text[:200]
            if resp.status_code in (401, 403):
                raise SlurmRequestError(f"slurmrestd refused authentication: {msg}", argv=[method, path])
            raise SlurmRequestError(f"slurmrestd: {msg}", argv=[method, path], returncode=resp.status_code)
        return doc if isinstance(doc, dict) else {}

    def create_reservation(
        self,
        name: str,
        *,
        nodes: NodeSet | None = None,
        start_time: datetime | Literal["now"] = "now",
        duration: timedelta | None = None,
        end_time: datetime | None = None,
        node_count: int | None = None,
        partition: str | None = None,
        features: str | None = None,
        users: Sequence[str] = ("root",),
        accounts: Sequence[str] = (),
        flags: Sequence[str] = (),
        tres: str | None = None,
        comment: str | None = None,
    ) -> str:
        if not self._reservations_offered():
            return self._unsupported("create reservations").create_reservation(
                name, nodes=nodes, start_time=start_time, duration=duration, end_time=end_time, node_count=node_count,
                partition=partition, features=features, users=users, accounts=accounts, flags=flags, tres=tres,
                comment=comment,
            )
        start = datetime.now().astimezone() if start_time == "now" else start_time
        body: dict[str, Any] = {"name": name, "start_time": _no_val(int(start.timestamp()))}
        if end_time is not None:
            body["end_time"] = _no_val(int(end_time.timestamp()))
        elif duration is not None:
            body["duration"] = _no_val(max(1, int(duration.total_seconds() // 60)))
        else:
            body["duration"] = {"set": True, "infinite": True, "number": 0}
        if nodes is not None:
            body["node_list"] = list(nodes)
        if node_count is not None:
            body["node_count"] = _no_val(node_count)
        for key, value in (("partition", partition), ("features", features), ("comment", comment)):
            if value is not None:
                body[key] = value
        if users:
            body["users"] = list(users)
        if accounts:
            body["accounts"] = list(accounts)
        if flags:
            body["flags"] = [f.upper() for f in flags]
        if tres is not None:
            body["tres"] = _tres_list(tres)
        self._send("POST", f"/slurm/{self._detect()}/reservation", kind="reservation", body=body)
        return name

    def update_reservation(self, name: str, *, nodes: NodeSet | None = None,
                           duration: timedelta | None = None, users: Sequence[str] | None = None,
                           flags: Sequence[str] | None = None, start_time: datetime | None = None,
                           end_time: datetime | None = None, accounts: Sequence[str] | None = None,
                           remove_flags: Sequence[str] | None = None, comment: str | None = None) -> None:
        # A flag is taken away with its NO_ twin; one the API has none of (OVERLAP, SPEC_NODES
        # ...) goes through the fallback.
        removed = [f"NO_{f.upper()}" for f in remove_flags or ()]
        if not self._reservations_offered() or not set(removed) <= self._resv_flags:
            self._unsupported("update reservations").update_reservation(
                name, nodes=nodes, duration=duration, users=users, flags=flags, start_time=start_time,
                end_time=end_time, accounts=accounts, remove_flags=remove_flags, comment=comment,
            )
            return
        # POST reservation creates the reservation when none has the name: callers check first.
        body: dict[str, Any] = {"name": name}
        if nodes is not None:
            body["node_list"] = list(nodes)
        if start_time is not None:
            body["start_time"] = _no_val(int(start_time.timestamp()))
        if end_time is not None:
            body["end_time"] = _no_val(int(end_time.timestamp()))
        if duration is not None:
            body["duration"] = _no_val(max(1, int(duration.total_seconds() // 60)))
        if users is not None:
            body["users"] = list(users)
        if accounts is not None:
            body["accounts"] = list(accounts)
        if flags or removed:
            body["flags"] = [*(f.upper() for f in flags or ()), *removed]
        if comment is not None:
            body["comment"] = comment
        if len(body) == 1:
            raise InvalidInput("nothing to update", param="props")
        self._send("POST", f"/slurm/{self._detect()}/reservation", kind="reservation", body=body)

    def delete_reservation(self, name: str) -> None:
        if not self._reservations_offered():
            self._unsupported("delete reservations").delete_reservation(name)
            return
        self._send("DELETE", f"/slurm/{self._detect()}/reservation/{quote(name, safe='')}", kind="reservation")

    def set_trigger(
        self,
        *,
        event: str,
        program: str,
        nodes: NodeSet | None = None,
        job_id: int | None = None,
        offset: int = 0,
        perm: bool = False,
    ) -> int:
        return self._unsupported("set triggers").set_trigger(
            event=event, program=program, nodes=nodes, job_id=job_id, offset=offset, perm=perm
        )

    def clear_triggers(self, trigger_ids: Sequence[int], *, user: str | None = None) -> None:
        self._unsupported("clear triggers").clear_triggers(trigger_ids, user=user)
