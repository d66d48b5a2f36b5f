"""Shared benchmark plumbing: a gateway in its own process, results as JSON."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from gateway.client.capture import decode, first_audible
from gateway.client.peer import GatewayClient

RESULTS = Path(__file__).resolve().parent / "results"


_PORTS = random.SystemRandom()  # not the module's generator: a test may seed that one


def _ephemeral_low() -> int:
    """The first port the kernel hands out for port 0 and outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback port free now (TCP and UDP) for a server bound later, often by another process.

    Drawn at random from below the kernel's ephemeral range, so no outgoing connection or port-0
    bind (this process's, or a test's running beside it under pytest-xdist) can be handed it
    before the server binds; random, so parallel callers rarely draw the same one.
    """
    low = max(1024, min(_ephemeral_low(), 65536) - 12_000)
    high = max(low + 1000, _ephemeral_low())
    for _ in range(200):
        port = _PORTS.randrange(low, high)
        try:
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
    with socket.socket() as s:  # (a crowded range: the kernel's choice)
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(
    url: str, proc: subprocess.Popen[Any], output: Callable[[], str], timeout: float
) -> None:
    """Until ``GET url/healthz`` answers 200; raises, with ``output()``, if ``proc`` exits
    first or ``timeout`` s pass (``output`` is read only then)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited ({proc.returncode}): {output()}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{url}/healthz") as r:
                    if r.status == 200:
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(f"server did not start: {output()}")
            await asyncio.sleep(0.1)  # polling a process we do not control: no event exists


@contextlib.asynccontextmanager
async def gateway_process(
    voices: Sequence[str], extra: Sequence[str] = (), cpu: int | None = None,
    ice_hosts: str = "127.0.0.1", timeout: float = 60, log_path: str | None = None,
) -> AsyncIterator[str]:
    """Run ``python -m gateway`` as a user would; yield its base URL. ``ice_hosts`` "":
    every interface but loopback (``make run``'s default); ``log_path``: keep its output
    there (default: a temporary file, shown if it fails to start)."""
    port = free_port()
    cmd = [sys.executable, "-m", "gateway", "--port", str(port), "--ice-hosts", ice_hosts,
           "--log-level", "WARNING", *extra]
    for v in voices:
        cmd += ["--voice", v]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    # Its output goes to a file, not a pipe: a pipe nobody reads fills up (64 KB) and then
    # blocks the gateway's event loop on its next log line.
    log = (tempfile.TemporaryFile(mode="w+") if log_path is None
           else Path(log_path).open("w+"))  # noqa: ASYNC230
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def output() -> str:
            log.flush()
            log.seek(0)
            return log.read()

        await wait_healthy(url, proc, output, timeout)
        yield url
    finally:
        stop(proc, 10)
        log.close()


def stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """Terminate ``proc``; kill it if it has not exited after ``grace`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "platform": platform.platform()}


def write_results(name: str, data: dict[str, Any],
                  default: Callable[[Any], Any] | None = None) -> Path:
    """``bench/results/<name>.json``, stamped with the time and machine; ``default``: as
    ``json.dumps``'s, for values JSON has no type for."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine(), **data}
    path.write_text(json.dumps(data, indent=2, default=default))
    return path


def pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


async def speak_series(client: GatewayClient, voice: str | None, texts: list[str]) -> list[dict]:
    """Say each text in turn; per utterance: say -> first audible packet and the server's times.

    Before the next request the stream is let go idle (two silence packets): a listener does not
    reply within 20 ms of the previous sentence ending, and a frame may not be sent before the
    slot after the last one sent.
    """
    rows = []
    rng = random.Random(1)
    for text in texts:
        start_index = len(client.capture.packets)
        # A listener's request lands at a random phase of the stream's 20 ms frame grid; right
        # after a packet arrived (the previous wait) it would always land just after a slot.
        await asyncio.sleep(rng.uniform(0, 0.020))
        result = await client.say(text, voice=voice)
        state = await client.wait_utterance(result.utterance["id"])
        await client.capture.wait_for_seq((state["last_seq"] + 2) & 0xFFFF)
        packets = sorted(client.capture.packets[start_index:], key=lambda p: p.seq)
        audible = first_audible(packets, decode(packets))
        rows.append({
            "text": text,
            "state": state["state"],
            "cached": state["cached"],
            "first_audio_ms": None if audible is None
            else (audible.arrival - result.said_at) * 1000,
            "first_sent_ms": state["latency_ms"]["first_sent"],
            "first_pcm_ms": state["latency_ms"]["first_pcm"],
            "server_overhead_ms": state["server_overhead_ms"],
            "processing_ms": _diff(state["latency_ms"]["first_frame_queued"],
                                   state["latency_ms"]["first_pcm"]),
        })
    return rows


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b
