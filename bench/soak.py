"""Soak: many connect -> speak -> close cycles and vanishing clients against one gateway process.

    python -m bench.soak [--cycles 1000] [--concurrency 10] [--vanish 100]

The gateway runs as a user starts it (``python -m gateway --host 127.0.0.1 --port P --ice-hosts
127.0.0.1 --voice 'tone:440?seconds=0.5' --stall-warn-ms 10``). Each cycle is a WHEP listener
(an aiortc peer: ``Listener``) that connects, asks for speech, waits until the gateway says it
was played and its speech packets arrived, then DELETEs the session and closes its side. RTP is
counted from clear headers and dropped before SRTP (``aiortc_compat.impair_incoming``), so one
client process can keep up; DTLS and RTCP reach aiortc as usual.

``--vanish`` clients connect and speak like the others, then vanish: no DELETE, no DTLS alert,
and from then on nothing they send leaves their socket (``aiortc_compat.impair_outgoing``), as
when a laptop lid closes. The gateway must reap them itself: aioice's ICE consent freshness
(RFC 7675: a check every 4-6 s, failed after 6 unanswered) fails the peer connection after
≈30 s and the session closes as ``peer connection failed``. Each is polled until its session
is gone (404): the time it took is its reap time.

What is left is read from the outside after a warm-up (the first ``--warmup`` cycles) and at the
end, once every session is gone: open file descriptors (``/proc/PID/fd``, UDP sockets among
them), threads (``/proc/PID/status``), RSS, live sessions and the GC block from ``/healthz``,
and the event loop's asyncio tasks. Tasks have no endpoint: the gateway process gets a
``sitecustomize`` (on ``PYTHONPATH``, written to a temporary directory) whose SIGUSR1 handler
writes ``asyncio.all_tasks()`` by coroutine and the threads' names to a file.

JSON in bench/results/soak.json; a table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench import procstats
from bench.common import free_port, pct, wait_healthy, write_results
from gateway import aiortc_compat
from gateway.client.peer import GatewayClient

SPEECH_MIN_BYTES = 60  # a datagram longer than this carries speech (silence is a few bytes)
DEFAULT_VOICE = "tone:440?seconds=0.5"
TEXTS = [f"soak cycle phrase {i}" for i in range(5)]  # a few distinct phrases: cache hits too

PROBE = '''\
"""bench.soak's probe: on SIGUSR1, the event loop's tasks and the threads, as JSON."""
import json, os, signal

_PATH = os.environ.get("GATEWAY_SOAK_PROBE")


def _dump(signum, frame):
    import asyncio, collections, threading
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        tasks = set()
    names = collections.Counter(
        getattr(t.get_coro(), "__qualname__", type(t.get_coro()).__name__) for t in tasks
    )
    data = {"tasks": len(tasks), "by_coroutine": dict(names),
            "threads": sorted(t.name for t in threading.enumerate())}
    with open(_PATH + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(_PATH + ".tmp", _PATH)


if _PATH:
    signal.signal(signal.SIGUSR1, _dump)
'''

#: aiohttp's per-connection handler (HTTP keep-alive), the request in flight (the probe runs
#: during /healthz reads) and the loop's own: not a session's tasks.
SERVER_TASKS = ("RequestHandler.start", "RequestHandler._handle_request", "run.<locals>.wrapper",
                "serve", "_run_app")


def _is_rtp(data: bytes) -> bool:
    # RTP/RTCP: version 2 (first byte 0x80..0xBF); RTCP packet types 192..223 (RFC 5761)
    return len(data) > 1 and 127 < data[0] < 192 and not 191 < data[1] < 224


class Listener:
    """A light WHEP listener: our headless client, its RTP counted from the clear header and
    dropped before SRTP, DTLS and RTCP delivered."""

    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.client = GatewayClient(url, http)
        self.http = http
        self.packets = 0
        self.speech_packets = 0
        self.vanished = False
        self._speech_seen = asyncio.Event()
        self._speech_wanted = 0

    @property
    def session_url(self) -> str | None:
        return self.client.session_url

    @property
    def session_id(self) -> str | None:
        url = self.client.session_url
        return None if url is None else url.rsplit("/", 1)[-1]

    def _wrap_incoming(self, deliver: aiortc_compat.Deliver) -> aiortc_compat.Deliver:
        def on_datagram(data: bytes, component: Any) -> None:
            if self.vanished:
                return
            if _is_rtp(data):
                self.packets += 1
                if len(data) > SPEECH_MIN_BYTES:
                    self.speech_packets += 1
                    if self.speech_packets >= self._speech_wanted:
                        self._speech_seen.set()
                return
            deliver(data, component)

        return on_datagram

    async def connect(self, timeout: float = 15.0) -> float:
        started = time.monotonic()
        await self.client.connect(timeout=timeout)
        transport = self.client.transceiver.receiver.transport
        aiortc_compat.impair_incoming(transport, self._wrap_incoming)
        return (time.monotonic() - started) * 1000

    async def speak(self, text: str, timeout: float = 30.0) -> dict[str, Any]:
        """Say ``text``; returns the utterance once the gateway has played it and (most of) its
        speech packets arrived here."""
        before = self.speech_packets
        result = await self.client.say(text)
        url = f"{self.session_url}/speech/{result.utterance['id']}"
        params = {"wait": "1", "timeout": str(timeout)}
        async with self.http.get(url, params=params) as response:
            state = await response.json()
        frames = int(state.get("frames_sent") or 0)
        self._speech_wanted = before + max(1, frames - 2)  # the last one or two may be in flight
        if self.speech_packets < self._speech_wanted:
            self._speech_seen.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._speech_seen.wait(), 2.0)
        state["speech_packets_received"] = self.speech_packets - before
        state["said_at"] = result.said_at
        return state

    def vanish(self) -> None:
        """Stop answering: nothing this peer sends leaves its socket from now on (no DELETE,
        no DTLS close_notify), and what arrives is ignored."""
        self.vanished = True
        transport = self.client.transceiver.receiver.transport

        def black_hole(sendto: Callable[..., Any]) -> Callable[..., Any]:
            def send(*args: Any) -> None:
                return None

            return send

        aiortc_compat.impair_outgoing(transport, black_hole)

    async def close(self, delete: bool = True) -> None:
        try:
            await self.client.close(delete=delete and not self.vanished)
        finally:  # the client's own cycles too: the load generator stays lean
            aiortc_compat.release_peer_connection(self.client.pc)


async def run_cycle(url: str, http: aiohttp.ClientSession, index: int) -> dict[str, Any]:
    """One connect -> speak -> close cycle; returns what it measured (``error`` if it failed)."""
    listener = Listener(url, http)
    row: dict[str, Any] = {"index": index}
    try:
        row["connect_ms"] = round(await listener.connect(), 1)
        state = await listener.speak(TEXTS[index % len(TEXTS)])
        row["state"] = state.get("state")
        row["frames_sent"] = state.get("frames_sent")
        row["speech_packets"] = state["speech_packets_received"]
        row["first_sent_ms"] = (state.get("latency_ms") or {}).get("first_sent")
        if row["state"] != "done" or not row["speech_packets"]:
            row["error"] = f"utterance {row['state']}, {row['speech_packets']} speech packets"
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        started = time.monotonic()
        with contextlib.suppress(Exception):
            await listener.close(delete=True)
        row["close_ms"] = round((time.monotonic() - started) * 1000, 1)
    return row


async def start_vanisher(
    url: str, http: aiohttp.ClientSession, index: int
) -> tuple[Listener, dict[str, Any]]:
    """Connect and speak like a cycle, then vanish (the row's ``vanished_at``)."""
    listener = Listener(url, http)
    row: dict[str, Any] = {"index": index, "vanisher": True}
    try:
        row["connect_ms"] = round(await listener.connect(), 1)
        state = await listener.speak(TEXTS[index % len(TEXTS)])
        row["state"] = state.get("state")
        row["session"] = listener.session_id
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:200]
    listener.vanish()
    row["vanished_at"] = time.monotonic()
    return listener, row


