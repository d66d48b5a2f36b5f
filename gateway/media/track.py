"""The passthrough audio track: hands pre-encoded Opus packets to aiortc, paced in real time.

aiortc's sender packs any non-``av.Frame`` it receives from ``recv()`` without re-encoding
(one ``av.Packet`` = one RTP payload) and does not pace, so this track waits for each 20 ms slot
itself on an absolute monotonic schedule (``PacingClock``) aligned to the process-wide tick grid
(``Ticker``, 5 ms): every stream of the process is woken by the one timer of its tick, and the
streams spread over the four ticks of a 20 ms period by when they started, so each tick sends a
quarter of them rather than all in one burst. The RTP timestamp is
derived from ``pts`` in a 1/48000 time base (the Opus RTP clock, so aiortc converts nothing):
slot ``n`` has pts ``960 n``.

Between utterances the track sends a constant encoded-silence packet (no encoder work) so the
stream stays alive. When speech arrives while the track is idling on silence, its first frame is
released at once into the upcoming slot instead of waiting for that slot's deadline: it reaches
the listener up to 20 ms sooner, and the timestamps still step by exactly 960.
"""

from __future__ import annotations

import asyncio
import fractions
from dataclasses import dataclass

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from gateway.media.frame_queue import FrameQueue
from gateway.media.frame_store import FrameStore
from gateway.media.opus_codec import FRAME_MS, RTP_CLOCK_RATE, RTP_TICKS_PER_FRAME
from gateway.media.pacer import PacingClock
from gateway.media.ticker import Ticker

TIME_BASE = fractions.Fraction(1, RTP_CLOCK_RATE)


@dataclass(slots=True)
class TrackStats:
    frames_sent: int = 0
    speech_frames: int = 0
    silence_frames: int = 0
    early_starts: int = 0


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
        self._idle = True  # the last slot carried silence
        self.stats = TrackStats()

    async def _wait_slot(self) -> None:
        pacer = self.pacer
        if pacer.time_to_next() <= 0:
            return
        ticker = self._ticker
        if ticker is None:
            if self._idle:
                await self.queue.wait_arrival(pacer.time_to_next())
            else:
                await pacer.wait_due()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ticker.wake_at(pacer.deadline(), waiter)
        if self._idle:  # speech may start before the slot is due
            self.queue.notify_arrival(waiter)
        try:
            await waiter
        finally:
            if self._idle:
                self.queue.notify_arrival(None)

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        await self._wait_slot()
        if self.readyState != "live":
            raise MediaStreamError
        frame = self.queue.pop()
        pacer = self.pacer
        if frame is not None and self._idle and pacer.time_to_next() > 0.001:
            self.stats.early_starts += 1
        slot = pacer.release()
        stats = self.stats
        stats.frames_sent += 1
        if frame is None:
            payload = self._silence
            stats.silence_frames += 1
            self._idle = True
        else:
            payload = frame.payload
            stats.speech_frames += 1
            self._idle = False
        # aiortc packs this packet and records it in the store synchronously after we return.
        self.store.next_frame = frame
        packet = av.Packet(payload)
        packet.pts = slot * RTP_TICKS_PER_FRAME
        packet.time_base = TIME_BASE
        return packet
