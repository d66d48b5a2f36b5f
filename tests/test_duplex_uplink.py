"""The microphone's receive path (``session.duplex.UPLINK_RECEIVE``) catches up at once after a
stall: a backlog of packets delivered together (a loop or CPU stall on either side) is cut back
to the jitter target in the next silence, a frame a period (the turn's trailing silence, so the
end of the turn is not delayed by the stall), where the client's loudspeaker settings take
seconds; speech itself is not cut. Driven period by period, no clock."""

from __future__ import annotations

import dataclasses

import numpy as np

from gateway.conversation.duplex import UPLINK_RECEIVE
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig

FRAME = 0.020
STALL = 15  # frames (300 ms) that arrive together at the stall's end


def payloads(n: int, voiced_until: int) -> list[bytes]:
    """Opus frames: a 200 Hz tone up to frame ``voiced_until``, then silence."""
    encoder = OpusFrameEncoder(EncoderSettings())
    t = np.arange(n * FRAME_SAMPLES) / 24_000
    pcm = (8000 * np.sin(2 * np.pi * 200 * t)).astype(np.int16)
    pcm[voiced_until * FRAME_SAMPLES:] = 0
    return [encoder.encode(pcm[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES].tobytes())
            for i in range(n)]


def delay_after_stall(config: ReceivePathConfig, voiced_until: int, periods_after: int,
                      ) -> tuple[float, ReceivePath]:
    """Frames buffered beyond the target ``periods_after`` periods after a stall's backlog
    (packets 40-54 arrive together with packet 55); and the path."""
    path = ReceivePath(dataclasses.replace(config, nack=False))
    n = 40 + STALL + periods_after + 5
    data = payloads(n, voiced_until)
    stall_end = 40 + STALL
    # on time, but packets 40 .. 40+STALL-1 all arrive with packet 40+STALL
    packets = [((max(i, stall_end) if 40 <= i < stall_end else i) * FRAME, 1000 + i,
                960 * i, data[i]) for i in range(n)]
    pending = sorted(packets)
    for k in range(stall_end + 1 + periods_after):
        now = 0.015 + k * FRAME
        while pending and pending[0][0] <= now:
            t, seq, ts, payload = pending.pop(0)
            path.on_packet(seq, ts, payload, 0x1234, t)
        path.tick(now)
    # the last packet in arrived on time: what is buffered past the target is the backlog left
    return path.jitter.depth_frames - path.jitter.target_frames, path


def test_a_stall_in_silence_is_caught_up_a_frame_a_period():
    left, path = delay_after_stall(UPLINK_RECEIVE, voiced_until=0, periods_after=STALL + 3)
    assert left <= 1 and path.stats.trimmed >= STALL - 2
    # the loudspeaker's settings still have the backlog (one cut per 25 periods)
    left, _ = delay_after_stall(ReceivePathConfig(), voiced_until=0, periods_after=STALL + 3)
    assert left >= 8


def test_a_stall_in_speech_keeps_the_speech_and_is_caught_up_in_the_silence_after():
    # voiced through the stall and 20 frames after it: nothing voiced is cut ...
    left, path = delay_after_stall(UPLINK_RECEIVE, voiced_until=75, periods_after=20)
    assert left >= STALL - 3 and path.stats.trimmed == 0 and path.stats.dropped == 0
    # ... and the silence after it (a turn's end) drains the backlog, a frame a period: the
    # last voiced frame plays STALL periods late (period 90), the backlog is gone 15 later
    left, path = delay_after_stall(UPLINK_RECEIVE, voiced_until=75, periods_after=34 + STALL + 2)
    assert left <= 1 and path.stats.dropped == 0 and path.stats.trimmed >= STALL - 2


def test_bursty_loss_does_not_deepen_the_microphone_buffer():
    # a loudspeaker's path deepens to wait for repairs of bursts; the microphone's must not:
    # its depth is endpointing delay (a repair that comes too late is concealed instead)
    from tests.unit.test_receive_burst_depth import LEARN, LONG, play

    mic = play(dataclasses.replace(UPLINK_RECEIVE, log_periods=400), LEARN | LONG)
    assert mic.burst_floor_frames == UPLINK_RECEIVE.jitter_min_frames  # 1 + 1 for NACK
    assert mic.stats.stretched == 0  # no silence inserted to deepen
    speaker = play(dataclasses.replace(UPLINK_RECEIVE, log_periods=400, burst_depth=True),
                   LEARN | LONG)
    assert speaker.burst_floor_frames >= 8  # what the same losses do with the floor on