async def await_reaped(
    http: aiohttp.ClientSession, listener: Listener, row: dict[str, Any],
    poll_after_s: float, poll_s: float, reap_timeout_s: float,
) -> dict[str, Any]:
    """Poll a vanished client's session until the gateway has reaped it (404)."""
    if listener.session_url is None:
        return row
    vanished_at = row["vanished_at"]
    await asyncio.sleep(poll_after_s)
    while True:
        try:
            async with http.get(listener.session_url) as response:
                await response.read()
                if response.status == 404:
                    row["reap_s"] = round(time.monotonic() - vanished_at, 2)
                    return row
        except aiohttp.ClientError as exc:
            row["poll_error"] = repr(exc)[:200]
        if time.monotonic() - vanished_at > reap_timeout_s:
            row["error"] = f"not reaped after {reap_timeout_s} s"
            return row
        await asyncio.sleep(poll_s)


async def run_cycles(
    url: str, http: aiohttp.ClientSession, first: int, count: int, concurrency: int,
    vanish: int = 0, poll_after_s: float = 20.0, poll_s: float = 0.5,
    reap_timeout_s: float = 90.0, gone: list[Listener] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``count`` cycles, ``concurrency`` at a time, and ``vanish`` vanishing clients started
    evenly among them (each takes a slot while it connects and speaks; its reaping is awaited
    outside the slots). Vanished listeners are appended to ``gone`` (close them at the end).
    Returns (cycle rows, vanisher rows)."""
    gone = [] if gone is None else gone
    slots = asyncio.Semaphore(concurrency)
    every = count / vanish if vanish else 0.0
    vanish_after = {first + int(i * every + every / 2) for i in range(vanish)}
    cycles: list[dict[str, Any]] = []
    reaping: list[asyncio.Task[dict[str, Any]]] = []

    async def slot(index: int) -> None:
        async with slots:
            row = await run_cycle(url, http, index)
            cycles.append(row)
            if on_row is not None:
                on_row(row)
            if index in vanish_after:
                listener, vrow = await start_vanisher(url, http, index)
                gone.append(listener)
                reaping.append(asyncio.create_task(
                    await_reaped(http, listener, vrow, poll_after_s, poll_s, reap_timeout_s)
                ))

    await asyncio.gather(*(slot(first + i) for i in range(count)))
    vanished = list(await asyncio.gather(*reaping))
    for row in vanished:
        row.pop("vanished_at", None)
    return cycles, vanished


async def burst(url: str, http: aiohttp.ClientSession, count: int, concurrency: int
                ) -> dict[str, Any]:
    """``count`` sessions open at once (``concurrency`` connecting at a time), then closed."""
    slots = asyncio.Semaphore(concurrency)
    listeners = [Listener(url, http) for _ in range(count)]

    async def connect(listener: Listener) -> bool:
        async with slots:
            try:
                await listener.connect()
            except Exception:
                return False
            return True

    connected = sum(await asyncio.gather(*(connect(x) for x in listeners)))
    await asyncio.gather(*(x.close() for x in listeners), return_exceptions=True)
    return {"sessions": count, "connected": connected}


# --- measuring the gateway process from outside -------------------------------------------------


def fd_counts(pid: int) -> dict[str, int]:
    """Open file descriptors by kind; among the sockets, ``udp`` (ICE: one per peer
    connection here) and ``tcp`` (the listening socket and HTTP connections)."""
    kinds: dict[str, int] = {"total": 0, "socket": 0, "udp": 0, "tcp": 0, "pipe": 0, "anon": 0,
                             "file": 0}
    inodes: dict[str, set[str]] = {"udp": set(), "tcp": set()}
    for kind, tables in (("udp", ("udp", "udp6")), ("tcp", ("tcp", "tcp6"))):
        for table in tables:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9:
                        inodes[kind].add(fields[9])
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kinds["total"] += 1
        if target.startswith("socket:["):
            kinds["socket"] += 1
            inode = target[8:-1]
            for kind in ("udp", "tcp"):
                if inode in inodes[kind]:
                    kinds[kind] += 1
        elif target.startswith("pipe:"):
            kinds["pipe"] += 1
        elif target.startswith("anon_inode:"):
            kinds["anon"] += 1
        else:
            kinds["file"] += 1
    return kinds


async def probe_tasks(pid: int, path: Path, timeout: float = 5.0) -> dict[str, Any] | None:
    """The gateway's asyncio tasks and threads, from its SIGUSR1 probe (None: no answer)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            with contextlib.suppress(json.JSONDecodeError, OSError):
                return json.loads(path.read_text())
        await asyncio.sleep(0.05)
    return None


async def healthz(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/healthz") as response:
        return await response.json()


async def snapshot(pid: int, http: aiohttp.ClientSession, url: str, probe: Path
                   ) -> dict[str, Any]:
    health = await healthz(http, url)
    tasks = await probe_tasks(pid, probe)
    session_tasks = None
    if tasks is not None:
        session_tasks = sum(n for name, n in tasks["by_coroutine"].items()
                            if name not in SERVER_TASKS)
    return {
        "at": time.monotonic(),
        "rss_kb": procstats.rss_kb(pid),
        "threads": procstats.threads(pid),
        "fds": fd_counts(pid),
        "sessions": health["sessions"],
        "tasks": None if tasks is None else tasks["tasks"],
        "tasks_not_http": session_tasks,
        "tasks_by_coroutine": None if tasks is None else tasks["by_coroutine"],
        "thread_names": None if tasks is None else tasks["threads"],
        "gc": health.get("gc"),
        "stalls": health.get("stalls"),
        "closed_total": health.get("metrics", {}).get("sessions_closed_total", {}),
    }


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """``/metrics`` as {series (name and labels): value}."""
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    series: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                series[name] = float(value)
    return series


def worst_in_window(before: dict[str, float], after: dict[str, float], histogram: str,
                    labels: str = "") -> dict[str, Any]:
    """Observations of ``histogram`` between two scrapes, and the bucket the worst fell in:
    (``above_ms``, ``at_most_ms``]."""
    prefix = f"{histogram}_bucket{{{labels + ',' if labels else ''}le=\""
    bounds: list[tuple[float, float]] = []
    for key, value in after.items():
        if key.startswith(prefix):
            le = key[len(prefix):].split('"')[0]
            bound = float("inf") if le == "+Inf" else float(le)
            bounds.append((bound, value - before.get(key, 0.0)))
    bounds.sort()
    total = bounds[-1][1] if bounds else 0.0
    above = 0.0
    for bound, count in bounds:
        if count >= total:
            return {"count": int(total), "above_ms": round(above * 1000, 3),
                    "at_most_ms": None if bound == float("inf") else round(bound * 1000, 3)}
        above = bound
    return {"count": 0, "above_ms": None, "at_most_ms": None}


async def wait_for_no_sessions(http: aiohttp.ClientSession, url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await healthz(http, url))["sessions"] == 0:
            return True
        await asyncio.sleep(0.25)  # polling another process: no event to wait on
    return False


def _summary(values: Sequence[float]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "median": None, "p95": None, "max": None}
    return {"n": len(vals), "median": round(statistics.median(vals), 2),
            "p95": round(pct(vals, 95) or 0.0, 2), "max": round(max(vals), 2)}


def gateway_command(port: int, voice: str, stall_warn_ms: float, extra: Sequence[str]
                    ) -> list[str]:
    return [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
            "--ice-hosts", "127.0.0.1", "--voice", voice, "--stall-warn-ms", str(stall_warn_ms),
            "--log-level", "WARNING", *extra]


def start_process(cmd: list[str], log_path: Path, cwd: str | None, env: dict[str, str]
                  ) -> tuple[subprocess.Popen[str], Any]:
    log_file = open(log_path, "w")  # closed by the caller once the process has ended
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, text=True,
                            cwd=cwd or None, env=env)
    return proc, log_file


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    (workdir / "sitecustomize.py").write_text(PROBE)
    probe = workdir / "probe.json"
    log_path = workdir / "gateway.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(workdir), args.gateway_cwd or str(Path(__file__).resolve().parent.parent),
                    env.get("PYTHONPATH")) if p
    )
    env["GATEWAY_SOAK_PROBE"] = str(probe)
    cmd = gateway_command(port, args.voice, args.stall_warn_ms,
                          ["--max-sessions", str(args.max_sessions), *args.gateway_arg])
    proc, log_file = start_process(cmd, log_path, args.gateway_cwd, env)
    pid = proc.pid
    timeline: list[dict[str, Any]] = []
    result: dict[str, Any] = {"command": " ".join(cmd), "settings": vars(args)}
    started = time.monotonic()
    try:
        await wait_healthy(url, proc, lambda: log_path.read_text(), 60)
        connector = aiohttp.TCPConnector(limit=4 * args.concurrency)
        async with aiohttp.ClientSession(connector=connector) as http:
            result["at_start"] = await snapshot(pid, http, url, probe)
            if args.noise_s > 0:  # the machine's own noise: stalls of the idle gateway
                idle_before = await scrape(http, url)
                await asyncio.sleep(args.noise_s)
                result["idle_noise"] = {
                    "seconds": args.noise_s,
                    "loop_stalls": worst_in_window(idle_before, await scrape(http, url),
                                                   "voice_gateway_loop_stall_seconds"),
                    "load_average": procstats.load_average(),
                }

            async def sample() -> None:
                cpu = procstats.cpu_sample(pid)
                own = procstats.cpu_sample(os.getpid())
                while True:
                    await asyncio.sleep(args.sample_s)
                    with contextlib.suppress(Exception):
                        h = await healthz(http, url)
                        now_cpu = procstats.cpu_sample(pid)
                        now_own = procstats.cpu_sample(os.getpid())
                        timeline.append({
                            "t": round(time.monotonic() - started, 1),
                            "rss_kb": procstats.rss_kb(pid),
                            "fds": fd_counts(pid)["total"],
                            "threads": procstats.threads(pid),
                            "sessions": h["sessions"],
                            "gateway_cpu_pct": round(procstats.cpu_percent(cpu, now_cpu), 1),
                            "client_cpu_pct": round(procstats.cpu_percent(own, now_own), 1),
                            "stalls": (h.get("stalls") or {}).get("count"),
                            "gc_max_pause_live_ms": (h.get("gc") or {}).get("max_pause_live_ms"),
                        })
                        cpu, own = now_cpu, now_own

            sampler = asyncio.create_task(sample())
            done = [0]

            def progress(row: dict[str, Any]) -> None:
                done[0] += 1
                if done[0] % 100 == 0:
                    print(f"  {done[0]} cycles ({time.monotonic() - started:.0f} s)", flush=True)

            # warm-up: pools, caches and first-use allocations settle, and the allocator
            # reaches the footprint of the most sessions the soak will hold at once (vanished
            # ones linger ≈30 s each): memory it keeps from then on is not growth
            warm, _ = await run_cycles(url, http, 0, args.warmup, args.concurrency,
                                       on_row=progress)
            result["warmup_burst"] = await burst(url, http, args.warmup_burst, args.concurrency)
            await wait_for_no_sessions(http, url, 30)
            await asyncio.sleep(args.settle_s)
            result["after_warmup"] = await snapshot(pid, http, url, probe)
            metrics_before = await scrape(http, url)
            gone: list[Listener] = []
            soak_started = time.monotonic()
            result["soak_started_t"] = round(soak_started - started, 1)
            cycles, vanished = await run_cycles(
                url, http, args.warmup, args.cycles - args.warmup, args.concurrency,
                vanish=args.vanish, poll_after_s=args.poll_after_s, poll_s=0.5,
                reap_timeout_s=args.reap_timeout_s, gone=gone, on_row=progress,
            )
            soak_s = time.monotonic() - soak_started
            await asyncio.gather(*(g.close(delete=False) for g in gone),
                                 return_exceptions=True)
            all_gone = await wait_for_no_sessions(http, url, 60)
            metrics_after = await scrape(http, url)  # before the idle reclaim (1 s later)
            result["soak_phase"] = {
                "loop_stalls": worst_in_window(metrics_before, metrics_after,
                                               "voice_gateway_loop_stall_seconds"),
                "gc_pauses": {str(g): worst_in_window(metrics_before, metrics_after,
                                                      "voice_gateway_gc_pause_seconds",
                                                      f'generation="{g}"') for g in range(3)},
            }
            await asyncio.sleep(args.settle_s)
            result["at_end"] = await snapshot(pid, http, url, probe)
            sampler.cancel()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            result["exit_code"] = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            result["exit_code"] = "killed"
        log_file.close()
    rows = warm + cycles
    result["cycles"] = _cycle_summary(rows, soak_s, args)
    result["vanished"] = _vanish_summary(vanished)
    result["all_sessions_gone"] = all_gone
    result["leaks"] = _leaks(result["after_warmup"], result["at_end"])
    before, after = result["after_warmup"]["closed_total"], result["at_end"]["closed_total"]
    result["closed_after_warmup_by_reason"] = {
        k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)
    }
    result["timeline"] = timeline
    result["peak_sessions"] = max((t["sessions"] for t in timeline
                                   if t["t"] >= result["soak_started_t"]), default=None)
    log_text = log_path.read_text()
    result["gateway_log"] = str(log_path)
    result["gateway_log_tail"] = log_text[-4000:]
    result["gateway_log_warnings"] = sum(1 for line in log_text.splitlines() if " WARNING " in line)
    result["gateway_log_errors"] = sum(1 for line in log_text.splitlines()
                                       if " ERROR " in line or "Traceback" in line)
    result["errors"] = [r for r in rows + vanished if r.get("error")][:20]
    return result


