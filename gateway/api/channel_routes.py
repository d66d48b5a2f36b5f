"""The broadcast channel routes (gateway/channels, docs/channels.md).

``/v1/channels`` (create, list), ``/v1/channels/{name}`` (state, delete), ``…/speech`` (say,
interrupt), and the listeners' ways in: ``…/whep`` (WHEP: offer -> answer, ``Location`` of the
listener's own resource ``…/listeners/{id}`` with PATCH -- trickle, ICE restart -- and DELETE
as a session's), ``…/listen?format=opus|pcm|wav|frames`` (the live air as a response body) and
``…/events`` (SSE). Speaking routes need the ``speak`` right, listening ones ``listen``
(api/access.py).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from aiohttp import web

from gateway.api.access import grant_of, require
from gateway.api.channel_models import ChannelCreate
from gateway.api.errors import ApiError
from gateway.api.models import SpeechCreate, parse
from gateway.api.routes import (
    BASE_URL,
    CANDIDATES,
    JSON,
    SDP,
    _json_body,
    _require_type,
    arrived_at,
    body_text,
    checked_offer,
    checked_text,
    ice_server_links,
    patch_webrtc_leg,
    stream_events,
    voice_named,
)
from gateway.api.sdp_limits import SdpLimitExceeded
from gateway.api.speech_http import SEND_BUFFER_BYTES
from gateway.channels import census
from gateway.channels.broadcast import Broadcast
from gateway.channels.census import LOCAL_VIEW
from gateway.channels.channel import Channel, ChannelClosed, ChannelFull
from gateway.channels.http_listener import HttpListener
from gateway.channels.mirror import MIRROR_HEADER
from gateway.channels.registry import (
    ChannelExists,
    ChannelLimitReached,
    ChannelRegistry,
    InvalidChannelName,
)
from gateway.channels.whep_listener import WhepListener
from gateway.http import formatters
from gateway.http.chunked_writer import ChunkedBodyWriter
from gateway.http.openai_speech import MEDIA_TYPES
from gateway.http.transcode import UnsupportedFormat
from gateway.speech.speaker import SpeechQueueFull
from gateway.webrtc.sdp_policy import SdpRejected

CHANNELS = web.AppKey("channels", ChannelRegistry)
LISTEN_FORMATS = ("opus", "pcm", "wav", "frames")
routes = web.RouteTableDef()


def _base(request: web.Request) -> str:
    return f"{request.app.get(BASE_URL, '')}/v1/channels"


async def _channel(request: web.Request, right: str) -> Channel:
    """The channel, here; one that lives on another worker of the cluster: a 307 there."""
    name = request.match_info["name"]
    require(request, right, name)
    registry = request.app[CHANNELS]
    channel = registry.get(name)
    if channel is None:
        origin = await registry.locate(name)
        if origin is not None:
            location = f"{origin}{request.path_qs}"
            raise ApiError(307, "elsewhere", f"channel {name!r} lives on {origin}",
                           {"Location": location})
        raise ApiError(404, "unknown_channel", f"no channel named {name!r}")
    return channel


def _authorization(request: web.Request) -> str | None:
    header = request.headers.get("Authorization")
    token = request.query.get("access_token")
    return header if header is not None or not token else f"Bearer {token}"


async def _listenable(request: web.Request) -> Broadcast:
    """What a listener joins here: the channel, or this worker's mirror of it."""
    name = request.match_info["name"]
    require(request, "listen", name)
    broadcast = await request.app[CHANNELS].listenable(name, _authorization(request))
    if broadcast is None:
        raise ApiError(404, "unknown_channel", f"no channel named {name!r}")
    return broadcast


def _links(request: web.Request, name: str) -> dict[str, str]:
    base = f"{_base(request)}/{name}"
    return {"location": base, "whep": f"{base}/whep", "listen": f"{base}/listen",
            "events": f"{base}/events", "speech": f"{base}/speech"}


def _summary(request: web.Request, channel: Channel) -> dict[str, Any]:
    counts = channel.count_by_transport()
    current = channel.conversation.speaker.current
    return {"name": channel.name, "voice": channel.voice.name,
            "max_listeners": channel.max_listeners, "listeners": counts,
            "listener_count": sum(counts.values()),
            "playing": None if current is None else current.id,
            **_links(request, channel.name)}


