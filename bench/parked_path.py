"""The compiled send path's tick at N parked streams, alone: ``gw_run_parked`` and ``gw_flush``.

``python -m bench.parked_path [--streams 1000] [--rounds 4] [--seconds 2]``: one process pinned
to ``--core`` parks ``--streams`` streams on one ``CompiledBatch`` (net/sendpath.py) -- each
with its own SRTP state as the gateway makes it (``TxSession``: AES-GCM by net/srtp_tx.py),
its own FrameStore-sized ring, the same silence packet, its own destination socket held by
bench.floor's drainer on ``--drain-core`` -- spread over the eight ticks of the 2.5 ms grid,
and runs the ticks as the shared ticker does: it sleeps to each tick, writes ``--pollute-mb``
of memory (the gateway's other work between ticks, evicting the streams' state; untimed),
then calls ``run_parked`` and ``flush``, thread CPU read around each.

Why: the load bench's µs a packet is the whole gateway process (the C tick, the Python around
it, consent, RTCP, the loop) on a VM that moves it by ±30 % from run to run. This is the C
tick's share alone, beside the floor at the same fan-out from C (``bench.floor``'s
``floor_fanout_srtp_c``: the same calls with no stream state) measured before and after in the
same process: what is left between the gateway's figure and this one is not the send path's
C. Prints a table and writes bench/results/parked_path.json. Sends only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from array import array
from pathlib import Path
from typing import Any

import numpy

from bench import floor
from gateway import aiortc_compat
from gateway.net import sendmmsg, sendpath
from gateway.webrtc.in_c import EARLY_S, MAX_CATCH_UP

RESULTS = Path(__file__).resolve().parent / "results"
SILENCE = b"\xf8\xff\xfe"  # an Opus frame of silence (20 ms, CELT FB)


def _park_all(batch: sendpath.CompiledBatch, ports: list[int], t0: float) -> list[Any]:
    """One stream a port, parked with its slots on tick ``i % 8`` of the grid from ``t0``;
    what must stay alive as long as they are parked."""
    keep: list[Any] = []
    for i, port in enumerate(ports):
        session = floor.gcm_session(in_c=True)
        ssrc = 0x10000 + i
        handle = aiortc_compat.srtp_protect_handle(session, ssrc)
        addr = sendmmsg.sockaddr_bytes((floor.DESTINATION[0], port))
        if handle is None or addr is None:
            raise RuntimeError("no C SRTP handle, or no address")
        protect, ctx = handle
        header = bytes([0x80, 111, 0, 0, 0, 0, 0, 0]) + ssrc.to_bytes(4, "big")
        stream = batch.new_stream(header, -1, ctx, addr, protect)
        ring = array("I", bytes(4 * sendpath.PARKED_RING_WORDS))
        origin = t0 + (i % floor.PHASES) * floor.TICK_S
        times = (origin, 0.020, 0.1, t0, floor.TICK_S)
        if not batch.park(stream, times, 0, i, i * 7, 111, ring, SILENCE, i + 1):
            raise RuntimeError("park refused")
        keep.append((session, stream, ring))
    return keep


def run(streams: int, rounds: int, seconds: float, drain_core: int | None,
        pollute_mb: float) -> dict[str, Any]:
    """µs per packet in each round for ``run_parked`` and ``flush``; the datagrams the batch
    sent and the drainer's count of them."""
    module = sendpath.load()
    if module is None:
        raise SystemExit(f"the compiled send path does not build: {sendpath.failure()}")
    dirt = numpy.zeros(int(pollute_mb * (1 << 20)), dtype=numpy.uint8)
    out: dict[str, Any] = {"run_parked": [], "flush": []}
    with floor.drained_sockets(streams, drain_core) as (sock, ports, done):
        batch = sendpath.CompiledBatch(module, sock.fileno(),
                                       aiortc_compat.srtp_protect_address() or 0, 0)
        t0 = time.monotonic() + 0.05
        keep = _park_all(batch, ports, t0)
        tick = int((time.monotonic() - t0) / floor.TICK_S) + 1
        for r in range(rounds + 1):  # (round 0 warms up: not counted)
            staged_s = flush_s = 0.0
            packets = 0
            for _ in range(int(seconds / floor.TICK_S)):
                if len(dirt):
                    dirt[::64] += 1
                pause = t0 + tick * floor.TICK_S - time.monotonic()
                tick += 1
                if pause > 0:
                    time.sleep(pause)
                a = time.thread_time()
                staged, _next, _consumed = batch.run_parked(time.monotonic(), 0, 0, EARLY_S,
                                                            MAX_CATCH_UP)
                b = time.thread_time()
                batch.flush()
                c = time.thread_time()
                staged_s += b - a
                flush_s += c - b
                packets += staged
            if r and packets:
                out["run_parked"].append(staged_s / packets * 1e6)
                out["flush"].append(flush_s / packets * 1e6)
        out["sent"] = int(batch.counters()["sent"])  # (run_parked's own flushes too)
        batch.close()
        del keep
    out["received"] = done["received"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0, help="a round's length")
    parser.add_argument("--core", type=int, default=0, help="the core to pin to (the gateway's)")
    parser.add_argument("--drain-core", type=int, default=1,
                        help="the drainer's core (the load generator's; -1: any)")
    parser.add_argument("--pollute-mb", type=float, default=16.0,
                        help="MB written between ticks, untimed (0: none)")
    parser.add_argument("--out", default=str(RESULTS / "parked_path.json"))
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    drain_core = args.drain_core if args.drain_core >= 0 else None

    def fanout_floor() -> dict[str, float] | None:
        return floor.measure_fanout_c(args.streams, args.seconds, drain_core, srtp_c=True)

    before = fanout_floor()
    runs = run(args.streams, args.rounds, args.seconds, drain_core, args.pollute_mb)
    after = fanout_floor()
    floors = [f["sendmmsg_fanout"] + f["srtp_fanout"] for f in (before, after) if f]
    tick = {what: statistics.median(runs[what]) for what in ("run_parked", "flush")}
    total = tick["run_parked"] + tick["flush"]
    print(f"the compiled tick at {args.streams} parked streams, CPU µs a packet (median of "
          f"{args.rounds} rounds of {args.seconds:g} s; {args.pollute_mb:g} MB written "
          f"between ticks; load average {os.getloadavg()[0]:.2f})")
    for what in ("run_parked", "flush"):
        print(f"  {what:<11} {tick[what]:6.2f}   rounds: "
              + ", ".join(f"{v:.2f}" for v in runs[what]))
    print(f"  {'both':<11} {total:6.2f}   {runs['received']} of {runs['sent']} datagrams read "
          "by the drainer")
    if floors:
        mean = statistics.mean(floors)
        print(f"the floor at {args.streams} destinations from C with the gateway's SRTP, "
              f"before / after: {' / '.join(f'{f:.2f}' for f in floors)} µs; the tick "
              f"÷ its mean: {total / mean:.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "streams": args.streams, "rounds": args.rounds, "seconds": args.seconds,
        "pollute_mb": args.pollute_mb, "us_per_packet": runs, "median_us": tick,
        "floor_fanout_srtp_c_us": floors, "loadavg": os.getloadavg(),
    }, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
