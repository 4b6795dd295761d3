"""One snapshot for the deployment: one elected process refreshes, the others read Redis.

A deployment runs the API in several processes (``serve --workers N``) and on several hosts.
Alone, each process's :class:`~slurmtower.live.cache.SnapshotCache` queries slurmctld once
per resource per interval, so slurmctld's load grows with the processes. With
``api.shared_cache_url`` set, the processes of one deployment (``api.shared_cache_prefix``)
share one snapshot through Redis:

* **election**: every process tries, every :attr:`SharedSnapshots.tick` seconds, to hold the
  lease ``<prefix>:refresher`` (``SET NX PX``, renewed by its holder in the same Lua script
  while the value is still its own identity). The holder is the *refresher*: it alone queries
  Slurm. A refresher killed with ``-9`` stops renewing and a follower holds the lease one
  TTL later (two refresh intervals, at least 3 s); one that stops cleanly deletes it.
* **publication**: after each round the refresher encodes the new value
  (:mod:`~slurmtower.live.codec`, no pickle) and stores it under a content-addressed
  key ``<prefix>:value:<resource>:<digest>`` only when it changed; then one Lua script,
  fenced by the lease (a refresher that lost it writes nothing), points the hash
  ``<prefix>:meta:<resource>`` (``seq``, ``version``, ``fetched_at``, ``interval``) at it,
  gives the previous value a short grace TTL and publishes ``"<resource> <seq>"`` on
  ``<prefix>:rounds``. An unchanged round moves only ``seq`` and ``fetched_at``.
* **followers** read the small hash when their snapshot is due (or at once on the pub/sub
  message, for resources asked for lately), fetch and decode the value when its version
  moved, and serve it with the refresher's ``fetched_at`` (``X-Data-Age`` is the age since the
  refresher's Slurm query; body and ETag are the same bytes). A read made while the
  follower is asked for the resource also sets ``<prefix>:want:<resource>`` for two
  intervals: the refresher refreshes what any process is asked for (not only what it is
  asked for itself), and stops soon after the last reader anywhere.
* **fallback**: a Redis operation that fails or takes longer than ``api.shared_cache_timeout``
  makes the process refresh alone, as without Redis, from that round on; the next election
  round that reaches Redis makes it a refresher or a follower again. ``/ready`` says which
  (:attr:`SharedSnapshots.mode`).

Why Redis: the snapshot is a cache that may be lost, rewritten as a whole every few seconds
(tens of MB at 100,000 jobs: 50 MB raw, 10 MB with ``api.shared_cache_compression=1``).
PostgreSQL would write every copy to its WAL and vacuum the dead ones; NATS JetStream's
key-value store caps a value at the max payload (1 MB by default). Redis keeps it in memory
only, SETs and GETs MBs at memory speed, and its pub/sub tells the followers at once; the
election needs no other engine. Whoever can write the keys can falsify what the API shows
(give the deployment its own Redis user), but never run code: the values are JSON and packed
arrays, checked when decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from sqlalchemy.engine import make_url

from slurmtower.live.codec import blob_digest, decode_snapshot, encode_snapshot
from slurmtower.settings import Settings

__all__ = ["Pulled", "SharedSnapshots", "SharedUnreachable", "deployment_prefix"]

log = logging.getLogger(__name__)

REFRESHER = "shared (refresher)"
FOLLOWER = "shared (follower)"
UNREACHABLE = "own refresh: redis unreachable"
UNREADABLE = "own refresh: shared snapshot unreadable"
STARTING = "own refresh: electing"
#: What a process without ``api.shared_cache_url`` says.
ALONE = "own refresh"

#: SET NX PX for a newcomer, PEXPIRE for the holder: one round trip, atomic.
_HOLD = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

_RESIGN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

#: KEYS: lease, meta, the new value. ARGV: identity, version, fetched_at, interval, grace ms,
#: keep ms, channel, resource, value key prefix. 0: not the refresher; -1: value missing.
_PUBLISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
local old = redis.call('HGET', KEYS[2], 'version')
if old and old ~= ARGV[2] then redis.call('PEXPIRE', ARGV[9] .. old, ARGV[5]) end
redis.call('PEXPIRE', KEYS[3], ARGV[6])
local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
redis.call('HSET', KEYS[2], 'version', ARGV[2], 'fetched_at', ARGV[3], 'interval', ARGV[4],
           'refresher', ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('PUBLISH', ARGV[7], ARGV[8] .. ' ' .. seq)
return seq
"""