@routes.post("/v1/channels")
async def create_channel(request: web.Request) -> web.Response:
    _require_type(request, JSON)
    body = parse(ChannelCreate, await _json_body(request))
    require(request, "speak", body.name)
    voice = voice_named(request, body.voice)
    try:
        channel = await request.app[CHANNELS].open(body.name, voice, body.max_listeners)
    except InvalidChannelName as exc:
        raise ApiError(400, "invalid_channel_name", str(exc)) from exc
    except ChannelExists as exc:
        raise ApiError(409, "channel_exists", str(exc)) from exc
    except ChannelLimitReached as exc:
        raise ApiError(503, "channel_limit", str(exc), {"Retry-After": "5"}) from exc
    except ValueError as exc:
        raise ApiError(400, "invalid_max_listeners", str(exc)) from exc
    summary = _summary(request, channel)
    return web.json_response(summary, status=201, headers={"Location": summary["location"]})


@routes.get("/v1/channels")
async def list_channels(request: web.Request) -> web.Response:
    """Every channel of the cluster, its listeners summed over the workers that hold them
    (channels/census.py, which asks each worker's ``LOCAL_VIEW``)."""
    only = grant_of(request).channel
    taken = await census.take(request.app[CHANNELS], _authorization(request), only)
    channels = [{**entry, **_links(request, name)}
                for name, entry in sorted(taken.channels.items())
                if only is None or name == only]
    return web.json_response({"channels": channels, "workers": taken.workers_json()})


@routes.get(LOCAL_VIEW)
async def local_channels(request: web.Request) -> web.Response:
    """This worker's own channels and mirrors with their listeners (``?name=``: one)."""
    only = grant_of(request).channel
    name = request.query.get("name")
    if name is not None and only is not None and name != only:
        return web.json_response({"worker": "", "channels": [], "mirrors": []})
    return web.json_response(census.local_view(request.app[CHANNELS], only=name or only))


@routes.get("/v1/channels/{name}")
async def get_channel(request: web.Request) -> web.Response:
    channel = await _channel(request, "listen")
    taken = await census.take(request.app[CHANNELS], _authorization(request), channel.name)
    state = channel.state()
    entry = taken.channels.get(channel.name) or {}
    return web.json_response({
        **state, "listeners_here": state["listeners"],
        "listeners": entry.get("listeners", state["listeners"]),
        "listener_count": entry.get("listener_count", sum(state["listeners"].values())),
        "workers": entry.get("workers", []), "census": taken.workers_json(),
        **_links(request, channel.name)})


@routes.delete("/v1/channels/{name}")
async def delete_channel(request: web.Request) -> web.Response:
    channel = await _channel(request, "speak")
    await request.app[CHANNELS].delete(channel.name, "deleted by client")
    return web.Response(status=204)


@routes.post("/v1/channels/{name}/speech")
async def channel_speak(request: web.Request) -> web.Response:
    channel = await _channel(request, "speak")
    _require_type(request, JSON)
    body = parse(SpeechCreate, await _json_body(request))
    text = checked_text(request, body.text)
    voice = voice_named(request, body.voice) if body.voice is not None else channel.voice
    try:
        utterance = channel.say(text, voice, interrupt=body.interrupt,
                                requested_at=arrived_at(request))
    except SpeechQueueFull as exc:
        raise ApiError(429, "speech_queue_full", str(exc)) from exc
    except ChannelClosed as exc:
        raise ApiError(404, "unknown_channel", str(exc)) from exc
    return web.json_response(
        {"id": utterance.id, "state": utterance.state.value, "voice": voice.name},
        status=202,
    )


@routes.delete("/v1/channels/{name}/speech")
async def channel_interrupt(request: web.Request) -> web.Response:
    channel = await _channel(request, "speak")
    return web.json_response({"interrupted": channel.interrupt()})


# --- WHEP listeners -------------------------------------------------------------------------


def _listener_location(request: web.Request, channel: Broadcast, listener_id: str) -> str:
    return f"{_base(request)}/{channel.name}/listeners/{listener_id}"


@routes.post("/v1/channels/{name}/whep")
async def channel_whep(request: web.Request) -> web.Response:
    """WHEP (RFC 9725): an SDP offer in, the answer out (201), ``Location`` of this
    listener's resource; it hears the channel from the next aired frame."""
    _require_type(request, SDP)
    channel = await _listenable(request)
    offer, candidates = checked_offer(request, await body_text(request))
    registry = request.app[CHANNELS]
    try:
        listener, answer = await registry.add_whep(channel, offer)
        request.app[CANDIDATES].charge(listener.leg, candidates)
    except SdpLimitExceeded as exc:
        raise ApiError(400, "sdp_limit", f"{exc.limit}: {exc.message}") from exc
    except SdpRejected as exc:
        raise ApiError(400, exc.code, exc.message) from exc
    except ChannelFull as exc:
        raise ApiError(503, "channel_full", str(exc), {"Retry-After": "5"}) from exc
    except ChannelClosed as exc:
        raise ApiError(404, "unknown_channel", str(exc)) from exc
    listener.leg.requested_at = arrived_at(request)
    headers = {"Location": _listener_location(request, channel, listener.id),
               "ETag": listener.leg.etag}
    links = ice_server_links(registry.rtc_config)
    if links:
        headers["Link"] = ", ".join(links)
    return web.Response(status=201, text=answer, content_type=SDP, headers=headers)


