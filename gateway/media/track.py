"""The passthrough audio track: hands pre-encoded Opus packets to aiortc, paced in real time.

aiortc's sender packs any non-``av.Frame`` it receives from ``recv()`` without re-encoding
(one ``av.Packet`` = one RTP payload) and does not pace, so this track waits for each 20 ms slot
itself on an absolute monotonic schedule (``PacingClock``) aligned to the process-wide tick grid
(``Ticker``, 2.5 ms): every stream of the process is woken by the one timer of its tick, and the
streams spread over the eight ticks of a 20 ms period by when they started, so each tick sends
an eighth of them rather than all in one burst. The RTP timestamp is
derived from ``pts`` in a 1/48000 time base (the Opus RTP clock, so aiortc converts nothing):
slot ``n`` has pts ``960 n``.

Between utterances the track sends a constant encoded-silence packet (no encoder work) so the
stream stays alive. Speech takes the next slot like any frame: sending it before its slot would
gain nothing (the listener's playout is locked to the timestamps of the continuous stream, so an
early packet only waits longer in its jitter buffer) and would look like jitter to the receiver.
"""

from __future__ import annotations

import asyncio
import fractions
from dataclasses import dataclass

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from gateway.media.frame_queue import FrameQueue
from gateway.media.frame_store import FrameStore
from gateway.media.frames import EncodedFrame, FrameOwner
from gateway.media.opus_codec import FRAME_MS, RTP_CLOCK_RATE, RTP_TICKS_PER_FRAME
from gateway.media.pacer import PacingClock
from gateway.media.ticker import Ticker

TIME_BASE = fractions.Fraction(1, RTP_CLOCK_RATE)


@dataclass(slots=True)
class TrackStats:
    frames_sent: int = 0
    speech_frames: int = 0
    silence_frames: int = 0


def take_slot(
    queue: FrameQueue,
    pacer: PacingClock,
    stats: TrackStats,
    silence: bytes,
    now: float | None = None,
) -> tuple[bytes, FrameOwner | None, int, int]:
    """Release the next slot (at clock reading ``now``, if the caller has one): the payload to
    send, the owner and index of the queued frame it carries (None, 0: keep-alive silence) and
    the slot's index. Shared by both send paths; builds no object."""
    fields = queue.pop_fields()
    slot = pacer.release(now)
    stats.frames_sent += 1
    if fields is None:
        stats.silence_frames += 1
        return silence, None, 0, slot
    stats.speech_frames += 1
    payload, owner, index = fields
    return payload, owner, index, slot


class PassthroughOpusTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(
        self,
        queue: FrameQueue,
        store: FrameStore,
        silence: bytes,
        ticker: Ticker | None = None,
    ) -> None:
        super().__init__()
        self.queue = queue
        self.store = store
        self._ticker = ticker
        self.pacer = PacingClock(
            period=FRAME_MS / 1000,
            clock=ticker.now if ticker else PacingClock().now,
            align=ticker.align if ticker else None,
        )
        self._silence = silence
        self.stats = TrackStats()

    async def _wait_slot(self) -> None:
        pacer = self.pacer
        if pacer.time_to_next() <= 0:
            return
        if self._ticker is None:
            await pacer.wait_due()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ticker.wake_at(pacer.deadline(), waiter)
        await waiter

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        await self._wait_slot()
        if self.readyState != "live":
            raise MediaStreamError
        payload, owner, index, slot = take_slot(self.queue, self.pacer, self.stats, self._silence)
        # aiortc packs this packet and records it in the store synchronously after we return.
        self.store.next_frame = None if owner is None else EncodedFrame(payload, owner, index)
        packet = av.Packet(payload)
        packet.pts = slot * RTP_TICKS_PER_FRAME
        packet.time_base = TIME_BASE
        return packet
