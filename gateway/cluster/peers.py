"""The other nodes of a cluster as Redis shows them, and this node's entry there.

Every ``CLUSTER_S`` this node re-sets its entry (its TTL is 5 s) and reads every other node's
workers, which placement may send new sessions to. While Redis cannot be reached, placement
falls back to this node's workers; the workers last seen still name the owners of session ids
by their prefixes.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from gateway.api.errors import ApiError
from gateway.cluster.directory import RedisDirectory, Unavailable, WorkerStatus
from gateway.cluster.metrics import SupervisorMetrics
from gateway.cluster.processes import Workers

CLUSTER_S = 0.5  # the other nodes' workers are read from Redis this often


class Peers:
    def __init__(self, directory: RedisDirectory, workers: Workers,
                 metrics: SupervisorMetrics) -> None:
        self.directory = directory
        self.workers = workers
        self.metrics = metrics
        self.remote: dict[str, WorkerStatus] = {}  # other nodes' live workers (Redis)
        self.last_remote: dict[str, WorkerStatus] = {}  # ... as last seen (Redis down)
        self.nodes: list[dict[str, Any]] = []

    async def run(self) -> None:
        """This node's entry (re-set every ``CLUSTER_S``) and every other node's workers."""
        directory = self.directory
        while True:
            try:
                await directory.put_node(self.node_entry())
                workers = await directory.workers()
                self.nodes = await directory.nodes()
            except Unavailable:
                self.remote = {}  # placement falls back to this node's workers
                self.metrics.redis_up.set(0)
                self.metrics.redis_errors.inc()
            else:
                self.remote = {w.id: w for w in workers if w.node != self.workers.node}
                self.last_remote = dict(self.remote)
                self.metrics.redis_up.set(1)
            await asyncio.sleep(CLUSTER_S)

    def node_entry(self) -> dict[str, Any]:
        workers = self.workers
        return {"id": workers.node, "url": workers.advertise, "pid": os.getpid(),
                "workers": len(workers.slots),
                "state": "draining" if workers.draining else "serving", "ts": time.time()}

    async def owner(self, session_id: str) -> WorkerStatus | None:
        """The other node's worker that owns ``session_id`` (its Redis owner entry)."""
        directory = self.directory
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

    def health(self) -> dict[str, Any]:
        """``/healthz``'s ``cluster``: every node with its workers."""
        nodes = []
        for node in sorted(self.nodes, key=lambda n: str(n.get("id"))):
            members = [w for w in self.remote.values() if w.node == node.get("id")]
            if node.get("id") == self.workers.node:
                members = [s.status for s in self.workers.slots if s.status is not None]
            nodes.append({**node, "workers": [
                {"id": w.id, "url": w.url, "pid": w.pid, "sessions": w.sessions,
                 "max_sessions": w.max_sessions, "load": round(w.load, 4), "state": w.state}
                for w in members]})
        return {"nodes": nodes}
