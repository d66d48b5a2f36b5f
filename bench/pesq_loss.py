"""Speech quality under packet loss: wideband PESQ for four receivers, and the delay each adds.

``python -m bench.pesq_loss`` (``--seconds 20``). About 20 s of the embedded voice (Piper,
synthesized once) is played by a gateway process to listeners whose incoming datagrams pass the
in-process, seeded impairment layer: 0, 5, 10 and 15 % loss, random and bursty (Gilbert-Elliott,
mean burst 3 packets). Per condition two listeners run at once with the same impairment and seed:

- listener 1, no NACK: (a) stock aiortc (its JitterBuffer(16, 4) and PyAV decoder, frames
  played by a real-time device that plays silence while it waits), (b) our receive path with
  PLC only and (c) with FEC + PLC, both fed the very same packets;
- listener 2: (d) our receive path with NACK + FEC + PLC.

Each played signal is aligned to the clean decode of the same packets by cross-correlation and
scored with PESQ-WB (P.862.2, 16 kHz via soxr). The added playout delay is play time minus the
typical earliest arrival of that frame (its media time plus the 10th percentile of transit).
Targets (issue 3): PESQ >= 4.0 at 5 % and >= 3.5 at 15 % with everything on.
Writes bench/results/pesq_loss.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from bench.audio_score import (
    encode_decode,
    pesq_wb,
    playout,
    playout_ticks,
    synthesize_speech,
)
from bench.common import gateway_process, write_results
from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.media.opus_codec import SAMPLE_RATE, EncoderSettings
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.receive_stats import TransitTracker
from gateway.rtp.seqnum import Unwrapper
from gateway.testing.impairment import ImpairmentConfig
from gateway.tts.tone import write_wav_mono

RECEIVERS = ("aiortc", "plc", "fec", "nack")
TAIL_PERIODS = 15
RECORD_S = 300.0  # what each receive path played is scored: keep it (recording is opt-in)


@dataclasses.dataclass
class Condition:
    pattern: str  # "none", "random" or "bursty"
    loss_pct: float

    def impairment(self, seed: int, burst: float) -> ImpairmentConfig | None:
        if self.loss_pct == 0:
            return None
        return ImpairmentConfig(
            loss_pct=self.loss_pct, burst=burst if self.pattern == "bursty" else 0.0, seed=seed
        )


class AiortcListener:
    """Reads aiortc's own decoded frames (48 kHz stereo) with the time each became available."""

    def __init__(self, client: GatewayClient) -> None:
        self.frames: list[tuple[float, int, np.ndarray]] = []
        self._task = asyncio.create_task(self._read(client.transceiver.receiver.track))

    async def _read(self, track: Any) -> None:
        with contextlib.suppress(Exception):  # MediaStreamError when the track ends
            while True:
                frame = await track.recv()
                pcm = frame.to_ndarray().reshape(-1, 2).mean(axis=1).astype(np.int16)
                self.frames.append((time.monotonic(), int(frame.pts), pcm))

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def aiortc_result(listener: AiortcListener, client: GatewayClient) -> tuple[np.ndarray, list]:
    """Played audio at 24 kHz and the added delay (s) of each frame, for stock aiortc.

    PyAV numbers aiortc's decoded frames from 0 at the first packet aiortc took (the first one
    received), so a frame's RTP timestamp is that packet's plus its pts.
    """
    frames = [(t, pcm) for t, _, pcm in listener.frames]
    audio48 = playout(frames)
    audio = np.clip(soxr.resample(audio48, 48_000, SAMPLE_RATE), -32768, 32767).astype(np.int16)
    packets = client.capture.packets
    if not packets or not frames:
        return audio, []
    ts = Unwrapper(32)
    transits = TransitTracker(window=len(packets))
    for p in packets:
        transits.add(p.arrival - ts.unwrap(p.timestamp) / 48_000)
    base = transits.minimum
    assert base is not None
    origin = Unwrapper(32).unwrap(packets[0].timestamp)
    ticks = playout_ticks(frames)
    delays = [tick - ((origin + pts) / 48_000 + base)
              for tick, (_, pts, _) in zip(ticks, listener.frames, strict=True)]
    return audio, delays


