"""The supervisor: ``--workers N`` gateway processes behind one public port.

One gateway process is one event loop on one core. The supervisor starts N workers, each a
whole gateway (``python -m gateway`` with its own loop, sessions, UDP sockets and HTTP listener
on ``--port + 1 + i``, the same ``--host``), restarts any that exits, and serves the public
port (mediasoup: one worker per core; LiveKit: a router and a node selector over Redis):

- ``POST /v1/sessions``: placed on the least-loaded worker with room (``placement``). A worker
  of this node gets the request proxied (one round trip; the answer's ICE candidates are the
  worker's own anyway); when another node's worker is less loaded (``--redis-url``), a ``307``
  to that node (WHEP allows it for POST; the method and body are kept), which places it on its
  own least-loaded worker and never sends it on. The worker's ``Location`` is absolute and
  final: later requests go to the worker directly.
- ``/v1/sessions/{id}...`` sent here anyway: to its owner, by the id's prefix (this node's
  workers, proxied) or by its Redis owner entry (another node's: a 307).
- everything else (the HTTP speech routes, voices, the page, the document): streamed through
  to the least-loaded worker.
- ``/healthz``: every worker (pid, url, sessions, load, state, restarts), Redis, the cluster's
  nodes; ``/metrics``: every worker's metrics with a ``worker`` label plus the supervisor's.
- SIGTERM: new sessions go to other nodes (or get 503), every worker drains, exit 0.

The supervisor is never on the media path: RTP flows between the client and its worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import random
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from gateway import __version__
from gateway.api.access import EXPOSE_HEADERS
from gateway.api.errors import ApiError, Handler, json_errors
from gateway.api.rate_store import create_shared, shared_path
from gateway.api.timeouts import connection_limits, guard_runner, serve_options
from gateway.cluster import ws_proxy
from gateway.cluster.directory import RedisDirectory, Unavailable, WorkerStatus
from gateway.cluster.identity import ENV, WorkerIdentity
from gateway.cluster.metrics import SupervisorMetrics
from gateway.cluster.placement import Candidate, Reservations, choose
from gateway.cluster.proxy import Upstream, request_headers
from gateway.cluster.worker import public_url
from gateway.cluster.ws_proxy import is_upgrade, proxy_websocket
from gateway.config import GatewayConfig
from gateway.runtime.worker_pool import PROCESSES_ENV

log = logging.getLogger(__name__)

POLL_S = 0.5  # each local worker's /healthz is read this often
CLUSTER_S = 0.5  # the other nodes' workers are read from Redis this often
STALE_S = 5.0  # a worker whose /healthz has not answered for this long is not chosen
RESTART_BACKOFF_S = (0.5, 10.0)  # first restart delay; the cap for one crashing again and again
STABLE_S = 10.0  # a worker that lived this long restarts after the first delay again
KILL_GRACE_S = 15.0  # after --drain-timeout, workers still running are killed
VIA = "via"  # POST /v1/sessions?via=<node>,...: the nodes that sent it on (place())


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


class Supervisor:
    def __init__(self, config: GatewayConfig, argv: Sequence[str]) -> None:
        if config.port == 0:
            raise SystemExit("error: --workers needs a fixed --port (workers use --port + 1 + i)")
        if config.port + config.workers > 65535:
            raise SystemExit("error: --port + --workers is past 65535")
        if config.udp_port and config.udp_port + config.workers - 1 > 65535:
            raise SystemExit("error: --udp-port + --workers is past 65535")
        self.config = config
        self.argv = list(argv)
        self.advertise = (config.advertise_url
                          or default_advertise(config.host, config.port)).rstrip("/")
        self.node = node_id(self.advertise)
        self.token = secrets.token_urlsafe(24)
        local = public_url(config.host, config.port)
        self.slots = [
            Slot(index=i, id=f"{self.node}w{i}", port=config.port + 1 + i,
                 url=str(URL(self.advertise).with_port(config.port + 1 + i)).rstrip("/"),
                 local_url=str(URL(local).with_port(config.port + 1 + i)).rstrip("/"))
            for i in range(config.workers)
        ]
        self._by_id = {slot.id: slot for slot in self.slots}
        self.upstream = Upstream(self.token)
        self.directory = RedisDirectory(config.redis_url) if config.redis_url else None
        self.remote: dict[str, WorkerStatus] = {}  # other nodes' live workers (Redis)
        self.last_remote: dict[str, WorkerStatus] = {}  # ... as last seen (Redis down)
        self.nodes: list[dict[str, Any]] = []
        self.reservations = Reservations()
        self.metrics = SupervisorMetrics(redis=self.directory is not None)
        self.rng = random.Random()
        self.draining = False
        self.stopping = False
        self.exit_code = 0
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()  # interrupts restart back-offs when stopping
        self._tasks: list[asyncio.Task[Any]] = []

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
                self.exit_code = 1
                self._stop.set()
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

    async def _cluster(self) -> None:
        """With Redis: this node's entry (re-set every ``CLUSTER_S``: its TTL is 5 s), and
        every other node's workers."""
        directory = self.directory
        assert directory is not None
        while True:
            try:
                await directory.put_node(self._node_entry())
                workers = await directory.workers()
                self.nodes = await directory.nodes()
            except Unavailable:
                self.remote = {}  # placement falls back to this node's workers
                self.metrics.redis_up.set(0)
                self.metrics.redis_errors.inc()
            else:
                self.remote = {w.id: w for w in workers if w.node != self.node}
                self.last_remote = dict(self.remote)
                self.metrics.redis_up.set(1)
            await asyncio.sleep(CLUSTER_S)

    def _node_entry(self) -> dict[str, Any]:
        return {"id": self.node, "url": self.advertise, "pid": os.getpid(),
                "workers": len(self.slots), "state": "draining" if self.draining else "serving",
                "ts": time.time()}

    # -- placement and routing --------------------------------------------------------------

    def _candidates(self, exclude: set[str], remote: bool = True) -> list[Candidate]:
        out = []
        if not self.draining:
            for slot in self.slots:
                if slot.status is not None and slot.id not in exclude:
                    status = dataclasses.replace(slot.status, state=slot.state)
                    out.append(self.reservations.candidate(status, local=True))
        if remote:
            for worker in self.remote.values():
                if worker.id not in exclude and worker.node_url:
                    out.append(self.reservations.candidate(worker, local=False))
        return out

    def _refusal(self) -> ApiError:
        if self.draining:
            code, message = "draining", "this node is draining and no other node has room"
        elif not any(s.state == "serving" for s in self.slots) and not self.remote:
            code, message = "no_workers", "no worker is serving yet (starting or restarting)"
        else:
            cap = self.config.max_sessions
            code, message = "session_limit", (
                f"every worker is full (at its cap of {cap} sessions) or draining")
        self.metrics.rejected.labels(code).inc()
        return ApiError(503, code, message, {"Retry-After": "5"})

    async def place(self, request: web.Request) -> web.StreamResponse:
        """A new session: proxied to this node's least-loaded worker, or a 307 to the node
        whose worker is less loaded: that node places it among its own workers with its own
        fresh counts (each node is the only placer for its workers, so fronts working from
        stale stats cannot overfill one). Loops are impossible: each node a request is sent on
        from adds itself to ``?via=``; a node sent a request places it locally when it has
        room, and one already in ``via`` never sends it on (it is placed there or refused).
        So a request sent to a node that filled up meanwhile comes back, once, to be placed
        where it started."""
        body = await request.read()
        tried: set[str] = set()
        via = [n for n in request.query.get(VIA, "").split(",") if n]
        while True:
            candidates = self._candidates(tried, remote=self.node not in via)
            choice = None
            if via:  # sent here as the best place: here if there is room
                choice = choose([c for c in candidates if c.local], self.rng)
            choice = choice or choose(candidates, self.rng)
            if choice is None:
                raise self._refusal()
            if not choice.local:
                self.reservations.placed(choice.id)
                self.metrics.placements.labels("remote").inc()
                target = URL(choice.status.node_url).with_path(request.path).with_query(
                    request.query).update_query({VIA: ",".join([*via, self.node])})
                return web.Response(status=307, headers={
                    "Location": str(target), "Cache-Control": "no-store"})
            slot = self._by_id[choice.id]
            self.reservations.begin(slot.id)
            response: web.Response | None = None
            try:
                response = await self.upstream.buffered(request, slot.local_url, body)
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.metrics.proxy_errors.inc()
                log.warning("worker %s did not take a session: %s", slot.name, exc)
            finally:
                self.reservations.end(slot.id, response is not None and response.status == 201)
            if response is None or response.status == 503:
                tried.add(slot.id)  # full or draining since its last poll: the next one
                continue
            if response.status == 201:
                self.metrics.placements.labels("local").inc()
            return response

    def _slot_for(self, session_id: str) -> Slot | None:
        for slot in self.slots:
            if session_id.startswith(slot.prefix):
                return slot
        return None

    async def route_session(self, request: web.Request) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return await self.proxy_any(request)
        session_id = request.match_info["session_id"]
        slot = self._slot_for(session_id)
        if slot is not None:
            if not slot.alive:
                raise ApiError(404, "unknown_session", "no such session (its worker ended)")
            return await self._proxy(request, slot)
        owner = await self._remote_owner(session_id)
        if owner is None:
            raise ApiError(404, "unknown_session", "no such session (it may have ended)")
        local = self._by_id.get(owner.id)
        if local is not None:
            return await self._proxy(request, local)
        return web.Response(status=307, headers={"Location": owner.url + request.path_qs,
                                                 "Cache-Control": "no-store"})

    async def _remote_owner(self, session_id: str) -> WorkerStatus | None:
        directory = self.directory
        if directory is None:
            return None
        try:
            owner = await directory.session_owner(session_id)
            if owner is None:
                return None
            worker_id, pid = owner
            worker = self.remote.get(worker_id) or await directory.worker(worker_id)
            # a worker restarted since (another pid) took none of its predecessor's sessions
            return worker if worker is not None and worker.pid == pid else None
        except Unavailable:
            # Redis is down: the id's prefix names its worker; trust what was last seen
            for worker in self.last_remote.values():
                if session_id.startswith(worker.id + "-"):
                    return worker
            raise ApiError(503, "registry_unavailable", "the cluster registry (Redis) cannot be "
                           "reached and the session is not on this node",
                           {"Retry-After": "2"}) from None

    # -- the Realtime API (gateway/realtime) ---------------------------------------------------

    def _key_slot(self, request: web.Request) -> Slot | None:
        """The worker that issued the request's ephemeral key (``ek_<its prefix>…``): the
        key is good on that worker only."""
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.startswith("Bearer ") else next(
            (p.removeprefix("openai-insecure-api-key.") for p in ws_proxy.offered(request)
             if p.startswith("openai-insecure-api-key.")), "")
        return self._slot_for(token[3:]) if token.startswith("ek_") else None

    async def place_realtime(self, request: web.Request) -> web.StreamResponse:
        """A Realtime WebRTC call: placed as a session is, or on its ephemeral key's worker."""
        slot = self._key_slot(request)
        if slot is None:
            return await self.place(request)
        return await self.upstream.buffered(request, slot.local_url, await request.read())

    async def realtime_socket(self, request: web.Request) -> web.StreamResponse:
        """The Realtime WebSocket: a call's control socket goes to the call's worker; a new
        session to its ephemeral key's worker, or the least-loaded local worker that takes it
        (a refusal before the upgrade: the next one). Not across nodes: a browser does not
        follow a redirect on a WebSocket."""
        call_id = request.query.get("call_id")
        pinned = self._slot_for(call_id) if call_id else self._key_slot(request)
        if call_id and pinned is None:
            raise ApiError(404, "call_not_found", "no such call on this node")
        http = self.upstream.http
        assert http is not None
        headers = request_headers(request, self.upstream.token)
        tried: set[str] = set()
        while True:
            slot = pinned
            if slot is None:  # placed as a session is, among this node's workers
                choice = choose(self._candidates(tried, remote=False), self.rng)
                slot = None if choice is None else self._by_id[choice.id]
            if slot is None:
                raise self._refusal()
            url = str(URL(slot.local_url).with_scheme("ws")) + request.path_qs
            self.reservations.begin(slot.id)
            upstream = None
            try:
                upstream = await ws_proxy.connect(http, url, request, headers)
            except ws_proxy.Refused as exc:
                if exc.status == 503 and pinned is None:
                    tried.add(slot.id)
                    continue
                raise ApiError(exc.status, "refused", str(exc)) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.metrics.proxy_errors.inc()
                if pinned is not None:
                    raise ApiError(502, "worker_unreachable", str(exc)) from exc
                tried.add(slot.id)
                continue
            finally:
                self.reservations.end(slot.id, upstream is not None)
            if pinned is None:
                self.metrics.placements.labels("local").inc()
            return await ws_proxy.pipe(request, upstream)

    def _least_loaded_slot(self) -> Slot | None:
        serving = [s for s in self.slots if s.state == "serving" and s.status is not None]
        if serving:
            low = min(s.status.load for s in serving if s.status is not None)
            return self.rng.choice([s for s in serving
                                    if s.status is not None and s.status.load <= low + 1e-9])
        alive = [s for s in self.slots if s.alive and s.status is not None]
        return alive[0] if alive else None

    async def proxy_any(self, request: web.Request) -> web.StreamResponse:
        """The HTTP speech routes, the page, voices, the document: the least-loaded worker."""
        slot = self._least_loaded_slot()
        if slot is None:
            self.metrics.rejected.labels("no_workers").inc()
            raise ApiError(503, "no_workers", "no worker is serving yet", {"Retry-After": "2"})
        return await self._proxy(request, slot)

    async def _proxy(self, request: web.Request, slot: Slot) -> web.StreamResponse:
        try:
            if is_upgrade(request) and self.upstream.http is not None:
                # the ElevenLabs-compatible sockets: carried through (no redirect on a socket)
                return await proxy_websocket(request, self.upstream.http, slot.local_url,
                                             self.upstream.token)
            return await self.upstream.streamed(request, slot.local_url)
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            self.metrics.proxy_errors.inc()
            if request.transport is None or request.transport.is_closing():
                raise
            raise ApiError(502, "worker_unreachable",
                           f"worker {slot.name} could not be reached: {exc}") from exc

    # -- health and metrics -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        workers = [slot.as_json() for slot in self.slots]
        body: dict[str, Any] = {
            "status": "draining" if self.draining else "ok", "role": "supervisor",
            "version": __version__, "node": self.node, "url": self.advertise, "pid": os.getpid(),
            "sessions": sum(w["sessions"] or 0 for w in workers),
            "max_sessions": self.config.max_sessions * len(self.slots),
            "workers": workers, "redis": None, "placement": "local",
        }
        if self.directory is not None:
            body["redis"] = self.directory.health()
            body["placement"] = "cluster" if self.directory.ok else "local"
            nodes = []
            for node in sorted(self.nodes, key=lambda n: str(n.get("id"))):
                members = [w for w in self.remote.values() if w.node == node.get("id")]
                if node.get("id") == self.node:
                    members = [s.status for s in self.slots if s.status is not None]
                nodes.append({**node, "workers": [
                    {"id": w.id, "url": w.url, "pid": w.pid, "sessions": w.sessions,
                     "max_sessions": w.max_sessions, "load": round(w.load, 4), "state": w.state}
                    for w in members]})
            body["cluster"] = {"nodes": nodes}
        return body

    async def scrape(self) -> bytes:
        live = [s for s in self.slots if s.alive and s.status is not None]
        texts = await asyncio.gather(
            *(self.upstream.get_text(s.local_url + "/metrics", 2.0) for s in live),
            return_exceptions=True,
        )
        self.metrics.from_workers.texts = {}
        for slot in self.slots:
            self.metrics.worker_up.labels(slot.name).set(0)
        for slot, text in zip(live, texts, strict=True):
            if isinstance(text, str):
                self.metrics.from_workers.texts[slot.name] = text
                self.metrics.worker_up.labels(slot.name).set(1)
        self.metrics.workers.clear()
        for slot in self.slots:
            self.metrics.workers.labels(slot.state).inc()
        return self.metrics.exposition()

    # -- the public app ---------------------------------------------------------------------

    def app(self) -> web.Application:
        origins = self.config.cors_origins

        @web.middleware
        async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
            response = await handler(request)
            origin = request.headers.get("Origin")
            allowed = "*" if "*" in origins else (origin if origin in origins else None)
            if (origin is not None and allowed is not None and not response.prepared
                    and "Access-Control-Allow-Origin" not in response.headers):
                response.headers["Access-Control-Allow-Origin"] = allowed
                response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
                if allowed != "*":
                    response.headers["Vary"] = "Origin"
            return response

        app = web.Application(middlewares=[cors, json_errors],
                              client_max_size=self.config.max_body_bytes)

        async def healthz(request: web.Request) -> web.Response:
            return web.json_response(self.health())

        async def metrics(request: web.Request) -> web.Response:
            from prometheus_client import CONTENT_TYPE_LATEST

            return web.Response(body=await self.scrape(),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def sessions(request: web.Request) -> web.StreamResponse:
            if request.method == "POST":
                return await self.place(request)
            return await self.proxy_any(request)

        app.router.add_get("/healthz", healthz)
        app.router.add_get("/metrics", metrics)
        app.router.add_route("*", "/v1/sessions", sessions)
        app.router.add_get("/v1/realtime", self.realtime_socket)
        app.router.add_post("/v1/realtime", self.place_realtime)
        app.router.add_post("/v1/realtime/calls", self.place_realtime)
        app.router.add_route("*", r"/v1/realtime/calls/{session_id}{tail:(/.*)?}",
                             self.route_session)
        app.router.add_route("*", r"/v1/sessions/{session_id}{tail:(/.*)?}", self.route_session)
        app.router.add_route("*", "/{tail:.*}", self.proxy_any)
        return app

    # -- running ----------------------------------------------------------------------------

    def _on_signals(self) -> None:
        loop = asyncio.get_running_loop()

        def first(signum: int) -> None:
            if self._stop.is_set():
                log.warning("second %s: workers exit now", signal.Signals(signum).name)
                self._signal_workers(signal.SIGTERM)
                os._exit(128 + signum)
            log.info("%s received: draining every worker", signal.Signals(signum).name)
            self._stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, first, signum)

    def _signal_workers(self, signum: int) -> None:
        for slot in self.slots:
            if slot.alive and slot.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.send_signal(signum)

    async def run(self) -> None:
        await self.upstream.start()
        limits = connection_limits(self.config)
        runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True,
                               **serve_options(limits))
        await runner.setup()
        guard_runner(runner, limits)  # the public port's timeouts and per-address cap
        rate_file = shared_path(os.getpid())
        create_shared(rate_file)  # the workers' shared rate limit buckets (api/rate_store.py)
        try:
            site = web.TCPSite(runner, self.config.host, self.config.port)
            await site.start()  # first: a port in use fails before any worker starts
            self._tasks = [asyncio.create_task(self._run_slot(s), name=f"worker-{s.name}")
                           for s in self.slots]
            self._tasks.append(asyncio.create_task(self._poll(), name="poll-workers"))
            if self.directory is not None:
                self._tasks.append(asyncio.create_task(self._cluster(), name="cluster"))
            shown = public_url(self.config.host, self.config.port)
            print(f"voice gateway on {shown}/  ({len(self.slots)} workers on ports "
                  f"{self.slots[0].port}-{self.slots[-1].port}; node {self.node}, advertised "
                  f"{self.advertise})", flush=True)
            self._on_signals()
            await self._stop.wait()
            await self._drain()
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

    async def _drain(self) -> None:
        """Every worker drains (new sessions here go to other nodes or get 503); exit 0."""
        self.draining = True
        self.stopping = True
        self._wake.set()
        self._signal_workers(signal.SIGTERM)
        processes = [s.process for s in self.slots if s.alive and s.process is not None]
        deadline = self.config.drain_timeout_s + KILL_GRACE_S
        try:
            async with asyncio.timeout(deadline):
                await asyncio.gather(*(p.wait() for p in processes))
        except TimeoutError:
            log.error("workers still running %g s after SIGTERM: killing them", deadline)
            self._signal_workers(signal.SIGKILL)
            await asyncio.gather(*(p.wait() for p in processes))
        codes = {s.name: s.process.returncode for s in self.slots if s.process is not None}
        log.info("every worker has exited: %s", codes)


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
