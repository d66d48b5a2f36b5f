"""Where the public port sends each request: placement of new sessions and Realtime calls,
session requests to their owners, everything else to the least-loaded worker.

- ``POST /v1/sessions``: placed on the least-loaded worker with room (``placement``). A worker
  of this node gets the request proxied (one round trip; the answer's ICE candidates are the
  worker's own anyway); when another node's worker is less loaded (``--redis-url``), a ``307``
  to that node (WHEP allows it for POST; the method and body are kept), which places it on its
  own least-loaded worker and never sends it on. The worker's ``Location`` is absolute and
  final: later requests go to the worker directly.
- ``/v1/sessions/{id}...`` sent here anyway: to its owner, by the id's prefix (this node's
  workers, proxied) or by its Redis owner entry (another node's: a 307).
- the Realtime API: a call's control socket to the call's worker; a new call or socket to its
  ephemeral key's worker, or placed as a session is (a socket among this node's workers only).
- everything else (the HTTP speech routes, voices, the page, the document): streamed through
  to the least-loaded worker.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from gateway.api.errors import ApiError
from gateway.cluster import ws_proxy
from gateway.cluster.directory import WorkerStatus
from gateway.cluster.metrics import SupervisorMetrics
from gateway.cluster.peers import Peers
from gateway.cluster.placement import Candidate, Reservations, choose
from gateway.cluster.processes import Slot, Workers
from gateway.cluster.proxy import Upstream, request_headers
from gateway.cluster.ws_proxy import is_upgrade, proxy_websocket

log = logging.getLogger(__name__)

VIA = "via"  # POST /v1/sessions?via=<node>,...: the nodes that sent it on (place())


class Router:
    def __init__(self, workers: Workers, peers: Peers | None, upstream: Upstream,
                 metrics: SupervisorMetrics, max_sessions: int) -> None:
        self.workers = workers
        self.peers = peers
        self.upstream = upstream
        self.metrics = metrics
        self.max_sessions = max_sessions
        self.reservations = Reservations()
        self.rng = random.Random()

    @property
    def remote(self) -> dict[str, WorkerStatus]:
        return self.peers.remote if self.peers is not None else {}

    # -- placement --------------------------------------------------------------------------

    def _candidates(self, exclude: set[str], remote: bool = True) -> list[Candidate]:
        out = []
        if not self.workers.draining:
            for slot in self.workers.slots:
                if slot.status is not None and slot.id not in exclude:
                    status = dataclasses.replace(slot.status, state=slot.state)
                    out.append(self.reservations.candidate(status, local=True))
        if remote:
            for worker in self.remote.values():
                if worker.id not in exclude and worker.node_url:
                    out.append(self.reservations.candidate(worker, local=False))
        return out

    def placement_view(self) -> list[dict[str, Any]]:
        """What ``place`` would choose from now: every worker with the sessions it is counted
        at (its stats plus the placements they cannot show yet) -- for /healthz, so a refusal
        can be explained from outside."""
        return [{"worker": c.id, "local": c.local, "state": c.status.state,
                 "sessions": c.sessions, "reserved": c.sessions - c.status.sessions,
                 "load": round(c.load, 3), "full": c.full}
                for c in self._candidates(set())]

    def _refusal(self) -> ApiError:
        if self.workers.draining:
            code, message = "draining", "this node is draining and no other node has room"
        elif not any(s.state == "serving" for s in self.workers.slots) and not self.remote:
            code, message = "no_workers", "no worker is serving yet (starting or restarting)"
        else:
            code, message = "session_limit", (
                f"every worker is full (at its cap of {self.max_sessions} sessions) or draining")
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
        node = self.workers.node
        via = [n for n in request.query.get(VIA, "").split(",") if n]
        while True:
            candidates = self._candidates(tried, remote=node not in via)
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
                    request.query).update_query({VIA: ",".join([*via, node])})
                return web.Response(status=307, headers={
                    "Location": str(target), "Cache-Control": "no-store"})
            slot = self.workers.by_id[choice.id]
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

    # -- a session's requests ---------------------------------------------------------------

    async def route_session(self, request: web.Request) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return await self.proxy_any(request)
        session_id = request.match_info["session_id"]
        slot = self.workers.slot_for(session_id)
        if slot is not None:
            if not slot.alive:
                raise ApiError(404, "unknown_session", "no such session (its worker ended)")
            return await self._proxy(request, slot)
        owner = await self.peers.owner(session_id) if self.peers is not None else None
        if owner is None:
            raise ApiError(404, "unknown_session", "no such session (it may have ended)")
        local = self.workers.by_id.get(owner.id)
        if local is not None:
            return await self._proxy(request, local)
        return web.Response(status=307, headers={"Location": owner.url + request.path_qs,
                                                 "Cache-Control": "no-store"})

    # -- the Realtime API (gateway/realtime) ---------------------------------------------------

    def _key_slot(self, request: web.Request) -> Slot | None:
        """The worker that issued the request's ephemeral key (``ek_<its prefix>…``): the
        key is good on that worker only."""
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.startswith("Bearer ") else next(
            (p.removeprefix("openai-insecure-api-key.") for p in ws_proxy.offered(request)
             if p.startswith("openai-insecure-api-key.")), "")
        return self.workers.slot_for(token[3:]) if token.startswith("ek_") else None

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
        pinned = self.workers.slot_for(call_id) if call_id else self._key_slot(request)
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
                slot = None if choice is None else self.workers.by_id[choice.id]
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

    # -- everything else --------------------------------------------------------------------

    def _least_loaded_slot(self) -> Slot | None:
        slots = self.workers.slots
        serving = [s for s in slots if s.state == "serving" and s.status is not None]
        if serving:
            low = min(s.status.load for s in serving if s.status is not None)
            return self.rng.choice([s for s in serving
                                    if s.status is not None and s.status.load <= low + 1e-9])
        alive = [s for s in slots if s.alive and s.status is not None]
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
