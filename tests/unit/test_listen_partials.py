"""Partial transcripts of a growing segment, with a fake recogniser (no model)."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np

from gateway.listen.asr import Transcript
from gateway.listen.partials import partial_transcripts


class FakeRecognizer:
    name = "fake"

    def __init__(self, busy_every: int = 0, delay: float = 0.0) -> None:
        self.calls: list[int] = []
        self.times: list[float] = []  # the loop's time of each call
        self.ends: list[float] = []  # ... and of each answer
        self.busy_every = busy_every
        self.delay = delay

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        self.calls.append(len(audio16k))
        self.times.append(asyncio.get_running_loop().time())
        if self.busy_every and len(self.calls) % self.busy_every == 0:
            return None
        await asyncio.sleep(self.delay)
        self.ends.append(asyncio.get_running_loop().time())
        words = len(audio16k) // 16000
        return Transcript(" ".join(["word"] * words), final, len(audio16k) / 16000)

    async def close(self) -> None:
        return None


async def collect(rec, segment, seconds: float, **kw):
    out: list[Transcript] = []

    async def run() -> None:
        async for t in partial_transcripts(rec, segment, **kw):
            out.append(t)

    task = asyncio.create_task(run())
    await asyncio.sleep(seconds)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return out


async def collect_calls(rec, segment, calls: int, timeout: float = 10.0, **kw):
    """As ``collect``, until the recogniser was called ``calls`` times (a loaded CI worker
    runs fewer ticks in a fixed time: the count is not what is tested)."""
    out: list[Transcript] = []

    async def run() -> None:
        async for t in partial_transcripts(rec, segment, **kw):
            out.append(t)
            if len(rec.calls) >= calls:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_partials_follow_the_growing_segment_and_skip_repeats():
    loop = asyncio.get_running_loop()
    start = loop.time()

    def segment() -> np.ndarray:  # grows 16000 samples (1 s) per 0.1 s of test time
        return np.zeros(int((loop.time() - start) * 160_000), dtype=np.int16)

    rec = FakeRecognizer()
    out = await collect_calls(rec, segment, 5, interval=0.1)
    assert len(rec.calls) == 5
    # a decode per interval at most, never more often (was: 4-6 calls in 0.55 s, which a
    # loaded CI worker missed with 3)
    assert min(b - a for a, b in zip(rec.times, rec.times[1:])) >= 0.1 - 0.01
    assert rec.calls == sorted(rec.calls)
    texts = [t.text for t in out]
    assert len(texts) == len(set(texts)) and all(texts)
    assert not any(t.final for t in out)


async def test_a_skipped_decode_is_retried_at_the_next_tick_and_short_audio_waits():
    audio = np.zeros(32000, dtype=np.int16)
    grown = [np.zeros(4000, dtype=np.int16)]
    rec = FakeRecognizer(busy_every=1)
    await collect(rec, lambda: grown[0], 0.25, interval=0.05)
    assert rec.calls == []  # 0.25 s of audio: below min_seconds
    grown[0] = audio
    # 0.6 s, ~12 ticks: a loaded CI worker lost ticks of the 0.28 s this once ran (3 of ~5)
    await collect(rec, lambda: grown[0], 0.6, interval=0.05)
    assert len(rec.calls) >= 4  # every tick tried again: each was refused


async def test_slow_decodes_do_not_stretch_the_interval_beyond_one_decode():
    """The interval counts from a decode's start: after an 80 ms decode the next starts 20 ms
    later (a stretched schedule would wait the whole 100 ms after it). Counted in calls and
    measured from each answer, not as calls in a fixed time (a loaded CI worker ran 3 of the
    4-6 a 0.5 s window expected)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    rec = FakeRecognizer(delay=0.08)
    await collect_calls(rec, lambda: np.zeros(int((loop.time() - start) * 160_000) + 16000,
                                              dtype=np.int16), 5, interval=0.1)
    waits = sorted(b - a for a, b in zip(rec.ends, rec.times[1:]))  # answer -> next call
    assert len(waits) >= 4
    assert waits[len(waits) // 2] < 0.06  # 0.02 s each on time; 0.1 if it stretched


async def test_no_partial_while_not_wanted():
    rec = FakeRecognizer()
    wanted = [False]
    await collect(rec, lambda: np.zeros(32000, dtype=np.int16), 0.25, interval=0.05,
                  wanted=lambda: wanted[0])
    assert rec.calls == []
    wanted[0] = True
    await collect(rec, lambda: np.zeros(32000, dtype=np.int16), 0.12, interval=0.05,
                  wanted=lambda: wanted[0])
    assert rec.calls == [32000]
