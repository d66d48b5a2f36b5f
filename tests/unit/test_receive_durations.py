"""Packets of 10, 40 and 60 ms (one SILK frame, or several hybrid frames) through the receive
path, with real libopus packets: each decodes at its own length, the played audio is the
stream's audio without a gap, a lost packet is concealed for its own duration, reordering is
still repaired."""

import numpy as np
import pytest

from gateway.media.opus_codec import FRAME_SAMPLES
from gateway.receive.frame_decoder import FrameDecoder, FrameKind
from gateway.receive.jitter_buffer import PopKind, PopResult
from gateway.receive.opus_packet import has_lbrr, packet_ticks
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.rtp.seqnum import seq_diff
from tests.opus_streams import Sent, encode, offline_decode, packetize, run, speechy


def recorded(**options) -> ReceivePathConfig:
    return ReceivePathConfig(nack=False, record_s=10.0, log_periods=1000, **options)


# (packet ms, bitrate): 16 kb/s codes SILK frames of the packet's length, 48 kb/s hybrid frames
# of at most 20 ms, so 40 and 60 ms packets carry two and three frames (codes 2 and 3)
SHAPES = [(10, 16_000), (10, 48_000), (40, 16_000), (40, 48_000), (60, 16_000), (60, 48_000)]


def stream(packet_ms: int, bitrate: int, seconds: float = 2.4) -> list[bytes]:
    payloads = encode(speechy(seconds), packet_ms, bitrate=bitrate)
    if packet_ms > 20 and bitrate == 48_000:
        assert all(p[0] & 0x3 in (2, 3) for p in payloads)  # multi-frame packets
    return payloads


def holes(path: ReceivePath) -> list:
    """Periods without audio between the first and the last period with audio."""
    kinds = [p.kind for p in path.played]
    audio = [i for i, kind in enumerate(kinds) if kind is not FrameKind.UNDERRUN]
    return [k for k in kinds[audio[0] : audio[-1] + 1] if k in (FrameKind.UNDERRUN,
                                                                  FrameKind.INSERTED)]


def first_audio(path: ReceivePath) -> int:
    return next(p.index for p in path.played if p.kind is FrameKind.FRAME)


def period_of(path: ReceivePath, seq: int) -> int:
    """The first period with audio of ``seq`` or a later packet."""
    return next(p.index for p in path.played if p.seq is not None and seq_diff(p.seq, seq) >= 0)


@pytest.mark.parametrize(("packet_ms", "bitrate"), SHAPES)
def test_each_packet_decodes_at_its_length_and_the_audio_is_continuous(packet_ms, bitrate):
    payloads = stream(packet_ms, bitrate)
    assert {packet_ticks(p) for p in payloads} == {packet_ms * 48}
    packets = packetize(payloads, packet_ms)
    path = ReceivePath(recorded())
    run(path, packets, periods=round(2.4 / 0.02) + 10)
    stats = path.stats
    assert (stats.lost, stats.concealed, stats.recovered_fec) == (0, 0, 0), stats
    assert (stats.stretched, stats.trimmed, stats.dropped) == (0,) * 3
    assert holes(path) == [] and stats.underruns == 1  # (the end of the stream)
    assert stats.played == len(payloads) * packet_ms // 20
    start = first_audio(path) * FRAME_SAMPLES
    expected = offline_decode(payloads)
    assert expected.size == len(payloads) * packet_ms * 24  # libopus: each at its length
    played = path.played_pcm()[start : start + expected.size]
    assert np.array_equal(played, expected)  # every sample, in order, nothing cut or padded


@pytest.mark.parametrize(("packet_ms", "bitrate"), SHAPES)
def test_a_lost_packet_is_concealed_for_its_own_duration(packet_ms, bitrate):
    payloads = stream(packet_ms, bitrate)
    half = len(payloads) // 2
    # (libopus adds LBRR from about 24 kb/s: at 48 kb/s the next packet's FEC rebuilds it)
    lost = next((i for i in range(half, len(payloads) - 5) if has_lbrr(payloads[i + 1])), half)
    fec = has_lbrr(payloads[lost + 1])
    assert fec == (bitrate == 48_000)
    packets = packetize(payloads, packet_ms, drop={lost})
    path = ReceivePath(recorded())
    run(path, packets, periods=round(2.4 / 0.02) + 10)
    stats = path.stats
    assert stats.lost == 1 and (stats.recovered_fec, stats.concealed) == (fec, not fec), stats
    assert holes(path) == []
    # the packets after the loss play exactly where they would have without it
    first = first_audio(path)
    after = packets[lost].seq  # the sequence number after the lost one
    assert period_of(path, after) == first + ((lost + 1) * packet_ms) // 20
    total = len(payloads) * packet_ms * 24
    assert path.played_pcm()[first * FRAME_SAMPLES :].size >= total


@pytest.mark.parametrize("packet_ms", [10, 40, 60])
def test_reordered_packets_still_play_in_order(packet_ms):
    payloads = stream(packet_ms, 48_000)
    packets = packetize(payloads, packet_ms)
    i = len(packets) // 2  # packet i arrives 2 ms after packet i + 1
    a, b = packets[i], packets[i + 1]
    packets[i] = Sent(b.at + 0.002, a.seq, a.ts, a.payload, a.index)
    path = ReceivePath(recorded())
    run(path, packets, periods=round(2.4 / 0.02) + 10)
    stats = path.stats
    assert stats.reordered == 1 and stats.concealed == 0 and stats.late == 0, stats
    assert path.jitter.stats.lost == 0
    start = first_audio(path) * FRAME_SAMPLES
    expected = offline_decode(payloads)
    assert np.array_equal(path.played_pcm()[start : start + expected.size], expected)


@pytest.mark.parametrize("ticks", [480, 1920, 2880])
def test_decoder_conceals_and_recovers_by_the_slot_duration(ticks):
    decoder = FrameDecoder()
    payloads = encode(speechy(0.6), ticks / 48, bitrate=16_000)
    for payload in payloads[:5]:
        kind, pcm = decoder.decode(PopResult(PopKind.FRAME, 1, 0, payload, duration=ticks))
        assert kind is FrameKind.FRAME and pcm.size == ticks // 2
    lost = PopResult(PopKind.LOST, 2, fec_payload=payloads[6], duration=ticks)
    kind, pcm = decoder.decode(lost)
    assert kind in (FrameKind.FEC, FrameKind.PLC) and pcm.size == ticks // 2
    kind, pcm = decoder.decode(PopResult(PopKind.LOST, 3, duration=ticks))
    assert kind is FrameKind.PLC and pcm.size == ticks // 2
    kind, pcm = decoder.decode(PopResult(PopKind.UNDERRUN), underrun_samples=240)
    assert kind is FrameKind.UNDERRUN and pcm.size == 240
