"""The supervisor's ``/metrics``: every worker's metrics with a ``worker`` label, plus its own.

Not prometheus-client's multiprocess mode: that needs every metric created in multiprocess
form (files in a shared directory, no custom collectors), and the gateway's send counters are a
custom collector over live sessions (``runtime/metrics.SendTotals``). Instead the supervisor
fetches each worker's ``/metrics`` at scrape time (concurrently, over loopback), parses it and
re-exposes each sample with ``worker="w<i>"`` added: one family per name, its samples from
every worker. A worker that restarted starts its counters from zero, which Prometheus's
``rate()`` reads as a counter reset, as for any restarted process.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

NAMESPACE = "voice_gateway_cluster"
disable_created_metrics()


class WorkerMetrics:
    """A collector over the expositions last fetched from the workers."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def collect(self) -> Iterator[Metric]:
        families: dict[tuple[str, str], Metric] = {}
        for worker, text in self.texts.items():
            for family in text_string_to_metric_families(text):
                key = (family.name, family.type)
                merged = families.get(key)
                if merged is None:
                    merged = families[key] = Metric(family.name, family.documentation,
                                                    family.type)
                for s in family.samples:
                    merged.add_sample(s.name, {**s.labels, "worker": worker}, s.value,
                                      s.timestamp)
        yield from families.values()

    def describe(self) -> Iterable[Metric]:
        return ()


class SupervisorMetrics:
    def __init__(self, redis: bool = False) -> None:
        r = self.registry = CollectorRegistry()
        self.workers = Gauge("workers", "Worker processes, by state", ("state",),
                             namespace=NAMESPACE, registry=r)
        self.worker_up = Gauge("worker_up", "1 if the worker's /metrics answered this scrape",
                               ("worker",), namespace=NAMESPACE, registry=r)
        self.restarts = Counter("worker_restarts", "Worker processes restarted after exiting",
                                ("worker",), namespace=NAMESPACE, registry=r)
        self.placements = Counter(
            "placements", "New sessions placed, by target (local: proxied to a worker of this "
            "node; remote: 307 to another node's worker)", ("target",),
            namespace=NAMESPACE, registry=r)
        self.rejected = Counter("placements_rejected", "New sessions refused here, by code",
                                ("code",), namespace=NAMESPACE, registry=r)
        self.redis_up = Gauge("redis_up", "1 while Redis answers (absent without --redis-url)",
                              namespace=NAMESPACE, registry=r if redis else None)
        self.redis_errors = Counter("redis_errors", "Redis round trips of the supervisor that "
                                    "failed or timed out", namespace=NAMESPACE,
                                    registry=r if redis else None)
        self.proxy_errors = Counter("proxy_errors", "Requests the proxy could not forward to a "
                                    "worker", namespace=NAMESPACE, registry=r)
        self.from_workers = WorkerMetrics()
        r.register(self.from_workers)  # type: ignore[arg-type]

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
