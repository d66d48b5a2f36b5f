"""Times travel with the PCM: the duplex reads when the listener's stream time was captured
from the frames' own times (``PcmFrame.at``), across a jump of the uplink clock."""

from __future__ import annotations

import numpy as np

from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import ASR_FRAME, ASR_RATE, Duplex
from gateway.listen.listener import Listener
from gateway.media.opus_codec import EncoderSettings
from gateway.tts.tone import ToneSynthesizer

UP = 480  # 20 ms at the uplink's 24 kHz
FRAME_S = ASR_FRAME / ASR_RATE


class Quiet:
    name = "quiet"

    def probability(self, frame: np.ndarray) -> float:
        return 0.0

    def reset(self) -> None:
        return None


class Never:
    name = "never"

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> None:
        return None

    async def close(self) -> None:
        return None


def make() -> Duplex:
    listener = Listener(Never(), vad=Quiet(), partials=False, speculate_ms=None)
    from gateway.agent.echo import EchoAgent

    return Duplex(Conversation(EncoderSettings()), listener, EchoAgent(),
                  ToneSynthesizer(seconds=0.1))


def test_stream_time_maps_to_the_frames_capture_times_across_a_jump() -> None:
    duplex = make()
    silence = np.zeros(UP, dtype=np.int16)
    t0 = 1000.0
    for i in range(100):  # 2 s, paced
        duplex.hear(silence, at=t0 + i * 0.020)
    lag = t0 + 99 * 0.020 - duplex.frames_heard * FRAME_S  # capture minus stream time
    # the loop froze for 3 s: the next frames were captured 3 s later than the stream shows
    for i in range(100, 200):
        duplex.hear(silence, at=t0 + 3.0 + i * 0.020)
    total = duplex.frames_heard * FRAME_S
    # before the jump: as captured then; after it: 3 s later (within one resampled frame)
    assert abs(duplex._mono(1.0) - (1.0 + lag)) < 0.045
    assert abs(duplex._mono(total - 0.5) - (total - 0.5 + 3.0 + lag)) < 0.045
    assert len(duplex._offsets) <= 4  # one entry per jump, not one per frame


def test_without_times_given_frames_are_timed_when_heard() -> None:
    import time

    duplex = make()
    before = time.monotonic()
    for _ in range(10):
        duplex.hear(np.zeros(UP, dtype=np.int16))
    now = duplex._mono(duplex.frames_heard * FRAME_S)
    assert before <= now <= time.monotonic()
