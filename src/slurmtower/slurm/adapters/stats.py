"""Controller statistics and health: ``sdiag --json``, REST ``/diag``, ``sdiag`` text, and REST
``/ping``.

Release steps of ``diag`` and ``ping`` records (see :mod:`._chain`):

====================  =========================================================================
step                  what changes
====================  =========================================================================
v0.0.38 -> v0.0.40    sdiag times and the RPCs' average times become number objects; ping's
                      ``ping: "UP"`` becomes ``pinged`` with a ``responding`` bool.
v0.0.40 -> v0.0.44    no change in the fields read here.
v0.0.44 -> v0.0.45    sdiag: ``parts_packed`` removed (never read). Ping: ``pinged`` and
                      ``mode`` replaced by ``status`` (``"No error"``); ``responding``, the
                      only field read, is in every format since v0.0.40. Nothing to rewrite.
====================  =========================================================================

sdiag's text names each RPC as the JSON does (25.11: the bare number ``65534``; 26.05: 6500
``REQUEST_PERSIST_INIT``), so text and JSON agree per type id. An RPC whose average is 0 prints
``ave_time:0`` in the text, and an unset average in 26.05's JSON: both read as 0 (see
:func:`_average`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from slurmtower.errors import SlurmError
from slurmtower.models.stats import ControllerStats, RpcStat, RpcUserStat
from slurmtower.models.version import SlurmVersion
from slurmtower.slurm.adapters._chain import Record, step, upgrade, wrap
from slurmtower.slurm.adapters._envelope import format_version, records
from slurmtower.slurm.adapters._json import upgraded
from slurmtower.slurm.adapters._text import as_int
from slurmtower.slurm.adapters._values import epoch, number

__all__ = ["parse_ping_json", "parse_sdiag_json", "parse_sdiag_text"]

# ----------------------------------------------------------------------------- release steps


@step("diag", 40)
def _diag_v40(record: Record, version: SlurmVersion | None) -> Record:
    wrap(record, "req_time", "req_time_start", "job_states_ts", "bf_when_last_cycle")
    for key in ("rpcs_by_message_type", "rpcs_by_user"):
        for item in record.get(key) or []:
            wrap(item, "average_time")
    return record


@step("ping", 40)
def _ping_v40(record: Record, version: SlurmVersion | None) -> Record:
    if "ping" in record and "pinged" not in record:
        record["pinged"] = record.pop("ping")
        record["responding"] = record["pinged"] == "UP"
    return record


# -------------------------------------------------------------------------------------- JSON


def _average(item: Record) -> int | None:
    """An RPC's average time in microseconds.

    26.05 (v0.0.45) prints an average of 0 as unset (REQUEST_PERSIST_INIT: one call, total 0)
    where the text says ``ave_time:0``; sdiag's average is ``total_time / count``, so an unset
    one is taken from those two when both are there.
    """
    average = number(item.get("average_time"))
    count, total = number(item.get("count")), number(item.get("total_time"))
    if average is None and count and total is not None:
        average = total // count
    return average


def _rpc_type(item: Record) -> RpcStat:
    return RpcStat(
        name=str(item.get("message_type") or item.get("type_id")),
        type_id=number(item.get("type_id")),
        count=number(item.get("count")) or 0,
        average_time_us=_average(item),
        total_time_us=number(item.get("total_time")),
    )


def _rpc_user(item: Record) -> RpcUserStat:
    return RpcUserStat(
        user=str(item.get("user") or item.get("user_id")),
        user_id=number(item.get("user_id")),
        count=number(item.get("count")) or 0,
        average_time_us=_average(item),
        total_time_us=number(item.get("total_time")),
    )


def parse_sdiag_json(doc: dict[str, Any]) -> ControllerStats:
    """Controller statistics from ``sdiag --json`` (24.11+) or REST ``/diag``.

    Raises:
        SlurmError: no ``statistics`` in the document.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("statistics"), dict):
        records(doc, "statistics")  # raises with the envelope's errors
    raw = doc["statistics"]
    fmt = format_version(doc)
    stats = upgrade("diag", raw, fmt)
    n = stats.get
    return ControllerStats(
        slurm_time=epoch(n("req_time")),
        data_since=epoch(n("req_time_start")),
        server_thread_count=number(n("server_thread_count")),
        agent_queue_size=number(n("agent_queue_size")),
        agent_count=number(n("agent_count")),
        agent_thread_count=number(n("agent_thread_count")),
        dbd_agent_queue_size=number(n("dbd_agent_queue_size")),
        jobs_submitted=number(n("jobs_submitted")),
        jobs_started=number(n("jobs_started")),
        jobs_completed=number(n("jobs_completed")),
        jobs_canceled=number(n("jobs_canceled")),
        jobs_failed=number(n("jobs_failed")),
        jobs_pending=number(n("jobs_pending")),
        jobs_running=number(n("jobs_running")),
        job_states_time=epoch(n("job_states_ts")),
        schedule_cycle_last_us=number(n("schedule_cycle_last")),
        schedule_cycle_max_us=number(n("schedule_cycle_max")),
        schedule_cycle_mean_us=number(n("schedule_cycle_mean")),
        schedule_cycle_count=number(n("schedule_cycle_total")),
        schedule_cycle_mean_depth=number(n("schedule_cycle_mean_depth")),
        schedule_cycles_per_minute=number(n("schedule_cycle_per_minute")),
        schedule_queue_length=number(n("schedule_queue_length")),
        backfill_active=n("bf_active"),
        backfilled_jobs=number(n("bf_backfilled_jobs")),
        backfilled_jobs_since_last_cycle=number(n("bf_last_backfilled_jobs")),
        backfilled_het_jobs=number(n("bf_backfilled_het_jobs")),
        backfill_cycle_count=number(n("bf_cycle_counter")),
        backfill_last_cycle_time=epoch(n("bf_when_last_cycle")),
        backfill_cycle_last_us=number(n("bf_cycle_last")),
        backfill_cycle_max_us=number(n("bf_cycle_max")),
        backfill_cycle_mean_us=number(n("bf_cycle_mean")),
        backfill_last_depth=number(n("bf_last_depth")),
        backfill_last_depth_try=number(n("bf_last_depth_try")),
        backfill_queue_length=number(n("bf_queue_len")),
        backfill_table_size=number(n("bf_table_size")),
        gettimeofday_latency_us=number(n("gettimeofday_latency")),
        rpcs_by_type=[_rpc_type(item) for item in n("rpcs_by_message_type") or []],
        rpcs_by_user=[_rpc_user(item) for item in n("rpcs_by_user") or []],
        raw=raw,
    )


