"""The ElevenLabs-compatible routes, registered on the gateway's aiohttp app.

Each is served twice: under ``/v1`` (where their clients put it: Pipecat's ``url=ws://host``,
LiveKit's ``base_url=http://host/v1``) and under ``/v1/elevenlabs``, where ``GET
/v1/elevenlabs/voices`` answers in their shape (``{"voices": [{"voice_id", "name", ...}]}``):
our own ``GET /v1/voices`` keeps its shape (a list of names; changing it would break our
clients), and a LiveKit user who wants ``list_voices()`` too sets
``base_url=http://host/v1/elevenlabs``. The auth middleware takes their ``xi-api-key`` header
as our bearer token (``gateway.api.access``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.elevenlabs import http
from gateway.elevenlabs.formats import OutputFormat, parse_output_format
from gateway.elevenlabs.socket import (
    SocketLimits,
    SocketStats,
    close_all,
    inactivity,
    serve_socket,
)
from gateway.elevenlabs.voices import resolve_voice, voice_list
from gateway.tts.base import Synthesizer
from gateway.tts.registry import VoiceRegistry

PREFIXES = ("/v1", "/v1/elevenlabs")


@dataclass
class ElevenLabsService:
    voices: VoiceRegistry
    limits: SocketLimits
    stats: SocketStats = field(default_factory=SocketStats)


ELEVENLABS = web.AppKey("elevenlabs", ElevenLabsService)


class Refused(Exception):
    """A 4xx answer, in the gateway's error shape (raised before any response starts)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _error(status: int, code: str, message: str) -> Refused:
    return Refused(status, code, message)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _answers_errors(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refused as exc:
            return web.json_response({"error": {"code": exc.code, "message": exc.message}},
                                     status=exc.status)

    return wrapped


def _service(request: web.Request) -> ElevenLabsService:
    return request.app[ELEVENLABS]


def _voice(request: web.Request) -> Synthesizer:
    voices = _service(request).voices
    voice_id = request.match_info["voice_id"]
    name = resolve_voice(voice_id, voices.names, voices.default)
    if name is None:
        raise _error(404, "voice_not_found", f"no voice {voice_id!r}; ours: "
                     f"{', '.join(voices.names)} (ElevenLabs' premade ids mean the default)")
    return voices.get(name)


def _format(request: web.Request) -> OutputFormat:
    try:
        return parse_output_format(request.query.get("output_format"))
    except ValueError as exc:
        raise _error(400, "invalid_output_format", str(exc)) from None


async def _text(request: web.Request) -> str:
    try:
        body: Any = json.loads(await request.read())
    except ValueError:
        raise _error(400, "invalid_json", "the body must be a JSON object") from None
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise _error(400, "invalid_text", "text must be a non-empty string")
    limit = _service(request).limits.max_text_chars
    if len(text) > limit:
        raise _error(400, "text_too_long", f"text has {len(text)} characters; limit {limit}")
    return text


async def stream_input(request: web.Request) -> web.StreamResponse:
    return await _socket(request, multi=False)


async def multi_stream_input(request: web.Request) -> web.StreamResponse:
    return await _socket(request, multi=True)


async def _socket(request: web.Request, multi: bool) -> web.StreamResponse:
    voice, fmt = _voice(request), _format(request)
    try:
        timeout = inactivity(request.query.get("inactivity_timeout"))
    except ValueError as exc:
        raise _error(400, "invalid_inactivity_timeout", str(exc)) from None
    service = _service(request)
    limits = service.limits
    if "first_words" in request.query:
        value = request.query["first_words"]
        if not value.isdigit() or int(value) > 10:
            raise _error(400, "invalid_first_words", "first_words must be 0..10")
        limits = dataclasses.replace(limits, first_words=int(value))
    return await serve_socket(request, voice, fmt, timeout, limits, service.stats, multi)


async def tts_stream(request: web.Request) -> web.StreamResponse:
    voice, fmt = _voice(request), _format(request)
    return await http.stream_audio(request, voice, fmt, await _text(request))


async def tts_stream_timestamps(request: web.Request) -> web.StreamResponse:
    voice, fmt = _voice(request), _format(request)
    return await http.stream_with_timestamps(request, voice, fmt, await _text(request))


async def tts_whole(request: web.Request) -> web.StreamResponse:
    voice, fmt = _voice(request), _format(request)
    return await http.whole(voice, fmt, await _text(request), timed=False)


async def tts_whole_timestamps(request: web.Request) -> web.StreamResponse:
    voice, fmt = _voice(request), _format(request)
    return await http.whole(voice, fmt, await _text(request), timed=True)


async def voices(request: web.Request) -> web.Response:
    registry = _service(request).voices
    return web.json_response({"voices": voice_list(registry.names, registry.default)})


def add_routes(app: web.Application, voices_: VoiceRegistry, max_text_chars: int) -> None:
    app[ELEVENLABS] = ElevenLabsService(voices_, SocketLimits(max_text_chars=max_text_chars))
    for prefix in PREFIXES:
        base = f"{prefix}/text-to-speech/{{voice_id}}"
        for method, path, handler in (
            ("GET", f"{base}/stream-input", stream_input),
            ("GET", f"{base}/multi-stream-input", multi_stream_input),
            ("POST", f"{base}/stream", tts_stream),
            ("POST", f"{base}/stream/with-timestamps", tts_stream_timestamps),
            ("POST", base, tts_whole),
            ("POST", f"{base}/with-timestamps", tts_whole_timestamps),
        ):
            app.router.add_route(method, path, _answers_errors(handler))
    app.router.add_get("/v1/elevenlabs/voices", voices)

    async def close_sockets(app: web.Application) -> None:
        await close_all(app[ELEVENLABS].stats)

    app.on_shutdown.append(close_sockets)
