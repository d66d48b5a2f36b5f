"""A sender that pauses: Opus DTX (one packet per 400 ms of silence, real libopus) and a mute
that sends nothing for 2 s. Neither is loss: no NACK, nothing lost or concealed, the pause
plays as a short PLC fade then silence, and the stats call it a pause."""

import numpy as np
import pytest

from gateway.media.opus_codec import FRAME_SAMPLES
from gateway.receive.frame_decoder import FrameKind
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from tests.opus_streams import encode, packetize, quiet, run, speechy

TAIL = 10  # periods run after the last packet: the stream's end is one underrun
PLC_FADE = 5  # FrameDecoder's plc_underrun_frames


def recorded(**options) -> ReceivePathConfig:
    return ReceivePathConfig(record_s=10.0, log_periods=1000, **options)


def periods_for(packets, packet_ms: float = 20) -> int:
    return round((packets[-1].at + packet_ms / 1000) / 0.02) + TAIL


def assert_silent_after_fade(path: ReceivePath) -> int:
    """Past the first few periods of a dry spell, playout is digital silence (not PLC)."""
    pcm = path.played_pcm()
    run_length, silent = 0, 0
    for p in path.played:
        run_length = run_length + 1 if p.kind is FrameKind.UNDERRUN else 0
        if run_length > PLC_FADE:
            frame = pcm[p.index * FRAME_SAMPLES : (p.index + 1) * FRAME_SAMPLES]
            assert not frame.any(), p
            silent += 1
    return silent


def test_dtx_pauses_are_no_loss_and_no_nack():
    pcm = np.concatenate([speechy(1.0), quiet(2.4), speechy(1.0, start=1.0)])
    payloads = encode(pcm, 20, dtx=True)
    packets = packetize(payloads, 20, dtx=True)
    not_sent = len(payloads) - len(packets)
    assert not_sent > 80  # libopus went into DTX: a packet per 400 ms of the quiet part
    path = ReceivePath(recorded())  # NACK on
    asked = run(path, packets, periods_for(packets))
    assert not any(asked) and path.nack.stats.nacks_sent == 0 and not path.nack.missing
    stats = path.stats
    assert (stats.lost, stats.concealed, stats.recovered_fec, stats.late) == (0,) * 4, stats
    assert stats.pauses >= 5, stats  # each DTX packet, and the speech after them
    assert stats.paused_periods > 80, stats
    assert stats.underruns == 1 and stats.underrun_periods <= TAIL, stats  # the end only
    assert stats.target_frames == 3  # a pause is not jitter
    played = {p.seq for p in path.played if p.kind is FrameKind.FRAME}
    assert played == {p.seq for p in packets}  # every packet sent, DTX ones too
    assert assert_silent_after_fade(path) > 60


@pytest.mark.parametrize("packet_ms", [20, 60])
def test_two_seconds_of_silence_resume_on_the_next_sequence_number(packet_ms):
    payloads = encode(np.concatenate([speechy(1.0), speechy(2.0), speechy(1.0)]), packet_ms)
    per_second = 1000 // packet_ms
    gap = set(range(per_second, 3 * per_second))  # muted: nothing sent from 1 s to 3 s
    packets = packetize(payloads, packet_ms, not_sent=gap)
    path = ReceivePath(recorded())
    asked = run(path, packets, periods_for(packets, packet_ms))
    assert not any(asked)
    stats = path.stats
    assert (stats.lost, stats.concealed, stats.recovered_fec, stats.late) == (0,) * 4, stats
    assert stats.pauses == 1 and 95 <= stats.paused_periods <= 105, stats
    assert stats.underruns == 1 and stats.underrun_periods <= TAIL, stats  # the end only
    assert path.jitter.stats.lost == 0
    # after the pause, speech plays without a hole: consecutive periods, every packet
    log = list(path.played)
    resumed = next(p.index for p in log if p.seq == packets[per_second].seq)
    audio = [p for p in log[resumed:] if p.kind is not FrameKind.UNDERRUN]
    assert [p.index for p in audio] == list(range(resumed, resumed + len(audio)))
    assert len(audio) == (len(packets) - per_second) * packet_ms // 20
    assert assert_silent_after_fade(path) >= 90
