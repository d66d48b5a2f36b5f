"""RTCP: rtp/rtcp_nack.py, rtp/nack_responder.py and media/retransmission.py on hostile bytes.

Only ``MalformedRtcp`` may leave the codec; ``NackResponder.handle_packet`` and
``Retransmitter.on_rtcp`` never raise (they count and drop), and their counters add up.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

import pytest
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import HeaderExtensionsMap
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.nack.responder import NackDecision, NackResponder
from gateway.nack.rtcp import (
    MalformedRtcp,
    NackPacket,
    build_nack_fci,
    build_nack_packet,
    is_nack,
    iter_rtcp_packets,
    parse_nack_fci,
    parse_nack_packet,
    wrap_order,
)
from gateway.nack.store import FrameStore
from gateway.rtp.header import RtpHeaderTemplate
from gateway.rtp.rtcp_report import PT_RR, PT_SR, is_report, parse_report_blocks
from gateway.webrtc.retransmission import SRTP_REPLAY_WINDOW, Retransmitter
from gateway.webrtc.rtp_sink import RtpSink
from tests.fuzz.profiles import FUZZ_MARKS, fuzz_settings
from tests.fuzz.rtcp_strategies import (
    MEDIA_SSRC,
    bitflip,
    compound,
    nack_packet,
    other_packet,
    padded_nack,
    rtcp_datagram,
    rtcp_packet,
    seq_list,
    ssrc,
    wrapping_seqs,
)
from tests.fuzz.strategies import note_event

pytestmark = FUZZ_MARKS


def split(data: bytes) -> list[bytes] | None:
    """iter_rtcp_packets, or None when it refuses the datagram (only MalformedRtcp allowed)."""
    try:
        return list(iter_rtcp_packets(data))
    except MalformedRtcp:
        return None


def parse(packet: bytes) -> NackPacket | None:
    try:
        return parse_nack_packet(packet)
    except MalformedRtcp:
        return None


def blocks_of(packet: bytes) -> list | None:
    try:
        return parse_report_blocks(packet)
    except MalformedRtcp:
        return None


# --- the codec ---------------------------------------------------------------------------------


@fuzz_settings()
@given(rtcp_datagram)
@example(b"")
@example(b"\x80\xcd\xff\xff")  # length says 256 KiB
@example(b"\x80\xc9\x00\x00" * 3 + b"\x80")  # three empty RRs and a cut header
def test_iter_rtcp_packets_splits_exactly_or_raises_malformed(data):
    packets = split(data)
    note_event("malformed" if packets is None else f"{len(packets)} packets")
    if packets is None:
        return
    assert b"".join(packets) == data
    for packet in packets:
        assert len(packet) >= 4 and len(packet) % 4 == 0
        assert packet[0] >> 6 == 2
        assert (struct.unpack_from("!H", packet, 2)[0] + 1) * 4 == len(packet)


@fuzz_settings()
@given(st.lists(st.one_of(nack_packet(), padded_nack(), other_packet()), min_size=1, max_size=6))
def test_compound_of_well_framed_packets_splits_back(packets):
    assert split(b"".join(packets)) == packets


@fuzz_settings()
@given(st.one_of(rtcp_packet, st.binary(max_size=300)),
       st.integers(0, 2000), st.integers(0, 7), st.booleans())
@example(bytes.fromhex("a1cd00050000000100001234000a0000" "00000000" "00000008"), 0, 0, False)
@example(bytes.fromhex("a1cd00040000000100001234000a0000" "00000004"), 0, 0, False)
@example(bytes.fromhex("a1cd00040000000100001234000a0000" "00000000"), 0, 0, False)
def test_parse_nack_packet_raises_only_malformed(packet, position, bit, flip):
    if flip:
        packet = bitflip(packet, position, bit)
    nack = parse(packet)
    note_event("malformed" if nack is None else "nack")
    if nack is None:
        return
    assert is_nack(packet) and len(packet) % 4 == 0
    assert split(packet) == [packet]
    assert 0 <= nack.sender_ssrc <= 0xFFFFFFFF and 0 <= nack.media_ssrc <= 0xFFFFFFFF
    assert nack.seqs and len(set(nack.seqs)) == len(nack.seqs)
    assert all(0 <= s <= 0xFFFF for s in nack.seqs)
    assert len(nack.seqs) <= 17 * ((len(packet) - 12) // 4)


@fuzz_settings()
@given(st.binary(max_size=400))
def test_parse_nack_fci_any_bytes(fci):
    try:
        seqs = parse_nack_fci(fci)
    except MalformedRtcp:
        assert len(fci) % 4
        return
    assert len(fci) % 4 == 0
    assert len(set(seqs)) == len(seqs) and all(0 <= s <= 0xFFFF for s in seqs)
    pids = [struct.unpack_from("!H", fci, i)[0] for i in range(0, len(fci), 4)]
    assert set(pids) <= set(seqs)


@fuzz_settings()
@given(ssrc, ssrc, seq_list)
@example(1, MEDIA_SSRC, [65535, 0])
@example(1, MEDIA_SSRC, [65534, 65535, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])
@example(1, MEDIA_SSRC, list(range(0, 65536, 4096)))  # evenly spread: no widest gap
@example(1, MEDIA_SSRC, [0, 32768])
def test_build_then_parse_round_trips(sender, media, seqs):
    packet = build_nack_packet(sender, media, seqs)
    nack = parse_nack_packet(packet)
    assert nack.sender_ssrc == sender and nack.media_ssrc == media
    assert set(nack.seqs) == set(seqs)  # every requested seq, once
    assert nack.seqs == wrap_order(seqs)  # oldest first, wrap-aware
    assert split(packet) == [packet] and is_nack(packet)
    fci = build_nack_fci(seqs)
    assert len(fci) // 4 <= len(set(seqs))
    assert parse_nack_fci(fci) == nack.seqs


@fuzz_settings()
@given(wrapping_seqs(), st.integers(1, 8))
def test_padded_nack_parses_to_the_same_seqs(seqs, words):
    packet = bytearray(build_nack_packet(7, MEDIA_SSRC, seqs) + bytes(words * 4 - 1)
                       + bytes([words * 4]))
    packet[0] |= 0x20
    packet[2:4] = struct.pack("!H", len(packet) // 4 - 1)
    assert parse_nack_packet(bytes(packet)).seqs == wrap_order(seqs)


@st.composite
def report_packet(draw: st.DrawFn) -> bytes:
    """An SR or RR whose report count and length may or may not fit its blocks."""
    pt = draw(st.sampled_from([PT_SR, PT_RR]))
    count = draw(st.integers(0, 31))
    blocks = draw(st.integers(0, 31)) if draw(st.booleans()) else count
    body = draw(st.binary(min_size=4, max_size=4))  # sender SSRC
    if pt == PT_SR:
        body += draw(st.binary(min_size=20, max_size=20))  # NTP, RTP timestamp, counts
    body += b"".join(
        struct.pack("!I", draw(st.sampled_from([MEDIA_SSRC, 0, 0xFFFFFFFF])))
        + draw(st.binary(min_size=20, max_size=20))
        for _ in range(blocks)
    )
    return bytes([0x80 | count, pt]) + struct.pack("!H", (len(body) + 4) // 4 - 1) + body


@fuzz_settings()
@given(st.one_of(report_packet(), rtcp_packet, st.binary(max_size=300)),
       st.integers(0, 2**64 - 1))
def test_parse_report_blocks_raises_only_malformed(packet, ntp):
    blocks = blocks_of(packet)
    note_event("malformed" if blocks is None else f"{min(len(blocks), 3)}+ blocks")
    if blocks is None:
        return
    assert is_report(packet)
    assert len(blocks) == packet[0] & 0x1F
    for block in blocks:
        assert 0 <= block.fraction_lost < 1
        assert -(2**23) <= block.cumulative_lost < 2**23
        rtt = block.rtt_s(ntp)
        assert rtt is None or 0 <= rtt < 65536


# --- NackResponder -----------------------------------------------------------------------------


class DictStore:
    def __init__(self, seqs):
        self.packets = {s: f"pkt{s}" for s in seqs}

    def lookup(self, seq):
        return self.packets.get(seq)


responder_options = st.fixed_dictionaries({
    "initial_backoff_s": st.sampled_from([0.001, 0.040, 0.5]),
    "max_backoff_s": st.sampled_from([0.5, 1.0, 5.0]),
    "max_tracked": st.sampled_from([1, 2, 16, 512]),
    "max_answers_per_s": st.sampled_from([1.0, 1.5, 10.0, 250.0, 1e6]),
})
time_step = st.one_of(
    st.just(0.0), st.floats(0, 0.1), st.floats(0, 10), st.sampled_from([1e-9, 2.0])
)


@fuzz_settings()
@given(
    st.lists(st.integers(0, 0xFFFF), max_size=60) | wrapping_seqs(),
    responder_options,
    st.lists(st.tuples(rtcp_datagram, time_step), min_size=1, max_size=5),
    st.floats(-1e6, 1e6),
    st.booleans(),
)
def test_nack_responder_handle_packet_never_raises(stored, options, steps, start, backwards):
    store = DictStore(stored)
    if options["initial_backoff_s"] > options["max_backoff_s"]:
        options["initial_backoff_s"] = options["max_backoff_s"]
    responder = NackResponder(store, **options)
    now, first = start, start
    answered = 0
    for calls, (packet, step) in enumerate(steps, start=1):
        now = now - step if backwards and calls % 3 == 0 else now + step  # a clock that jumps back
        outcomes = responder.handle_packet(packet, now)
        nack = parse(packet)
        want = [] if nack is None else list(dict.fromkeys(nack.seqs))
        assert [o.seq for o in outcomes] == want
        for o in outcomes:
            if o.decision is NackDecision.HIT:
                assert o.packet == store.lookup(o.seq) is not None
            elif o.decision is NackDecision.MISS:
                assert o.packet is None and store.lookup(o.seq) is None
            else:
                assert o.packet is None
        answered += sum(o.decision is not NackDecision.RATE_LIMITED for o in outcomes)
        c = responder.counters
        assert c.nacks_received + c.malformed == calls
        assert c.seqs_requested == c.hits + c.misses + c.rate_limited
        assert 0 <= c.capped <= c.rate_limited
        assert responder.tracked <= options["max_tracked"]
        assert answered == c.hits + c.misses
    if not backwards:  # the token bucket holds: burst + rate * elapsed answers at most
        rate = options["max_answers_per_s"]
        assert answered <= rate + rate * (now - first) + 1e-6 * answered + 1


# --- Retransmitter -----------------------------------------------------------------------------


def _template() -> RtpHeaderTemplate:
    extensions = HeaderExtensionsMap()
    extensions.configure(RTCRtpParameters(headerExtensions=[
        RTCRtpHeaderExtensionParameters(id=1, uri="urn:ietf:params:rtp-hdrext:sdes:mid"),
        RTCRtpHeaderExtensionParameters(
            id=3, uri="http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"),
    ]))
    return RtpHeaderTemplate.from_aiortc(111, MEDIA_SSRC, extensions, "0")


TEMPLATE = _template()


class Owner:
    def __init__(self, cancelled: bool) -> None:
        self.cancelled = cancelled

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None:
        pass


class FakeTransport:
    """What send_unprotected needs of an RTCDtlsTransport: ``_send_rtp``; fails on demand."""

    def __init__(self, failures: dict[int, type[Exception]]) -> None:
        self.failures = failures
        self.sent: list[bytes] = []
        self.connection_lost = False

    async def _send_rtp(self, data: bytes) -> None:
        exc = self.failures.get(int.from_bytes(data[2:4], "big"))
        if exc is not None:
            self.connection_lost |= issubclass(exc, ConnectionError)
            raise exc("injected send failure")
        self.sent.append(data)


def run(coro: Coroutine[Any, Any, bytes]) -> bytes:
    """Run a coroutine that never really suspends (the fake transport does not) to its end."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    return asyncio.run(coro)  # pragma: no cover - only if on_rtcp started awaiting real I/O


