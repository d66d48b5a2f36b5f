"""The HTTP leg: a conversation's frames written to an HTTP response the moment they exist.

The leg attaches its own bounded queue to the conversation's fan-out (a BLOCK sink: a reader
that stops reading stops synthesis, server memory stays flat) and writes each frame through a
formatter (Ogg/Opus pages, the gateway's frame records, transcoded PCM, SSE events):

- ``asap`` (default, like CosyVoice's server and OpenAI): as fast as frames are produced. The
  first frame is written at once; frames ready together after it are coalesced up to the flush
  size (``stream/flush_policy.py``, from the connection's RTT).
- ``live``: real time after a lead (default 200 ms): frame ``i`` is due ``i * 20 ms - lead``
  after the first, so a live listener's buffer stays small; no due frame waits more than a tick
  of the shared grid. Frames are written on a cadence (``write_s``, default 100 ms): when one is
  due, every frame due within the next ``write_s`` goes in the same write -- early, never late
  -- so 500 listeners cost ≈17 writes a second each instead of 50 (measured: 500 streams at
  32 % of a core with 60 ms against 63-87 % writing every frame, bench/http_stream.py).

Live legs given a synchronous ``write_now`` (the API's chunked writer) are written from the
shared ticker's callbacks (``ticker.call_at``), not from a task per stream: a due write is a
plain function call on the tick -- no future, no task switch, no coroutine chain -- and the
leg's task sleeps until the stream ends or a write must wait (the transport is paused: a
reader that stopped reading), when the task writes that chunk with backpressure and hands the
stream back to the ticker. Measured: 500 live streams 35.6 % of a core with a task per stream,
bench/http_stream.py; see the README for the figure with this.

Each frame written tells its delivery (sequence number and 48 kHz timestamp of the stream),
so the utterance is DONE when the response has it all. Closing the leg detaches its sink.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from gateway.conversation.conversation import Conversation
from gateway.http.flush_policy import FlushPolicy, flush_bytes
from gateway.http.formatters import FrameFormatter
from gateway.media.fanout import SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import FRAME_MS, RTP_TICKS_PER_FRAME
from gateway.media.ticker import shared_ticker
from gateway.speech.utterance import Utterance, UtteranceState

Pace = Literal["asap", "live"]
FRAME_S = FRAME_MS / 1000
Write = Callable[[bytes], Awaitable[None]]
#: write at once without waiting; False when it cannot (nothing written): the caller awaits
WriteNow = Callable[[bytes], bool]


class StreamFailed(Exception):
    """Synthesis failed mid-stream and the format has no error record: the caller cuts the
    response (no final chunk) so the reader sees a truncated body, not a clean end."""


@dataclass(frozen=True, slots=True)
class StreamOptions:
    pace: Pace = "asap"
    lead_s: float = 0.2
    write_s: float = 0.1  # live: frames due within this much of the first due go together
    flush: FlushPolicy = "adaptive"
    queue_frames: int = 50  # ≈1 s: the most a stalled reader holds on the server


@dataclass(slots=True)
class StreamStats:
    started_at: float = field(default_factory=time.monotonic)
    first_write_at: float | None = None
    frames: int = 0
    writes: int = 0
    bytes: int = 0
    ticked_writes: int = 0  # live: written from the ticker's callback (the rest by the task)


class HttpStreamLeg:
    def __init__(
        self,
        conversation: Conversation,
        formatter: FrameFormatter,
        options: StreamOptions = StreamOptions(),
        rtt_ms: float | None = None,
        name: str = "http",
    ) -> None:
        self.conversation = conversation
        self.formatter = formatter
        self.options = options
        self.name = name
        self.queue = FrameQueue(options.queue_frames)
        self.flush_limit = flush_bytes(options.flush, rtt_ms)
        self.stats = StreamStats()
        conversation.attach_sink(name, self.queue, SinkPolicy.BLOCK, sink=self)

    def listener_delay_s(self) -> float | None:
        """Live: the listener's buffer is the lead, so a frame plays ``lead`` after it is
        written; asap: unknown (the reader may buffer any amount)."""
        return self.options.lead_s if self.options.pace == "live" else None

    def record_sent(self) -> None:
        """(Each write is recorded as it goes.)"""

    async def run(
        self, utterance: Utterance, write: Write, write_now: WriteNow | None = None
    ) -> None:
        """Write ``utterance`` until it ends (done, failed or cut), then the format's end.

        ``write_now``: for a live leg, writes from the shared ticker (see the module doc);
        without it every live write is the task's."""
        await self._write(write, self.formatter.start(), count=False)
        if self.options.pace == "live":
            await _TickedLiveWriter(self, utterance, write_now or _refuse).run(write)
        else:
            await self._run_asap(utterance, write)
        formatter = self.formatter
        if utterance.state is UtteranceState.FAILED:
            if not formatter.carries_errors:
                raise StreamFailed(utterance.error or "synthesis failed")
            await self._write(write, formatter.error("synthesis_failed", utterance.error or ""))
        else:
            await self._write(write, formatter.end())

    async def _run_asap(self, utterance: Utterance, write: Write) -> None:
        """As fast as produced: the first frame alone, at once; frames ready together after it
        coalesced up to the flush size."""
        formatter, queue, stats = self.formatter, self.queue, self.stats
        finished = utterance.finished
        index = 0
        while True:
            if not len(queue):
                if finished.is_set():
                    break
                ready = asyncio.ensure_future(queue.wait_ready())
                ended = asyncio.ensure_future(finished.wait())
                try:
                    await asyncio.wait({ready, ended}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ready.cancel()
                    ended.cancel()
                continue
            now = time.monotonic()
            chunk = bytearray()
            while len(queue):
                fields = queue.pop_fields()
                assert fields is not None
                payload, owner, frame_index = fields
                chunk += formatter.frame(payload)
                if owner is not None:
                    owner.on_frame_sent(
                        frame_index, index & 0xFFFF, index * RTP_TICKS_PER_FRAME, now
                    )
                index += 1
                stats.frames += 1
                if stats.writes == 0 or len(chunk) >= self.flush_limit:
                    break  # the first frame alone, at once; later ones up to the flush size
            await self._write(write, bytes(chunk))

    async def _write(self, write: Write, data: bytes, count: bool = True) -> None:
        if not data:
            return
        self._count(data, count)
        await write(data)

    def _count(self, data: bytes, count: bool = True) -> None:
        if count:
            if self.stats.first_write_at is None:
                self.stats.first_write_at = time.monotonic()
            self.stats.writes += 1
        self.stats.bytes += len(data)

    def close(self) -> None:
        self.conversation.detach_sink(self.name)


def _refuse(data: bytes) -> bool:
    return False  # nothing written at once: the task writes it


class _TickedLiveWriter:
    """A live leg written from the shared ticker's callbacks (see the module doc).

    One callback is armed at a time (``_token`` makes an older one a no-op). A callback pops
    the frames due within the write window and writes them with ``write_now``; it re-arms for
    the next due frame, or, with the queue empty, on the next frame's arrival
    (``FrameQueue.on_wake``) and on a frame-time poll for the utterance's end. The task only
    wakes to await a write that ``write_now`` refused, and at the end."""

    def __init__(self, leg: HttpStreamLeg, utterance: Utterance, write_now: WriteNow) -> None:
        self.leg = leg
        self.utterance = utterance
        self.write_now = write_now
        self.ticker = shared_ticker()
        self.first_at: float | None = None
        self.index = 0
        self._token = 0
        self._armed_at: float | None = None
        self._wake: asyncio.Future[bytes | None] | None = None  # chunk to await, None: ended

    async def run(self, write: Write) -> None:
        loop = asyncio.get_running_loop()
        queue = self.leg.queue
        try:
            while True:
                self._wake = loop.create_future()
                self._arm(self.ticker.now())
                chunk = await self._wake
                if chunk is None:
                    return
                await self.leg._write(write, chunk)  # waits while the reader does not read
        finally:
            self._token += 1  # any armed callback is now a no-op
            self._wake = None
            if queue.on_wake == self._on_frame:
                queue.on_wake = None

    def _arm(self, at: float) -> None:
        if self._armed_at is not None and self._armed_at <= at:
            return
        self._token += 1
        token = self._token
        self._armed_at = at
        self.ticker.call_at(at, lambda: self._tick(token))

    def _on_frame(self) -> None:
        self.leg.queue.on_wake = None
        self._armed_at = None  # the poll armed for the end is superseded
        self._arm(self.ticker.now())

    def _finish(self, chunk: bytes | None) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(chunk)

    def _tick(self, token: int) -> None:
        if token != self._token:
            return
        self._armed_at = None
        if self._wake is None or self._wake.done():
            return  # the task is writing; it re-arms when done
        leg, queue = self.leg, self.leg.queue
        now = self.ticker.now()
        if not len(queue):
            self._tick_empty(now)
            return
        lead = leg.options.lead_s
        if self.first_at is not None:
            due = self.first_at + self.index * FRAME_S - lead
            if due > now:
                self._arm(due)
                return
        # the live write cadence coalesces (``--http-flush frame``: every frame alone); frames
        # are popped, formatted and counted a run at a time (not a call per frame)
        stats = leg.stats
        first_at = self.first_at
        if first_at is None or stats.writes == 0:
            due = 1  # the first frame alone, at once
        else:
            horizon = now + (leg.options.write_s if leg.flush_limit else 0.0)
            due = int((horizon + lead - first_at) / FRAME_S + 1e-9) - self.index + 1
        parts: list[bytes] = []
        while due > 0:
            run = queue.pop_run(due)
            if run is None:
                break
            payloads, owner, frame_index = run
            if self.first_at is None:
                self.first_at = now
            parts.append(leg.formatter.frames(payloads))
            index, count = self.index, len(payloads)
            if owner is not None:
                owner.on_frames_sent(
                    frame_index, count, index & 0xFFFF, index * RTP_TICKS_PER_FRAME, now
                )
            self.index += count
            stats.frames += count
            due -= count
        data = b"".join(parts)
        if data:
            # the first write goes through the task (it also sends the response's headers)
            if stats.writes == 0 or not self.write_now(data):
                self._finish(data)  # the task writes it, waiting for the reader
                return
            leg._count(data)
            stats.ticked_writes += 1
        if len(queue):
            self._arm(self.first_at + self.index * FRAME_S - lead)
        else:
            self._tick_empty(now)

    def _tick_empty(self, now: float) -> None:
        if self.utterance.finished.is_set():
            self._finish(None)
            return
        self.leg.queue.on_wake = self._on_frame
        self._arm(now + FRAME_S)  # the end is an event without a callback: poll for it
