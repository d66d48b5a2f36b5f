"""The channels' counters in the process's metrics (read at scrape time, no hot-path cost).

``voice_gateway_channel_frames_encoded_total`` against ``..._frames_delivered_total`` is the
point of a channel: frames are encoded once by the channel's speaker and handed to every
listener; ``..._encoder_runs_total`` counts the speaker's encoder instances (one per synthesized
utterance, none for a phrase-cache replay), whatever the listener count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gateway.runtime.metrics import METRICS, NAMESPACE

if TYPE_CHECKING:
    from gateway.channels.broadcast import Broadcast

COUNTERS = {
    "encoder_runs": "Channel speakers' encoder runs (one per synthesized utterance)",
    "frames_encoded": "Frames encoded by channel speakers (once, however many listen)",
    "frames_aired": "Utterance frames aired by channels",
    "frames_delivered": "Aired frames handed to channel listeners (speech and keep-alive)",
    "frames_decoded": "Aired frames decoded once for a channel's PCM listeners",
    "listener_drops": "Aired frames a channel listener lost (its queue was full)",
    "listeners_joined": "Listeners that joined a channel",
    "mirror_link_frames": "Frames a worker's mirrors took from their channels' workers "
                          "(once per worker and channel)",
}
GAUGES = {"channels": "Live channels", "channel_listeners": "Live channel listeners"}


def channel_counts(channel: Broadcast) -> dict[str, int]:
    """A channel's counts, or a mirror's (no encoder: its frames come over its link)."""
    stats = channel.air.stats
    speaker = getattr(getattr(channel, "conversation", None), "speaker", None)
    return {
        "encoder_runs": 0 if speaker is None else speaker.encoders_created,
        "frames_encoded": getattr(channel, "encoded_frames", 0),
        "mirror_link_frames": getattr(channel, "link_frames", 0),
        "frames_aired": stats.speech_frames,
        "frames_delivered": stats.deliveries,
        "frames_decoded": stats.decoded,
        "listener_drops": channel.dropped_total + sum(
            listener.dropped for listener in channel.listeners),
        "listeners_joined": channel.joined_total,
    }


class ChannelTotals:
    """Closed channels' counts folded in, plus the live ones' at scrape time."""

    def __init__(self) -> None:
        self._closed = dict.fromkeys(COUNTERS, 0)
        self.source: Any = None  # the ChannelRegistry (iterable of channels)

    def fold(self, channel: Broadcast) -> None:
        for name, value in channel_counts(channel).items():
            self._closed[name] += value

    def _live(self) -> list[Broadcast]:
        source = self.source
        if source is None:
            return []
        return [*source, *source.mirrors]

    def totals(self) -> dict[str, int]:
        out = dict(self._closed)
        for channel in self._live():
            for name, value in channel_counts(channel).items():
                out[name] += value
        return out

    def collect(self) -> Iterator[Metric]:
        for name, value in self.totals().items():
            family = CounterMetricFamily(f"{NAMESPACE}_channel_{name}", COUNTERS[name])
            family.add_metric([], value)
            yield family
        live = self._live()
        values = {"channels": sum(1 for c in live if c.role == "origin"),
                  "channel_listeners": sum(sum(c.count_by_transport().values())
                                              for c in live)}
        for name, doc in GAUGES.items():
            gauge = GaugeMetricFamily(f"{NAMESPACE}_{name}", doc)
            gauge.add_metric([], values[name])
            yield gauge

    def describe(self) -> Iterator[Metric]:
        return iter(())


CHANNEL_METRICS = ChannelTotals()
METRICS.registry.register(CHANNEL_METRICS)  # type: ignore[arg-type]
