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
from gateway.nack.store import FrameStore
from gateway.net import sendmmsg, sendpath
from gateway.rtp import red as rfc2198
from gateway.rtp.header import RtpHeaderTemplate
from gateway.webrtc.pacer import PacingClock
from gateway.webrtc.red_sender import RedSender

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


def parked_stream(batch: sendpath.CompiledBatch, header: RtpHeaderTemplate, store: FrameStore,
                  srtp: pylibsrtp.Session, sink: socket.socket, seq: int, handle: int,
                  origin: float = 0.0, ts_origin: int = 0) -> object:
    """A stream of ``header`` protected on ``srtp`` to ``sink``, parked in ``batch`` from slot
    0 at ``origin`` (20 ms slots, the 2.5 ms grid) with ``store``'s ring and silence."""
    stream = batch.new_stream(header.raw, header.ast_at,
                              aiortc_compat.srtp_session_address(srtp),
                              sendmmsg.sockaddr_bytes(sink.getsockname()))
    assert batch.park(stream, (origin, 0.02, 0.1, 0.0, 0.0025), 0, seq, ts_origin,
                      header.second_byte, store.ring, store.silence, handle=handle)
    return stream


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


def test_fed_frames_go_in_order_and_the_stream_is_asked_for_when_they_run_low():
    """C holds ``FED_SLOTS`` fed frames at most; it lists the stream when a frame fed with
    ``report`` went, when its fed frames fall to ``FED_LOW`` and when they run out -- not for
    the frames between; a frame longer than ``FEED_MAX`` is not taken; ``unfeed`` gives back
    the count not sent."""
    header = templates()[1]
    batch, out, sink = compiled_batch()
    store = FrameStore()
    store.header, store.silence = header, b"\xf8\xff\xfe"
    srtp = session()  # (alive while C protects with it)
    try:
        stream = parked_stream(batch, header, store, srtp, sink, 100, 7)
        frames = [bytes([k]) * (10 + k) for k in range(sendpath.FED_SLOTS + 4)]
        taken, buf = batch.feed_run(stream, frames, 0, True)
        assert taken == sendpath.FED_SLOTS  # the rest wait in the sender's queue
        asked = []
        for slot in range(sendpath.FED_SLOTS + 2):
            _, _, consumed = batch.run_parked(slot * 0.02, 0, 0, 0.0005, 5)
            if consumed is not None:
                asked.append((slot, consumed.tolist()))
            batch.discard()
        low = sendpath.FED_SLOTS - sendpath.FED_LOW - 1  # its frame leaves FED_LOW
        assert asked == [(0, [7]), (low, [7]), (sendpath.FED_SLOTS - 1, [7])]
        count, first = batch.take_sent(stream)
        assert (count, first) == (sendpath.FED_SLOTS, 100)
        owner = object()
        store.record_run(first, frames[:count], owner)  # type: ignore[arg-type]
        sent = [store.lookup(100 + k) for k in range(sendpath.FED_SLOTS + 2)]
        assert [(p.payload, p.frame.owner, p.frame.index) for p in sent[:count]  # type: ignore
                ] == [(frames[k], owner, k) for k in range(count)]
        assert [p.payload if p else None for p in sent[sendpath.FED_SLOTS:]] == [
            store.silence] * 2  # then silence
        assert batch.take_sent(stream) == (0, 100)
        too_long = b"x" * (sendpath.FEED_MAX + 1)
        assert batch.feed_run(stream, [b"ok", too_long], 0, False)[0] == 1
        assert batch.unfeed(stream) == 1 and batch.unfeed(stream) == 0
        assert batch.unpark(stream) is not None
        del buf
    finally:
        out.close()
        sink.close()


