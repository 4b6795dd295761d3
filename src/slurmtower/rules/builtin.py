"""The two actions the rule engine runs itself: ``webhook`` and ``command``.

Both return the same envelope as the action catalogue::

    {"status": "succeeded" | "failed", "result": {...}, "exit_code": int | None,
     "stdout": str, "stderr": str, "execution_id": str}

``webhook`` POSTs JSON and signs it, when a secret is configured, with
``X-Slurmtower-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>`` and
``X-Slurmtower-Timestamp: <unix seconds>``; ``X-Slurmtower-Delivery`` stays the same across
retries so a receiver can drop duplicates. Connection errors, timeouts, HTTP 429 and 5xx
are retried with exponential back-off (tenacity) within a bounded total time; other 4xx
fail at once.

``command`` runs an argv list without a shell through slurmtower's command runner, with a
timeout after which the process is killed, and captures its output.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from slurmtower.errors import InvalidInput, SlurmError, SlurmTimeout
from slurmtower.slurm.runner import CommandRunner

__all__ = [
    "MAX_OUTPUT_CHARS",
    "WebhookOptions",
    "failed_envelope",
    "run_command",
    "run_webhook",
    "webhook_signature",
]

MAX_OUTPUT_CHARS = 64 * 1024
MAX_COMMAND_TIMEOUT = 3600.0


def failed_envelope(message: str, *, result: Any = None, execution_id: str | None = None) -> dict[str, Any]:
    """An envelope for an action that did not run or did not succeed."""
    return {
        "status": "failed",
        "result": result,
        "exit_code": None,
        "stdout": "",
        "stderr": message,
        "execution_id": execution_id or uuid.uuid4().hex,
    }


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n[... truncated]"


# -- webhook ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookOptions:
    """Engine-wide webhook settings; a rule may lower ``timeout`` and ``max_attempts``.

    ``max_seconds`` bounds the whole delivery, retries and back-off included.
    ``transport`` is an httpx transport seam (unix sockets, tests).
    """

    secret: bytes | None = None
    timeout: float = 5.0
    max_attempts: int = 4
    max_seconds: float = 30.0
    backoff_initial: float = 0.5
    backoff_max: float = 8.0
    transport: httpx.BaseTransport | None = None


def webhook_signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Slurmtower-Signature`` value for a webhook body sent at ``timestamp``."""
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


class _Retryable(Exception):
    def __init__(self, message: str, response: httpx.Response | None = None) -> None:
        super().__init__(message)
        self.response = response


def _webhook_request(params: Mapping[str, Any], default_payload: Any) -> tuple[str, bytes, dict[str, str]]:
    url = params.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidInput("webhook needs an http(s) 'url'", param="url")
    if "payload" in params and "body" in params:
        raise InvalidInput("webhook takes 'payload' or 'body', not both", param="payload")
    payload = params.get("payload", params.get("body", default_payload))
    try:
        body = json.dumps(payload, separators=(",", ":"), default=str).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"webhook payload is not JSON-serialisable: {exc}", param="payload") from exc
    headers = params.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        raise InvalidInput("webhook 'headers' must map names to strings", param="headers")
    return url, body, {str(k): v for k, v in headers.items()}


