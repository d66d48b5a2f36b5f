"""The worker's side of scale-out: what a gateway process does when a supervisor started it.

``attach_worker(app, config)`` is called by ``gateway.cli.serve`` before the app is set up:

- any gateway: ``--session-id-prefix`` names the worker in its session ids, and with
  ``--advertise-url`` every ``Location`` is absolute (the session's final address);
- a supervised worker (``identity.ENV`` set) also gets a ``WorkerAgent``: its load (sessions,
  its event loop thread's CPU, serving/draining) in ``/healthz`` (the supervisor polls it), a
  heartbeat to Redis with ``--redis-url`` (its entry and its sessions' owner entries,
  ``directory``), the client address its supervisor's proxy vouches for (``X-Forwarded-For``
  with the proxy token, so per-address rate limits still see clients, not the proxy), and a
  watch on its supervisor: orphaned, it drains and exits.

Nothing here is on the media path: a heartbeat is one task per second, Redis calls are bounded
and failures only logged, so live sessions never wait on Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import signal
import time
from typing import Any

from aiohttp import web

from gateway.api.access import RATE_STORE
from gateway.api.channel_routes import CHANNELS
from gateway.api.errors import Handler
from gateway.api.rate_store import SharedFileBuckets, shared_path
from gateway.api.routes import BASE_URL, HEALTH_EXTRA, REGISTRY
from gateway.channels.locator import LocatorUnavailable
from gateway.cluster.channel_locator import RedisChannelLocator
from gateway.cluster.directory import (
    HEARTBEAT_S,
    SESSION_REFRESH_S,
    RedisDirectory,
    Unavailable,
    WorkerStatus,
)
from gateway.cluster.identity import PROXY_HEADER, WorkerIdentity
from gateway.config import GatewayConfig

log = logging.getLogger(__name__)

CPU_SMOOTHING = 0.3  # EWMA weight of each 1 s reading of the loop's CPU (~3 s time constant)


def public_url(host: str, port: int) -> str:
    """``http://host:port`` for a bind address (a wildcard shown as loopback)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def attach_worker(app: web.Application, config: GatewayConfig) -> WorkerAgent | None:
    registry = app[REGISTRY]
    if config.session_id_prefix:
        registry.id_prefix = config.session_id_prefix
    if config.advertise_url:
        app[BASE_URL] = config.advertise_url.rstrip("/")
    identity = WorkerIdentity.from_env()
    if identity is None:
        return None
    if not config.redis_url:  # the node's workers share their rate limits (api/rate_store.py)
        app[RATE_STORE] = SharedFileBuckets(shared_path(identity.supervisor_pid))
    return WorkerAgent(app, config, identity)


