"""SQLAlchemy Core descriptions of the slurmdbd tables slurmtower reads.

slurmdbd owns this schema (``accounting_storage_mysql.c``); these ``Table`` objects list only
the columns slurmtower reads, and exist to build SELECTs. Never call ``create_all`` or any
DDL with them: the metadata is deliberately not exported for that, and the database user
should hold ``SELECT`` only.

Per-cluster tables are named ``<cluster>_job_table``, ``<cluster>_assoc_table``,
``<cluster>_step_table``; ``user_table`` and ``tres_table`` are shared by all clusters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Integer, MetaData, SmallInteger, Table, Text

from slurmtower.errors import ConfigError

__all__ = ["OPTIONAL_COLUMNS", "AccountingTables", "build_tables"]

#: Columns only some releases' schemas have, by table role: read where the table has them.
#: (23.11 also replaced the assoc table's ``lft``/``rgt`` by ``lineage``; neither is read.)
OPTIONAL_COLUMNS: dict[str, frozenset[str]] = {"job": frozenset({"sluid"})}

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class AccountingTables:
    """The tables of one cluster."""

    job: Table
    assoc: Table
    step: Table
    user: Table
    tres: Table


def _check(name: str, what: str) -> str:
    # Table names cannot be bound parameters; they come from configuration, never from a
    # request, and are still restricted to what slurmdbd itself creates.
    if not _NAME.match(name):
        raise ConfigError(f"invalid accounting {what} name {name!r}", key=f"accounting.{what}")
    return name


def build_tables(
    cluster: str,
    *,
    job_table: str | None = None,
    assoc_table: str | None = None,
    step_table: str | None = None,
) -> AccountingTables:
    """Table objects for ``cluster`` (``<cluster>_job_table`` ...), each name overridable.

    Raises :class:`ConfigError` for a name slurmdbd could not have created.
    """
    _check(cluster, "cluster")
    md = MetaData()
    job = Table(
        _check(job_table or f"{cluster}_job_table", "job_table"),
        md,
        Column("job_db_inx", BigInteger, primary_key=True),
        Column("deleted", SmallInteger),
        Column("account", Text),
        Column("derived_ec", BigInteger),
        Column("exit_code", BigInteger),
        Column("job_name", Text),
        Column("id_assoc", BigInteger),
        Column("id_array_job", BigInteger),
        Column("id_array_task", BigInteger),
        Column("id_job", BigInteger),
        Column("id_user", BigInteger),
        Column("id_group", BigInteger),
        Column("mem_req", BigInteger),
        Column("nodelist", Text),
        Column("nodes_alloc", BigInteger),
        Column("partition", Text),  # a reserved word in MariaDB: SQLAlchemy quotes it
        Column("state", BigInteger),
        Column("timelimit", BigInteger),
        Column("time_submit", BigInteger),
        Column("time_eligible", BigInteger),
        Column("time_start", BigInteger),
        Column("time_end", BigInteger),
        Column("work_dir", Text),
        Column("submit_line", Text),
        # 26.05+ only (see OPTIONAL_COLUMNS): selected where the table has it
        Column("sluid", Text),
        Column("tres_alloc", Text),
        Column("tres_req", Text),
    )
    assoc = Table(
        _check(assoc_table or f"{cluster}_assoc_table", "assoc_table"),
        md,
        Column("id_assoc", BigInteger, primary_key=True),
        Column("deleted", SmallInteger),
        Column("is_def", SmallInteger),
        Column("user", Text),
        Column("acct", Text),
        Column("partition", Text),
        Column("parent_acct", Text),
        Column("shares", Integer),
        Column("max_jobs", Integer),
        Column("max_jobs_accrue", Integer),
        Column("max_submit_jobs", Integer),
        Column("max_tres_pj", Text),
        Column("max_tres_pn", Text),
        Column("max_tres_mins_pj", Text),
        Column("max_wall_pj", Integer),
        Column("grp_jobs", Integer),
        Column("grp_submit_jobs", Integer),
        Column("grp_tres", Text),
        Column("grp_tres_mins", Text),
        Column("grp_wall", Integer),
        Column("priority", BigInteger),
    )
    step = Table(
        _check(step_table or f"{cluster}_step_table", "step_table"),
        md,
        Column("job_db_inx", BigInteger, primary_key=True),
        Column("id_step", Integer, primary_key=True),
        Column("step_het_comp", BigInteger, primary_key=True),
        Column("deleted", SmallInteger),
        Column("exit_code", Integer),
        Column("nodelist", Text),
        Column("nodes_alloc", BigInteger),
        Column("state", SmallInteger),
        Column("step_name", Text),
        Column("task_cnt", BigInteger),
        Column("time_start", BigInteger),
        Column("time_end", BigInteger),
        Column("user_sec", BigInteger),
        Column("user_usec", BigInteger),
        Column("sys_sec", BigInteger),
        Column("sys_usec", BigInteger),
        Column("tres_alloc", Text),
        # the maxima of the step's tasks (sacct's MaxRSS is its TRES 2, mem, in bytes)
        Column("tres_usage_in_max", Text),
    )
    user = Table(
        "user_table",
        md,
        Column("name", Text, primary_key=True),
        Column("deleted", SmallInteger),
        Column("admin_level", SmallInteger),
    )
    tres = Table(
        "tres_table",
        md,
        Column("id", Integer, primary_key=True),
        Column("deleted", SmallInteger),
        Column("type", Text),
        Column("name", Text),
    )
    return AccountingTables(job=job, assoc=assoc, step=step, user=user, tres=tres)
