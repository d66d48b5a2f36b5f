"""Partial transcripts while the user speaks: the growing segment re-decoded about every
``interval`` seconds (0.8 by default).

``partial_transcripts`` is an async generator: start it when speech starts, close it (``aclose``)
when speech stops, then run the final decode. It yields only transcripts whose text changed.
A decode the recogniser skips (no free core: it returned None) is simply tried again at the
next tick; the interval counts from the start of the previous decode, so slow decodes do not
stretch it. Segments shorter than ``min_seconds`` are not decoded, nor any while ``wanted()``
says no (the listener says no once the user has gone quiet: the final decode is coming, and a
partial still running then would hold up the final on a one-worker pool).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable

import numpy as np

from gateway.listen.asr import Recognizer, Transcript
from gateway.listen.audio import RATE

DEFAULT_INTERVAL = 0.8


async def partial_transcripts(recognizer: Recognizer, segment: Callable[[], np.ndarray], *,
                              interval: float = DEFAULT_INTERVAL,
                              min_seconds: float = 0.5,
                              wanted: Callable[[], bool] | None = None,
                              ) -> AsyncGenerator[Transcript, None]:
    if interval <= 0:
        raise ValueError("interval must be positive")
    loop = asyncio.get_running_loop()
    last_text: str | None = None
    decoded_samples = 0
    next_at = loop.time() + interval
    while True:
        await asyncio.sleep(max(0.0, next_at - loop.time()))
        started = loop.time()
        next_at = started + interval
        audio = segment()
        if len(audio) < min_seconds * RATE or len(audio) == decoded_samples:
            continue
        if wanted is not None and not wanted():
            continue
        transcript = await recognizer.transcribe(audio, final=False)
        if transcript is None:
            continue
        decoded_samples = len(audio)
        if transcript.text and transcript.text != last_text:
            last_text = transcript.text
            yield transcript