class SharedUnreachable(Exception):
    """Redis failed or was too slow (or held an unreadable value): refresh alone this round.

    Raised by :class:`SharedSnapshots` to the cache, which catches it; it never reaches a route.
    """


@dataclass(frozen=True)
class Pulled:
    """A round of the refresher newer than the follower's."""

    seq: int
    version: str
    fetched_at: datetime
    interval: float
    value: Any = None
    """The decoded value; ``None`` when ``version`` is the one the follower holds."""
    changed: bool = True


def deployment_prefix(settings: Settings) -> str:
    """``api.shared_cache_prefix`` (``:<cluster>`` after it for a deployment's other clusters),
    or one made from the cluster name and a digest of the store
    URL (password left out) and the hidden partitions: processes that share a store (one
    deployment) share a prefix; two deployments on one Redis never mix, nor do replicas
    configured to hide different partitions."""
    if settings.api.shared_cache_prefix:
        # several clusters ([[clusters]]): the other clusters' keys under their own names
        key = settings.cluster_key()
        return f"{settings.api.shared_cache_prefix}:{key}" if key else settings.api.shared_cache_prefix

    store = make_url(settings.effective_store_url()).render_as_string(hide_password=True)
    hidden = ",".join(sorted(settings.api.hidden_partitions))
    digest = hashlib.blake2b(f"{store}\n{hidden}".encode(), digest_size=6).hexdigest()
    return f"slurmtower:{settings.cluster_name or 'slurm'}:{digest}"


