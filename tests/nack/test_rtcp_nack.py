import random
import struct

import pytest

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


def entry(pid, blp):
    return struct.pack("!HH", pid, blp)


# --- FCI -----------------------------------------------------------------------------------


def test_parse_single_pid():
    assert parse_nack_fci(entry(100, 0)) == [100]


def test_parse_blp_bits():
    assert parse_nack_fci(entry(100, 0b1000_0000_0000_0101)) == [100, 101, 103, 116]


def test_parse_wraps_past_65535():
    # aiortc 1.16 gets this wrong (it reports 65536, 65537)
    assert parse_nack_fci(entry(65534, 0b111)) == [65534, 65535, 0, 1]


def test_parse_several_entries_dedup_first_appearance():
    fci = entry(10, 0b1) + entry(11, 0b1) + entry(5, 0)
    assert parse_nack_fci(fci) == [10, 11, 12, 5]


def test_parse_empty_and_bad_length():
    assert parse_nack_fci(b"") == []
    for n in (1, 2, 3, 5, 7):
        with pytest.raises(MalformedRtcp):
            parse_nack_fci(bytes(n))


def test_build_minimal_entries():
    assert build_nack_fci([100]) == entry(100, 0)
    assert build_nack_fci(range(100, 117)) == entry(100, 0xFFFF)
    assert build_nack_fci(range(100, 118)) == entry(100, 0xFFFF) + entry(117, 0)
    assert build_nack_fci([]) == b""


def test_build_unsorted_duplicates_and_wrap():
    fci = build_nack_fci([1, 65535, 0, 65535, 1, 65534])
    assert fci == entry(65534, 0b111)
    assert parse_nack_fci(fci) == [65534, 65535, 0, 1]


def test_build_rejects_out_of_range():
    with pytest.raises(ValueError):
        build_nack_fci([65536])
    with pytest.raises(ValueError):
        build_nack_fci([-1])


def test_wrap_order():
    assert wrap_order([1, 65535, 0]) == [65535, 0, 1]
    assert wrap_order([3, 1, 2, 2]) == [1, 2, 3]
    assert wrap_order([]) == []
    assert wrap_order([65000, 100, 200]) == [65000, 100, 200]


def _random_seq_set(rng):
    base = rng.randrange(65536)
    span = rng.choice([1, 5, 17, 40, 300, 3000])
    count = rng.randint(1, min(span, 60))
    return [(base + rng.randrange(span)) % 65536 for _ in range(count)]


def test_fci_round_trip_property():
    rng = random.Random(4585)
    for _ in range(3000):
        seqs = _random_seq_set(rng)
        fci = build_nack_fci(seqs)
        decoded = parse_nack_fci(fci)
        assert decoded == wrap_order(seqs)
        assert len(decoded) == len(set(decoded))


def test_fci_packing_is_minimal_property():
    rng = random.Random(7)
    for _ in range(2000):
        seqs = wrap_order(_random_seq_set(rng))
        # reference: greedy on the unwrapped line (seqs span < 32768 here)
        line = [seqs[0] + ((s - seqs[0]) % 65536) for s in seqs]
        entries, pid = 0, None
        for s in line:
            if pid is None or s - pid > 16:
                entries, pid = entries + 1, s
        assert len(build_nack_fci(seqs)) == 4 * entries


# --- packet --------------------------------------------------------------------------------


def test_packet_round_trip_and_header():
    pkt = build_nack_packet(0x11223344, 0xAABBCCDD, [7, 8, 30])
    assert pkt[0] == 0x81  # V=2, P=0, FMT=1
    assert pkt[1] == 205
    assert struct.unpack("!H", pkt[2:4])[0] == len(pkt) // 4 - 1
    assert is_nack(pkt)
    assert parse_nack_packet(pkt) == NackPacket(0x11223344, 0xAABBCCDD, [7, 8, 30])


def test_packet_round_trip_wrap():
    pkt = build_nack_packet(1, 2, [65535, 0, 65534, 3])
    assert parse_nack_packet(pkt).seqs == [65534, 65535, 0, 3]


def test_packet_interops_with_aiortc_parser_when_not_wrapping():
    from aiortc.rtp import RtcpPacket

    pkt = build_nack_packet(1, 2, [5, 6, 9, 40])
    (parsed,) = RtcpPacket.parse(pkt)
    assert parsed.fmt == 1
    assert parsed.media_ssrc == 2
    assert parsed.lost == [5, 6, 9, 40]
    assert parse_nack_packet(bytes(parsed)).seqs == [5, 6, 9, 40]
    # the known aiortc 1.16 wrap bug that this module exists to avoid
    (wrapped,) = RtcpPacket.parse(build_nack_packet(1, 2, [65535, 0]))
    assert wrapped.lost == [65535, 65536]


