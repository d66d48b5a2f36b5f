"""Builds the aiohttp application: API routes, JSON errors, the demo page, clean shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from gateway import aiortc_compat
from gateway.api.access import RATE_STORE, AccessPolicy, middlewares
from gateway.api.channel_routes import CHANNELS
from gateway.api.channel_routes import routes as channel_routes
from gateway.api.errors import ApiError, Handler, json_errors
from gateway.api.openapi import document
from gateway.api.rate_store import LocalBuckets, RedisBuckets
from gateway.api.routes import (
    CACHE,
    CANDIDATES,
    LIMITS,
    OPENAPI,
    REGISTRY,
    SDP_LIMITS,
    SRTP_SENDER,
    VOICES,
    routes,
    stamp_arrival,
)
from gateway.api.sdp_limits import CandidateBudget, SdpLimits
from gateway.api.speech_http import HTTP_STREAMS, STREAMING, StreamDefaults
from gateway.api.speech_http import routes as speech_routes
from gateway.channels.registry import ChannelRegistry
from gateway.config import GatewayConfig
from gateway.conversation.duplex import DuplexFactory
from gateway.elevenlabs.routes import add_routes as add_elevenlabs_routes
from gateway.media import pcm_c, ticker
from gateway.net.udp_mux import MuxGroup
from gateway.realtime import routes as realtime
from gateway.realtime.keys import EphemeralKeys
from gateway.runtime.metrics import METRICS
from gateway.session.registry import SessionRegistry
from gateway.speech.phrase_cache import PhraseCache
from gateway.tts import synthesis_limits
from gateway.tts.registry import VoiceRegistry


def web_files(root: Path) -> Handler:
    """The demo page's files under ``/web/``: what ``add_static`` serves (no index, nothing
    outside ``root``, symlinks out of it refused), but a missing file is the API's JSON 404,
    not an empty octet-stream one (aiohttp's FileResponse sets 404 after the middlewares)."""
    base = root.resolve()

    async def web_file(request: web.Request) -> web.StreamResponse:
        relative = request.match_info["path"]
        target = (base / relative).resolve()
        if not target.is_relative_to(base) or not target.is_file():
            raise ApiError(404, "not_found", f"no file /web/{relative}")
        return web.FileResponse(target)

    return web_file


def create_app(config: GatewayConfig, voices: VoiceRegistry | None = None) -> web.Application:
    """The gateway as an aiohttp app. ``voices`` defaults to those in ``config``."""
    aiortc_compat.restrict_ice_hosts(config.ice_hosts)
    policy = AccessPolicy(
        cors_origins=config.cors_origins, tokens=config.auth_tokens,
        jwt_secret=config.auth_jwt_secret, listen_tokens=config.listen_tokens,
        jwt_max_lifetime_s=config.auth_jwt_max_lifetime_s,
        jwt_audience=config.auth_jwt_audience, jwt_issuer=config.auth_jwt_issuer,
        sessions_per_s=config.rate_limit_sessions, requests_per_s=config.rate_limit_requests,
        speech_per_s=config.rate_limit_speech, trusted_proxies=config.trusted_proxies,
        ephemeral=EphemeralKeys(),
    )
    cors, auth, rate_limit = middlewares(policy)
    app = web.Application(
        middlewares=[stamp_arrival, cors, json_errors, auth, rate_limit],
        client_max_size=config.max_body_bytes,
    )
    options = config.session_options()
    app[CACHE] = cache = PhraseCache(
        int(config.phrase_cache_mb * 1024 * 1024), config.phrase_cache_dir,
        settings=options.encoder,
    )
    app[VOICES] = voices if voices is not None else VoiceRegistry.from_specs(config.voices)
    duplex = None
    if config.duplex:
        duplex = DuplexFactory(config.hearing_options(), app[VOICES].get(config.reply_voice))
        pcm_c.load()  # a talker's period helpers in C, built here if missing (not per request)
    udp_mux = None
    if config.udp_mux:
        compiled, reason = aiortc_compat.resolve_send_path(config.send_path)
        udp_mux = MuxGroup(aiortc_compat.host_addresses(), config.udp_port,
                           use_sendmmsg=config.udp_sendmmsg, compiled=compiled,
                           send_path_reason=reason)
    srtp_mode, srtp_reason = aiortc_compat.install_srtp_sender(config.srtp_sender)
    app[SRTP_SENDER] = {"mode": srtp_mode, "reason": srtp_reason,
                        "cipher": aiortc_compat.srtp_cipher_path(config.srtp_sender)
                        if srtp_mode == "c" else "libsrtp"}
    METRICS.udp_mux.source = udp_mux.stats if udp_mux is not None else None
    METRICS.ice_consent.source = aiortc_compat.CONSENT.as_json
    app[REGISTRY] = SessionRegistry(
        config.rtc_configuration(), options, config.max_sessions, phrase_cache=cache,
        idle_timeout_s=config.idle_timeout_s, duplex=duplex, udp_mux=udp_mux,
    )
    app[CHANNELS] = ChannelRegistry(
        config.rtc_configuration(), options, config.max_channels,
        config.channel_max_listeners, phrase_cache=cache, udp_mux=udp_mux,
    )
    app[LIMITS] = {"max_text_chars": config.max_text_chars}
    # a supervised worker without Redis swaps in the node's shared file (cluster/worker.py)
    app[RATE_STORE] = RedisBuckets(config.redis_url) if config.redis_url else LocalBuckets()
    app[SDP_LIMITS] = SdpLimits(
        max_line_chars=config.sdp_max_line_chars,
        max_media_sections=config.sdp_max_media_sections,
        max_attributes=config.sdp_max_attributes, max_ssrc_lines=config.sdp_max_ssrc_lines,
        max_candidates=config.max_remote_candidates,
    )
    app[CANDIDATES] = CandidateBudget(config.max_remote_candidates)
    synthesis_limits.configure(synthesis_limits.SynthesisLimits(
        max_chars=config.max_text_chars, max_audio_s=config.max_speech_seconds))
    app[STREAMING] = StreamDefaults(
        encoder=options.encoder, flush=config.http_flush,  # type: ignore[arg-type]
        lead_s=config.live_lead_ms / 1000, write_s=config.live_write_ms / 1000,
    )
    app[HTTP_STREAMS] = set()
    app[OPENAPI] = document(
        auth=policy.auth_required, voices=app[VOICES].names, max_chars=config.max_text_chars
    )
    app.add_routes(routes)
    app.add_routes(speech_routes)
    add_elevenlabs_routes(app, app[VOICES], config.max_text_chars)
    app.add_routes(channel_routes)
    realtime.install(app, app[REGISTRY], app[VOICES], policy.ephemeral)
    index = config.web_dir / "index.html"
    if index.exists():

        async def page(request: web.Request) -> web.FileResponse:
            return web.FileResponse(index)

        app.router.add_get("/", page)
        app.router.add_get("/web/{path:.+}", web_files(config.web_dir))

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        # before any stream takes the ticker
        ticker.coalesce(  # (without the shared sockets nothing counts the sessions)
            loop, config.coalesce_ms / 1000, config.pack_below if config.udp_mux else 0)
        if udp_mux is not None:
            await udp_mux.start()  # the shared sockets, bound before serving: a taken port fails
        if duplex is not None:
            await duplex.load()  # Whisper is loaded (and warmed up) before serving
        yield
        if duplex is not None:
            await duplex.close()
        await app[CHANNELS].close_all()
        await app[REGISTRY].close_all()
        if udp_mux is not None:
            udp_mux.close()
        ticker.coalesce(loop, 0)
        cache.close()  # waits for pending phrase cache writes
        if voices is None:  # we built them, we close them
            await app[VOICES].close()

    app.cleanup_ctx.append(lifecycle)
    return app
