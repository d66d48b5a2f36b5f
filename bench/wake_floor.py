"""The machine's floor for a received datagram: the event loop thread's CPU for a bare wake-up.

An asyncio loop on CPU 0 that reads ``streams`` streams of 120-octet datagrams, each stream one
every 20 ms at its own random phase (as independent talkers send), from a sender process on
CPU 1, and does nothing else with them: one reader callback that reads the socket dry, as the
gateway's shared socket does (net/udp_mux.py). What its thread's CPU (``time.thread_time``)
comes to per datagram is what this machine charges a thread for being woken to read one --
the kernel's wake-up and the VM's -- before any of the gateway's work. ``bench.rx_cost``
measures it before and after its windows and prints a talker's cost beside it.

On this 2-vCPU VM (docs/density.md, "A talker's datagram beside the machine's wake-up floor")
the bare wake-up is 60-215 µs a datagram, more the longer the core idled between datagrams:
``flock -x /tmp/cpu.lock python -m bench.wake_floor`` prints it at 100 to 1,600 a second.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import socket
import sys
import time
from typing import Any

PACKET = b"\x80" * 120
PERIOD_S = 0.020


def send(port: int, streams: int, seconds: float) -> None:
    """``streams`` streams of a datagram every 20 ms to 127.0.0.1:``port``, each at its own
    random phase, for ``seconds``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    phases = sorted(random.uniform(0, PERIOD_S) for _ in range(streams))
    start = time.monotonic()
    k = 0
    while True:
        base = start + k * PERIOD_S
        for phase in phases:
            due = base + phase
            now = time.monotonic()
            if now - start > seconds:
                return
            if due > now:
                time.sleep(due - now)
            sock.sendto(PACKET, ("127.0.0.1", port))
        k += 1


async def measure(streams: int, seconds: float) -> dict[str, Any]:
    """The calling loop's thread CPU per datagram read, over ``seconds`` of ``streams``
    streams (1 s of warm-up first). Pin the loop's thread before calling."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    count = [0]

    def readable() -> None:
        while True:
            try:
                sock.recvfrom(2048)
            except (BlockingIOError, InterruptedError):
                return
            count[0] += 1

    loop.add_reader(sock.fileno(), readable)
    cmd = [sys.executable, "-m", "bench.wake_floor", "--send", "--port",
           str(sock.getsockname()[1]), "--streams", str(streams), "--seconds",
           str(seconds + 1.5)]
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        cmd = ["taskset", "-c", "1", *cmd]
    proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.DEVNULL)
    try:
        await asyncio.sleep(1.0)
        n0, cpu0, t0 = count[0], time.thread_time(), time.monotonic()
        await asyncio.sleep(seconds)
        n, cpu, wall = count[0] - n0, time.thread_time() - cpu0, time.monotonic() - t0
    finally:
        loop.remove_reader(sock.fileno())
        sock.close()
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
    return {"streams": streams, "datagrams": n, "wall_s": round(wall, 2),
            "loop_cpu_s": round(cpu, 4),
            "loop_us_per_datagram": round(1e6 * cpu / n, 2) if n else None,
            "loop_pct": round(100 * cpu / wall, 2)}


async def _ladder(rates: list[int], seconds: float) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {0})
    for streams in rates:
        r = await measure(streams, seconds)
        print(f"{50 * streams:>6} datagrams/s ({streams} streams): {r['datagrams']} read, "
              f"loop {r['loop_pct']:.2f} % of a core, {r['loop_us_per_datagram']} µs/datagram",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--send", action="store_true", help="(the sender process)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.send:
        send(args.port, args.streams, args.seconds)
        return
    asyncio.run(_ladder([2, 8, 8, 32], args.seconds))


if __name__ == "__main__":
    main()
