"""The cluster's registry in Redis: which workers exist, how loaded they are, who owns a session.

Every key expires on its own, so a process that dies (SIGKILL, a lost machine) leaves nothing
that outlives it by more than its TTL; Redis's own clock decides, so machines' clocks need not
agree. A Redis that restarts empty (no persistence) is filled again by the next heartbeats:
every refresh is a ``SET``, never an ``EXPIRE`` of what may be gone.

=============================  ==========================================  =================
key                            value                                       TTL, refreshed
=============================  ==========================================  =================
``vg:worker:{worker}``         JSON ``WorkerStatus`` (url, pid, sessions,  5 s, every 1 s by
                               max_sessions, cpu, load, state, ...)        the worker itself
``vg:workers``                 set of worker ids (an index; members whose  none; readers
                               key has expired are removed by readers)     prune it
``vg:node:{node}``             JSON {id, url, pid, workers, state}         5 s, every 1 s by
                                                                           the supervisor
``vg:nodes``                   set of node ids (index, pruned the same)    none
``vg:session:{session}``       ``{worker}@{pid}``: its owner (the pid:     15 s, every 5 s by
                               a restarted worker's predecessor's          the owner; deleted
                               sessions are known dead at once)            when it closes
``vg:channel:{name}``          the base URL of the worker a broadcast      5 s, every 1 s by
                               channel lives on (docs/channels.md)         the owner; deleted
                                                                           when it closes
=============================  ==========================================  =================

As LiveKit's router: a worker is available while its entry is fresh (here: while it exists,
< 5 s since its last heartbeat) and its state is ``serving``. Every call is bounded
(``OP_TIMEOUT_S``) and raises ``Unavailable`` when Redis cannot be reached: callers carry on
without it (live sessions never depend on Redis; placement falls back to local workers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from yarl import URL

log = logging.getLogger(__name__)

PREFIX = "vg:"
WORKER_TTL_S = 5.0  # dead after 5 s without a heartbeat (LiveKit: stats older than 5 s)
HEARTBEAT_S = 1.0  # workers and nodes re-set their entries this often (LiveKit: 2 s)
SESSION_TTL_S = 15.0
SESSION_REFRESH_S = 5.0
OP_TIMEOUT_S = 1.0  # one Redis round trip (or pipeline) may take this long, then it failed

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker's address and load, as it reports it (heartbeat / ``/healthz``)."""

    id: str
    node: str
    url: str  # the address clients use for this worker (its --advertise-url)
    pid: int
    sessions: int
    max_sessions: int
    cpu: float  # its event loop thread's share of one core (0..1), smoothed over ~3 s
    process_cpu: float  # the whole process (encoder threads too), cores
    state: str  # "serving" | "draining"
    ts: float  # wall clock when ``sessions`` was counted
    node_url: str = ""

    @property
    def load(self) -> float:
        """The larger of the session share and the loop's CPU: 1.0 is full either way."""
        share = self.sessions / self.max_sessions if self.max_sessions > 0 else 1.0
        return max(share, self.cpu)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["load"] = round(self.load, 4)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerStatus:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class Unavailable(Exception):
    """Redis could not be reached (or answered an error) within the time allowed."""


def redacted(url: str) -> str:
    """The URL without its password, for logs and /healthz."""
    parsed = URL(url)
    return str(parsed.with_password("***")) if parsed.password else url


