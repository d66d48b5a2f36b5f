"""What the phrase cache keeps: a phrase's key (voice, normalised text, encoder settings) and its
encoded Opus packets, and the recorder that collects them while an utterance is encoded. Used by
the cache (``phrase_cache``) and its on-disk store (``phrase_store``), which import this module
and not each other's internals.
"""

from __future__ import annotations

import hashlib
import sys
import unicodedata
from array import array
from dataclasses import dataclass

from gateway.media.opus_codec import FRAME_MS, SAMPLE_RATE, EncoderSettings

FORMAT_VERSION = 1


def normalize_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def settings_tag(settings: EncoderSettings) -> str:
    """Everything that decides the encoded bytes besides the PCM, as one string."""
    return (f"v{FORMAT_VERSION}/opus/{SAMPLE_RATE}Hz/{FRAME_MS}ms/b{settings.bitrate}"
            f"/fec{int(settings.fec)}/loss{settings.expected_loss_percent}"
            f"/c{settings.complexity}")


@dataclass(frozen=True, slots=True)
class PhraseKey:
    tag: str  # settings_tag(...)
    voice: str
    text: str  # normalised

    @property
    def digest(self) -> str:
        raw = "\0".join((self.tag, self.voice, self.text)).encode()
        return hashlib.sha256(raw).hexdigest()[:40]


class CachedPhrase:
    """One utterance's Opus packets, in order, kept as the packets' own ``bytes`` objects.

    A replay hands out these very objects (no copy per frame per replay): hundreds of sessions
    replaying a phrase share one copy of it in their queues and frame stores. ``blob`` and
    ``lengths`` are the on-disk form (``phrase_store``).
    """

    __slots__ = ("frames",)

    PER_FRAME_OVERHEAD = sys.getsizeof(b"") + 8  # a bytes object's header and its tuple slot

    def __init__(self, blob: bytes, lengths: array[int]) -> None:
        if sum(lengths) != len(blob):
            raise ValueError("frame lengths do not add up to the blob")
        view, offset, frames = memoryview(blob), 0, []
        for n in lengths:
            frames.append(bytes(view[offset : offset + n]))
            offset += n
        self.frames: tuple[bytes, ...] = tuple(frames)

    @classmethod
    def from_payloads(cls, payloads: list[bytes]) -> CachedPhrase:
        phrase = cls.__new__(cls)
        phrase.frames = tuple(payloads)
        return phrase

    @property
    def blob(self) -> bytes:
        return b"".join(self.frames)

    @property
    def lengths(self) -> array[int]:
        return array("H", (len(p) for p in self.frames))

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self.frames) + self.PER_FRAME_OVERHEAD * len(self.frames)


class PhraseRecorder:
    """Collects an utterance's packets while it is encoded; gives up past ``cap`` bytes."""

    __slots__ = ("_payloads", "_size", "cap", "overflowed")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._payloads: list[bytes] = []
        self._size = 0
        self.overflowed = False

    def add(self, payload: bytes) -> None:
        if self.overflowed:
            return
        self._size += len(payload)
        if self._size > self.cap:
            self.overflowed = True
            self._payloads = []  # an hour-long text must not pile up here
            return
        self._payloads.append(payload)

    def result(self) -> CachedPhrase | None:
        if self.overflowed or not self._payloads:
            return None
        return CachedPhrase.from_payloads(self._payloads)
