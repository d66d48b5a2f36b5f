"""This node's worker processes: started, restarted in place, polled, signalled, drained.

Each worker is a whole gateway (``python -m gateway`` with the supervisor's own arguments and
its worker's appended: ``--port + 1 + i``, its session id prefix, its advertised url) in its
own process session, so a terminal's Ctrl-C reaches the supervisor alone. One that exits is
restarted after a back-off that doubles while it keeps crashing; one that refuses its arguments
(exit 2) before it ever served stops the supervisor. Each worker's ``/healthz`` is read every
``POLL_S``: its load and state are what placement chooses by.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from yarl import URL

from gateway.cluster.directory import RedisDirectory, Unavailable, WorkerStatus
from gateway.cluster.identity import ENV, WorkerIdentity
from gateway.cluster.metrics import SupervisorMetrics
from gateway.cluster.proxy import Upstream
from gateway.cluster.worker import public_url
from gateway.config import GatewayConfig
from gateway.runtime.worker_pool import PROCESSES_ENV

log = logging.getLogger(__name__)

POLL_S = 0.5  # each local worker's /healthz is read this often
STALE_S = 5.0  # a worker whose /healthz has not answered for this long is not chosen
RESTART_BACKOFF_S = (0.5, 10.0)  # first restart delay; the cap for one crashing again and again
STABLE_S = 10.0  # a worker that lived this long restarts after the first delay again
KILL_GRACE_S = 15.0  # after --drain-timeout, workers still running are killed


@dataclasses.dataclass
class Slot:
    """One worker process (restarted in place: same index, port, id and prefix)."""

    index: int
    id: str  # cluster-wide, e.g. "3f9a1cw0"; its session ids start with "3f9a1cw0-"
    port: int
    url: str  # advertised: what clients are sent to
    local_url: str  # what the supervisor connects to
    process: asyncio.subprocess.Process | None = None
    status: WorkerStatus | None = None
    health: dict[str, Any] = dataclasses.field(default_factory=dict)
    polled_at: float = 0.0
    started_at: float = 0.0
    restarts: int = 0
    ever_served: bool = False

    @property
    def name(self) -> str:
        return f"w{self.index}"

    @property
    def prefix(self) -> str:
        return f"{self.id}-"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def state(self) -> str:
        if not self.alive:
            return "down"
        if self.status is None:
            return "starting"
        if time.monotonic() - self.polled_at > STALE_S:
            return "unresponsive"
        return self.status.state

    def as_json(self) -> dict[str, Any]:
        status = self.status
        out: dict[str, Any] = {
            "id": self.id, "name": self.name, "pid": self.process.pid if self.alive else None,
            "url": self.url, "state": self.state, "restarts": self.restarts,
            "uptime_s": round(time.monotonic() - self.started_at, 1) if self.alive else None,
            "sessions": None, "max_sessions": None, "load": None, "cpu": None,
        }
        if status is not None and self.alive:
            out.update(sessions=status.sessions, max_sessions=status.max_sessions,
                       load=round(status.load, 4), cpu=status.cpu,
                       process_cpu=status.process_cpu)
            redis = self.health.get("redis")
            out["redis_ok"] = None if redis is None else redis.get("ok")
        return out


def worker_args(argv: Sequence[str], config: GatewayConfig, slot: Slot, public: str) -> list[str]:
    """The supervisor's own arguments with the worker's appended (argparse: the last wins)."""
    args = [*argv, "--workers", "1", "--port", str(slot.port),
            "--session-id-prefix", slot.prefix, "--advertise-url", slot.url]
    if config.udp_port:  # one shared UDP port per worker: --udp-port + i
        args += ["--udp-port", str(config.udp_port + slot.index)]
    if "*" not in config.cors_origins:  # the page on the public port calls the worker directly
        origin = str(URL(public).origin())
        if origin not in config.cors_origins:
            args += ["--cors-origins", ",".join((*config.cors_origins, origin))]
    return args


def make_slots(config: GatewayConfig, node: str, advertise: str) -> list[Slot]:
    """``--workers`` slots: worker ``i`` on ``--port + 1 + i``, its id ``{node}w{i}``."""
    local = public_url(config.host, config.port)
    return [
        Slot(index=i, id=f"{node}w{i}", port=config.port + 1 + i,
             url=str(URL(advertise).with_port(config.port + 1 + i)).rstrip("/"),
             local_url=str(URL(local).with_port(config.port + 1 + i)).rstrip("/"))
        for i in range(config.workers)
    ]


class Workers:
    """The worker processes of this node and what the supervisor last read of them."""

    def __init__(self, config: GatewayConfig, argv: Sequence[str], *, node: str, advertise: str,
                 token: str, upstream: Upstream, metrics: SupervisorMetrics,
                 directory: RedisDirectory | None, on_refused: Callable[[], None]) -> None:
        self.config = config
        self.argv = list(argv)
        self.node = node
        self.advertise = advertise
        self.token = token
        self.upstream = upstream
        self.metrics = metrics
        self.directory = directory
        self._on_refused = on_refused  # a worker refused its arguments: the supervisor stops
        self.slots = make_slots(config, node, advertise)
        self.by_id = {slot.id: slot for slot in self.slots}
        self.draining = False  # new sessions go to other nodes (or get 503)
        self.stopping = False  # exits are no longer restarted
        self._wake = asyncio.Event()  # interrupts restart back-offs when stopping

    def slot_for(self, session_id: str) -> Slot | None:
        """The worker a session id (or key) names by its prefix."""
        for slot in self.slots:
            if session_id.startswith(slot.prefix):
                return slot
        return None

    def tasks(self) -> list[asyncio.Task[Any]]:
        """One task per worker (start and restart it) and the poller; the caller owns them."""
        tasks = [asyncio.create_task(self._run_slot(s), name=f"worker-{s.name}")
                 for s in self.slots]
        tasks.append(asyncio.create_task(self._poll(), name="poll-workers"))
        return tasks

    # -- processes --------------------------------------------------------------------------

    def _worker_env(self, slot: Slot) -> dict[str, str]:
        identity = WorkerIdentity(
            worker=slot.id, node=self.node, node_url=self.advertise, index=slot.index,
            token=self.token, supervisor_pid=os.getpid(),
        )
        env = dict(os.environ)
        env[ENV] = identity.to_env()
        env[PROCESSES_ENV] = str(len(self.slots))  # thread pools sized per worker
        return env

    async def _run_slot(self, slot: Slot) -> None:
        backoff = RESTART_BACKOFF_S[0]
        args = worker_args(self.argv, self.config, slot, self.advertise)
        while not self.stopping:
            slot.status, slot.health = None, {}
            slot.started_at = time.monotonic()
            # Its own session: a terminal's Ctrl-C reaches the supervisor alone, which then
            # drains the workers once (a second signal would make them exit at once).
            slot.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway", *args, env=self._worker_env(slot),
                start_new_session=True,
            )
            log.info("worker %s started: pid %d, %s", slot.name, slot.process.pid, slot.url)
            code = await slot.process.wait()
            if self.stopping:
                return
            lived = time.monotonic() - slot.started_at
            slot.restarts += 1
            self.metrics.restarts.labels(slot.name).inc()
            log.error("worker %s (pid %d) exited with %s after %.1f s: restarting",
                      slot.name, slot.process.pid, code, lived)
            if self.directory is not None:  # its entry would expire anyway; sooner is better
                with contextlib.suppress(Unavailable):
                    await self.directory.drop_worker(slot.id)
            if code == 2 and not slot.ever_served:
                log.error("worker %s refused its arguments: stopping", slot.name)
                self._on_refused()
                return
            backoff = RESTART_BACKOFF_S[0] if lived > STABLE_S else min(
                RESTART_BACKOFF_S[1], backoff * 2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), backoff)

    async def _poll(self) -> None:
        while True:
            await asyncio.gather(*(self._poll_slot(s) for s in self.slots))
            await asyncio.sleep(POLL_S)

    async def _poll_slot(self, slot: Slot) -> None:
        process = slot.process
        if process is None or process.returncode is not None:
            return
        try:
            body = await self.upstream.get_json(slot.local_url + "/healthz", 1.0)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return
        worker = body.get("worker") if isinstance(body, dict) else None
        if not isinstance(worker, dict) or worker.get("pid") != process.pid:
            return  # not (yet) our process on that port
        try:
            slot.status = WorkerStatus.from_json(worker)
        except TypeError:
            return
        slot.health = worker
        slot.polled_at = time.monotonic()
        slot.ever_served = True

    # -- stopping ---------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        for slot in self.slots:
            if slot.alive and slot.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.send_signal(signum)

    async def drain(self) -> None:
        """Every worker drains (new sessions here go to other nodes or get 503)."""
        self.draining = True
        self.stopping = True
        self._wake.set()
        self.signal(signal.SIGTERM)
        processes = [s.process for s in self.slots if s.alive and s.process is not None]
        deadline = self.config.drain_timeout_s + KILL_GRACE_S
        try:
            async with asyncio.timeout(deadline):
                await asyncio.gather(*(p.wait() for p in processes))
        except TimeoutError:
            log.error("workers still running %g s after SIGTERM: killing them", deadline)
            self.signal(signal.SIGKILL)
            await asyncio.gather(*(p.wait() for p in processes))
        codes = {s.name: s.process.returncode for s in self.slots if s.process is not None}
        log.info("every worker has exited: %s", codes)
