import ctypes.util
import glob
import os

import numpy as np
import pytest

from gateway.nack.responder import (
    NackCounters,
    NackDecision,
    NackResponder,
    concealment_payload,
)
from gateway.nack.rtcp import build_nack_packet


class DictStore:
    def __init__(self, seqs=()):
        self.packets = {s: f"pkt{s}" for s in seqs}

    def lookup(self, seq):
        return self.packets.get(seq)


def decisions(outcomes):
    return [(o.seq, o.decision) for o in outcomes]


H, M, R = NackDecision.HIT, NackDecision.MISS, NackDecision.RATE_LIMITED


def test_hit_and_miss():
    r = NackResponder(DictStore([1, 2, 3]))
    out = r.handle_nack([2, 9], now=0.0)
    assert decisions(out) == [(2, H), (9, M)]
    assert out[0].packet == "pkt2"
    assert out[1].packet is None
    assert r.counters == NackCounters(
        nacks_received=1, seqs_requested=2, hits=1, misses=1, rate_limited=0, malformed=0
    )


def test_exponential_backoff_40ms_doubling_to_1s():
    r = NackResponder(DictStore([5]), max_answers_per_packet=10)
    t = 0.0
    assert decisions(r.handle_nack([5], t)) == [(5, H)]
    # each allowed resend doubles the wait: 40, 80, 160, 320, 640, 1000, 1000 ms
    for backoff in (0.040, 0.080, 0.160, 0.320, 0.640, 1.0, 1.0):
        assert decisions(r.handle_nack([5], t + backoff - 0.001)) == [(5, R)]
        t += backoff + 1e-9
        assert decisions(r.handle_nack([5], t)) == [(5, H)]
    assert r.counters.hits == 8
    assert r.counters.rate_limited == 7


def test_answers_per_packet_are_capped():
    r = NackResponder(DictStore([5]), max_answers_per_packet=3)
    # asked every 200 ms for the 5 s the store keeps it: answered 3 times, then never again
    answered = [d for t in range(25) for _, d in decisions(r.handle_nack([5], t * 0.2))]
    assert answered.count(H) == 3


def test_the_backoff_follows_the_rtt_once_reported():
    """A repeated NACK a round trip after the resend means the resend was lost: with a 10 ms
    RTT the second answer comes after 12.5 ms, not after the fixed 40 ms."""
    r = NackResponder(DictStore([5]))
    r.rtt_s = 0.010
    assert decisions(r.handle_nack([5], 0.0)) == [(5, H)]
    assert decisions(r.handle_nack([5], 0.012)) == [(5, R)]
    assert decisions(r.handle_nack([5], 0.013)) == [(5, H)]
    slow = NackResponder(DictStore([5]))
    slow.rtt_s = 0.300  # a long RTT never stretches the first back-off past 40 ms
    slow.handle_nack([5], 0.0)
    assert decisions(slow.handle_nack([5], 0.041)) == [(5, H)]


def test_backoff_is_per_seq():
    r = NackResponder(DictStore([1, 2]))
    r.handle_nack([1], 0.0)
    assert decisions(r.handle_nack([1, 2], 0.01)) == [(1, R), (2, H)]


def test_duplicates_in_one_nack_answered_once_and_seqs_masked():
    r = NackResponder(DictStore([0]))
    assert decisions(r.handle_nack([0, 0, 65536], 0.0)) == [(0, H)]
    assert r.counters.seqs_requested == 1


def test_state_forgotten_after_idle_and_bounded():
    r = NackResponder(DictStore(range(100)), max_tracked=10)
    r.handle_nack(range(50), 0.0)
    assert r.tracked == 10
    # the oldest were evicted: seq 0 is served again at once
    assert decisions(r.handle_nack([0], 0.001)) == [(0, H)]
    assert decisions(r.handle_nack([49], 0.002)) == [(49, R)]
    r.handle_nack([], 7.0)  # idle for longer than the 5 s the store keeps a packet
    assert r.tracked == 0
    assert decisions(r.handle_nack([49], 7.0)) == [(49, H)]


def test_misses_back_off_like_hits_and_forget_resets():
    store = DictStore([3])
    r = NackResponder(store)
    r.handle_nack([3], 0.0)
    del store.packets[3]
    assert decisions(r.handle_nack([3], 0.001)) == [(3, R)]  # answered 1 ms ago
    assert decisions(r.handle_nack([3], 0.041)) == [(3, M)]
    # a miss asked for again and again is concealed a handful of times, not once per NACK
    answered = [d for t in range(1, 200) for _, d in decisions(r.handle_nack([3], 0.041 + t / 100))
                if d is not R]
    assert 1 <= len(answered) <= 6
    store.packets[3] = "new"
    r.forget(3)
    assert decisions(r.handle_nack([3], 3.0)) == [(3, H)]


