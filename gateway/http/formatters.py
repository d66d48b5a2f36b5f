"""What an HTTP stream writes for each frame: one formatter per response kind.

A formatter turns the conversation's frames into the response body's bytes: ``start`` (headers
of the format), ``frame`` per 20 ms frame, ``end`` at the normal end, ``error`` when synthesis
failed mid-stream -- for formats with an error record (``carries_errors``: the frame records,
SSE); the others have no way to say it in the body, so their stream is cut (a chunked body
without its last chunk, which every HTTP client reports as an error).

``needs_pcm`` says whether it takes the 24 kHz PCM frames (transcoded
formats, a tempo change) or the Opus frames the WebRTC path sends (passed through unchanged).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from gateway.http import frame_records, ogg_opus
from gateway.http.openai_speech import SSE_MEDIA_TYPE, sse_audio_delta, sse_audio_done
from gateway.http.transcode import open_pipeline, time_stretch
from gateway.media.framer import Framer
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder


class FrameFormatter:
    media_type = "application/octet-stream"
    needs_pcm = False
    carries_errors = False  # error() writes a record the reader sees (else: the body is cut)

    def start(self) -> bytes:
        return b""

    def frame(self, payload: bytes) -> bytes:
        raise NotImplementedError

    def frames(self, payloads: list[bytes]) -> bytes:
        """Consecutive frames written together (a live write): ``frame`` of each, joined."""
        frame = self.frame
        return b"".join([frame(p) for p in payloads])

    def end(self) -> bytes:
        return b""

    def error(self, code: str, message: str) -> bytes:
        return self.end()

    def bind(self, utterance: Any) -> None:
        """The utterance this stream carries (a format that writes its words needs it)."""


class OggOpus(FrameFormatter):
    """Ogg/Opus pages, one per frame: the very packets the encoder made (no re-encode)."""

    media_type = ogg_opus.MEDIA_TYPE

    def __init__(self) -> None:
        self._writer = ogg_opus.OggOpusWriter()

    def start(self) -> bytes:
        return self._writer.header()

    def frame(self, payload: bytes) -> bytes:
        return self._writer.write(payload)

    def end(self) -> bytes:
        return self._writer.close()


class FrameRecords(FrameFormatter):
    """The gateway's own framed stream (stream/frame_records.py)."""

    media_type = frame_records.MEDIA_TYPE
    carries_errors = True

    def __init__(self, words: bool = False) -> None:
        """``words``: word records too, each before the frame in which its word starts (or as
        soon as its time is known: estimated timings come when a clause has been rendered)."""
        self._encoder = frame_records.FrameRecordEncoder()
        self._words = words
        self._utterance: Any = None
        self._written = 0  # words written
        self._frames = 0  # frames written

    def bind(self, utterance: Any) -> None:
        self._utterance = utterance

    def start(self) -> bytes:
        return self._encoder.header()

    def _due_words(self, frames_after: int) -> bytes:
        if not self._words or self._utterance is None:
            return b""
        words = self._utterance.words
        out = []
        until_ms = frames_after * frame_records.FRAME_MS
        while self._written < len(words) and words[self._written].start_ms < until_ms:
            w = words[self._written]
            out.append(self._encoder.word(w.word, w.start_ms, w.end_ms))
            self._written += 1
        return b"".join(out)

    def frame(self, payload: bytes) -> bytes:
        return self.frames([payload])

    def frames(self, payloads: list[bytes]) -> bytes:
        if not self._words:
            return self._encoder.frames(payloads)
        out = []
        for payload in payloads:
            out.append(self._due_words(self._frames + 1))
            out.append(self._encoder.frame(payload))
            self._frames += 1
        return b"".join(out)

    def end(self) -> bytes:
        return self._due_words(1 << 40) + self._encoder.end()  # the rest, then the end

    def error(self, code: str, message: str) -> bytes:
        return self._encoder.error(code, message)


class Transcoded(FrameFormatter):
    """pcm, wav, mp3, flac, aac from the 24 kHz PCM frames, at ``speed``."""

    needs_pcm = True

    def __init__(self, fmt: str, media_type: str, speed: float = 1.0) -> None:
        self.media_type = media_type
        self._pipeline = open_pipeline(fmt, speed)

    def start(self) -> bytes:
        return self._pipeline.write(b"")

    def frame(self, payload: bytes) -> bytes:
        return self._pipeline.write(payload)

    def end(self) -> bytes:
        return self._pipeline.flush()


class StretchedOggOpus(FrameFormatter):
    """Ogg/Opus at another tempo: the PCM is time-stretched, then encoded (once) again."""

    media_type = ogg_opus.MEDIA_TYPE
    needs_pcm = True

    def __init__(self, speed: float, settings: EncoderSettings) -> None:
        self._stretch = time_stretch(speed)
        self._framer = Framer(FRAME_SAMPLES)
        self._encoder = OpusFrameEncoder(settings)
        self._ogg = ogg_opus.OggOpusWriter()

    def start(self) -> bytes:
        return self._ogg.header()

    def _pages(self, pcm: bytes, last: bool = False) -> bytes:
        frames = self._framer.push(np.frombuffer(pcm, dtype="<i2")) if pcm else []
        if last:
            frames += self._framer.flush()
        return b"".join(self._ogg.write(self._encoder.encode(f)) for f in frames)

    def frame(self, payload: bytes) -> bytes:
        return self._pages(self._stretch.write(payload))

    def end(self) -> bytes:
        return self._pages(self._stretch.flush(), last=True) + self._ogg.close()


class ServerSentEvents(FrameFormatter):
    """OpenAI's ``stream_format=sse``: the inner format's bytes as base64 delta events, then a
    done event with the usage; an error event if synthesis fails."""

    media_type = SSE_MEDIA_TYPE
    carries_errors = True

    def __init__(self, inner: FrameFormatter, input_tokens: int) -> None:
        self.inner = inner
        self.needs_pcm = inner.needs_pcm
        self._input_tokens = input_tokens
        self._frames = 0

    @staticmethod
    def _delta(data: bytes) -> bytes:
        return sse_audio_delta(data) if data else b""

    def start(self) -> bytes:
        return self._delta(self.inner.start())

    def frame(self, payload: bytes) -> bytes:
        self._frames += 1
        return self._delta(self.inner.frame(payload))

    def end(self) -> bytes:
        return self._delta(self.inner.end()) + sse_audio_done(self._input_tokens, self._frames)

    def error(self, code: str, message: str) -> bytes:
        event = {"type": "error", "error": {"code": code, "message": message}}
        return self._delta(self.inner.end()) + b"data: " + json.dumps(event).encode() + b"\n\n"