def parse_ping_json(doc: dict[str, Any]) -> dict[str, bool]:
    """REST ``/ping``: controller host name -> responding.

    Raises:
        SlurmError: no ``pings`` in the document.
    """
    items, _ = upgraded(doc, "pings", "ping")
    return {str(item.get("hostname")): bool(item.get("responding")) for item in items}


# -------------------------------------------------------------------------------------- text


_SDIAG_FIELDS: dict[tuple[str, str], str] = {
    ("", "server thread count"): "server_thread_count",
    ("", "agent queue size"): "agent_queue_size",
    ("", "agent count"): "agent_count",
    ("", "agent thread count"): "agent_thread_count",
    ("", "dbd agent queue size"): "dbd_agent_queue_size",
    ("", "jobs submitted"): "jobs_submitted",
    ("", "jobs started"): "jobs_started",
    ("", "jobs completed"): "jobs_completed",
    ("", "jobs canceled"): "jobs_canceled",
    ("", "jobs failed"): "jobs_failed",
    ("", "jobs pending"): "jobs_pending",
    ("", "jobs running"): "jobs_running",
    ("main", "last cycle"): "schedule_cycle_last_us",
    ("main", "max cycle"): "schedule_cycle_max_us",
    ("main", "total cycles"): "schedule_cycle_count",
    ("main", "mean cycle"): "schedule_cycle_mean_us",
    ("main", "mean depth cycle"): "schedule_cycle_mean_depth",
    ("main", "cycles per minute"): "schedule_cycles_per_minute",
    ("main", "last queue length"): "schedule_queue_length",
    ("backfill", "total backfilled jobs (since last slurm start)"): "backfilled_jobs",
    ("backfill", "total backfilled jobs (since last stats cycle start)"): "backfilled_jobs_since_last_cycle",
    ("backfill", "total backfilled heterogeneous job components"): "backfilled_het_jobs",
    ("backfill", "total cycles"): "backfill_cycle_count",
    ("backfill", "last cycle"): "backfill_cycle_last_us",
    ("backfill", "max cycle"): "backfill_cycle_max_us",
    ("backfill", "mean cycle"): "backfill_cycle_mean_us",
    ("backfill", "last depth cycle"): "backfill_last_depth",
    ("backfill", "last depth cycle (try sched)"): "backfill_last_depth_try",
    ("backfill", "last queue length"): "backfill_queue_length",
    ("backfill", "last table size"): "backfill_table_size",
}
_SDIAG_TIMES: dict[tuple[str, str], str] = {
    ("", "sdiag output at"): "slurm_time",
    ("", "data since"): "data_since",
    ("", "job states ts"): "job_states_time",
    ("backfill", "last cycle when"): "backfill_last_cycle_time",
}
_RPC_LINE = re.compile(r"^\s*(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)")
_EPOCH_IN_PARENS = re.compile(r"\((\d+)\)\s*$")


