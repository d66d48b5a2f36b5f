"""The HTTP API: WHEP-style sessions, trickle ICE, speech, state, health."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web
from aiortc import RTCConfiguration
from aiortc import sdp as aiortc_sdp
from prometheus_client import CONTENT_TYPE_LATEST

from gateway import __version__
from gateway.api.errors import ApiError
from gateway.api.models import JsonOffer, SpeechAppend, SpeechCreate, parse
from gateway.api.openapi import DOCS_PAGE, SWAGGER_UI_FILES, swagger_ui_file
from gateway.api.sdp_limits import CandidateBudget, SdpLimitExceeded, SdpLimits, checked_sdp
from gateway.http.speakable import unspeakable
from gateway.runtime import logs
from gateway.runtime.metrics import METRICS
from gateway.runtime.stall_watch import StallWatch
from gateway.session.registry import Draining, SessionLimitReached, SessionRegistry
from gateway.session.session import Session
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.speaker import SpeechQueueFull
from gateway.speech.text_feed import FedVoice, TextFeed
from gateway.speech.utterance import FINAL_STATES
from gateway.tts.base import Synthesizer
from gateway.tts.registry import UnknownVoice, VoiceRegistry
from gateway.webrtc.leg import WebRtcLeg
from gateway.webrtc.sdp_policy import SdpRejected

SDP = "application/sdp"
SDPFRAG = "application/trickle-ice-sdpfrag"
JSON = "application/json"

REGISTRY = web.AppKey("registry", SessionRegistry)
VOICES = web.AppKey("voices", VoiceRegistry)
LIMITS = web.AppKey("limits", dict)
CACHE = web.AppKey("phrase_cache", PhraseCache)
STALL_WATCH = web.AppKey("stall_watch", StallWatch)
OPENAPI = web.AppKey("openapi", dict)
SDP_LIMITS = web.AppKey("sdp_limits", SdpLimits)
CANDIDATES = web.AppKey("candidate_budget", CandidateBudget)
SRTP_SENDER = web.AppKey("srtp_sender", dict)  # who protects outbound RTP (--srtp-sender)
# Scale-out (gateway.cluster): Locations are absolute under this URL (--advertise-url), and
# a supervised worker adds its load to /healthz
BASE_URL = web.AppKey("base_url", str)
HEALTH_EXTRA = web.AppKey("health_extra", Callable[[], dict[str, Any]])

routes = web.RouteTableDef()


def _require_type(request: web.Request, *allowed: str) -> str:
    if request.content_type not in allowed:
        got = request.content_type or "none"
        raise ApiError(
            415, "unsupported_media_type",
            f"Content-Type {got} is not accepted here; use {' or '.join(allowed)}",
        )
    return request.content_type


async def body_text(request: web.Request) -> str:
    """The body as text in its declared charset (UTF-8 by default); a body that is not valid
    in it, or a charset nobody knows, is the client's error, not ours."""
    try:
        return await request.text()
    except UnicodeError as exc:  # UnicodeDecodeError, and codecs that fail otherwise (punycode)
        raise ApiError(400, "invalid_encoding",
                       f"the body is not valid in its charset: {exc}") from exc
    except LookupError as exc:
        raise ApiError(415, "unsupported_charset", f"unknown charset: {exc}") from exc


