"""The Realtime front door's routes: ``GET /v1/realtime`` (WebSocket), wired by ``install``.

Each connection is admitted by the session registry (its cap, the drain: refused with 503
before the upgrade) and registered as a session of ours for its life. It needs the gateway's
hearing (``--duplex``: the recogniser and the agent); without it the route answers 503.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web

from gateway.conversation.conversation import Conversation
from gateway.http.openai_speech import OPENAI_VOICES
from gateway.realtime.beta import session_to_beta, session_to_ga, wants_beta
from gateway.realtime.call import RealtimeCall
from gateway.realtime.config import SessionConfig
from gateway.realtime.engine import RealtimeEngine
from gateway.realtime.keys import DEFAULT_S, EphemeralKeys
from gateway.realtime.keys import PREFIX as KEY_PREFIX
from gateway.realtime.outbox import Outbox
from gateway.realtime.protocol import MAX_MESSAGE_BYTES, ClientError, new_id
from gateway.realtime.response import Hearing
from gateway.realtime.session import RealtimeSession
from gateway.realtime.websocket import serve, serve_control
from gateway.session.registry import Draining, SessionLimitReached, SessionRegistry
from gateway.session.session import Session
from gateway.tts.base import Synthesizer
from gateway.tts.registry import UnknownVoice, VoiceRegistry
from gateway.webrtc.sdp_policy import SdpRejected

DEFAULT_MODEL = "gpt-realtime"
#: the subprotocols browsers send (``realtime``, ``openai-insecure-api-key.<key>``,
#: ``openai-beta.realtime-v1``): ``realtime`` is chosen when offered
SUBPROTOCOL = "realtime"
KEY_PROTOCOL = "openai-insecure-api-key."


@dataclass(eq=False)
class RealtimeFrontDoor:
    registry: SessionRegistry
    voices: VoiceRegistry
    keys: EphemeralKeys = field(default_factory=EphemeralKeys)

    @property
    def available(self) -> bool:
        return self.registry.duplex is not None

    def hearing(self) -> Hearing:
        factory = self.registry.duplex
        assert factory is not None
        options = factory.options
        return Hearing(factory.recognizer, factory.agent, vad=options.vad,
                       barge_in_ms=options.barge_in_ms,
                       speculate_ms=options.asr_speculate_ms or None,
                       turn_silence_ms=options.turn_silence_ms)

    def voice(self, name: str) -> Synthesizer:
        """OpenAI's voice names (any case) are the reply voice, ours are themselves."""
        factory = self.registry.duplex
        if name.lower() in OPENAI_VOICES and factory is not None:
            return factory.voice
        try:
            return self.voices.get(name)
        except UnknownVoice:
            raise LookupError(f"no voice {name!r}; available: "
                              f"{', '.join([*self.voices.names, *OPENAI_VOICES])}") from None

    def granted(self, request: web.Request) -> dict[str, Any] | None:
        """The session config an ephemeral key bearer was issued with (None: no such key)."""
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.startswith("Bearer ") else next(
            (p.removeprefix(KEY_PROTOCOL) for p in offered_protocols(request)
             if p.startswith(KEY_PROTOCOL)), "")
        grant = self.keys.get(token) if token.startswith(KEY_PREFIX) else None
        return None if grant is None else grant.session

    def open(self, model: str, transport: str,
             granted: dict[str, Any] | None = None) -> RealtimeSession:
        """A new session, admitted and registered (raises Draining / SessionLimitReached)."""
        self.registry.admit()
        session_id = self.registry.new_id()
        options = self.registry.options
        conversation = Conversation(options.encoder, options.max_pending_utterances,
                                    encode=False)
        hearing = self.hearing()
        config = SessionConfig(model=model, default_silence_ms=hearing.turn_silence_ms)
        if granted is not None:
            config.update(granted)  # checked when the key was issued
        engine = RealtimeEngine(session_id, conversation, hearing, self.voice, config, Outbox())
        session = RealtimeSession(session_id, conversation, engine, transport,
                                  on_closed=self.registry.forget)
        self.registry.add(session)  # type: ignore[arg-type]
        return session

    def call_config(self, model: str, raw: Any,
                    granted: dict[str, Any] | None = None) -> SessionConfig:
        """A call's session config: the ephemeral key's, then its ``session`` part's (raises
        ClientError)."""
        config = SessionConfig(model=model, default_silence_ms=self.hearing().turn_silence_ms)
        if granted is not None:
            config.update(granted)
        if raw is not None:
            config.update(raw)
            try:
                self.voice(config.voice)
            except LookupError as exc:
                raise ClientError("unknown_voice", str(exc), "session.audio.output.voice") \
                    from None
        return config

    async def open_call(self, offer: str, config: SessionConfig, beta: bool,
                        requested_at: float | None = None) -> tuple[Session, str]:
        """A WebRTC call: a session of ours answered sendrecv, a Realtime engine as its
        hearing. Raises SdpRejected, Draining, SessionLimitReached."""
        hearing = self.hearing()
        session, answer = await self.registry.create(offer, requested_at, hear=False)
        engine = RealtimeEngine(session.id, session.conversation, hearing, self.voice, config,
                                Outbox(), audio_out="rtp")
        if beta:
            engine.use_beta()
        call = RealtimeCall(engine, session.webrtc.pc)
        session.duplex = call  # type: ignore[assignment]  # close() and state(): see call.py
        uplink = session.webrtc.uplink
        if uplink is not None:
            uplink.pcm.on_frame(lambda frame: call.hear(frame.pcm))
        engine.start()
        return session, answer


