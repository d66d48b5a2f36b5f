"""What the event loop sees while the turn model runs: timer lateness, the model on a thread of
the gateway's process (as before 2026-12-02) against the model in its own child process.

The loop's thread is pinned as the gateway pins it when Whisper decodes in child processes
(``runtime.loop_cpu.LoopCpu``: the loop on the first CPU, helpers on the others). A ticker
sleeps 5 ms at a time, records how late each wake-up is and then works ``--loop-work-ms``
(pure Python, GIL held: the loop pacing streams), while one ``TurnJudge`` asks the
model about 8 s of speech back to back (each verdict starts the next request: the worst case,
a listener in a pause asks once). Modes:

- ``none``: no inference (the floor: what the loop's timer does on this machine now);
- ``thread``: ``SmartTurnModel`` in this process on the judges' executor thread (which the
  pinned loop thread started, so it shares the loop's CPU, and holds the GIL for the features);
- ``process``: ``TurnModelProcess`` (turn_process.py): the executor thread only waits on a
  pipe, the inference runs in a child on the other CPUs.

    python -m bench.turn_offload [--seconds 10]

Prints lateness median / p99 / max and wake-ups later than 5 ms per mode, beside the
inference's own time; JSON in bench/results/turn_offload.json. Run it under
``flock -x /tmp/cpu.lock`` and read the load average printed beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import statistics
import time
from typing import Any

import numpy as np

from bench.common import pct, write_results
from gateway.listen.turn_model import SmartTurnModel, TurnJudge, TurnModel, Verdict
from gateway.runtime.loop_cpu import LoopCpu

TICK_S = 0.005
LATE_MS = 5.0


def speech_like(seconds: float = 8.0) -> np.ndarray:
    """Noise shaped in syllable-rate bursts: the model's cost does not depend on the words."""
    rng = np.random.default_rng(7)
    n = int(16_000 * seconds)
    envelope = 0.5 + 0.5 * np.sin(np.arange(n) * 2 * np.pi * 4 / 16_000)
    return (rng.standard_normal(n) * 0.1 * envelope).astype(np.float32)


async def run_mode(mode: str, seconds: float, work_ms: float) -> dict[str, Any]:
    pin = LoopCpu()
    others = pin.reserve()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # started pinned
    model: TurnModel | None = None
    if mode == "thread":
        model = SmartTurnModel()  # warmed as the child is (its first run allocates)
        await asyncio.get_running_loop().run_in_executor(executor, model.probability,
                                                         speech_like(1.0))
    elif mode == "process":
        from gateway.listen.turn_process import TurnModelProcess

        model = TurnModelProcess(cpus=others)
        await asyncio.get_running_loop().run_in_executor(executor, model.start)
    audio = speech_like()
    late: list[float] = []
    verdicts: list[float] = []
    stop = time.monotonic() + seconds
    done = asyncio.Event()

    def on_verdict(verdict: Verdict) -> None:
        verdicts.append(verdict.seconds * 1000)
        done.set()

    async def ask() -> None:
        if model is None:
            return
        judge = TurnJudge(model, on_verdict, executor)
        while time.monotonic() < stop:
            done.clear()
            judge.request(len(verdicts), audio)
            await done.wait()
        judge.close()

    asker = asyncio.create_task(ask())
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        await asyncio.sleep(TICK_S)
        late.append((time.perf_counter() - t0 - TICK_S) * 1000)
        busy_until = time.perf_counter() + work_ms / 1000
        while time.perf_counter() < busy_until:  # the loop's own work (pacing streams)
            pass
    await asker
    close = getattr(model, "close", None)
    if close is not None:
        close()
    executor.shutdown()
    pin.release()
    return {"mode": mode, "loop_cpu": pin.cpu, "helper_cpus": list(others),
            "wakeups": len(late), "late_median_ms": round(statistics.median(late), 3),
            "late_p99_ms": round(pct(late, 99) or 0, 2), "late_max_ms": round(max(late), 2),
            "late_over_5ms": sum(x > LATE_MS for x in late), "inferences": len(verdicts),
            "inference_median_ms": round(statistics.median(verdicts), 1) if verdicts else None,
            "loadavg": os.getloadavg()}


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for mode in args.modes.split(","):
        rows.append(await run_mode(mode, args.seconds, args.loop_work_ms))
        r = rows[-1]
        print(f"{mode:<8} loop lateness median {r['late_median_ms']:6.3f} ms, p99 "
              f"{r['late_p99_ms']:6.2f}, max {r['late_max_ms']:6.2f}, > {LATE_MS:.0f} ms: "
              f"{r['late_over_5ms']:4d} of {r['wakeups']}; {r['inferences']} inferences, "
              f"{r['inference_median_ms']} ms median; load average {r['loadavg']}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="per mode")
    p.add_argument("--modes", default="none,thread,process,none")
    p.add_argument("--loop-work-ms", type=float, default=1.0,
                   help="pure-Python work the loop does after each wake-up (holding the GIL)")
    args = p.parse_args(argv)
    print(f"target: the loop's lateness with the model running as with none (p99, max); "
          f"{os.cpu_count()} CPUs")
    rows = asyncio.run(main_async(args))
    path = write_results("turn_offload", {"seconds": args.seconds, "tick_ms": TICK_S * 1000,
                                          "loop_work_ms": args.loop_work_ms, "rows": rows})
    print(f"written {path}")


if __name__ == "__main__":
    main()