def _cycle_summary(rows: list[dict[str, Any]], soak_s: float, args: argparse.Namespace
                   ) -> dict[str, Any]:
    ok = [r for r in rows if not r.get("error")]
    return {
        "total": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
        "soak_phase_s": round(soak_s, 1),
        "cycles_per_s": round((len(rows) - args.warmup) / soak_s, 2) if soak_s else None,
        "connect_ms": _summary([r.get("connect_ms") for r in ok]),
        "first_sent_ms": _summary([r.get("first_sent_ms") for r in ok]),
        "close_ms": _summary([r.get("close_ms") for r in ok]),
        "speech_packets": _summary([r.get("speech_packets") for r in ok]),
    }


def _vanish_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    reaped = [r for r in rows if r.get("reap_s") is not None]
    return {"total": len(rows), "reaped": len(reaped),
            "not_reaped": [r for r in rows if r.get("reap_s") is None],
            "reap_s": _summary([r["reap_s"] for r in reaped])}


def _leaks(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    def delta(key: str) -> Any:
        a, b = before.get(key), after.get(key)
        return None if a is None or b is None else b - a

    by_before = before.get("tasks_by_coroutine") or {}
    by_after = after.get("tasks_by_coroutine") or {}
    task_delta = {k: by_after.get(k, 0) - by_before.get(k, 0)
                  for k in set(by_before) | set(by_after)
                  if by_after.get(k, 0) != by_before.get(k, 0)}
    threads_before = set(before.get("thread_names") or [])
    return {
        "sessions_at_end": after["sessions"],
        "tasks": delta("tasks_not_http"),
        "tasks_changed_by_coroutine": task_delta,
        "threads": delta("threads"),
        "new_threads": sorted(set(after.get("thread_names") or []) - threads_before),
        "fds": after["fds"]["total"] - before["fds"]["total"],
        # HTTP keep-alive connections come and go with the load generator's pool
        "fds_not_tcp": (after["fds"]["total"] - after["fds"]["tcp"])
        - (before["fds"]["total"] - before["fds"]["tcp"]),
        "tcp_sockets": f"{before['fds']['tcp']} -> {after['fds']['tcp']}",
        "udp_sockets": after["fds"]["udp"] - before["fds"]["udp"],
        "rss_growth_kb": after["rss_kb"] - before["rss_kb"],
    }


def table(result: dict[str, Any]) -> str:
    c, v, leaks = result["cycles"], result["vanished"], result["leaks"]
    end, warm = result["at_end"], result["after_warmup"]
    gc_end = end.get("gc") or {}
    stalls = end.get("stalls") or {}
    phase = result.get("soak_phase") or {}
    rss = (f"{warm['rss_kb'] / 1024:.1f} -> {end['rss_kb'] / 1024:.1f} "
           f"({leaks['rss_growth_kb'] / 1024:+.1f})")
    reclaims = (f"{gc_end.get('reclaims')} ({gc_end.get('reclaims_live', 'n/a')}) / "
                f"{gc_end.get('last_reclaim_ms')} ms")
    rows = [
        ("connect ms (median / p95 / max)", _three(c["connect_ms"])),
        ("say -> first packet sent ms (median/p95/max)", _three(c["first_sent_ms"])),
        ("close ms (median / p95 / max)", _three(c["close_ms"])),
        ("vanished clients reaped", f"{v['reaped']} / {v['total']}"),
        ("reap s after vanishing (median / p95 / max)", _three(v["reap_s"])),
        ("sessions closed after warm-up, by reason", _reasons(result)),
        ("sessions left", _na(leaks["sessions_at_end"])),
        ("tasks leaked (not HTTP keep-alive)", _na(leaks["tasks"])),
        ("threads leaked", _na(leaks["threads"])),
        ("fds leaked, not TCP (of them UDP sockets)",
         f"{leaks['fds_not_tcp']} ({leaks['udp_sockets']})"),
        ("TCP sockets (HTTP keep-alive): warm-up -> end", leaks["tcp_sockets"]),
        ("RSS after warm-up -> end MB", rss),
        ("peak sessions at once (warm-up burst / soak)",
         f"{result.get('warmup_burst', {}).get('sessions')} / {result.get('peak_sessions')}"),
        ("objects alive after idle reclaims: warm-up -> end", _alive(warm, end)),
        ("closed sessions freed / garbage / retained", _fates(gc_end)),
        ("worst GC pause while sessions live ms (CPU)",
         f"{_na(gc_end.get('max_pause_live_ms'))} ({_na(gc_end.get('max_pause_live_cpu_ms'))})"),
        ("worst GC pause per generation ms", _na(gc_end.get("max_pause_ms"))),
        ("reclaims (while live) / last", reclaims),
        ("loop stalls over --stall-warn-ms: reported / max",
         f"{stalls.get('count')} / {stalls.get('max_ms')} ms"),
        ("  after warm-up (histogram): count, worst in", _bucket(phase.get("loop_stalls"))),
        ("  idle gateway, before (the machine's noise)", _noise(result.get("idle_noise"))),
        *((f"  GC pauses gen {g} after warm-up: count, worst in", _bucket(w))
          for g, w in (phase.get("gc_pauses") or {}).items()),
        ("gateway exit code (SIGTERM: drain)", _na(result["exit_code"])),
    ]
    head = (f"soak: {c['total']} cycles ({c['ok']} ok, {c['failed']} failed) at "
            f"{result['settings']['concurrency']} concurrent + {v['total']} vanished clients; "
            f"after warm-up {c['soak_phase_s']} s ({c['cycles_per_s']} cycles/s)")
    return "\n".join([head, "", *(f"{label:46} {value:>32}" for label, value in rows)])


def _alive(warm: dict[str, Any], end: dict[str, Any]) -> str:
    a, b = (warm.get("gc") or {}).get("frozen_objects"), (end.get("gc") or {}).get("frozen_objects")
    return "n/a" if a is None or b is None else f"{a} -> {b} ({b - a:+d})"


def _noise(noise: dict[str, Any] | None) -> str:
    if not noise:
        return "n/a"
    return f"{_bucket(noise['loop_stalls'])} in {noise['seconds']:g} s"


def _bucket(w: dict[str, Any] | None) -> str:
    if not w or not w.get("count"):
        return "0"
    top = "inf" if w["at_most_ms"] is None else w["at_most_ms"]
    return f"{w['count']}, ({w['above_ms']}, {top}] ms"


def _reasons(result: dict[str, Any]) -> str:
    by = result.get("closed_after_warmup_by_reason") or {}
    return ", ".join(f"{k}: {int(v)}" for k, v in sorted(by.items())) or "none"


def _three(s: dict[str, Any]) -> str:
    return f"{_na(s['median'])} / {_na(s['p95'])} / {_na(s['max'])}"


def _na(v: Any) -> str:
    return "n/a" if v is None else str(v)


def _fates(gc_stats: dict[str, Any]) -> str:
    keys = ("closed_sessions_freed", "closed_sessions_garbage", "closed_sessions_retained")
    if not all(k in gc_stats for k in keys):
        return "n/a"
    return " / ".join(str(gc_stats[k]) for k in keys)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=1000, help="connect -> speak -> close cycles")
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--vanish", type=int, default=100, help="clients that vanish without DELETE")
    p.add_argument("--warmup", type=int, default=100,
                   help="cycles (of --cycles) before the baseline is read")
    p.add_argument("--warmup-burst", type=int, default=80,
                   help="sessions open at once at the end of the warm-up (at least the most "
                        "the soak holds: --concurrency plus vanished ones not reaped yet)")
    p.add_argument("--voice", default=DEFAULT_VOICE)
    p.add_argument("--stall-warn-ms", type=float, default=10.0)
    p.add_argument("--max-sessions", type=int, default=300)
    p.add_argument("--settle-s", type=float, default=3.0,
                   help="wait after the last session closed before reading (idle reclaim: 1 s)")
    p.add_argument("--poll-after-s", type=float, default=20.0,
                   help="a vanished session is polled from this long after it vanished")
    p.add_argument("--reap-timeout-s", type=float, default=90.0)
    p.add_argument("--sample-s", type=float, default=2.0)
    p.add_argument("--noise-s", type=float, default=20.0,
                   help="first, the idle gateway's own loop stalls over this long (the "
                        "machine's noise floor; 0: skip)")
    p.add_argument("--gateway-arg", action="append", default=[],
                   help="an extra flag for the gateway (repeatable)")
    p.add_argument("--gateway-cwd", default=None,
                   help="run the gateway from another checkout (before/after comparisons)")
    p.add_argument("--out", default="soak")
    args = p.parse_args(argv)
    if not 0 <= args.warmup < args.cycles:
        p.error("--warmup must be below --cycles")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = asyncio.run(soak(args))
    path = write_results(args.out, result)
    print(table(result))
    print(f"\nJSON: {path}")
    return result


if __name__ == "__main__":
    main()