def connect(url: str) -> Any:
    """A redis-py asyncio client that fails fast: 1 s timeouts, no retries (the next heartbeat
    is the retry)."""
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return Redis.from_url(
        url, decode_responses=True, socket_timeout=OP_TIMEOUT_S,
        socket_connect_timeout=OP_TIMEOUT_S, retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


class RedisDirectory:
    """The cluster registry, through one client. Tracks whether Redis is reachable."""

    def __init__(self, url: str, client: Any = None) -> None:
        self.url = url
        self._client = client if client is not None else connect(url)
        self.ok: bool | None = None  # None: not tried yet
        self.error: str | None = None
        self.errors = 0
        self.last_ok: float | None = None  # time.monotonic()
        self.on_change: Callable[[bool], None] | None = None

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        from redis.exceptions import RedisError

        try:
            async with asyncio.timeout(OP_TIMEOUT_S * 1.5):
                result = await op()
        except (RedisError, OSError, TimeoutError) as exc:
            self.errors += 1
            self.error = f"{type(exc).__name__}: {exc}"
            if self.ok is not False:
                log.warning("redis %s unreachable (%s): carrying on without it",
                            redacted(self.url), self.error)
                self.ok = False
                if self.on_change is not None:
                    self.on_change(False)
            raise Unavailable(self.error) from exc
        if self.ok is not True:
            if self.ok is False:
                log.info("redis %s reachable again", redacted(self.url))
            self.ok = True
            self.error = None
            if self.on_change is not None:
                self.on_change(True)
        self.last_ok = time.monotonic()
        return result

    def health(self) -> dict[str, Any]:
        return {
            "url": redacted(self.url), "ok": bool(self.ok), "error": self.error,
            "errors": self.errors,
            "last_ok_s_ago": None if self.last_ok is None
            else round(time.monotonic() - self.last_ok, 3),
        }

    # -- workers ----------------------------------------------------------------------------

    async def put_worker(self, status: WorkerStatus) -> None:
        async def op() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.set(f"{PREFIX}worker:{status.id}", json.dumps(status.as_json()),
                     px=int(WORKER_TTL_S * 1000))
            pipe.sadd(f"{PREFIX}workers", status.id)
            await pipe.execute()

        await self._call(op)

    async def drop_worker(self, worker: str) -> None:
        async def op() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.delete(f"{PREFIX}worker:{worker}")
            pipe.srem(f"{PREFIX}workers", worker)
            await pipe.execute()

        await self._call(op)

    async def workers(self) -> list[WorkerStatus]:
        """Every live worker of the cluster (expired ones are pruned from the index)."""
        raw = await self._indexed("workers", "worker")
        out = []
        for item in raw:
            try:
                out.append(WorkerStatus.from_json(item))
            except TypeError:
                log.warning("redis: ignoring a malformed worker entry %r", item)
        return out

    async def worker(self, worker: str) -> WorkerStatus | None:
        value = await self._call(lambda: self._client.get(f"{PREFIX}worker:{worker}"))
        return WorkerStatus.from_json(json.loads(value)) if value else None

    # -- nodes ------------------------------------------------------------------------------

    async def put_node(self, node: dict[str, Any]) -> None:
        async def op() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.set(f"{PREFIX}node:{node['id']}", json.dumps(node),
                     px=int(WORKER_TTL_S * 1000))
            pipe.sadd(f"{PREFIX}nodes", node["id"])
            await pipe.execute()

        await self._call(op)

    async def drop_node(self, node: str) -> None:
        async def op() -> None:
            pipe = self._client.pipeline(transaction=False)
            pipe.delete(f"{PREFIX}node:{node}")
            pipe.srem(f"{PREFIX}nodes", node)
            await pipe.execute()

        await self._call(op)

    async def nodes(self) -> list[dict[str, Any]]:
        return await self._indexed("nodes", "node")

    async def _indexed(self, index: str, kind: str) -> list[dict[str, Any]]:
        async def op() -> list[dict[str, Any]]:
            ids = sorted(await self._client.smembers(f"{PREFIX}{index}"))
            if not ids:
                return []
            values = await self._client.mget([f"{PREFIX}{kind}:{i}" for i in ids])
            gone = [i for i, v in zip(ids, values, strict=True) if v is None]
            if gone:
                await self._client.srem(f"{PREFIX}{index}", *gone)
            out = []
            for value in values:
                if value is None:
                    continue
                try:
                    out.append(json.loads(value))
                except ValueError:
                    continue
            return out

        return await self._call(op)

    # -- sessions ---------------------------------------------------------------------------

    async def put_sessions(self, worker: str, pid: int, session_ids: Iterable[str]) -> None:
        ids = list(session_ids)
        if not ids:
            return
        owner = f"{worker}@{pid}"

        async def op() -> None:
            pipe = self._client.pipeline(transaction=False)
            for sid in ids:
                pipe.set(f"{PREFIX}session:{sid}", owner, px=int(SESSION_TTL_S * 1000))
            await pipe.execute()

        await self._call(op)

    async def drop_sessions(self, session_ids: Iterable[str]) -> None:
        keys = [f"{PREFIX}session:{sid}" for sid in session_ids]
        if keys:
            await self._call(lambda: self._client.delete(*keys))

    async def session_owner(self, session_id: str) -> tuple[str, int] | None:
        """The worker that owns ``session_id`` and that worker's pid when it registered it
        (None: no such live session)."""
        value = await self._call(lambda: self._client.get(f"{PREFIX}session:{session_id}"))
        if not value:
            return None
        worker, _, pid = str(value).rpartition("@")
        return (worker, int(pid)) if worker and pid.isdigit() else None

    # -- channels ---------------------------------------------------------------------------

    async def put_channels(self, url: str, names: Iterable[str]) -> None:
        names = list(names)
        if not names:
            return

        async def op() -> None:
            pipe = self._client.pipeline(transaction=False)
            for name in names:
                pipe.set(f"{PREFIX}channel:{name}", url, px=int(WORKER_TTL_S * 1000))
            await pipe.execute()

        await self._call(op)

    async def drop_channel(self, name: str, url: str) -> None:
        """Remove ``name``'s entry if it still names ``url`` (not a successor's)."""
        async def op() -> None:
            key = f"{PREFIX}channel:{name}"
            if await self._client.get(key) == url:
                await self._client.delete(key)

        await self._call(op)

    async def channel_origin(self, name: str) -> str | None:
        value = await self._call(lambda: self._client.get(f"{PREFIX}channel:{name}"))
        return str(value) if value else None

    async def close(self) -> None:
        try:
            await self._client.aclose()
        except Exception:  # closing a client whose server is gone
            log.debug("redis client close failed", exc_info=True)
