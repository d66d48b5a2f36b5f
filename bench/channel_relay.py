"""How a channel's frames should travel between workers: the direct HTTP link the mirrors use
against Redis pub/sub (which the cluster already runs), for K subscribing workers.

- ``http``: a gateway (its own process) with one channel on air; K links read
  ``/listen?format=frames&batch=1`` here, as K mirrors would. Measured: each frame's arrival
  minus its slot (``seq * 20 ms``), less the link's smallest such offset -- the jitter a
  mirror's prebuffer must absorb -- and the gateway's CPU with K links against its CPU with
  none (the floor, in the same run).
- ``redis``: a ``redis-server`` (its own process) and a publisher here publishing a 100-byte
  frame every 20 ms (stamped with its send time) to one pub/sub channel, K subscribers here.
  Measured: receive - send (one clock: one machine), and the Redis server's CPU.

    python -m bench.channel_relay --links 4 --window 6
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench import procstats
from bench.common import free_port, wait_healthy, write_results
from bench.load import tail
from gateway.http.frame_records import FrameRecord, FrameRecordParser

REPO = Path(__file__).resolve().parent.parent
FRAME_S = 0.02


def _ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    a = np.array(values) * 1000
    return {"p50": round(float(np.percentile(a, 50)), 3),
            "p99": round(float(np.percentile(a, 99)), 3), "max": round(float(a.max()), 3)}


async def http_links(k: int, window: float, tmp: Path) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "gateway.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(port), "--ice-hosts", "127.0.0.1",
             "--log-level", "WARNING", "--voice", "tone:440?seconds=120"],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        await wait_healthy(url, server, lambda: tail(log), 60)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/v1/channels", json={"name": "relay"}) as r:
                assert r.status == 201
            async with http.post(f"{url}/v1/channels/relay/speech", json={"text": "x"}) as r:
                assert r.status == 202
            await asyncio.sleep(1.0)
            s0 = procstats.cpu_sample(server.pid)
            await asyncio.sleep(window)
            floor = procstats.cpu_percent(s0, procstats.cpu_sample(server.pid))
            offsets: list[list[float]] = [[] for _ in range(k)]

            async def link(i: int) -> None:
                async with http.get(f"{url}/v1/channels/relay/listen",
                                    params={"format": "frames", "batch": "1"}) as response:
                    parser = FrameRecordParser()
                    async for chunk in response.content.iter_any():
                        now = time.monotonic()
                        for record in parser.feed(chunk):
                            if isinstance(record, FrameRecord):
                                offsets[i].append(now - record.sequence * FRAME_S)

            tasks = [asyncio.ensure_future(link(i)) for i in range(k)]
            await asyncio.sleep(1.0)
            for o in offsets:
                o.clear()
            s0 = procstats.cpu_sample(server.pid)
            await asyncio.sleep(window)
            with_links = procstats.cpu_percent(s0, procstats.cpu_sample(server.pid))
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        jitter = [x - min(o) for o in offsets if o for x in o if len(o) < 65536]
        return {"links": k, "frames_per_link": round(sum(map(len, offsets)) / k, 1),
                "jitter_ms": _ms(jitter), "server_cpu_pct_floor": round(floor, 2),
                "server_cpu_pct_with_links": round(with_links, 2),
                "cpu_pct_per_link": round((with_links - floor) / k, 3)}
    finally:
        server.terminate()
        server.wait(10)


async def redis_pubsub(k: int, window: float, tmp: Path) -> dict[str, Any]:
    if shutil.which("redis-server") is None:
        return {"error": "redis-server is not installed"}
    from redis.asyncio import Redis

    port = free_port()
    with (tmp / "redis.log").open("w") as out:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no"],
                                  stdout=out, stderr=subprocess.STDOUT)
    clients: list[Any] = []
    try:
        publisher = Redis(port=port)
        for _ in range(100):
            with contextlib.suppress(Exception):
                if await publisher.ping():
                    break
            await asyncio.sleep(0.05)
        latencies: list[list[float]] = [[] for _ in range(k)]
        offsets: list[list[float]] = [[] for _ in range(k)]
        pubsubs = []
        for _ in range(k):
            client = Redis(port=port)
            clients.append(client)
            pubsub = client.pubsub()
            await pubsub.subscribe("vg:air:relay")
            pubsubs.append(pubsub)

        async def subscriber(i: int) -> None:
            async for message in pubsubs[i].listen():
                if message["type"] == "message":
                    sent, seq = struct.unpack_from("<dI", message["data"])
                    latencies[i].append(time.time() - sent)
                    offsets[i].append(time.monotonic() - seq * FRAME_S)

        tasks = [asyncio.ensure_future(subscriber(i)) for i in range(k)]
        payload = bytes(88)
        seq = 0
        stop = time.monotonic() + window + 1.0
        s0: procstats.CpuSample | None = None
        next_at = time.monotonic()
        while time.monotonic() < stop:
            if s0 is None and time.monotonic() > stop - window:
                s0 = procstats.cpu_sample(server.pid)
                for lat in (*latencies, *offsets):
                    lat.clear()
            await publisher.publish("vg:air:relay",
                                    struct.pack("<dI", time.time(), seq) + payload)
            seq += 1
            next_at += FRAME_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        assert s0 is not None
        cpu = procstats.cpu_percent(s0, procstats.cpu_sample(server.pid))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        clients.append(publisher)
        jitter = [x - min(o) for o in offsets if o for x in o]
        return {"subscribers": k, "latency_ms": _ms([x for lat in latencies for x in lat]),
                "jitter_ms": _ms(jitter),
                "redis_cpu_pct": round(cpu, 2), "cpu_pct_per_subscriber": round(cpu / k, 3),
                "messages_per_subscriber": round(sum(map(len, latencies)) / k, 1)}
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()
        server.kill()
        server.wait(10)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        return {"window_s": args.window, "http": await http_links(args.links, args.window, tmp),
                "redis": await redis_pubsub(args.links, args.window, tmp)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=4, help="workers mirroring the channel")
    parser.add_argument("--window", type=float, default=6.0)
    parser.add_argument("--out", default="channel_relay")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    path = write_results(args.out, result)
    h, r = result["http"], result["redis"]
    print("arrival past the frame's slot, less the link's smallest (what a mirror's prebuffer"
          " absorbs):")
    print(f"{'transport':10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU %/link':>10}")
    print(f"{'http link':10} {h['jitter_ms']['p50']!s:>8} {h['jitter_ms']['p99']!s:>8} "
          f"{h['jitter_ms']['max']!s:>8} {h['cpu_pct_per_link']!s:>10}  (jitter past the "
          f"link's best; floor {h['server_cpu_pct_floor']} % without links)")
    if "error" not in r:
        print(f"{'redis':10} {r['jitter_ms']['p50']!s:>8} {r['jitter_ms']['p99']!s:>8} "
              f"{r['jitter_ms']['max']!s:>8} {r['cpu_pct_per_subscriber']!s:>10}  (the Redis "
              f"server's CPU; send->receive {r['latency_ms']})")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
