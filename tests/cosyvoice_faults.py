"""The check both CosyVoice backends' fault tests share (HTTP and gRPC differ only in how the
fault reads in the error, and where the upstream is)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.testing.cosyvoice_server import CosyVoiceStandIn
from gateway.tts.base import SynthesisError, Synthesizer


async def expect_fault(
    standin: CosyVoiceStandIn,
    synth: Synthesizer,
    text: str,
    fault: str,
    message: str,
    upstream: str,
) -> None:
    """Speak ``text`` through ``synth`` while the stand-in injects ``fault``: it raises
    SynthesisError matching ``message`` and naming the voice and ``upstream``; it yields exactly
    the audio the server sent (none, but for a stream cut midway); the server saw the request
    end and close."""
    got = bytearray()
    with pytest.raises(SynthesisError, match=message) as info:
        async for chunk in synth.stream(text):
            got += chunk.data
    assert "'cv-sft'" in str(info.value) and upstream in str(info.value)
    rec = standin.requests[0]
    await asyncio.wait_for(rec.closed.wait(), 5)
    await asyncio.wait_for(rec.finished.wait(), 5)
    assert rec.fault == fault and rec.outcome == "fault"
    assert bytes(got) == bytes(rec.sent)  # error pages are never yielded as audio
    assert (len(got) > 0) == (fault == "cut_mid_stream")
    await synth.close()
