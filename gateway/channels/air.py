"""A channel's air: the speaker's one sink, the channel's clock, the hand-off to listeners.

The speaker's fan-out has exactly one sink, this BLOCK queue (``lead_frames`` deep: synthesis
runs at most that far ahead of the air, so an interrupt is heard within it). Every 20 ms, on the
process's shared tick grid (a callback, no task), the air takes the next frame -- the utterance's
delivery is told it was sent, so utterance states are the air's -- and offers it to every
listener's own queue (``Listener.offer``, never waiting). Between utterances byte-stream
listeners (``continuous``: Ogg, PCM, frames) get the keep-alive silence packet so their timeline
never stops; WHEP listeners get nothing and their RTP sink sends its own keep-alive.

The frames are encoded once, by the speaker, whoever listens; for listeners that take PCM the
air decodes each frame once (one decoder per channel, only while such a listener is there).
A listener that joins mid-utterance gets the next aired frame first. A loop stall that makes the
air late by more than ``MAX_LATE_S`` rebases its clock (counted) instead of bursting.

A mirror's air (mirror.py: a channel whose speaker is on another worker) is fed by the link to
that worker instead of a speaker: ``relay`` tells the keep-alive silence from speech by its bytes
(the link carries both), and ``prebuffer`` frames are let in before airing starts (again after
the queue ran dry), so the link's delivery jitter is absorbed once per worker, not per listener.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.channels.listener import Listener
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import FRAME_BYTES, FRAME_MS, RTP_TICKS_PER_FRAME, OpusFrameDecoder
from gateway.media.ticker import Ticker, shared_ticker

FRAME_S = FRAME_MS / 1000
MAX_LATE_S = 0.1


@dataclass(slots=True)
class AirStats:
    ticks: int = 0  # 20 ms slots aired
    speech_frames: int = 0  # frames of utterances aired (each encoded once)
    silence_frames: int = 0  # slots with nothing to say
    deliveries: int = 0  # frames offered to listeners (speech and keep-alive)
    decoded: int = 0  # frames decoded for PCM listeners (once per frame, not per listener)
    rebases: int = 0  # the air fell more than MAX_LATE_S behind (a loop stall): clock reset
    underruns: int = 0  # a mirror's queue ran dry (the link was late): buffering again
    link_dropped: int = 0  # a mirror's frames that found its queue full
    max_late_ms: float = 0.0
    taken: int = 0  # frames taken from the queue and aired (a mirror's: fed by its link)


class Air:
    def __init__(self, silence: bytes, lead_frames: int = 10,
                 ticker: Ticker | None = None, relay: bool = False, prebuffer: int = 0) -> None:
        self.queue = FrameQueue(lead_frames)
        self.relay = relay
        self.prebuffer = prebuffer
        self._buffering = prebuffer > 0
        self.silence = silence
        self.ticker = ticker or shared_ticker()
        self.stats = AirStats()
        self._listeners: dict[str, Listener] = {}
        self._decoder: OpusFrameDecoder | None = None
        self._origin = 0.0
        self._slot = 0
        self._token = 0
        self.running = False
        self.started_at: float | None = None
        #: called after each tick's frame is aired (a mirror releases its held events)
        self.on_aired: Callable[[], None] | None = None

    def add(self, listener: Listener) -> None:
        """From the next aired frame on."""
        self._listeners[listener.id] = listener

    def remove(self, listener: Listener) -> None:
        self._listeners.pop(listener.id, None)

    @property
    def listeners(self) -> list[Listener]:
        return list(self._listeners.values())

    def feed(self, payload: bytes) -> None:
        """A mirror's frame from its link (never waits: a full queue drops it, counted)."""
        if not self.queue.offer((payload,), None, 0):
            self.stats.link_dropped += 1

    def start(self) -> None:
        if self.running:
            return
        self.running = True
        now = self.ticker.now()
        self.started_at = time.monotonic()
        self._origin = self.ticker.align(now)
        self._slot = 0
        self._arm()

    def stop(self) -> None:
        self.running = False
        self._token += 1  # the armed callback is now a no-op

    def _arm(self) -> None:
        self._token += 1
        token = self._token
        self.ticker.call_at(self._origin + self._slot * FRAME_S, lambda: self._tick(token))

    def _tick(self, token: int) -> None:
        if token != self._token or not self.running:
            return
        now = self.ticker.now()
        stats = self.stats
        late = now - (self._origin + self._slot * FRAME_S)
        if late > MAX_LATE_S:
            stats.rebases += 1
            self._origin = self.ticker.align(now) - self._slot * FRAME_S
        elif late * 1000 > stats.max_late_ms:
            stats.max_late_ms = round(late * 1000, 3)
        try:
            self._air(now)
        finally:
            self._slot += 1
            self._arm()

    def _air(self, now: float) -> None:
        stats = self.stats
        index = stats.ticks
        stats.ticks += 1
        queue = self.queue
        if self._buffering and len(queue) >= self.prebuffer:
            self._buffering = False
        fields = None if self._buffering else queue.pop_fields()
        if fields is None and self.prebuffer and not self._buffering:
            self._buffering = True
            stats.underruns += 1
        if fields is None:
            payload = self.silence
        else:
            stats.taken += 1
            payload, owner, frame_index = fields
            if owner is not None:
                owner.on_frame_sent(frame_index, index & 0xFFFF, index * RTP_TICKS_PER_FRAME, now)
        speech = fields is not None and not (self.relay and payload == self.silence)
        if speech:
            stats.speech_frames += 1
        else:
            stats.silence_frames += 1
        listeners = list(self._listeners.values())
        if self.on_aired is not None:
            self.on_aired()
        if not listeners:
            return
        pcm: bytes | None = None
        if any(listener.needs_pcm for listener in listeners):
            pcm = self._decode(payload)
        elif self._decoder is not None:
            self._decoder = None  # no PCM listener left: no decoder state kept
        offered = 0
        for listener in listeners:
            if not (speech or listener.continuous):
                continue
            listener.offer(pcm if listener.needs_pcm and pcm is not None else payload, index)
            offered += 1
        stats.deliveries += offered
        for listener in listeners:
            listener.after_tick(index)

    def _decode(self, payload: bytes) -> bytes:
        if self._decoder is None:
            self._decoder = OpusFrameDecoder()
        self.stats.decoded += 1
        try:
            pcm = self._decoder.decode(payload).tobytes()
        except Exception:  # a frame libopus refuses: the listeners hear silence for it
            return bytes(FRAME_BYTES)
        return pcm if len(pcm) == FRAME_BYTES else (pcm + bytes(FRAME_BYTES))[:FRAME_BYTES]
