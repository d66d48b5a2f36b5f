"""The HTTP streaming baseline: the field report's design, Starlette on uvicorn.

Each request gets an ``asyncio.Queue(50)`` that a producer task fills with the SAME
pre-encoded 20 ms Opus frames the gateway serves (read from the gateway's persisted phrase
cache, ``--phrase-dir``, or encoded once at start-up with the gateway's own
``OpusFrameEncoder`` from a 440 Hz tone, ``--tone-s``), as fast as the queue takes them (a TTS
faster than real time; the bound is the backpressure). The response is a Starlette
``StreamingResponse`` whose async generator takes each frame from the queue, sleeps
(``asyncio.sleep``) until it is due and yields it as one body chunk. ``pace=live``: frame i is
due ``i * 20 ms - lead`` after the first (the gateway's live schedule, same lead); ``asap``:
no sleeping. Byte for byte the gateway's response formats:

- ``POST /v1/speech/stream`` ``{text, voice?, pace?}``: the framed stream
  (gateway/http/frame_records.py), header, one frame record per chunk, end record;
- ``POST /v1/audio/speech`` ``{input, response_format: "opus", pace?}``: Ogg/Opus
  (gateway/http/ogg_opus.py), the two header pages, one page per frame, the EOS page;
- ``GET /healthz``.

uvicorn runs with its defaults for loop and parser (``auto``: uvloop and httptools when
installed, as ``uvicorn[standard]`` does), access log off, one worker.

    python -m bench.http_baseline_server --port 8090 --phrase-dir DIR [--lead-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.http.frame_records import MEDIA_TYPE as FRAMES_MEDIA_TYPE
from gateway.http.frame_records import FrameRecordEncoder
from gateway.http.ogg_opus import MEDIA_TYPE as OGG_MEDIA_TYPE
from gateway.http.ogg_opus import OggOpusWriter
from gateway.media.opus_codec import FRAME_MS, FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.speech.phrase_store import SUFFIX, decode_entry
from gateway.tts.tone import ToneSynthesizer

FRAME_S = FRAME_MS / 1000
QUEUE_FRAMES = 50
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
log = logging.getLogger("http_baseline")


def frames_from_phrase_dir(directory: Path) -> tuple[bytes, ...]:
    """The longest phrase in a gateway phrase cache directory, as its Opus packets."""
    best: tuple[bytes, ...] = ()
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        _key, phrase = decode_entry(path.read_bytes())
        if len(phrase.frames) > len(best):
            best = phrase.frames
    if not best:
        raise SystemExit(f"no phrase cache entry in {directory}")
    return best


def frames_from_tone(seconds: float, settings: EncoderSettings) -> tuple[bytes, ...]:
    """A 440 Hz tone encoded once, as the gateway encodes: 24 kHz mono, 20 ms frames."""
    tone = ToneSynthesizer(seconds=seconds)
    pcm = tone.pcm()
    pcm = np.concatenate([pcm, np.zeros(-len(pcm) % FRAME_SAMPLES, dtype="<i2")])
    encoder = OpusFrameEncoder(settings)
    return tuple(encoder.encode(f.tobytes()) for f in pcm.reshape(-1, FRAME_SAMPLES))


class Formatter:
    """start / frame / end bytes of one response, in one of the gateway's two Opus formats."""

    def __init__(self, kind: str) -> None:
        if kind == "frames":
            records = FrameRecordEncoder()
            self.start: Callable[[], bytes] = records.header
            self.frame: Callable[[bytes], bytes] = records.frame
            self.end: Callable[[], bytes] = records.end
            self.media_type = FRAMES_MEDIA_TYPE
        else:
            ogg = OggOpusWriter()
            self.start, self.frame, self.end = ogg.header, ogg.write, ogg.close
            self.media_type = OGG_MEDIA_TYPE


def make_app(frames: tuple[bytes, ...], lead_s: float) -> Starlette:
    def stream(kind: str, pace: str) -> StreamingResponse:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_FRAMES)

        async def produce() -> None:
            for payload in frames:
                await queue.put(payload)
            await queue.put(None)

        producer = asyncio.create_task(produce())
        fmt = Formatter(kind)

        async def body() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            try:
                yield fmt.start()
                first: float | None = None
                index = 0
                while (payload := await queue.get()) is not None:
                    now = loop.time()
                    if first is None:
                        first = now
                    elif pace == "live":
                        due = first + index * FRAME_S - lead_s
                        if due > now:
                            await asyncio.sleep(due - now)
                    yield fmt.frame(payload)
                    index += 1
                yield fmt.end()
            finally:
                producer.cancel()

        return StreamingResponse(body(), media_type=fmt.media_type, headers=HEADERS)

    async def frame_stream(request: Request) -> Response:
        data = await request.json()
        return stream("frames", data.get("pace", "asap"))

    async def openai_speech(request: Request) -> Response:
        data = await request.json()
        if data.get("response_format", "opus") != "opus":
            return JSONResponse({"error": {"code": "unsupported_response_format"}}, 400)
        return stream("ogg", data.get("pace", "asap"))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "frames": len(frames)})

    return Starlette(routes=[
        Route("/v1/speech/stream", frame_stream, methods=["POST"]),
        Route("/v1/audio/speech", openai_speech, methods=["POST"]),
        Route("/healthz", healthz),
    ])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--phrase-dir", type=Path, help="a gateway --phrase-cache-dir")
    source.add_argument("--tone-s", type=float, help="encode a 440 Hz tone this long")
    p.add_argument("--lead-ms", type=float, default=200.0)
    p.add_argument("--bitrate", type=int, default=32_000)
    args = p.parse_args(argv)
    settings = EncoderSettings(bitrate=args.bitrate)
    frames = (frames_from_phrase_dir(args.phrase_dir) if args.phrase_dir
              else frames_from_tone(args.tone_s, settings))
    import importlib.util

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    print(f"baseline: {len(frames)} frames, uvicorn {uvicorn.__version__} ({loop}, {http})",
          flush=True)
    uvicorn.run(make_app(frames, args.lead_ms / 1000), host=args.host, port=args.port,
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