def parse_sdiag_text(text: str) -> ControllerStats:
    """``sdiag`` text (the only form in 22.05) as :class:`ControllerStats`."""
    section = ""
    values: dict[str, Any] = {}
    raw: dict[str, dict[str, str]] = {}
    by_type: list[RpcStat] = []
    by_user: list[RpcUserStat] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("*****"):
            continue
        lower = stripped.lower()
        if not line[:1].isspace():
            if lower.startswith("main schedule statistics"):
                section = "main"
                continue
            if lower.startswith("backfilling stats"):
                section = "backfill"
                values["backfill_active"] = "middle of backfilling" in lower
                continue
            if lower.startswith("remote procedure call statistics by message type"):
                section = "rpc_type"
                continue
            if lower.startswith("remote procedure call statistics by user"):
                section = "rpc_user"
                continue
            if lower.startswith(("main scheduler exit", "backfill exit", "pending rpc")):
                section = "other"
                continue
            if lower.startswith(("sdiag output at", "data since")):
                section = ""
            elif lower.startswith("latency for 1000 calls"):
                values["gettimeofday_latency_us"] = as_int(stripped.split(":", 1)[1])
                continue
        if section in ("rpc_type", "rpc_user"):
            rpc = _RPC_LINE.match(line)
            if rpc:
                name, ident, count, average, total = rpc.groups()
                if section == "rpc_type":
                    by_type.append(
                        RpcStat(
                            name=name,
                            type_id=int(ident),
                            count=int(count),
                            average_time_us=int(average),
                            total_time_us=int(total),
                        )
                    )
                else:
                    by_user.append(
                        RpcUserStat(
                            user=name,
                            user_id=int(ident),
                            count=int(count),
                            average_time_us=int(average),
                            total_time_us=int(total),
                        )
                    )
            continue
        if lower.startswith("sdiag output at"):
            label, value = "sdiag output at", stripped
        elif lower.startswith("data since"):
            label, value = "data since", stripped
        else:
            label, sep, value = stripped.partition(":")
            if not sep:
                continue
        key = (section if section in ("main", "backfill") else "", label.strip().lower())
        raw.setdefault(section or "general", {})[key[1]] = value.strip()
        if key in _SDIAG_FIELDS:
            values[_SDIAG_FIELDS[key]] = as_int(value)
        elif key in _SDIAG_TIMES:
            stamp = _EPOCH_IN_PARENS.search(value)
            values[_SDIAG_TIMES[key]] = datetime.fromtimestamp(int(stamp[1]), UTC) if stamp else None
    if not values:
        raise SlurmError("no statistics in sdiag output")
    return ControllerStats(**values, rpcs_by_type=by_type, rpcs_by_user=by_user, raw=raw)
