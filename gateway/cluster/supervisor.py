"""The supervisor: ``--workers N`` gateway processes behind one public port.

One gateway process is one event loop on one core. The supervisor starts N workers, each a
whole gateway (``python -m gateway`` with its own loop, sessions, UDP sockets and HTTP listener
on ``--port + 1 + i``, the same ``--host``), restarts any that exits, and serves the public
port (mediasoup: one worker per core; LiveKit: a router and a node selector over Redis). It is
a composition of its parts:

- ``processes.Workers``: the worker processes (start, restart, poll, signal, drain);
- ``peers.Peers``: with ``--redis-url``, the other nodes' workers and this node's entry;
- ``router.Router``: where each request goes (placement, owners, the least-loaded worker);
- ``public_app``: the public routes, ``/healthz`` and ``/metrics``.

SIGTERM: new sessions go to other nodes (or get 503), every worker drains, exit 0.
The supervisor is never on the media path: RTP flows between the client and its worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from aiohttp import web

from gateway.api.rate_store import create_shared, shared_path
from gateway.api.timeouts import connection_limits, guard_runner, serve_options
from gateway.cluster.directory import RedisDirectory, Unavailable
from gateway.cluster.identity import ENV
from gateway.cluster.metrics import SupervisorMetrics
from gateway.cluster.peers import Peers
from gateway.cluster.processes import Workers
from gateway.cluster.proxy import Upstream
from gateway.cluster.public_app import public_app
from gateway.cluster.router import Router
from gateway.cluster.worker import public_url
from gateway.config import GatewayConfig

log = logging.getLogger(__name__)


def default_advertise(host: str, port: int) -> str:
    """What others should use to reach this node: the bind address, or for a wildcard bind
    this machine's name resolved (loopback if it does not resolve)."""
    if host not in ("0.0.0.0", "", "::"):
        return public_url(host, port)
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    return public_url(address, port)


def node_id(advertise_url: str) -> str:
    """A short id for a node, stable for its address: it starts its workers' session ids."""
    return hashlib.sha1(advertise_url.encode()).hexdigest()[:6]


class Supervisor:
    def __init__(self, config: GatewayConfig, argv: Sequence[str]) -> None:
        if config.port == 0:
            raise SystemExit("error: --workers needs a fixed --port (workers use --port + 1 + i)")
        if config.port + config.workers > 65535:
            raise SystemExit("error: --port + --workers is past 65535")
        if config.udp_port and config.udp_port + config.workers - 1 > 65535:
            raise SystemExit("error: --udp-port + --workers is past 65535")
        self.config = config
        self.advertise = (config.advertise_url
                          or default_advertise(config.host, config.port)).rstrip("/")
        self.node = node_id(self.advertise)
        self.token = secrets.token_urlsafe(24)
        self.upstream = Upstream(self.token)
        self.directory = RedisDirectory(config.redis_url) if config.redis_url else None
        self.metrics = SupervisorMetrics(redis=self.directory is not None)
        self.workers = Workers(config, argv, node=self.node, advertise=self.advertise,
                               token=self.token, upstream=self.upstream, metrics=self.metrics,
                               directory=self.directory, on_refused=self._refused)
        self.peers = (Peers(self.directory, self.workers, self.metrics)
                      if self.directory is not None else None)
        self.router = Router(self.workers, self.peers, self.upstream, self.metrics,
                             config.max_sessions)
        self.exit_code = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    def _refused(self) -> None:
        self.exit_code = 1
        self._stop.set()

    def app(self) -> web.Application:
        return public_app(self.config, self.router, self.workers, self.directory, self.peers)

    def _on_signals(self) -> None:
        loop = asyncio.get_running_loop()

        def first(signum: int) -> None:
            if self._stop.is_set():
                log.warning("second %s: workers exit now", signal.Signals(signum).name)
                self.workers.signal(signal.SIGTERM)
                os._exit(128 + signum)
            log.info("%s received: draining every worker", signal.Signals(signum).name)
            self._stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, first, signum)

    async def run(self) -> None:
        await self.upstream.start()
        limits = connection_limits(self.config)
        runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True,
                               **serve_options(limits))
        await runner.setup()
        guard_runner(runner, limits)  # the public port's timeouts and per-address cap
        rate_file = shared_path(os.getpid())
        create_shared(rate_file)  # the workers' shared rate limit buckets (api/rate_store.py)
        slots = self.workers.slots
        try:
            site = web.TCPSite(runner, self.config.host, self.config.port)
            await site.start()  # first: a port in use fails before any worker starts
            self._tasks = self.workers.tasks()
            if self.peers is not None:
                self._tasks.append(asyncio.create_task(self.peers.run(), name="cluster"))
            shown = public_url(self.config.host, self.config.port)
            print(f"voice gateway on {shown}/  ({len(slots)} workers on ports "
                  f"{slots[0].port}-{slots[-1].port}; node {self.node}, advertised "
                  f"{self.advertise})", flush=True)
            self._on_signals()
            await self._stop.wait()
            await self.workers.drain()
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self.directory is not None:
                with contextlib.suppress(Unavailable):
                    await self.directory.drop_node(self.node)
                await self.directory.close()
            await runner.cleanup()
            with contextlib.suppress(OSError):
                os.unlink(rate_file)
            await self.upstream.close()


def needs_supervisor(config: GatewayConfig) -> bool:
    """``--workers N`` > 1, or ``--redis-url`` (a node of a cluster), outside a worker."""
    return not os.environ.get(ENV) and (config.workers > 1 or bool(config.redis_url))


def supervise(config: GatewayConfig, argv: Sequence[str],
              run: Callable[[Coroutine[Any, Any, None]], None]) -> int:
    """Run the supervisor with ``run`` (asyncio.run or uvloop.run); its exit code."""
    supervisor = Supervisor(config, argv)
    try:
        run(supervisor.run())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return supervisor.exit_code
