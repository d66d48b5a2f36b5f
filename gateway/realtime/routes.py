"""The Realtime front door's routes: ``GET /v1/realtime`` (WebSocket), wired by ``install``.

Each connection is admitted by the session registry (its cap, the drain: refused with 503
before the upgrade) and registered as a session of ours for its life. It needs the gateway's
hearing (``--duplex``: the recogniser and the agent); without it the route answers 503.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from gateway.realtime.config import SessionConfig
from gateway.realtime.engine import Hearing, RealtimeEngine
from gateway.realtime.outbox import Outbox
from gateway.realtime.protocol import MAX_MESSAGE_BYTES
from gateway.realtime.session import RealtimeSession
from gateway.realtime.websocket import serve
from gateway.session.conversation import Conversation
from gateway.session.registry import Draining, SessionLimitReached, SessionRegistry
from gateway.stream.openai_speech import OPENAI_VOICES
from gateway.tts.base import Synthesizer
from gateway.tts.registry import UnknownVoice, VoiceRegistry

DEFAULT_MODEL = "gpt-realtime"
#: the subprotocols browsers send (``realtime``, ``openai-insecure-api-key.<key>``,
#: ``openai-beta.realtime-v1``): ``realtime`` is chosen when offered
SUBPROTOCOL = "realtime"
KEY_PROTOCOL = "openai-insecure-api-key."


@dataclass(eq=False)
class RealtimeFrontDoor:
    registry: SessionRegistry
    voices: VoiceRegistry

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

    def open(self, model: str, transport: str) -> RealtimeSession:
        """A new session, admitted and registered (raises Draining / SessionLimitReached)."""
        self.registry.admit()
        session_id = self.registry.new_id()
        options = self.registry.options
        conversation = Conversation(options.encoder, options.max_pending_utterances,
                                    encode=False)
        hearing = self.hearing()
        config = SessionConfig(model=model, default_silence_ms=hearing.turn_silence_ms)
        engine = RealtimeEngine(session_id, conversation, hearing, self.voice, config, Outbox())
        session = RealtimeSession(session_id, conversation, engine, transport,
                                  on_closed=self.registry.forget)
        self.registry.add(session)  # type: ignore[arg-type]
        return session


FRONT_DOOR = web.AppKey("realtime", RealtimeFrontDoor)
routes = web.RouteTableDef()


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
        return refuse(503, "realtime_unavailable", "the Realtime API needs the gateway's "
                      "hearing: start it with --duplex")
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, heartbeat=30.0)
    if not ws.can_prepare(request).ok:
        return refuse(426, "upgrade_required", "GET /v1/realtime is a WebSocket: upgrade it")
    offered = offered_protocols(request)
    chosen = SUBPROTOCOL if SUBPROTOCOL in offered else next(iter(offered), None)
    if chosen is not None:
        ws = web.WebSocketResponse(protocols=(chosen,), max_msg_size=MAX_MESSAGE_BYTES,
                                   heartbeat=30.0)
    try:
        session = door.open(request.query.get("model") or DEFAULT_MODEL, "realtime-websocket")
    except Draining as exc:
        return refuse(503, "draining", str(exc), retry=True)
    except SessionLimitReached as exc:
        return refuse(503, "session_limit", str(exc), retry=True)
    try:
        await ws.prepare(request)
    except BaseException:
        await session.close("upgrade failed")
        raise
    await serve(ws, session)
    return ws


def install(app: web.Application, registry: SessionRegistry, voices: VoiceRegistry) -> None:
    app[FRONT_DOOR] = RealtimeFrontDoor(registry, voices)
    app.add_routes(routes)
