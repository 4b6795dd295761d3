"""/load: the archived load series (:mod:`slurmtower.live.archive`).

The archiver (the runtime's ``load-archiver`` task, run by the ``archiver`` role's leader)
samples the cluster load every ``archiver.archive_wait_time`` seconds into slurmtower's own
store from the shared snapshots (no extra Slurm query while clients poll); samples older
than ``archiver.retention_days`` are deleted. This route reads them back.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from slurmtower.api.deps import ClusterDep
from slurmtower.api.params import READ_PROBLEMS, problems
from slurmtower.api.reads import strict_query
from slurmtower.api.security import Perm, require
from slurmtower.errors import ConfigError, InvalidInput
from slurmtower.live.archive import LoadSample

__all__ = ["LoadResponse", "router"]

router = APIRouter(tags=["live"])
_DIGITS = re.compile(r"[0-9]{1,12}")
_MAX_SECONDS = 10**12 - 1


class LoadResponse(BaseModel):
    archiving: bool
    archive_wait_time: float
    count: int
    samples: list[LoadSample]


def _seconds(params: dict[str, str], name: str, default: float) -> float:
    value = params.get(name)
    if value is None:
        return default
    if not _DIGITS.fullmatch(value):
        raise InvalidInput(f"{name} must be a whole number of seconds, not {value[:40]!r}", param=name)
    return float(value)


@router.get("/load", dependencies=[require(Perm.READ)], response_model=LoadResponse,
            responses=problems(400, *READ_PROBLEMS))
async def load(
    request: Request,
    services: ClusterDep,
    time_s: Annotated[int | None, Query(alias="time", ge=1, le=_MAX_SECONDS, description="Seconds of samples "
                                        "(default: one archive interval).")] = None,
    offset_s: Annotated[int | None, Query(alias="offset", ge=0, le=_MAX_SECONDS, description="Ending this many "
                                          "seconds ago (default 0).")] = None,
) -> LoadResponse:
    """Archived load samples of the last ``time`` seconds (default: one archive interval),
    ending ``offset`` seconds ago."""
    params = strict_query(request, ("time", "offset"))
    settings = services.settings.archiver
    span = _seconds(params, "time", settings.archive_wait_time)
    offset = _seconds(params, "offset", 0)
    if span <= 0:
        raise InvalidInput("time must be at least 1 second", param="time")
    end = time.time() - offset
    archive = services.load_archive
    if archive is None:
        raise ConfigError("the load archive is not configured")
    samples = await asyncio.to_thread(archive.window, end - span, end)
    return LoadResponse(archiving=settings.archive_usage_load, archive_wait_time=settings.archive_wait_time,
                        count=len(samples), samples=samples)
