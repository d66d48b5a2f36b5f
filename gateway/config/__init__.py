"""Gateway settings, each declared once: a field of ``GatewayConfig`` with its default, flag,
``GATEWAY_*`` variable and help (``opt``, gateway/config/table.py). The command line, the
environment, the options dataclasses of the layers below (by field name) and docs/options.md
are all made from it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiortc import RTCConfiguration, RTCIceServer

from gateway import __version__
from gateway.config.table import add_arguments, check_renamed, opt, values
from gateway.conversation.duplex import HearingOptions
from gateway.conversation.options import SessionOptions
from gateway.media.opus_codec import EncoderSettings
from gateway.media.ticker import check_coalesce_grid
from gateway.runtime.defaults import default_of

WEB_DIR = Path(__file__).resolve().parents[2] / "web"


def _csv(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _workers(value: str) -> int:
    if value.strip().lower() == "auto":
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )
    return _int_within(value, "a number or 'auto'", 1, None, "at least 1")


def _int_within(value: str, what: str, low: int, high: int | None, bounds: str) -> int:
    """``value`` as an int in [low, high] (``high`` None: no upper bound), else argparse's
    error: "'x' is not <what>" or ``bounds``."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
    if n < low or (high is not None and n > high):
        raise argparse.ArgumentTypeError(bounds)
    return n


def _udp_port(value: str) -> int:
    return _int_within(value, "a port number", 0, 65535, "0..65535")


def _coalesce_ms(value: str) -> float:
    try:
        ms = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    try:
        check_coalesce_grid(ms / 1000)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return ms


def _sessions(value: str) -> int:
    return _int_within(value, "a number of sessions", 0, None, "a number of sessions, 0 or more")


def _prefix(value: str) -> str:
    if value and not re.fullmatch(r"[A-Za-z0-9._-]{1,32}", value):
        raise argparse.ArgumentTypeError(f"{value!r}: up to 32 of A-Z a-z 0-9 . _ -")
    return value


def _non_negative(value: str) -> float:
    number = float(value)
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"{value!r}: must be >= 0")
    return number


def _report_interval(value: str) -> float:
    number = float(value)
    if not 0.1 <= number <= 60:
        raise argparse.ArgumentTypeError(f"{value!r}: seconds from 0.1 to 60")
    return number


def _or_none(value: str) -> str | None:
    return value.strip() or None


#: an RFC 6750 §2.1 b64token: what a bearer token is (here and in gateway/api/access.py)
B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def _token(value: str) -> str:
    """A static bearer token: never one that configures auth open (empty, whitespace)."""
    if not B64TOKEN.fullmatch(value):
        raise argparse.ArgumentTypeError(
            "an auth token is 1+ of A-Z a-z 0-9 - . _ ~ + / (then = padding); got "
            + (
                "an empty or whitespace one (an unset variable?): refusing to start"
                if not value.strip()
                else repr(value)
            )
        )
    return value


def _secret(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "empty or whitespace: refusing to start (an unset variable?)"
        )
    return value


def _origins(value: str) -> tuple[str, ...]:
    return _csv(value) or ("*",)


def _S(name: str) -> Any:  # the default lives in SessionOptions
    return default_of(SessionOptions, name)


def _H(name: str) -> Any:  # the default lives in HearingOptions
    return default_of(HearingOptions, name)


NET, MEDIA, ACCESS, LIMITS, DUPLEX, HTTP, SCALE, RUN = (
    "network",
    "media",
    "access",
    "limits",
    "full duplex",
    "HTTP streams",
    "scale-out",
    "process",
)