def make_retransmitter(start, count, cancelled, payload_sizes, attached, failures, clock):
    store = FrameStore(250, clock=clock)
    store.header = TEMPLATE
    owners = {True: Owner(True), False: Owner(False)}
    for i in range(count):
        seq = (start + i) & 0xFFFF
        size = payload_sizes[i % len(payload_sizes)]
        owner = None if i % 7 == 3 else owners[i in cancelled]
        store.record_sent(seq, (i * 960) & 0xFFFFFFFF, bytes([0x68]) + bytes(size - 1), owner,
                          index=i, abs_send_time=i & 0xFFFFFF)
    sink = RtpSink(store=store, queue=None, silence=b"", ticker=None, pacer=object())
    retransmitter = Retransmitter(sink, clock=clock)
    transport = FakeTransport(failures)
    if attached:  # what attach() sets, without an RTCRtpSender or an aiortc transport to patch
        retransmitter._sender = SimpleNamespace(transport=transport)
        retransmitter._ssrc = MEDIA_SSRC
    return retransmitter, store, transport


def our_nack(seqs: list[int]) -> bytes:
    return build_nack_packet(1, MEDIA_SSRC, seqs)


retransmit_datagram = st.one_of(
    rtcp_datagram,
    st.lists(report_packet(), min_size=1, max_size=3).map(b"".join),
    st.builds(our_nack, seq_list),
    st.builds(our_nack, seq_list),
    st.lists(st.one_of(st.builds(our_nack, seq_list), rtcp_packet), min_size=1, max_size=4).map(
        b"".join
    ),
    compound(),
)


