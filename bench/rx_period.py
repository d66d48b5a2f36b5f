"""Benchmark: one talker's receive path and hearing per 20 ms period, in process, hot caches.

``python -m bench.rx_period`` (``RX_PERIOD_N`` periods, default 3000; ``RX_PERIOD_SPEECH=1``
for a voiced tone instead of silence; ``RX_PERIOD_PROFILE=tottime`` for a cProfile instead;
``RX_PERIOD_RATE=24000`` for an uplink decoded at 24 kHz and resampled, as before the 16 kHz
decode). The uplink's ``ReceivePath`` (``UPLINK_RECEIVE`` at the listener's 16 kHz) and a
``Duplex`` made as the gateway makes them (Silero VAD, the silence turn detector) get aiortc-
encoded Opus (48 kHz stereo, as a client's microphone sends it) one packet and one playout
period at a time: ``on_packet``, ``tick``, the period's frame to ``Duplex.hear``. No network,
no event loop in between, so the code and its data stay in cache: the figure is the Python and
C work itself, stable to a few %, where bench.rx_cost's loop figure is that work on cold caches
(3-4x more) plus SRTP, the socket, the downlink and the loop, and spreads 15 % from window to
window.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time

import numpy as np

from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import ASR_RATE, UPLINK_RECEIVE, DuplexFactory, HearingOptions
from gateway.media.opus_codec import EncoderSettings
from gateway.receive.receive_path import ReceivePath
from gateway.testing.mic_track import opus_packets
from gateway.tts.tone import ToneSynthesizer


class _Clock:
    """The playout clock's scheduler, never started: the bench calls ``tick`` itself."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def tick_at_or_after(self, t: float) -> int:
        return 0

    def time_of(self, tick: int) -> float:
        return 0.0

    def period_tick(self, t: float) -> int:
        return 0

    def call_after_sends(self, t: float, callback: object) -> None:
        pass


def payloads(count: int, speech: bool) -> list[bytes]:
    """What aiortc's encoder makes of 20 ms frames of silence (or a voiced 220 Hz tone)."""
    frames = []
    for i in range(count):
        t = (np.arange(960) + i * 960) / 48_000
        wave = 3000 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t))
        frames.append(wave.astype(np.int16) if speech else np.zeros(960, dtype=np.int16))
    return opus_packets(frames)


async def run() -> None:
    count = int(os.environ.get("RX_PERIOD_N", "3000"))
    packets = payloads(count + 100, bool(os.environ.get("RX_PERIOD_SPEECH")))
    voice = ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000)
    conversation = Conversation(EncoderSettings(), encode=False)
    rate = int(os.environ.get("RX_PERIOD_RATE", str(ASR_RATE)))
    duplex = DuplexFactory(HearingOptions(), voice).make(conversation, uplink_rate=rate)
    clock = _Clock()
    path = ReceivePath(dataclasses.replace(UPLINK_RECEIVE, sample_rate=rate), ticker=clock)
    path.pcm.on_frame(lambda frame: duplex.hear(frame.pcm, frame.at))

    def periods(first: int, last: int) -> None:
        for k in range(first, last):
            clock.t += 0.020
            path.on_packet(k & 0xFFFF, (k * 960) & 0xFFFFFFFF, packets[k], 1234, clock.t - 0.005)
            path.tick(clock.t)

    periods(0, 100)  # warm: the jitter buffer playing, the VAD's gate settled
    sort = os.environ.get("RX_PERIOD_PROFILE")
    if sort:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.enable()
        periods(100, 100 + count)
        profile.disable()
        pstats.Stats(profile).sort_stats(sort).print_stats(40)
    else:
        cpu = time.thread_time()
        periods(100, 100 + count)
        cpu = time.thread_time() - cpu
        stats, windows = path.stats, getattr(duplex.listener.vad, "windows", "-")
        print(f"{1e6 * cpu / count:.1f} µs a period ({count} periods; played {stats.played}, "
              f"concealed {stats.concealed}, VAD windows {windows})")
    await duplex.close()
    await conversation.close()


if __name__ == "__main__":
    asyncio.run(run())
