"""The one RTP send interface of a WebRTC leg.

An ``RtpSink`` is what a WebRTC leg's outgoing audio is made of, whatever moves the bytes: the
bounded frame queue the fan-out fills, the 5 s frame store NACKs are answered from, the stream's
absolute 20 ms schedule (``PacingClock`` on the process-wide tick grid), the keep-alive silence
sent between utterances, the send counters and the test-only loss of first transmissions. A
*transmitter* drives it:

- ``BatchStream`` (webrtc/batch_sender.py): a tick callback builds, protects and sends the
  packet itself;
- (tests only) ``PassthroughOpusTrack`` (tests/aiortc_track.py): aiortc's own send loop pulls
  ``av.Packet`` objects from the sink through a custom track.

Each releases a slot with ``take_slot``'s accounting (the batch path inlines it in its tick,
after one ``PacingClock.release_due`` for every due slot: calls per packet are its cost),
records what it sent in the same store and answers NACKs through the same ``Retransmitter``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from gateway.media.frame_queue import FrameQueue
from gateway.media.frames import FrameOwner
from gateway.media.opus_codec import FRAME_MS
from gateway.media.ticker import Ticker
from gateway.nack.store import FrameStore
from gateway.webrtc.pacer import PacingClock
from gateway.webrtc.red_sender import RedSender


@dataclass(slots=True)
class SendStats:
    frames_sent: int = 0
    speech_frames: int = 0
    silence_frames: int = 0
    bytes_sent: int = 0  # payload bytes of first transmissions
    send_errors: int = 0  # ticks whose send raised (logged; the stream carries on)
    async_sends: int = 0  # packets that took aiortc's async path (no direct socket: TURN)
    async_dropped: int = 0  # ... dropped because too many such sends were already pending
    test_dropped: int = 0  # first transmissions lost on purpose (test-only option)
    test_dropped_repairs: int = 0  # ... and resends, in its bursty mode
    sender_reports: int = 0  # RTCP SR (+ SDES) sent from the tick (batch path)
    first_sent_at: float | None = None  # monotonic: the stream's first packet


def take_slot(
    queue: FrameQueue,
    pacer: PacingClock,
    stats: SendStats,
    silence: bytes,
    now: float | None = None,
) -> tuple[bytes, FrameOwner | None, int, int]:
    """Release the next slot (at clock reading ``now``, if the caller has one): the payload to
    send, the owner and index of the queued frame it carries (None, 0: keep-alive silence) and
    the slot's index. Builds no object."""
    fields = queue.pop_fields()
    slot = pacer.release(now)
    if not stats.frames_sent:
        stats.first_sent_at = pacer.now() if now is None else now
    stats.frames_sent += 1
    if fields is None:
        stats.silence_frames += 1
        stats.bytes_sent += len(silence)
        return silence, None, 0, slot
    stats.speech_frames += 1
    payload, owner, index = fields
    stats.bytes_sent += len(payload)
    return payload, owner, index, slot


class RtpSink:
    __slots__ = ("drop_first_tx", "drop_repair", "pacer", "queue", "red", "repair_delay_s",
                 "silence", "stats", "store", "ticker")

    def __init__(
        self,
        queue: FrameQueue,
        store: FrameStore,
        silence: bytes,
        ticker: Ticker | None,
        pacer: PacingClock | None = None,
    ) -> None:
        """``ticker``: the process-wide tick grid (None only for a pull-driven sink whose
        ``pacer`` sleeps by itself, as tests with a virtual clock use it)."""
        self.queue = queue
        self.store = store
        self.silence = silence
        self.ticker = ticker
        if pacer is None:
            assert ticker is not None, "a sink needs a ticker or its own pacer"
            # (a DTX talkspurt restarts on the next tick, packed or not: it is sent at once)
            pacer = PacingClock(period=FRAME_MS / 1000, clock=ticker.clock, align=ticker.align,
                                realign=ticker.grid_time)
        self.pacer = pacer
        self.stats = SendStats()
        self.drop_first_tx: Callable[[bytes], bool] | None = None
        #: TEST ONLY: whether a resend is lost too (a bursty link's bad state takes repairs)
        self.drop_repair: Callable[[], bool] | None = None
        self.repair_delay_s = 0.0  # TEST ONLY: resends leave this late (a long round trip)
        self.red: RedSender | None = None  # RFC 2198 redundancy, when negotiated and wanted

    def take_slot(self, now: float | None = None) -> tuple[bytes, FrameOwner | None, int, int]:
        return take_slot(self.queue, self.pacer, self.stats, self.silence, now)

    def lose_first_transmissions(
        self, percent: float, seed: int | None = None, burst: float = 0.0
    ) -> None:
        """TEST ONLY: lose ``percent`` % of first transmissions (retransmissions are not
        affected), independently or -- ``burst`` > 1, the mean burst length -- in bursts
        (Gilbert-Elliott: every packet of the bad state lost, a resend sent while the link is
        in it included: NACK repairs are lost inside the same burst); counted in
        ``stats.test_dropped``. Both transmitters apply this filter."""
        rng = random.Random(seed)
        stats = self.stats
        loss = percent / 100
        leave = 1.0 / burst if burst > 1 else 1.0  # bad -> good per packet
        enter = min(1.0, leave * loss / (1.0 - loss)) if loss < 1 else 1.0  # good -> bad
        bad = False

        def drop(data: bytes) -> bool:
            nonlocal bad
            if len(data) > 1 and 192 <= data[1] <= 223:  # RTCP (should not come this way)
                return False
            if burst > 1:
                bad = rng.random() >= leave if bad else rng.random() < enter
                lost = bad
            else:
                lost = rng.random() < loss
            if lost:
                stats.test_dropped += 1
            return lost

        def repair_lost() -> bool:
            if bad:
                stats.test_dropped_repairs += 1
            return bad

        self.drop_first_tx = drop
        self.drop_repair = repair_lost if burst > 1 else None
