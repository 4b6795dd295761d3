"""Job control over slurmrestd (see :mod:`slurmtower.slurm.jobctl` for what each release offers).

What slurmrestd has: ``DELETE job/{id}`` (cancel or signal; ``flags`` from v0.0.40),
``POST job/{id}`` (update, hold and release: ``hold`` true/false, an admin hold for an
operator), ``DELETE jobs/`` (filters, v0.0.40+) and 26.05's ``POST jobs/requeue`` (v0.0.45).
It takes one id per ``job/{id}`` request: a list is one request per id. What it lacks raises
:class:`~slurmtower.errors.Unsupported`: suspend and resume on every release, a user hold,
``batch``/``full`` on v0.0.38, requeue before v0.0.45, filtered cancel before v0.0.40, and any
update field the release's job description does not have (22.05: ``admin_comment``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from slurmtower.errors import (
    InvalidInput,
    SlurmError,
    SlurmRequestError,
    SlurmTimeout,
    SlurmUnavailable,
    Unsupported,
)
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.jobctl import (
    JOB_UPDATE_FIELDS,
    FieldValue,
    JobRef,
    JobResults,
    _match_filters,
    _unique,
    check_signal,
    check_update_fields,
    fold_messages,
)
from slurmtower.slurm.rest_backend import RestSlurmClient

__all__ = ["RestJobControl"]


def _status_errors(doc: Any) -> list[str]:
    """The messages of a per-job ``status`` list's failed entries: 25.11's ``DELETE job/{id}``
    (v0.0.44) answers an unknown job with 200, no ``errors``, and ``status: [{"error":
    {"string": "Invalid job id specified", "code": 2017}}]``."""
    entries = doc.get("status") if isinstance(doc, dict) else None
    texts = []
    for entry in entries if isinstance(entries, list) else []:
        error = entry.get("error") if isinstance(entry, dict) else None
        if isinstance(error, dict) and (error.get("code") or error.get("string") or error.get("message")):
            texts.append(str(error.get("message") or error.get("string") or error.get("code")))
    return texts


def _error_text(doc: Any, fallback: str) -> str | None:
    """Slurm's message in a slurmrestd answer's ``errors`` or failed ``status`` entries
    (``None``: none)."""
    errors = doc.get("errors") if isinstance(doc, dict) else None
    texts = []
    for e in errors or []:
        if isinstance(e, dict):
            texts.append(str(e.get("error") or e.get("description") or e))
        else:
            texts.append(str(e))
    texts += _status_errors(doc)
    return "; ".join(dict.fromkeys(texts)) if texts else (fallback or None)


class RestJobControl:
    """:class:`~slurmtower.slurm.jobctl.JobControl` over a :class:`RestSlurmClient`'s session."""

    def __init__(self, rest: RestSlurmClient) -> None:
        self.rest = rest
        self._fields: frozenset[str] | None = None

    # -- plumbing -----------------------------------------------------------------------
    def _api(self) -> str:
        return self.rest._detect()

    def _number(self) -> int:
        return int(self._api().rsplit(".", 1)[1])

    def _call(self, method: str, path: str, *, kind: str, params: dict[str, str] | None = None,
              body: Any = None) -> tuple[int, Any]:
        """One request; the status and JSON answer. Transport failures raise."""
        url = f"/slurm/{self._api()}/{path}"
        started = time.monotonic()
        ok = False
        try:
            resp = self.rest._http.request(method, url, params=params, json=body, headers=self.rest._headers())
            ok = resp.status_code < 400
        except httpx.TimeoutException as exc:
            raise SlurmTimeout(f"slurmrestd {url} timed out", argv=[method, url]) from exc
        except httpx.TransportError as exc:
            raise SlurmUnavailable(f"slurmrestd unreachable: {exc}", argv=[method, url]) from exc
        finally:
            for observer in self.rest.observers:
                observer(f"rest {kind}", time.monotonic() - started, ok)
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        if resp.status_code in (401, 403):
            raise SlurmRequestError(f"slurmrestd refused authentication: {_error_text(doc, resp.text[:200])}",
                                    argv=[method, url], returncode=resp.status_code)
        message = _error_text(doc, "") or ""
        if any(m in message.lower() for m in ("unable to contact", "connection refused", "authentication")):
            raise SlurmUnavailable(f"slurmrestd: {message}", argv=[method, url], returncode=resp.status_code)
        return resp.status_code, doc

    def _per_id(self, method: str, refs: Sequence[JobRef], *, kind: str, suffix: str = "",
                params: dict[str, str] | None = None, body: Any = None) -> JobResults:
        """One request per id (``job/{id}`` takes one): Slurm's message where it refused."""
        results: JobResults = {}
        for ref in _unique(refs):
            status, doc = self._call(method, f"job/{quote(ref.text, safe='')}{suffix}", kind=kind,
                                     params=params, body=body)
            # 22.05 answers a refused update with 200 and its errors, 25.11 a refused cancel with
            # 200 and a failed status entry; the others with 4xx/5xx.
            results[ref.text] = _error_text(doc, f"HTTP {status}") if status >= 400 or \
                (isinstance(doc, dict) and doc.get("errors")) or _status_errors(doc) else None
        if results and all(m is not None for m in results.values()) and not self.rest.ping():
            raise SlurmUnavailable(f"slurmctld is not responding (slurmrestd: {next(iter(results.values()))})")
        return results

    def _body_fields(self) -> frozenset[str]:
        """The fields of the release's job update body (``POST job/{id}``'s schema)."""
        if self._fields is None:
            spec = self.rest._get("/openapi/v3", kind="openapi")
            api = self._api()
            op = ((spec.get("paths") or {}).get(f"/slurm/{api}/job/{{job_id}}") or {}).get("post") or {}
            content = ((op.get("requestBody") or {}).get("content") or {}).get("application/json") or {}
            ref = str((content.get("schema") or {}).get("$ref") or "")
            schema = (spec.get("components") or {}).get("schemas", {}).get(ref.rsplit("/", 1)[-1]) or {}
            self._fields = frozenset((schema.get("properties") or {}).keys())
        return self._fields

    def _unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"slurmrestd {self._api()} cannot {what}; use the command backend")

    # -- acts ---------------------------------------------------------------------------
    def cancel(self, refs: Sequence[JobRef], *, signal: str | int | None = None, batch: bool = False,
               full: bool = False) -> JobResults:
        if batch and full:
            raise InvalidInput("batch and full exclude each other", param="batch")
        params: dict[str, str] = {"signal": check_signal(signal) if signal is not None else "KILL"}
        if batch or full:
            if self._number() < 40:
                raise self._unsupported("signal the batch shell or every step (flags: v0.0.40+)")
            params["flags"] = "BATCH_JOB" if batch else "FULL_JOB"
        if params["signal"].isdigit():
            raise self._unsupported("send a signal by number (slurmrestd takes signal names)")
        return self._per_id("DELETE", refs, kind="job_delete", params=params)

    def cancel_matching(self, *, user: str | None = None, account: str | None = None,
                        partition: str | None = None, state: str | None = None, name: str | None = None,
                        nodes: NodeSet | str | None = None, signal: str | int | None = None) -> JobResults:
        _match_filters(user=user, account=account, partition=partition, state=state, name=name, nodes=nodes)
        if not self.rest._offers("delete", "jobs/"):
            raise self._unsupported("cancel jobs by filter (DELETE jobs/: v0.0.40+)")
        body: dict[str, Any] = {"signal": check_signal(signal) if signal is not None else "KILL"}
        for key, value in (("user_name", user), ("account", account), ("partition", partition),
                           ("job_name", name)):
            if value is not None:
                body[key] = value
        if state is not None:
            body["job_state"] = [state.upper()] if self._number() >= 43 else state.upper()
        if nodes is not None:
            body["nodes"] = str(nodes)
        status, doc = self._call("DELETE", "jobs/", kind="jobs_delete", body=body)
        if status >= 400:
            raise SlurmRequestError(f"slurmrestd: {_error_text(doc, f'HTTP {status}')}", returncode=status)
        # The answer lists the jobs it could not signal, not those it did.
        failed = [(str(s.get("step_id") or _job_number(s.get("job_id"))),
                   str((s.get("error") or {}).get("message") or (s.get("error") or {}).get("string") or ""))
                  for s in (doc.get("status") or []) if isinstance(s, dict)]
        return {job: message or None for job, message in failed}

    def hold(self, refs: Sequence[JobRef], *, user: bool = False) -> JobResults:
        if user:
            raise self._unsupported("set a user hold (its holds are admin holds for an operator)")
        return self._per_id("POST", refs, kind="job_update", body={"hold": True})

    def release(self, refs: Sequence[JobRef]) -> JobResults:
        return self._per_id("POST", refs, kind="job_update", body={"hold": False})

    def requeue(self, refs: Sequence[JobRef], *, hold: bool = False) -> JobResults:
        refs = _unique(refs)
        if not self.rest._offers("post", "jobs/requeue"):
            raise self._unsupported("requeue jobs (POST jobs/requeue: 26.05, v0.0.45)")
        body = {"jobs": [r.text for r in refs], "flags": ["Hold"] if hold else []}
        status, doc = self._call("POST", "jobs/requeue", kind="jobs_requeue", body=body)
        if status >= 400 and not doc.get("status"):
            raise SlurmRequestError(f"slurmrestd: {_error_text(doc, f'HTTP {status}')}", returncode=status)
        lines = []
        for entry in doc.get("status") or []:
            if isinstance(entry, dict) and entry.get("error_code"):
                printed = str(entry.get("step_id") or entry.get("job_id") or "")
                lines.append((printed, str(entry.get("error") or entry.get("why") or entry.get("error_code"))))
        return fold_messages(refs, lines)

    def suspend(self, refs: Sequence[JobRef]) -> JobResults:
        raise self._unsupported("suspend jobs")

    def resume(self, refs: Sequence[JobRef]) -> JobResults:
        raise self._unsupported("resume suspended jobs")

    def signal(self, refs: Sequence[JobRef], signal: str | int) -> JobResults:
        return self.cancel(refs, signal=signal)

    def update(self, refs: Sequence[JobRef], fields: Mapping[str, FieldValue]) -> JobResults:
        checked = check_update_fields(fields)
        offered = self._body_fields()
        body: dict[str, Any] = {}
        for name, value in checked.items():
            key = JOB_UPDATE_FIELDS[name][1]
            if key not in offered:
                raise self._unsupported(f"update {name} (its job description has no {key})")
            body[key] = _rest_value(name, JOB_UPDATE_FIELDS[name][2], value, self._number())
        return self._per_id("POST", refs, kind="job_update", body=body)


def _job_number(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("number", ""))
    return str(value or "")


def _rest_value(name: str, kind: str, value: FieldValue, api: int) -> Any:
    """A checked value as slurmrestd's job description takes it."""
    if kind == "minutes":
        if isinstance(value, timedelta):
            return max(1, int(value.total_seconds() // 60))
        if isinstance(value, int):
            return value
        raise Unsupported(f"slurmrestd takes {name} in minutes or as a timedelta, not {value!r}")
    if kind == "time":
        if isinstance(value, datetime):
            return int(value.timestamp())
        if value == "now":
            return int(time.time())
        raise Unsupported(f"slurmrestd takes {name} as a datetime, not {value!r}")
    if kind == "nodes":
        return str(value)
    if name == "priority" and api < 40:
        return str(value)  # v0.0.38's job_properties has priority as a string
    if isinstance(value, (str, int, bool)):
        return value
    raise SlurmError(f"{name}: cannot send {type(value).__name__} to slurmrestd")
