"""The compiled send path (gateway/net/sendpath.py): the same SRTP bytes as the Python path for
the same packets and keys (sequence wrap and ROC increment included, retransmissions protected
by pylibsrtp on the same ``srtp_t`` in between), sent with one ``sendmmsg``; the fallback when
the extension is absent; ``/healthz`` names the path; real sessions stream through it."""

from __future__ import annotations

import asyncio
import socket

import pylibsrtp
import pytest
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters
from aiortc.rtp import HeaderExtensionsMap

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.net import sendmmsg, sendpath
from gateway.rtp.header import RtpHeaderTemplate

KEY = bytes(range(30))
SSRC = 0x1234ABCD

pytestmark = pytest.mark.skipif(sendpath.load() is None,
                                reason=f"no compiled send path here: {sendpath.failure()}")


def session(direction: int = pylibsrtp.Policy.SSRC_ANY_OUTBOUND) -> pylibsrtp.Session:
    policy = pylibsrtp.Policy(key=KEY, ssrc_type=direction,
                              srtp_profile=pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80)
    policy.allow_repeat_tx = True  # as aiortc sets it: NACKed packets are protected again
    return pylibsrtp.Session(policy=policy)


def templates() -> tuple[RtpHeaderTemplate, RtpHeaderTemplate, RtpHeaderTemplate]:
    """A stream's headers as the batch path has them: mid + abs-send-time, marker variants and
    RED's payload type."""
    extensions = HeaderExtensionsMap()
    extensions.configure(_params())
    base = RtpHeaderTemplate.from_aiortc(111, SSRC, extensions, "0", marker=0)
    marker = RtpHeaderTemplate.from_aiortc(111, SSRC, extensions, "0", marker=1)
    red = RtpHeaderTemplate.from_aiortc(63, SSRC, extensions, "0", marker=0)
    return base, marker, red


def _params() -> object:
    class Params:
        headerExtensions = [
            RTCRtpHeaderExtensionParameters(
                id=1, uri="urn:ietf:params:rtp-hdrext:sdes:mid"),
            RTCRtpHeaderExtensionParameters(
                id=3, uri="http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"),
        ]
    return Params()


def compiled_batch() -> tuple[sendpath.CompiledBatch, socket.socket, socket.socket]:
    module = sendpath.load()
    protect = aiortc_compat.srtp_protect_address()
    assert module is not None and protect is not None
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.bind(("127.0.0.1", 0))
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.settimeout(2)
    batch = sendpath.CompiledBatch(module, out.fileno(), protect,
                                   pylibsrtp.SRTP_MAX_TRAILER_LEN)
    return batch, out, sink


def packets(first_seq: int, count: int) -> list[tuple[int, int, int, int, bytes]]:
    """(variant, seq, timestamp, abs-send-time, payload): across the 65535 -> 0 wrap, the
    marker and RED variants mixed in, payload sizes varying."""
    out = []
    for i in range(count):
        seq = (first_seq + i) & 0xFFFF
        ts = (0xFFFFF000 + i * 960) & 0xFFFFFFFF  # the timestamp wraps too
        payload = bytes((i * 7 + j) & 0xFF for j in range(20 + (i * 13) % 140))
        out.append((i % 3, seq, ts, (i * 5003) & 0xFFFFFF, payload))
    return out


def test_compiled_srtp_bytes_match_the_python_path_across_the_wrap():
    headers = templates()
    python_session, compiled_session = session(), session()
    protect = aiortc_compat.srtp_protector(python_session)
    batch, out, sink = compiled_batch()
    try:
        stream = batch.new_stream(headers[0].raw, headers[0].ast_at,
                                  aiortc_compat.srtp_session_address(compiled_session),
                                  sendmmsg.sockaddr_bytes(sink.getsockname()))
        expected, got, firsts, plains = [], [], [], []
        for n, (variant, seq, ts, ast, payload) in enumerate(packets(65520, 40)):
            header = headers[variant]
            plain = header.build(seq, ts, ast.to_bytes(3, "big"), payload)
            expected.append(protect(plain))
            assert batch.stage_raw(stream, header.second_byte, seq, ts, ast, payload) > 0
            staged = batch.staged()
            got.extend(staged)
            firsts.extend(staged)
            plains.append(plain)
            batch.discard()
            if n % 9 == 4:
                # a NACK answered by aiortc's own path on the same srtp_t between two compiled
                # packets (plain retransmission: the same seq again)
                again = headers[0].build(seq, ts, ast.to_bytes(3, "big"), payload)
                expected.append(python_session.protect(again))
                got.append(compiled_session.protect(again))
        assert len(got) == len(expected) > 40
        assert got == expected
        # a receiver follows the ROC across the wrap (65535 -> 0: ROC 0 -> 1)
        receiver = session(pylibsrtp.Policy.SSRC_ANY_INBOUND)
        assert [receiver.unprotect(p) for p in firsts] == plains
    finally:
        out.close()
        sink.close()