def test_per_second_cap_bounds_a_storm_of_new_sequence_numbers():
    r = NackResponder(DictStore(range(2000)), max_answers_per_s=100)
    first = r.handle_nack(range(0, 1000), 0.0)  # one NACK asking for 1000 packets
    assert sum(o.decision is H for o in first) == 100
    assert r.counters.capped == 900
    later = r.handle_nack(range(1000, 1100), 0.5)  # half a second refills 50 answers
    assert sum(o.decision is H for o in later) == 50
    # misses count against the cap too
    misses = NackResponder(DictStore(), max_answers_per_s=10).handle_nack(range(50), 0.0)
    assert sum(o.decision is M for o in misses) == 10


def test_handle_packet_parses_wrap_and_counts_malformed():
    r = NackResponder(DictStore([65535, 0]))
    out = r.handle_packet(build_nack_packet(1, 2, [65535, 0, 1]), 0.0)
    assert decisions(out) == [(65535, H), (0, H), (1, M)]
    assert r.handle_packet(b"\x81\xcd\x00", 0.0) == []
    assert r.handle_packet(b"", 0.0) == []
    assert r.counters.malformed == 2
    assert r.counters.nacks_received == 1


def test_constructor_validation():
    with pytest.raises(ValueError):
        NackResponder(DictStore(), initial_backoff_s=0)
    with pytest.raises(ValueError):
        NackResponder(DictStore(), initial_backoff_s=2.0, max_backoff_s=1.0)
    with pytest.raises(ValueError):
        NackResponder(DictStore(), max_tracked=0)
    with pytest.raises(ValueError):
        NackResponder(DictStore(), max_answers_per_s=0)


def test_works_with_frame_store_protocol():
    frame_store = pytest.importorskip("gateway.nack.store")

    from gateway.rtp.header import RtpHeaderTemplate

    store = frame_store.FrameStore(capacity=4, clock=lambda: 0.0)
    store.header = RtpHeaderTemplate(bytes([0x80, 111]) + bytes(10), None)
    for seq in (65534, 65535, 0, 1):
        store.record_sent(seq, seq * 960, b"\x68", None)
    out = NackResponder(store).handle_nack([65535, 0, 65530], 0.0)
    assert decisions(out) == [(65535, H), (0, H), (65530, M)]
    assert out[0].packet.seq == 65535


# --- concealment payload --------------------------------------------------------------------


def _load_opuslib():
    try:
        from gateway.media.opus_lib import opuslib
    except ImportError:  # standalone fallback: PyAV's bundled libopus
        import av

        pattern = os.path.join(os.path.dirname(av.__file__), "..", "av.libs", "libopus*.so*")
        lib = sorted(glob.glob(pattern))[0]
        original = ctypes.util.find_library
        ctypes.util.find_library = lambda name: lib if name == "opus" else original(name)
        try:
            import opuslib
        finally:
            ctypes.util.find_library = original
    return opuslib


@pytest.fixture(scope="module")
def opuslib():
    return _load_opuslib()


def test_concealment_payload_bits():
    assert concealment_payload(bytes([0x6B, 1, 2])) == bytes([0x68])
    assert concealment_payload(bytes([0xFC])) == bytes([0xFC])  # stereo bit kept
    assert concealment_payload(bytes([0x03])) == bytes([0x00])
    with pytest.raises(ValueError):
        concealment_payload(b"")


def _tone(n, i):
    t = np.arange(i * n, (i + 1) * n) / 24000
    return (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()


@pytest.mark.parametrize("application", ["voip", "audio", "restricted_lowdelay"])
def test_concealment_payload_decodes_as_plc(opuslib, application):
    enc = opuslib.Encoder(24000, 1, application)
    a, b = opuslib.Decoder(24000, 1), opuslib.Decoder(24000, 1)
    last = b""
    for i in range(10):
        last = enc.encode(_tone(480, i), 480)
        a.decode(last, 480)
        b.decode(last, 480)
    conceal = concealment_payload(last)
    assert len(conceal) == 1
    out = a.decode(conceal, 480)
    plc = b.decode(b"", 480)  # opuslib passes len 0: libopus packet-loss concealment
    assert len(out) == 480 * 2
    assert out == plc
    assert np.abs(np.frombuffer(out, "<i2")).max() > 0  # concealed tone, not silence
    # the decoder goes on normally afterwards
    nxt = enc.encode(_tone(480, 10), 480)
    assert len(a.decode(nxt, 480)) == 480 * 2


def test_concealment_payload_duration_follows_toc(opuslib):
    # 10 ms frames (config keeps the frame size): PLC of 240 samples
    enc = opuslib.Encoder(24000, 1, "voip")
    dec = opuslib.Decoder(24000, 1)
    pkt = enc.encode(_tone(240, 0), 240)
    dec.decode(pkt, 240)
    assert len(dec.decode(concealment_payload(pkt), 480)) == 240 * 2
