"""CosyVoice through the whole gateway: stand-in server -> backend -> speaker -> WebRTC on loopback.

Each test runs the stand-in (HTTP and gRPC), a gateway whose voices are CosyVoice backends
pointing at it, and real aiortc listeners. Synchronisation is by events only: the stand-in's
request log (``wait_requests``, ``closed``, ``finished``), its ``gate`` and RTP arrivals.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from gateway.client.capture import ReceivedPacket, decode, utterance_slots, voice_frames
from gateway.client.peer import GatewayClient
from gateway.media.opus_codec import (
    ENCODER_LOOKAHEAD_SAMPLES,
    FRAME_SAMPLES,
    EncoderSettings,
    silence_packet,
)
from gateway.media.resample import Resampler
from gateway.testing.cosyvoice_server import CosyVoiceStandIn, StandInConfig
from gateway.tts.registry import VoiceRegistry, build_cosyvoice

RATE = 24_000  # CosyVoice2/3's rate: the stand-in's chunks need no resampling
TEXT = "CosyVoice speaking through the gateway."  # 39 chars -> 2.34 s of buzz
LONG = "A longer reply that keeps the upstream stream open."  # 3.1 s
TRANSPORTS = ["cv-http", "cv-grpc"]
SILENCE = silence_packet(EncoderSettings())
GUARD_S = 5.0  # only a ceiling on waits for events; never a synchronisation delay


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def standin() -> AsyncIterator[CosyVoiceStandIn]:
    server = CosyVoiceStandIn(StandInConfig(sample_rate=RATE, chunk_bytes=4800))
    await server.start()
    yield server
    server.gate = None
    await server.stop()


@pytest.fixture
async def gateway(start_gateway, standin: CosyVoiceStandIn):
    """Overrides conftest's gateway: this module's voices are CosyVoice ones."""
    gone = _closed_port()
    q = f"spk_id=%E4%B8%AD%E6%96%87%E5%A5%B3&rate={RATE}&timeout=1"
    voices = VoiceRegistry([
        build_cosyvoice(f"cosyvoice+{standin.http_url}?{q}", "cv-http"),
        build_cosyvoice(f"cosyvoice+grpc://{standin.grpc_target}?{q}", "cv-grpc"),
        build_cosyvoice(f"cosyvoice+http://127.0.0.1:{gone}?{q}", "gone-http"),
        build_cosyvoice(f"cosyvoice+grpc://127.0.0.1:{gone}?{q}", "gone-grpc"),
    ])
    # The cache would serve repeated texts without asking the stand-in at all.
    gateway = await start_gateway(voices=voices, phrase_cache_mb=0)
    yield gateway
    await voices.close()


def utterance_packets(client: GatewayClient, state: dict, said_at: float) -> list[ReceivedPacket]:
    """The voice's frames back to back (keep-alive slots of a starved encoder left out)."""
    return voice_frames(utterance_slots(client.capture.ordered(), state["first_seq"],
                                        state["frames_sent"], after=said_at))


async def first_speech_packet(client: GatewayClient, after: float) -> ReceivedPacket:
    """Wait for the first non-silence packet that arrives after ``after``."""

    def find() -> ReceivedPacket | None:
        return next((p for p in reversed(client.capture.packets)
                     if p.arrival >= after and p.payload != SILENCE), None)

    await asyncio.wait_for(client.capture.wait_until(lambda: find() is not None), GUARD_S)
    found = [p for p in client.capture.packets if p.arrival >= after and p.payload != SILENCE]
    return found[0]


def envelope(pcm: np.ndarray) -> np.ndarray:
    n = pcm.size // FRAME_SAMPLES
    frames = pcm[: n * FRAME_SAMPLES].astype(np.float64).reshape(n, FRAME_SAMPLES)
    return np.sqrt((frames ** 2).mean(axis=1))


def waveform_match(received: np.ndarray, source: np.ndarray, span: int = 16) -> float:
    """Best correlation of the waveforms over lags near the codec's delay."""
    n = source.size - 2 * span
    return max(
        float(np.corrcoef(received[lag : lag + n].astype(float), source[:n].astype(float))[0, 1])
        for lag in range(ENCODER_LOOKAHEAD_SAMPLES - span, ENCODER_LOOKAHEAD_SAMPLES + span)
    )