@dataclass(frozen=True)
class GatewayConfig:
    # network
    host: str = opt("127.0.0.1", "HTTP bind address", group=NET)
    port: int = opt(8080, "HTTP port", group=NET)
    udp_port: int = opt(
        0,
        "the UDP port every session's ICE, DTLS and SRTP share: one socket "
        "per host address (0: a free port; with --workers, worker i takes "
        "--udp-port + i)",
        parse=_udp_port,
        group=NET,
    )
    udp_mux: bool = opt(
        True,
        "every session on the shared UDP socket (off: one socket per "
        "session on a random port, as aioice binds; for comparisons)",
        group=NET,
    )
    coalesce_ms: float = opt(
        0.0,
        "0: streams on a 2.5 ms grid (packed while the worker is sparse: --pack-below). "
        "2.5, 5, 10 or 20: the streams' grid is that long and, while it "
        "is busy, the sockets are read at its ticks only -- one loop wake-up a tick, not one "
        "a datagram: a talker's datagram (a listener's NACK too) waits up to that long to be "
        "read, a frame's packets leave in 20/N bursts (10: 1,000 listeners under 99.5 % on "
        "time; --pack-below is off: docs/density.md)",
        parse=_coalesce_ms,
        group=NET,
    )
    pack_below: int = opt(
        128,
        "while the worker serves fewer sessions than this, a new stream's packets keep to a "
        "10 ms grid (two ticks a frame) and the shared UDP sockets are read by the ticker's "
        "fires while those come 10 ms apart or sooner, so talkers' datagrams share the "
        "loop's wake-ups: a talking session's loop CPU about a quarter less, a datagram (a "
        "listener's NACK too) read up to 10 ms later. From this many sessions on, new "
        "streams spread over the 2.5 ms grid, in small bursts (0: off, every datagram read "
        "the moment it comes: docs/density.md, 'Packed phases')",
        parse=_sessions,
        group=NET,
    )
    udp_sendmmsg: bool = opt(
        True,
        "a tick's RTP leaves in one sendmmsg on the shared socket (off: a sendto per packet)",
        flag="--sendmmsg",
        env="SENDMMSG",
        group=NET,
    )
    send_path: str = opt(
        "auto",
        "how RTP is protected and sent: compiled (headers patched, SRTP and one sendmmsg a "
        "tick in a C extension built at install or first start; an error if it cannot be), "
        "python (the pure-Python batch path), auto (compiled where it builds, else python; "
        "the choice is logged and in /healthz)",
        choices=("auto", "compiled", "python"),
        group=NET,
    )
    srtp_sender: str = opt(
        "auto",
        "who SRTP-protects outbound RTP (AES-GCM and AES-CM/HMAC-SHA1 sessions): c "
        "(net/srtp_tx.py: libsrtp's bytes, a stream's state in one block, built at install or "
        "first start, OpenSSL's AES-NI and GCM functions called directly where pylibsrtp's "
        "OpenSSL exports them; an error if it cannot be), c-evp (c with every cipher call "
        "through OpenSSL's EVP, as before the direct calls), libsrtp, auto (c where it builds; "
        "the choice and the cipher path in /healthz)",
        choices=("auto", "c", "c-evp", "libsrtp"),
        group=NET,
    )
    ice_hosts: tuple[str, ...] = opt(
        (),
        "comma-separated addresses for ICE host candidates; "
        "empty = all interfaces (aioice's default, which leaves "
        "out 127.0.0.1)",
        parse=_csv,
        group=NET,
    )
    ice_servers: tuple[str, ...] = opt(
        (),
        "comma-separated STUN/TURN URLs (stun:host:port, "
        "turn:host:port); none by default, so nothing leaves "
        "the machine unless configured",
        parse=_csv,
        group=NET,
    )
    turn_username: str | None = opt(None, "TURN username", group=NET)
    turn_credential: str | None = opt(None, "TURN credential", group=NET)
    cors_origins: tuple[str, ...] = opt(
        ("*",),
        "comma-separated origins allowed to call the API from a browser (* = any)",
        parse=_origins,
        group=NET,
    )
    # media
    voices: tuple[str, ...] = opt(
        ("piper",),
        "a voice, repeatable; the first is the default. SPEC: piper | tone:440"
        "[?seconds=1&rate=24000] | wav:PATH | cosyvoice+http://host:port?... | "
        "cosyvoice+grpc://... (the variable: ';'-separated)",
        flag="--voice",
        repeat=True,
        sep=";",
        metavar="[NAME=]SPEC",
        group=MEDIA,
    )
    bitrate: int = opt(32_000, "Opus bitrate, bit/s", group=MEDIA)
    expected_loss: int = opt(
        10, "expected packet loss % given to the Opus encoder (sizes FEC)", group=MEDIA
    )
    idle_packets: str = opt(
        _S("idle_packets"),
        "what a stream sends between utterances: silence, a "
        "silent Opus frame every 20 ms; dtx: Opus DTX, a 1-byte packet "
        "every 400 ms",
        choices=("silence", "dtx"),
        group=MEDIA,
    )
    early_first_frame: bool = opt(
        _S("early_first_frame"),
        "with --idle-packets dtx: a new utterance's first "
        "frame is sent at once instead of in its next 20 ms slot",
        group=MEDIA,
    )
    answer_nack: bool = opt(
        _S("answer_nack"),
        "a=rtcp-fb nack in the answer (off only for comparisons)",
        flag="--nack",
        env="NACK",
        group=MEDIA,
    )
    red_distance: int = opt(
        _S("red_distance"),
        "RFC 2198 redundancy when the offer has red/48000/2: each packet "
        "also carries the previous N frames (0: off)",
        choices=range(0, 5),
        group=MEDIA,
    )
    red_max_distance: int = opt(
        _S("red_max_distance"),
        "raise the RED distance up to N frames (for 10 s) while the "
        "receiver's NACKs show longer loss bursts (0: never; at most 8)",
        choices=range(0, 9),
        metavar="N",
        group=MEDIA,
    )
    red_adaptive: bool = opt(
        _S("red_adaptive"),
        "RED only while the receiver reports loss (off: on every packet)",
        group=MEDIA,
    )
    release_dtls: bool = opt(
        _S("release_dtls"),
        "free OpenSSL's DTLS state once a session is connected (about 100 KB per session)",
        group=MEDIA,
    )
    rx_fast_path: bool = opt(
        _S("rx_fast_path"),
        "take a talking session's SRTP straight from the shared UDP socket's read loop "
        "(no aiortc receive task per packet; off: aiortc's path, to compare)",
        group=MEDIA,
    )
    rtcp_fast_path: bool = opt(
        _S("rtcp_fast_path"),
        "take a connected session's SRTCP (receiver reports, NACKs) straight from the shared "
        "UDP socket's read loop (no aiortc receive task per datagram; off: aiortc's path)",
        group=MEDIA,
    )
    send_in_c: bool = opt(
        _S("send_in_c"),
        "let the compiled send path send a stream from C, slot by slot, RED and DTX "
        "included, its frames fed ahead (off: every slot from Python's tick, to compare)",
        group=MEDIA,
    )
    rtcp_report_interval_s: float = opt(
        _S("rtcp_report_interval_s"),
        "RTCP sender reports' mean interval, seconds, each varied by 0.5-1.5x (RFC 3550 §6.3.1); "
        "5 is libwebrtc's for audio and RFC 3550's recommended minimum; the first goes after "
        "0.5-1.5 s whatever this is",
        parse=_report_interval,
        group=MEDIA,
    )
    playout_allowance_s: float = opt(
        _S("playout_allowance_s"),
        "a WebRTC listener's playout delay, seconds, added to RTT/2 "
        "to tell what it has heard (RTCP carries none)",
        parse=_non_negative,
        group=MEDIA,
    )
    phrase_cache_mb: float = opt(
        64.0, "memory for already-encoded repeated phrases, MB; 0 disables", group=MEDIA
    )
    phrase_cache_dir: Path | None = opt(
        None,
        "persist the phrase cache in this directory (default: memory only)",
        parse=Path,
        group=MEDIA,
    )
    # access
    auth_tokens: tuple[str, ...] = opt(
        (),
        "a bearer token accepted on every session and speech "
        "route (repeatable; the variable: comma-separated)",
        flag="--auth-token",
        env="AUTH_TOKEN",
        repeat=True,
        metavar="TOKEN",
        parse=_token,
        group=ACCESS,
    )
    auth_jwt_secret: str | None = opt(
        None,
        "accept JWT bearer tokens (HS256, with exp) signed with this secret",
        parse=_secret,
        group=ACCESS,
    )
    listen_tokens: tuple[str, ...] = opt(
        (),
        "a bearer token that may only listen to channels (repeatable; the variable: "
        "comma-separated)",
        flag="--listen-token",
        env="LISTEN_TOKEN",
        repeat=True,
        metavar="TOKEN",
        parse=_token,
        group=ACCESS,
    )
    auth_jwt_max_lifetime_s: float = opt(
        86_400.0,
        "refuse a JWT whose exp is more than this many seconds ahead (0: no cap)",
        flag="--auth-jwt-max-lifetime",
        env="AUTH_JWT_MAX_LIFETIME",
        parse=_non_negative,
        group=ACCESS,
    )
    auth_jwt_audience: str | None = opt(
        None, "require this aud claim in JWTs", parse=_or_none, group=ACCESS
    )
    auth_jwt_issuer: str | None = opt(
        None, "require this iss claim in JWTs", parse=_or_none, group=ACCESS
    )
    trusted_proxies: tuple[str, ...] = opt(
        (),
        "comma-separated addresses or networks of reverse proxies: from them, the client is "
        "the last address in X-Forwarded-For that is not a proxy, and they are not "
        "connection-capped",
        parse=_csv,
        group=ACCESS,
    )
    rate_limit_sessions: float = opt(
        0.0,
        "session creations per second per client address, "
        "bursts of twice that; more get 429 + Retry-After (0: no "
        "limit)",
        group=ACCESS,
    )
    rate_limit_speech: float = opt(
        0.0, "speech requests per second per client address (0: no limit)", group=ACCESS
    )
    rate_limit_requests: float = opt(
        0.0,
        "requests per second per client address on every other route that does work (a "
        "session's state, trickle, events, utterances, DELETE); open routes (health, metrics, "
        "the page) are not counted (0: no limit). Every limit is shared by a node's workers, "
        "and by the cluster with --redis-url",
        group=ACCESS,
    )
    # limits
    max_sessions: int = opt(100, "concurrent session cap; more get 503", group=LIMITS)
    max_body_bytes: int = opt(
        1 << 20, "largest request body accepted; larger gets 413", group=LIMITS
    )
    max_text_chars: int = opt(100_000, "longest speech text accepted", group=LIMITS)
    connect_timeout_s: float = opt(
        _S("connect_timeout_s"),
        "seconds a session may take to connect before it is closed",
        flag="--connect-timeout",
        env="CONNECT_TIMEOUT",
        group=LIMITS,
    )
    idle_timeout_s: float = opt(
        0.0,
        "close a session after this many seconds with no speech and no request (0: never)",
        flag="--idle-timeout",
        env="IDLE_TIMEOUT",
        group=LIMITS,
    )
    drain_timeout_s: float = opt(
        30.0,
        "on SIGTERM/SIGINT: refuse new sessions and let playing "
        "speech finish for up to this many seconds",
        flag="--drain-timeout",
        env="DRAIN_TIMEOUT",
        group=LIMITS,
    )
    max_speech_seconds: float = opt(
        1200.0,
        "most audio one speech request (or agent reply) may make; synthesis stops there and "
        "the stream ends with an error",
        parse=_non_negative,
        group=LIMITS,
    )
    sdp_max_line_chars: int = opt(
        4096, "longest SDP/sdpfrag line; more is a 400 naming the limit", group=LIMITS
    )
    sdp_max_media_sections: int = opt(
        16, "most m-sections in an offer; more is a 400 naming the limit", group=LIMITS
    )
    sdp_max_attributes: int = opt(
        2000, "most a= lines in an offer; more is a 400 naming the limit", group=LIMITS
    )
    sdp_max_ssrc_lines: int = opt(
        128, "most a=ssrc/a=ssrc-group lines; more is a 400 naming the limit", group=LIMITS
    )
    max_remote_candidates: int = opt(
        64,
        "most remote ICE candidates per session (offer + trickle; .local ones are ignored); "
        "more is a 400 naming the limit",
        group=LIMITS,
    )
    stun_checks_per_s: float = opt(
        _S("stun_checks_per_s"),
        "new ICE connectivity checks a session may start per second (aioice's own pace is "
        "50); with --max-remote-candidates, what bounds the STUN packets a client can aim "
        "anywhere (0: aioice's pace)",
        parse=_non_negative,
        group=LIMITS,
    )
    header_timeout_s: float = opt(
        10.0,
        "seconds a request's headers may take from its first byte; then 408 and the "
        "connection closes (0: none)",
        flag="--header-timeout",
        env="HEADER_TIMEOUT",
        parse=_non_negative,
        group=LIMITS,
    )
    body_idle_timeout_s: float = opt(
        30.0,
        "seconds a request body may go without a byte (not its total: a streamed body stays "
        "open while it sends); then 408 (0: none)",
        flag="--body-idle-timeout",
        env="BODY_IDLE_TIMEOUT",
        parse=_non_negative,
        group=LIMITS,
    )
    keepalive_timeout_s: float = opt(
        15.0,
        "seconds an HTTP connection may sit idle between requests (or before its first); "
        "WebSockets keep alive by ping/pong",
        flag="--keepalive-timeout",
        env="KEEPALIVE_TIMEOUT",
        parse=_non_negative,
        group=LIMITS,
    )
    max_connections_per_ip: int = opt(
        1024,
        "open connections per client address per process; more get 503 at once (0: no cap; "
        "raise it for load tests from one address)",
        group=LIMITS,
    )
    max_channels: int = opt(16, "broadcast channels per worker (docs/channels.md)", group=LIMITS)
    channel_max_listeners: int = opt(
        1000, "listeners per channel, and the most POST /v1/channels may ask for", group=LIMITS
    )
    # full duplex
    duplex: bool = opt(
        False,
        "full duplex: answer sendrecv offers sendrecv and hear the user "
        "(VAD -> ASR -> agent -> speech, barge-in)",
        group=DUPLEX,
    )
    asr: str = opt(
        _H("asr"),
        "the recogniser: whisper[:tiny.en] (bundled, CPU) or openai+http://host:port/v1?model=...",
        group=DUPLEX,
    )
    agent: str = opt(
        _H("agent"),
        "the reply step: echo, openai+http://host:port/v1?model=...&"
        "system=..., or python:module:function",
        group=DUPLEX,
    )
    vad: str = opt(
        _H("vad"),
        "voice activity: silero[:gate=DBFS|off] (frames below the gate, "
        "default -60 dBFS, skip the model) or webrtc[:0-3]",
        group=DUPLEX,
    )
    turn_silence_ms: int = opt(
        _H("turn_silence_ms"), "silence that ends the user's turn", group=DUPLEX
    )
    turn_detector: str = opt(
        _H("turn_detector"),
        "what ends the user's turn: smart-turn (Smart Turn v3.2 judges each pause: a short one "
        "ends a finished sentence, an unfinished one waits longer) or silence "
        "(--turn-silence-ms alone)",
        choices=("smart-turn", "silence"),
        group=DUPLEX,
    )
    turn_probe_ms: int = opt(
        _H("turn_probe_ms"),
        "smart-turn: the pause after which the model is asked whether the turn is over",
        group=DUPLEX,
    )
    turn_question_silence_ms: int = opt(
        _H("turn_question_silence_ms"),
        "smart-turn: the pause that ends a turn the model calls unfinished whose transcript "
        "is a question (the model hears a question's rise as unfinished)",
        group=DUPLEX,
    )
    turn_unsure_silence_ms: int = opt(
        _H("turn_unsure_silence_ms"),
        "smart-turn: the pause that ends a turn the model calls unfinished whose transcript "
        "could end there (not a question, no dangling last word)",
        group=DUPLEX,
    )
    turn_max_silence_ms: int = opt(
        _H("turn_max_silence_ms"),
        "smart-turn: the pause that ends any turn (a transcript on a dangling word, or no "
        "verdict in time)",
        group=DUPLEX,
    )
    turn_continue_ms: int = opt(
        _H("turn_continue_ms"),
        "speech that starts this soon after the user's last word, over the reply, continues "
        "that turn (the reply to the first half cut, both halves answered as one; 0: off)",
        group=DUPLEX,
    )
    barge_in_ms: int = opt(_H("barge_in_ms"), "speech over a reply this long cuts it", group=DUPLEX)
    barge_in_backoff_on_first_echo: bool = opt(
        _H("barge_in_backoff_on_first_echo"),
        "a reply's first pause on its own echo also doubles the voice later pauses of that "
        "reply need (the rule before 2026-12-02); off: it only learns the echo's level",
        group=DUPLEX,
    )
    asr_speculate_ms: int = opt(
        _H("asr_speculate_ms"),
        "start the final decode after this much silence, while the "
        "turn's end is still awaited; kept if the turn ends, dropped if "
        "the user goes on (0: off)",
        group=DUPLEX,
    )
    preemptive_reply: bool = opt(
        _H("preemptive_reply"),
        "on the speculative transcript, ask the agent and "
        "synthesize its first clause before the turn has ended",
        group=DUPLEX,
    )
    reply_voice: str | None = opt(
        None, "the voice replies are spoken in (default: the first)", group=DUPLEX
    )
    # HTTP streams
    http_flush: str = opt(
        "adaptive",
        "after the first frame, coalesce frames that are ready "
        "together up to 16 KB (RTT < 50 ms) or 32 KB (adaptive), or write "
        "every frame alone (frame)",
        choices=("adaptive", "frame"),
        group=HTTP,
    )
    live_lead_ms: float = opt(
        200.0,
        "pace=live: how much audio goes out ahead of real time",
        parse=_non_negative,
        group=HTTP,
    )
    live_write_ms: float = opt(
        100.0,
        "pace=live: frames due within this many ms go out in one "
        "write (early, never late; 20 = every frame alone)",
        parse=_non_negative,
        group=HTTP,
    )
    # scale-out
    workers: int = opt(
        1,
        "gateway processes (one event loop each) behind --port, on ports "
        "--port + 1 + i; auto = one per core; 1 = a single process",
        parse=_workers,
        metavar="N|auto",
        group=SCALE,
    )
    redis_url: str | None = opt(
        None,
        "register workers, their load and their sessions in this "
        "Redis; every machine pointed at it is one cluster "
        "(redis://host:6379/0)",
        parse=_or_none,
        group=SCALE,
    )
    advertise_url: str | None = opt(
        None,
        "the URL clients and other nodes reach this gateway "
        "at (default: from --host/--port); sessions' Locations are "
        "absolute under it",
        parse=_or_none,
        group=SCALE,
    )
    session_id_prefix: str = opt(
        "",
        "start every session id with this (letters, digits, '.', "
        "'_', '-'); the supervisor gives each worker its own",
        parse=_prefix,
        group=SCALE,
    )
    # process
    web_dir: Path = opt(
        WEB_DIR, "the demo page's directory", shown="web/ beside the package", group=RUN
    )
    log_level: str = opt(
        "INFO", "log level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), group=RUN
    )
    log_format: str = opt(
        "text",
        "text, or json: one object per line with the session and utterance ids",
        choices=("text", "json"),
        group=RUN,
    )
    event_loop: str = opt(
        "auto",
        "auto = uvloop when installed (the 'speed' extra), else asyncio",
        choices=("auto", "uvloop", "asyncio"),
        group=RUN,
    )
    stall_warn_ms: float = opt(
        0.0,
        "log where the event loop is when it is blocked this long; counts in /healthz (0: off)",
        group=RUN,
    )
    # Fault injection: a test hook set in-process (GatewayConfig(...)), never a flag.
    test_drop_first_tx_percent: float = default_of(SessionOptions, "test_drop_first_tx_percent")
    test_drop_burst: float = default_of(SessionOptions, "test_drop_burst")
    test_drop_seed: int | None = default_of(SessionOptions, "test_drop_seed")
    test_repair_delay_ms: float = default_of(SessionOptions, "test_repair_delay_ms")

    def rtc_configuration(self) -> RTCConfiguration:
        servers = [
            RTCIceServer(
                urls=url,
                username=self.turn_username if url.startswith("turn") else None,
                credential=self.turn_credential if url.startswith("turn") else None,
            )
            for url in self.ice_servers
        ]
        return RTCConfiguration(iceServers=servers)  # [] disables aiortc's public STUN default

    def session_options(self) -> SessionOptions:
        return shared(
            SessionOptions,
            self,
            encoder=EncoderSettings(bitrate=self.bitrate, expected_loss_percent=self.expected_loss),
            uplink=self.duplex,
        )

    def hearing_options(self) -> HearingOptions:
        return shared(HearingOptions, self)


