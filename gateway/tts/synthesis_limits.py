"""Per-request bounds on synthesis: characters given to a voice and seconds of audio made.

Every path that speaks (session speech, the HTTP speech routes, duplex replies, prerenders)
goes through ``limited_stream``: a text longer than ``max_chars`` fails before any work, and
a stream is stopped with a ``SynthesisError`` once it has produced ``max_audio_s`` seconds,
so no request -- whatever text it carries and whatever a voice makes of it -- makes unbounded
work. The input limit on the API (``--max-text-chars``) refuses long texts with a 400; this
guard also covers text the gateway did not get from the request (an agent's reply).

The limits are the process's (set once by ``create_app`` from ``--max-text-chars`` and
``--max-speech-seconds``): every conversation of a process shares them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.tts.base import PcmChunk, SynthesisError


@dataclass(frozen=True, slots=True)
class SynthesisLimits:
    max_chars: int = 100_000
    #: 20 minutes of speech: a long article read out, far past any reply or prompt
    max_audio_s: float = 1200.0


_LIMITS = [SynthesisLimits()]


def configure(limits: SynthesisLimits) -> None:
    _LIMITS[0] = limits


def current() -> SynthesisLimits:
    return _LIMITS[0]


async def limited_stream(
    stream: AsyncIterator[PcmChunk], text: str, limits: SynthesisLimits | None = None
) -> AsyncIterator[PcmChunk]:
    """``stream`` (the PCM of ``text``) under ``limits``; closing this closes ``stream``."""
    limits = limits or current()
    async with contextlib.aclosing(stream):  # type: ignore[type-var]
        if len(text) > limits.max_chars:
            raise SynthesisError(
                f"text of {len(text)} characters is over the limit of {limits.max_chars} "
                "(--max-text-chars)"
            )
        seconds = 0.0
        async for chunk in stream:
            seconds += len(chunk.data) / 2 / chunk.sample_rate
            if seconds > limits.max_audio_s:
                raise SynthesisError(
                    f"speech longer than the limit of {limits.max_audio_s:g} s "
                    "(--max-speech-seconds); stopped there"
                )
            yield chunk
