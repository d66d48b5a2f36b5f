"""The passthrough audio track: hands pre-encoded Opus packets to aiortc, paced in real time.

aiortc's sender packs any non-``av.Frame`` it receives from ``recv()`` without re-encoding
(one ``av.Packet`` = one RTP payload) and does not pace, so this track waits for each 20 ms slot
itself on an absolute monotonic schedule (``PacingClock``). The RTP timestamp is derived from
``pts`` in a 1/24000 time base: slot ``n`` has pts ``480 n`` -> ``960 n`` ticks at 48 kHz.

Between utterances the track sends a constant encoded-silence packet (no encoder work) so the
stream stays alive. When speech arrives while the track is idling on silence, its first frame is
released at once into the upcoming slot instead of waiting for that slot's deadline: it reaches
the listener up to 20 ms sooner, and the timestamps still step by exactly 960.
"""

from __future__ import annotations

import fractions
from dataclasses import dataclass

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from gateway.media.frame_queue import FrameQueue
from gateway.media.frame_store import FrameStore
from gateway.media.opus_codec import FRAME_SAMPLES, SAMPLE_RATE
from gateway.media.pacer import PacingClock

TIME_BASE = fractions.Fraction(1, SAMPLE_RATE)


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
        pacer: PacingClock | None = None,
    ) -> None:
        super().__init__()
        self.queue = queue
        self.store = store
        self.pacer = pacer or PacingClock()
        self._silence = silence
        self._idle = True  # the last slot carried silence
        self.stats = TrackStats()

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        pacer = self.pacer
        delay = pacer.time_to_next()
        if delay > 0:
            if self._idle:
                if await self.queue.wait_arrival(delay):
                    self.stats.early_starts += pacer.time_to_next() > 0.001
            else:
                await pacer.wait_due()
        if self.readyState != "live":
            raise MediaStreamError
        frame = self.queue.pop()
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
        packet.pts = slot * FRAME_SAMPLES
        packet.time_base = TIME_BASE
        return packet
