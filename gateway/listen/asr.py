"""The recogniser interface every speech-to-text backend implements.

``transcribe(audio16k, final=...)`` takes one segment of 16 kHz mono speech (int16, or float in
[-1, 1]) and returns its text. Partial decodes (``final=False``, while the user still speaks) are
best effort: a backend returns ``None`` instead of queueing one when it has no free capacity.
A final decode is never skipped. Failures raise ``RecognitionError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


class RecognitionError(Exception):
    """A backend failed to transcribe (model missing, server refused, timed out, bad reply)."""


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    final: bool
    audio_seconds: float
    #: Seconds from the call to the answer (queueing included).
    latency: float = 0.0
    #: Seconds spent decoding (the model's own time, when the backend knows it).
    decode_seconds: float = 0.0
    no_speech_prob: float | None = None
    #: The quick decode looped (or hit its token cap) and was redone the slow, sure way.
    looped: bool = False
    backend: str = ""


@runtime_checkable
class Recognizer(Protocol):
    name: str

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        """The text of ``audio16k``; ``None`` only for a skipped partial (``final=False``)."""
        ...

    async def close(self) -> None:
        """Release models, threads and connections."""
        ...
