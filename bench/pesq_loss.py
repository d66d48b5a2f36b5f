"""Speech quality under packet loss: wideband PESQ for each receiver, the frames it could not
play in time, the delay it adds and the bytes it costs on the wire.

``python -m bench.pesq_loss --offline`` (the receive paths on a virtual clock,
``bench/loss_sim.py``: no sockets, no scheduling noise; seeds 1-5 by default) or live
(``python -m bench.pesq_loss``: a gateway process, seed 1). About 20 s of the embedded voice
(Piper, deterministic, whole sentences and half a second of silence) is played to receivers
whose incoming datagrams pass the seeded impairment model: 0, 5, 10 and 15 % loss, random and
bursty (Gilbert-Elliott, mean burst ``--burst`` 3). Receivers (``--modes``):

- ``aiortc`` (live only): stock aiortc, its JitterBuffer(16, 4) and PyAV decoder, frames played
  by a real-time device that plays silence while it waits;
- ``plc``: our receive path, PLC only; ``fec``: + Opus in-band FEC (LBRR of the next packet);
- ``nack``: + NACK (RTT-aware retries; the jitter buffer holds what the loss bursts' repairs
  need: ``gateway/receive/burst_depth.py``);
- ``red``: RFC 2198 RED (distance ``--red-distance``) + FEC, no NACK;
- ``red_nack``: everything on (RED + NACK + FEC + PLC, and the receive path's opt-in start
  hold: ``burst_start_frames`` 12 for the first ``burst_start_hold_s`` 10 s, until the link has
  shown its bursts): the target's mode;
- offline only: ``red_nack_learn`` (the same without the start hold: the burst floor learnt
  from the bursts alone, the receive path's default), ``red_nack_static`` (without the burst
  floor either) and ``red_nack_d4`` / ``red_nack_d8`` (``red_nack`` with the sender raising
  RED's distance up to 4 / 8 while NACKs show longer bursts: ``--red-max-distance``).

Live, four listeners run at once per condition (plain: aiortc, plc and fec on the very same
packets; nack; red; red_nack), the gateway sending RED on every packet (``--no-red-adaptive``; with
``--red-adaptive``, the default: only while loss is reported). Offline, a NACK reaches the
sender half an RTT (``--rtt-ms``, 2) later and a repair arrives the other half after that; the
link is one channel in time (a retransmission sent in a burst is lost too).

Each played signal is aligned to the clean decode of the same packets by cross-correlation and
scored with PESQ-WB (P.862.2, 16 kHz via soxr) as one file (``pesq``: the target's score, which
charges every change of delay, even in a pause between sentences) and per utterance (``utt``:
each utterance aligned on its own, so delay changes in the pauses cost nothing and what is
heard in each utterance is what counts). ``concealed`` is the frames not played from their own
data in time: PLC'd (lost, or a concealment packet) plus playout periods of stalls (waiting for
a late repair). The added delay is play time minus the earliest arrival of that frame (media
time plus the 10th percentile of transit), mean over the run. The wire overhead is the RTP
bytes (RED and retransmissions included) sent to the receiver over plain Opus's (``plc``).
Targets: PESQ >= 4.0 at 5 % and >= 3.5 at 15 % random with NACK; with everything on, within
0.1 of its clean score at 5 % and 15 % random and 10 % bursty loss (judged on the mean over the
seeds). Writes bench/results/pesq_loss.json (pesq_loss-offline.json) and prints the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from bench.audio_score import (
    encode_decode,
    pesq_wb,
    pesq_wb_utterances,
    playout,
    playout_ticks,
    synthesize_speech,
)
from bench.common import gateway_process, write_results
from bench.loss_sim import RTP_OVERHEAD, simulate
from bench.wire_bytes import WireBytes
from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.media.opus_codec import SAMPLE_RATE, EncoderSettings
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.receive_stats import ReceiveStats, TransitTracker
from gateway.rtp.seqnum import Unwrapper
from gateway.testing.impairment import ImpairmentConfig
from gateway.tts.tone import write_wav_mono

LIVE_MODES = ("aiortc", "plc", "fec", "nack", "red", "red_nack")
LISTENER_OF = {"aiortc": "plain", "plc": "plain", "fec": "plain", "nack": "nack", "red": "red",
               "red_nack": "red_nack"}
TARGET_MODE = "red_nack"
TARGET_ROWS = (("random", 5.0), ("random", 15.0), ("bursty", 10.0))
CLEAN_FLOOR = 4.5  # PESQ-WB of a clean run below this: the run stalled (see verdicts)
TAIL_PERIODS = 15
RECORD_S = 300.0  # what each receive path played is scored: keep it (recording is opt-in)


@dataclasses.dataclass(frozen=True)
class Mode:
    """An offline receiver: its receive path, and what the sender does for it."""

    config: ReceivePathConfig
    red: bool = False
    max_distance: int | None = None  # RED's distance raised up to this on NACKed bursts


# everything on: the receive path also holds the burst floor's top from the start, until the
# link has shown its bursts (opt-in: a clean link pays it for those 10 s, time to first audio too)
TARGET_RECEIVE = ReceivePathConfig(record_s=RECORD_S, burst_start_frames=12,
                                   burst_start_hold_s=10.0)
OFFLINE = {
    "plc": Mode(ReceivePathConfig(nack=False, fec=False, record_s=RECORD_S)),
    "fec": Mode(ReceivePathConfig(nack=False, record_s=RECORD_S)),
    "nack": Mode(ReceivePathConfig(record_s=RECORD_S)),
    "red": Mode(ReceivePathConfig(nack=False, record_s=RECORD_S), red=True),
    "red_nack": Mode(TARGET_RECEIVE, red=True),
    "red_nack_learn": Mode(ReceivePathConfig(record_s=RECORD_S), red=True),
    "red_nack_static": Mode(ReceivePathConfig(record_s=RECORD_S, burst_depth=False), red=True),
    "red_nack_d4": Mode(TARGET_RECEIVE, red=True, max_distance=4),
    "red_nack_d8": Mode(TARGET_RECEIVE, red=True, max_distance=8),
}


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

    @property
    def label(self) -> str:
        return f"{self.loss_pct:g}% {self.pattern[:6]}"


# -- what each receiver did ----------------------------------------------------------------


def stats_result(s: ReceiveStats) -> dict[str, Any]:
    return {
        "playout_delay": {"mean_ms": _r(s.playout_delay_ms), "p95_ms": _r(s.playout_delay_p95_ms)},
        "concealed_frames": s.concealed + s.stalled_periods,
        "lost": s.lost, "recovered_nack": s.recovered_nack, "recovered_red": s.recovered_red,
        "recovered_fec": s.recovered_fec, "concealed": s.concealed,
        "stalled_periods": s.stalled_periods, "late": s.late, "red_late": s.red_late,
        "red_packets": s.red_packets, "seqs_nacked": s.seqs_nacked, "trimmed": s.trimmed,
        "stretched": s.stretched, "dropped": s.dropped, "target_frames": s.target_frames,
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def score(ref: np.ndarray, played: np.ndarray) -> dict[str, float | None]:
    return {"pesq": pesq_wb(ref, played), "utt": pesq_wb_utterances(ref, played)}


# -- live ----------------------------------------------------------------------------------


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


async def speak_and_play(client: GatewayClient, paths: list[ReceivePath]) -> dict[str, Any]:
    result = await client.say("speech", voice="speech")
    state = await client.wait_utterance(result.utterance["id"], timeout=120)
    for path in paths:
        await asyncio.wait_for(path.wait_played(state["last_seq"]), 10)
        await asyncio.wait_for(path.wait_periods(TAIL_PERIODS), 10)
    return state


async def run_live_condition(
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
        "red_nack": GatewayClient(url, receive_path=TARGET_RECEIVE, impairment=impairment,
                                  red=True),
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
    details: dict[str, Any] = {"aiortc": {"playout_delay": delay_summary(stock_delays),
                                          "concealed_frames": None}}
    details.update({n: stats_result(p.stats) for n, p in path_of.items()})
    scores = await asyncio.gather(
        *(asyncio.to_thread(score, ref, played[name]) for name in LIVE_MODES)
    )
    measured = [c.impaired_in.stats for c in clients.values() if c.impaired_in is not None]
    base = max(wire["plain"].rtp_in, 1)
    return {
        "measured_loss_pct": [round(100 * s.dropped / max(s.offered, 1), 2) for s in measured],
        "modes": {
            name: {**sc, **details[name],
                   "overhead": round(wire[LISTENER_OF[name]].rtp_in / base - 1, 3)}
            for name, sc in zip(LIVE_MODES, scores, strict=True)
        },
        "wire": {name: w.as_dict() for name, w in wire.items()},
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


async def run_live(args: argparse.Namespace, speech: np.ndarray, ref: np.ndarray,
                   conds: list[Condition]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        write_wav_mono(wav, speech, SAMPLE_RATE)
        extra = ["--bitrate", str(args.bitrate), "--expected-loss", str(args.expected_loss),
                 "--red-distance", str(args.red_distance),
                 "--red-max-distance", str(args.red_max_distance)]
        if not args.red_adaptive:
            extra.append("--no-red-adaptive")
        if args.no_phrase_cache:
            extra += ["--phrase-cache-mb", "0"]
        async with gateway_process([f"speech=wav:{wav}"], extra) as url:
            if args.warmup:
                await warm_up(url)
            for cond in conds:
                runs = []
                for seed in args.seeds if cond.loss_pct else args.seeds[:1]:
                    run = await run_live_condition(url, cond, ref, seed, args.burst)
                    runs.append({"seed": seed, **run})
                    print(f"{cond.label:>11} seed {seed}: " + _brief(run["modes"]), flush=True)
                rows.append(aggregate(cond, runs, LIVE_MODES))
    return rows


# -- offline -------------------------------------------------------------------------------


def _offline_job(job: tuple[list[bytes], np.ndarray, str, Condition, int, float, int, float]
                 ) -> dict[str, Any]:
    payloads, ref, name, cond, seed, burst, distance, rtt_s = job
    mode = OFFLINE[name]
    result = simulate(payloads, mode.config, cond.impairment(seed, burst), red=mode.red,
                      distance=distance, max_distance=mode.max_distance, rtt_s=rtt_s)
    return {**score(ref, result.pcm), **stats_result(result.stats),
            "wire_bytes": result.wire_bytes, "repairs_lost": result.retransmissions_lost,
            "red_distance_max": result.red_distance_max}


def run_offline(args: argparse.Namespace, payloads: list[bytes], ref: np.ndarray,
                conds: list[Condition]) -> list[dict[str, Any]]:
    modes = [m for m in args.modes if m in OFFLINE]
    base = sum(len(p) + RTP_OVERHEAD for p in payloads)  # plain Opus, every packet once
    jobs = []
    for cond in conds:
        for seed in args.seeds if cond.loss_pct else args.seeds[:1]:
            jobs += [(payloads, ref, name, cond, seed, args.burst, args.red_distance,
                      args.rtt_ms / 1000) for name in modes]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_offline_job, jobs))
    rows = []
    it = iter(results)
    for cond in conds:
        runs = []
        for seed in args.seeds if cond.loss_pct else args.seeds[:1]:
            per_mode = {name: next(it) for name in modes}
            for r in per_mode.values():
                r["overhead"] = round(r["wire_bytes"] / base - 1, 3)
            runs.append({"seed": seed, "modes": per_mode})
            print(f"{cond.label:>11} seed {seed}: " + _brief(per_mode), flush=True)
        rows.append(aggregate(cond, runs, tuple(modes)))
    return rows


# -- tables and verdicts -------------------------------------------------------------------


def _brief(modes: dict[str, Any]) -> str:
    return " ".join(f"{n}={m['pesq']}" for n, m in modes.items())


def _mean(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.fmean(vals), 3) if vals else None


def aggregate(cond: Condition, runs: list[dict[str, Any]], modes: tuple[str, ...]
              ) -> dict[str, Any]:
    """One row: the mean over the seeds of each mode's figures (and the runs themselves)."""
    summary = {}
    for name in modes:
        each = [run["modes"][name] for run in runs]
        summary[name] = {
            "pesq": _mean([m["pesq"] for m in each]),
            "pesq_min": min((m["pesq"] for m in each if m["pesq"] is not None), default=None),
            "utt": _mean([m["utt"] for m in each]),
            "concealed_frames": _mean([m["concealed_frames"] for m in each]),
            "overhead": _mean([m["overhead"] for m in each]),
            "added_latency_ms": _mean([m["playout_delay"]["mean_ms"] for m in each]),
        }
    return {"pattern": cond.pattern, "loss_pct": cond.loss_pct,
            "seeds": [run["seed"] for run in runs], "summary": summary, "runs": runs}


