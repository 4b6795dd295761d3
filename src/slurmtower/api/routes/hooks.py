"""Alerts in: ``POST /hooks/alertmanager`` (Alertmanager's webhook) and ``POST /hooks/generic``
(an HMAC-signed webhook), each alert recorded as an event rules match
(:mod:`slurmtower.events.alerts`).

``/hooks/alertmanager`` takes a bearer token of role ``alerter`` (a token that may post
alerts and do nothing else: give it to Alertmanager's ``http_config.authorization``), or of
an operator or admin; the role is the one the cluster the alert is for gives
(``/clusters/{cluster}/hooks/alertmanager``, ``[[clusters]] roles`` and ``max_role``), as on
every route of a cluster. ``/hooks/generic`` authenticates the request itself with
``hooks.generic_secret`` and so declares no role. Bodies are read up to
``hooks.max_body_bytes`` (413 beyond, before the rest is read); a body that is not JSON, or
not of the expected shape, is a 400 problem naming the bad part (``body``, ``version``,
``alerts.0.status`` ...). Nothing is recorded for a refused request.

The events are appended to the store by the process that takes the request; the sensor's
leader runs the rules on them within a poll interval (``events.poll_interval``), wherever
it runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, Request

from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import inline_schema, problems
from slurmtower.api.reads import read_capped
from slurmtower.api.security import Perm, Principal, require
from slurmtower.errors import AuthenticationError, InvalidInput, NotFound, PayloadTooLarge
from slurmtower.events.alerts import (
    Alert,
    AlertBatch,
    AlertmanagerNotification,
    ParsedAlert,
    parse_alertmanager,
    parse_generic,
    parse_json_body,
    record_alerts,
    recorded_summary,
    verify_signed_webhook,
)
from slurmtower.events.store import EventStore
from slurmtower.principal import ALERTER
from slurmtower.runtime import Services

__all__ = ["ALERTER_ROLE", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["hooks"])

#: The token role that may post alerts and nothing else.
ALERTER_ROLE = ALERTER

# The bodies as the parsers read them (their models' schemas: strict JSON, members they do
# not know ignored, no NUL in what is kept).
_ALERT_SCHEMA = inline_schema(Alert.model_json_schema())
_ALERTMANAGER_BODY: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": {
        **inline_schema(AlertmanagerNotification.model_json_schema()),
        "description": "Alertmanager's webhook_config body (version 4; Grafana's 1)."}}}},
}
_GENERIC_BODY: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": {
        "description": "One alert, or {\"alerts\": [...]} (Alertmanager's alert objects), signed: "
                       "X-Slurmtower-Timestamp and X-Slurmtower-Signature: sha256=<hex HMAC-SHA256(secret, "
                       "\"<timestamp>.\" + body)>.",
        "anyOf": [_ALERT_SCHEMA, inline_schema(AlertBatch.model_json_schema())],
    }}}},
}


#: Who may post alerts: ``alerter`` tokens and operators (or admins), as their role on the
#: cluster the alert is for (``[[clusters]] roles``, ``max_role``), decided by ``require`` like
#: every other route. It declares :attr:`Perm.OPERATE`: an alert can drain nodes through a rule.
#: The ``alerter`` role has no permission of its own (every other route refuses it), so
#: Alertmanager's token cannot read the cluster or act on it directly.
_MAY_POST_ALERTS = require(Perm.OPERATE, or_role=ALERTER_ROLE)


def _store(services: Services) -> EventStore:
    if not services.settings.hooks.enabled:
        raise NotFound("alert hooks are off (hooks.enabled = false)")
    store = services.event_store
    assert store is not None  # the runtime's event-store part
    return store


async def _capped_body(request: Request, limit: int) -> bytes:
    """The body, read up to ``limit`` bytes (413 past it, never read in full)."""
    async def refuse() -> PayloadTooLarge:
        return PayloadTooLarge(f"body: over hooks.max_body_bytes ({limit} bytes)", param="body")

    return await read_capped(request, limit, refuse)


async def _record(services: Services, store: EventStore, alerts: list[ParsedAlert], *, via: str,
                  who: str) -> dict[str, Any]:
    stored, duplicates = await asyncio.to_thread(record_alerts, store, alerts,
                                                 dedupe_window=services.settings.hooks.dedupe_window)
    if stored:
        log.info("%d alert(s) from %s via %s recorded as events %d-%d (%d already recorded)", len(stored), who,
                 via, stored[0].id, stored[-1].id, duplicates)
    return recorded_summary(len(alerts), stored, duplicates)


@router.post("/hooks/alertmanager", openapi_extra=_ALERTMANAGER_BODY,
             responses=problems(400, 401, 403, 404, 413, 429))
async def alertmanager_hook(request: Request, services: ClusterDep,
                            principal: Annotated[Principal, _MAY_POST_ALERTS]) -> dict[str, Any]:
    """Alertmanager's webhook (``webhook_config``): one event per alert (``alert.firing`` /
    ``alert.resolved``, the node from its labels), for rules to match. An ``alerter``,
    operator or admin token."""
    store = _store(services)
    hooks = services.settings.hooks
    body = await _capped_body(request, hooks.max_body_bytes)
    data = parse_json_body(body)
    alerts = parse_alertmanager(data, hooks=hooks)
    answer = await _record(services, store, alerts, via="alertmanager", who=principal.name)
    truncated = int(data.get("truncatedAlerts") or 0)
    if truncated:
        log.warning("Alertmanager (%s) left %d alert(s) of group %s out of its notification (max_alerts)",
                    principal.name, truncated, str(data.get("groupKey"))[:200])
    return {**answer, "truncated_alerts": truncated}


#: Refusals of the generic webhook are logged once per client address and minute.
_refusals_logged: dict[str, float] = {}


def _log_refusal(client: str, exc: Exception) -> None:
    now = time.monotonic()
    if now - _refusals_logged.get(client, float("-inf")) < 60:
        return
    if len(_refusals_logged) > 10_000:
        _refusals_logged.clear()
    _refusals_logged[client] = now
    log.warning("refused generic webhook from %s: %s (more from this address in the next minute are not "
                "logged)", client, exc)


@router.post("/hooks/generic", dependencies=[require(Perm.PUBLIC)], openapi_extra=_GENERIC_BODY,
             responses=problems(400, 401, 404, 413))
async def generic_hook(request: Request, services: ClusterDep) -> dict[str, Any]:
    """A signed webhook of alerts (``hooks.generic_secret``): one event per alert, source
    ``webhook``. Unsigned, stale, badly signed or replayed requests: 401."""
    client = request.client.host if request.client else "unknown"
    hooks = services.settings.hooks
    secret = hooks.generic_secret.get_secret_value().encode() if hooks.generic_secret is not None else None
    try:
        if not {"x-slurmtower-signature", "x-slurmtower-timestamp"} & set(request.headers.keys()):
            raise AuthenticationError("the request is not signed (X-Slurmtower-Timestamp, "
                                      "X-Slurmtower-Signature)", reason="unsigned")
        store = _store(services)
        body = await _capped_body(request, hooks.max_body_bytes)
        await asyncio.to_thread(verify_signed_webhook, secret, dict(request.headers), body, store,
                                max_clock_skew=services.settings.events.max_clock_skew)
    except (AuthenticationError, InvalidInput) as exc:
        _log_refusal(client, exc)
        raise
    alerts = parse_generic(parse_json_body(body), hooks=hooks)
    return await _record(services, store, alerts, via="webhook", who=client)
