"""Alerts in: Alertmanager's webhook payloads, and the generic signed webhook's, as events.

Each alert becomes one event that rules match like any other (``docs/rules.md``):

``type``
    ``alert.firing`` or ``alert.resolved`` (the alert's own ``status``).
``source``
    ``alertmanager`` (``POST /hooks/alertmanager``) or ``webhook`` (``POST /hooks/generic``).
``node``
    The node the alert is about: the first of ``hooks.node_labels`` (``node``, ``nodename``,
    ``hostname``, ``instance``) that names a host; a ``host:port`` or a URL gives its host
    (``n3:9100`` is ``n3``), ``hooks.strip_domain`` drops the domain. An IP address names no
    node (the next label is tried); no label: ``None``.
``payload``
    ``status``, ``alertname``, ``node``, ``node_label``, ``labels``, ``annotations``,
    ``starts_at``, ``ends_at`` (UTC, ``None`` for Alertmanager's zero time), ``fingerprint``,
    ``generator_url``, and of the notification ``receiver``, ``group_key``, ``external_url``.

Alertmanager (webhook format version 4) re-sends a whole group whenever one of its alerts
changes, and every ``repeat_interval``: an alert already recorded with the same fingerprint,
status and start time within ``hooks.dedupe_window`` is not recorded again (the keys live in
the store's nonce table, so this holds across restarts and processes). The event is appended
before its key is stored: a crash in between records the alert twice on Alertmanager's retry,
never zero times.

The generic webhook takes Alertmanager's alert objects (``{"alerts": [...]}``, or one alert
object), signed the way slurmtower's own ``webhook`` rule action signs (so one slurmtower can
feed another)::

    X-Slurmtower-Timestamp: <unix seconds>
    X-Slurmtower-Signature: sha256=<hex HMAC-SHA256(hooks.generic_secret, "<timestamp>." + body)>

A timestamp outside ``events.max_clock_skew`` is refused, and so is a signature seen before
(kept in the store until its timestamp leaves the window, after which the timestamp check
alone refuses the replay).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
)
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from slurmtower.errors import AuthenticationError, InvalidInput
from slurmtower.events.callback import HEADER_SIGNATURE, HEADER_TIMESTAMP, TIMESTAMP_RE, NonceStore, header_value
from slurmtower.models.event import Event
from slurmtower.rules.builtin import webhook_signature
from slurmtower.settings import HookSettings
from slurmtower.store.schema import callback_nonces

__all__ = [
    "ALERT_FIRING",
    "ALERT_RESOLVED",
    "HEADER_WEBHOOK_SIGNATURE",
    "SOURCE_ALERTMANAGER",
    "SOURCE_WEBHOOK",
    "Alert",
    "AlertBatch",
    "AlertmanagerNotification",
    "ParsedAlert",
    "alert_events",
    "node_from_labels",
    "parse_alertmanager",
    "parse_generic",
    "parse_json_body",
    "record_alerts",
    "recorded_summary",
    "verify_signed_webhook",
]

ALERT_FIRING = "alert.firing"
ALERT_RESOLVED = "alert.resolved"
SOURCE_ALERTMANAGER = "alertmanager"
SOURCE_WEBHOOK = "webhook"
#: The generic webhook's signature header: the callbacks' header name, its own format.
HEADER_WEBHOOK_SIGNATURE = HEADER_SIGNATURE
#: Webhook format versions accepted: Alertmanager's 4, and Grafana's 1 (the same alerts).
VERSIONS = ("4", "1")

_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
_SIGNATURE = re.compile(r"^sha256=([0-9a-f]{64})$")
_DEDUPE_PREFIX = "alert:"
_REPLAY_PREFIX = "hook:"
_M = TypeVar("_M", bound=BaseModel)


#: No text kept from an alert holds a NUL: PostgreSQL refuses it in JSON text (members the
#: models ignore are never kept, and may hold anything).
_NO_NUL = r"^[^\x00]*$"
_Text = Annotated[str, StringConstraints(pattern=_NO_NUL)]
_TextMap = Annotated[dict[_Text, _Text], WithJsonSchema({
    "type": "object", "propertyNames": {"pattern": _NO_NUL},
    "additionalProperties": {"type": "string", "pattern": _NO_NUL}})]
# Strict, read from JSON: a time is an RFC 3339 string, a number a JSON integer (never "5").
_STRICT = ConfigDict(extra="ignore", strict=True)


def _whole(value: Any) -> Any:
    """JSON's ``5.0`` is the integer 5 (JSON Schema's ``integer``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class Alert(BaseModel):
    """One alert as Alertmanager sends it (other members, such as Grafana's, are ignored)."""

    model_config = _STRICT

    status: Literal["firing", "resolved"]
    labels: _TextMap
    annotations: _TextMap = Field(default_factory=dict)
    startsAt: datetime | None = None  # noqa: N815 - Alertmanager's names
    endsAt: datetime | None = None  # noqa: N815
    generatorURL: _Text | None = Field(default=None, max_length=4000)  # noqa: N815
    fingerprint: _Text | None = Field(default=None, min_length=1, max_length=64)