def print_tables(rows: list[dict[str, Any]], modes: tuple[str, ...]) -> None:
    seeds = max(len(r["seeds"]) for r in rows)
    print(f"\nmean over {seeds} seed(s) per lossy condition")
    tables = (
        ("PESQ-WB, whole file (the target's score)", "pesq", "{:.2f}"),
        ("PESQ-WB per utterance (delay changes in pauses not charged)", "utt", "{:.2f}"),
        ("concealed frames: PLC'd + stalled playout periods (of ~1,050)", "concealed_frames",
         "{:.1f}"),
        ("wire overhead over plain Opus, %", "overhead", "{:+.0%}"),
        ("added latency: playout delay, mean ms", "added_latency_ms", "{:.0f}"),
    )
    width = max(9, *(len(m) + 1 for m in modes))
    for title, key, fmt in tables:
        print(f"\n{title}")
        print(f"{'loss':>11} " + "".join(f"{n:>{width}}" for n in modes))
        for row in rows:
            cells = []
            for name in modes:
                value = row["summary"][name][key]
                cells.append("-" if value is None else fmt.format(value))
            print(f"{row['loss_pct']:g}% {row['pattern'][:6]:>6}".rjust(11) + " "
                  + "".join(f"{c:>{width}}" for c in cells))


def verdicts(rows: list[dict[str, Any]], targets: dict[str, float]) -> dict[str, Any]:
    def of(pattern: str, loss: float, mode: str, key: str) -> float | None:
        for r in rows:
            if (r["pattern"], r["loss_pct"]) == (pattern, loss) and mode in r["summary"]:
                value = r["summary"][mode][key]
                return None if value is None else float(value)
        return None

    out: dict[str, Any] = {
        "nack_at_5_ok": _at_least(of("random", 5.0, "nack", "pesq"), targets["at_5"]),
        "nack_at_15_ok": _at_least(of("random", 15.0, "nack", "pesq"), targets["at_15"]),
    }
    for key, suffix in (("pesq", ""), ("utt", "_per_utterance")):
        clean = of("none", 0.0, TARGET_MODE, key)
        # at 0 % every frame plays as sent: a lower score means the run itself stalled (a
        # loaded machine), and nothing can be judged against it
        disturbed = None if clean is None else clean < CLEAN_FLOOR
        out[f"clean_run_disturbed{suffix}"] = disturbed
        for pattern, loss in TARGET_ROWS:
            value = of(pattern, loss, TARGET_MODE, key)
            ok = (None if value is None or clean is None or disturbed
                  else clean - value <= targets["from_clean"])
            out[f"{TARGET_MODE}_{pattern}_{loss:g}_within_clean{suffix}"] = ok
    return out


