"""The process's one metrics registry (prometheus-client), read by /healthz and /metrics.

Counters are incremented where the events happen (a session created or closed, an utterance
ending, a NACK answered, a GC pause, a loop stall) and never go backwards: what a session counts
per packet (its RTP sink's and NACK responder's plain ints, read for ``GET /v1/sessions/{id}``)
is folded into process totals when it closes, and a collector adds the live sessions' counts at
scrape time (``SendTotals``), so the hot path pays no per-packet metric call.

Names follow Prometheus practice: the ``voice_gateway_`` prefix, base units (seconds, bytes),
``_total`` counters, no per-session labels; histogram buckets sized for milliseconds.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

NAMESPACE = "voice_gateway"
disable_created_metrics()  # no *_created series: this process owns its registry
#: Seconds: 1 ms .. 5 s, dense where media latency lives (the library default starts at 5 ms).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2,
                   0.3, 0.5, 0.8, 1.0, 2.0, 5.0)
#: Seconds: loop stalls and GC pauses, 0.5 ms .. 1 s.
PAUSE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

#: Send-side counters a live session keeps as plain ints (name -> help).
SEND_COUNTERS = {
    "rtp_packets_sent": "RTP packets sent (first transmissions: speech and keep-alive silence)",
    "rtp_speech_packets_sent": "RTP packets sent that carried speech",
    "rtp_bytes_sent": "RTP payload bytes sent (first transmissions)",
    "nacks_received": "RTCP generic NACKs received",
    "retransmissions": "Stored packets resent in answer to a NACK",
    "concealments": "Concealment packets sent for NACKed packets no longer stored or cut off",
    "nack_rate_limited": "NACKed sequence numbers not answered (back-off or per-second cap)",
    "send_errors": "Send ticks or records that raised (the stream carried on)",
}


#: The worker's shared UDP sockets' counters (net/udp_mux.MuxStats, summed over its sockets).
MUX_COUNTERS = {
    "received": "Datagrams read from the shared UDP sockets",
    "routed_by_ufrag": "STUN requests routed by their USERNAME's ufrag",
    "routed_by_transaction": "STUN responses routed by the transaction of our request",
    "routed_by_address": "Datagrams (DTLS, SRTP, SRTCP) routed by their source address",
    "dropped_unknown": "Datagrams dropped: no session to route them to (both kinds)",
    "unknown_ufrag": "STUN requests dropped: their ufrag is no session's (demux misses)",
    "unknown_source": "Datagrams dropped: from an address no session has checked from",
    "dropped_empty": "Empty datagrams dropped (aiortc would end the session on one)",
    "transaction_misses": "STUN responses to no request in flight (routed by address instead)",
    "refused_addresses": "Addresses not bound: the session had its maximum",
    "read_errors": "Errors reading the shared sockets (ICMP errors queued on them)",
    "polled_reads": "Shared socket read bursts run by the shared ticker's fires (--coalesce-ms)",
    "kernel_drops": "Datagrams the kernel dropped on the shared sockets (receive buffer full)",
    "sent": "Datagrams sent on the shared sockets",
    "batches": "Batches of one tick's RTP sent together",
    "batched": "Datagrams sent in batches",
    "sendmmsg_calls": "sendmmsg(2) calls",
    "sendmmsg_partial": "Batches sendmmsg(2) sent only part of (the rest went by sendto)",
    "send_failed": "Datagrams not sent (a full socket buffer, an unreachable address)",
    "compiled_sent": "Datagrams sent by the compiled send path (net/sendpath.py)",
    "fast_received": "SRTP datagrams taken by a session's receive fast path (no aiortc task)",
}
MUX_GAUGES = {
    "sockets": "Shared UDP sockets of this worker",
    "endpoints": "Sessions on the shared UDP sockets",
    "addresses": "Peer addresses bound to sessions on the shared UDP sockets",
}
#: ICE consent freshness checks (aiortc_compat.ConsentStats).
CONSENT_COUNTERS = {
    "checks": "ICE consent freshness checks sent (RFC 7675)",
    "answered": "ICE consent checks answered",
    "answered_late": "ICE consent checks answered after 0.5 s (aioice alone counted a failure)",
    "unanswered": "ICE consent checks not answered within the consent window (30 s)",
    "expired": "ICE connections closed: no consent check of the window answered",
}


class PlainCounters:
    """A collector of counts another layer keeps as plain ints, read at scrape time:
    ``source()`` returns name -> value (None: nothing exported yet). Registered once per
    process; whoever owns the counts sets ``source`` (the latest app's, in tests)."""

    def __init__(
        self, prefix: str, counters: dict[str, str], gauges: dict[str, str] | None = None
    ) -> None:
        self.prefix = prefix
        self.counters = counters
        self.gauges = gauges or {}
        self.source: Callable[[], dict[str, Any]] | None = None

    def collect(self) -> Iterator[Metric]:
        source = self.source
        if source is None:
            return
        values = source()
        for name, doc in self.counters.items():
            family = CounterMetricFamily(f"{NAMESPACE}_{self.prefix}_{name}", doc)
            family.add_metric([], values.get(name, 0))
            yield family
        for name, doc in self.gauges.items():
            gauge = GaugeMetricFamily(f"{NAMESPACE}_{self.prefix}_{name}", doc)
            gauge.add_metric([], values.get(name, 0))
            yield gauge

    def describe(self) -> Iterator[Metric]:
        return iter(())


class SendCounts(Protocol):
    def send_counts(self) -> dict[str, int]: ...


class SendTotals:
    """A collector: folded totals of closed sessions plus the live ones' counts."""

    def __init__(self) -> None:
        self._closed = dict.fromkeys(SEND_COUNTERS, 0)
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()

    def track(self, source: SendCounts) -> None:
        self._live.add(source)

    def fold(self, source: SendCounts) -> None:
        """``source`` has closed: its counts become part of the totals for good."""
        if source in self._live:
            self._live.discard(source)
            for name, value in source.send_counts().items():
                self._closed[name] += value

    def totals(self) -> dict[str, int]:
        out = dict(self._closed)
        for source in list(self._live):
            for name, value in source.send_counts().items():
                out[name] += value
        return out

    def collect(self) -> Iterator[Metric]:
        for name, value in self.totals().items():
            family = CounterMetricFamily(f"{NAMESPACE}_{name}", SEND_COUNTERS[name])
            family.add_metric([], value)
            yield family

    def describe(self) -> Iterator[Metric]:
        return iter(())


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=NAMESPACE, registry=r)

        self.sessions_created = counter("sessions_created", "Sessions created")
        self.sessions_closed = counter("sessions_closed", "Sessions closed, by reason", ("reason",))
        self.sessions_rejected = counter(
            "sessions_rejected", "Session requests refused, by code", ("code",)
        )
        self.utterances = counter("utterances", "Utterances ended, by final state", ("state",))
        self.sessions = Gauge("sessions", "Live sessions, by state", ("state",),
                              namespace=NAMESPACE, registry=r)
        self.say_to_first_packet = Histogram(
            "say_to_first_packet_seconds", "Speech request to its first frame sent",
            namespace=NAMESPACE, registry=r, buckets=LATENCY_BUCKETS,
        )
        self.tts_first_chunk = Histogram(
            "tts_first_chunk_seconds", "Synthesis start to the backend's first PCM, by backend",
            ("backend",), namespace=NAMESPACE, registry=r, buckets=LATENCY_BUCKETS,
        )
        self.loop_stalls = Histogram(
            "loop_stall_seconds", "Event-loop stalls over --stall-warn-ms",
            namespace=NAMESPACE, registry=r, buckets=PAUSE_BUCKETS,
        )
        self.gc_pauses = Histogram(
            "gc_pause_seconds", "Garbage-collection pauses, by generation", ("generation",),
            namespace=NAMESPACE, registry=r, buckets=PAUSE_BUCKETS,
        )
        self.rtt = Histogram(
            "rtt_seconds", "Round-trip time from the peers' RTCP receiver reports",
            namespace=NAMESPACE, registry=r, buckets=LATENCY_BUCKETS,
        )
        self.jitter = Histogram(
            "jitter_seconds", "Interarrival jitter the peers report (RTCP receiver reports)",
            namespace=NAMESPACE, registry=r, buckets=LATENCY_BUCKETS,
        )
        self.fraction_lost = Histogram(
            "fraction_lost", "Loss the peers report per receiver report (0..1)",
            namespace=NAMESPACE, registry=r,
            buckets=(0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
        )
        self.send = SendTotals()
        r.register(self.send)  # type: ignore[arg-type]
        self.udp_mux = PlainCounters("udp_mux", MUX_COUNTERS, MUX_GAUGES)
        r.register(self.udp_mux)  # type: ignore[arg-type]
        self.ice_consent = PlainCounters("ice_consent", CONSENT_COUNTERS)
        r.register(self.ice_consent)  # type: ignore[arg-type]

    def set_session_states(self, count_by_state: Callable[[], dict[str, int]]) -> None:
        """Read live sessions by state at scrape time."""
        self.sessions.clear()
        for state, n in count_by_state().items():
            self.sessions.labels(state).set(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def snapshot(self) -> dict[str, Any]:
        """The counters /healthz shows (the same numbers /metrics exposes)."""

        def by_label(c: Counter) -> dict[str, float]:
            return {
                s.labels[next(iter(s.labels))] if s.labels else "": s.value
                for m in c.collect() for s in m.samples if s.name.endswith("_total")
            }

        return {
            "sessions_created_total": _value(self.sessions_created),
            "sessions_closed_total": by_label(self.sessions_closed),
            "utterances_total": by_label(self.utterances),
            **{f"{k}_total": v for k, v in self.send.totals().items()},
        }


def _value(counter: Counter) -> float:
    return next(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))


METRICS = Metrics()
