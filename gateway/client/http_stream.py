"""The gateway's HTTP streams played through the same receive path as WebRTC.

``format="frames"``: ``POST /v1/speech/stream`` ``{text, voice, pace}``, the framed stream
(``gateway.http.frame_records``: sequence number, timestamp and Opus bytes per record);
``format="ogg"``: ``GET /v1/audio/speech?response_format=opus`` (Ogg Opus, ``ogg_reader``),
numbered here as RTP would be (+1 per packet, timestamps by each packet's duration).

Each frame goes to ``ReceivePath.on_packet`` (jitter buffer, FEC/PLC, playout clock, PCM
source), fed as a real-time stream would arrive: frame ``i`` no earlier than the first frame's
arrival plus its media time. HTTP is reliable and ``pace: asap`` writes a whole reply in a
burst, which a jitter buffer sized for a network (2-5 frames, ``capacity`` 50) must not be
handed at once; frames that arrive later than their time are fed on arrival and move the
schedule with them (a real delay: the jitter buffer sees it, underruns, adapts). Frames wait
in a bounded queue (``queue_frames``, 3 s by default); a full queue stops reading the socket,
so TCP's flow control and the gateway's backpressure hold the rest.

``speak`` returns when the last frame was fed (``last_seq``; the caller waits for its playout)
with the timings: request sent, response headers, first frame record, and ``arrivals``
(16-bit sequence number -> arrival) until ``keep_arrivals`` frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gateway.client.ogg_reader import OggOpusReader
from gateway.client.peer import GatewayError
from gateway.http.frame_records import EndRecord, ErrorRecord, FrameRecord, FrameRecordParser
from gateway.media.opus_codec import RTP_CLOCK_RATE, RTP_TICKS_PER_FRAME
from gateway.receive.opus_packet import packet_ticks
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.rtp.seqnum import SEQ_MASK, Unwrapper

FORMATS = ("frames", "ogg")
PACES = ("asap", "live")
HTTP_SSRC = 0  # no RTCP over HTTP: the receive path only keys NACKs by it (off here)


def http_receive_config(**overrides: Any) -> ReceivePathConfig:
    """The WebRTC client's receive path without NACK (nothing to ask over HTTP): jitter buffer
    2-5 frames, 4 frames of PCM, FEC/PLC for gaps."""
    return ReceivePathConfig(**{"nack": False, "min_frames": 2, "max_frames": 5,
                                "pcm_buffer_frames": 4, **overrides})


@dataclass(frozen=True, slots=True)
class HttpFrame:
    arrival: float  # time.monotonic() its last byte was read
    seq: int
    timestamp: int
    payload: bytes


@dataclass
class HttpSpeechResult:
    url: str
    format: str
    pace: str
    sent_at: float  # time.monotonic() the request went out
    response_at: float | None = None  # its headers came
    first_frame_at: float | None = None
    frames: int = 0
    bytes: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    ended: bool = False  # an end record (or Ogg's EOS) came
    error: dict[str, str] | None = None  # an error record
    fed_late: int = 0  # frames that came after their time (the schedule moved)
    arrivals: dict[int, float] = field(default_factory=dict)


class _Numbering:
    """RTP-style numbers for Ogg packets: +1 per packet, timestamps by duration."""

    def __init__(self) -> None:
        self.seq = 0
        self.timestamp = 0

    def next(self, payload: bytes) -> tuple[int, int]:
        out = (self.seq, self.timestamp)
        self.seq = (self.seq + 1) & SEQ_MASK
        ticks = packet_ticks(payload) or RTP_TICKS_PER_FRAME
        self.timestamp = (self.timestamp + ticks) & 0xFFFFFFFF
        return out


class HttpSpeechClient:
    def __init__(
        self,
        base_url: str,
        http: aiohttp.ClientSession | None = None,
        *,
        receive_path: ReceivePathConfig | None = None,
        queue_frames: int = 150,
        keep_arrivals: int = 3000,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = http
        self._own_http = http is None
        self.receive = ReceivePath(receive_path or http_receive_config())
        self._queue_frames = queue_frames
        self._keep_arrivals = keep_arrivals

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        return self._http

    async def speak(
        self, text: str, voice: str | None = None, *, pace: str = "asap", fmt: str = "frames",
    ) -> HttpSpeechResult:
        if fmt not in FORMATS or pace not in PACES:
            raise ValueError(f"format must be one of {FORMATS}, pace one of {PACES}")
        self.receive.start()
        queue: asyncio.Queue[HttpFrame | None] = asyncio.Queue(self._queue_frames)
        request = self._request(text, voice, pace, fmt)
        result = HttpSpeechResult(request["url"], fmt, pace, time.monotonic())
        feeder = asyncio.create_task(self._feed(queue, result), name="http-feed")
        try:
            async with self.http.request(**request) as response:
                result.response_at = time.monotonic()
                if response.status >= 400:
                    raise GatewayError(response.status, await _body(response))
                frames = self._records(response, result) if fmt == "frames" else self._ogg(
                    response, result)
                async for frame in frames:
                    await queue.put(frame)  # a full queue stops reading: TCP holds the rest
            await queue.put(None)
            await feeder
        finally:
            if not feeder.done():
                feeder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feeder
        return result

    def _request(self, text: str, voice: str | None, pace: str, fmt: str) -> dict[str, Any]:
        if fmt == "frames":
            body: dict[str, Any] = {"text": text, "pace": pace}
            if voice:
                body["voice"] = voice
            return {"method": "POST", "url": f"{self.base_url}/v1/speech/stream", "json": body}
        params = {"input": text, "response_format": "opus", "pace": pace, "model": "tts-1"}
        if voice:
            params["voice"] = voice
        return {"method": "GET", "url": f"{self.base_url}/v1/audio/speech", "params": params}

    async def _records(
        self, response: aiohttp.ClientResponse, result: HttpSpeechResult
    ) -> AsyncIterator[HttpFrame]:
        parser = FrameRecordParser()
        async for chunk in response.content.iter_any():
            result.bytes += len(chunk)
            now = time.monotonic()
            for record in parser.feed(chunk):
                if isinstance(record, FrameRecord):
                    yield HttpFrame(now, record.sequence, record.timestamp, record.payload)
                elif isinstance(record, EndRecord):
                    result.ended = True
                elif isinstance(record, ErrorRecord):
                    result.error = {"code": record.code, "message": record.message}
        parser.close()

    async def _ogg(
        self, response: aiohttp.ClientResponse, result: HttpSpeechResult
    ) -> AsyncIterator[HttpFrame]:
        reader = OggOpusReader()
        numbering = _Numbering()
        async for chunk in response.content.iter_any():
            result.bytes += len(chunk)
            now = time.monotonic()
            for packet in reader.feed(chunk):
                seq, timestamp = numbering.next(packet)
                yield HttpFrame(now, seq, timestamp, packet)
        reader.close()
        result.ended = reader.ended

    async def _feed(
        self, queue: asyncio.Queue[HttpFrame | None], result: HttpSpeechResult
    ) -> None:
        """Frames into the receive path as a real-time stream would arrive (module doc)."""
        timestamps = Unwrapper(32)
        anchor: float | None = None  # monotonic time of media time 0
        while (frame := await queue.get()) is not None:
            media = timestamps.unwrap(frame.timestamp) / RTP_CLOCK_RATE
            if anchor is None or frame.arrival > anchor + media:
                if anchor is not None:
                    result.fed_late += 1
                anchor = frame.arrival - media
            delay = anchor + media - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if result.first_frame_at is None:
                result.first_frame_at = frame.arrival
                result.first_seq = frame.seq
            if len(result.arrivals) < self._keep_arrivals:
                result.arrivals[frame.seq] = frame.arrival
            result.frames += 1
            result.last_seq = frame.seq
            self.receive.on_packet(frame.seq, frame.timestamp, frame.payload, HTTP_SSRC,
                                   time.monotonic())

    async def close(self) -> None:
        await self.receive.close()
        if self._own_http and self._http is not None:
            await self._http.close()


async def _body(response: aiohttp.ClientResponse) -> Any:
    if response.content_type == "application/json":
        return await response.json()
    return await response.text()
