"""Small value converters shared by the JSON and text parsers."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

__all__ = [
    "INFINITE",
    "NO_VAL",
    "epoch",
    "is_infinite",
    "memory_mib",
    "minutes",
    "number",
    "parse_duration",
    "parse_text_time",
    "split_list",
    "text_or_none",
]

#: Slurm's "unset" and "unlimited" markers as 22.05 JSON prints them (16, 32 and 64 bit).
NO_VAL = frozenset({0xFFFE, 0xFFFFFFFE, 0xFFFFFFFFFFFFFFFE})
INFINITE = frozenset({-1, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})

_NONE_WORDS = frozenset({"", "(null)", "n/a", "none", "unknown", "(none)"})


def number(value: Any) -> int | None:
    """An integer from a v0.0.40+ ``{"set", "infinite", "number"}`` object or a plain number.

    ``set: false`` and ``infinite: true`` both give ``None``: the caller's field documents
    which of the two ``None`` means there.
    """
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def is_infinite(value: Any) -> bool:
    return isinstance(value, dict) and bool(value.get("infinite"))


def epoch(value: Any) -> datetime | None:
    """A UTC datetime from an epoch (plain or ``{"number"}``); 0 and unset are ``None``."""
    seconds = number(value)
    if not seconds or seconds in NO_VAL or seconds in INFINITE:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def minutes(value: Any) -> timedelta | None:
    """A duration from a minute count; unset and infinite are ``None``."""
    count = number(value)
    return timedelta(minutes=count) if count is not None else None


def text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in _NONE_WORDS else text


def split_list(value: Any) -> list[str]:
    """``"a,b"`` or ``["a", "b"]`` as a list; ``""``/``(null)``/``None`` as ``[]``."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    text = text_or_none(value)
    return [part.strip() for part in text.split(",") if part.strip()] if text else []


_DURATION_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+(?:\.\d+)?))?$")


def parse_duration(text: str | None) -> timedelta | None:
    """Slurm's duration text: ``5``, ``5:00``, ``01:00:00``, ``1-00:00:00``, ``2-12``.

    A bare number is minutes; ``UNLIMITED``, ``INFINITE``, ``NONE``, ``N/A`` and empty are
    ``None``.

    Raises:
        ValueError: not a Slurm duration.
    """
    if text is None:
        return None
    value = text.strip()
    if value.lower() in _NONE_WORDS or value.upper() in ("UNLIMITED", "INFINITE", "PARTITION_LIMIT"):
        return None
    match = _DURATION_RE.match(value)
    if match is None:
        raise ValueError(f"not a Slurm duration: {text!r}")
    days = int(match[1] or 0)
    fields = [f for f in (match[2], match[3], match[4]) if f is not None]
    if match[1] is not None:
        # days-hours[:minutes[:seconds]]
        hours, mins, secs = (float(f) for f in [*fields, "0", "0"][:3])
    elif len(fields) == 1:
        hours, mins, secs = 0.0, float(fields[0]), 0.0
    elif len(fields) == 2:
        hours, mins, secs = 0.0, float(fields[0]), float(fields[1])
    else:
        hours, mins, secs = (float(f) for f in fields)
    return timedelta(days=days, hours=hours, minutes=mins, seconds=secs)


def parse_text_time(text: str | None, tz: tzinfo | None = None) -> datetime | None:
    """A text timestamp (``2026-11-29T23:47:06``) as an aware UTC datetime.

    Slurm prints local time without a zone: ``tz`` is the cluster's zone (default: this
    machine's). ``Unknown``, ``None``, ``N/A`` and ``0`` are ``None``.
    """
    if text is None:
        return None
    value = text.strip()
    if value.lower() in _NONE_WORDS or value == "0":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz) if tz is not None else parsed.astimezone()
    return parsed.astimezone(UTC)


_MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)B?$", re.IGNORECASE)
_MEMORY_FACTOR = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def memory_mib(text: str | None) -> int | None:
    """``"100M"``, ``"2G"``, ``"2000"`` (MiB) as MiB; unset words as ``None``."""
    value = text_or_none(text)
    if value is None or value.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = _MEMORY_RE.match(value)
    if match is None:
        return None
    return round(float(match[1]) * _MEMORY_FACTOR[match[2].upper()])
