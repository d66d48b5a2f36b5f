"""Where the rate limits' token buckets live, so that every worker of a node charges the same
ones.

With ``--workers N`` a client's requests reach several processes: the supervisor proxies a
session's creation to a worker of its choice, and the session's Location points at that
worker's own port, so the supervisor never sees most requests. Buckets kept per process let a
client through N times the limit (8 of 10 session creations passed a limit meant for 4 with 2
workers). So the buckets live where every worker reaches them:

- ``RedisBuckets`` with ``--redis-url``: one Lua script per charge (atomic, Redis' own clock),
  so every node of the cluster shares them too. Redis unreachable: the process's own buckets
  carry on (limits stay, per process) until it is back.
- ``SharedFileBuckets`` for the workers of one node without Redis: a fixed table of buckets in
  a memory-mapped file in ``/dev/shm`` that the supervisor creates (named by its pid), each
  charge a read-modify-write of one 32-byte slot under an ``fcntl`` lock of that slot. Chosen
  over a supervisor answering on a unix socket (a round trip and a task per request, and the
  limits gone whenever the supervisor is slow) and over ``multiprocessing`` shared memory (its
  locks cannot be shared by processes the supervisor did not fork itself; ours are exec'd):
  a few microseconds of system calls, no server, nothing to restart, bounded memory. Clients
  are hashed to slots: two that collide share a bucket until one of them is replaced (a slot
  holds the key it counts for; another key takes it over afresh) -- a collision can only make
  a limit looser for a moment, never refuse someone who is under it by much.
- ``LocalBuckets``: one process (``--workers 1``), in memory.

Every store answers ``retry_after(kind, client, rate)``: 0 and the charge taken, or the seconds
to wait. Bursts are twice the rate (at least 1).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import mmap
import os
import struct
import tempfile
import time
from collections import OrderedDict
from typing import Any, Protocol

log = logging.getLogger(__name__)


def burst_of(rate: float) -> float:
    return max(1.0, 2 * rate)


def _charge(tokens: float, at: float, now: float, rate: float) -> tuple[float, float]:
    """(tokens left, wait) for one request at ``now`` on a bucket last at (tokens, at)."""
    tokens = min(burst_of(rate), tokens + max(0.0, now - at) * rate)
    if tokens >= 1.0:
        return tokens - 1.0, 0.0
    return tokens, (1.0 - tokens) / rate


class BucketStore(Protocol):
    async def retry_after(self, kind: str, client: str, rate: float) -> float: ...

    def close(self) -> None: ...


class LocalBuckets:
    """Token buckets of this process, the least recently seen forgotten past ``max_clients``."""

    def __init__(self, max_clients: int = 10_000) -> None:
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()
        self._max = max_clients

    def charge(self, kind: str, client: str, rate: float, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        tokens, at = self._buckets.pop((kind, client), (burst_of(rate), now))
        tokens, wait = _charge(tokens, at, now, rate)
        self._buckets[(kind, client)] = (tokens, now)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return wait

    async def retry_after(self, kind: str, client: str, rate: float) -> float:
        return self.charge(kind, client, rate)

    def close(self) -> None:
        pass


_SLOT = struct.Struct("<Qdd8x")  # key hash, tokens, at (CLOCK_MONOTONIC: one per machine)
SHARED_SLOTS = 16_384  # 512 KB


def shared_path(supervisor_pid: int) -> str:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(base, f"voice-gateway-{supervisor_pid}.rate")


def create_shared(path: str, slots: int = SHARED_SLOTS) -> None:
    """The supervisor's part: the zeroed table, before any worker starts."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, slots * _SLOT.size)
    finally:
        os.close(fd)


class SharedFileBuckets:
    """The buckets of every worker of a node, in one memory-mapped file (module doc)."""

    def __init__(self, path: str, slots: int = SHARED_SLOTS) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < slots * _SLOT.size:
            os.ftruncate(self._fd, slots * _SLOT.size)
        self._slots = slots
        self._map = mmap.mmap(self._fd, slots * _SLOT.size)

    def charge(self, kind: str, client: str, rate: float, now: float | None = None) -> float:
        digest = hashlib.blake2b(f"{kind}\0{client}".encode(), digest_size=8).digest()
        key = int.from_bytes(digest, "little") | 1  # never 0: 0 marks an empty slot
        offset = (key % self._slots) * _SLOT.size
        fcntl.lockf(self._fd, fcntl.LOCK_EX, _SLOT.size, offset)
        try:
            now = time.monotonic() if now is None else now
            held, tokens, at = _SLOT.unpack_from(self._map, offset)
            if held != key:  # empty, or another client's: this one starts with a full bucket
                tokens, at = burst_of(rate), now
            tokens, wait = _charge(tokens, at, now, rate)
            _SLOT.pack_into(self._map, offset, key, tokens, now)
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, _SLOT.size, offset)
        return wait

    async def retry_after(self, kind: str, client: str, rate: float) -> float:
        return self.charge(kind, client, rate)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._map.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)


_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(v[1]) or burst
local at = tonumber(v[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return tostring(wait)
"""


class RedisBuckets:
    """The cluster's buckets in Redis (``voice-gateway:rate:<kind>:<client>`` hashes that
    expire once full again); this process's own while Redis cannot be reached."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        self._client = client
        self._script: Any = None
        self.fallback = LocalBuckets()
        self._down = False

    def _redis(self) -> Any:
        if self._client is None:
            from redis.asyncio import Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            self._client = Redis.from_url(self.url, socket_timeout=0.5,
                                          socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
        if self._script is None:
            self._script = self._client.register_script(_LUA)
        return self._script

    async def retry_after(self, kind: str, client: str, rate: float) -> float:
        from redis.exceptions import RedisError

        try:
            wait = await self._redis()(keys=[f"voice-gateway:rate:{kind}:{client}"],
                                       args=[rate, burst_of(rate)])
        except (RedisError, OSError) as exc:
            if not self._down:
                log.warning("rate limits: redis unreachable (%s); per-process buckets meanwhile",
                            exc)
                self._down = True
            return self.fallback.charge(kind, client, rate)
        if self._down:
            log.info("rate limits: redis reachable again")
            self._down = False
        return float(wait)

    def close(self) -> None:
        pass
