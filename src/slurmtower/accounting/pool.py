"""The API's database work in a bounded pool of its own.

A frozen MariaDB (a server that accepts and never answers) must cost a ``/history`` request at
most ``accounting.request_wait`` seconds, a 503, and nothing else: not the threads that serve
authentication, the sensor and the snapshot rounds (``asyncio.to_thread``'s default pool), nor
more than ``accounting.max_concurrency`` threads of its own. A read that outlives the wait
goes on in its thread until the driver's own timeouts end it; while every thread is taken,
new requests get their 503 at once instead of queueing behind the stuck ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from slurmtower.errors import AccountingUnavailable

__all__ = ["AccountingPool"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class AccountingPool:
    """``await pool.run(fn)``: ``fn()`` in one of ``workers`` threads, waited for ``wait`` s."""

    def __init__(self, *, workers: int = 4, wait: float = 4.0) -> None:
        self.workers = workers
        self.wait = wait
        self._executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="accounting")
        self._busy = 0
        self._lock = threading.Lock()

    @property
    def busy(self) -> int:
        """Reads running now (some may belong to requests that already gave up)."""
        return self._busy

    def _done(self, _fut: object) -> None:
        with self._lock:
            self._busy -= 1

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in the pool; raises :class:`AccountingUnavailable` (503) when it does
        not end within ``wait`` seconds or every thread is still taken."""
        with self._lock:
            if self._busy >= self.workers:
                raise AccountingUnavailable(
                    f"the accounting database is not answering: {self._busy} reads still running")
            self._busy += 1
        try:
            fut = self._executor.submit(fn)
        except RuntimeError:  # shut down
            self._done(None)
            raise AccountingUnavailable("the accounting database reader is stopped") from None
        fut.add_done_callback(self._done)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.wait)
        except TimeoutError:
            log.warning("accounting read still running after %g s: answered 503", self.wait)
            raise AccountingUnavailable(
                f"the accounting database did not answer within {self.wait:g} s") from None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
