"""The API described: an OpenAPI 3.1 document generated from the request/response models that
validate input (api/models.py, stream/openai_speech.py), served at ``/openapi.json``, rendered
at ``/docs`` with Swagger UI, whose files ``/docs/{file}`` serves from the installed
``swagger-ui-bundle-v2`` package (a hard dependency from PyPI, so running needs no npm; no CDN at
run time). ``OPERATIONS`` names each route's models; a test checks that
every route the app serves is described, so the document cannot drift from the routes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from gateway import __version__
from gateway.api import channel_models as cm
from gateway.api import models as m
from gateway.elevenlabs import formats as el_formats
from gateway.elevenlabs import models as el
from gateway.elevenlabs.routes import PREFIXES as EL_PREFIXES
from gateway.elevenlabs.voices import PREMADE
from gateway.http.frame_records import MEDIA_TYPE as FRAMES
from gateway.http.openai_speech import MEDIA_TYPES, SpeechRequest

SDP, SDPFRAG = "application/sdp", "application/trickle-ice-sdpfrag"
JSON, SSE = "application/json", "text/event-stream"
MAX_QUERY_TEXT = 2000  # characters of text in a GET query (percent-encoded, within 8 KB)
Body = type[BaseModel] | str  # a model (JSON) or a media type of a text/binary body
#: Swagger UI's files that /docs loads, and their media types: all that /docs/{file} serves
SWAGGER_UI_FILES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}
PATH_PARAMS: dict[str, dict[str, Any]] = {
    "session_id": {"type": "string"}, "utterance_id": {"type": "string"},
    "name": {"type": "string"}, "listener_id": {"type": "string"}, "call_id": {"type": "string"},
    "file": {"type": "string", "enum": list(SWAGGER_UI_FILES)},
}


@dataclass(frozen=True)
class Op:
    method: str
    path: str
    summary: str
    request: dict[str, Body] = field(default_factory=dict)  # media type -> body
    responses: dict[str, tuple[str, dict[str, Body]]] = field(default_factory=dict)
    query: tuple[tuple[str, str, dict[str, Any]], ...] = ()  # name, description, schema
    open: bool = False  # no bearer token needed


AUDIO: dict[str, Body] = {media: "binary" for media in MEDIA_TYPES.values()} | {SSE: "sse"}
OPERATIONS: tuple[Op, ...] = (
    Op("post", "/v1/sessions", "Create a session: WHEP offer -> answer",
       {SDP: "text", JSON: m.JsonOffer},
       {"201": ("the answer; Location is the session's final URL", {SDP: "text",
                                                                  JSON: m.JsonAnswer}),
        "503": ("at the session cap, or draining (Retry-After)", {JSON: m.ErrorBody})}),
    Op("options", "/v1/sessions", "Preflight / capabilities (Accept-Post: application/sdp)",
       responses={"204": ("what the endpoint accepts", {})}, open=True),
    Op("get", "/v1/sessions/{session_id}", "A session's state",
       responses={"200": ("connection, utterances, packets, NACK counters",
                          {JSON: m.SessionState})}),
    Op("patch", "/v1/sessions/{session_id}",
       "Trickle ICE candidates, or (new ice-ufrag/pwd + If-Match) restart ICE",
       {SDPFRAG: "text"}, {"204": ("candidates added", {}),
                           "200": ("ICE restarted: the gateway's sdpfrag", {SDPFRAG: "text"})}),
    Op("delete", "/v1/sessions/{session_id}", "End a session",
       responses={"204": ("closed", {})}),
    Op("post", "/v1/sessions/{session_id}/speech", "Say something in a session",
       {JSON: m.SpeechCreate},
       {"202": ("queued (or replacing what plays, with interrupt)", {JSON: m.SpeechAccepted})}),
    Op("delete", "/v1/sessions/{session_id}/speech", "Stop speaking now",
       responses={"200": ("utterances cut", {JSON: m.Interrupted})}),
    Op("get", "/v1/sessions/{session_id}/speech/{utterance_id}", "An utterance's state",
       responses={"200": ("state, sequence numbers, latency", {JSON: m.UtteranceState})},
       query=(("wait", "1: hold until it ends; sent: until its first frame is out",
               {"type": "string", "enum": ["0", "1", "true", "sent"]}),
              ("timeout", "seconds to hold at most (<= 60)",
               {"type": "number", "minimum": 0, "maximum": 60}))),
    Op("post", "/v1/sessions/{session_id}/speech/{utterance_id}/text",
       "More text for an open utterance (speech with \"open\": true)",
       {JSON: m.SpeechAppend}, {"200": ("appended", {JSON: m.SpeechAppended})}),
    Op("get", "/v1/sessions/{session_id}/events", "The session's events (Server-Sent Events)",
       responses={"200": ("event: <type> / data: <json> until the session ends",
                          {SSE: "sse"})}),
    Op("post", "/v1/audio/speech", "OpenAI-compatible speech, streamed as produced",
       {JSON: SpeechRequest}, {"200": ("the audio (or SSE events)", AUDIO)}),
    Op("get", "/v1/audio/speech", "The same from a query string (for <audio src>)",
       responses={"200": ("the audio", AUDIO)},
       query=(("input", "the text (required)", {"type": "string", "minLength": 1}),
              ("voice", "a voice name", {"type": "string"}),
              ("response_format", "opus|pcm|wav|mp3|flac|aac",
               {"type": "string", "enum": list(MEDIA_TYPES)}),
              ("pace", "asap|live", {"type": "string", "enum": ["asap", "live"]}))),
    Op("post", "/v1/speech/stream", "The gateway's framed Opus stream (text/plain: the text "
       "streamed in the body as it is written)",
       {JSON: m.FrameStreamRequest, "text/plain": "text"},
       {"200": ("frame records", {FRAMES: "binary"})},
       query=(("voice", "a voice name (text/plain bodies)", {"type": "string"}),
              ("pace", "asap|live (text/plain bodies)",
               {"type": "string", "enum": ["asap", "live"]}),
              ("words", "1: word records too (text/plain bodies)",
               {"type": "string", "enum": ["0", "1"]}))),
    Op("get", "/v1/realtime", "The OpenAI Realtime API over a WebSocket (an upgrade; "
       "?call_id=: a call's control socket); docs/realtime.md",
       responses={"101": ("switching protocols: JSON events both ways", {})},
       query=(("model", "the model name (echoed)", {"type": "string"}),
              ("call_id", "a call to watch and steer", {"type": "string"}))),
    Op("post", "/v1/realtime", "Realtime over WebRTC, the older flow: an SDP offer",
       {SDP: "text"}, {"201": ("the answer SDP", {SDP: "text"})},
       query=(("model", "the model name (echoed)", {"type": "string"}),)),
    Op("post", "/v1/realtime/calls", "Realtime over WebRTC: the offer (and session config)",
       {"multipart/form-data": "call", SDP: "text"},
       {"201": ("the answer SDP; Location is the call", {SDP: "text"})}),
    Op("post", "/v1/realtime/calls/{call_id}/hangup", "End a Realtime call",
       responses={"200": ("ended", {})}),
    Op("post", "/v1/realtime/client_secrets", "An ephemeral key (ek_...) for a browser",
       {JSON: "object"}, {"200": ("the key, its expiry and session", {JSON: "object"})}),
    Op("post", "/v1/realtime/sessions", "The beta flow's ephemeral key",
       {JSON: "object"}, {"200": ("the session and its client_secret", {JSON: "object"})}),
    Op("post", "/v1/channels", "Create a broadcast channel (docs/channels.md)",
       {JSON: cm.ChannelCreate}, {"201": ("the channel; Location is its URL",
                                          {JSON: cm.ChannelSummary})}),
    Op("get", "/v1/channels", "The cluster's channels, listeners summed over its workers",
       responses={"200": ("every channel this token may see", {JSON: cm.ChannelList})}),
    Op("get", "/v1/channels/-/local", "This worker's own channels and mirrors (the listing "
       "asks each worker)", responses={"200": ("its channels, mirrors, listeners",
                                               {JSON: "object"})},
       query=(("name", "only this channel", {"type": "string"}),)),
    Op("get", "/v1/channels/{name}", "A channel's state: listeners, frames aired, what plays",
       responses={"200": ("state", {JSON: "object"})}),
    Op("delete", "/v1/channels/{name}", "End a channel and all its listeners",
       responses={"204": ("closed", {})}),
    Op("post", "/v1/channels/{name}/speech", "Say something on a channel",
       {JSON: m.SpeechCreate}, {"202": ("queued (or replacing what plays, with interrupt)",
                                        {JSON: "object"})}),
    Op("delete", "/v1/channels/{name}/speech", "Stop speaking on a channel now",
       responses={"200": ("utterances cut", {JSON: m.Interrupted})}),
    Op("post", "/v1/channels/{name}/whep", "Listen over WebRTC: WHEP offer -> answer",
       {SDP: "text"}, {"201": ("the answer; Location is the listener's resource",
                               {SDP: "text"})}),
    Op("get", "/v1/channels/{name}/listeners/{listener_id}", "A WHEP listener's state",
       responses={"200": ("connection, packets, lag", {JSON: "object"})}),
    Op("patch", "/v1/channels/{name}/listeners/{listener_id}",
       "Trickle ICE candidates, or (new ice-ufrag/pwd + If-Match) restart ICE",
       {SDPFRAG: "text"}, {"204": ("candidates added", {}),
                           "200": ("ICE restarted: the gateway's sdpfrag", {SDPFRAG: "text"})}),
    Op("delete", "/v1/channels/{name}/listeners/{listener_id}", "End a WHEP listener",
       responses={"204": ("closed", {})}),
    Op("get", "/v1/channels/{name}/listen", "Listen over HTTP: the air, live",
       responses={"200": ("the audio until the channel or the listener ends",
                          {"audio/ogg": "binary", "audio/pcm": "binary", "audio/wav": "binary",
                           FRAMES: "binary"})},
       query=(("format", "opus|pcm|wav|frames",
               {"type": "string", "enum": ["opus", "pcm", "wav", "frames"]}),
              ("batch", "frames per write, 1..5 (default 3: 60 ms)",
               {"type": "string", "enum": ["1", "2", "3", "4", "5"]}))),
    Op("get", "/v1/channels/{name}/events", "A channel's events (Server-Sent Events)",
       responses={"200": ("utterances, captions, listeners joining and leaving",
                          {SSE: "sse"})}),
    Op("get", "/v1/voices", "The voices", responses={"200": ("names", {JSON: m.Voices})},
       open=True),
    Op("get", "/v1/cache", "Phrase-cache counters",
       responses={"200": ("hits, misses, bytes", {JSON: m.CacheStats})}),
    Op("get", "/healthz", "Health, drain state, GC and loop stalls, totals",
       responses={"200": ("ok or draining", {JSON: m.Health})}, open=True),
    Op("get", "/metrics", "Prometheus metrics",
       responses={"200": ("text exposition", {"text/plain": "text"})}, open=True),
    Op("get", "/openapi.json", "This document",
       responses={"200": ("OpenAPI 3.1", {JSON: "object"})}, open=True),
    Op("get", "/docs", "This document, rendered", responses={"200": ("HTML", {"text/html":
                                                                            "text"})},
       open=True),
    Op("get", "/docs/{file}", "Swagger UI's files, from the installed swagger-ui-bundle-v2",
       responses={"200": ("the file", {media: "text" for media in SWAGGER_UI_FILES.values()})},
       open=True),
)


def _elevenlabs_ops() -> tuple[Op, ...]:
    """The ElevenLabs-compatible routes (gateway/elevenlabs), under each of their prefixes."""
    fmt = ("output_format", "pcm_<rate>, ulaw_8000, mp3_<rate>_<kbps>, opus_48000_<kbps>",
           {"type": "string", "enum": el_formats.names()})
    audio: dict[str, Body] = {media: "binary" for media in
                              ("audio/pcm", "audio/basic", "audio/mpeg", "audio/ogg")}
    ws = (fmt, ("inactivity_timeout", "seconds without a message before the socket closes",
                {"type": "number", "exclusiveMinimum": 0}),
          ("model_id", "any", {"type": "string"}), ("auto_mode", "accepted", {"type": "string"}),
          ("sync_alignment", "accepted", {"type": "string"}),
          ("first_words", "ours: the first clause goes once this many words are complete",
           {"type": "integer", "minimum": 0, "maximum": 10}))
    ops: list[Op] = []
    for prefix in EL_PREFIXES:
        base = f"{prefix}/text-to-speech/{{voice_id}}"
        ops += [
            Op("get", f"{base}/stream-input", "ElevenLabs-compatible WebSocket: one context",
               responses={"101": ("the WebSocket (see gateway/elevenlabs/socket.py)", {})},
               query=ws),
            Op("get", f"{base}/multi-stream-input",
               "ElevenLabs-compatible WebSocket: contexts interleaved",
               responses={"101": ("the WebSocket (see gateway/elevenlabs/socket.py)", {})},
               query=ws),
            Op("post", f"{base}/stream", "ElevenLabs-compatible speech, streamed as produced",
               {JSON: el.ElevenLabsSpeech}, {"200": ("the audio", audio)}, query=(fmt,)),
            Op("post", f"{base}/stream/with-timestamps",
               "ElevenLabs-compatible speech with character timings, one JSON per line",
               {JSON: el.ElevenLabsSpeech},
               {"200": ("audio_base64 + alignment lines", {"application/x-ndjson": "text"})},
               query=(fmt,)),
            Op("post", base, "ElevenLabs-compatible speech, the whole file",
               {JSON: el.ElevenLabsSpeech}, {"200": ("the audio", audio)}, query=(fmt,)),
            Op("post", f"{base}/with-timestamps",
               "ElevenLabs-compatible speech with character timings, one JSON object",
               {JSON: el.ElevenLabsSpeech}, {"200": ("audio + alignment",
                                                     {JSON: el.ElevenLabsTimedAudio})},
               query=(fmt,)),
        ]
    ops.append(Op("get", "/v1/elevenlabs/voices", "The voices, in ElevenLabs' shape",
                  responses={"200": ("voice_id, name", {JSON: el.ElevenLabsVoices})},
                  open=True))
    return tuple(ops)


OPERATIONS += _elevenlabs_ops()


def _query_schema(
    name: str, schema: dict[str, Any], voices: list[str], max_chars: int
) -> dict[str, Any]:
    if name == "voice":
        return {"type": "string", "enum": voices}
    if name == "input":  # a URL's request line is at most 8 KB (aiohttp's limit)
        return {**schema, "maxLength": min(max_chars, MAX_QUERY_TEXT), "pattern": r"\S"}
    return schema


def _schema(body: Body) -> dict[str, Any]:
    if isinstance(body, str):
        if body == "binary":
            return {"type": "string", "format": "binary"}
        if body == "object":
            return {"type": "object"}
        if body == "call":  # a Realtime call's multipart form
            return {"type": "object", "required": ["sdp"], "properties": {
                "sdp": {"type": "string"}, "session": {"type": "string"}}}
        if body == "sse":  # each event: its type and its JSON data
            return {"type": "object", "properties": {
                "event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"},
            }}
        return {"type": "string"}
    return {"$ref": f"#/components/schemas/{body.__name__}"}


def _constrain(defs: dict[str, Any], voices: list[str], max_chars: int) -> None:
    """What the models check against the running gateway (its voices, its text limit) goes
    into the document too, so a client (or Schemathesis) knows exactly what is accepted."""
    from gateway.http.openai_speech import OPENAI_VOICES

    names = {"type": "string", "enum": voices}
    text = {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": r"\S"}
    for name, key, schema in (
        ("SpeechCreate", "text", text), ("FrameStreamRequest", "text", text),
        ("ElevenLabsSpeech", "text", text),
        ("SpeechRequest", "input", text),
        ("SpeechCreate", "voice", {"anyOf": [names, {"type": "null"}]}),
        ("FrameStreamRequest", "voice", {"anyOf": [names, {"type": "null"}]}),
        ("SpeechRequest", "voice", {"anyOf": [
            {"type": "string", "enum": [*voices, *OPENAI_VOICES]},
            {"type": "object", "properties": {"id": names}, "required": ["id"]},
        ]}),
    ):
        props = defs.get(name, {}).get("properties", {})
        if key in props:
            kept = {k: v for k, v in props[key].items() if k in ("description", "default")}
            props[key] = {**kept, **schema}


def document(
    auth: bool = False, voices: list[str] | None = None, max_chars: int = 100_000
) -> dict[str, Any]:
    model_set: dict[str, type[BaseModel]] = {"ErrorBody": m.ErrorBody}
    for op in OPERATIONS:
        for body in [*op.request.values(),
                     *(b for _, media in op.responses.values() for b in media.values())]:
            if not isinstance(body, str):
                model_set[body.__name__] = body
    _, defs = models_json_schema(
        [(model, "validation") for model in model_set.values()],
        ref_template="#/components/schemas/{model}",
    )
    schemas = defs.get("$defs", {})
    voice_names = voices or ["default"]
    _constrain(schemas, voice_names, max_chars)
    paths: dict[str, dict[str, Any]] = {}
    error = {"description": "the request was refused",
             "content": {JSON: {"schema": _schema(m.ErrorBody)}}}
    for op in OPERATIONS:
        params = [
            {"name": name, "in": "path", "required": True, "schema": schema}
            for name, schema in PATH_PARAMS.items() if "{" + name + "}" in op.path
        ] + [
            {"name": "voice_id", "in": "path", "required": True,
             "schema": {"type": "string", "enum": [*voice_names, *PREMADE]}}
            for _ in range("{voice_id}" in op.path)
        ] + [
            {"name": name, "in": "query", "required": "(required)" in text,
             "description": text, "schema": _query_schema(name, schema, voice_names, max_chars)}
            for name, text, schema in op.query
        ]
        operation: dict[str, Any] = {
            "summary": op.summary,
            "operationId": f"{op.method}_{op.path.strip('/').replace('/', '_')}".replace(
                "{", "").replace("}", ""),
            "parameters": params,
            "responses": {
                status: {
                    "description": text,
                    **({"content": {k: {"schema": _schema(v)} for k, v in media.items()}}
                       if media else {}),
                }
                for status, (text, media) in op.responses.items()
            } | {"4XX": error},
        }
        if op.request:
            operation["requestBody"] = {
                "required": True,
                "content": {k: {"schema": _schema(v)} for k, v in op.request.items()},
            }
        if auth and not op.open:
            operation["security"] = [{"bearer": []}]
            if op.method == "get":  # RFC 6750 2.3, for <audio src> and EventSource
                operation["security"].append({"access_token": []})
        paths.setdefault(op.path, {})[op.method] = operation
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "Voice gateway", "version": __version__,
                 "description": "Real-time TTS over WebRTC (WHEP-style) and HTTP streaming."},
        "paths": paths,
        "components": {"schemas": schemas},
    }
    if auth:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "access_token": {"type": "apiKey", "in": "query", "name": "access_token",
                             "description": "GET only: the bearer token in the URL (RFC 6750 "
                             "section 2.3), for clients that cannot send headers"},
        }
    return doc


@cache
def swagger_ui_file(name: str) -> Path | None:
    """The path of one of Swagger UI's files in the installed package; None when ``name`` is not
    one /docs loads, or the package (or the file) is not installed."""
    if name not in SWAGGER_UI_FILES:
        return None
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    path = Path(str(swagger_ui_path)) / name
    return path if path.is_file() else None


DOCS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Voice gateway API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"></head>
<body><div id="ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui"});</script>
</body></html>
"""