@fuzz_settings(ci_scale=0.5)
@given(
    start=st.one_of(st.integers(65_300, 65_535), st.integers(0, 0xFFFF)),
    count=st.sampled_from([0, 1, 5, 100, 249, 250, 300]),
    cancelled=st.sets(st.integers(0, 299), max_size=40),
    payload_sizes=st.lists(st.integers(1, 200), min_size=1, max_size=3),
    attached=st.sampled_from([True, True, True, False]),
    failures=st.dictionaries(
        st.integers(0, 0xFFFF), st.sampled_from([RuntimeError, OSError, ValueError,
                                                 ConnectionError, ConnectionResetError]),
        max_size=4,
    ),
    datagrams=st.lists(st.tuples(retransmit_datagram, time_step), min_size=1, max_size=5),
)
@example(start=65_500, count=100, cancelled={90}, payload_sizes=[3], attached=True, failures={},
         datagrams=[(our_nack([65_535, 0, 1, 90 - 36, 5000]), 0.0)])
def test_retransmitter_on_rtcp_never_raises(
    start, count, cancelled, payload_sizes, attached, failures, datagrams
):
    now = [100.0]
    retransmitter, store, transport = make_retransmitter(
        start, count, cancelled, payload_sizes, attached, failures, lambda: now[0]
    )
    malformed = foreign = 0
    for data, step in datagrams:
        now[0] += step
        lost_before = transport.connection_lost
        rest = run(retransmitter.on_rtcp(data))
        lost_now = transport.connection_lost and not lost_before
        packets = split(data)
        if packets is None:
            malformed += 1
            assert rest == b""
        else:
            nacks = [p for p in packets if is_nack(p)]
            parsed = [parse(p) for p in nacks]
            malformed += sum(n is None for n in parsed)
            malformed += sum(is_report(p) and blocks_of(p) is None for p in packets)
            foreign += sum(n is not None and (not attached or n.media_ssrc != MEDIA_SSRC)
                           for n in parsed)
            if lost_now:
                assert rest == b""  # the transport went away mid-answer: the rest is dropped
            else:
                assert rest == b"".join(p for p in packets if not is_nack(p))
        stats = retransmitter.stats()
        if not transport.connection_lost:  # else on_rtcp stopped part-way through a datagram
            assert stats["malformed"] == malformed
            assert stats["foreign_ssrc"] == foreign
        assert stats["hits"] + stats["cancelled"] + stats["misses"] + stats["rate_limited"] == (
            stats["seqs_requested"]
        )
        assert stats["concealments_sent"] + stats["too_old"] <= stats["misses"] + stats["cancelled"]
        if not failures:
            assert len(transport.sent) == stats["hits"] + stats["concealments_sent"]
            assert stats["send_failed"] == 0
    note_event(f"sent {'some' if transport.sent else 'none'}")
    newest = store.lookup(store.newest_seq) if store.newest_seq is not None else None
    for data in transport.sent:
        seq = int.from_bytes(data[2:4], "big")
        entry = store.lookup(seq)
        if entry is not None and data == entry.packet:
            continue  # a resend, byte-identical
        assert newest is not None  # a concealment is made from the newest packet's header
        assert len(data) == TEMPLATE.header_size + 1
        assert data[:2] == newest.packet[:2] and data[8:12] == newest.packet[8:12]
        assert data[-1] & 0x03 == 0  # code 0, one zero-length frame
        # only for a seq this stream sent (SRTP would move its index for an earlier one)
        assert (newest.seq - seq) & 0xFFFF < min(store.recorded, SRTP_REPLAY_WINDOW - 1)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x80\xcd", bytes(1500), b"\xff" * 64])
def test_retransmitter_unattached_drops_garbage(data):
    retransmitter, _, transport = make_retransmitter(0, 10, set(), [2], False, {}, lambda: 0.0)
    run(retransmitter.on_rtcp(data))
    assert transport.sent == []


def test_a_rate_below_one_per_second_is_refused():
    """Was: NackResponder(max_answers_per_s=r) with r < 1 never answered (a bucket of r tokens,
    an answer needs 1): such a rate is now refused up front."""
    with pytest.raises(ValueError):
        NackResponder(DictStore([1]), max_answers_per_s=0.5)