@pytest.mark.parametrize("voice", TRANSPORTS)
async def test_speech_arrives_as_the_servers_pcm(connect, standin, voice):
    client = await connect()
    result = await client.say(TEXT, voice=voice)
    state = await client.wait_utterance(result.utterance["id"])
    assert state["state"] == "done" and state["voice"] == voice and state["error"] is None
    [rec] = standin.requests
    assert rec.outcome == "completed" and rec.fields["tts_text"] == TEXT
    source = np.frombuffer(bytes(rec.sent), "<i2")
    assert source.size == int(RATE * 0.06 * len(TEXT))
    expected_frames = -(-source.size // FRAME_SAMPLES)
    assert state["frames_encoded"] == state["frames_sent"] == expected_frames
    speech = utterance_packets(client, state, result.said_at)
    assert len(speech) == expected_frames and not client.capture.missing()
    received = decode(speech).pcm
    assert received.size == expected_frames * FRAME_SAMPLES
    decoded = received[ENCODER_LOOKAHEAD_SAMPLES:]  # the encoder's delay
    source = source[: decoded.size]
    # Same loudness, same shape (the 4 Hz syllable envelope) and the same waveform.
    ratio = np.sqrt(np.mean(decoded.astype(float) ** 2) / np.mean(source.astype(float) ** 2))
    assert 0.8 < ratio < 1.2, ratio
    assert np.corrcoef(envelope(decoded), envelope(source))[0, 1] > 0.95
    assert waveform_match(received, source) > 0.9


async def test_22050_hz_servers_are_resampled(connect, standin, gateway):
    standin.config.sample_rate = 22050  # CosyVoice-300M; the HTTP spec is told the same
    synth = build_cosyvoice(f"cosyvoice+{standin.http_url}?spk_id=a&rate=22050", "cv-22k")
    try:
        client = await connect()
        session = gateway.registry.get(client.session_url.rsplit("/", 1)[-1])
        utterance = session.speaker.say(TEXT, synth)
        await asyncio.wait_for(utterance.finished.wait(), 10)
    finally:
        await synth.close()
    source = np.frombuffer(bytes(standin.requests[0].sent), "<i2")
    resampler = Resampler(22050)
    at24k = np.concatenate([resampler.push(source), resampler.flush()])
    assert utterance.state.value == "done"
    assert utterance.frames_sent == -(-at24k.size // FRAME_SAMPLES)


@pytest.mark.parametrize("voice", TRANSPORTS)
async def test_first_frame_leaves_while_upstream_is_held(connect, standin, voice):
    """480 samples at 24 kHz are enough: the first packet goes out before the rest exists."""
    standin.config.chunk_bytes = FRAME_SAMPLES * 2  # the first chunk is exactly one frame
    standin.gate = asyncio.Event()
    client = await connect()
    said_at = time.monotonic()
    result = await client.say(TEXT, voice=voice)
    first = await first_speech_packet(client, said_at)
    [rec] = standin.requests
    # The stand-in is still holding its stream after the first 960 bytes.
    assert len(rec.sent) == FRAME_SAMPLES * 2 and not rec.finished.is_set()
    async with client.http.get(f"{client.session_url}/speech/{result.utterance['id']}") as r:
        held = await r.json()
    assert held["state"] == "playing" and held["frames_encoded"] == 1
    assert held["first_seq"] == first.seq % 65536
    standin.gate.set()
    state = await client.wait_utterance(result.utterance["id"])
    assert state["state"] == "done" and rec.outcome == "completed"
    assert state["frames_sent"] == len(rec.sent) // (FRAME_SAMPLES * 2)


FAULTS = [
    ("refuse", {"cv-http": "request failed: ServerDisconnectedError",
                "cv-grpc": "RPC failed (UNAVAILABLE"}),
    ("http422", {"cv-http": "HTTP 422 Unprocessable Entity", "cv-grpc": "INVALID_ARGUMENT"}),
    ("http500", {"cv-http": "HTTP 500 Internal Server Error", "cv-grpc": "RPC failed (UNKNOWN"}),
    ("timeout_before_first", {"cv-http": "no audio for 1 s (after 0 bytes)",
                              "cv-grpc": "no audio for 1 s (after 0 bytes)"}),
    ("cut_mid_stream", {"cv-http": "stream cut after", "cv-grpc": "stream cut after"}),
]


@pytest.mark.parametrize("voice", TRANSPORTS)
@pytest.mark.parametrize(("fault", "messages"), FAULTS, ids=[f for f, _ in FAULTS])
async def test_a_fault_fails_one_utterance_only(connect, standin, voice, fault, messages):
    a, b = await connect(), await connect()
    # b speaks a long reply over the same backend (same HTTP client / gRPC channel) throughout.
    said_at = time.monotonic()
    b_long = await b.say(LONG, voice=voice)
    await first_speech_packet(b, said_at)  # b's request is past the stand-in's fault draw
    # Every request from now on fails. (aiohttp resends an idempotent GET once when the server
    # drops the connection before replying, so "refuse" costs the HTTP voice two requests.)
    standin.faults = fault
    failing = await a.say(TEXT, voice=voice)
    state = await a.wait_utterance(failing.utterance["id"], timeout=10)
    standin.faults = None
    assert state["state"] == "failed", state
    assert messages[voice] in state["error"] and f"'{voice}'" in state["error"]
    failed = standin.requests[1:]
    assert failed and all(rec.fault == fault for rec in failed)
    for rec in failed:  # the upstream request is closed
        await asyncio.wait_for(rec.closed.wait(), GUARD_S)
    if fault == "cut_mid_stream":
        assert 0 < state["frames_sent"] < -(-len(TEXT) * 0.06 * RATE // FRAME_SAMPLES)
    else:  # an error body is never played as audio
        assert state["frames_encoded"] == state["frames_sent"] == 0
    # The failure is reported in the session's state too.
    session_state = await a.state()
    assert session_state["utterances"]["failed"] == 1
    [reported] = [u for u in session_state["utterances"]["recent"] if u["id"] == state["id"]]
    assert reported["error"] == state["error"]
    # The same session speaks again, and the other session never stopped.
    again = await a.say("Still here.", voice=voice)
    assert (await a.wait_utterance(again.utterance["id"]))["state"] == "done"
    b_state = await b.wait_utterance(b_long.utterance["id"], timeout=30)
    assert b_state["state"] == "done"
    assert b_state["frames_sent"] == -(-int(RATE * 0.06 * len(LONG)) // FRAME_SAMPLES)
    assert standin.requests[0].outcome == "completed"


@pytest.mark.parametrize("voice", ["gone-http", "gone-grpc"])
async def test_connection_refused_fails_the_utterance(connect, voice):
    client = await connect()
    result = await client.say(TEXT, voice=voice)
    state = await client.wait_utterance(result.utterance["id"], timeout=10)
    assert state["state"] == "failed" and state["frames_sent"] == 0
    assert f"'{voice}'" in state["error"]
    assert ("ClientConnectorError" if voice == "gone-http" else "UNAVAILABLE") in state["error"]
    ok = await client.say("still here", voice="cv-http")
    assert (await client.wait_utterance(ok.utterance["id"]))["state"] == "done"


async def _held_stream(client: GatewayClient, standin: CosyVoiceStandIn, voice: str,
                       before_first_chunk: bool = False):
    """Start an utterance whose upstream is held open (mid-stream, or before any audio)."""
    if before_first_chunk:
        standin.config.first_chunk_delay_ms = 60_000
    else:
        standin.gate = asyncio.Event()
    said_at = time.monotonic()
    result = await client.say(LONG, voice=voice)
    [rec] = await asyncio.wait_for(standin.wait_requests(1), GUARD_S)
    if not before_first_chunk:
        await first_speech_packet(client, said_at)
    assert not rec.closed.is_set()
    return result, rec


@pytest.mark.parametrize("voice", TRANSPORTS)
@pytest.mark.parametrize("before_first_chunk", [False, True], ids=["mid-stream", "before-audio"])
async def test_interrupt_closes_upstream_at_once(connect, standin, voice, before_first_chunk):
    client = await connect()
    result, rec = await _held_stream(client, standin, voice, before_first_chunk)
    started = time.monotonic()
    assert await client.interrupt() == 1
    await asyncio.wait_for(rec.closed.wait(), GUARD_S)
    await asyncio.wait_for(rec.finished.wait(), GUARD_S)
    assert time.monotonic() - started < 1.0
    assert rec.outcome == "cancelled"
    state = await client.wait_utterance(result.utterance["id"])
    assert state["state"] == "interrupted"
    # And the session goes on speaking.
    standin.gate = None
    standin.config.first_chunk_delay_ms = 0
    ok = await client.say(TEXT, voice=voice)
    assert (await client.wait_utterance(ok.utterance["id"]))["state"] == "done"


@pytest.mark.parametrize("voice", TRANSPORTS)
async def test_delete_closes_upstream_at_once(connect, standin, gateway, voice):
    client = await connect()
    _, rec = await _held_stream(client, standin, voice)
    started = time.monotonic()
    async with client.http.delete(client.session_url) as response:
        assert response.status == 204
    await asyncio.wait_for(rec.closed.wait(), GUARD_S)
    assert time.monotonic() - started < 1.0 and rec.outcome == "cancelled"
    assert len(gateway.registry) == 0


@pytest.mark.parametrize("voice", TRANSPORTS)
async def test_client_disconnect_closes_upstream(connect, standin, gateway, voice):
    client = await connect()
    _, rec = await _held_stream(client, standin, voice)
    session = next(iter(gateway.registry))
    started = time.monotonic()
    await client.close(delete=False)  # the listener just goes away (DTLS close_notify)
    await asyncio.wait_for(session.closed.wait(), GUARD_S)
    await asyncio.wait_for(rec.closed.wait(), GUARD_S)
    assert time.monotonic() - started < 1.0 and rec.outcome == "cancelled"
    assert session.close_reason == "peer connection closed"