FRONT_DOOR = web.AppKey("realtime", RealtimeFrontDoor)
routes = web.RouteTableDef()


def unavailable() -> web.Response:
    """Without the hearing stack this gateway serves no Realtime API (404: not here)."""
    return refuse(404, "realtime_unavailable", "the Realtime API needs the gateway's hearing "
                  "(VAD, Whisper, the agent): start it with --duplex")


def refuse(status: int, code: str, message: str, retry: bool = False) -> web.Response:
    headers = {"Retry-After": "5"} if retry else None
    return web.json_response({"error": {"code": code, "message": message,
                                        "type": "invalid_request_error"}},
                             status=status, headers=headers)


def offered_protocols(request: web.Request) -> list[str]:
    raw = request.headers.get("Sec-WebSocket-Protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


@routes.get("/v1/realtime")
async def realtime_socket(request: web.Request) -> web.StreamResponse:
    door = request.app[FRONT_DOOR]
    if not door.available:
        return unavailable()
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, heartbeat=30.0)
    if not ws.can_prepare(request).ok:
        return refuse(426, "upgrade_required", "GET /v1/realtime is a WebSocket: upgrade it")
    offered = offered_protocols(request)
    chosen = SUBPROTOCOL if SUBPROTOCOL in offered else next(iter(offered), None)
    if chosen is not None:
        ws = web.WebSocketResponse(protocols=(chosen,), max_msg_size=MAX_MESSAGE_BYTES,
                                   heartbeat=30.0)
    if "call_id" in request.query:
        return await _control(request, ws)
    try:
        session = door.open(request.query.get("model") or DEFAULT_MODEL, "realtime-websocket",
                            door.granted(request))
    except Draining as exc:
        return refuse(503, "draining", str(exc), retry=True)
    except SessionLimitReached as exc:
        return refuse(503, "session_limit", str(exc), retry=True)
    if wants_beta(request.headers, offered):
        session.engine.use_beta()
    try:
        await ws.prepare(request)
    except BaseException:
        await session.close("upgrade failed")
        raise
    await serve(ws, session)
    return ws