def test_parked_streams_on_other_phases_each_go_on_their_own_slots_across_an_unpark():
    """``gw_run_parked`` reads each parked stream's next due time from one array (so a tick
    touches only the streams due): five streams a tick apart each send once a period, at
    their own slot; unparking one in the middle of the list (its last entry moves into its
    place) keeps every other stream's schedule; ``next_due`` is the earliest left."""
    header = templates()[1]
    batch, out, sink = compiled_batch()
    sessions = [session() for _ in range(5)]  # (alive while C protects with them)
    stores = [FrameStore() for _ in range(5)]
    try:
        streams = []
        for k, (srtp, store) in enumerate(zip(sessions, stores, strict=True)):
            store.header, store.silence = header, b"\xf8\xff\xfe"
            stream = batch.new_stream(header.raw, header.ast_at,
                                      aiortc_compat.srtp_session_address(srtp),
                                      sendmmsg.sockaddr_bytes(sink.getsockname()))
            assert batch.park(stream, (k * 0.0025, 0.02, 0.1, 0.0, 0.0025), 0, 100 * k, 0,
                              header.second_byte, store.ring, store.silence, handle=k)
            streams.append(stream)
        parked = set(range(5))
        sent = dict.fromkeys(range(5), 0)
        for tick in range(80):  # 0.2 s of ticks
            now = tick * 0.0025
            if tick == 40:
                assert batch.unpark(streams[1]) is not None
                parked.discard(1)
            due_now = [k for k in parked if tick % 8 == k]
            staged, next_due, _ = batch.run_parked(now, 0, 0, 0.0005, 5)
            assert staged == len(due_now), tick
            for k in due_now:
                sent[k] += 1
            upcoming = [k * 0.0025 + (sent[k]) * 0.02 for k in parked]
            assert next_due == pytest.approx(min(upcoming)), tick
            batch.discard()
        assert [stores[k].newest_seq for k in (0, 2, 3, 4)] == [
            (100 * k + sent[k] - 1) & 0xFFFF for k in (0, 2, 3, 4)]
        assert sent == {0: 10, 1: 5, 2: 10, 3: 10, 4: 10}
        for k in parked:
            assert batch.unpark(streams[k]) is not None
    finally:
        out.close()
        sink.close()


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