async def _json_body(request: web.Request) -> dict[str, Any]:
    text = await body_text(request)
    try:
        body = json.loads(text)
    except RecursionError:
        raise ApiError(400, "invalid_json", "the JSON body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and int literals past Python's digit limit
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    return body


def checked_text(request: web.Request, text: str) -> str:
    limit = request.app[LIMITS]["max_text_chars"]
    if not text.strip():
        raise ApiError(400, "empty_text", "text must be a non-empty string")
    if (reason := unspeakable(text)) is not None:
        raise ApiError(400, "invalid_text", reason)
    if len(text) > limit:
        raise ApiError(400, "text_too_long", f"text has {len(text)} characters; limit {limit}")
    return text


def voice_named(request: web.Request, name: str | None) -> Synthesizer:
    voices = request.app[VOICES]
    try:
        return voices.get(name)
    except UnknownVoice as exc:
        raise ApiError(
            400, "unknown_voice", f"no voice {name!r}; available: {', '.join(voices.names)}"
        ) from exc


#: time.monotonic() when the request reached the app
ARRIVED_AT = web.RequestKey("arrived_at", float)


@web.middleware
async def stamp_arrival(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Date each request as it reaches the app (headers parsed, body not yet read): the start
    of the speech and connect timelines (``Utterance.requested_at``, ``WebRtcLeg.requested_at``).
    """
    request[ARRIVED_AT] = time.monotonic()
    return await handler(request)


def arrived_at(request: web.Request) -> float:
    return request.get(ARRIVED_AT) or time.monotonic()


def _session(request: web.Request) -> Session:
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    if session is None:
        raise ApiError(404, "unknown_session", "no such session (it may have ended)")
    session.touch()
    logs.bind(session=session.id)  # what this request (and the tasks it starts) logs
    return session


def ice_server_links(config: RTCConfiguration) -> list[str]:
    """RFC 9725 §4.6: each configured STUN/TURN server as a ``Link`` to the client."""
    links = []
    for server in config.iceServers or []:
        urls = [server.urls] if isinstance(server.urls, str) else list(server.urls)
        for url in urls:
            link = f'<{url}>; rel="ice-server"'
            if server.username:
                link += f'; username="{server.username}"'
            if server.credential:
                link += f'; credential="{server.credential}"; credential-type="password"'
            links.append(link)
    return links


def _location(request: web.Request, session: Session) -> str:
    return f"{request.app.get(BASE_URL, '')}/v1/sessions/{session.id}"


@routes.post("/v1/sessions")
async def create_session(request: web.Request) -> web.Response:
    kind = _require_type(request, SDP, JSON)
    if kind == SDP:
        offer = await body_text(request)
    else:
        offer = parse(JsonOffer, await _json_body(request)).sdp
    offer, candidates = _checked(request, offer)
    try:
        session, answer = await request.app[REGISTRY].create(offer, arrived_at(request))
        request.app[CANDIDATES].charge(session.webrtc, candidates)
    except SdpRejected as exc:
        raise ApiError(400, exc.code, exc.message) from exc
    except Draining as exc:
        raise ApiError(503, "draining", str(exc), {"Retry-After": "5"}) from exc
    except SessionLimitReached as exc:
        raise ApiError(503, "session_limit", str(exc), {"Retry-After": "5"}) from exc
    headers = {"Location": _location(request, session), "ETag": session.webrtc.etag}
    links = ice_server_links(request.app[REGISTRY].rtc_config)
    if links:
        headers["Link"] = ", ".join(links)
    if kind == SDP:
        return web.Response(status=201, text=answer, content_type=SDP, headers=headers)
    return web.json_response(
        {"id": session.id, "type": "answer", "sdp": answer,
         "location": _location(request, session)},
        status=201,
        headers=headers,
    )


@routes.get("/v1/sessions/{session_id}")
async def get_session(request: web.Request) -> web.Response:
    return web.json_response(_session(request).state())


@routes.delete("/v1/sessions/{session_id}")
async def delete_session(request: web.Request) -> web.Response:
    """204, also for a session that just ended by itself (a WHEP client that closes its peer
    connection before it DELETEs: DELETE is idempotent, RFC 9110 §9.2.2)."""
    registry = request.app[REGISTRY]
    if registry.get(request.match_info["session_id"]) is None and registry.ended_lately(
        request.match_info["session_id"]
    ):
        return web.Response(status=204)
    session = _session(request)
    await session.close("deleted by client")
    return web.Response(status=204)


def checked_offer(request: web.Request, text: str) -> tuple[str, int]:
    """An offer within the SDP limits (else 400 naming the limit), and its candidate count."""
    return _checked(request, text)


def _checked(request: web.Request, text: str, fragment: bool = False) -> tuple[str, int]:
    try:
        return checked_sdp(text, request.app[SDP_LIMITS], fragment=fragment)
    except SdpLimitExceeded as exc:
        raise ApiError(400, exc.code, f"{exc.limit}: {exc.message}") from exc


def parse_sdpfrag(text: str, default_mid: str | None) -> tuple[list[Any], bool, str | None]:
    """Candidates, end-of-candidates flag and ice-ufrag from a trickle-ice-sdpfrag body."""
    candidates: list[Any] = []
    end = False
    ufrag: str | None = None
    mid = default_mid
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("a=mid:"):
            mid = line[6:]
        elif line.startswith("a=ice-ufrag:"):
            ufrag = line[12:]
        elif line.startswith("a=candidate:"):
            try:
                candidate = aiortc_sdp.candidate_from_sdp(line[12:])
            except Exception as exc:  # aiortc's parser asserts and indexes blindly
                raise ApiError(400, "invalid_candidate", f"cannot parse {line!r}: {exc}") from exc
            candidate.sdpMid = mid
            candidates.append(candidate)
        elif line == "a=end-of-candidates":
            end = True
    return candidates, end, ufrag


def sdpfrag_credentials(text: str) -> tuple[str | None, str | None]:
    """The ice-ufrag and ice-pwd lines of an sdpfrag (an ICE restart carries new ones)."""
    ufrag = pwd = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("a=ice-ufrag:"):
            ufrag = line[12:]
        elif line.startswith("a=ice-pwd:"):
            pwd = line[10:]
    return ufrag, pwd


@routes.patch("/v1/sessions/{session_id}")
async def trickle_ice(request: web.Request) -> web.Response:
    """Trickle (204; no If-Match needed, as real clients send none) or, with new ICE
    credentials and ``If-Match`` (``"*"`` or the current ETag), an ICE restart: 200 with the
    gateway's new sdpfrag and ETag. A stale ETag is 412; a failed restart leaves the session as
    it was."""
    session = _session(request)
    return await patch_webrtc_leg(request, session.webrtc)


async def patch_webrtc_leg(request: web.Request, leg: WebRtcLeg) -> web.Response:
    """A WHEP resource's PATCH on ``leg`` (a session's, or a channel listener's): trickle or
    ICE restart, as ``trickle_ice`` says."""
    _require_type(request, SDPFRAG)
    body, count = _checked(request, await body_text(request), fragment=True)
    try:
        request.app[CANDIDATES].charge(leg, count)
    except SdpLimitExceeded as exc:
        raise ApiError(400, "sdp_limit", f"{exc.limit}: {exc.message}") from exc
    match = request.headers.get("If-Match")
    if match is not None and match.strip() not in ("*", '"*"', leg.etag):
        raise ApiError(412, "etag_mismatch", f"If-Match {match} is not the ICE session's ETag "
                       f"{leg.etag}", {"ETag": leg.etag})
    mid = leg.offer.audio_mid if leg.offer else None
    candidates, end, _ = parse_sdpfrag(body, mid)
    ufrag, pwd = sdpfrag_credentials(body)
    if ufrag is not None and ufrag != leg.remote_ufrag:
        if match is None:
            raise ApiError(428, "if_match_required",
                           'an ICE restart (new ice-ufrag) needs If-Match: "*" or the ETag')
        if not pwd:
            raise ApiError(400, "invalid_sdpfrag", "an ICE restart needs a=ice-pwd too")
        try:
            answer = leg.restart_ice(ufrag, pwd)
            await leg.add_ice_candidates(candidates, end)
        except (ValueError, TypeError) as exc:
            raise ApiError(400, "ice_restart_failed",
                           f"the ICE restart was refused: {exc}") from exc
        return web.Response(status=200, text=answer, content_type=SDPFRAG,
                            headers={"ETag": leg.etag})
    try:
        await leg.add_ice_candidates(candidates, end)
    except Exception as exc:  # aiortc rejects a candidate it cannot place (unknown mid...)
        raise ApiError(400, "invalid_candidate", f"the candidate was refused: {exc}") from exc
    return web.Response(status=204)


@routes.post("/v1/sessions/{session_id}/speech")
async def speak(request: web.Request) -> web.Response:
    session = _session(request)
    _require_type(request, JSON)
    body = parse(SpeechCreate, await _json_body(request))
    text = checked_text(request, body.text)
    voice = voice_named(request, body.voice)
    feed = None
    if body.open:  # more text follows (speech/text_feed.py)
        feed = TextFeed(request.app[LIMITS]["max_text_chars"])
        feed.append(text)
        voice = FedVoice(voice, feed)  # type: ignore[assignment]
    try:
        utterance = session.speaker.say(
            "" if feed else text, voice, interrupt=body.interrupt,
            requested_at=arrived_at(request)
        )
    except SpeechQueueFull as exc:
        raise ApiError(429, "speech_queue_full", str(exc)) from exc
    if feed is not None:
        utterance.text_feed, utterance.chars = feed, feed.chars
    location = f"{_location(request, session)}/speech/{utterance.id}"
    return web.json_response(
        {"id": utterance.id, "state": utterance.state.value, "voice": voice.name,
         "location": location},
        status=202,
        headers={"Location": location},
    )


@routes.post("/v1/sessions/{session_id}/speech/{utterance_id}/text")
async def append_text(request: web.Request) -> web.Response:
    """More text for an open utterance (``"open": true``): ``{"text", "flush"?, "end"?}``."""
    session = _session(request)
    _require_type(request, JSON)
    body = parse(SpeechAppend, await _json_body(request))
    utterance = session.speaker.get(request.match_info["utterance_id"])
    if utterance is None:
        raise ApiError(404, "unknown_utterance", "no such utterance in this session's history")
    feed = utterance.text_feed
    if feed is None:
        raise ApiError(409, "not_open", "this utterance was given all its text at once")
    if feed.ended or utterance.state in FINAL_STATES:
        raise ApiError(409, "text_ended", f"this utterance's text has ended "
                       f"({utterance.state.value})")
    try:
        feed.append(body.text, flush=body.flush, end=body.end)
    except ValueError as exc:
        raise ApiError(400, "text_too_long", str(exc)) from exc
    utterance.chars = feed.chars
    return web.json_response({"id": utterance.id, "state": utterance.state.value,
                              "chars": feed.chars, "ended": feed.ended})


@routes.delete("/v1/sessions/{session_id}/speech")
async def interrupt(request: web.Request) -> web.Response:
    session = _session(request)
    return web.json_response({"interrupted": session.speaker.interrupt()})


@routes.get("/v1/sessions/{session_id}/speech/{utterance_id}")
async def get_utterance(request: web.Request) -> web.Response:
    """An utterance's state; ``?wait=1`` holds the reply until it has finished, ``?wait=sent``
    until its first frame was sent (or it ended without one); at most ``timeout`` (60) s."""
    session = _session(request)
    utterance = session.speaker.get(request.match_info["utterance_id"])
    if utterance is None:
        raise ApiError(404, "unknown_utterance", "no such utterance in this session's history")
    if request.query.get("wait") not in (None, "", "0", "false"):
        try:
            timeout = float(request.query.get("timeout", "60"))
        except ValueError:
            timeout = math.nan
        if not 0 <= timeout:  # NaN too
            raise ApiError(400, "invalid_timeout", "timeout must be a number of seconds >= 0")
        timeout = min(timeout, 60.0)
        event = utterance.started if request.query["wait"] == "sent" else utterance.finished
        if not event.is_set():
            closed = asyncio.ensure_future(session.closed.wait())
            finished = asyncio.ensure_future(event.wait())
            try:
                await asyncio.wait({closed, finished}, timeout=timeout,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                finished.cancel()
    return web.json_response({**utterance.as_json(), "words": [
        {"word": w.word, "start_ms": w.start_ms, "end_ms": w.end_ms} for w in utterance.words]})


@routes.get("/v1/sessions/{session_id}/events")
async def session_events(request: web.Request) -> web.StreamResponse:
    """The session's events as Server-Sent Events (``event: <type>``, ``data: <json>``) until
    it closes."""
    session = _session(request)
    return await stream_events(request, session.conversation.events, f"session {session.id}")


async def stream_events(request: web.Request, bus: Any, what: str) -> web.StreamResponse:
    """``bus``'s events (an ``EventBus``: ``subscribe()``, events with ``sse()``) as SSE until it
    closes; a comment line every 15 s keeps proxies from timing the stream out."""
    try:
        subscription = bus.subscribe()
    except OverflowError as exc:
        raise ApiError(429, "too_many_listeners", str(exc)) from exc
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    })
    try:
        await response.prepare(request)
        await response.write(f": events of {what}\n\n".encode())
        while True:
            try:
                event = await asyncio.wait_for(subscription.get(), 15.0)
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
                continue
            if event is None:
                break
            await response.write(event.sse())
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        subscription.close()
    return response


@routes.get("/v1/voices")
async def list_voices(request: web.Request) -> web.Response:
    voices = request.app[VOICES]
    return web.json_response({"default": voices.default, "voices": voices.names})


@routes.get("/v1/cache")
async def cache_stats(request: web.Request) -> web.Response:
    """The phrase cache's counters: hits, misses, evictions, bytes, disk."""
    return web.json_response(request.app[CACHE].stats())


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY]
    status = "draining" if registry.draining else "ok"
    body: dict[str, Any] = {"status": status, "version": __version__, "sessions": len(registry),
            "gc": asdict(registry.gc.stats),
            # every task is owned and cancelled on close: a count that grows with closed
            # sessions is a leak (tests/test_lifecycle.py checks the tasks themselves)
            "tasks": len(asyncio.all_tasks())}
    watch = request.app.get(STALL_WATCH)
    if watch is not None:
        body["stalls"] = {"count": watch.stats.stalls, "max_ms": watch.stats.max_stall_ms}
    body["metrics"] = METRICS.snapshot()
    # how RTP is protected and sent (--send-path): compiled, or python (the fallback)
    body["send_path"] = "python" if registry.udp_mux is None else registry.udp_mux.send_path
    if registry.udp_mux is not None:
        body["udp_mux"] = registry.udp_mux.stats()
    body["srtp_sender"] = request.app.get(SRTP_SENDER, {"mode": "libsrtp", "reason": ""})
    if METRICS.ice_consent.source is not None:
        body["ice_consent"] = METRICS.ice_consent.source()
    extra = request.app.get(HEALTH_EXTRA)
    if extra is not None:
        body.update(extra())
    return web.json_response(body)


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of the process's metrics (runtime/metrics.py)."""
    METRICS.set_session_states(request.app[REGISTRY].count_by_state)
    return web.Response(body=METRICS.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


@routes.get("/openapi.json")
async def openapi_document(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI])


@routes.get("/docs")
async def api_docs(request: web.Request) -> web.Response:
    """Swagger UI rendering /openapi.json; its files come from ``/docs/{file}``."""
    return web.Response(text=DOCS_PAGE, content_type="text/html")


@routes.get("/docs/{file}")
async def api_docs_file(request: web.Request) -> web.FileResponse:
    """One of Swagger UI's files, from the installed swagger-ui-bundle-v2 package (a 404 JSON
    error for any other name, or when the package is missing)."""
    name = request.match_info["file"]
    path = swagger_ui_file(name)
    if path is None:
        message = (f"{name!r} is not one of Swagger UI's files ({', '.join(SWAGGER_UI_FILES)})"
                   if name not in SWAGGER_UI_FILES else
                   f"Swagger UI's {name} is not installed (pip install swagger-ui-bundle-v2)")
        raise ApiError(404, "not_found", message)
    return web.FileResponse(path, headers={"Content-Type": SWAGGER_UI_FILES[name]})