def _here(request: web.Request) -> Broadcast:
    """The channel or mirror that holds this worker's listeners (a listener's Location names
    its worker)."""
    name = request.match_info["name"]
    require(request, "listen", name)
    broadcast = request.app[CHANNELS].broadcast(name)
    if broadcast is None:
        raise ApiError(404, "unknown_channel", f"no channel named {name!r} here")
    return broadcast


def _whep_listener(request: web.Request) -> tuple[Broadcast, WhepListener]:
    channel = _here(request)
    listener = channel.listener(request.match_info["listener_id"])
    if not isinstance(listener, WhepListener):
        raise ApiError(404, "unknown_listener", "no such WHEP listener (it may have left)")
    return channel, listener


@routes.get("/v1/channels/{name}/listeners/{listener_id}")
async def get_listener(request: web.Request) -> web.Response:
    _, listener = _whep_listener(request)
    return web.json_response({**listener.state(), **listener.leg.state()})


@routes.patch("/v1/channels/{name}/listeners/{listener_id}")
async def patch_listener(request: web.Request) -> web.Response:
    _, listener = _whep_listener(request)
    return await patch_webrtc_leg(request, listener.leg)


@routes.delete("/v1/channels/{name}/listeners/{listener_id}")
async def delete_listener(request: web.Request) -> web.Response:
    """204; also for a listener that has already left (DELETE is idempotent)."""
    channel = _here(request)
    listener = channel.listener(request.match_info["listener_id"])
    if listener is not None:
        await listener.close("deleted by client")
    return web.Response(status=204)


# --- HTTP listeners -------------------------------------------------------------------------


def _listen_formatter(fmt: str) -> formatters.FrameFormatter:
    if fmt == "opus":
        return formatters.OggOpus()
    if fmt == "frames":
        return formatters.FrameRecords()
    try:
        return formatters.Transcoded(fmt, MEDIA_TYPES[fmt])
    except UnsupportedFormat as exc:
        raise ApiError(400, "unsupported_format", str(exc)) from exc


@routes.get("/v1/channels/{name}/listen")
async def channel_listen(request: web.Request) -> web.StreamResponse:
    """The channel's air, live, until the listener or the channel ends: Ogg/Opus (the aired
    packets), raw 24 kHz s16le PCM, WAV, or the framed stream. A reader that cannot keep up
    loses frames and, a second behind, is disconnected."""
    fmt = request.query.get("format", "opus")
    if fmt not in LISTEN_FORMATS:
        raise ApiError(400, "unsupported_format",
                       f"format must be one of {', '.join(LISTEN_FORMATS)}")
    batch = request.query.get("batch", "3")
    if batch not in ("1", "2", "3", "4", "5"):
        raise ApiError(400, "invalid_batch", "batch (frames per write) must be 1..5")
    channel = await _listenable(request)
    formatter = _listen_formatter(fmt)
    listener = HttpListener(formatter, request.app[CHANNELS].lag, write_frames=int(batch),
                            format_name=fmt, mirror_link=MIRROR_HEADER in request.headers)
    try:
        channel.join(listener)
    except ChannelFull as exc:
        raise ApiError(503, "channel_full", str(exc), {"Retry-After": "5"}) from exc
    except ChannelClosed as exc:
        raise ApiError(404, "unknown_channel", str(exc)) from exc
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:  # a stalled reader holds at most this much in the kernel
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)

    def abort() -> None:
        if transport is not None:
            transport.abort()

    response = web.StreamResponse(headers={
        "Content-Type": formatter.media_type, "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no", "X-Listener-Id": listener.id,
    })
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        body = ChunkedBodyWriter(request, response)
        await listener.run(body.write, body.write_now, abort)
        if not (listener.close_reason or "").startswith("too_slow"):
            await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        listener.close_soon("client gone")
    return response


# --- events ---------------------------------------------------------------------------------


@routes.get("/v1/channels/{name}/events")
async def channel_events(request: web.Request) -> web.StreamResponse:
    """The channel's events as SSE (utterance states, captions, listeners joining and
    leaving, ``channel_closed`` last) until it closes; a comment every 15 s keeps proxies
    from timing the stream out."""
    channel = await _listenable(request)
    return await stream_events(request, channel.events, f"channel {channel.name}")