@pytest.mark.parametrize("where", ["in place", "copied", "not bytes"])
def test_a_stream_run_from_c_sends_what_the_tick_would_byte_for_byte(where, monkeypatch):
    """``gw_run_parked``: slots released as ``PacingClock.release_due`` releases them (early
    by 0.5 ms, at most ``limit`` a run, re-anchored after a stall), each carrying the next fed
    frame (read in its ``bytes``, or from a copy where ``sendpath._DATA_OFFSET`` is unknown) or
    the silence, protected as the Python path protects the same packet, recorded in a
    FrameStore's ring as ``FrameStore.lookup`` reads it once the sender took the fed frames
    sent (``take_sent``, ``FrameStore.record_run``)."""
    assert sendpath.load() is not None and sendpath._DATA_OFFSET is not None  # (CPython)
    if where == "copied":
        monkeypatch.setattr(sendpath, "_DATA_OFFSET", None)
    # (payloads that are not exactly ``bytes`` -- no inline data at ``_DATA_OFFSET`` -- are
    # copied, whatever the interpreter)
    kind = bytearray if where == "not bytes" else bytes
    header = templates()[1]  # (a stream without DTX: every packet has the marker bit)
    python_session, compiled_session = session(), session()
    protect = aiortc_compat.srtp_protector(python_session)
    batch, out, sink = compiled_batch()
    store = FrameStore()
    store.header, store.silence = header, b"\xf8\xff\xfe"
    pacer = PacingClock(period=0.02, max_lateness=0.1, clock=lambda: 0.0, align=lambda t: t)
    try:
        stream = batch.new_stream(header.raw, header.ast_at,
                                  aiortc_compat.srtp_session_address(compiled_session),
                                  sendmmsg.sockaddr_bytes(sink.getsockname()))
        origin, slot = 1000.0, 7
        ts_origin, seq = 0xFFFFF000, 65530
        assert batch.park(stream, (origin, 0.02, 0.1, 0.0, 0.0025), slot, seq,
                          ts_origin, header.second_byte, store.ring, store.silence, handle=42)
        pacer._origin, pacer._slot = origin, slot  # the reference schedule
        ast = 0x123456
        # (now, frames fed before the run): on time, a fed frame, early by 0.4 ms, late by 3
        # slots with two fed (catch-up: both, then silence), a stall past max lateness
        # (re-anchored)
        runs = [(origin + 7 * 0.02, []), (origin + 8 * 0.02, [b"speech-1"]),
                (origin + 9 * 0.02 - 0.0004, []),
                (origin + 13 * 0.02, [b"speech-2", b"speech-three"]),
                (origin + 16 * 0.02 + 0.0001, []), (origin + 16 * 0.02, []),
                (origin + 27 * 0.02, [])]
        expected: list[bytes] = []
        buffers = []  # (the sender keeps each fed run's buffer until its frames are taken)
        for now, fed in runs:
            if fed:
                taken, buf = batch.feed_run(stream, [kind(f) for f in fed], 77, True)
                assert taken == len(fed)
                buffers.append(buf)
            staged, due, consumed = batch.run_parked(now, 5, ast, 0.0005, 5)
            released, next_due = pacer.release_due(now, 5)
            assert due == pytest.approx(next_due)
            waiting = list(fed)
            first_seq = seq
            for s in released:
                payload = waiting.pop(0) if waiting else store.silence
                plain = header.build(seq, (ts_origin + s * 960) & 0xFFFFFFFF,
                                     ast.to_bytes(3, "big"), payload)
                expected.append(protect(plain))
                seq = (seq + 1) & 0xFFFF
            assert not waiting
            count, first = batch.take_sent(stream)
            assert count == len(fed)
            if fed:  # the sender's half (``FedFrames.sent``)
                assert first == first_seq
                assert store.record_run(first, list(fed), None) == (
                    (ts_origin + released[0] * 960) & 0xFFFFFFFF)
            for k, s in enumerate(released):
                at = (first_seq + k) & 0xFFFF
                payload = fed[k] if k < len(fed) else store.silence
                kept = store.lookup(at)
                plain = header.build(at, (ts_origin + s * 960) & 0xFFFFFFFF,
                                     ast.to_bytes(3, "big"), payload)
                assert kept is not None and kept.packet == plain and kept.payload == payload
            assert staged == len(released)
            # the stream is asked for once a run that sent fed frames (here each run's fed
            # frames end in it: none left)
            assert (consumed.tolist() if consumed is not None else None) == (
                [42] if fed else None)
        # slots: 7; 8 (fed); 9 (early); 10-13 (late: two fed, two silent); 14-16; 17 (a stall:
        # re-anchored, the next a period away) -- 11 packets, across the seq wrap
        assert seq == (65530 + 11) & 0xFFFF
        got = batch.staged()
        assert got == expected
        origin_back, max_late, state = batch.unpark(stream)
        assert max_late == pytest.approx(0.2)  # the stall's
        assert state[0] == pacer.next_slot and state[1] == seq
        assert origin_back == pytest.approx(pacer._origin) and state[4] == 1  # one re-anchor
        assert batch.feed_run(stream, [b"x"], 1, False)[0] == -1  # not in C any more
        batch.discard()
    finally:
        out.close()
        sink.close()


def _extensions() -> HeaderExtensionsMap:
    extensions = HeaderExtensionsMap()
    extensions.configure(_params())
    return extensions


def _red_setup() -> tuple[RtpHeaderTemplate, RtpHeaderTemplate, FrameStore]:
    """A stream's plain and RED headers (marker set: no DTX) and its store, as the leg sets
    them up for a RED-capable peer (Opus 111, RED 63)."""
    extensions = _extensions()
    header = RtpHeaderTemplate.from_aiortc(111, SSRC, extensions, "0")
    red_header = RtpHeaderTemplate.from_aiortc(63, SSRC, extensions, "0")
    store = FrameStore()
    store.header, store.red_header, store.red_opus_pt = header, red_header, 111
    store.silence = b"\xf8\xff\xfe"
    return header, red_header, store


