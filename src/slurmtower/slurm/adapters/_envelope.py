"""The JSON envelope: ``meta`` (which release and format), ``errors`` and ``warnings``.

22.05 (openapi/v0.0.38)::

    {"meta": {"plugin": {"type": "openapi/v0.0.38", ...},
              "Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}, "release": "22.05.8"}},
     "errors": [], "<list>": [...]}

24.11+ (data_parser/v0.0.4x)::

    {"<list>": [...], "last_update": {...}, "errors": [], "warnings": [],
     "meta": {"plugin": {"type": ..., "data_parser": "data_parser/v0.0.42", ...},
              "client": {...}, "command": [...],
              "slurm": {"version": {"major": "24", "minor": "11", "micro": "7"},
                        "release": "24.11.7", "cluster": "new24"}}}
"""

from __future__ import annotations

import re
from typing import Any

from slurmtower.errors import (
    AuthenticationError,
    PermissionDenied,
    SlurmError,
    SlurmRequestError,
    SlurmtowerError,
    SlurmUnavailable,
    Unsupported,
)
from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._data_parsers import DATA_PARSERS

__all__ = [
    "detect_version",
    "envelope_messages",
    "error_from_rest_response",
    "format_version",
    "parse_sinfo_version",
    "raise_for_errors",
    "records",
]

_FORMAT_RE = re.compile(r"v0\.0\.(\d+)")

# Which data format a release writes by default, for documents whose meta names no format.
_DEFAULT_FORMAT: list[tuple[tuple[int, int], int]] = sorted(
    (SlurmVersion.parse(p.default_in).key[:2], p.number) for p in DATA_PARSERS
)


def _meta(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise SlurmError(f"expected a JSON object from Slurm, got {type(doc).__name__}")
    meta = doc.get("meta")
    return meta if isinstance(meta, dict) else {}


def _format_name(meta: dict[str, Any]) -> str | None:
    plugin = meta.get("plugin") or {}
    for candidate in (plugin.get("data_parser"), plugin.get("type")):
        if isinstance(candidate, str):
            match = _FORMAT_RE.search(candidate)
            if match:
                return f"v0.0.{match[1]}"
    return None


def detect_version(doc: dict[str, Any]) -> SlurmVersion:
    """The Slurm release and data format of a JSON document, from its ``meta``.

    Handles 22.05's ``meta.Slurm.version`` (integers, minor 5) and 24.11's
    ``meta.slurm.version`` (strings, minor "11").

    Raises:
        SlurmError: the document has no ``meta`` with a version.
    """
    meta = _meta(doc)
    data_parser = _format_name(meta)
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    version = slurm.get("version") or {}
    release = str(slurm.get("release") or "")
    try:
        major, minor = int(version["major"]), int(version["minor"])
        micro = int(version.get("micro") or 0)
    except (KeyError, TypeError, ValueError):
        if release:
            return SlurmVersion.parse(release, data_parser=data_parser)
        raise SlurmError("Slurm JSON without meta.slurm.version") from None
    return SlurmVersion(
        major=major,
        minor=minor,
        micro=micro,
        release=release or f"{major}.{minor:02d}.{micro}",
        data_parser=data_parser,
    )


def format_version(doc: dict[str, Any]) -> int:
    """The data format number N of ``v0.0.N`` (38 for 22.05, 42 for 24.11, 45 for 26.05).

    Taken from ``meta.plugin`` when present, else from the release's default format.
    """
    meta = _meta(doc)
    name = _format_name(meta)
    if name is not None:
        return int(name.rsplit(".", 1)[1])
    try:
        version = detect_version(doc)
    except SlurmError:
        # No meta at all: a bare 22.05-style document (top-level "nodes"/"jobs" lists).
        return 38
    number = 38
    for release, fmt in _DEFAULT_FORMAT:
        if version.key[:2] >= release:
            number = fmt
    return number


def parse_sinfo_version(text: str) -> SlurmVersion:
    """The release from ``sinfo -V`` (``"slurm 22.05.8"``, ``"slurm-wlm 22.05.8"``).

    Raises:
        SlurmError: no version in the text.
    """
    try:
        return SlurmVersion.parse(text)
    except ValueError as exc:
        raise SlurmError(f"cannot read the Slurm version from {text.strip()!r}") from exc


def envelope_messages(doc: dict[str, Any], key: str = "errors") -> list[str]:
    """The ``errors`` (or ``warnings``) of a document as readable strings."""
    items = doc.get(key) if isinstance(doc, dict) else None
    messages: list[str] = []
    for item in items or []:
        if isinstance(item, dict):
            text = item.get("description") or item.get("error") or ""
            source = item.get("source")
            if item.get("error") and item.get("description") and item["error"] != item["description"]:
                text = f"{item['description']}: {item['error']}"
            messages.append(f"{source}: {text}" if source else str(text))
        else:
            messages.append(str(item))
    return messages


def raise_for_errors(doc: dict[str, Any]) -> None:
    """Raise :class:`SlurmRequestError` when the envelope carries ``errors``."""
    messages = envelope_messages(doc)
    if messages:
        raise SlurmRequestError("; ".join(messages))


def records(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The list under ``key``; raises :class:`SlurmError` (with the envelope's errors) if absent."""
    if not isinstance(doc, dict):
        raise SlurmError(f"expected a JSON object from Slurm, got {type(doc).__name__}")
    items = doc.get(key)
    if items is None:
        messages = envelope_messages(doc)
        if messages:
            raise SlurmRequestError("; ".join(messages))
        raise SlurmError(f"Slurm JSON without {key!r} (keys: {', '.join(sorted(doc))})")
    if not isinstance(items, list):
        raise SlurmError(f"Slurm JSON {key!r} is not a list")
    return [item for item in items if isinstance(item, dict)]


def error_from_rest_response(status: int, body: str | dict[str, Any]) -> SlurmtowerError | None:
    """Map a slurmrestd response to the exception tree (``None`` for a success).

    slurmrestd answers an unknown method/URL with a text body and 404/405 (22.05 has no
    ``POST /node``), bad tokens with 401 or even 500, and refused requests with a JSON
    envelope whose ``errors`` say why.
    """
    if isinstance(body, dict):
        messages = envelope_messages(body)
        message = "; ".join(messages)
    else:
        messages = []
        message = body.strip()
    if 200 <= status < 300 and not messages:
        return None
    message = message or f"slurmrestd answered HTTP {status}"
    if status in (404, 405) and not isinstance(body, dict):
        return Unsupported(message, rest_status=status)
    if status == 401:
        return AuthenticationError(message)
    if status == 403:
        return PermissionDenied(message)
    if status in (502, 503, 504):
        return SlurmUnavailable(message)
    if 400 <= status < 500 or messages:
        return SlurmRequestError(message)
    return SlurmError(message)
