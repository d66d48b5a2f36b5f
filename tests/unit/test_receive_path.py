import asyncio
import itertools

import numpy as np
import pytest

from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.nack.rtcp import parse_nack_packet
from gateway.receive.frame_decoder import FrameDecoder, FrameKind, has_lbrr
from gateway.receive.jitter_buffer import PopKind, PopResult
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.receive_stats import DelayTracker, TransitTracker
from gateway.rtp.seqnum import seq_add

FRAME = 0.020
SSRC = 0x1234


def speechy_payloads(n: int) -> list[bytes]:
    """Opus packets of a voiced, varying signal (SILK with LBRR after the first frames)."""
    rate = 24_000
    t = np.arange(n * FRAME_SAMPLES) / rate
    pcm = 8000 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t)
    pcm = pcm.astype(np.int16)
    encoder = OpusFrameEncoder(EncoderSettings())
    return [encoder.encode(pcm[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES].tobytes())
            for i in range(n)]


PAYLOADS = speechy_payloads(120)


def recorded(**options) -> ReceivePathConfig:
    """A config that keeps what was played (the recording and the period log are opt-in)."""
    return ReceivePathConfig(record_s=10.0, log_periods=1000, **options)


def arrivals(n: int, *, start_seq=65500, skip=(), ts0=1000, at=None):
    """(arrival, seq, ts, payload) of packets 0..n-1, on time unless ``at(i)`` says otherwise."""
    at = at or (lambda i: i * FRAME)
    return [(at(i), seq_add(start_seq, i), ts0 + 960 * i, PAYLOADS[i])
            for i in range(n) if i not in skip]


def run(path: ReceivePath, packets, periods: int, *, phase=0.015) -> list:
    """Interleave arrivals and playout periods as the clock would (period k at phase + 20k)."""
    pending = sorted(packets)
    for k in range(periods):
        now = phase + k * FRAME
        while pending and pending[0][0] <= now:
            t, seq, ts, payload = pending.pop(0)
            path.on_packet(seq, ts, payload, SSRC, t)
        path.tick(now)
    return list(path.played)


def test_has_lbrr_follows_the_silk_header_bit():
    assert any(has_lbrr(p) for p in PAYLOADS)
    assert not has_lbrr(b"")
    assert not has_lbrr(bytes([16 << 3, 0xFF]))  # CELT-only: never
    assert has_lbrr(bytes([9 << 3, 0x40])) and not has_lbrr(bytes([9 << 3, 0x80]))


def test_clean_stream_plays_in_order_and_records_what_it_played():
    path = ReceivePath(recorded(nack=False))
    played = run(path, arrivals(60), 60)
    frames = [p for p in played if p.kind is FrameKind.FRAME]
    assert [p.payload for p in frames] == PAYLOADS[: len(frames)]
    assert played[0].kind is FrameKind.UNDERRUN  # buffering to the 2-frame target
    assert path.played_pcm().size == 60 * FRAME_SAMPLES
    stats = path.stats
    assert (stats.lost, stats.concealed, stats.recovered_fec) == (0, 0, 0)
    assert stats.received == 60 and stats.target_frames == 2
    assert stats.playout_delay_ms == pytest.approx(35, abs=1)  # 2 frames less the phase guard


def test_lost_frame_uses_fec_when_the_next_packet_carries_it_else_plc():
    with_lbrr = next(i for i in range(30, 100) if has_lbrr(PAYLOADS[i + 1]))
    without = next(i for i in range(30, 100) if not has_lbrr(PAYLOADS[i + 1]))
    for fec, lost, expected in [
        (True, with_lbrr, FrameKind.FEC),
        (False, with_lbrr, FrameKind.PLC),
        (True, without, FrameKind.PLC),
    ]:
        path = ReceivePath(recorded(nack=False, fec=fec))
        played = run(path, arrivals(110, skip={lost}), 110)
        by_seq = {p.seq: p for p in played if p.seq is not None}
        assert by_seq[seq_add(65500, lost)].kind is expected
        stats = path.stats
        assert stats.lost == 1
        assert stats.recovered_fec + stats.concealed == 1