class WorkerAgent:
    def __init__(self, app: web.Application, config: GatewayConfig,
                 identity: WorkerIdentity) -> None:
        self.app = app
        self.registry = app[REGISTRY]
        self.identity = identity
        self.url = (config.advertise_url or public_url(config.host, config.port)).rstrip("/")
        self.max_sessions = config.max_sessions
        self.redis_url = config.redis_url
        self.directory: RedisDirectory | None = None
        self.cpu = 0.0
        self.process_cpu = 0.0
        self._registered: set[str] = set()
        self._last_refresh = 0.0
        self._resync = True
        self._beat: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._orphaned = False
        self.channels: Any = None  # the app's ChannelRegistry, once Redis is configured
        app.middlewares.insert(0, self._forwarded)  # outermost: every later one sees the client
        app.middlewares.append(self._track_created)  # innermost: sees the 201 itself
        app[HEALTH_EXTRA] = self.health
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._stop)

    # -- what the supervisor reads ----------------------------------------------------------

    def status(self) -> WorkerStatus:
        return WorkerStatus(
            id=self.identity.worker, node=self.identity.node, url=self.url, pid=os.getpid(),
            sessions=len(self.registry), max_sessions=self.max_sessions,
            cpu=round(self.cpu, 4), process_cpu=round(self.process_cpu, 4),
            state="draining" if self.registry.draining or self._orphaned else "serving",
            ts=time.time(), node_url=self.identity.node_url,
        )

    def health(self) -> dict[str, Any]:
        worker = self.status().as_json()
        worker["index"] = self.identity.index
        worker["redis"] = None if self.directory is None else self.directory.health()
        return {"worker": worker}

    # -- middlewares ------------------------------------------------------------------------

    @web.middleware
    async def _forwarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        token = request.headers.get(PROXY_HEADER)
        if token is not None and hmac.compare_digest(token.encode(),
                                                     self.identity.token.encode()):
            forwarded = request.headers.get("X-Forwarded-For", "")
            client = forwarded.rsplit(",", 1)[-1].strip()
            if client:
                request = request.clone(remote=client)
        return await handler(request)

    @web.middleware
    async def _track_created(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if (self.directory is not None and response.status == 201 and request.method == "POST"
                and request.path.rstrip("/") == "/v1/sessions"):
            session_id = response.headers.get("Location", "").rsplit("/", 1)[-1]
            if session_id:
                self._spawn(self._register([session_id]))
        return response

    # -- heartbeat --------------------------------------------------------------------------

    async def _start(self, app: web.Application) -> None:
        if self.redis_url:
            self.directory = RedisDirectory(self.redis_url)
            if CHANNELS in app:  # channels live here, listeners anywhere (docs/channels.md)
                self.channels = app[CHANNELS]
                self.channels.locator = RedisChannelLocator(self.directory, self.url)
        self._beat = asyncio.create_task(self._heartbeat(), name="cluster-heartbeat")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _register(self, session_ids: list[str]) -> None:
        assert self.directory is not None
        with contextlib.suppress(Unavailable):
            await self.directory.put_sessions(self.identity.worker, os.getpid(), session_ids)
            self._registered.update(session_ids)

    async def _heartbeat(self) -> None:
        wall, thread, process = time.monotonic(), time.thread_time(), time.process_time()
        while True:
            await self.publish()
            await asyncio.sleep(HEARTBEAT_S)
            now, t, p = time.monotonic(), time.thread_time(), time.process_time()
            if now > wall:
                # this (the loop's) thread; smoothed: one GC pause is not a busy worker
                busy = min(1.0, (t - thread) / (now - wall))
                self.cpu += CPU_SMOOTHING * (busy - self.cpu)
                self.process_cpu = (p - process) / (now - wall)
            wall, thread, process = now, t, p
            self._watch_supervisor()

    def _watch_supervisor(self) -> None:
        if self._orphaned or os.getppid() == self.identity.supervisor_pid:
            return
        self._orphaned = True
        log.error("supervisor %d is gone: draining and exiting", self.identity.supervisor_pid)
        signal.raise_signal(signal.SIGTERM)  # gateway.cli drains, as on any SIGTERM

    async def publish(self) -> None:
        """This worker's entry, its new sessions' owner entries (all of them every
        ``SESSION_REFRESH_S``, or after Redis was unreachable), and the ended ones removed."""
        directory = self.directory
        if directory is None:
            return
        try:
            await directory.put_worker(self.status())
            live = {session.id for session in self.registry}
            gone = self._registered - live
            now = time.monotonic()
            if self._resync or now - self._last_refresh >= SESSION_REFRESH_S:
                await directory.put_sessions(self.identity.worker, os.getpid(), live)
                self._last_refresh = now
                self._resync = False
            else:
                await directory.put_sessions(self.identity.worker, os.getpid(),
                                             live - self._registered)
            if gone:
                await directory.drop_sessions(gone)
            self._registered = live
            if self.channels is not None and self.channels.locator is not None:
                with contextlib.suppress(LocatorUnavailable):
                    await self.channels.locator.announce([c.name for c in self.channels])
        except Unavailable:
            self._resync = True  # Redis may come back empty: re-set everything then

    async def _stop(self, app: web.Application) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
        for task in list(self._tasks):
            task.cancel()
        if self.directory is not None:
            with contextlib.suppress(Unavailable):
                await self.directory.drop_worker(self.identity.worker)
                await self.directory.drop_sessions(self._registered)
            await self.directory.close()
