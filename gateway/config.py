"""Gateway settings: one dataclass, filled from command-line flags or GATEWAY_* variables."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiortc import RTCConfiguration, RTCIceServer

from gateway import __version__
from gateway.media.opus_codec import EncoderSettings
from gateway.session.duplex import HearingOptions
from gateway.session.options import SessionOptions

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    ice_hosts: tuple[str, ...] = ()  # empty: every interface (aioice's default)
    ice_servers: tuple[str, ...] = ()  # stun:/turn: URLs; none unless configured
    udp_mux: bool = True  # every session's ICE/DTLS/SRTP on one UDP socket (per host address)
    udp_port: int = 0  # ... on this port (0: a free one); worker i of --workers: udp_port + i
    udp_sendmmsg: bool = True  # a tick's RTP leaves in one sendmmsg on the shared socket
    turn_username: str | None = None
    turn_credential: str | None = None
    voices: tuple[str, ...] = ("piper",)
    max_sessions: int = 100
    bitrate: int = 32_000
    expected_loss: int = 10
    max_body_bytes: int = 1 << 20
    max_text_chars: int = 100_000
    connect_timeout_s: float = 30.0
    web_dir: Path = field(default=WEB_DIR)
    log_level: str = "INFO"
    log_format: str = "text"  # or "json": one object per line, with session/utterance ids
    event_loop: str = "auto"  # auto: uvloop when installed
    send_path: str = "batch"
    idle_packets: str = "silence"  # between utterances: "silence" every 20 ms, or "dtx"
    early_first_frame: bool = False  # an idle stream sends a new utterance's first frame now
    answer_nack: bool = True
    release_dtls: bool = True  # free OpenSSL's DTLS state once a session is connected
    test_drop_first_tx_percent: float = 0.0
    test_drop_seed: int | None = None
    test_drop_burst: float = 0.0
    test_repair_delay_ms: float = 0.0
    phrase_cache_mb: float = 64.0  # 0 disables the phrase cache
    phrase_cache_dir: Path | None = None  # persist the phrase cache here (none: memory only)
    stall_warn_ms: float = 0.0  # log the loop's stack when it is blocked this long (0: off)
    cors_origins: tuple[str, ...] = ("*",)
    auth_tokens: tuple[str, ...] = ()  # static bearer tokens (none: no auth unless a JWT secret)
    auth_jwt_secret: str | None = None  # HS256 JWTs with exp signed with this are accepted
    rate_limit_sessions: float = 0.0  # session creations per second per client address (0: off)
    rate_limit_speech: float = 0.0  # speech requests per second per client address (0: off)
    idle_timeout_s: float = 0.0  # close sessions idle this long (0: never)
    drain_timeout_s: float = 30.0  # on SIGTERM: how long playing speech may finish
    duplex: bool = False  # hear sendrecv offers: VAD -> ASR -> agent -> speech
    asr: str = "whisper:tiny.en"
    agent: str = "echo"
    vad: str = "silero"
    turn_silence_ms: int = 500
    turn_detector: str = "silence"  # "smart-turn": a semantic end-of-turn model decides
    barge_in_ms: int = 300
    asr_speculate_ms: int = 100  # start the final decode after this much silence (0: off)
    preemptive_reply: bool = True  # prepare the reply on the speculative transcript
    reply_voice: str | None = None  # the voice replies are spoken in (default: the first)
    red_distance: int = 2  # RFC 2198 redundancy: previous frames per packet (0: off)
    red_max_distance: int = 0  # raised up to this while NACKs show longer bursts (0: never)
    red_adaptive: bool = True  # only while the receiver reports loss
    http_flush: str = "adaptive"  # HTTP streams: coalesce ready frames by RTT, or "frame"
    live_lead_ms: float = 200.0  # HTTP streams with pace=live: audio sent ahead of real time
    live_write_ms: float = 100.0  # ... frames due within this window go in one write
    # Scale-out (gateway.cluster): worker processes, the cluster registry, this node's address
    workers: int = 1  # > 1: a supervisor and this many gateway processes (1: one, as ever)
    redis_url: str | None = None  # machines sharing this Redis are one cluster
    advertise_url: str | None = None  # the URL others reach this process at (absolute Locations)
    session_id_prefix: str = ""  # names this worker in its session ids

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
        return SessionOptions(
            encoder=EncoderSettings(bitrate=self.bitrate, expected_loss_percent=self.expected_loss),
            connect_timeout_s=self.connect_timeout_s,
            answer_nack=self.answer_nack,
            test_drop_first_tx_percent=self.test_drop_first_tx_percent,
            test_drop_seed=self.test_drop_seed,
            test_drop_burst=self.test_drop_burst,
            test_repair_delay_ms=self.test_repair_delay_ms,
            send_path=self.send_path,
            idle_packets=self.idle_packets,
            early_first_frame=self.early_first_frame,
            release_dtls=self.release_dtls,
            red_distance=self.red_distance,
            red_max_distance=self.red_max_distance,
            red_adaptive=self.red_adaptive,
            uplink=self.duplex,
        )

    def hearing_options(self) -> HearingOptions:
        return HearingOptions(asr=self.asr, agent=self.agent, vad=self.vad,
                              turn_silence_ms=self.turn_silence_ms, barge_in_ms=self.barge_in_ms,
                              turn_detector=self.turn_detector,
                              asr_speculate_ms=self.asr_speculate_ms,
                              preemptive_reply=self.preemptive_reply)


def _csv(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"GATEWAY_{name}", default)


def _workers(value: str) -> int:
    if value.strip().lower() == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number or 'auto'") from None
    if n < 1:
        raise argparse.ArgumentTypeError("at least 1")
    return n


def _udp_port(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError("0..65535")
    return n


def _prefix(value: str) -> str:
    if value and not re.fullmatch(r"[A-Za-z0-9._-]{1,32}", value):
        raise argparse.ArgumentTypeError(f"{value!r}: up to 32 of A-Z a-z 0-9 . _ -")
    return value


def build_parser() -> argparse.ArgumentParser:
    d = GatewayConfig()
    p = argparse.ArgumentParser(
        prog="python -m gateway",
        description="Real-time TTS voice gateway: speech as 24 kHz Opus over WebRTC "
        "(WHEP-style API at /v1/sessions, demo page at /). Every flag can also be set "
        "through the environment variable shown; a flag wins over its variable.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"voice-gateway {__version__}")
    p.add_argument("--host", default=_env("HOST", d.host), help="HTTP bind address [GATEWAY_HOST]")
    p.add_argument(
        "--port", type=int, default=int(_env("PORT", str(d.port)) or d.port),
        help="HTTP port [GATEWAY_PORT]",
    )
    p.add_argument(
        "--udp-port", type=_udp_port, default=_udp_port(_env("UDP_PORT", "0") or "0"),
        help="the UDP port every session's ICE, DTLS and SRTP share: one socket per host "
        "address (0: a free port; with --workers, worker i takes --udp-port + i) "
        "[GATEWAY_UDP_PORT]",
    )
    p.add_argument(
        "--no-udp-mux", action="store_true",
        default=(_env("UDP_MUX", "1") or "1") in ("0", "off", "false", "no"),
        help="one UDP socket per session, on a random port, as aioice binds (the design before "
        "the shared port; for comparisons) [GATEWAY_UDP_MUX=0]",
    )
    p.add_argument(
        "--no-sendmmsg", action="store_true",
        default=(_env("SENDMMSG", "1") or "1") in ("0", "off", "false", "no"),
        help="on the shared socket, send each RTP packet with its own sendto instead of one "
        "sendmmsg per tick [GATEWAY_SENDMMSG=0]",
    )
    p.add_argument(
        "--ice-hosts", default=_env("ICE_HOSTS", ""),
        help="comma-separated addresses for ICE host candidates; empty = all interfaces "
        "(aioice's default, which leaves out 127.0.0.1) [GATEWAY_ICE_HOSTS]",
    )
    p.add_argument(
        "--ice-servers", default=_env("ICE_SERVERS", ""),
        help="comma-separated STUN/TURN URLs (stun:host:port, turn:host:port); none by "
        "default, so nothing leaves the machine unless configured [GATEWAY_ICE_SERVERS]",
    )
    p.add_argument("--turn-username", default=_env("TURN_USERNAME"),
                   help="TURN username [GATEWAY_TURN_USERNAME]")
    p.add_argument("--turn-credential", default=_env("TURN_CREDENTIAL"),
                   help="TURN credential [GATEWAY_TURN_CREDENTIAL]")
    p.add_argument(
        "--voice", action="append", dest="voices", metavar="[NAME=]SPEC",
        help="a voice, repeatable; the first is the default. SPEC: piper | tone:440[?seconds=1"
        "&rate=24000] | wav:PATH | cosyvoice+http://host:port?... | cosyvoice+grpc://... "
        "[GATEWAY_VOICES, ';'-separated] (default: piper)",
    )
    p.add_argument("--max-sessions", type=int, default=int(_env("MAX_SESSIONS", "100") or 100),
                   help="concurrent session cap; more get 503 [GATEWAY_MAX_SESSIONS]")
    p.add_argument("--bitrate", type=int, default=int(_env("BITRATE", str(d.bitrate)) or 0),
                   help="Opus bitrate, bit/s [GATEWAY_BITRATE]")
    p.add_argument("--expected-loss", type=int,
                   default=int(_env("EXPECTED_LOSS", str(d.expected_loss)) or 0),
                   help="expected packet loss %% given to the Opus encoder (sizes FEC) "
                   "[GATEWAY_EXPECTED_LOSS]")
    p.add_argument(
        "--cors-origins", default=_env("CORS_ORIGINS", "*"),
        help="comma-separated origins allowed to call the API from a browser (* = any) "
        "[GATEWAY_CORS_ORIGINS]",
    )
    p.add_argument(
        "--auth-token", action="append", dest="auth_tokens", metavar="TOKEN",
        help="a bearer token accepted on every session and speech route (repeatable; none: no "
        "static tokens) [GATEWAY_AUTH_TOKEN, comma-separated]",
    )
    p.add_argument(
        "--auth-jwt-secret", default=_env("AUTH_JWT_SECRET"),
        help="accept JWT bearer tokens (HS256, with exp) signed with this secret "
        "[GATEWAY_AUTH_JWT_SECRET]",
    )
    p.add_argument(
        "--rate-limit-sessions", type=float, default=float(_env("RATE_LIMIT_SESSIONS", "0") or 0),
        help="session creations per second per client address, bursts of twice that; more get "
        "429 + Retry-After (0: no limit) [GATEWAY_RATE_LIMIT_SESSIONS]",
    )
    p.add_argument(
        "--rate-limit-speech", type=float, default=float(_env("RATE_LIMIT_SPEECH", "0") or 0),
        help="speech requests per second per client address (0: no limit) "
        "[GATEWAY_RATE_LIMIT_SPEECH]",
    )
    p.add_argument(
        "--idle-timeout", type=float, default=float(_env("IDLE_TIMEOUT", "0") or 0),
        help="close a session after this many seconds with no speech and no request (0: never) "
        "[GATEWAY_IDLE_TIMEOUT]",
    )
    p.add_argument(
        "--drain-timeout", type=float, default=float(_env("DRAIN_TIMEOUT", "30") or 30),
        help="on SIGTERM/SIGINT: refuse new sessions and let playing speech finish for up to "
        "this many seconds before closing every session [GATEWAY_DRAIN_TIMEOUT]",
    )
    p.add_argument(
        "--duplex", action=argparse.BooleanOptionalAction,
        default=_env("DUPLEX", "") in ("1", "true", "on"),
        help="full duplex: answer sendrecv offers sendrecv and hear the user (VAD -> ASR -> "
        "agent -> speech, barge-in) [GATEWAY_DUPLEX=1]",
    )
    p.add_argument("--asr", default=_env("ASR", d.asr),
                   help="the recogniser: whisper[:tiny.en] (bundled, CPU) or "
                   "openai+http://host:port/v1?model=... [GATEWAY_ASR]")
    p.add_argument("--agent", default=_env("AGENT", d.agent),
                   help="the reply step: echo, openai+http://host:port/v1?model=...&system=..., "
                   "or python:module:function [GATEWAY_AGENT]")
    p.add_argument("--vad", default=_env("VAD", d.vad),
                   help="voice activity: silero[:gate=DBFS|off] (frames below the gate, "
                   "default -60 dBFS, skip the model) or webrtc[:0-3] [GATEWAY_VAD]")
    p.add_argument("--turn-silence-ms", type=int,
                   default=int(_env("TURN_SILENCE_MS", str(d.turn_silence_ms)) or 500),
                   help="silence that ends the user's turn [GATEWAY_TURN_SILENCE_MS]")
    p.add_argument("--turn-detector", choices=("smart-turn", "silence"),
                   default=_env("TURN_DETECTOR", d.turn_detector),
                   help="what ends the user's turn: smart-turn (Smart Turn v3.2 judges each "
                   "pause: a short one ends a finished sentence, an unfinished one waits "
                   "longer) or silence (--turn-silence-ms alone) [GATEWAY_TURN_DETECTOR]")
    p.add_argument("--barge-in-ms", type=int,
                   default=int(_env("BARGE_IN_MS", str(d.barge_in_ms)) or 300),
                   help="speech over a reply this long cuts it [GATEWAY_BARGE_IN_MS]")
    p.add_argument("--asr-speculate-ms", type=int,
                   default=int(_env("ASR_SPECULATE_MS", str(d.asr_speculate_ms)) or 0),
                   help="start the final decode after this much silence, while the turn's "
                   "end is still awaited; kept if the turn ends, dropped if the user goes on "
                   "(0: off) [GATEWAY_ASR_SPECULATE_MS]")
    p.add_argument("--preemptive-reply", action=argparse.BooleanOptionalAction,
                   default=_env("PREEMPTIVE_REPLY", "1") not in ("0", "false", "off"),
                   help="on the speculative transcript, ask the agent and synthesize its first "
                   "clause before the turn has ended (said only if the turn ends on it) "
                   "[GATEWAY_PREEMPTIVE_REPLY=0 to turn off]")
    p.add_argument("--reply-voice", default=_env("REPLY_VOICE"),
                   help="the voice replies are spoken in (default: the first) "
                   "[GATEWAY_REPLY_VOICE]")
    p.add_argument(
        "--red-distance", type=int, choices=range(0, 5),
        default=int(_env("RED_DISTANCE", str(d.red_distance)) or 0),
        help="RFC 2198 redundancy when the offer has red/48000/2: each packet also carries the "
        "previous N frames (0: off) [GATEWAY_RED_DISTANCE]",
    )
    p.add_argument(
        "--red-max-distance", type=int, choices=range(0, 9), metavar="N",
        default=int(_env("RED_MAX_DISTANCE", str(d.red_max_distance)) or 0),
        help="raise the RED distance up to N frames (for 10 s) while the receiver's NACKs show "
        "longer loss bursts (0: never; at most 8) [GATEWAY_RED_MAX_DISTANCE]",
    )
    p.add_argument(
        "--red-always", action="store_true", default=_env("RED_ALWAYS", "") == "1",
        help="send RED on every packet, not only while the receiver reports loss "
        "[GATEWAY_RED_ALWAYS=1]",
    )
    p.add_argument(
        "--http-flush", choices=("adaptive", "frame"), default=_env("HTTP_FLUSH", d.http_flush),
        help="HTTP streams: after the first frame, coalesce frames that are ready together up to "
        "16 KB (RTT < 50 ms) or 32 KB (adaptive), or write every frame alone (frame) "
        "[GATEWAY_HTTP_FLUSH]",
    )
    p.add_argument(
        "--live-lead-ms", type=float, default=float(_env("LIVE_LEAD_MS", str(d.live_lead_ms))),
        help="HTTP streams with pace=live: how much audio goes out ahead of real time "
        "[GATEWAY_LIVE_LEAD_MS]",
    )
    p.add_argument(
        "--live-write-ms", type=float,
        default=float(_env("LIVE_WRITE_MS", str(d.live_write_ms))),
        help="HTTP streams with pace=live: frames due within this many ms go out in one write "
        "(early, never late; 20 = every frame alone) [GATEWAY_LIVE_WRITE_MS]",
    )
    p.add_argument("--max-body-bytes", type=int,
                   default=int(_env("MAX_BODY_BYTES", str(d.max_body_bytes)) or 0),
                   help="largest request body accepted; larger gets 413 [GATEWAY_MAX_BODY_BYTES]")
    p.add_argument("--max-text-chars", type=int,
                   default=int(_env("MAX_TEXT_CHARS", str(d.max_text_chars)) or 0),
                   help="longest speech text accepted [GATEWAY_MAX_TEXT_CHARS]")
    p.add_argument("--connect-timeout", type=float,
                   default=float(_env("CONNECT_TIMEOUT", str(d.connect_timeout_s)) or 0),
                   help="seconds a session may take to connect before it is closed "
                   "[GATEWAY_CONNECT_TIMEOUT]")
    p.add_argument("--web-dir", type=Path, default=Path(_env("WEB_DIR", str(d.web_dir)) or "."),
                   help="the demo page's directory [GATEWAY_WEB_DIR]")
    p.add_argument("--no-nack", action="store_true",
                   default=(_env("NO_NACK", "") or "") not in ("", "0"),
                   help="leave a=rtcp-fb nack out of the answer (for comparisons) "
                   "[GATEWAY_NO_NACK]")
    p.add_argument("--test-drop-first-tx", type=float, metavar="PERCENT",
                   default=float(_env("TEST_DROP_FIRST_TX", "0") or 0),
                   help="TEST ONLY: drop this %% of first RTP transmissions at the gateway, to "
                   "exercise NACK recovery [GATEWAY_TEST_DROP_FIRST_TX]")
    p.add_argument("--test-drop-burst", type=float, metavar="FRAMES",
                   default=float(_env("TEST_DROP_BURST", "0") or 0),
                   help="TEST ONLY: ... in bursts of this mean length (Gilbert-Elliott; 0: "
                   "independent losses) [GATEWAY_TEST_DROP_BURST]")
    p.add_argument("--send-path", choices=["batch", "aiortc"],
                   default=_env("SEND_PATH", "batch"),
                   help="batch: every stream's due packet is built and sent from one shared tick "
                   "(fast); aiortc: aiortc's own per-sender loop pulls from a track "
                   "[GATEWAY_SEND_PATH]")
    p.add_argument("--idle-packets", choices=["silence", "dtx"],
                   default=_env("IDLE_PACKETS", "silence"),
                   help="what a stream sends between utterances (batch send path): silence: a "
                   "silent Opus frame every 20 ms; dtx: Opus DTX, a 1-byte packet every 400 ms, "
                   "speech resuming with the marker bit set [GATEWAY_IDLE_PACKETS]")
    p.add_argument("--early-first-frame", action=argparse.BooleanOptionalAction,
                   default=_env("EARLY_FIRST_FRAME", "0") not in ("", "0", "false"),
                   help="with --idle-packets dtx: a new utterance's first frame is sent at once "
                   "(the stream's clock restarts there) instead of in its next 20 ms slot "
                   "[GATEWAY_EARLY_FIRST_FRAME]")
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"],
                   default=_env("EVENT_LOOP", "auto"),
                   help="auto = uvloop when installed (the 'speed' extra), else asyncio "
                   "[GATEWAY_EVENT_LOOP]")
    p.add_argument("--phrase-cache-mb", type=float,
                   default=float(_env("PHRASE_CACHE_MB", str(d.phrase_cache_mb)) or 0),
                   help="memory for already-encoded repeated phrases, MB; 0 disables "
                   "[GATEWAY_PHRASE_CACHE_MB]")
    p.add_argument("--phrase-cache-dir", type=Path,
                   default=Path(v) if (v := _env("PHRASE_CACHE_DIR")) else None,
                   help="persist the phrase cache in this directory (default: memory only) "
                   "[GATEWAY_PHRASE_CACHE_DIR]")
    p.add_argument("--keep-dtls-state", action="store_true",
                   default=(_env("KEEP_DTLS_STATE", "") or "") not in ("", "0"),
                   help="keep OpenSSL's DTLS connection for the whole session (by default an "
                   "established DTLS 1.2 client's is freed: ≈100 KB per session) "
                   "[GATEWAY_KEEP_DTLS_STATE]")
    p.add_argument("--stall-warn-ms", type=float,
                   default=float(_env("STALL_WARN_MS", "0") or 0),
                   help="log where the event loop is when it is blocked this long; counts in "
                   "/healthz (0: off) [GATEWAY_STALL_WARN_MS]")
    p.add_argument(
        "--workers", type=_workers, default=_env("WORKERS", "1") or "1",  # a str: parsed by type
        metavar="N|auto",
        help="gateway processes (one event loop each) behind --port, on ports --port + 1 + i; "
        "auto = one per core; 1 = a single process [GATEWAY_WORKERS]",
    )
    p.add_argument("--redis-url", default=_env("REDIS_URL"),
                   help="register workers, their load and their sessions in this Redis; every "
                   "machine pointed at it is one cluster (redis://host:6379/0) "
                   "[GATEWAY_REDIS_URL]")
    p.add_argument("--advertise-url", default=_env("ADVERTISE_URL"),
                   help="the URL clients and other nodes reach this gateway at (default: from "
                   "--host/--port); sessions' Locations are absolute under it "
                   "[GATEWAY_ADVERTISE_URL]")
    p.add_argument("--session-id-prefix", type=_prefix,
                   default=_env("SESSION_ID_PREFIX", "") or "",
                   help="start every session id with this (letters, digits, '.', '_', '-'); the "
                   "supervisor gives each worker its own [GATEWAY_SESSION_ID_PREFIX]")
    p.add_argument("--log-format", choices=("text", "json"),
                   default=_env("LOG_FORMAT", "text"),
                   help="text, or json: one object per line with the session and utterance "
                   "ids [GATEWAY_LOG_FORMAT]")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", d.log_level),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="[GATEWAY_LOG_LEVEL]")
    return p


def parse_config(argv: Sequence[str] | None = None) -> GatewayConfig:
    args = build_parser().parse_args(argv)
    if args.live_lead_ms < 0 or args.live_write_ms < 0:
        raise SystemExit("error: --live-lead-ms and --live-write-ms must be >= 0")
    voices = tuple(args.voices or ()) or tuple(
        v.strip() for v in (_env("VOICES", "") or "").split(";") if v.strip()
    )
    return GatewayConfig(
        host=args.host,
        port=args.port,
        ice_hosts=_csv(args.ice_hosts),
        ice_servers=_csv(args.ice_servers),
        udp_mux=not args.no_udp_mux,
        udp_port=args.udp_port,
        udp_sendmmsg=not args.no_sendmmsg,
        turn_username=args.turn_username,
        turn_credential=args.turn_credential,
        voices=voices or GatewayConfig.voices,
        max_sessions=args.max_sessions,
        bitrate=args.bitrate,
        expected_loss=args.expected_loss,
        max_body_bytes=args.max_body_bytes,
        max_text_chars=args.max_text_chars,
        connect_timeout_s=args.connect_timeout,
        web_dir=args.web_dir,
        log_level=args.log_level,
        log_format=args.log_format,
        event_loop=args.event_loop,
        send_path=args.send_path,
        idle_packets=args.idle_packets,
        early_first_frame=args.early_first_frame,
        answer_nack=not args.no_nack,
        release_dtls=not args.keep_dtls_state,
        test_drop_first_tx_percent=args.test_drop_first_tx,
        test_drop_burst=args.test_drop_burst,
        phrase_cache_mb=args.phrase_cache_mb,
        phrase_cache_dir=args.phrase_cache_dir,
        stall_warn_ms=args.stall_warn_ms,
        cors_origins=_csv(args.cors_origins) or ("*",),
        auth_tokens=tuple(args.auth_tokens or ()) or _csv(_env("AUTH_TOKEN")),
        auth_jwt_secret=args.auth_jwt_secret or None,
        rate_limit_sessions=args.rate_limit_sessions,
        rate_limit_speech=args.rate_limit_speech,
        idle_timeout_s=args.idle_timeout,
        drain_timeout_s=args.drain_timeout,
        duplex=args.duplex,
        asr=args.asr,
        agent=args.agent,
        vad=args.vad,
        turn_silence_ms=args.turn_silence_ms,
        turn_detector=args.turn_detector,
        barge_in_ms=args.barge_in_ms,
        asr_speculate_ms=args.asr_speculate_ms,
        preemptive_reply=args.preemptive_reply,
        reply_voice=args.reply_voice,
        red_distance=args.red_distance,
        red_max_distance=args.red_max_distance,
        red_adaptive=not args.red_always,
        http_flush=args.http_flush,
        live_lead_ms=args.live_lead_ms,
        live_write_ms=args.live_write_ms,
        workers=args.workers,
        redis_url=args.redis_url or None,
        advertise_url=args.advertise_url or None,
        session_id_prefix=args.session_id_prefix,
    )
