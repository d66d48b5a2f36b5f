"""The HTTP streaming routes: speech as a response body, each frame written as it exists.

- ``POST /v1/audio/speech`` (JSON) and ``GET /v1/audio/speech?input=...``: OpenAI's audio.speech
  contract (stream/openai_speech.py), so OpenAI SDKs and the OpenAI TTS plugins of LiveKit and
  Pipecat work by changing the base URL. ``opus`` is Ogg/Opus carrying the very frames the
  WebRTC path sends; ``pcm``/``wav``/``mp3``/``flac``/``aac`` are made from the same 24 kHz PCM.
- ``POST /v1/speech/stream`` (JSON ``{text, voice, pace}``): the gateway's framed stream
  (stream/frame_records.py) for its own client and the demo page.

Each request is a conversation of its own with one HTTP leg (session/http_leg.py); phrase cache,
backpressure and synthesis are the WebRTC path's. A client that goes away cancels synthesis (the
handler is cancelled, or its next write fails) and closes the upstream TTS request.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import socket
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.api.errors import ApiError
from gateway.api.models import FrameStreamRequest, parse
from gateway.api.routes import (
    CACHE,
    JSON,
    LIMITS,
    VOICES,
    _json_body,
    _require_type,
    checked_text,
    voice_named,
)
from gateway.conversation.conversation import Conversation
from gateway.http import formatters
from gateway.http.chunked_writer import ChunkedBodyWriter
from gateway.http.flush_policy import FlushPolicy, tcp_rtt_ms
from gateway.http.frame_records import MEDIA_TYPE as FRAMES_MEDIA_TYPE
from gateway.http.leg import HttpStreamLeg, StreamFailed, StreamOptions
from gateway.http.openai_speech import (
    MEDIA_TYPES,
    SpeechRequest,
    SpeechRequestError,
    parse_speech_request,
)
from gateway.http.transcode import supported_formats
from gateway.media.opus_codec import EncoderSettings
from gateway.speech.text_feed import FedVoice, TextFeed, TextFeedClosed
from gateway.tts.base import Synthesizer

log = logging.getLogger(__name__)
SEND_BUFFER_BYTES = 128 * 1024
routes = web.RouteTableDef()


@dataclass(frozen=True, slots=True)
class StreamDefaults:
    encoder: EncoderSettings
    flush: FlushPolicy = "adaptive"
    lead_s: float = 0.2
    write_s: float = 0.06


STREAMING = web.AppKey("streaming", StreamDefaults)
#: The HTTP legs writing now (for /healthz and tests): bounded by the connections served.
HTTP_STREAMS = web.AppKey("http_streams", set)


def _formatter(request: SpeechRequest, settings: EncoderSettings) -> formatters.FrameFormatter:
    fmt, speed = request.response_format, request.speed
    inner: formatters.FrameFormatter
    if fmt == "opus":
        inner = formatters.OggOpus() if speed == 1.0 else formatters.StretchedOggOpus(
            speed, settings
        )
    else:
        inner = formatters.Transcoded(fmt, MEDIA_TYPES[fmt], speed)
    if request.stream_format == "sse":
        return formatters.ServerSentEvents(inner, input_tokens=max(1, len(request.input) // 4))
    return inner


def _openai_error(exc: SpeechRequestError) -> web.Response:
    return web.json_response(exc.error_body(), status=400)


def _parse(request: web.Request, data: Any) -> SpeechRequest:
    voices = request.app[VOICES]
    return parse_speech_request(
        data, voices=voices.names, default_voice=voices.default,
        max_chars=request.app[LIMITS]["max_text_chars"], supported_formats=_formats(),
    )


def _formats() -> frozenset[str]:
    return supported_formats() | {"opus"}


@routes.post("/v1/audio/speech")
async def openai_speech(request: web.Request) -> web.StreamResponse:
    _require_type(request, JSON)
    try:
        speech = _parse(request, await request.read())
    except SpeechRequestError as exc:
        return _openai_error(exc)
    return await _stream_speech(request, speech)


@routes.get("/v1/audio/speech")
async def openai_speech_get(request: web.Request) -> web.StreamResponse:
    """The same, from the query string, so a plain ``<audio src>`` can play it."""
    query: dict[str, Any] = dict(request.query)
    if "speed" in query:
        with contextlib.suppress(ValueError):
            query["speed"] = float(query["speed"])
    try:
        speech = _parse(request, query)
    except SpeechRequestError as exc:
        return _openai_error(exc)
    return await _stream_speech(request, speech)


async def _stream_speech(request: web.Request, speech: SpeechRequest) -> web.StreamResponse:
    defaults = request.app[STREAMING]
    formatter = _formatter(speech, defaults.encoder)
    voice = request.app[VOICES].get(speech.voice)
    # the model is any string, reported back -- as a header only in printable ASCII (a CR or LF
    # in a header would be header injection)
    model = "".join(c for c in speech.model if " " <= c <= "~")[:128]
    headers = {"X-Model": model} if model else {}
    return await stream_response(
        request, speech.input, voice, formatter, speech.pace, headers, speech.instructions,
    )


@routes.post("/v1/speech/stream")
async def frame_stream(request: web.Request) -> web.StreamResponse:
    """``{text, voice?, pace?}`` -> the framed Opus stream (stream/frame_records.py); or a
    ``text/plain`` body streamed as it is written (``?voice=&pace=``): speech starts with the
    first words, while the rest of the body is still arriving (speech/text_feed.py)."""
    if request.content_type == "text/plain":
        return await streamed_text_frames(request)
    _require_type(request, JSON, "text/plain")
    body = parse(FrameStreamRequest, await _json_body(request))
    text = checked_text(request, body.text)
    voice = voice_named(request, body.voice)
    return await stream_response(request, text, voice, formatters.FrameRecords(body.words),
                                 body.pace)


async def streamed_text_frames(request: web.Request) -> web.StreamResponse:
    pace = request.query.get("pace", "asap")
    if pace not in ("asap", "live"):
        raise ApiError(400, "invalid_pace", "pace must be asap or live")
    voice = voice_named(request, request.query.get("voice"))
    feed = TextFeed(request.app[LIMITS]["max_text_chars"])
    reader = asyncio.create_task(_read_text(request, feed))
    try:
        words = request.query.get("words") in ("1", "true")
        return await stream_response(request, "", FedVoice(voice, feed),  # type: ignore[arg-type]
                                     formatters.FrameRecords(words), pace)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def _read_text(request: web.Request, feed: TextFeed) -> None:
    """The body, decoded as it comes, into the feed; its end ends the text. Past the text
    limit the rest is not read: what came is spoken and the stream ends."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        async for chunk in request.content.iter_any():
            feed.append(decoder.decode(chunk))
        feed.append(decoder.decode(b"", final=True))
    except ValueError as exc:  # over --max-text-chars
        log.info("streamed text cut: %s", exc)
    except (ConnectionError, TextFeedClosed):
        pass
    finally:
        feed.close()


