"""How deep the jitter buffer must be for NACK repairs of this stream's loss bursts to come in
time, learnt from the bursts themselves (the adaptive playout delay NetEq keeps with NACK on).

A burst of ``L`` lost 20 ms packets is seen only when the packet after it arrives, ``L`` frames
after the first lost one was due; its repair comes a round trip later (a lost repair's retry one
retry interval and a round trip after that: ``round_trips=2``). For the first frame of the burst
to play, the buffer must hold ``L`` frames plus that. Learning it from stalls alone (the buffer
runs dry, the repair comes, the frame plays late: :class:`RepairFloor`) costs a stall in speech
for every longer burst, and whole-file PESQ-WB charges 0.1-0.35 for each (measured with
``bench/pesq_loss.py``). So every gap is recorded as a burst, and the floor is the burst length
exceeded about once per ``late_every_s`` (``T``) at the stream's recent rate of bursts ``λ``:
Gilbert-Elliott bursts are geometric, so from their mean length ``m`` (the last ``window`` gaps
within ``memory_s``) that is the least ``k`` with ``λ T (1 - 1/m)^k <= 1`` (the longest burst
seen counts too), plus the repair time at the RTT the NACK generator measured; a burst no longer
than RED's copies reach (``red_frames``) needs no round trip. At most ``top`` frames: the
latency bound.

The floor is a peak hold: it rises at once, and comes down only once ``memory_s`` passed with no
need that high, then a frame per ``step_down_s`` (each change of delay is heard, and costs
PESQ, whatever its size). Random loss has bursts of about one packet, so its floor stays within
a frame or two of the NACK reserve; a clean link records nothing and costs nothing.

Learnt from the bursts alone, the first bursts of a bursty link come before the floor: each
stalls the playout in speech, and the deepening that follows is one more change of delay. The
start hold (opt-in: ``start`` frames for ``start_hold_s``) holds the floor at ``start`` from the
first question, while the link is unknown, and then comes down at once to what the bursts seen
need (the receive path cuts the excess in one pause): a bursty link keeps one delay from its
first frame, a clean one pays ``start`` frames for ``start_hold_s`` (the time to its first audio
too), then the floor. The application's choice, as a minimum playout delay is in a browser
(``RTCRtpReceiver.jitterBufferTarget``), except that this one ends by itself.
"""

from __future__ import annotations

import math
from collections import deque

RECHECK_S = 1.0


class BurstDepth:
    def __init__(
        self,
        *,
        base: int,
        top: int,
        late_every_s: float = 60.0,
        window: int = 64,
        memory_s: float = 30.0,
        min_span_s: float = 5.0,
        round_trips: int = 1,
        step_down_s: float = 2.0,
        frame_s: float = 0.020,
        start: int = 0,
        start_hold_s: float = 0.0,
    ) -> None:
        if late_every_s <= 0 or window < 1 or memory_s <= 0 or round_trips < 1:
            raise ValueError("need late_every_s > 0, window >= 1, memory_s > 0, round_trips >= 1")
        if start_hold_s < 0:
            raise ValueError("need start_hold_s >= 0")
        self.base = base
        self.top = max(base, top)
        self.late_every_s = late_every_s
        self.memory_s = memory_s
        self.min_span_s = min_span_s
        self.round_trips = round_trips
        self.step_down_s = step_down_s
        self.frame_s = frame_s
        self._bursts: deque[tuple[float, float]] = deque(maxlen=window)  # (at, frames)
        # the link's bursts are unknown at first: hold ``start`` frames until ``start_hold_s``
        # after the first question, then only what the bursts seen need (released at once)
        self.start = min(self.top, max(base, start)) if start_hold_s > 0 else base
        self.start_hold_s = start_hold_s
        self._start_until: float | None = None
        self._releasing = self.start > base
        self._held = self.start
        self._held_at = 0.0
        self.bursts_seen = 0
        # frames() is asked every playout period: it recomputes on a new gap, new inputs, or
        # once per RECHECK_S (between gaps the need only falls: the rate's span grows)
        self._inputs: tuple[float, float, float] | None = None
        self._check_at = float("-inf")

    def on_gap(self, frames: float, now: float) -> None:
        """A gap of ``frames`` (20 ms frames of missing packets) was seen at ``now``."""
        if frames <= 0:
            return
        self.bursts_seen += 1
        self._bursts.append((now, frames))
        self._inputs = None  # recompute

    def burst_frames(self, now: float) -> float:
        """The burst length exceeded once per ``late_every_s`` at the recent rate (0: none)."""
        bursts = self._bursts
        while bursts and now - bursts[0][0] > self.memory_s:
            bursts.popleft()
        if not bursts:
            return 0.0
        lengths = [frames for _, frames in bursts]
        mean = sum(lengths) / len(lengths)  # (a prior of short bursts measured worse: the
        # first bursts of a bursty link then stall in speech before the depth is there)
        longest = max(lengths)
        if mean <= 1.0:
            return longest
        rate = len(lengths) / max(self.min_span_s, now - bursts[0][0])  # bursts per second
        expected = rate * self.late_every_s  # bursts in that time
        if expected <= 1.0:
            return longest
        # geometric lengths: P(L > k) = (1 - 1/m) ** k; the least k with expected * P <= 1
        tail = math.ceil(math.log(1.0 / expected) / math.log(1.0 - 1.0 / mean) - 1e-9)
        return max(float(tail), longest)

    def repair_s(self, rtt_s: float, retry_interval_s: float) -> float:
        """When the last repair asked for in ``round_trips`` tries comes, after the gap."""
        return rtt_s + (self.round_trips - 1) * (retry_interval_s + rtt_s)

    def frames(
        self, now: float, rtt_s: float, retry_interval_s: float, red_frames: float = 0.0
    ) -> int:
        """The floor now: ``base`` with no recent burst, at most ``top``. ``red_frames``: how
        many frames back RED copies reach (a burst that short needs no NACK round trip)."""
        if self._start_until is None:
            self._start_until = now + self.start_hold_s
        starting = now < self._start_until
        inputs = (rtt_s, retry_interval_s, red_frames)
        if inputs == self._inputs and now < self._check_at:
            return self._held
        self._inputs, self._check_at = inputs, now + RECHECK_S
        if starting:
            self._check_at = min(self._check_at, self._start_until)
        burst = self.burst_frames(now)
        need = self.base
        if burst:
            # the gap is seen one frame after the burst's last packet was due; the first frame
            # of the burst plays (depth - 1/2) frames after it was due (the clock's phase)
            wait = burst + 0.5
            if burst > red_frames:
                wait += self.repair_s(rtt_s, retry_interval_s) / self.frame_s
            need = max(self.base, min(self.top, math.ceil(wait - 1e-9)))
        if starting:
            self._held, self._held_at = max(self.start, need), now
            return self._held
        if self._releasing:
            # the start is over: down to what the bursts seen need, at once (one change)
            self._releasing = False
            self._held, self._held_at = need, now
            return self._held
        # peak hold: up at once; down only after memory_s without a need that high, then a
        # frame per step_down_s (each change of delay costs, so as few as possible)
        if need >= self._held:
            self._held, self._held_at = need, now
        elif now - self._held_at >= self.memory_s:
            self._held -= 1
            self._held_at = now - self.memory_s + self.step_down_s
        return self._held
