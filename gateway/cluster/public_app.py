"""The supervisor's public port: the routes (sent on by the ``Router``), CORS, and
``/healthz`` and ``/metrics`` for the whole node.

- ``/healthz``: every worker (pid, url, sessions, load, state, restarts), Redis, the cluster's
  nodes, and ``placement_view``: the workers as the router counts them for the next placement
  (its own placements the stats cannot show yet included);
- ``/metrics``: every worker's metrics with a ``worker`` label plus the supervisor's.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from aiohttp import web

from gateway import __version__
from gateway.api.access import EXPOSE_HEADERS
from gateway.api.errors import Handler, json_errors
from gateway.cluster.directory import RedisDirectory
from gateway.cluster.metrics import SupervisorMetrics
from gateway.cluster.peers import Peers
from gateway.cluster.processes import Workers
from gateway.cluster.proxy import Upstream
from gateway.cluster.router import Router
from gateway.config import GatewayConfig


def health(workers: Workers, config: GatewayConfig, directory: RedisDirectory | None,
           peers: Peers | None, router: Router) -> dict[str, Any]:
    slots = [slot.as_json() for slot in workers.slots]
    body: dict[str, Any] = {
        "status": "draining" if workers.draining else "ok", "role": "supervisor",
        "version": __version__, "node": workers.node, "url": workers.advertise,
        "pid": os.getpid(), "sessions": sum(w["sessions"] or 0 for w in slots),
        "max_sessions": config.max_sessions * len(workers.slots),
        "workers": slots, "redis": None, "placement": "local",
        "placement_view": router.placement_view(),
    }
    if directory is not None:
        body["redis"] = directory.health()
        body["placement"] = "cluster" if directory.ok else "local"
        if peers is not None:
            body["cluster"] = peers.health()
    return body


async def scrape(workers: Workers, upstream: Upstream, metrics: SupervisorMetrics) -> bytes:
    """Every live worker's ``/metrics`` (labelled by worker) and the supervisor's own."""
    live = [s for s in workers.slots if s.alive and s.status is not None]
    texts = await asyncio.gather(
        *(upstream.get_text(s.local_url + "/metrics", 2.0) for s in live),
        return_exceptions=True,
    )
    metrics.from_workers.texts = {}
    for slot in workers.slots:
        metrics.worker_up.labels(slot.name).set(0)
    for slot, text in zip(live, texts, strict=True):
        if isinstance(text, str):
            metrics.from_workers.texts[slot.name] = text
            metrics.worker_up.labels(slot.name).set(1)
    metrics.workers.clear()
    for slot in workers.slots:
        metrics.workers.labels(slot.state).inc()
    return metrics.exposition()


def public_app(config: GatewayConfig, router: Router, workers: Workers,
               directory: RedisDirectory | None, peers: Peers | None) -> web.Application:
    origins = config.cors_origins

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

    app = web.Application(middlewares=[cors, json_errors], client_max_size=config.max_body_bytes)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response(health(workers, config, directory, peers, router))

    async def metrics(request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        body = await scrape(workers, router.upstream, router.metrics)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def sessions(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            return await router.place(request)
        return await router.proxy_any(request)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/v1/sessions", sessions)
    app.router.add_get("/v1/realtime", router.realtime_socket)
    app.router.add_post("/v1/realtime", router.place_realtime)
    app.router.add_post("/v1/realtime/calls", router.place_realtime)
    app.router.add_route("*", r"/v1/realtime/calls/{session_id}{tail:(/.*)?}",
                         router.route_session)
    app.router.add_route("*", r"/v1/sessions/{session_id}{tail:(/.*)?}", router.route_session)
    app.router.add_route("*", "/{tail:.*}", router.proxy_any)
    return app
