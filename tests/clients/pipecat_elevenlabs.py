"""Pipecat's ``ElevenLabsTTSService``, unmodified, in a real Pipecat pipeline against the
gateway (run by tests/test_elevenlabs_clients.py with the clients' own venv's python; prints one
JSON object).

    python pipecat_elevenlabs.py URL [VOICE] [MODE]

Two LLM-style replies are fed as text frames a few characters at a time, each between
LLMFullResponseStart/EndFrame (so each is a context of its own on the one socket); the sink
records the audio frames, the word frames the service builds from the alignment, and its
TTSStarted/TTSStoppedFrames (a TTSStoppedFrame per context comes from the server's isFinal).
MODE: ``sentence`` (the default: the WebSocket service, URL ws://host:port), ``token`` (the same,
every token sent to the socket as it comes) or ``http`` (``ElevenLabsHttpTTSService``: each
sentence POSTed to ``/stream/with-timestamps``, URL http://host:port).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys

import aiohttp
from pipecat.frames.frames import (
    EndFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.elevenlabs.tts import ElevenLabsHttpTTSService, ElevenLabsTTSService
from pipecat.services.tts_service import TextAggregationMode

# Pipecat ends an audio context that stays quiet this long (its default: 3 s) and starts it again
# when audio resumes -- a second TTSStoppedFrame for one context. Under `make test`'s four
# workers on two cores (Piper on each) a sentence's audio has paused that long (fresh-clone CI,
# 2026-12-06, the http mode); a user's deployment would tune it the same way.
STOP_FRAME_TIMEOUT_S = 15.0

REPLIES = [
    "Hello there, this is the gateway speaking through Pipecat. Each word is timed.",
    "A second reply follows, in a context of its own.",
]


class Sink(FrameProcessor):
    def __init__(self) -> None:
        super().__init__()
        self.audio: dict[str, bytearray] = {}
        self.rates: set[int] = set()
        self.words: list[dict] = []
        self.started: list[str | None] = []
        self.stopped: list[str | None] = []
        self.all_stopped = asyncio.Event()

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.audio.setdefault(str(frame.context_id), bytearray()).extend(frame.audio)
            self.rates.add(frame.sample_rate)
        elif isinstance(frame, TTSTextFrame):
            self.words.append({"text": frame.text, "pts": frame.pts,
                               "context": str(frame.context_id)})
        elif isinstance(frame, TTSStartedFrame):
            self.started.append(str(frame.context_id))
        elif isinstance(frame, TTSStoppedFrame):
            self.stopped.append(str(frame.context_id))
            if len(self.stopped) >= len(REPLIES):
                self.all_stopped.set()
        await self.push_frame(frame, direction)


async def main() -> None:
    url = sys.argv[1]
    voice = sys.argv[2] if len(sys.argv) > 2 else "21m00Tcm4TlvDq8ikWAM"
    mode = sys.argv[3] if len(sys.argv) > 3 else "sentence"
    aggregation = TextAggregationMode.TOKEN if mode == "token" else TextAggregationMode.SENTENCE
    async with contextlib.AsyncExitStack() as stack:
        if mode == "http":
            session = await stack.enter_async_context(aiohttp.ClientSession())
            tts = ElevenLabsHttpTTSService(
                api_key="s3cret", aiohttp_session=session, base_url=url, sample_rate=24000,
                settings=ElevenLabsHttpTTSService.Settings(voice=voice,
                                                           model="eleven_flash_v2_5"),
                stop_frame_timeout_s=STOP_FRAME_TIMEOUT_S)
        else:
            tts = ElevenLabsTTSService(api_key="s3cret", url=url, sample_rate=24000,
                                       settings=ElevenLabsTTSService.Settings(
                                           voice=voice, model="eleven_flash_v2_5"),
                                       text_aggregation_mode=aggregation,
                                       stop_frame_timeout_s=STOP_FRAME_TIMEOUT_S)
        await run(tts)


async def run(tts) -> None:
    sink = Sink()
    task = PipelineTask(Pipeline([tts, sink]), params=PipelineParams(audio_out_sample_rate=24000),
                        idle_timeout_secs=None)

    async def feed() -> None:
        for reply in REPLIES:
            await task.queue_frame(LLMFullResponseStartFrame())
            for i in range(0, len(reply), 3):  # an LLM's pace: a few characters at a time
                await task.queue_frame(LLMTextFrame(reply[i:i + 3]))
                await asyncio.sleep(0.01)
            await task.queue_frame(LLMFullResponseEndFrame())
            await asyncio.sleep(0.2)
        await asyncio.wait_for(sink.all_stopped.wait(), 60)
        await task.queue_frame(EndFrame())

    runner = PipelineRunner(handle_sigint=False)
    await asyncio.gather(runner.run(task), feed())
    print(json.dumps({
        "rates": sorted(sink.rates),
        "audio": {k: base64.b64encode(bytes(v)).decode() for k, v in sink.audio.items()},
        "words": sink.words, "started": sink.started, "stopped": sink.stopped,
        "replies": REPLIES,
    }))


if __name__ == "__main__":
    asyncio.run(main())