class AlertmanagerNotification(BaseModel):
    """Alertmanager's webhook body (``webhook_config``, version 4; Grafana's version 1)."""

    model_config = _STRICT

    version: Annotated[str, Field(json_schema_extra={"enum": list(VERSIONS)})]
    groupKey: _Text | None = None  # noqa: N815
    truncatedAlerts: Annotated[int, BeforeValidator(_whole)] = Field(default=0, ge=0)  # noqa: N815
    status: Literal["firing", "resolved"]
    receiver: _Text | None = None
    alerts: list[Alert]
    groupLabels: _TextMap = Field(default_factory=dict)  # noqa: N815
    commonLabels: _TextMap = Field(default_factory=dict)  # noqa: N815
    commonAnnotations: _TextMap = Field(default_factory=dict)  # noqa: N815
    externalURL: _Text | None = None  # noqa: N815


class AlertBatch(BaseModel):
    """The generic webhook's ``{"alerts": [...]}``."""

    model_config = _STRICT

    alerts: list[Alert]
    receiver: _Text | None = None
    groupKey: _Text | None = None  # noqa: N815
    externalURL: _Text | None = None  # noqa: N815


@dataclass(frozen=True)
class ParsedAlert:
    """One alert turned into its event, with the key that tells a re-sent copy."""

    event: Event
    dedupe_key: str | None


# -- parsing ------------------------------------------------------------------------------


def parse_json_body(body: bytes) -> Any:
    """The body as JSON; :class:`InvalidInput` (``param="body"``) when it is not. (A NUL in
    what is kept is refused by the models, naming the member.)"""
    try:
        return json.loads(body)
    except UnicodeDecodeError as exc:
        raise InvalidInput("the body is not UTF-8 JSON", param="body") from exc
    except ValueError as exc:
        raise InvalidInput(f"the body is not JSON: {exc}", param="body") from exc


def _validate(model: type[_M], data: Any) -> _M:
    """``data`` (decoded JSON) as ``model``, read as JSON is (strict: no "5" for 5, a time
    only as text). Raises :class:`InvalidInput` naming the bad member."""
    try:
        return model.model_validate_json(json.dumps(data))
    except ValidationError as exc:
        raise _invalid(exc) from exc


def _invalid(exc: ValidationError, prefix: str = "") -> InvalidInput:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    param = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "body")
    return InvalidInput(f"{param}: {err['msg']}", param=param)


def _host_part(value: str) -> str | None:
    """``n3`` from ``n3``, ``n3:9100``, ``http://n3:9100/metrics``, ``[fe80::1]:9100`` ..."""
    text = value.strip()
    if "://" in text:
        text = urlsplit(text).netloc.rpartition("@")[2]
    if text.startswith("["):
        end = text.find("]")
        return (text[1:end] or None) if end > 0 else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        if port.isdigit() or not port:
            text = host
    return text or None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def node_from_labels(labels: Mapping[str, str], names: Sequence[str], *,
                     strip_domain: bool = True) -> tuple[str | None, str | None]:
    """(node, label it came from): the first of ``names`` present in ``labels`` whose host
    part is a plausible node name (not an IP address); ``(None, None)`` when none is."""
    for name in names:
        value = labels.get(name)
        if not value:
            continue
        host = _host_part(value)
        if host is None or _is_ip(host):
            continue
        if strip_domain:
            host = host.split(".", 1)[0]
        if _NODE_NAME.match(host):
            return host, name
    return None, None


