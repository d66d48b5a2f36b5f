"""``python -m gateway.client --http``: one reply over HTTP, played through the receive path, the
WAV written as it plays, and the same stats as for WebRTC (``http_stream`` does the work)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from gateway.client.first_audio import FirstAudible
from gateway.client.http_stream import FORMATS, PACES, HttpSpeechClient, http_receive_config
from gateway.client.wav_sink import WavSink


def add_http_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("HTTP streaming (instead of WebRTC)")
    group.add_argument("--http", action="store_true",
                       help="play the gateway's HTTP stream through the same receive path")
    group.add_argument("--http-format", choices=FORMATS, default="frames",
                       help="frames: POST /v1/speech/stream (default); ogg: the OpenAI route's "
                            "Ogg Opus, /v1/audio/speech?response_format=opus")
    group.add_argument("--pace", choices=PACES, default="asap",
                       help="asap: frames as fast as produced; live: in real time after a lead")


def _ms(start: float, at: float | None) -> float | None:
    return None if at is None else round((at - start) * 1000, 1)


async def run_http(args: argparse.Namespace, tail_periods: int) -> dict[str, Any]:
    client = HttpSpeechClient(
        args.url, receive_path=http_receive_config(fec=not args.no_fec)
    )
    path = client.receive
    sink = WavSink(args.out)
    heard = FirstAudible()
    path.pcm.on_frame(sink)
    path.pcm.on_frame(heard)
    try:
        result = await asyncio.wait_for(
            client.speak(args.text, args.voice, pace=args.pace, fmt=args.http_format),
            args.timeout,
        )
        if result.last_seq is not None:
            await asyncio.wait_for(path.wait_played(result.last_seq), 10.0)
        await asyncio.wait_for(path.wait_periods(tail_periods), 10.0)
    finally:
        await client.close()
        sink.close()
    audible = heard.frame
    audible_at = None if audible is None or audible.seq is None else result.arrivals.get(
        audible.seq)
    return {
        "transport": "http",
        "format": result.format,
        "pace": result.pace,
        "response_ms": _ms(result.sent_at, result.response_at),
        "first_frame_ms": _ms(result.sent_at, result.first_frame_at),
        "first_audio_ms": _ms(result.sent_at, audible_at),
        "first_played_ms": heard.played_ms(result.sent_at),
        "frames": result.frames,
        "bytes": result.bytes,
        "fed_late": result.fed_late,
        "ended": result.ended,
        "stream_error": result.error,
        "audio_s": round(sink.seconds, 2),
        "wav": args.out,
        "receive": path.stats.as_dict(),
    }
