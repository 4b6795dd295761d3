"""Triggers: ``strigger --get`` (text only in every release; no JSON form, no release steps).

The format is the same from 22.05 to 26.05; the order of the lines is not fixed.
"""

from __future__ import annotations

from slurmtower.models.trigger import Trigger

__all__ = ["parse_triggers_text"]


def parse_triggers_text(text: str) -> list[Trigger]:
    """``strigger --get``. The FLAGS column is empty for one-shot triggers, so the line is
    split into six columns, then an optional ``PERM``, then the program with its arguments."""
    triggers = []
    for line in text.splitlines():
        parts = line.split(maxsplit=6)
        if len(parts) < 7 or not parts[0].isdigit():
            continue
        trigger_id, res_type, res_id, event, offset, user, rest = parts
        flags: list[str] = []
        first, _, remainder = rest.partition(" ")
        if not first.startswith("/") and first.isupper():
            flags = [f for f in first.split(",") if f]
            rest = remainder.strip()
        triggers.append(
            Trigger(
                trigger_id=int(trigger_id),
                res_type=res_type,
                res_id=res_id,
                type=event,
                offset=int(offset),
                user=user,
                flags=flags,
                program=rest,
            )
        )
    return triggers
