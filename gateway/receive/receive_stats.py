"""Counters of the receive path, and the two trackers behind its delay figures."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.receive.sliding_window import SlidingWindow


@dataclass
class ReceiveStats:
    received: int = 0  # RTP packets off the wire (repairs and duplicates included)
    lost: int = 0  # sequence numbers skipped when a later one arrived (never a pause)
    reordered: int = 0  # ... of those, filled by the original packet arriving late
    recovered_nack: int = 0  # ... filled by a retransmission in time to be played
    nack_concealment: int = 0  # NACK answered with the sender's concealment packet
    recovered_red: int = 0  # ... filled by a redundant copy (RFC 2198 RED) in time to be played
    recovered_fec: int = 0  # lost at playout time, rebuilt from the next packet's FEC
    concealed: int = 0  # lost at playout time and concealed (PLC, or a concealment packet)
    concealment_packets: int = 0  # ... of those, concealment packets played
    late: int = 0  # arrived after their playout time
    duplicate: int = 0
    dropped: int = 0  # buffered frames the jitter buffer discarded (latency, overflow)
    trimmed: int = 0  # silent frames cut to bring the latency back to the target
    stretched: int = 0  # silent periods inserted to bring the buffer up to the target
    played: int = 0  # playout periods with a frame (decoded, FEC or concealed)
    underruns: int = 0  # times playout ran dry after it had started (stalls, not pauses)
    underrun_periods: int = 0  # periods played as underrun after the start (pauses not)
    stalled_periods: int = 0  # ... of those, in stalls that ended (not the stream's end)
    pauses: int = 0  # the sender paused (DTX, mute): resumed later in timestamp, no seq gap
    paused_periods: int = 0  # periods of silence those pauses took
    skipped_periods: int = 0  # periods the playout clock missed (event loop stalled)
    clock_stalls: int = 0
    rephases: int = 0  # playout clock phase corrections
    period_errors: int = 0  # playout periods that raised (logged; playout went on)
    unrecorded_periods: int = 0  # played after the recording reached its bound
    pcm_dropped: int = 0  # frames pushed out of the PCM ring unread
    jitter_ms: float = 0.0  # RFC 3550 interarrival jitter
    target_frames: int = 0  # jitter buffer target
    depth_frames: int = 0  # jitter buffer depth now
    pcm_frames: int = 0  # decoded frames waiting for the playout clock
    red_packets: int = 0  # RED packets received (their primary plays as a plain packet)
    red_late: int = 0  # redundant copies that came after their frame was played as lost
    red_malformed: int = 0  # RED payloads that did not parse (dropped)
    nacks_sent: int = 0  # NACKs from the generator (gaps seen on arrival, with retries)
    seqs_nacked: int = 0
    nacks_cancelled: int = 0  # missing packets rebuilt from RED, no longer asked for
    nacks_capped: int = 0  # due requests held back by the per-second caps
    nack_send_failures: int = 0
    rtt_ms: float = 0.0
    playout_delay_ms: float | None = None  # added playout delay: mean over recent frames
    playout_delay_p95_ms: float | None = None

    def snapshot(self, delay: DelayTracker, **values: Any) -> ReceiveStats:
        return dataclasses.replace(
            self,
            playout_delay_ms=delay.mean_ms(),
            playout_delay_p95_ms=delay.percentile_ms(95),
            **values,
        )

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}


class TransitTracker:
    """When packets typically arrive: a low percentile of recent transit times.

    Transit is arrival minus media time. Not the minimum: a sender that sends two packets at
    once (at start-up, after a stall) makes one look up to a frame early, and the playout clock
    would then take the wrong phase for good. The ``quantile`` of the last ``window`` packets
    ignores such outliers and still sits at the fast edge of the jitter.
    """

    def __init__(self, window: int = 100, quantile: float = 0.1) -> None:
        self._values = SlidingWindow(window)
        self._quantile = quantile
        #: one transit added (once a packet: the window's own ``add``, no call between)
        self.add: Callable[[float], object] = self._values.add

    @property
    def minimum(self) -> float | None:
        """The typical earliest transit (the ``quantile`` of the window)."""
        n = len(self._values)
        return self._values.at(int(self._quantile * (n - 1))) if n else None


class DelayTracker:
    """Added playout delay of recent frames: play time minus the earliest possible arrival."""

    def __init__(self, window: int = 3000) -> None:
        self._values: deque[float] = deque(maxlen=window)

    def add(self, delay_s: float) -> None:
        self._values.append(delay_s)

    def mean_ms(self) -> float | None:
        if not self._values:
            return None
        return 1000.0 * sum(self._values) / len(self._values)

    def percentile_ms(self, q: float) -> float | None:
        if not self._values:
            return None
        ordered = sorted(self._values)
        return 1000.0 * ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    def reset(self) -> None:
        self._values.clear()
