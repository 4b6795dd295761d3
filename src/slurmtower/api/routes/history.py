"""/history and /users from slurmdbd's database (:mod:`slurmtower.accounting`).

``/history`` parses the *raw* query string (``/history?jobid<=987654&user=alice``): see
:mod:`slurmtower.accounting.query` for every filter. Database reads run in worker threads so
a slow or dead database never blocks the event loop; when it does not answer the routes
give a 503 problem while the live routes keep working.
"""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request

from slurmtower.accounting import AccountingDB, HistoryQuery, parse_history_query
from slurmtower.api.cache import services_of, strict_query
from slurmtower.api.security import Perm, require
from slurmtower.api.services import Services
from slurmtower.errors import AccountingUnavailable, ConfigError, InvalidInput
from slurmtower.models.accounting import AccountingUser, HistoryPage

__all__ = ["accounting_db", "router", "setup", "shutdown"]

router = APIRouter(tags=["accounting"])
ServicesDep = Annotated[Services, Depends(services_of)]
_lock = threading.Lock()
# User, account and partition names Slurm accepts (POSIX-ish names; '@' for LDAP domains).
# Anything else (quotes, spaces, SQL) is refused rather than looked up.
_NAME = re.compile(r"[A-Za-z0-9_.@][A-Za-z0-9_.@-]{0,127}")


def _check_names(query: HistoryQuery) -> None:
    for param in ("user", "partition", "account"):
        value = getattr(query, param)
        if value is not None and not _NAME.fullmatch(value):
            raise InvalidInput(f"{param} is not a valid {param} name: {value[:60]!r}", param=param)


def setup(services: Services, _app: FastAPI) -> None:
    # Building the engine does not connect; a missing cluster name is resolved on first use.
    settings = services.settings
    if settings.accounting.url is not None and (settings.accounting.cluster or settings.cluster_name):
        services.accounting = AccountingDB.from_settings(settings)


async def shutdown(services: Services) -> None:
    db = services.accounting
    if db is not None:
        await asyncio.to_thread(db.close)


def accounting_db(services: Services) -> AccountingDB:
    """The process's :class:`AccountingDB` (blocking: call from a worker thread).

    Raises :class:`AccountingUnavailable` when no database is configured.
    """
    db = services.accounting
    if db is not None:
        return db
    settings = services.settings
    if settings.accounting.url is None:
        raise AccountingUnavailable("no accounting database is configured (accounting.url)")
    with _lock:
        db = services.accounting
        if db is not None:
            return db
        cluster = (settings.accounting.cluster or settings.cluster_name
                   or services.client.config().cluster_name)
        try:
            db = AccountingDB.from_settings(settings.model_copy(update={"cluster_name": cluster}))
        except ConfigError as exc:
            raise AccountingUnavailable(f"accounting database not usable: {exc.message}") from exc
        services.accounting = db
        return db


@router.get("/history", dependencies=[require(Perm.READ)], response_model=HistoryPage)
async def history(request: Request, services: ServicesDep) -> HistoryPage:
    """Job history, newest first: filters limit, offset, cursor, user, partition, account,
    jobname, associd, state (0-11 or name), jobid (= > < >= <=), submitted/started/ended
    before/after."""
    query = parse_history_query(request.scope.get("query_string", b"").decode("latin-1"))
    _check_names(query)
    timeout = services.settings.accounting.query_timeout + services.settings.accounting.connect_timeout

    def read() -> HistoryPage:
        return accounting_db(services).history(query)

    try:
        return await asyncio.wait_for(asyncio.to_thread(read), timeout + 2)
    except TimeoutError as exc:
        raise AccountingUnavailable("the accounting database did not answer in time") from exc


@router.get("/users", dependencies=[require(Perm.READ)], response_model=list[AccountingUser])
async def users(request: Request, services: ServicesDep) -> list[AccountingUser]:
    """Users known to slurmdbd with their associations (accounts, partitions, limits); ``name=``."""
    params = strict_query(request, ("name",))
    name = params.get("name")
    if name is not None and not _NAME.fullmatch(name):
        raise InvalidInput(f"name is not a valid user name: {name[:60]!r}", param="name")
    timeout = services.settings.accounting.query_timeout + services.settings.accounting.connect_timeout

    hidden = set(services.settings.api.hidden_partitions)

    def read() -> list[AccountingUser]:
        found = accounting_db(services).users(name)
        if not hidden:
            return found
        # associations limited to a hidden partition are hidden like the partition itself
        return [u.model_copy(update={"associations": [a for a in u.associations if a.partition not in hidden]})
                for u in found]

    try:
        return await asyncio.wait_for(asyncio.to_thread(read), timeout + 2)
    except TimeoutError as exc:
        raise AccountingUnavailable("the accounting database did not answer in time") from exc
