"""slurmtower.accounting: read-only access to slurmdbd's database and the /history query language.

::

    db = AccountingDB.from_settings(settings)
    page = db.history(parse_history_query("jobid<=987654&user=alice&limit=25"))
    more = db.history(parse_history_query(f"jobid<=987654&user=alice&limit=25&cursor={page.next_cursor}"))
    usage = Reports(db).usage(UsageQuery(start=..., end=..., group_by="account", tres=("cpu", "gres/gpu")))
"""

from __future__ import annotations

from slurmtower.accounting.db import FIND_JOBS_CRITERIA, AccountingDB, decode_wait_status, parse_tres
from slurmtower.accounting.query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    NAME,
    Comparator,
    Cursor,
    HistoryOrder,
    HistoryQuery,
    check_names,
    parse_history_query,
    parse_job_state,
)
from slurmtower.accounting.reports import (
    AvailabilityQuery,
    EfficiencyQuery,
    Reports,
    UsageQuery,
    WaitQuery,
)
from slurmtower.accounting.tables import AccountingTables, build_tables

__all__ = [
    "DEFAULT_LIMIT",
    "FIND_JOBS_CRITERIA",
    "MAX_LIMIT",
    "NAME",
    "AccountingDB",
    "AccountingTables",
    "AvailabilityQuery",
    "Comparator",
    "Cursor",
    "EfficiencyQuery",
    "HistoryOrder",
    "HistoryQuery",
    "Reports",
    "UsageQuery",
    "WaitQuery",
    "build_tables",
    "check_names",
    "decode_wait_status",
    "parse_history_query",
    "parse_job_state",
    "parse_tres",
]
