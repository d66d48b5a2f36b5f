"""``python -m gateway.client --url http://127.0.0.1:8080 --text "Hello" --out reply.wav``

The reply plays through our receive path (adaptive jitter buffer, RED, NACK, Opus FEC/PLC,
real-time playout) and the WAV is what it played, written frame by frame as it plays. ``--loss 5
--jitter 60`` (and the other impairment options, ``--burst 3`` for Gilbert-Elliott bursts)
degrade the datagrams this client receives, in-process and seeded; ``--impair-send`` degrades
what it sends too (NACKs). ``--raw`` decodes the raw capture offline instead; ``--no-red`` does
not offer RFC 2198 RED.

``--mic question.wav`` talks instead (a gateway run with ``--duplex``): the WAV is spoken into
the session's microphone in real time; the final transcript, the reply and the latency split
are printed (``mic_run``).

``--http`` plays the gateway's HTTP stream instead, through the same receive path: the framed
stream (``POST /v1/speech/stream``), or with ``--http-format ogg`` the OpenAI route's Ogg Opus
(``/v1/audio/speech?response_format=opus``); ``--pace asap|live``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from gateway import aiortc_compat
from gateway.client import receive_options
from gateway.client.capture import decode, first_audible
from gateway.client.first_audio import FirstAudible
from gateway.client.http_run import add_http_arguments, run_http
from gateway.client.mic_run import print_report, run_mic
from gateway.client.peer import GatewayClient, GatewayError
from gateway.client.wav_sink import WavSink
from gateway.media.opus_codec import SAMPLE_RATE
from gateway.testing import impairment
from gateway.tts.tone import write_wav_mono

_TAIL_PERIODS = 10  # played after the last frame, so the WAV ends in the silence after it


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gateway.client", description=__doc__)
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the gateway's base URL")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", help="what the gateway should say")
    what.add_argument("--mic", metavar="WAV",
                      help="speak this WAV (any rate/channels) into a --duplex gateway's "
                      "microphone in real time; print the transcript, reply and latency split")
    p.add_argument("--voice", default=None, help="voice name (default: the gateway's)")
    p.add_argument("--out", default="reply.wav", help="WAV file for what was heard (24 kHz)")
    p.add_argument(
        "--ice-hosts", default="127.0.0.1",
        help="comma-separated local addresses for ICE host candidates ('' = all interfaces)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the reply")
    p.add_argument("--json", action="store_true", help="print the stats as JSON")
    p.add_argument("--raw", action="store_true",
                   help="no receive path: decode the raw capture offline (PLC for gaps)")
    receive_options.add_arguments(p)
    p.add_argument("--no-red", action="store_true",
                   help="do not offer RFC 2198 RED (redundant copies of the previous frames)")
    p.add_argument("--impair-send", action="store_true",
                   help="apply the impairment to what this client sends too (seed + 1)")
    add_http_arguments(p)
    impairment.add_arguments(p)
    return p


def _impairments(
    args: argparse.Namespace,
) -> tuple[impairment.ImpairmentConfig | None, impairment.ImpairmentConfig | None]:
    config = impairment.from_namespace(args)
    if config == impairment.ImpairmentConfig(seed=config.seed):
        return None, None
    outgoing = None
    if args.impair_send:
        seed = None if config.seed is None else config.seed + 1
        outgoing = dataclasses.replace(config, seed=seed)
    return config, outgoing


async def _play_out(client: GatewayClient, last_seq: int | None, timeout: float) -> None:
    """Until the utterance's last frame (and a little after it) has had its playout."""
    assert client.receive is not None
    if last_seq is not None:
        await asyncio.wait_for(client.receive.wait_played(last_seq), timeout)
    await asyncio.wait_for(client.receive.wait_periods(_TAIL_PERIODS), timeout)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.mic:
        if args.http or args.raw:
            raise ValueError("--mic talks over WebRTC through the receive path: no --http/--raw")
        return await run_mic(args)
    if args.http:
        return await run_http(args, _TAIL_PERIODS)
    return await run_webrtc(args)


async def run_webrtc(args: argparse.Namespace) -> dict[str, Any]:
    aiortc_compat.restrict_ice_hosts([h for h in args.ice_hosts.split(",") if h])
    incoming, outgoing = _impairments(args)
    receive_path = False if args.raw else receive_options.receive_config(args)
    client = GatewayClient(
        args.url, receive_path=receive_path, impairment=incoming, outgoing_impairment=outgoing,
        capture=True,  # the stats below are about the raw packets too
        red=not args.no_red,
    )
    sink: WavSink | None = None
    heard = FirstAudible()
    if client.receive is not None:
        sink = WavSink(args.out)
        client.receive.pcm.on_frame(sink)
        client.receive.pcm.on_frame(heard)
    try:
        await client.connect()
        heard.since = time.monotonic()
        result = await client.say(args.text, voice=args.voice)
        state = await client.wait_utterance(result.utterance["id"], timeout=args.timeout)
        if client.receive is not None:
            await _play_out(client, state.get("last_seq"), timeout=10.0)
    finally:
        await client.close()
        if sink is not None:
            sink.close()
    capture = client.capture
    packets = capture.ordered()
    stream = decode(packets, client.red_payload_type)
    if sink is None:
        write_wav_mono(args.out, stream.pcm, SAMPLE_RATE)
    audio_s = stream.pcm.size / SAMPLE_RATE if sink is None else sink.seconds
    audible = first_audible([p for p in packets if p.arrival >= result.said_at], stream)
    arrivals = [p.arrival for p in capture.packets]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return {
        "connect_ms": round(client.connect_ms or 0, 1),
        "first_audio_ms": (
            None if audible is None else round((audible.arrival - result.said_at) * 1000, 1)
        ),
        "first_played_ms": heard.played_ms(result.said_at),
        "red": client.red_payload_type is not None,
        "server_overhead_ms": state.get("server_overhead_ms"),
        "server_latency_ms": state.get("latency_ms"),
        "utterance_state": state.get("state"),
        "packets": len(capture.packets),
        "missing": len(capture.missing()),
        "concealed_frames": stream.concealed,
        "interval_median_ms": round(statistics.median(gaps) * 1000, 2) if gaps else None,
        "interval_max_ms": round(max(gaps) * 1000, 2) if gaps else None,
        "audio_s": round(audio_s, 2),
        "wav": args.out,
        **_receive_stats(client),
    }


def _receive_stats(client: GatewayClient) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if client.receive is not None:
        out["receive"] = client.receive.stats.as_dict()
    if client.impaired_in is not None:
        out["impaired_in"] = dataclasses.asdict(client.impaired_in.stats)
    if client.impaired_out:
        out["impaired_out"] = [dataclasses.asdict(i.stats) for i in client.impaired_out]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        stats = asyncio.run(run(args))
    except (GatewayError, ConnectionError, OSError, TimeoutError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats))
    elif args.mic:
        print_report(stats)
    else:
        for key, value in stats.items():
            if isinstance(value, dict):
                print(f"{key}:")
                for k, v in value.items():
                    print(f"{k:>24}: {v}")
            else:
                print(f"{key:>20}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
