"""Reservations: ``scontrol show reservation --json``, REST ``/reservations`` and ``scontrol -o
show reservation``.

Release steps of ``reservation`` records (see :mod:`._chain`):

====================  =========================================================================
step                  what changes
====================  =========================================================================
v0.0.38 -> v0.0.40    ``flags`` a comma string -> a list; start and end epochs become number
                      objects.
v0.0.40 -> v0.0.44    no change in the fields read here.
v0.0.44 -> v0.0.45    ``watts`` (``{}``) removed, never read: nothing to rewrite.
====================  =========================================================================

``Duration=infinite`` is stored as 365 days in every release.
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Any

from slurmtower.models.reservation import Reservation
from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._chain import Record, step, wrap
from slurmtower.slurm.adapters._json import upgraded
from slurmtower.slurm.adapters._text import as_duration, as_int, field, scontrol_records
from slurmtower.slurm.adapters._values import epoch, number, parse_text_time, split_list, text_or_none

__all__ = ["parse_reservations_json", "parse_reservations_text"]

# ----------------------------------------------------------------------------- release steps


@step("reservation", 40)
def _reservation_v40(record: Record, version: SlurmVersion | None) -> Record:
    flags = record.get("flags")
    if isinstance(flags, str):
        record["flags"] = [f for f in flags.split(",") if f]
    wrap(record, "start_time", "end_time")
    return record


# -------------------------------------------------------------------------------------- JSON


def _reservation(record: Record) -> Reservation:
    start, end = epoch(record.get("start_time")), epoch(record.get("end_time"))
    return Reservation(
        name=record["name"],
        nodes=text_or_none(record.get("node_list")),
        node_count=number(record.get("node_count")),
        core_count=number(record.get("core_count")),
        start_time=start,
        end_time=end,
        duration=end - start if start is not None and end is not None else None,
        flags=split_list(record.get("flags")),
        users=split_list(record.get("users")),
        accounts=split_list(record.get("accounts")),
        groups=split_list(record.get("groups")),
        partition=text_or_none(record.get("partition")),
        features=text_or_none(record.get("features")),
        tres=text_or_none(record.get("tres")),
    )


def parse_reservations_json(doc: dict[str, Any]) -> list[Reservation]:
    """Reservations from ``scontrol show reservation --json`` or REST ``/reservations``.

    Raises:
        SlurmError: no ``reservations`` in the document.
    """
    items, _ = upgraded(doc, "reservations", "reservation")
    return [_reservation(item) for item in items]


# -------------------------------------------------------------------------------------- text


def parse_reservations_text(text: str, *, tz: tzinfo | None = None) -> list[Reservation]:
    """Reservations from ``scontrol -o show reservation``; 22.05 prints "No reservations in
    the system" when there are none, which gives ``[]``."""
    return [
        Reservation(
            name=f["ReservationName"],
            nodes=field(f, "Nodes"),
            node_count=as_int(f.get("NodeCnt")),
            core_count=as_int(f.get("CoreCnt")),
            start_time=parse_text_time(f.get("StartTime"), tz),
            end_time=parse_text_time(f.get("EndTime"), tz),
            duration=as_duration(f.get("Duration")),
            flags=split_list(f.get("Flags")),
            users=split_list(f.get("Users")),
            accounts=split_list(f.get("Accounts")),
            groups=split_list(f.get("Groups")),
            partition=field(f, "PartitionName"),
            features=field(f, "Features"),
            tres=field(f, "TRES"),
            state=field(f, "State"),
        )
        for f in scontrol_records(text, "ReservationName")
    ]