def test_one_flush_sends_every_staged_packet_in_order():
    headers = templates()
    batch, out, sink = compiled_batch()
    try:
        srtp = session()  # kept alive: the stream holds its srtp_t's address
        stream = batch.new_stream(headers[0].raw, headers[0].ast_at,
                                  aiortc_compat.srtp_session_address(srtp),
                                  sendmmsg.sockaddr_bytes(sink.getsockname()))
        octets = 0
        for i, (_, seq, ts, ast, payload) in enumerate(packets(100, 30)):
            assert batch.stage_raw(stream, headers[0].second_byte, seq, ts, ast, payload,
                                   ntp=1000 + i) > 0
            octets += len(payload)
        # the sender-report counters of what was staged, kept in C until taken
        assert batch.take_counters(stream) == (30, octets, ts, 1000 + 29)
        assert batch.take_counters(stream)[:2] == (0, 0)
        assert batch.stage_raw(stream, headers[0].second_byte, 1, 1, 1, bytes(2000)) == -1
        assert batch.take_counters(stream)[:2] == (0, 0)  # a packet refused is not counted
        staged = batch.staged()
        assert batch.flush() == 30
        received = [sink.recv(2048) for _ in range(30)]
        assert received == staged
        counters = batch.counters()
        assert counters["calls"] == 1 and counters["sent"] == 30 and batch.count() == 0
    finally:
        out.close()
        sink.close()


def test_a_packet_past_the_slot_is_refused_not_staged():
    headers = templates()
    batch, out, sink = compiled_batch()
    try:
        srtp = session()  # kept alive: the stream holds its srtp_t's address
        stream = batch.new_stream(headers[0].raw, headers[0].ast_at,
                                  aiortc_compat.srtp_session_address(srtp),
                                  sendmmsg.sockaddr_bytes(sink.getsockname()))
        assert batch.stage_raw(stream, headers[0].second_byte, 1, 1, 1, bytes(1500)) == -1
        assert batch.count() == 0
    finally:
        out.close()
        sink.close()


def test_without_the_extension_auto_falls_back_and_compiled_refuses(monkeypatch):
    monkeypatch.setattr(sendpath, "DISABLED", True)
    compiled, reason = aiortc_compat.resolve_send_path("auto")
    assert compiled is None and "disabled" in reason
    with pytest.raises(RuntimeError, match="unavailable"):
        aiortc_compat.resolve_send_path("compiled")
    assert aiortc_compat.resolve_send_path("python") == (None, "--send-path python")


def test_auto_takes_the_compiled_path_where_it_builds():
    compiled, reason = aiortc_compat.resolve_send_path("auto")
    assert compiled is not None and reason == ""


async def _stream_and_read_health(gateway) -> dict:
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    try:
        await client.connect()
        await client.capture.wait_packets(10)  # decrypted by aiortc: valid SRTP
        result = await client.say("A tone please.", voice="tone")
        state = await client.wait_utterance(result.utterance["id"])
        assert state["state"] == "done" and state["frames_sent"] == 50
        await asyncio.sleep(0.1)
        async with gateway.http.get(gateway.url + "/healthz") as response:
            return await response.json()
    finally:
        await client.close()


async def test_a_session_streams_through_the_compiled_path(gateway):
    health = await _stream_and_read_health(gateway)
    assert health["send_path"] == "compiled"
    assert health["udp_mux"]["send_path"] == "compiled"
    assert health["udp_mux"]["compiled_sent"] >= 60


async def test_python_send_path_when_chosen(start_gateway):
    gateway = await start_gateway(send_path="python")
    health = await _stream_and_read_health(gateway)
    assert health["send_path"] == "python"
    assert health["udp_mux"]["compiled_sent"] == 0
    assert health["udp_mux"]["send_path_reason"] == "--send-path python"


async def test_fallback_when_the_extension_is_absent(start_gateway, monkeypatch):
    monkeypatch.setattr(sendpath, "DISABLED", True)
    gateway = await start_gateway()  # auto
    health = await _stream_and_read_health(gateway)
    assert health["send_path"] == "python"
    assert "disabled" in health["udp_mux"]["send_path_reason"]
    assert health["udp_mux"]["compiled_sent"] == 0
