"""Speech quality under packet loss: wideband PESQ for six receivers, the delay each adds and
the bytes each costs on the wire.

``python -m bench.pesq_loss`` (``--seconds 20``). About 20 s of the embedded voice (Piper,
synthesized once) is played by a gateway process (``--red-always --red-distance 2``: RFC 2198
RED on every packet to listeners that offer it; ``--red-adaptive`` for the default, RED only
while loss is reported) to listeners whose incoming datagrams pass the in-process, seeded
impairment layer: 0, 5, 10 and 15 % loss, random and bursty (Gilbert-Elliott, mean burst 3
packets). Per condition four listeners run at once with the same impairment and seed:

- listener 1, no NACK, no RED: (a) stock aiortc (its JitterBuffer(16, 4) and PyAV decoder,
  frames played by a real-time device that plays silence while it waits), (b) our receive path
  with PLC only and (c) with FEC + PLC, both fed the very same packets;
- listener 2: (d) our receive path with NACK + FEC + PLC;
- listener 3, offering RED: (e) RED + FEC + PLC, no NACK;
- listener 4, offering RED: (f) RED + NACK + FEC + PLC: everything on.

Each played signal is aligned to the clean decode of the same packets by cross-correlation and
scored with PESQ-WB (P.862.2, 16 kHz via soxr); the 0 % row is each receiver's clean score. The
added playout delay is play time minus the typical earliest arrival of that frame (its media
time plus the 10th percentile of transit). The wire overhead is the RTP bytes (SRTP datagrams,
retransmissions and RED included) the gateway sent each listener, counted before the
impairment, over those of listener 1 (plain Opus). Targets: PESQ >= 4.0 at 5 % and >= 3.5 at
15 % random with NACK; with everything on, within 0.1 of the clean score at 5 % and 15 % random
and 10 % bursty loss. Writes bench/results/pesq_loss.json and prints the tables.

``--offline`` runs the same receive paths on a virtual clock instead (``bench/loss_sim.py``: the
same packets, loss model and seeds, repairs one 2 ms RTT later, no sockets and no scheduling
noise; no stock-aiortc column), written to bench/results/pesq_loss-offline.json.
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
from bench.loss_sim import simulate
from bench.wire_bytes import WireBytes
from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.media.opus_codec import SAMPLE_RATE, EncoderSettings
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.receive_stats import ReceiveStats, TransitTracker
from gateway.rtp.seqnum import Unwrapper
from gateway.testing.impairment import ImpairmentConfig
from gateway.tts.tone import write_wav_mono

RECEIVERS = ("aiortc", "plc", "fec", "nack", "red", "red_nack")
LISTENER_OF = {"aiortc": "plain", "plc": "plain", "fec": "plain", "nack": "nack", "red": "red",
               "red_nack": "red_nack"}
TARGET_ROWS = (("random", 5.0), ("random", 15.0), ("bursty", 10.0))
CLEAN_FLOOR = 4.5  # PESQ-WB of a clean run below this: the run stalled (see verdicts)
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
    return stats_result(path.stats)


def stats_result(s: ReceiveStats) -> dict[str, Any]:
    return {
        "playout_delay": {"mean_ms": _r(s.playout_delay_ms), "p95_ms": _r(s.playout_delay_p95_ms)},
        "lost": s.lost, "recovered_nack": s.recovered_nack, "recovered_red": s.recovered_red,
        "recovered_fec": s.recovered_fec, "concealed": s.concealed, "late": s.late,
        "red_late": s.red_late, "red_packets": s.red_packets, "seqs_nacked": s.seqs_nacked,
        "underrun_periods": s.underrun_periods, "trimmed": s.trimmed,
        "stretched": s.stretched, "dropped": s.dropped, "target_frames": s.target_frames,
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
                          impairment=impairment, aiortc_decoder=True, capture=True, red=False)
    fec = ReceivePath(ReceivePathConfig(nack=False, fec=True, record_s=RECORD_S))
    plain.add_rtp_listener(fec.on_rtp)
    clients = {
        "plain": plain,
        "nack": GatewayClient(url, receive_path=ReceivePathConfig(record_s=RECORD_S),
                              impairment=impairment, red=False),
        "red": GatewayClient(url, receive_path=ReceivePathConfig(nack=False, record_s=RECORD_S),
                             impairment=impairment, red=True),
        "red_nack": GatewayClient(url, receive_path=ReceivePathConfig(record_s=RECORD_S),
                                  impairment=impairment, red=True),
    }
    stock: AiortcListener | None = None
    wire: dict[str, WireBytes] = {}
    try:
        await asyncio.gather(*(c.connect() for c in clients.values()))
        wire = {name: WireBytes(c) for name, c in clients.items()}
        fec.start()
        stock = AiortcListener(plain)
        paths = {name: [c.receive] for name, c in clients.items()}
        paths["plain"].append(fec)
        # (the tail played after the last frame also pushes it out of aiortc's prefetch)
        await asyncio.gather(*(speak_and_play(clients[n], p) for n, p in paths.items()))
    finally:
        if stock is not None:
            await stock.close()
        await fec.close()
        await asyncio.gather(*(c.close() for c in clients.values()))
    assert stock is not None and all(c.receive is not None for c in clients.values())
    stock_audio, stock_delays = aiortc_result(stock, plain)
    path_of = {"plc": plain.receive, "fec": fec, "nack": clients["nack"].receive,
               "red": clients["red"].receive, "red_nack": clients["red_nack"].receive}
    played = {"aiortc": stock_audio, **{n: p.played_pcm() for n, p in path_of.items()}}
    details: dict[str, Any] = {"aiortc": {"playout_delay": delay_summary(stock_delays)}}
    details.update({n: path_result(p) for n, p in path_of.items()})
    scores = await asyncio.gather(
        *(asyncio.to_thread(pesq_wb, ref, played[name]) for name in RECEIVERS)
    )
    measured = [c.impaired_in.stats for c in clients.values() if c.impaired_in is not None]
    base = max(wire["plain"].rtp_in, 1)
    return {
        "pattern": cond.pattern,
        "loss_pct": cond.loss_pct,
        "measured_loss_pct": [round(100 * s.dropped / max(s.offered, 1), 2) for s in measured],
        "pesq": dict(zip(RECEIVERS, scores, strict=True)),
        "receivers": details,
        "wire": {name: w.as_dict() for name, w in wire.items()},
        "overhead": {name: round(wire[LISTENER_OF[name]].rtp_in / base - 1, 3)
                     for name in RECEIVERS},
    }


OFFLINE = {  # receiver -> (its receive path, RED)
    "plc": (ReceivePathConfig(nack=False, fec=False, record_s=RECORD_S), False),
    "fec": (ReceivePathConfig(nack=False, record_s=RECORD_S), False),
    "nack": (ReceivePathConfig(record_s=RECORD_S), False),
    "red": (ReceivePathConfig(nack=False, record_s=RECORD_S), True),
    "red_nack": (ReceivePathConfig(record_s=RECORD_S), True),
}


async def run_offline(
    payloads: list[bytes], cond: Condition, ref: np.ndarray, seed: int, burst: float,
    distance: int,
) -> dict[str, Any]:
    impairment = cond.impairment(seed, burst)
    results = {name: simulate(payloads, config, impairment, red=red, distance=distance)
               for name, (config, red) in OFFLINE.items()}
    scores = await asyncio.gather(
        *(asyncio.to_thread(pesq_wb, ref, r.pcm) for r in results.values())
    )
    base = results["plc"].wire_bytes
    return {
        "pattern": cond.pattern,
        "loss_pct": cond.loss_pct,
        "pesq": {"aiortc": None, **dict(zip(results, scores, strict=True))},
        "receivers": {"aiortc": {"playout_delay": {"mean_ms": None, "p95_ms": None}},
                      **{n: stats_result(r.stats) for n, r in results.items()}},
        "wire": {n: {"rtp_bytes_sent": r.wire_bytes} for n, r in results.items()},
        "overhead": {"aiortc": 0.0,
                     **{n: round(r.wire_bytes / base - 1, 3) for n, r in results.items()}},
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
    print("PESQ-WB (MOS-LQO) against the clean decode; added playout delay mean ms in ()")
    print(f"{'loss':>11} " + " ".join(f"{n:>9}" for n in RECEIVERS))
    for row in rows:
        cells = []
        for name in RECEIVERS:
            score = row["pesq"][name]
            delay = row["receivers"][name]["playout_delay"]["mean_ms"]
            cells.append(f"{'-' if score is None else f'{score:.2f}':>4}({delay or 0:>3.0f})")
        print(f"{_label(row):>11} " + " ".join(f"{c:>9}" for c in cells))
    print("\nwire overhead: RTP bytes sent to the listener over plain Opus's (retransmissions and "
          "RED included), %")
    print(f"{'loss':>11} " + " ".join(f"{n:>9}" for n in RECEIVERS))
    for row in rows:
        print(f"{_label(row):>11} "
              + " ".join(f"{100 * row['overhead'][n]:>+8.0f}%" for n in RECEIVERS))
    print(f"\ntargets: nack >= {targets['at_5']} at 5 %, >= {targets['at_15']} at 15 % (random);"
          f" red_nack within {targets['from_clean']} of its clean score at 5 %, 15 % random and "
          "10 % bursty")


def _label(row: dict[str, Any]) -> str:
    return f"{row['loss_pct']:g}% {row['pattern'][:6]}"


def verdicts(rows: list[dict[str, Any]], targets: dict[str, float]) -> dict[str, bool | None]:
    random_rows = {r["loss_pct"]: r["pesq"]["nack"] for r in rows if r["pattern"] == "random"}
    out: dict[str, bool | None] = {
        "nack_at_5_ok": _at_least(random_rows.get(5.0), targets["at_5"]),
        "nack_at_15_ok": _at_least(random_rows.get(15.0), targets["at_15"]),
    }
    clean = next((r["pesq"]["red_nack"] for r in rows if r["pattern"] == "none"), None)
    # at 0 % every frame plays as sent: a lower score means the run itself stalled (a loaded
    # machine), and nothing can be judged against it
    out["clean_run_disturbed"] = None if clean is None else clean < CLEAN_FLOOR
    if out["clean_run_disturbed"]:
        clean = None
    by = {(r["pattern"], r["loss_pct"]): r["pesq"]["red_nack"] for r in rows}
    for pattern, loss in TARGET_ROWS:
        score = by.get((pattern, loss))
        ok = None if score is None or clean is None else clean - score <= targets["from_clean"]
        out[f"red_nack_{pattern}_{loss:g}_within_clean"] = ok
    return out


async def main(args: argparse.Namespace) -> None:
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    started = time.monotonic()
    speech = synthesize_speech(args.seconds)
    settings = EncoderSettings(bitrate=args.bitrate, expected_loss_percent=args.expected_loss)
    payloads, ref = encode_decode(speech, settings)
    rows: list[dict[str, Any]] = []
    if args.offline:
        for cond in conditions(args.losses, args.patterns):
            row = await run_offline(payloads, cond, ref, args.seed, args.burst, args.red_distance)
            print(f"{cond.pattern:>6} {cond.loss_pct:>4g}%: {row['pesq']}", flush=True)
            rows.append(row)
    else:
        await run_live(args, speech, ref, rows)
    finish(args, speech, settings, rows, started)


async def run_live(args: argparse.Namespace, speech: np.ndarray, ref: np.ndarray,
                   rows: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        write_wav_mono(wav, speech, SAMPLE_RATE)
        extra = ["--bitrate", str(args.bitrate), "--expected-loss", str(args.expected_loss),
                 "--red-distance", str(args.red_distance)]
        if not args.red_adaptive:
            extra.append("--red-always")
        if args.no_phrase_cache:
            extra += ["--phrase-cache-mb", "0"]
        async with gateway_process([f"speech=wav:{wav}"], extra) as url:
            if args.warmup:
                await warm_up(url)
            for cond in conditions(args.losses, args.patterns):
                row = await run_condition(url, cond, ref, args.seed, args.burst)
                print(f"{cond.pattern:>6} {cond.loss_pct:>4g}%: {row['pesq']}", flush=True)
                rows.append(row)


def finish(args: argparse.Namespace, speech: np.ndarray, settings: EncoderSettings,
           rows: list[dict[str, Any]], started: float) -> None:
    targets = {"at_5": 4.0, "at_15": 3.5, "from_clean": 0.1}
    verdict = verdicts(rows, targets)
    name = "pesq_loss-offline" if args.offline else "pesq_loss"
    path = write_results(name, {
        "mode": "offline (virtual clock, bench/loss_sim.py)" if args.offline else "live",
        "speech_s": round(speech.size / SAMPLE_RATE, 2),
        "encoder": dataclasses.asdict(settings),
        "burst_mean_packets": args.burst,
        "red": {"distance": args.red_distance, "adaptive": args.red_adaptive},
        "seed": args.seed,
        "impaired": "datagrams the listener receives (NACKs go out unimpaired)",
        "overhead": "RTP bytes to each listener / to listener 1 (plain Opus) - 1, before loss",
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
    p.add_argument("--red-distance", type=int, default=2, choices=range(1, 5),
                   help="RED: previous frames per packet")
    p.add_argument("--red-adaptive", action="store_true",
                   help="RED only while the listener reports loss (the gateway's default)")
    p.add_argument("--offline", action="store_true",
                   help="virtual clock, no gateway process: the receive paths alone, no noise")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="score the first utterance too (the gateway encodes it live)")
    p.add_argument("--no-phrase-cache", action="store_true",
                   help="make the gateway encode every utterance live")
    return p


if __name__ == "__main__":
    asyncio.run(main(build_parser().parse_args()))
