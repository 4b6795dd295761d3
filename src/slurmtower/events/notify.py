#!/usr/bin/env python3
"""slurmtower's Slurm trigger program: tell the sensor that a trigger fired.

strigger runs it as SlurmUser on the controller host, with slurmctld's environment, and
appends exactly one argument: a hostlist (``n[3-4]``), a job id, or ``reconfig``::

    strigger --set --node --down --flags=PERM --program="/usr/bin/python3 \\
        /var/lib/slurmtower/notify.py --url http://127.0.0.1:8642/events/callback \\
        --key-file /var/lib/slurmtower/sensor.key --sensor-uuid UUID node down"

It POSTs Slurm's argument as the body to ``<url>/<uuid>/<class>/<type>``, signed with
HMAC-SHA256 (see ``slurmtower.events.callback``) using the key read from ``--key-file``
(never from the command line: every cluster user can read trigger program lines). It
retries a couple of times quickly, never runs longer than ``--deadline`` seconds
(slurmctld kills trigger programs after 300 s anyway) and exits:

    0 delivered, 1 not delivered (network error or 5xx after retries),
    2 rejected by the receiver (4xx) or bad usage, 3 key file problem.

Standard library only and self-contained, so it can be copied anywhere SlurmUser can
execute it. Do not import slurmtower here.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

__all__ = ["EXIT_DELIVERED", "EXIT_KEY", "EXIT_REJECTED", "EXIT_UNDELIVERED", "build_request", "main"]

EXIT_DELIVERED = 0
EXIT_UNDELIVERED = 1
EXIT_REJECTED = 2
EXIT_KEY = 3
MIN_KEY_BYTES = 16


def _sign(key: bytes, method: str, path: str, body: bytes) -> dict[str, str]:
    # Must match slurmtower.events.callback.canonical_request (a test checks they agree).
    ts = str(int(time.time()))
    nonce = secrets.token_hex(16)
    canonical = "\n".join([method, path, ts, nonce, hashlib.sha256(body).hexdigest()]).encode()
    mac = hmac.new(key, canonical, hashlib.sha256).hexdigest()
    return {
        "X-Slurmtower-Timestamp": ts,
        "X-Slurmtower-Nonce": nonce,
        "X-Slurmtower-Signature": f"v1={mac}",
    }


def build_request(
    url: str, sensor_uuid: str, klass: str, kind: str, argument: str, key: bytes
) -> urllib.request.Request:
    """The signed POST for one trigger firing (a fresh nonce and timestamp each call)."""
    base = urllib.parse.urlsplit(url)
    if base.scheme not in ("http", "https") or not base.netloc:
        raise ValueError(f"--url must be an http(s) URL, not {url!r}")
    segments = [urllib.parse.quote(s, safe="") for s in (sensor_uuid, klass, kind)]
    path = base.path.rstrip("/") + "/" + "/".join(segments)
    full = urllib.parse.urlunsplit((base.scheme, base.netloc, path, "", ""))
    body = argument.encode("utf-8")
    headers = {"Content-Type": "text/plain; charset=utf-8", "User-Agent": "slurmtower-notify/1"}
    headers.update(_sign(key, "POST", path, body))
    return urllib.request.Request(full, data=body, headers=headers, method="POST")  # noqa: S310


def _read_key(path: str) -> bytes:
    with open(path, "rb") as fh:
        key = fh.read().strip()
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"key in {path} is shorter than {MIN_KEY_BYTES} bytes")
    return key


def _log(message: str) -> None:
    # slurmctld discards the output, but it helps when the program is run by hand.
    print(f"slurmtower-notify: {message}", file=sys.stderr)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="slurmtower-notify", description="Report a fired Slurm trigger to slurmtower."
    )
    parser.add_argument("--url", required=True, help="callback base URL of the slurmtower receiver")
    parser.add_argument("--key-file", required=True, help="file holding the shared HMAC key")
    parser.add_argument("--sensor-uuid", required=True, help="UUID of the sensor that set the trigger")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per attempt (default 5)")
    parser.add_argument("--retries", type=int, default=2, help="retries after the first attempt (default 2)")
    parser.add_argument("--deadline", type=float, default=30.0, help="give up after this many seconds")
    parser.add_argument("resource_class", help="trigger class: node, job, reconfig ...")
    parser.add_argument("trigger_type", help="trigger type: down, drained, up, fini ...")
    parser.add_argument("argument", nargs="?", default="", help="appended by Slurm: hostlist, job id ...")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Deliver one trigger notification; returns the exit status."""
    try:
        args = _parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage; keep that status
        return int(exc.code) if isinstance(exc.code, int) else EXIT_REJECTED
    started = time.monotonic()
    try:
        key = _read_key(args.key_file)
    except (OSError, ValueError) as exc:
        _log(f"cannot use key file: {exc}")
        return EXIT_KEY
    argument = args.argument or args.resource_class  # --reconfig passes the word itself
    attempts = max(0, args.retries) + 1
    for attempt in range(1, attempts + 1):
        remaining = args.deadline - (time.monotonic() - started)
        if remaining <= 0:
            break
        try:
            request = build_request(
                args.url, args.sensor_uuid, args.resource_class, args.trigger_type, argument, key
            )
        except ValueError as exc:
            _log(str(exc))
            return EXIT_REJECTED
        try:
            with urllib.request.urlopen(request, timeout=min(args.timeout, remaining)) as resp:  # noqa: S310
                resp.read(65536)
                return EXIT_DELIVERED
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                _log(f"receiver rejected the notification: HTTP {exc.code}")
                return EXIT_REJECTED
            _log(f"attempt {attempt}/{attempts}: HTTP {exc.code}")
        except (urllib.error.URLError, OSError) as exc:
            _log(f"attempt {attempt}/{attempts}: {getattr(exc, 'reason', exc)}")
        if attempt < attempts:
            pause = min(0.5 * 2 ** (attempt - 1), max(0.0, args.deadline - (time.monotonic() - started)))
            time.sleep(pause)
    _log("giving up: notification not delivered")
    return EXIT_UNDELIVERED


if __name__ == "__main__":
    sys.exit(main())