def _utc(value: datetime | None) -> str | None:
    """ISO 8601 in UTC (``...Z``); Go's zero time (year 1: "not set") is ``None``."""
    if value is None or value.year <= 1:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    except OverflowError:  # an offset carried it past year 9999
        return datetime.max.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def _fingerprint(labels: Mapping[str, str]) -> str:
    """A stable 16-hex-digit id of a label set, for alerts sent without a fingerprint."""
    text = "\xff".join(f"{k}\xfe{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def alert_events(alerts: Sequence[Alert], *, source: str, hooks: HookSettings, now: datetime,
                 receiver: str | None = None, group_key: str | None = None,
                 external_url: str | None = None) -> list[ParsedAlert]:
    """One event per alert (see the module's docstring for its shape)."""
    out: list[ParsedAlert] = []
    for alert in alerts:
        node, label = node_from_labels(alert.labels, hooks.node_labels, strip_domain=hooks.strip_domain)
        starts_at = _utc(alert.startsAt)
        fingerprint = alert.fingerprint or _fingerprint(alert.labels)
        payload: dict[str, Any] = {
            "status": alert.status,
            "alertname": alert.labels.get("alertname"),
            "node": node,
            "node_label": label,
            "labels": dict(alert.labels),
            "annotations": dict(alert.annotations),
            "starts_at": starts_at,
            "ends_at": _utc(alert.endsAt),
            "fingerprint": fingerprint,
            "generator_url": alert.generatorURL,
            "receiver": receiver,
            "group_key": group_key,
            "external_url": external_url,
        }
        event = Event(type=ALERT_FIRING if alert.status == "firing" else ALERT_RESOLVED, time=now,
                      source=source, node=node, payload=payload)
        key = None
        if starts_at is not None and hooks.dedupe_window > 0:
            digest = hashlib.sha256(f"{source}|{fingerprint}|{alert.status}|{starts_at}".encode()).hexdigest()
            key = _DEDUPE_PREFIX + digest
        out.append(ParsedAlert(event=event, dedupe_key=key))
    return out


def parse_alertmanager(data: Any, *, hooks: HookSettings, now: datetime | None = None) -> list[ParsedAlert]:
    """Alertmanager's webhook body (already decoded JSON) as events.

    Raises :class:`InvalidInput` naming the bad part (``alerts.0.status``, ``version`` ...).
    """
    if not isinstance(data, dict):
        raise InvalidInput("the body must be a JSON object (Alertmanager's webhook format)", param="body")
    note = _validate(AlertmanagerNotification, data)
    if note.version not in VERSIONS:
        raise InvalidInput(f"version: webhook format {note.version!r} is not one of {', '.join(VERSIONS)}",
                           param="version")
    return alert_events(note.alerts, source=SOURCE_ALERTMANAGER, hooks=hooks, now=now or datetime.now(UTC),
                        receiver=note.receiver, group_key=note.groupKey, external_url=note.externalURL)


def parse_generic(data: Any, *, hooks: HookSettings, now: datetime | None = None) -> list[ParsedAlert]:
    """The generic webhook's body: ``{"alerts": [<alert>, ...]}`` or one alert object.

    Raises :class:`InvalidInput` naming the bad part.
    """
    if not isinstance(data, dict):
        raise InvalidInput("the body must be a JSON object: an alert, or {\"alerts\": [...]}", param="body")
    if "alerts" in data:
        batch = _validate(AlertBatch, data)
        alerts, receiver, group_key, url = batch.alerts, batch.receiver, batch.groupKey, batch.externalURL
    else:
        alerts, receiver, group_key, url = [_validate(Alert, data)], None, None, None
    return alert_events(alerts, source=SOURCE_WEBHOOK, hooks=hooks, now=now or datetime.now(UTC),
                        receiver=receiver, group_key=group_key, external_url=url)


# -- the generic webhook's signature ------------------------------------------------------


