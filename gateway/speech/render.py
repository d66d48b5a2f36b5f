"""Rendering: one text through a voice into 20 ms frames, Opus-encoded once (or left as PCM).

text -> the synthesizer's PCM (any rate) -> re-joined samples -> 24 kHz -> 20 ms frames -> Opus
payloads, in order, with the words' timings carried along. This half of speaking knows nothing
of queues, interrupts or sinks: the speaker (``speaker.py``) decides what is rendered when and
where its frames go; a ``FrameRenderer`` only makes them, for an utterance or a prerender.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Protocol

from gateway.media.framer import Framer, SampleAligner
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.media.resample import RateFollower
from gateway.runtime.metrics import METRICS
from gateway.runtime.worker_pool import WorkerPool
from gateway.speech.prerender import Prerender
from gateway.text.timing import WordTiming, WordTrack
from gateway.tts.base import SynthesisError, Synthesizer, open_stream
from gateway.tts.synthesis_limits import limited_stream

ENCODE_BATCH = 10  # frames per trip to the encoder threads (200 ms of audio)
# The first frames of an utterance are encoded on the loop (≈0.3 ms each): the first decides
# first-audio latency, and the next two give the first trip to the pool 40 ms (not 0-20 ms)
# before the stream needs its result -- on a busy machine the trip took longer than the first
# frame's slot, and a silent frame went out between frames one and two.
LOOP_FRAMES = 3


class Progress(Protocol):
    """What rendering stamps: an utterance, or a prerender."""

    first_pcm_at: float | None
    frames_encoded: int
    frames_rendered: int
    words: list[WordTiming]


class FrameRenderer:
    """Makes frames for one speaker: its encoder settings, its encoder pool, Opus or PCM."""

    def __init__(self, settings: EncoderSettings, pool: WorkerPool, encode: bool = True) -> None:
        """``encode=False``: the 24 kHz PCM frames the encoder would take (960 bytes of s16le
        per 20 ms) instead of Opus -- for outputs that are not Opus."""
        self.settings = settings
        self.pool = pool
        self.encode = encode
        self.encoders_created = 0  # one per rendered text (replays need none)

    def encoder(self) -> OpusFrameEncoder | None:
        """A fresh encoder for one text (None for PCM out). No session holds libopus state
        (≈43 KB) while idle or replaying, and a barge-in never waits for the lock of an encoder
        a cancelled batch may still be using on a worker thread (73 µs to make one here)."""
        if not self.encode:
            return None
        self.encoders_created += 1
        return OpusFrameEncoder(self.settings)

    async def fill(self, prerender: Prerender, voice: Synthesizer) -> None:
        """Render ``prerender``'s text into it (the body of its task)."""
        rendered = self.render(prerender, voice, prerender.text, prerender.instructions,
                               self.encoder())
        try:
            async with contextlib.aclosing(rendered) as payloads:
                async for payload in payloads:
                    await prerender.add(payload)
        except SynthesisError as exc:
            prerender.finish(str(exc))
            return
        prerender.finish()

    async def render(self, progress: Progress, voice: Synthesizer, text: str,
                     instructions: str | None,
                     encoder: OpusFrameEncoder | None) -> AsyncIterator[bytes]:
        """text -> the voice's PCM (any rate) -> 24 kHz 20 ms frames -> Opus payloads (the
        PCM frames themselves without an encoder), in order; raises ``SynthesisError``."""
        aligner = SampleAligner()
        framer = Framer(FRAME_SAMPLES)
        resampler = RateFollower()
        track = WordTrack(text)  # the words' times travel with the PCM
        progress.words = track.words  # live: each chunk's words as soon as it arrives
        started = time.monotonic()
        stream = limited_stream(open_stream(voice, text, instructions), text)
        async with contextlib.aclosing(stream) as chunks:
            async for chunk in chunks:
                if progress.first_pcm_at is None:
                    progress.first_pcm_at = time.monotonic()
                    METRICS.tts_first_chunk.labels(type(voice).__name__).observe(
                        progress.first_pcm_at - started
                    )
                source = aligner.push(chunk.data)
                track.add(source, chunk.sample_rate, chunk.words)
                samples = resampler.push(source, chunk.sample_rate)
                frames = framer.push(samples)
                progress.frames_rendered += len(frames)  # the clause's length, as known
                async for payload in self._encode(progress, encoder, frames):
                    yield payload
        progress.words = track.finish()
        tail = resampler.flush()
        frames = (framer.push(tail) if tail.size else []) + framer.flush()
        progress.frames_rendered += len(frames)
        async for payload in self._encode(progress, encoder, frames):
            yield payload

    async def _encode(
        self,
        progress: Progress,
        encoder: OpusFrameEncoder | None,
        pcm_frames: list[bytes],
    ) -> AsyncIterator[bytes]:
        """Encode frames, each yielded (to be queued) before the next batch is encoded.

        A 24 kHz hybrid Opus frame costs ≈0.3 ms of CPU at complexity 9: on the loop thread that
        would delay every stream's pacing, so frames are encoded on the encoder pool in batches
        of up to ENCODE_BATCH, one thread hop per batch -- all but the first LOOP_FRAMES of an
        utterance: the first decides first-audio latency, and it and the next two are encoded
        right here (≈1 ms of loop time once per utterance; a hop to a worker thread under load
        took 8-26 ms, bench/load.py overhead probes), so the first hop has 40 ms to return.
        The encoder is this utterance's own and batches are sequential, so it is never used
        from two threads at once.
        """
        if encoder is None:  # PCM out: the frames themselves
            for pcm in pcm_frames:
                yield pcm
            return
        done = 0
        while done < len(pcm_frames):
            if progress.frames_encoded < LOOP_FRAMES:
                # the first alone (queued before the next is encoded), then the rest of them
                encoded = progress.frames_encoded
                room = 1 if encoded == 0 else LOOP_FRAMES - encoded
                batch = pcm_frames[done : done + room]
                payloads = encoder.encode_many(batch)
            else:
                batch = pcm_frames[done : done + ENCODE_BATCH]
                payloads = await self.pool.run(encoder.encode_many, batch)
            done += len(batch)
            for payload in payloads:
                progress.frames_encoded += 1
                yield payload