async def _control(request: web.Request, ws: web.WebSocketResponse) -> web.StreamResponse:
    """``GET /v1/realtime?call_id=…``: a backend watches and steers a call (not with an
    ephemeral key: that is the browser's)."""
    door = request.app[FRONT_DOOR]
    if door.granted(request) is not None:
        return refuse(403, "forbidden", "an ephemeral key cannot open a call's control socket")
    session = door.registry.get(request.query["call_id"])
    call = getattr(session, "duplex", None)
    if session is None or not isinstance(call, RealtimeCall):
        return refuse(404, "call_not_found", "no such call (it may have ended)")
    await ws.prepare(request)
    await serve_control(ws, call.engine, session.closed)
    return ws


SDP = "application/sdp"
MAX_SDP_BYTES = 128 * 1024
MAX_SESSION_BYTES = 64 * 1024


async def _read_part(part: BodyPartReader, limit: int) -> str:
    data = bytearray()
    while chunk := await part.read_chunk(16 * 1024):
        data += chunk
        if len(data) > limit:
            raise ClientError("part_too_large", f"the {part.name!r} part is over {limit} bytes",
                              part.name)
    try:
        return data.decode(part.get_charset("utf-8"))
    except (UnicodeError, LookupError):
        raise ClientError("invalid_encoding", f"the {part.name!r} part is not UTF-8 text",
                          part.name) from None


async def _offer_and_session(request: web.Request) -> tuple[str, Any]:
    """The offer SDP and the ``session`` JSON (or None) of a call request."""
    if request.content_type == "multipart/form-data":
        reader = await request.multipart()
        parts: dict[str, str] = {}
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader) or part.name not in ("sdp", "session"):
                raise ClientError("unknown_parameter", "a call takes the parts sdp and session")
            limit = MAX_SDP_BYTES if part.name == "sdp" else MAX_SESSION_BYTES
            parts[part.name] = await _read_part(part, limit)
        if "sdp" not in parts:
            raise ClientError("missing_required_parameter", "the sdp part is required", "sdp")
        session = None
        if "session" in parts:
            try:
                session = json.loads(parts["session"])
            except ValueError:
                raise ClientError("invalid_json", "the session part is not JSON",
                                  "session") from None
        return parts["sdp"], session
    if request.content_type == SDP:
        if (request.content_length or 0) > MAX_SDP_BYTES:
            raise ClientError("sdp_too_large", f"the offer is over {MAX_SDP_BYTES} bytes", "sdp")
        body = await request.content.read(MAX_SDP_BYTES + 1)
        if len(body) > MAX_SDP_BYTES:
            raise ClientError("sdp_too_large", f"the offer is over {MAX_SDP_BYTES} bytes", "sdp")
        return body.decode("utf-8", "replace"), None
    raise ClientError("unsupported_media_type", "send the offer as multipart/form-data (sdp, "
                      "session) or application/sdp")


async def _call(request: web.Request, model: str) -> web.StreamResponse:
    arrived = time.monotonic()
    door = request.app[FRONT_DOOR]
    if not door.available:
        return unavailable()
    beta = wants_beta(request.headers, [])
    try:
        offer, raw = await _offer_and_session(request)
        if beta and raw is not None:
            raw = session_to_ga(raw)
        config = door.call_config(model if raw is None else raw.get("model", model), raw,
                                  door.granted(request))
    except ClientError as exc:
        return refuse(415 if exc.code == "unsupported_media_type" else 400, exc.code,
                      exc.message)
    try:
        session, answer = await door.open_call(offer, config, beta, arrived)
    except SdpRejected as exc:
        return refuse(400, exc.code, exc.message)
    except Draining as exc:
        return refuse(503, "draining", str(exc), retry=True)
    except SessionLimitReached as exc:
        return refuse(503, "session_limit", str(exc), retry=True)
    return web.Response(status=201, text=answer, content_type=SDP,
                        headers={"Location": f"/v1/realtime/calls/{session.id}"})


@routes.post("/v1/realtime/calls")
async def create_call(request: web.Request) -> web.StreamResponse:
    """GA WebRTC: ``client.realtime.calls.create(sdp=..., session=...)``."""
    return await _call(request, request.query.get("model") or DEFAULT_MODEL)