def test_concealment_packet_is_concealed_and_counted():
    path = ReceivePath(recorded(nack=False))
    packets = [(t, seq, ts, p[:1] if seq == 10 else p)
               for t, seq, ts, p in arrivals(20, start_seq=0)]
    played = run(path, packets, 20)
    kinds = {p.seq: p.kind for p in played if p.seq is not None}
    assert kinds[10] is FrameKind.CONCEALMENT_PACKET
    assert path.stats.concealment_packets == 1 and path.stats.concealed == 1


def test_decoder_survives_a_corrupt_packet():
    decoder = FrameDecoder()
    kind, pcm = decoder.decode(PopResult(PopKind.FRAME, 1, 0, b"\xff\xff\xff"))
    assert pcm.size == FRAME_SAMPLES and kind in (FrameKind.FRAME, FrameKind.PLC)


def test_repair_in_time_counts_as_recovered_by_retransmission():
    path = ReceivePath(recorded())  # NACK on: 3-frame target
    for t, seq, ts, payload in arrivals(11, skip={10}):
        path.on_packet(seq, ts, payload, SSRC, t)
    path.on_packet(seq_add(65500, 11), 1000 + 960 * 11, PAYLOADS[11], SSRC, 11 * FRAME)
    assert path.nack.missing == [seq_add(65500, 10)]
    assert path.nack.poll(11 * FRAME + 0.001) == [seq_add(65500, 10)]
    path.on_packet(seq_add(65500, 10), 1000 + 9600, PAYLOADS[10], SSRC, 11 * FRAME + 0.003)
    stats = path.stats
    assert stats.lost == 1 and stats.recovered_nack == 1 and stats.late == 0


def test_gap_across_the_wrap_is_counted_once():
    path = ReceivePath(recorded(nack=False))
    run(path, arrivals(70, skip={35, 36}), 70)  # 65535 and 0
    assert path.stats.lost == 2


def test_silent_frame_is_trimmed_when_too_much_stays_buffered():
    path = ReceivePath(recorded(nack=False, trim_after_periods=5))
    encoder = OpusFrameEncoder(EncoderSettings())
    quiet = [encoder.encode(bytes(FRAME_SAMPLES * 2)) for _ in range(80)]
    # the first six arrive together, 100 ms late: four frames more than the target, for good
    packets = [(max(i, 5) * FRAME, i, 960 * i, quiet[i]) for i in range(80)]
    run(path, packets, 80)
    assert path.stats.trimmed >= 3
    assert path.stats.dropped == 0


def test_a_frame_too_many_is_cut_in_a_pause_not_in_a_word():
    encoder = OpusFrameEncoder(EncoderSettings())
    speech = speechy_payloads(60)
    silent = encoder.encode(bytes(FRAME_SAMPLES * 2))
    # speech with two quiet frames inside its words (a stop), then a pause of 8
    payloads = [silent if i % 10 in (4, 5) or 40 <= i < 48 else speech[i] for i in range(60)]
    packets = [(max(i, 3) * FRAME, i, 960 * i, payloads[i]) for i in range(60)]  # one too many
    path = ReceivePath(recorded(nack=False, trim_after_periods=5))
    run(path, packets, 60)
    assert path.stats.trimmed >= 1
    played = [p.seq for p in path.played if p.seq is not None]
    cut = [b - 1 for a, b in itertools.pairwise(played) if b - a > 1]
    assert cut and all(40 + 2 <= c < 48 for c in cut), cut  # after quiet frames in a row
    # a lone quiet frame was fair game before (trim_pause_frames=1), and was cut in a word
    lone = ReceivePath(recorded(nack=False, trim_after_periods=5, trim_pause_frames=1,
                                cut_pause_frames=1))
    run(lone, packets, 60)
    played = [p.seq for p in lone.played if p.seq is not None]
    assert any(b - a > 1 and b - 1 < 40 for a, b in itertools.pairwise(played))