def shared(cls: type[Any], config: GatewayConfig, **extra: Any) -> Any:
    """``cls`` (an options dataclass of a lower layer) made from the settings of the same name
    (no setting is copied by hand), plus ``extra`` for the ones named otherwise."""
    names = {f.name for f in dataclasses.fields(config)}
    given = {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(cls)
        if f.name in names and f.name not in extra
    }
    return cls(**given, **extra)


# Flags and variables that were renamed or removed: each fails with its successor's name.
RENAMED = {
    "--keep-dtls-state": "use --no-release-dtls",
    "--red-always": "use --no-red-adaptive",
    "GATEWAY_KEEP_DTLS_STATE": "use GATEWAY_RELEASE_DTLS=0",
    "GATEWAY_RED_ALWAYS": "use GATEWAY_RED_ADAPTIVE=0",
    "GATEWAY_NO_NACK": "use GATEWAY_NACK=0",
    "--test-drop-first-tx": "fault injection is a test hook (GatewayConfig("
    "test_drop_first_tx_percent=...) in-process)",
    "--test-drop-burst": "fault injection is a test hook (GatewayConfig("
    "test_drop_burst=...) in-process)",
    "GATEWAY_TEST_DROP_FIRST_TX": "fault injection is a test hook, not a setting",
    "GATEWAY_TEST_DROP_BURST": "fault injection is a test hook, not a setting",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gateway",
        description="Real-time TTS voice gateway: speech as 24 kHz Opus over WebRTC "
        "(WHEP-style API at /v1/sessions, demo page at /). Every flag can also be set "
        "through the environment variable shown, which holds the setting's value; a flag wins "
        "over its variable.",
    )
    p.add_argument("--version", action="version", version=f"voice-gateway {__version__}")
    add_arguments(p, GatewayConfig)
    return p


def parse_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    env = os.environ if environ is None else environ
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    check_renamed(args_list, env, RENAMED, parser.error)
    args = parser.parse_args(args_list)
    for name in ("GATEWAY_AUTH_TOKEN", "GATEWAY_LISTEN_TOKEN"):
        raw = env.get(name)
        if raw is not None and not raw.replace(",", "").strip():
            parser.error(
                f"{name}={raw!r} names no token: unset it to run without static "
                "tokens (never auth configured open)"
            )
    return GatewayConfig(**values(GatewayConfig, args, env, parser.error))
