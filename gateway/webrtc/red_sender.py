"""Redundancy for burst loss: each packet as RFC 2198 RED carrying the previous frames too.

Our frames are encoded once and kept, so redundancy costs bytes, not CPU: the new frame is the
primary block and the previous ``distance`` frames (byte-identical copies of what was sent,
timestamp offsets in 960-tick steps) ride along. Adaptive by default: redundancy is on only
while the receiver reports loss (RTCP receiver reports with a non-zero fraction lost, or NACKs)
and for ``hold_s`` after the last such report, so a clean link pays no overhead. Off, packets
are plain Opus under the Opus payload type (both are negotiated).

Adaptive distance (``max_distance`` above ``distance``): a NACK names the packets the receiver
found missing, so its runs of consecutive sequence numbers are the loss bursts it saw. A burst
longer than the distance (``burst_reported``) raises it to the burst's length, at most
``max_distance``, for ``hold_s``; then it is back to ``distance``. Copies cover the last frames
of a burst without a round trip, so the longer the RTT the more that is worth (each frame more
costs one more copy per packet while raised).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

from gateway.nack.store import RED_REBUILT
from gateway.rtp import red

HOLD_S = 10.0  # redundancy stays on this long after the last report of loss


@dataclass(slots=True)
class RedStats:
    red_packets: int = 0
    plain_packets: int = 0
    redundant_bytes: int = 0  # bytes of redundant blocks (the overhead)
    primary_bytes: int = 0
    activations: int = 0
    distance_raises: int = 0  # times a reported burst raised the distance


MAX_DISTANCE = 8  # frames: what the receive path can number (RFC 2198 allows more)


class RedSender:
    __slots__ = ("_active_until", "_history", "_raised", "_raised_until", "adaptive", "distance",
                 "hold_s", "max_distance", "opus_pt", "red_pt", "stats")

    def __init__(
        self, red_pt: int, opus_pt: int, distance: int = 2, adaptive: bool = True,
        hold_s: float = HOLD_S, max_distance: int | None = None,
    ) -> None:
        top = distance if max_distance is None else max_distance
        if not 1 <= distance <= top <= MAX_DISTANCE:
            raise ValueError(f"need 1 <= RED distance <= max_distance <= {MAX_DISTANCE} frames")
        self.red_pt = red_pt
        self.opus_pt = opus_pt
        self.distance = distance
        self.max_distance = top
        self.adaptive = adaptive
        self.hold_s = hold_s
        self._history: deque[tuple[int, bytes]] = deque(maxlen=top)
        self._active_until = float("inf") if not adaptive else float("-inf")
        self._raised = distance
        self._raised_until = float("-inf")
        self.stats = RedStats()

    def active(self, now: float) -> bool:
        return now < self._active_until

    def distance_at(self, now: float) -> int:
        """Previous frames each packet carries now (``distance``, or raised for bursts)."""
        return self._raised if now < self._raised_until else self.distance

    def burst_reported(self, frames: int, now: float | None = None) -> None:
        """The receiver lost ``frames`` packets in a row (a run of a NACK): carry that many
        copies, within ``max_distance``, for ``hold_s``."""
        if frames <= self.distance or self.max_distance == self.distance:
            return
        now = time.monotonic() if now is None else now
        want = min(self.max_distance, frames)
        if want >= self.distance_at(now):
            if want > self.distance_at(now):
                self.stats.distance_raises += 1
            self._raised = want
            self._raised_until = now + self.hold_s

    def loss_reported(self, now: float | None = None) -> None:
        """The receiver lost packets (a receiver report's fraction lost > 0, or a NACK)."""
        if not self.adaptive:
            return
        now = time.monotonic() if now is None else now
        if not self.active(now):
            self.stats.activations += 1
        self._active_until = now + self.hold_s

    def wrap(self, payload: bytes, timestamp: int, now: float) -> tuple[bytes, int]:
        """The payload to send for a new frame at ``timestamp`` (the next packet of the
        stream: every packet passes here, in order) and how it is made, in the frame store's
        terms (nack/store.py): 0, plain; else ``RED_REBUILT + k``, RED of this primary after
        the ``k`` previous packets' payloads (what the store rebuilds it from)."""
        history = self._history
        stats = self.stats
        if now < self._active_until:  # active(now), inline: this runs for every packet
            distance = self._raised if now < self._raised_until else self.distance
            skip = len(history) - distance
            blocks = [((timestamp - ts) & 0xFFFFFFFF, p)
                      for ts, p in (islice(history, skip, None) if skip > 0 else history)]
            out = red.encode(payload, self.opus_pt, blocks)
            stats.red_packets += 1
            stats.redundant_bytes += len(out) - len(payload)
            how = RED_REBUILT + len(blocks)
        else:
            out, how = payload, 0
            stats.plain_packets += 1
        stats.primary_bytes += len(payload)
        history.append((timestamp, payload))
        return out, how

    def state(self) -> tuple[float, int, int, float]:
        """What ``wrap`` decides by, for the compiled path to decide as it does
        (``CompiledBatch.red_set``): on until, the distance, the raised one and until when."""
        return self._active_until, self.distance, self._raised, self._raised_until

    def restore(self, history: list[tuple[int, bytes]]) -> None:
        """The packets sent before the next, (timestamp, payload) oldest first (the frame
        store's ``last_sent``): the history ``wrap`` goes on from once packets went without it
        (sent from C)."""
        self._history.clear()
        self._history.extend(history)

    def count_from_c(self, plain: int, red: int, redundant_bytes: int, primary_bytes: int
                     ) -> None:
        """Packets the compiled path sent without ``wrap`` (``CompiledBatch.red_take``)."""
        stats = self.stats
        stats.plain_packets += plain
        stats.red_packets += red
        stats.redundant_bytes += redundant_bytes
        stats.primary_bytes += primary_bytes

    def as_json(self, now: Callable[[], float] = time.monotonic) -> dict[str, object]:
        s = self.stats
        return {
            "distance": self.distance, "max_distance": self.max_distance,
            "distance_now": self.distance_at(now()), "distance_raises": s.distance_raises,
            "adaptive": self.adaptive, "active": self.active(now()),
            "red_packets": s.red_packets, "plain_packets": s.plain_packets,
            "activations": s.activations,
            "overhead": round(s.redundant_bytes / s.primary_bytes, 3) if s.primary_bytes else 0.0,
        }