def delay_summary(delays: list[float]) -> dict[str, float | None]:
    if not delays:
        return {"mean_ms": None, "p95_ms": None}
    ordered = sorted(delays)
    return {
        "mean_ms": round(1000 * statistics.fmean(delays), 1),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
    }


def path_result(path: ReceivePath) -> dict[str, Any]:
    s = path.stats
    return {
        "playout_delay": {"mean_ms": _r(s.playout_delay_ms), "p95_ms": _r(s.playout_delay_p95_ms)},
        "lost": s.lost, "recovered_nack": s.recovered_nack, "recovered_fec": s.recovered_fec,
        "concealed": s.concealed, "late": s.late, "underrun_periods": s.underrun_periods,
        "trimmed": s.trimmed, "dropped": s.dropped, "target_frames": s.target_frames,
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


async def speak_and_play(client: GatewayClient, paths: list[ReceivePath]) -> dict[str, Any]:
    result = await client.say("speech", voice="speech")
    state = await client.wait_utterance(result.utterance["id"], timeout=120)
    for path in paths:
        await asyncio.wait_for(path.wait_played(state["last_seq"]), 10)
        await asyncio.wait_for(path.wait_periods(TAIL_PERIODS), 10)
    return state


async def run_condition(
    url: str, cond: Condition, ref: np.ndarray, seed: int, burst: float
) -> dict[str, Any]:
    impairment = cond.impairment(seed, burst)
    plain = GatewayClient(url, receive_path=ReceivePathConfig(nack=False, fec=False,
                                                              record_s=RECORD_S),
                          impairment=impairment, aiortc_decoder=True, capture=True)
    fec = ReceivePath(ReceivePathConfig(nack=False, fec=True, record_s=RECORD_S))
    plain.add_rtp_listener(fec.on_rtp)
    full = GatewayClient(url, receive_path=ReceivePathConfig(record_s=RECORD_S),
                         impairment=impairment)
    stock: AiortcListener | None = None
    try:
        await asyncio.gather(plain.connect(), full.connect())
        fec.start()
        stock = AiortcListener(plain)
        assert plain.receive is not None and full.receive is not None
        # (the tail played after the last frame also pushes it out of aiortc's prefetch)
        await asyncio.gather(
            speak_and_play(plain, [plain.receive, fec]), speak_and_play(full, [full.receive])
        )
    finally:
        if stock is not None:
            await stock.close()
        await fec.close()
        await asyncio.gather(plain.close(), full.close())
    assert plain.receive is not None and full.receive is not None and stock is not None
    stock_audio, stock_delays = aiortc_result(stock, plain)
    played = {
        "aiortc": stock_audio,
        "plc": plain.receive.played_pcm(),
        "fec": fec.played_pcm(),
        "nack": full.receive.played_pcm(),
    }
    details = {
        "aiortc": {"playout_delay": delay_summary(stock_delays)},
        "plc": path_result(plain.receive),
        "fec": path_result(fec),
        "nack": path_result(full.receive),
    }
    scores = await asyncio.gather(
        *(asyncio.to_thread(pesq_wb, ref, played[name]) for name in RECEIVERS)
    )
    measured = [c.impaired_in.stats for c in (plain, full) if c.impaired_in is not None]
    return {
        "pattern": cond.pattern,
        "loss_pct": cond.loss_pct,
        "measured_loss_pct": [round(100 * s.dropped / max(s.offered, 1), 2) for s in measured],
        "pesq": dict(zip(RECEIVERS, scores, strict=True)),
        "receivers": details,
    }


async def warm_up(url: str) -> None:
    """One unscored utterance: the gateway's first-time paths run, and its phrase cache then
    replays the (identical) packets for every condition instead of encoding them again."""
    client = GatewayClient(url, receive_path=True)
    try:
        await client.connect()
        assert client.receive is not None
        await speak_and_play(client, [client.receive])
    finally:
        await client.close()


def conditions(losses: list[float], patterns: list[str]) -> list[Condition]:
    out = [Condition("none", 0.0)] if 0 in losses else []
    out += [Condition(p, loss) for p in patterns for loss in losses if loss > 0]
    return out


def print_table(rows: list[dict[str, Any]], targets: dict[str, float]) -> None:
    head = f"{'loss':>11} " + " ".join(f"{n:>8}" for n in RECEIVERS)
    print("PESQ-WB (MOS-LQO) against the clean decode; added playout delay mean ms in ()")
    print(head)
    for row in rows:
        label = f"{row['loss_pct']:g}% {row['pattern'][:6]}"
        cells = []
        for name in RECEIVERS:
            score = row["pesq"][name]
            delay = row["receivers"][name]["playout_delay"]["mean_ms"]
            cells.append(f"{'-' if score is None else f'{score:.2f}':>4}({delay or 0:>3.0f})")
        print(f"{label:>11} " + " ".join(f"{c:>8}" for c in cells))
    print(f"targets with everything on (nack): >= {targets['at_5']} at 5 %, "
          f">= {targets['at_15']} at 15 % (random loss)")


async def main(args: argparse.Namespace) -> None:
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    started = time.monotonic()
    speech = synthesize_speech(args.seconds)
    settings = EncoderSettings(bitrate=args.bitrate, expected_loss_percent=args.expected_loss)
    _, ref = encode_decode(speech, settings)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        write_wav_mono(wav, speech, SAMPLE_RATE)
        extra = ["--bitrate", str(args.bitrate), "--expected-loss", str(args.expected_loss)]
        if args.no_phrase_cache:
            extra += ["--phrase-cache-mb", "0"]
        async with gateway_process([f"speech=wav:{wav}"], extra) as url:
            if args.warmup:
                await warm_up(url)
            for cond in conditions(args.losses, args.patterns):
                row = await run_condition(url, cond, ref, args.seed, args.burst)
                print(f"{cond.pattern:>6} {cond.loss_pct:>4g}%: {row['pesq']}", flush=True)
                rows.append(row)
    targets = {"at_5": 4.0, "at_15": 3.5}
    random_rows = {r["loss_pct"]: r["pesq"]["nack"] for r in rows if r["pattern"] == "random"}
    verdict = {
        "nack_at_5_ok": _at_least(random_rows.get(5.0), targets["at_5"]),
        "nack_at_15_ok": _at_least(random_rows.get(15.0), targets["at_15"]),
    }
    path = write_results("pesq_loss", {
        "speech_s": round(speech.size / SAMPLE_RATE, 2),
        "encoder": dataclasses.asdict(settings),
        "burst_mean_packets": args.burst,
        "seed": args.seed,
        "impaired": "datagrams the listener receives (NACKs go out unimpaired)",
        "warmup": args.warmup,
        "phrase_cache": not args.no_phrase_cache,
        "rows": rows,
        "targets": targets,
        "verdict": verdict,
        "runtime_s": round(time.monotonic() - started, 1),
    })
    print_table(rows, targets)
    print(f"verdict: {verdict}")
    print(f"written {path}")


def _at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.pesq_loss", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0, help="speech per condition")
    p.add_argument("--losses", type=_floats, default=[0.0, 5.0, 10.0, 15.0],
                   help="comma-separated loss percentages")
    p.add_argument("--patterns", type=lambda t: t.split(","), default=["random", "bursty"])
    p.add_argument("--burst", type=float, default=3.0, help="mean burst length (bursty)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bitrate", type=int, default=32_000)
    p.add_argument("--expected-loss", type=int, default=10)
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="score the first utterance too (the gateway encodes it live)")
    p.add_argument("--no-phrase-cache", action="store_true",
                   help="make the gateway encode every utterance live")
    return p


if __name__ == "__main__":
    asyncio.run(main(build_parser().parse_args()))