@routes.post("/v1/realtime")
async def create_call_sdp(request: web.Request) -> web.StreamResponse:
    """The older WebRTC flow: the offer as an ``application/sdp`` body, ``?model=...``."""
    return await _call(request, request.query.get("model") or DEFAULT_MODEL)


@routes.post("/v1/realtime/calls/{call_id}/hangup")
async def hang_up(request: web.Request) -> web.Response:
    session = request.app[FRONT_DOOR].registry.get(request.match_info["call_id"])
    if session is None:
        return refuse(404, "call_not_found", "no such call (it may have ended)")
    await session.close("deleted by client")
    return web.Response(status=200)


async def _issue(request: web.Request) -> tuple[dict[str, Any] | None, int, SessionConfig]:
    """An ephemeral key for the request's ``session`` (raises ClientError)."""
    door = request.app[FRONT_DOOR]
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError:
        raise ClientError("invalid_json", "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ClientError("invalid_json", "the body must be a JSON object")
    expires = body.get("expires_after") or {}
    seconds = expires.get("seconds", DEFAULT_S) if isinstance(expires, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, int) or \
            (isinstance(expires, dict) and expires.get("anchor", "created_at") != "created_at"):
        raise ClientError("invalid_value", "expires_after must be {\"anchor\": \"created_at\", "
                          "\"seconds\": 10-7200}", "expires_after")
    raw = body.get("session")
    if raw is not None and not isinstance(raw, dict):
        raise ClientError("invalid_value", "session must be an object", "session")
    return raw, seconds, door.call_config(str((raw or {}).get("model") or DEFAULT_MODEL), raw)


@routes.post("/v1/realtime/client_secrets")
async def client_secrets(request: web.Request) -> web.Response:
    """GA: ``client.realtime.client_secrets.create(session=...)`` -> ``{value: "ek_…"}``."""
    if not request.app[FRONT_DOOR].available:
        return unavailable()
    try:
        raw, seconds, config = await _issue(request)
        door = request.app[FRONT_DOOR]
        value, expires_at = door.keys.issue(raw, seconds, door.registry.id_prefix)
    except ClientError as exc:
        return refuse(400, exc.code, exc.message)
    except ValueError as exc:
        return refuse(400, "invalid_value", str(exc))
    return web.json_response({"value": value, "expires_at": expires_at,
                              "session": config.as_json(new_id("sess"), expires_at)})


@routes.post("/v1/realtime/sessions")
async def beta_sessions(request: web.Request) -> web.Response:
    """Beta: a session's config in the beta shape -> ``{client_secret: {value, expires_at}}``."""
    if not request.app[FRONT_DOOR].available:
        return unavailable()
    try:
        try:
            beta = await request.json() if request.can_read_body else {}
        except ValueError:
            raise ClientError("invalid_json", "the body is not valid JSON") from None
        raw = session_to_ga({k: v for k, v in beta.items() if k != "model"}) \
            if isinstance(beta, dict) else None
        if raw is None:
            raise ClientError("invalid_json", "the body must be a JSON object")
        door = request.app[FRONT_DOOR]
        config = door.call_config(str(beta.get("model") or DEFAULT_MODEL), raw)
        value, expires_at = door.keys.issue(raw, 60, door.registry.id_prefix)  # beta: a minute
    except ClientError as exc:
        return refuse(400, exc.code, exc.message)
    return web.json_response({**session_to_beta(config.as_json(new_id("sess"), expires_at)),
                              "client_secret": {"value": value, "expires_at": expires_at}})


def install(app: web.Application, registry: SessionRegistry, voices: VoiceRegistry,
            keys: EphemeralKeys | None = None) -> None:
    app[FRONT_DOOR] = RealtimeFrontDoor(registry, voices,
                                        EphemeralKeys() if keys is None else keys)
    app.add_routes(routes)