def test_red_sent_from_c_is_what_wrap_makes_and_what_a_nack_gets_back():
    """RED in ``gw_run_parked``: while ``RedSender``'s state (``red_set``) has it on, each
    packet -- fed speech or silence -- is the RED payload ``RedSender.wrap`` makes of it after
    the previous packets (the history given from the store when it turns on, ``red_fill``,
    then C's own: a block too long to carry left out, a raised distance, off again after the
    hold, on again from the store), under RED's payload type; plain while off. Each packet
    decrypts to the bytes the tick would have sent, the store rebuilds each for a NACK
    byte-identical, and RED's counters are ``wrap``'s."""
    header, red_header, store = _red_setup()
    compiled_session, receiver = session(), session(pylibsrtp.Policy.SSRC_ANY_INBOUND)
    batch, out, sink = compiled_batch()
    reference = RedSender(63, 111, distance=2, max_distance=3, hold_s=0.09)
    try:
        origin, ts_origin, seq, ast = 1000.0, 0xFFFFF000, 65530, 0x123456
        stream = parked_stream(batch, header, store, compiled_session, sink, seq, 1, origin,
                               ts_origin)
        state = reference.state()
        assert not batch.red_set(stream, red_header.second_byte, 111, state, origin)
        frames = {2: b"a" * 30, 3: b"b" * 40, 5: b"c" * 50, 6: bytes(1100), 7: b"d" * 60,
                  8: b"e" * 20, 12: b"f" * 33, 15: b"g" * 44}
        fills, kinds = 0, []
        for k in range(20):
            now = origin + k * 0.02
            if k in (4, 14):  # loss reported: on for 90 ms (slots 4-8, 14-18)
                reference.loss_reported(now)
            if k == 8:  # a burst of 3: three previous packets ride along
                reference.burst_reported(3, now)
            if k in (4, 8, 14):
                if batch.red_set(stream, red_header.second_byte, 111, reference.state(), now):
                    fills += 1
                    assert batch.red_fill(stream, 3, store.last_sent(3))
            frame = frames.get(k)
            if frame is not None:
                assert batch.feed_run(stream, [frame], k, False)[0] == 1
            staged, _, _ = batch.run_parked(now, 5, ast, 0.0005, 5)
            assert staged == 1
            ts = (ts_origin + k * 960) & 0xFFFFFFFF
            wrapped, how = reference.wrap(frame or store.silence, ts, now)
            expected = (red_header if how else header).build(
                seq, ts, ast.to_bytes(3, "big"), wrapped)
            (datagram,) = batch.staged()
            batch.discard()
            assert receiver.unprotect(datagram) == expected
            count, first = batch.take_sent(stream)
            if frame is not None:  # the sender's half (``FedFrames.sent``)
                assert (count, first) == (1, seq)
                store.record_run(first, [frame], None)
            kept = store.lookup(seq)
            assert kept is not None and kept.packet == expected and kept.red == bool(how)
            kinds.append(len(rfc2198.decode(wrapped)) - 1 if how else None)
            seq = (seq + 1) & 0xFFFF
        assert fills == 2  # (at 8 it was on: C's history went on)
        # off, on from the store (1 then 2 blocks: the store's two before), a raised 3 at 8
        # (the 1,100-octet frame's copy left out at 7 and 8), off, on again from the store
        assert kinds == [None] * 4 + [2, 2, 2, 1, 2] + [None] * 5 + [2] * 5 + [None]
        plain, red_packets, redundant, primary = batch.red_take(stream)
        stats = reference.stats
        assert (plain, red_packets, redundant, primary) == (
            stats.plain_packets, stats.red_packets, stats.redundant_bytes,
            stats.primary_bytes)
        assert batch.red_take(stream) == (0, 0, 0, 0)
        assert batch.unpark(stream) is not None
    finally:
        out.close()
        sink.close()