def test_trackers():
    transit = TransitTracker(window=3, quantile=0.0)
    assert transit.minimum is None
    for v in (5.0, 3.0, 4.0, 6.0, 7.0, 8.0):
        transit.add(v)
    assert transit.minimum == 6.0
    robust = TransitTracker(window=100)
    for i in range(100):
        robust.add(0.5 if i == 3 else 1.0 + (i % 10) / 1000)  # one packet a frame early
    assert robust.minimum == pytest.approx(1.0)
    delay = DelayTracker()
    assert delay.mean_ms() is None
    for v in (0.01, 0.02, 0.03):
        delay.add(v)
    assert delay.mean_ms() == pytest.approx(20.0)
    assert delay.percentile_ms(95) == pytest.approx(30.0)


def test_config_validation():
    with pytest.raises(ValueError):
        ReceivePathConfig(min_frames=4, max_frames=3)
    with pytest.raises(ValueError):
        ReceivePathConfig(decode_ahead_frames=5)
    with pytest.raises(ValueError):
        ReceivePathConfig(tick_guard_s=0.02)
    assert ReceivePathConfig().jitter_min_frames == 3
    assert ReceivePathConfig(nack=False).jitter_min_frames == 2


async def test_tasks_send_wrap_safe_nacks_and_close_cleanly():
    sent: list[bytes] = []
    got = asyncio.Event()

    async def send(data: bytes) -> bool:
        sent.append(data)
        got.set()
        return True

    path = ReceivePath(recorded(), send, lambda: 0xAABBCCDD)
    path.start()
    loop = asyncio.get_running_loop()
    now = loop.time()
    for i in range(40):
        if i not in (35, 36):  # 65535 and 0
            path.on_packet(seq_add(65500, i), 960 * i, PAYLOADS[i], SSRC, now + i * 0.001)
    await asyncio.wait_for(got.wait(), 2.0)
    nack = parse_nack_packet(sent[0])
    assert (nack.sender_ssrc, nack.media_ssrc) == (0xAABBCCDD, SSRC)
    assert nack.seqs == [65535, 0]
    await asyncio.wait_for(path.wait_periods(3), 2.0)
    assert path.running
    await path.close()
    assert not path.running and not path._nacks.running
    with pytest.raises(RuntimeError):
        await path.wait_periods(1)


def test_a_stale_packet_far_behind_is_not_a_restart():
    path = ReceivePath(recorded(nack=False))
    run(path, arrivals(40, start_seq=1000), 40)
    path.on_packet(seq_add(1000, -300), 0, PAYLOADS[0], SSRC, 0.81)  # e.g. a late answer
    path.on_packet(seq_add(1000, 41), 960 * 41, PAYLOADS[41], SSRC, 0.82)  # 40 is missing
    assert path.stats.lost == 1
    assert path.stats.late == 1


def test_fixed_start_sequence_patches_and_restores():
    import aiortc.rtcrtpsender

    from gateway import aiortc_compat

    original = aiortc.rtcrtpsender.random_sequence_number
    with aiortc_compat.fixed_start_sequence(65500):
        assert aiortc.rtcrtpsender.random_sequence_number() == 65500
    assert aiortc.rtcrtpsender.random_sequence_number is original
    with pytest.raises(ValueError), aiortc_compat.fixed_start_sequence(70000):
        pass


def test_silence_is_inserted_when_the_buffer_runs_short_of_its_target():
    path = ReceivePath(recorded(nack=False, stretch_after_periods=5))
    encoder = OpusFrameEncoder(EncoderSettings())
    quiet = [encoder.encode(bytes(FRAME_SAMPLES * 2)) for _ in range(80)]
    # the second packet comes right after the first (a start-up burst): playout starts one
    # frame short of the target and would stay there
    packets = [(0.005 if i == 1 else i * FRAME, i, 960 * i, quiet[i]) for i in range(80)]
    played = run(path, packets, 60)
    assert path.stats.stretched == 1
    assert [p.kind for p in played].count(FrameKind.INSERTED) == 1
    assert path.stats.underrun_periods == 0
    frames = [p.seq for p in played if p.kind is FrameKind.FRAME]
    assert frames == list(range(frames[0], frames[0] + len(frames)))  # nothing skipped