def verify_signed_webhook(secret: bytes | None, headers: Mapping[str, str], body: bytes, nonces: NonceStore, *,
                          max_clock_skew: float, now: datetime | None = None) -> datetime:
    """Authenticate a generic webhook request; returns when it was signed.

    Raises :class:`AuthenticationError` (401; ``reason``: ``unsigned``, ``not_configured``,
    ``stale``, ``bad_signature``, ``replayed``) and :class:`InvalidInput` (400) for a
    malformed timestamp or signature header.
    """
    ts_text = header_value(headers, HEADER_TIMESTAMP)
    sig_text = header_value(headers, HEADER_WEBHOOK_SIGNATURE)
    if ts_text is None and sig_text is None:
        raise AuthenticationError("the request is not signed (X-Slurmtower-Timestamp, X-Slurmtower-Signature)",
                                  reason="unsigned")
    if secret is None:
        raise AuthenticationError("the generic webhook takes no request: hooks.generic_secret is not set",
                                  reason="not_configured")
    if ts_text is None or not TIMESTAMP_RE.match(ts_text):
        raise InvalidInput(f"{HEADER_TIMESTAMP} must be Unix seconds", param=HEADER_TIMESTAMP)
    sig = _SIGNATURE.match(sig_text or "")
    if sig is None:
        raise InvalidInput(f"{HEADER_WEBHOOK_SIGNATURE} must be sha256=<64 hex digits>",
                           param=HEADER_WEBHOOK_SIGNATURE)
    now = now or datetime.now(UTC)
    skew = timedelta(seconds=max_clock_skew)
    signed_at = datetime.fromtimestamp(int(ts_text), UTC)
    if abs(now - signed_at) > skew:
        raise AuthenticationError("the request's timestamp is outside the allowed clock skew", reason="stale",
                                  header=HEADER_TIMESTAMP)
    expected = webhook_signature(secret, ts_text, body).removeprefix("sha256=")
    if not hmac.compare_digest(expected, sig.group(1)):
        raise AuthenticationError("the request's signature does not match", reason="bad_signature")
    # Only authenticated signatures are kept, so forged requests cannot fill the table.
    if not nonces.remember_nonce(_REPLAY_PREFIX + sig.group(1), expires_at=signed_at + skew, now=now):
        raise AuthenticationError("this request was already received (replay)", reason="replayed")
    return signed_at


# -- recording ------------------------------------------------------------------------------


def _seen(store: Any, keys: list[str], now: datetime) -> set[str]:
    t = callback_nonces

    found: set[str] = set()
    with store.engine.connect() as conn:
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            rows = conn.execute(select(t.c.nonce).where(t.c.nonce.in_(chunk), t.c.expires_at >= now))
            found.update(str(r) for (r,) in rows)
    return found


def _remember(store: Any, keys: list[str], expires_at: datetime, now: datetime) -> None:
    t = callback_nonces

    if not keys:
        return
    try:
        with store.engine.begin() as conn:
            conn.execute(insert(t), [{"nonce": k, "expires_at": expires_at} for k in keys])
    except IntegrityError:
        # Another request recorded one of them meanwhile (or an expired copy remains):
        # one at a time, the store's way (it drops expired keys first).
        for key in keys:
            store.remember_nonce(key, expires_at=expires_at, now=now)


def record_alerts(store: Any, alerts: Sequence[ParsedAlert], *, dedupe_window: float,
                  now: datetime | None = None) -> tuple[list[Event], int]:
    """Append the alerts' events, leaving out copies already recorded within
    ``dedupe_window`` seconds; returns (stored events with their ids, copies left out).

    ``store`` is the :class:`~slurmtower.events.store.EventStore` (blocking: call it off the
    event loop).
    """
    now = now or datetime.now(UTC)
    # one cluster's copy of an alert is not another's (a store scoped to a cluster, EventStore.scoped)
    scope = getattr(store, "cluster", "")
    if scope:
        alerts = [replace(a, dedupe_key=f"{scope}:{a.dedupe_key}") if a.dedupe_key is not None else a
                  for a in alerts]
    keys = sorted({a.dedupe_key for a in alerts if a.dedupe_key is not None})
    seen = _seen(store, keys, now) if keys else set()
    fresh: list[Event] = []
    taken: list[str] = []
    duplicates = 0
    for alert in alerts:
        key = alert.dedupe_key
        if key is not None and (key in seen or key in taken):
            duplicates += 1
            continue
        fresh.append(alert.event)
        if key is not None:
            taken.append(key)
    stored = store.append(fresh) if fresh else []
    _remember(store, taken, now + timedelta(seconds=dedupe_window), now)
    return stored, duplicates


def recorded_summary(received: int, stored: Sequence[Event], duplicates: int) -> dict[str, Any]:
    """What recording alerts answers (the hooks' body, ``slurmtower alert --output json``)."""
    return {"received": received, "recorded": len(stored), "duplicates": duplicates,
            "events": [e.id for e in stored]}