def test_a_red_packet_c_makes_fits_its_datagram_leaving_the_oldest_copies_out():
    """Where the previous frames would not fit one datagram with the new one, C's RED packet
    carries fewer of them (the oldest left out) -- and records as much, so a NACK for it gets
    the same bytes back."""
    header, red_header, store = _red_setup()
    compiled_session, receiver = session(), session(pylibsrtp.Policy.SSRC_ANY_INBOUND)
    batch, out, sink = compiled_batch()
    reference = RedSender(63, 111, distance=2, hold_s=10.0)
    try:
        stream = parked_stream(batch, header, store, compiled_session, sink, 10, 1)
        reference.loss_reported(0.0)
        assert batch.red_set(stream, red_header.second_byte, 111, reference.state(), 0.0)
        assert batch.red_fill(stream, 2, [])
        big = [bytes([k]) * 600 for k in range(1, 4)]
        for k, frame in enumerate(big):
            assert batch.feed_run(stream, [frame], k, False)[0] == 1
            assert batch.run_parked(k * 0.02, 0, 0, 0.0005, 5)[0] == 1
            (datagram,) = batch.staged()
            batch.discard()
            assert len(datagram) <= sendpath.SLOT
            plain = receiver.unprotect(datagram)
            assert plain[1] == red_header.second_byte
            blocks = rfc2198.decode(plain[len(header.raw):])
            # 600 + 600 + headers fit; a third 600 would not: one copy at most
            assert [b.data for b in blocks] == big[max(0, k - 1):k + 1]
            store.record_run(*batch.take_sent(stream)[1:], [frame], None)
            kept = store.lookup(10 + k)
            assert kept is not None and kept.packet == plain
        assert batch.unpark(stream) is not None
    finally:
        out.close()
        sink.close()


def test_dtx_sent_from_c_is_what_the_tick_would_send():
    """DTX in ``gw_run_parked``: an idle slot carries the silence for the hangover's slots
    after speech, then the DTX payload once every ``every`` slots and nothing between (no
    sequence number used, the slot still released); the first speech after idle slots has
    the marker bit; each packet is the bytes the tick would send and the store gives it back
    for a NACK (C's DTX packets as ``PARKED_DTX``); the idle count and the empty last slot
    are handed back."""
    header, _, store = _red_setup()
    quiet = RtpHeaderTemplate.from_aiortc(111, SSRC, _extensions(), "0", marker=0)
    store.header, store.dtx = quiet, b"\xf8"
    compiled_session, receiver = session(), session(pylibsrtp.Policy.SSRC_ANY_INBOUND)
    batch, out, sink = compiled_batch()
    try:
        stream = parked_stream(batch, quiet, store, compiled_session, sink, 500, 1)
        assert batch.dtx_set(stream, 3, False, header.second_byte, 4, 5, b"\xf8")
        frames = {12: b"speech-1", 13: b"speech-2", 30: b"speech-3"}
        seq, idle, sent = 500, 3, 0
        for k in range(40):
            frame = frames.get(k)
            if frame is not None:
                assert batch.feed_run(stream, [frame], k, False)[0] == 1
            assert batch.run_parked(k * 0.02, 0, 0, 0.0005, 5)[0] <= 1
            if frame is not None:
                payload, marker, idle = frame, idle > 0, 0
            elif idle < 4:
                payload, marker, idle = store.silence, False, idle + 1
            elif (idle - 4) % 5:
                idle += 1
                assert batch.staged() == [] and batch.dtx_state(stream) == (idle, True)
                continue
            else:
                payload, marker, idle = b"\xf8", False, idle + 1
            (datagram,) = batch.staged()
            batch.discard()
            ts = k * 960
            expected = (header if marker else quiet).build(seq, ts, bytes(3), payload)
            assert receiver.unprotect(datagram) == expected
            if frame is not None:
                store.record_run(*batch.take_sent(stream)[1:], [frame], None)
            kept = store.lookup(seq)
            assert kept is not None and kept.payload == payload
            assert kept.packet == quiet.build(seq, ts, bytes(3), payload)  # (marker: as the
            # tick's store keeps it, the stream's base header)
            assert batch.dtx_state(stream) == (idle, False)
            seq, sent = (seq + 1) & 0xFFFF, sent + 1
        state = batch.unpark(stream)
        assert state is not None
        _, _, (slot, next_seq, released, _, _, silent, _, _) = state
        assert (slot, next_seq, released) == (40, seq, 40) and silent == sent - 3
    finally:
        out.close()
        sink.close()