def _at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


def conditions(losses: list[float], patterns: list[str]) -> list[Condition]:
    out = [Condition("none", 0.0)] if 0 in losses else []
    out += [Condition(p, loss) for p in patterns for loss in losses if loss > 0]
    return out


async def main(args: argparse.Namespace) -> None:
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    started = time.monotonic()
    load_before = os.getloadavg()
    if args.seeds is None:
        args.seeds = [1, 2, 3, 4, 5] if args.offline else [1]
    speech = synthesize_speech(args.seconds)
    settings = EncoderSettings(bitrate=args.bitrate, expected_loss_percent=args.expected_loss)
    payloads, ref = encode_decode(speech, settings)
    conds = conditions(args.losses, args.patterns)
    if args.offline:
        rows = run_offline(args, payloads, ref, conds)
        modes = tuple(m for m in args.modes if m in OFFLINE)
    else:
        rows = await run_live(args, speech, ref, conds)
        modes = LIVE_MODES
    targets = {"at_5": 4.0, "at_15": 3.5, "from_clean": 0.1}
    verdict = verdicts(rows, targets)
    name = "pesq_loss-offline" if args.offline else "pesq_loss"
    path = write_results(name, {
        "mode": "offline (virtual clock, bench/loss_sim.py)" if args.offline else "live",
        "command": " ".join([os.path.basename(sys.executable), "-m", "bench.pesq_loss",
                             *sys.argv[1:]]),
        "load_average": {"before": [round(v, 2) for v in load_before],
                         "after": [round(v, 2) for v in os.getloadavg()]},
        "speech_s": round(speech.size / SAMPLE_RATE, 2),
        "encoder": dataclasses.asdict(settings),
        "burst_mean_packets": args.burst,
        "red": {"distance": args.red_distance, "adaptive": args.red_adaptive,
                "max_distance": args.red_max_distance if not args.offline else "per mode"},
        "rtt_ms": args.rtt_ms if args.offline else "loopback",
        "seeds": args.seeds,
        "impaired": "datagrams the listener receives (NACKs go out unimpaired)",
        "overhead": "RTP bytes to each receiver / to plain Opus's (plc) - 1, before loss",
        "concealed_frames": "PLC'd frames + playout periods stalled waiting for a late repair",
        "warmup": args.warmup,
        "phrase_cache": not args.no_phrase_cache,
        "modes": list(modes),
        "rows": rows,
        "targets": targets,
        "verdict": verdict,
        "runtime_s": round(time.monotonic() - started, 1),
    })
    print_tables(rows, modes)
    print(f"\ntargets: nack >= {targets['at_5']} at 5 %, >= {targets['at_15']} at 15 % random;"
          f" {TARGET_MODE} within {targets['from_clean']} of its clean score at 5 %, 15 % random"
          " and 10 % bursty (mean over the seeds)")
    print(f"verdict: {verdict}")
    print(f"load average before {load_before}, after {os.getloadavg()}")
    print(f"written {path}")


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.pesq_loss", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0, help="speech per condition (whole "
                   "sentences: a little more)")
    p.add_argument("--losses", type=_floats, default=[0.0, 5.0, 10.0, 15.0],
                   help="comma-separated loss percentages")
    p.add_argument("--patterns", type=lambda t: t.split(","), default=["random", "bursty"])
    p.add_argument("--burst", type=float, default=3.0, help="mean burst length (bursty)")
    p.add_argument("--seeds", type=_ints, default=None,
                   help="impairment seeds, each condition run once per seed (default: 1-5 "
                   "offline, 1 live)")
    p.add_argument("--bitrate", type=int, default=32_000)
    p.add_argument("--expected-loss", type=int, default=10)
    p.add_argument("--red-distance", type=int, default=2, choices=range(1, 5),
                   help="RED: previous frames per packet")
    p.add_argument("--red-max-distance", type=int, default=0, choices=range(0, 9),
                   help="live: the gateway's --red-max-distance (0: the distance stays)")
    p.add_argument("--red-adaptive", action="store_true",
                   help="live: RED only while the listener reports loss (the gateway's default)")
    p.add_argument("--offline", action="store_true",
                   help="virtual clock, no gateway process: the receive paths alone, no noise")
    p.add_argument("--modes", type=lambda t: t.split(","), default=list(OFFLINE),
                   help="offline: receivers to run (default all)")
    p.add_argument("--rtt-ms", type=float, default=2.0, help="offline: the repair round trip")
    p.add_argument("--jobs", type=int, default=2, help="offline: worker processes")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="live: score the first utterance too (the gateway encodes it live)")
    p.add_argument("--no-phrase-cache", action="store_true",
                   help="live: make the gateway encode every utterance live")
    return p


if __name__ == "__main__":
    asyncio.run(main(build_parser().parse_args()))