class SharedSnapshots:
    """This process's part in the deployment's shared snapshot (see the module docstring).

    Args:
        url: the Redis URL (``redis://``, ``rediss://``, ``unix://``).
        prefix: the deployment's key prefix (:func:`deployment_prefix`).
        timeout: a Redis operation slower than this counts as unreachable (the values' GET
            and SET get ten times as long: they are MBs).
        lease_seconds: the refresher's lease TTL: a dead refresher is replaced after this.
        compression: zlib level of the shared tables' rows (0: none).
        identity: this process in the lease (default ``host:pid:random``).
    """

    def __init__(self, url: str, prefix: str, *, timeout: float = 0.5, lease_seconds: float = 4.0,
                 compression: int = 0, identity: str | None = None) -> None:
        self.prefix = prefix
        self.timeout = timeout
        self.lease_seconds = lease_seconds
        self.compression = compression
        self.identity = identity or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        no_retry = Retry(NoBackoff(), 0)  # a failure is a fallback now, not three retries later
        self._fast = aioredis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                             retry=no_retry)
        self._bulk = aioredis.Redis.from_url(url, socket_timeout=max(10 * timeout, 5.0),
                                             socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
        self._hold = self._fast.register_script(_HOLD)
        self._resign = self._fast.register_script(_RESIGN)
        self._publish = self._fast.register_script(_PUBLISH)
        self._mode = STARTING
        self._stale_pools = False
        self._listener: asyncio.Task[None] | None = None
        self._heard: Counter[str] = Counter()
        self._events: dict[str, asyncio.Event] = {}
        self._published: dict[str, tuple[Any, str]] = {}
        self._unreadable: set[str] = set()
        #: Rounds this process published, values it stored, rounds it read, values it fetched.
        self.stats: Counter[str] = Counter()
        #: Called with a resource's name when the refresher announces a new round of it.
        self.on_round: Callable[[str], None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> SharedSnapshots:
        """The shared snapshot ``settings.api`` configures (``shared_cache_url`` must be set)."""
        api = settings.api
        assert api.shared_cache_url is not None
        return cls(api.shared_cache_url.get_secret_value(), deployment_prefix(settings),
                   timeout=api.shared_cache_timeout, lease_seconds=max(3.0, 2 * api.refresh_interval),
                   compression=api.shared_cache_compression)

    # -- state ------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``"shared (refresher)"``, ``"shared (follower)"`` or ``"own refresh: <why>"``."""
        return self._mode

    @property
    def refreshing(self) -> bool:
        """This process holds the lease: it queries Slurm and publishes."""
        return self._mode == REFRESHER

    @property
    def following(self) -> bool:
        """Another process refreshes: this one reads Redis."""
        return self._mode == FOLLOWER

    @property
    def tick(self) -> float:
        """Seconds between election rounds (a quarter of the lease, at most 0.5 s)."""
        return min(0.5, self.lease_seconds / 4)

    def _key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @property
    def channel(self) -> str:
        return self._key("rounds")

    def _fail(self, what: str, exc: BaseException, mode: str = UNREACHABLE) -> SharedUnreachable:
        if self._mode != mode:
            log.warning("shared snapshot: %s failed (%s: %s); this process refreshes alone until it answers",
                        what, type(exc).__name__, exc)
        self._mode = mode
        if mode == UNREACHABLE:
            # The pools' idle connections may be to a Redis that died: each would fail one
            # round after it is back. The next election drops them all first.
            self._stale_pools = True
        return SharedUnreachable(f"{what}: {type(exc).__name__}")

    # -- election -----------------------------------------------------------------------------
    async def elect(self, resources: Iterable[str] = ()) -> list[str]:
        """One election round: hold (or renew) the lease if free (or ours); start the pub/sub
        listener. Returns, for a refresher, the ``resources`` some follower wants.

        Never raises: a Redis failure makes this process refresh alone (:attr:`mode`).
        """
        names = list(resources)
        try:
            if self._stale_pools:
                self._stale_pools = False
                for client in (self._fast, self._bulk):
                    await client.connection_pool.disconnect()
            async with self._fast.pipeline(transaction=False) as pipe:
                await self._hold(keys=[self._key("refresher")],
                                 args=[self.identity, int(self.lease_seconds * 1000)], client=pipe)
                if names:
                    pipe.mget([self._key("want", r) for r in names])
                replies = await pipe.execute()
        except (RedisError, OSError) as exc:
            self._fail("an election round", exc)
            return []
        held = replies[0] == 1
        before = self._mode
        self._mode = REFRESHER if held else FOLLOWER
        if before != self._mode:
            log.info("shared snapshot %s: this process (%s) is now %s", self.prefix, self.identity, self._mode)
            if not held:
                self._published.clear()
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="shared-snapshot-rounds")
        if not held or not names:
            return []
        return [r for r, want in zip(names, replies[1], strict=True) if want is not None]

    async def resign(self) -> None:
        """Give up the lease (if held) so another process takes over at once."""
        with contextlib.suppress(RedisError, OSError):
            if self._mode == REFRESHER:
                await self._resign(keys=[self._key("refresher")], args=[self.identity])
        self._mode = STARTING

    async def _listen(self) -> None:
        pubsub = self._fast.pubsub()
        try:
            await pubsub.subscribe(self.channel)
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=max(1.0, self.timeout))
                if message is None or message.get("type") != "message":
                    continue
                resource = bytes(message["data"]).decode(errors="replace").partition(" ")[0]
                self._heard[resource] += 1
                event = self._events.pop(resource, None)
                if event is not None:
                    event.set()
                if self.following and self.on_round is not None:
                    self.on_round(resource)
        except (RedisError, OSError) as exc:
            log.debug("shared snapshot: the round listener stopped (%s); the next election restarts it", exc)
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    def heard(self, resource: str) -> int:
        """How many rounds of ``resource`` this process heard announced (see :meth:`wait_round`)."""
        return self._heard[resource]

    async def wait_round(self, resource: str, mark: int, timeout: float) -> None:
        """Wait until a round of ``resource`` after ``mark`` (:meth:`heard`) is announced, at most
        ``timeout`` seconds (a missed announcement costs one timeout, not the round)."""
        if self._heard[resource] != mark:
            return
        event = self._events.setdefault(resource, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    # -- the refresher's side -----------------------------------------------------------------
    async def publish(self, resource: str, value: Any, fetched_at: datetime, interval: float) -> int:
        """Publish one round of ``resource`` (its value stored only when it changed).

        Returns the round's sequence number, or 0 when this process no longer holds the lease
        (it becomes a follower). Raises :class:`SharedUnreachable`.
        """
        memo = self._published.get(resource)
        blob: bytes | None = None
        if memo is not None and memo[0] is value:
            version = memo[1]
        else:
            blob = await asyncio.to_thread(encode_snapshot, resource, value, compress=self.compression)
            version = await asyncio.to_thread(blob_digest, blob)
        value_prefix = self._key("value", resource) + ":"
        keep_ms = int(1000 * max(300.0, 10 * interval))
        grace_ms = int(1000 * max(10.0, 2 * interval))
        keys = [self._key("refresher"), self._key("meta", resource), value_prefix + version]
        args: list[str | int] = [self.identity, version, fetched_at.isoformat(), repr(float(interval)),
                                 grace_ms, keep_ms, self.channel, resource, value_prefix]
        try:
            seq = int(await self._publish(keys=keys, args=args))
            if seq == -1:
                if blob is None:
                    blob = await asyncio.to_thread(encode_snapshot, resource, value, compress=self.compression)
                await self._bulk.set(keys[2], blob, px=keep_ms)
                self.stats["values_stored"] += 1
                seq = int(await self._publish(keys=keys, args=args))
        except (RedisError, OSError) as exc:
            raise self._fail(f"publishing {resource}", exc) from exc
        if seq == 0:
            if self._mode == REFRESHER:
                log.warning("shared snapshot: %s lost the refresher's lease; following", self.identity)
                self._mode = FOLLOWER
            self._published.clear()
            return 0
        self._published[resource] = (value, version)
        self.stats["rounds_published"] += 1
        return seq

    # -- the followers' side ------------------------------------------------------------------
    async def pull(self, resource: str, *, seq: int | None, version: str | None,
                   want_seconds: float) -> Pulled | None:
        """The refresher's latest round of ``resource`` if it is not round ``seq``; the value is
        fetched and decoded only when it is not ``version``. ``None``: nothing newer (yet).

        Also marks ``resource`` wanted for ``want_seconds`` (0: not). Raises :class:`SharedUnreachable`.
        """
        try:
            async with self._fast.pipeline(transaction=False) as pipe:
                if want_seconds > 0:
                    pipe.set(self._key("want", resource), b"1", px=max(1000, int(want_seconds * 1000)))
                pipe.hmget(self._key("meta", resource), ["seq", "version", "fetched_at", "interval"])
                replies = await pipe.execute()
            raw_seq, raw_version, raw_at, raw_interval = replies[-1]
        except (RedisError, OSError) as exc:
            raise self._fail(f"reading {resource}", exc) from exc
        if raw_seq is None or raw_version is None or raw_at is None:
            return None
        try:
            round_seq = int(raw_seq)
            found = raw_version.decode()
            fetched_at = datetime.fromisoformat(raw_at.decode())
            interval = float(raw_interval or 0)
            if fetched_at.tzinfo is None:
                fetched_at = fetched_at.replace(tzinfo=UTC)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._fail(f"reading {resource}", exc, UNREADABLE) from exc
        if round_seq == seq and found == version:
            return None
        self.stats["rounds_read"] += 1
        if found == version:
            return Pulled(round_seq, found, fetched_at, interval, changed=False)
        try:
            blob = await self._bulk.get(self._key("value", resource, found))
        except (RedisError, OSError) as exc:
            raise self._fail(f"reading {resource}", exc) from exc
        if not isinstance(blob, bytes):
            return None  # the pointer moved on and this value expired: the next round
        try:
            value = await asyncio.to_thread(decode_snapshot, resource, blob)
        except ValueError as exc:
            if found not in self._unreadable:
                self._unreadable.add(found)
                log.error("shared snapshot: %s version %s is unreadable: %s", resource, found, exc)
            raise self._fail(f"decoding {resource}", exc, UNREADABLE) from exc
        self.stats["values_read"] += 1
        return Pulled(round_seq, found, fetched_at, interval, value)

    async def close(self) -> None:
        """Resign, stop the listener and close the connections."""
        await self.resign()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
        for client in (self._fast, self._bulk):
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()
            # aclose may stop at a dead server before it drops the pool's sockets: drop them
            # here, or their transports are collected after the event loop is gone.
            with contextlib.suppress(RedisError, OSError):
                await client.connection_pool.disconnect(inuse_connections=True)
