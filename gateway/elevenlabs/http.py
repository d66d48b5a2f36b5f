"""The ElevenLabs-compatible HTTP speech routes: the whole text in one request.

- ``POST /v1/text-to-speech/{voice_id}/stream``: the audio bytes as they are produced
  (LiveKit's ``synthesize()``);
- ``POST /v1/text-to-speech/{voice_id}/stream/with-timestamps``: one JSON object per line,
  ``{"audio_base64", "alignment", "normalized_alignment"}``, the alignment as their HTTP API
  has it (``characters``, ``character_start_times_seconds``, ``character_end_times_seconds``,
  seconds from the first sample of the whole response: Pipecat's HTTP service reads it so);
- ``POST /v1/text-to-speech/{voice_id}`` (the whole file) and ``…/with-timestamps`` (one JSON
  object).

The body is JSON ``{"text", "model_id"?, "voice_settings"?, ...}`` (unknown fields ignored);
the query ``output_format`` (default ``mp3_44100_128``). Errors are the gateway's
``{"error": {"code", "message"}}`` with a 4xx. A client that goes away cancels the handler,
which closes the synthesis stream.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from gateway.elevenlabs.alignment import char_alignment
from gateway.elevenlabs.formats import OutputFormat
from gateway.elevenlabs.speak import ClauseSpeaker, Piece
from gateway.text.segmenter import split_clauses
from gateway.tts.base import SynthesisError, Synthesizer


async def pieces(voice: Synthesizer, fmt: OutputFormat, text: str
                 ) -> AsyncIterator[tuple[Piece, float]]:
    """Every piece of the text's audio, with its start (ms from the first sample)."""
    speaker = ClauseSpeaker(voice, fmt)
    at = 0.0
    for clause in split_clauses(text):
        stream = speaker.speak(clause)
        async with contextlib.aclosing(stream):
            async for piece in stream:
                yield piece, at
                at += piece.duration_ms
    yield Piece(await speaker.finish(), (), 0.0), at


def timestamps(piece: Piece, at_ms: float) -> dict[str, Any] | None:
    if not piece.words:
        return None
    a = char_alignment(piece.words, piece.duration_ms)
    starts = [(at_ms + s) / 1000 for s in a["charStartTimesMs"]]
    ends = [s + d / 1000 for s, d in zip(starts, a["charDurationsMs"], strict=True)]
    return {"characters": a["chars"], "character_start_times_seconds": starts,
            "character_end_times_seconds": ends}


async def stream_audio(request: web.Request, voice: Synthesizer, fmt: OutputFormat,
                       text: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": fmt.media_type,
                                           "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    with contextlib.suppress(SynthesisError):  # the status is sent: the body just ends
        async for piece, _ in pieces(voice, fmt, text):
            if piece.audio:
                await response.write(piece.audio)
    await response.write_eof()
    return response


async def stream_with_timestamps(request: web.Request, voice: Synthesizer, fmt: OutputFormat,
                                 text: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson",
                                           "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    with contextlib.suppress(SynthesisError):
        async for piece, at in pieces(voice, fmt, text):
            if not piece.audio and not piece.words:
                continue
            alignment = timestamps(piece, at)
            line = {"audio_base64": base64.b64encode(piece.audio).decode("ascii"),
                    "alignment": alignment, "normalized_alignment": alignment}
            await response.write(json.dumps(line, separators=(",", ":")).encode() + b"\n")
    await response.write_eof()
    return response


async def whole(voice: Synthesizer, fmt: OutputFormat, text: str, timed: bool
                ) -> web.Response:
    audio: list[bytes] = []
    chars: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    async for piece, at in pieces(voice, fmt, text):
        audio.append(piece.audio)
        t = timestamps(piece, at)
        if t is not None:
            chars += t["characters"]
            starts += t["character_start_times_seconds"]
            ends += t["character_end_times_seconds"]
    if not timed:
        return web.Response(body=b"".join(audio), content_type=fmt.media_type)
    alignment = {"characters": chars, "character_start_times_seconds": starts,
                 "character_end_times_seconds": ends}
    return web.json_response({"audio_base64": base64.b64encode(b"".join(audio)).decode(),
                              "alignment": alignment, "normalized_alignment": alignment})