async def stream_response(
    request: web.Request,
    text: str,
    voice: Synthesizer,
    formatter: formatters.FrameFormatter,
    pace: str,
    headers: dict[str, str] | None = None,
    instructions: str | None = None,
) -> web.StreamResponse:
    defaults = request.app[STREAMING]
    conversation = Conversation(
        defaults.encoder, max_pending_utterances=1,
        phrase_cache=None if formatter.needs_pcm else request.app[CACHE],
        encode=not formatter.needs_pcm,
    )
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        # A stalled reader holds at most this much in the kernel too (autotuning would let a
        # send buffer grow to megabytes per stream); 128 KB carries PCM at 100 ms RTT 25x over.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    options = StreamOptions(
        pace=pace, lead_s=defaults.lead_s, write_s=defaults.write_s,  # type: ignore[arg-type]
        flush=defaults.flush,
    )
    leg = HttpStreamLeg(conversation, formatter, options, rtt_ms=tcp_rtt_ms(sock))
    response = web.StreamResponse(headers={
        "Content-Type": formatter.media_type,
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
        **(headers or {}),
    })
    response.enable_chunked_encoding()
    streams: set[HttpStreamLeg] = request.app[HTTP_STREAMS]
    streams.add(leg)
    try:
        utterance = conversation.say(text, voice, instructions=instructions)
        formatter.bind(utterance)
        await response.prepare(request)
        body = ChunkedBodyWriter(request, response)
        await leg.run(utterance, body.write, body.write_now)
        await response.write_eof()
    except StreamFailed as exc:
        # No error record in this format: end without the last chunk, so the reader sees a
        # truncated body (never a clean 200 that is missing its end)
        log.warning("HTTP stream cut: synthesis failed: %s", exc)
        if request.transport is not None:
            request.transport.close()
    except (ConnectionResetError, ConnectionError) as exc:
        log.info("HTTP stream ended by the client: %r", exc)
    finally:
        streams.discard(leg)
        leg.close()
        await conversation.close()  # cancels synthesis, closes the upstream request
    return response


__all__ = [
    "FRAMES_MEDIA_TYPE", "HTTP_STREAMS", "STREAMING", "StreamDefaults", "routes", "stream_response",
]
