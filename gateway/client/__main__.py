"""``python -m gateway.client --url http://127.0.0.1:8080 --text "Hello" --out reply.wav``"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from gateway import aiortc_compat
from gateway.client.capture import decode, first_audible
from gateway.client.peer import GatewayClient, GatewayError
from gateway.media.opus_codec import SAMPLE_RATE
from gateway.tts.tone import write_wav_mono


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gateway.client", description=__doc__)
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the gateway's base URL")
    p.add_argument("--text", required=True, help="what the gateway should say")
    p.add_argument("--voice", default=None, help="voice name (default: the gateway's)")
    p.add_argument("--out", default="reply.wav", help="WAV file for what was heard (24 kHz)")
    p.add_argument(
        "--ice-hosts", default="127.0.0.1",
        help="comma-separated local addresses for ICE host candidates ('' = all interfaces)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the reply")
    p.add_argument("--json", action="store_true", help="print the stats as JSON")
    return p


async def run(args: argparse.Namespace) -> dict[str, Any]:
    aiortc_compat.restrict_ice_hosts([h for h in args.ice_hosts.split(",") if h])
    client = GatewayClient(args.url)
    try:
        await client.connect()
        result = await client.say(args.text, voice=args.voice)
        state = await client.wait_utterance(result.utterance["id"], timeout=args.timeout)
    finally:
        await client.close()
    capture = client.capture
    packets = capture.ordered()
    stream = decode(packets)
    write_wav_mono(args.out, stream.pcm, SAMPLE_RATE)
    audible = first_audible([p for p in packets if p.arrival >= result.said_at], stream)
    arrivals = [p.arrival for p in capture.packets]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return {
        "connect_ms": round(client.connect_ms or 0, 1),
        "first_audio_ms": (
            None if audible is None else round((audible.arrival - result.said_at) * 1000, 1)
        ),
        "server_overhead_ms": state.get("server_overhead_ms"),
        "server_latency_ms": state.get("latency_ms"),
        "utterance_state": state.get("state"),
        "packets": len(capture.packets),
        "missing": len(capture.missing()),
        "concealed_frames": stream.concealed,
        "interval_median_ms": round(statistics.median(gaps) * 1000, 2) if gaps else None,
        "interval_max_ms": round(max(gaps) * 1000, 2) if gaps else None,
        "audio_s": round(stream.pcm.size / SAMPLE_RATE, 2),
        "wav": args.out,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        stats = asyncio.run(run(args))
    except (GatewayError, ConnectionError, OSError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats))
    else:
        for key, value in stats.items():
            print(f"{key:>20}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
