"""The synthesizer interface every TTS backend implements.

A backend turns text into an async stream of PCM chunks. Chunks are signed 16-bit little-endian
mono bytes at any sample rate; a chunk may end in the middle of a sample (network backends pass
bytes through as they arrive) -- the media pipeline re-joins split samples, resamples to 24 kHz
and cuts 20 ms frames. Closing the async iterator (``aclose``) must release every resource the
stream holds (worker threads finish their current step, network requests are closed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway.text.timing import WordTiming


@dataclass(frozen=True, slots=True)
class PcmChunk:
    """Signed 16-bit little-endian mono PCM bytes (possibly an odd count) at ``sample_rate``.

    ``words``: the words this chunk starts, timed from its first sample (a word may run into
    the next chunks); empty when the backend does not know (the caller may estimate them)."""

    data: bytes
    sample_rate: int
    words: tuple[WordTiming, ...] = ()


class SynthesisError(Exception):
    """A backend failed to produce speech (upstream refused, timed out, cut the stream...)."""


@runtime_checkable
class Synthesizer(Protocol):
    """A TTS voice. ``name`` is what the speech API's ``voice`` field selects."""

    name: str

    def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        """Yield PCM for ``text`` as soon as it exists. Raises SynthesisError on failure."""
        ...

    async def close(self) -> None:
        """Release process-wide resources (models, connection pools)."""
        ...


def open_stream(
    voice: Synthesizer, text: str, instructions: str | None = None, after: str | None = None
) -> AsyncIterator[PcmChunk]:
    """``voice.stream(text)``, passing ``instructions`` (OpenAI's field; CosyVoice's
    instruct_text) to backends that take them (``takes_instructions``), and ``after`` (the text
    spoken just before this one in the same utterance: ``text`` continues it) to backends that
    take it (``takes_after``: Piper, which then joins the two without a seam); others ignore
    them."""
    kwargs: dict[str, str] = {}
    if instructions and getattr(voice, "takes_instructions", False):
        kwargs["instructions"] = instructions
    if after and getattr(voice, "takes_after", False):
        kwargs["after"] = after
    return voice.stream(text, **kwargs)  # type: ignore[call-arg]
