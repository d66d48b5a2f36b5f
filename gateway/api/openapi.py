"""The API described: an OpenAPI 3.1 document generated from the request/response models that
validate input (api/models.py, stream/openai_speech.py), served at ``/openapi.json``, rendered
at ``/docs`` with Swagger UI (swagger-ui-dist from npm, installed into web/vendor by
``make``; no CDN at run time). ``OPERATIONS`` names each route's models; a test checks that
every route the app serves is described, so the document cannot drift from the routes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from gateway import __version__
from gateway.api import models as m
from gateway.stream.frame_records import MEDIA_TYPE as FRAMES
from gateway.stream.openai_speech import MEDIA_TYPES, SpeechRequest

SDP, SDPFRAG = "application/sdp", "application/trickle-ice-sdpfrag"
JSON, SSE = "application/json", "text/event-stream"
MAX_QUERY_TEXT = 2000  # characters of text in a GET query (percent-encoded, within 8 KB)
Body = type[BaseModel] | str  # a model (JSON) or a media type of a text/binary body


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
    Op("post", "/v1/speech/stream", "The gateway's framed Opus stream",
       {JSON: m.FrameStreamRequest}, {"200": ("frame records", {FRAMES: "binary"})}),
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
)


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
        if body == "sse":  # each event: its type and its JSON data
            return {"type": "object", "properties": {
                "event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"},
            }}
        return {"type": "string"}
    return {"$ref": f"#/components/schemas/{body.__name__}"}


def _constrain(defs: dict[str, Any], voices: list[str], max_chars: int) -> None:
    """What the models check against the running gateway (its voices, its text limit) goes
    into the document too, so a client (or Schemathesis) knows exactly what is accepted."""
    from gateway.stream.openai_speech import OPENAI_VOICES

    names = {"type": "string", "enum": voices}
    text = {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": r"\S"}
    for name, key, schema in (
        ("SpeechCreate", "text", text), ("FrameStreamRequest", "text", text),
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
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in ("session_id", "utterance_id") if "{" + name + "}" in op.path
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


DOCS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Voice gateway API</title>
<link rel="stylesheet" href="/web/vendor/swagger-ui/swagger-ui.css"></head>
<body><div id="ui"></div>
<script src="/web/vendor/swagger-ui/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#ui"});</script>
</body></html>
"""