def run_webhook(
    params: Mapping[str, Any],
    *,
    options: WebhookOptions,
    default_payload: Any = None,
    extra_headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """POST ``params["payload"]`` (or ``body``, or ``default_payload``) as JSON to ``params["url"]``.

    Params: ``url``, ``payload``/``body``, ``headers``, ``timeout`` (s per attempt),
    ``max_attempts``. Never raises: every failure is a ``failed`` envelope.
    """
    delivery = uuid.uuid4().hex
    try:
        url, body, user_headers = _webhook_request(params, default_payload)
        timeout = min(float(params.get("timeout", options.timeout)), options.timeout)
        attempts = max(1, min(int(params.get("max_attempts", options.max_attempts)), options.max_attempts))
    except (InvalidInput, TypeError, ValueError) as exc:
        return failed_envelope(str(exc), execution_id=delivery)
    started = time.monotonic()
    tries = 0
    last_response: httpx.Response | None = None

    def attempt(client: httpx.Client) -> httpx.Response:
        nonlocal tries, last_response
        remaining = options.max_seconds - (time.monotonic() - started)
        if remaining <= 0:
            raise _Retryable("out of time")
        tries += 1
        ts = str(int(time.time()))
        headers = {
            **user_headers,
            "Content-Type": "application/json",
            "User-Agent": "slurmtower-webhook/1",
            "X-Slurmtower-Delivery": delivery,
            "X-Slurmtower-Timestamp": ts,
            **(extra_headers or {}),
        }
        if options.secret:
            headers["X-Slurmtower-Signature"] = webhook_signature(options.secret, ts, body)
        try:
            response = client.post(url, content=body, headers=headers, timeout=min(timeout, remaining))
        except httpx.HTTPError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        last_response = response
        if response.status_code >= 500 or response.status_code == 429:
            raise _Retryable(f"HTTP {response.status_code}", response)
        return response

    retrying = Retrying(
        stop=stop_after_attempt(attempts) | stop_after_delay(options.max_seconds),
        wait=wait_exponential(multiplier=options.backoff_initial, max=options.backoff_max),
        retry=retry_if_exception_type(_Retryable),
        reraise=False,
    )
    response: httpx.Response | None = None
    error = ""
    with httpx.Client(transport=options.transport, follow_redirects=False) as client:
        try:
            response = retrying(attempt, client)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            # "out of time" carries no response; report the last one the server sent.
            response = last_response
            error = (
                f"HTTP {response.status_code} after {tries} attempts" if response is not None else str(last)
            )
    result: dict[str, Any] = {"url": url, "attempts": tries, "delivery_id": delivery, "status_code": None}
    if response is None:
        return failed_envelope(error or "webhook not delivered", result=result, execution_id=delivery)
    text = _clip(response.text)
    result["status_code"] = response.status_code
    try:
        result["body"] = response.json()
    except ValueError:
        result["body"] = text
    ok = response.is_success
    return {
        "status": "succeeded" if ok else "failed",
        "result": result,
        "exit_code": 0 if ok else 1,
        "stdout": text,
        "stderr": "" if ok else (error or f"HTTP {response.status_code}"),
        "execution_id": delivery,
    }


# -- command ----------------------------------------------------------------------------


def run_command(params: Mapping[str, Any], *, runner: CommandRunner | None = None) -> dict[str, Any]:
    """Run ``params["argv"]`` (a list of strings, no shell) with ``params["timeout"]`` seconds.

    A command still running at the timeout is killed and the run fails. Never raises.
    """
    execution_id = uuid.uuid4().hex
    argv = params.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str | int | float) for a in argv):
        return failed_envelope("command needs 'argv': a non-empty list of strings", execution_id=execution_id)
    argv = [str(a) for a in argv]
    try:
        timeout = float(params.get("timeout", 60.0))
    except (TypeError, ValueError):
        return failed_envelope("command 'timeout' must be a number", execution_id=execution_id)
    if not 0 < timeout <= MAX_COMMAND_TIMEOUT:
        return failed_envelope(
            f"command 'timeout' must be in (0, {MAX_COMMAND_TIMEOUT:g}]", execution_id=execution_id
        )
    runner = runner or CommandRunner()
    try:
        res = runner.run(argv, timeout=timeout, check=False)
    except SlurmTimeout:
        return failed_envelope(
            f"command timed out after {timeout:g} s and was killed",
            result={"argv": argv, "timed_out": True},
            execution_id=execution_id,
        )
    except SlurmError as exc:
        return failed_envelope(
            exc.message, result={"argv": argv, "timed_out": False}, execution_id=execution_id
        )
    except OSError as exc:  # e.g. not executable; the runner only translates "not found"
        return failed_envelope(
            f"cannot run {argv[0]}: {exc.strerror}",
            result={"argv": argv, "timed_out": False},
            execution_id=execution_id,
        )
    return {
        "status": "succeeded" if res.returncode == 0 else "failed",
        "result": {"argv": argv, "timed_out": False, "seconds": round(res.seconds, 3)},
        "exit_code": res.returncode,
        "stdout": _clip(res.stdout),
        "stderr": _clip(res.stderr),
        "execution_id": execution_id,
    }