def test_build_packet_validation():
    with pytest.raises(ValueError):
        build_nack_packet(1, 2, [])
    with pytest.raises(ValueError):
        build_nack_packet(1 << 32, 2, [1])
    with pytest.raises(ValueError):
        build_nack_packet(1, -1, [1])


def _padded(pkt, pad):
    body = bytearray(pkt) + bytes(pad - 1) + bytes([pad])
    body[0] |= 0x20
    body[2:4] = struct.pack("!H", len(body) // 4 - 1)
    return bytes(body)


def test_padding_accepted():
    pkt = build_nack_packet(1, 2, [100, 101])
    assert parse_nack_packet(_padded(pkt, 4)).seqs == [100, 101]
    assert parse_nack_packet(_padded(pkt, 8)).seqs == [100, 101]


@pytest.mark.parametrize("pad", [0, 3, 5, 12, 255])
def test_bad_padding_rejected(pad):
    pkt = bytearray(_padded(build_nack_packet(1, 2, [100]), 4))
    pkt[-1] = pad
    with pytest.raises(MalformedRtcp):
        parse_nack_packet(bytes(pkt))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p[:11],  # too short
        lambda p: p[:-1],  # length mismatch
        lambda p: p + b"\x00\x00\x00\x00",  # trailing data
        lambda p: bytes([p[0] & 0x3F]) + p[1:],  # version 0
        lambda p: bytes([p[0] | 0xC0]) + p[1:],  # version 3
        lambda p: p[:1] + bytes([206]) + p[2:],  # PSFB
        lambda p: bytes([(p[0] & 0xE0) | 15]) + p[1:],  # FMT 15 (transport-cc)
        lambda p: p[:2] + b"\x00\x02" + p[4:],  # header only, no FCI
        lambda p: p[:2] + b"\xff\xff" + p[4:],  # length far too long
    ],
)
def test_malformed_packets(mutate):
    with pytest.raises(MalformedRtcp):
        parse_nack_packet(mutate(build_nack_packet(1, 2, [10, 12, 50])))


def test_malformed_is_value_error():
    assert issubclass(MalformedRtcp, ValueError)


def _only_malformed(fn, data):
    try:
        fn(data)
    except MalformedRtcp:
        pass


def test_fuzz_random_bytes():
    rng = random.Random(99)
    for _ in range(20000):
        data = rng.randbytes(rng.randrange(0, 40))
        _only_malformed(parse_nack_packet, data)
        _only_malformed(parse_nack_fci, data)
        _only_malformed(lambda d: list(iter_rtcp_packets(d)), data)


def test_fuzz_mutated_valid_packets():
    rng = random.Random(100)
    for _ in range(20000):
        pkt = bytearray(
            build_nack_packet(rng.getrandbits(32), rng.getrandbits(32), _random_seq_set(rng))
        )
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            if op == 0 and pkt:
                pkt[rng.randrange(len(pkt))] = rng.randrange(256)
            elif op == 1 and pkt:
                del pkt[rng.randrange(len(pkt)) :]
            elif op == 2:
                pkt += rng.randbytes(rng.randrange(1, 9))
            else:
                i = rng.randrange(4)
                pkt[i : i + 1] = bytes([rng.randrange(256)]) if len(pkt) > i else b""
        data = bytes(pkt)
        _only_malformed(parse_nack_packet, data)
        _only_malformed(lambda d: [parse_nack_packet(p) for p in iter_rtcp_packets(d)], data)


def test_iter_rtcp_packets_compound():
    rr = bytes([0x80, 201, 0, 1]) + struct.pack("!I", 42)  # empty receiver report
    nack = build_nack_packet(42, 7, [1, 2, 3])
    packets = list(iter_rtcp_packets(rr + nack))
    assert packets == [rr, nack]
    assert [is_nack(p) for p in packets] == [False, True]
    assert list(iter_rtcp_packets(b"")) == []
    with pytest.raises(MalformedRtcp):
        list(iter_rtcp_packets(rr + nack[:-4]))
    with pytest.raises(MalformedRtcp):
        list(iter_rtcp_packets(rr + b"\x81"))
