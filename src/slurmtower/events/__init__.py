"""slurmtower.events: node events, their store, and authenticated trigger callbacks.

The sensor loop (``events/sensor.py``) builds on these; ``events/notify.py`` is the
standalone trigger program and is deliberately not imported here.
"""

from __future__ import annotations

from slurmtower.events.callback import (
    HEADER_NONCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    CallbackVerifier,
    MemoryNonceStore,
    NonceStore,
    TriggerCallback,
    VerifiedCallback,
    generate_key,
    install_notify_program,
    load_key,
    notify_program_path,
    parse_callback,
    sign_request,
    triggered_event,
)
from slurmtower.events.store import EventStore, PurgeResult
from slurmtower.events.transitions import NodeSnapshot, diff_states

__all__ = [
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "CallbackVerifier",
    "EventStore",
    "MemoryNonceStore",
    "NodeSnapshot",
    "NonceStore",
    "PurgeResult",
    "TriggerCallback",
    "VerifiedCallback",
    "diff_states",
    "generate_key",
    "install_notify_program",
    "load_key",
    "notify_program_path",
    "parse_callback",
    "sign_request",
    "triggered_event",
]
