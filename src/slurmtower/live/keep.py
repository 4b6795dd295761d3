"""The last snapshots kept on disk, so that a restarted service answers at once.

At 100,000 jobs the first read of Slurm after a start takes several seconds (slurmctld's
answer, its parsing); until it is done a service without a snapshot can only make its clients
wait, then 503. :class:`SnapshotKeeper` writes each resource's snapshot that this process read
from Slurm to ``<state_dir>/snapshots/<resource>.snap`` every ``api.keep_snapshots_interval``
seconds (when it changed), and at start hands them to the cache
(:meth:`~slurmtower.live.cache.SnapshotCache.restore`): served at once, marked stale with
their real age (``X-Data-Stale``, ``X-Data-Age``, the body's ``stale_reason``), until this
run's first round replaces them. ``/ready`` lists the resources still served so.

A file is the shared cache's blob (:mod:`slurmtower.live.codec`: no pickle, every length and
index checked on the way in) after a header of its own::

    b"STKEEP1\\n" | fetched_at (float64 LE, unix seconds) | blob

written to a temporary file and renamed (a crash leaves the last whole file), mode 0600 (the
queue's private fields are in it). A file that does not decode is left aside (logged); one older
than ``max_age`` is not served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from datetime import UTC, datetime
from pathlib import Path

from slurmtower.live.cache import SnapshotCache
from slurmtower.live.codec import decode_snapshot, encode_snapshot

__all__ = ["MAGIC", "SnapshotKeeper"]

log = logging.getLogger(__name__)

MAGIC = b"STKEEP1\n"
_WHEN = struct.Struct("<d")
#: What is kept: the resources the codec knows.
RESOURCES = ("jobs", "nodes", "partitions", "stats")


class SnapshotKeeper:
    """Keeps ``cache``'s snapshots in ``directory`` and gives them back at start.

    Args:
        interval: seconds between two writes of a resource (only when it changed).
        max_age: a kept snapshot older than this (seconds) is not served at start (the job
            table in it still primes the first read: :meth:`SnapshotCache.prime`).
    """

    def __init__(self, directory: Path, cache: SnapshotCache, *, interval: float, max_age: float = 86400.0) -> None:
        self.directory = directory
        self.cache = cache
        self.interval = interval
        self.max_age = max_age
        self._kept: dict[str, int] = {}
        #: Files written (for tests).
        self.writes = 0

    def _path(self, resource: str) -> Path:
        return self.directory / f"{resource}.snap"

    def restore(self) -> list[str]:
        """Hand the kept snapshots to the cache (blocking: decoding 100,000 jobs takes a
        moment); returns the resources restored."""
        restored = []
        for resource in RESOURCES:
            if resource not in self.cache.resources:
                continue
            path = self._path(resource)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot read the kept %s snapshot %s: %s", resource, path, exc.strerror)
                continue
            try:
                if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _WHEN.size:
                    raise ValueError("not a kept snapshot")
                (at,) = _WHEN.unpack_from(data, len(MAGIC))
                if not 0 < at <= time.time() + 60:
                    raise ValueError(f"a time that is not one: {at}")
                value = decode_snapshot(resource, data[len(MAGIC) + _WHEN.size:])
            except ValueError as exc:
                log.warning("the kept %s snapshot %s does not decode (%s): not served", resource, path, exc)
                continue
            if time.time() - at > self.max_age:
                log.info("the kept %s snapshot is %.0f s old (api.keep_snapshots_max_age %g s): not served",
                         resource, time.time() - at, self.max_age)
                # Its job table still spares the first read the parsing of the lines that did
                # not change since.
                self.cache.prime(resource, value)
                continue
            if self.cache.restore(resource, value, datetime.fromtimestamp(at, UTC)) is not None:
                restored.append(resource)
        if restored:
            log.info("serving the kept snapshots of %s until the first read of Slurm", ", ".join(restored))
        return restored

    async def round(self) -> float:
        """Write each snapshot this process read from Slurm since the last write."""
        for resource in RESOURCES:
            if resource not in self.cache.resources:
                continue
            snap = self.cache.peek(resource)
            if snap is None or snap.stale or not self.cache.is_own(resource) \
                    or self._kept.get(resource) == snap.generation:
                continue
            # As the full read gave it (the state reads' overlay is this run's only).
            await asyncio.to_thread(self._write, resource, self.cache.base_value(resource), snap.fetched_at)
            self._kept[resource] = snap.generation
        return self.interval

    def _write(self, resource: str, value: object, fetched_at: datetime) -> None:
        blob = encode_snapshot(resource, value, compress=1)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(resource)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(MAGIC + _WHEN.pack(fetched_at.timestamp()) + blob)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.writes += 1
