"""Load generator: N WebRTC listeners through the public API, timed from RTP headers.

Runs as its own process (pin it to a core of its own). Every session offers recvonly audio,
posts the offer to ``POST /v1/sessions`` and, once all are connected, asks for speech with a
long text. Incoming datagrams are taken before DTLS/SRTP (``aiortc_compat.impair_incoming``):
SRTP encrypts only the payload, so sequence number, RTP timestamp and size are read from the
clear header and the arrival time is recorded; for header-only sessions RTP is then dropped
(no unprotect, no jitter buffer, no decoder: the listener costs a few µs a packet), while DTLS
and RTCP still reach aiortc so the connection lives. ``--full`` sessions deliver everything
and also capture the payloads for an offline decode (the sanity check that the audio is the
tone that was asked for).

Phases, each measured as a window with the server's /proc CPU and RSS:
1. ``silent``: all sessions connected, no speech asked yet (the gateway sends pre-encoded
   silence, the baseline encodes silence frames);
2. ``speaking``: every session speaking (frame sizes tell speech from silence).

Timing: for each session, offset_i = arrival_i - ts_i / 48000 (unwrapped timestamp);
lateness_i = offset_i - min(offset) over the window; a frame is on time if lateness <= 5 ms.
Loss: sequence-number gaps inside the window.

    python -m bench.loadgen --url http://127.0.0.1:8080 --server-pid PID --sessions 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
from array import array
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from bench import perf_profile, procstats
from bench.loadgen_loss import LossyListener, loss_summary
from gateway import aiortc_compat
from gateway.client.capture import DEFAULT_MAX_PACKETS, RtpCapture, decode
from gateway.client.red_sdp import offer_red

RTP_CLOCK = 48_000
ON_TIME_S = 0.005
# A datagram longer than this carries speech: the gateway's encoded-silence packet and
# aiortc's Opus for digital silence are a few payload bytes; a 32 kbit/s tone frame is ~80.
SPEECH_MIN_BYTES = 60
LONG_TEXT = " ".join(
    ["This is a long benchmark utterance that keeps every listener busy while we measure."] * 20
)
_HEADER = struct.Struct("!HI")
Deliver = Callable[[bytes, Any], None]


class Recorder:
    """Process-wide switch: record per-packet timing only inside a measurement window."""

    on = False


SIOCGSTAMPNS = 0x8907  # linux/sockios.h: receive timestamp of the last datagram read
_STAMP = struct.Struct("qq")  # struct timespec
_stamp_buf = bytearray(_STAMP.size)


def kernel_stamp(fd: int) -> float:
    """CLOCK_REALTIME at which the kernel received the datagram last read from ``fd``.

    The first call on a socket switches stamping on (and answers ENOENT or the time of the
    call): -1 when there is no stamp.
    """
    try:
        fcntl.ioctl(fd, SIOCGSTAMPNS, _stamp_buf, True)
    except OSError:
        return -1.0
    sec, nsec = _STAMP.unpack(_stamp_buf)
    return sec + nsec * 1e-9


class Stream:
    """What one session received, from clear RTP headers.

    Arrival times are the kernel's receive timestamps (``SIOCGSTAMPNS`` right after the read),
    so a busy load generator does not make the server look late; the time our hook ran is kept
    too, to show how far behind the generator itself was.
    """

    __slots__ = ("arrivals", "fd", "hooked", "loss", "packets", "seqs", "sizes",
                 "speech_packets", "timestamps")

    def __init__(self) -> None:
        self.packets = 0
        self.speech_packets = 0
        self.fd = -1  # the session's one UDP socket, once known
        self.loss: LossyListener | None = None  # --loss: drops, NACKs, takes retransmissions
        self.reset()

    def reset(self) -> None:
        self.arrivals = array("d")  # kernel receive time (CLOCK_REALTIME), or -1
        self.hooked = array("d")  # time.monotonic() in our hook
        self.seqs = array("H")
        self.timestamps = array("I")
        self.sizes = array("H")
        if self.loss is not None:
            self.loss.reset()

    def use_socket(self, sock: Any) -> None:
        # Not SO_TIMESTAMPNS: with it the kernel hands stamps only to recvmsg (ancillary data)
        # and stops keeping the one SIOCGSTAMPNS reads.
        self.fd = sock.fileno()
        kernel_stamp(self.fd)  # stamp every datagram from now on

    def wrap(self, deliver: Deliver, full: bool) -> Deliver:
        """The datagram hook: record RTP from its header; drop it unless ``full``."""
        monotonic = time.monotonic
        unpack = _HEADER.unpack_from
        stream = self

        def on_datagram(data: bytes, component: Any) -> None:
            # RTP/RTCP: version 2 (first byte 0x80..0xBF); RTCP packet types 192..223 (RFC 5761).
            if 127 < data[0] < 192 and not 191 < data[1] < 224:
                if stream.loss is not None and stream.loss.take(data):
                    return  # lost on the way, or the retransmission that repaired it
                stream.packets += 1
                size = len(data)
                if size > SPEECH_MIN_BYTES:
                    stream.speech_packets += 1
                if Recorder.on:
                    seq, ts = unpack(data, 2)
                    stream.hooked.append(monotonic())
                    stream.arrivals.append(kernel_stamp(stream.fd) if stream.fd >= 0 else -1.0)
                    stream.seqs.append(seq)
                    stream.timestamps.append(ts)
                    stream.sizes.append(size)
                if not full:
                    return
            deliver(data, component)

        return on_datagram


class LoadSession:
    def __init__(self, index: int, base_url: str, http: aiohttp.ClientSession, full: bool,
                 offer_path: str = "/v1/sessions", loss: float = 0.0, red: bool = False) -> None:
        self.index = index
        self.loss = 0.0 if full else loss  # the decoded sessions check the tone unbroken
        self.red = red
        self.offer_path = offer_path  # or a channel's WHEP endpoint (--channel)
        self.base_url = base_url
        self.http = http
        self.full = full
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.stream = Stream()
        self.capture = RtpCapture(DEFAULT_MAX_PACKETS) if full else None
        self.session_url: str | None = None
        self.connect_ms: float | None = None
        self.error: str | None = None

    async def connect(self, timeout: float) -> bool:
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._connect(), timeout)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"[:200]
            return False
        self.connect_ms = (time.monotonic() - started) * 1000
        return True

    async def _connect(self) -> None:
        pc = self.pc
        transceiver = pc.addTransceiver("audio", direction="recvonly")
        # as a browser: a consent answer late by more than aioice's 0.5 s still counts
        aiortc_compat.tolerate_late_consent(pc)
        aiortc_compat.impair_incoming(
            transceiver.receiver.transport, lambda d: self.stream.wrap(d, self.full)
        )
        if self.capture is not None:
            aiortc_compat.tap_rtp(transceiver.receiver, self.capture.on_packet)
        if self.loss:
            transport = transceiver.receiver.transport
            self.stream.loss = LossyListener(
                self.loss, self.index,
                lambda nack: aiortc_compat.send_unprotected(transport, nack),
            )
        connected = asyncio.get_running_loop().create_future()

        @pc.on("connectionstatechange")
        def on_state() -> None:
            if connected.done():
                return
            if pc.connectionState == "connected":
                connected.set_result(True)
            elif pc.connectionState in ("failed", "closed"):
                connected.set_exception(ConnectionError(f"peer connection {pc.connectionState}"))

        await pc.setLocalDescription(await pc.createOffer())
        sockets: list[Any] = []

        def grab(sendto: Any) -> Any:  # not a wrapper: we only want the socket behind it
            sockets.append(sendto.__self__.get_extra_info("socket"))
            return sendto

        aiortc_compat.impair_outgoing(transceiver.receiver.transport, grab)
        if len(sockets) == 1 and sockets[0] is not None:
            self.stream.use_socket(sockets[0])
        async with self.http.post(
            f"{self.base_url}{self.offer_path}",
            data=offer_red(pc.localDescription.sdp) if self.red else pc.localDescription.sdp,
            headers={"Content-Type": "application/sdp"},
        ) as response:
            body = await response.text()
            if response.status != 201:
                raise ConnectionError(f"HTTP {response.status}: {body[:120]}")
            self.session_url = self.base_url + response.headers["Location"]
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        await connected

    async def speak(self, text: str, interrupt: bool = False) -> dict[str, Any]:
        assert self.session_url is not None
        async with self.http.post(
            f"{self.session_url}/speech", json={"text": text, "interrupt": interrupt}
        ) as response:
            body = await response.json(content_type=None)
            if response.status != 202:
                raise RuntimeError(f"speech: HTTP {response.status}: {body}")
            return body

    async def close(self) -> None:
        if self.stream.loss is not None:
            self.stream.loss.close()
        if self.session_url is not None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.http.delete(self.session_url) as response:
                    await response.read()
        with contextlib.suppress(Exception):
            await self.pc.close()


async def bounded(
    items: Iterable[Any], fn: Callable[[Any], Awaitable[Any]], limit: int
) -> list[Any]:
    """``fn`` over ``items``, at most ``limit`` at a time; results (or exceptions) in order."""
    gate = asyncio.Semaphore(limit)

    async def one(item: Any) -> Any:
        async with gate:
            return await fn(item)

    return await asyncio.gather(*(one(i) for i in items), return_exceptions=True)


# --- analysis ----------------------------------------------------------------------------------


def _unwrap(values: np.ndarray, modulus: int) -> np.ndarray:
    v = values.astype(np.int64)
    if v.size < 2:
        return v
    d = np.diff(v)
    half = modulus // 2
    d = (d + half) % modulus - half
    return v[0] + np.concatenate(([0], np.cumsum(d)))


def stream_stats(stream: Stream, rt_minus_mono: float) -> dict[str, Any] | None:
    if not stream.arrivals:
        return None
    kernel = np.frombuffer(stream.arrivals, dtype=np.float64)
    hooked = np.frombuffer(stream.hooked, dtype=np.float64)
    stamped = bool((kernel > 0).all())
    arrivals = kernel if stamped else hooked
    seqs = _unwrap(np.frombuffer(stream.seqs, dtype=np.uint16), 1 << 16)
    ts = _unwrap(np.frombuffer(stream.timestamps, dtype=np.uint32), 1 << 32)
    offsets = arrivals - ts / RTP_CLOCK
    lateness = offsets - offsets.min()
    unique = np.unique(seqs)
    span = int(seqs.max() - seqs.min() + 1)
    sizes = np.frombuffer(stream.sizes, dtype=np.uint16)
    return {
        "lateness": lateness,
        "stamped": stamped,
        # how long after the kernel received it our hook saw the datagram
        "hook_delay": hooked - (kernel - rt_minus_mono) if stamped else None,
        "received": int(arrivals.size),
        "span": span,
        "lost": span - int(unique.size),
        "duplicates": int(arrivals.size - unique.size),
        "speech": int((sizes > SPEECH_MIN_BYTES).sum()),
        "mean_size": float(sizes.mean()),
    }


def window_summary(
    sessions: list[LoadSession], seconds: float, rt_minus_mono: float
) -> dict[str, Any]:
    per = [stream_stats(s.stream, rt_minus_mono) for s in sessions]
    got = [p for p in per if p is not None]
    silent_sessions = sum(1 for p in per if p is None)
    if not got:
        return {"sessions_measured": 0, "sessions_without_packets": silent_sessions}
    late = np.concatenate([p["lateness"] for p in got])
    per_session_on_time = [float((p["lateness"] <= ON_TIME_S).mean()) for p in got]
    received = sum(p["received"] for p in got)
    delays = [p["hook_delay"] for p in got if p["hook_delay"] is not None]
    delay = np.concatenate(delays) if delays else None
    lost = sum(p["lost"] for p in got)
    span = sum(p["span"] for p in got)
    return {
        "loss": loss_summary([s.stream.loss for s in sessions if s.stream.loss is not None]),
        "sessions_measured": len(got),
        "sessions_without_packets": silent_sessions,
        "packets_received": received,
        "packets_expected": round(len(sessions) * seconds * 50),
        "packets_sent_est": span,  # sequence-number span: what the server sent in the window
        "packets_lost": lost,
        "loss_share": lost / span if span else None,
        "duplicates": sum(p["duplicates"] for p in got),
        "speech_share": sum(p["speech"] for p in got) / received,
        "mean_datagram_bytes": round(sum(p["mean_size"] * p["received"] for p in got) / received,
                                     1),
        "arrival_clock": "kernel" if len(delays) == len(got) else
        f"kernel for {len(delays)} of {len(got)} sessions, our hook for the rest",
        "loadgen_hook_delay_ms": None if delay is None else {
            "p50": float(np.percentile(delay, 50)) * 1000,
            "p99": float(np.percentile(delay, 99)) * 1000,
            "max": float(delay.max()) * 1000,
        },
        "on_time_share": float((late <= ON_TIME_S).mean()),
        "on_time_share_worst_session": min(per_session_on_time),
        "lateness_ms": {
            "p50": float(np.percentile(late, 50)) * 1000,
            "p90": float(np.percentile(late, 90)) * 1000,
            "p99": float(np.percentile(late, 99)) * 1000,
            "p999": float(np.percentile(late, 99.9)) * 1000,
            "max": float(late.max()) * 1000,
        },
    }


def decode_check(session: LoadSession, since: float, until: float) -> dict[str, Any]:
    """Decode what a full session captured in the window: is it the 440 Hz tone, unbroken?"""
    assert session.capture is not None
    packets = sorted(
        (p for p in session.capture.packets if since <= p.arrival <= until), key=lambda p: p.seq
    )
    if not packets:
        return {"session": session.index, "packets": 0}
    stream = decode(packets)
    pcm = stream.pcm.astype(np.float64)
    rms = float(np.sqrt(np.mean(pcm**2))) if pcm.size else 0.0
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(pcm.size))) if pcm.size > 1 else np.zeros(1)
    peak_hz = float(np.argmax(spectrum) * 24_000 / pcm.size) if pcm.size > 1 else None
    return {
        "session": session.index,
        "packets": len(packets),
        "concealed": stream.concealed,
        "rms_dbfs": round(20 * np.log10(max(rms, 1e-3) / 32768), 1),
        "peak_hz": None if peak_hz is None else round(peak_hz, 1),
    }


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


# --- the run -----------------------------------------------------------------------------------


def start_profiler(pid: int, seconds: float, out: str, tool: str = "py-spy"
                   ) -> subprocess.Popen[bytes] | None:
    """py-spy (collapsed stacks) or perf (``tool``, bench/perf_profile.py) on the server for
    ``seconds``; None when the tool is missing."""
    if tool == "perf":
        if not perf_profile.available():
            return None
        return subprocess.Popen(perf_profile.record_command(pid, seconds, out),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        return None
    with open(out + ".log", "wb") as log:
        return subprocess.Popen(
            [pyspy, "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", "100",
             "-f", "raw", "-o", out, "--nonblocking"],
            stdout=log, stderr=subprocess.STDOUT,
        )


@dataclass
class RecordedWindow:
    """A measured window: the streams' summary and CPU samples around it."""

    summary: dict[str, Any]
    t0: float
    t1: float
    before: dict[int, procstats.CpuSample]  # per watched pid
    after: dict[int, procstats.CpuSample]
    loadgen_cpu_pct: float
    core_busy_pct: dict[str, float]
    rt_minus_mono: float  # time.time() - time.monotonic() at the start

    def cpu_s(self, pid: int) -> float:
        return self.after[pid].cpu_s - self.before[pid].cpu_s


async def recorded_window(
    sessions: Sequence[LoadSession], pids: Sequence[int], seconds: float
) -> RecordedWindow:
    """Record ``seconds`` of the sessions' packets, sampling ``pids``' CPU (and ours, and every
    core's) at both ends."""
    for s in sessions:
        s.stream.reset()
    me = os.getpid()
    before = {pid: procstats.cpu_sample(pid) for pid in pids}
    gen0, cores0 = procstats.cpu_sample(me), procstats.core_times()
    rt_minus_mono = time.time() - time.monotonic()
    t0 = time.monotonic()
    Recorder.on = True
    await asyncio.sleep(seconds)
    Recorder.on = False
    t1 = time.monotonic()
    after = {pid: procstats.cpu_sample(pid) for pid in pids}
    gen1 = procstats.cpu_sample(me)
    return RecordedWindow(
        window_summary(list(sessions), t1 - t0, rt_minus_mono), t0, t1, before, after,
        round(procstats.cpu_percent(gen0, gen1), 1),
        procstats.core_busy_percent(cores0, procstats.core_times()), rt_minus_mono,
    )


async def measure_window(
    sessions: list[LoadSession], server_pid: int, seconds: float, profile: str | None = None,
    profiler_tool: str = "py-spy",
) -> tuple[dict[str, Any], float, float]:
    profiler = start_profiler(server_pid, seconds, profile, profiler_tool) if profile else None
    window = await recorded_window(sessions, [server_pid], seconds)
    summary, t0, t1 = window.summary, window.t0, window.t1
    srv0, srv1 = window.before[server_pid], window.after[server_pid]
    if profiler is not None:
        await asyncio.to_thread(profiler.wait)
        summary["profile"] = profile
    cpu_s = window.cpu_s(server_pid)
    sent = summary.get("packets_sent_est") or 0
    summary.update({
        "seconds": round(t1 - t0, 3),
        "server_cpu_pct": round(procstats.cpu_percent(srv0, srv1), 1),
        "server_cpu_us_per_packet": round(cpu_s * 1e6 / sent, 1) if sent else None,
        # the kernel's share of that (loopback: a send also runs the receiver's UDP input)
        "server_sys_us_per_packet": (
            round((srv1.sys_s - srv0.sys_s) * 1e6 / sent, 1) if sent else None
        ),
        "server_rss_kb": procstats.rss_kb(server_pid),
        "server_threads": procstats.threads(server_pid),
        "loadgen_cpu_pct": window.loadgen_cpu_pct,
        # Busy % of every core, whoever ran there: minus the server's own share, what other
        # processes took from its core (this machine is shared).
        "core_busy_pct": window.core_busy_pct,
        "loadavg": procstats.load_average(),
    })
    return summary, t0, t1


async def wait_speaking(sessions: list[LoadSession], min_packets: int, timeout: float) -> float:
    """Until every session has received ``min_packets`` speech-sized packets; seconds taken."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if all(s.stream.speech_packets >= min_packets for s in sessions):
            break
        await asyncio.sleep(0.1)  # counters are bumped by datagram callbacks: poll them
    return time.monotonic() - started


def _stats(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "median": _pct(values, 50), "p90": _pct(values, 90),
            "max": max(values) if values else None}


async def probe_overhead(sessions: list[LoadSession], text: str) -> dict[str, Any]:
    """Gateway only: a fresh utterance (barge-in) on a few sessions under the full load, each
    with its own text so that it misses the phrase cache and is synthesized and encoded: the
    server's own first-PCM -> first-RTP overhead as it reports it, split into processing (first
    PCM -> first Opus frame queued) and the wait for the stream's next 20 ms slot."""
    started = await bounded(
        list(enumerate(sessions)),
        lambda pair: pair[1].speak(f"{text} (overhead probe {pair[0]})", interrupt=True), 20,
    )
    await asyncio.sleep(1.0)
    total: list[float] = []
    processing: list[float] = []
    slot_wait: list[float] = []
    first_sent: list[float] = []
    cached: list[bool] = []

    async def fetch(pair: tuple[LoadSession, Any]) -> None:
        session, reply = pair
        if isinstance(reply, BaseException) or "location" not in reply:
            return
        async with session.http.get(session.base_url + reply["location"]) as response:
            state = await response.json(content_type=None)
        if state.get("server_overhead_ms") is not None:
            total.append(float(state["server_overhead_ms"]))
        latency = state.get("latency_ms") or {}
        pcm, queued, sent = (latency.get(k) for k in ("first_pcm", "first_frame_queued",
                                                       "first_sent"))
        if None not in (pcm, queued, sent):
            processing.append(float(queued) - float(pcm))
            slot_wait.append(float(sent) - float(queued))
        if sent is not None:
            first_sent.append(float(sent))
        if "cached" in state:
            cached.append(bool(state["cached"]))

    await bounded(list(zip(sessions, started, strict=True)), fetch, 20)
    return {
        "probes": len(sessions),
        "served_from_phrase_cache": sum(cached) if cached else None,
        # first PCM chunk -> first RTP packet (the server's own overhead)
        "first_pcm_to_first_rtp": _stats(total),
        # ... of which: first PCM -> first encoded frame queued, and queued -> sent (slot wait)
        "first_pcm_to_first_frame_queued": _stats(processing),
        "frame_queued_to_sent": _stats(slot_wait),
        # speech request received -> first RTP packet of the new utterance
        "request_to_first_rtp": _stats(first_sent),
    }


def offer_only(profile: str) -> None:
    """Offer one DTLS-SRTP profile (``--srtp-profile``): ``cm`` is what Chromium and the gateway
    settle on (SRTP_AES128_CM_SHA1_80), ``gcm`` aiortc's first (AEAD AES-256-GCM)."""
    import aiortc.rtcdtlstransport as dtls

    chosen = dtls.SRTP_AES128_CM_SHA1_80 if profile == "cm" else dtls.SRTP_AEAD_AES_256_GCM
    dtls.SRTP_PROFILES[:] = [chosen]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    aiortc_compat.restrict_ice_hosts([args.ice_host])
    # each listener's consent checks at its own time, as independent browsers send them (the
    # gateway's come in ten batches a second; a generator's would too, and be cheaper to answer)
    aiortc_compat.consent_clock_grain(0.001)
    if args.srtp_profile != "any":
        offer_only(args.srtp_profile)
    result: dict[str, Any] = {"sessions": args.sessions, "full_sessions": min(args.full,
                                                                                args.sessions)}
    timeout = aiohttp.ClientTimeout(total=args.http_timeout)
    connector = aiohttp.TCPConnector(limit=max(args.batch, 50))
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        base = args.url.rstrip("/")
        offer_path = "/v1/sessions"
        if args.channel:  # listeners of one channel (docs/channels.md), not sessions
            async with http.post(f"{base}/v1/channels", json={"name": args.channel}) as r:
                assert r.status == 201, await r.text()
            offer_path = f"/v1/channels/{args.channel}/whep"
        sessions = [
            LoadSession(i, base, http, full=i < args.full, offer_path=offer_path,
                        loss=args.loss, red=args.red)
            for i in range(args.sessions)
        ]
        try:
            t = time.monotonic()
            oks = await bounded(sessions, lambda s: s.connect(args.connect_timeout), args.batch)
            result["connect_phase_s"] = round(time.monotonic() - t, 2)
            live = [s for s, ok in zip(sessions, oks, strict=True) if ok is True]
            failed = [s for s in sessions if s.connect_ms is None]
            times = [s.connect_ms for s in live if s.connect_ms is not None]
            result["connect"] = {
                "ok": len(live),
                "failed": len(failed),
                "errors": sorted({s.error or "?" for s in failed})[:5],
                "ms_p50": _pct(times, 50),
                "ms_p95": _pct(times, 95),
                "ms_max": max(times) if times else None,
            }
            if not live:
                return result
            await asyncio.sleep(1.0)  # let the last connections' first packets flow
            if args.silent_window > 0:
                # profiled here only when no speaking window follows (--no-speech)
                result["silent"], _, _ = await measure_window(
                    live, args.server_pid, args.silent_window,
                    None if args.speech else args.profile, args.profiler,
                )
            else:
                result["silent"] = {"server_rss_kb": procstats.rss_kb(args.server_pid)}
            if args.speech:
                t = time.monotonic()
                async def speak_all(s: LoadSession) -> None:
                    for _ in range(args.utterances):  # queued back to back: no gap
                        await s.speak(args.text)

                async def speak_channel(_: Any) -> None:
                    for _ in range(args.utterances):
                        async with http.post(f"{base}/v1/channels/{args.channel}/speech",
                                             json={"text": args.text}) as r:
                            assert r.status == 202, await r.text()

                if args.channel:
                    replies = await bounded([None], speak_channel, 1)
                else:
                    replies = await bounded(live, speak_all, 50)
                errors = [r for r in replies if isinstance(r, BaseException)]
                result["speech_requests"] = {
                    "utterances_per_session": args.utterances,
                    "ok": len(replies) - len(errors),
                    "failed": len(errors),
                    "errors": sorted({repr(e)[:160] for e in errors})[:5],
                    "phase_s": round(time.monotonic() - t, 2),
                }
                result["speech_start_s"] = round(
                    await wait_speaking(live, 10, args.settle_timeout), 2
                )
                await asyncio.sleep(1.0)
                result["speaking"], t0, t1 = await measure_window(
                    live, args.server_pid, args.window, args.profile, args.profiler
                )
                result["decode_check"] = [
                    decode_check(s, t0, t1) for s in live if s.capture is not None
                ]
                if args.probe_overhead:
                    probes = live[: args.probe_overhead]
                    result["server_overhead_ms"] = await probe_overhead(probes, args.text)
        finally:
            t = time.monotonic()
            await bounded(sessions, lambda s: s.close(), 50)
            if args.channel:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.delete(f"{base}/v1/channels/{args.channel}") as r:
                        await r.read()
            result["teardown_s"] = round(time.monotonic() - t, 2)
    result["consent"] = aiortc_compat.CONSENT.as_json()  # the generator's own checks
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--ice-host", default="127.0.0.1",
                        help="the address the sessions' ICE gathers (bench.load --veth: the "
                        "far end of its veth pair)")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--channel", metavar="NAME",
                        help="listen to one channel NAME (created, then deleted) over WHEP "
                        "instead of a session each; its speech is said once, on the channel")
    parser.add_argument("--full", type=int, default=2, help="sessions that decrypt and decode")
    parser.add_argument("--batch", type=int, default=20, help="connections set up at a time")
    parser.add_argument("--window", type=float, default=10.0, help="speaking window, s")
    parser.add_argument("--silent-window", type=float, default=4.0,
                        help="window before speech (0: none), s")
    parser.add_argument("--no-speech", dest="speech", action="store_false")
    parser.add_argument("--text", default=LONG_TEXT, help="what every session is asked to say")
    parser.add_argument("--utterances", type=int, default=1,
                        help="speech requests per session, queued back to back")
    parser.add_argument("--probe-overhead", type=int, default=0, metavar="K",
                        help="gateway only: K sessions re-asked for speech to read the server's "
                        "first-PCM -> first-RTP overhead under load")
    parser.add_argument("--loss", type=float, default=0.0,
                        help="drop this share of RTP at each header-only listener and NACK it "
                        "(bench/loadgen_loss.py)")
    parser.add_argument("--red", action="store_true", help="offer RED (RFC 2198) as Chromium")
    parser.add_argument("--srtp-profile", choices=("any", "cm", "gcm"), default="any",
                        help="the DTLS-SRTP profile offered: any (aiortc's list: AES-GCM is "
                        "chosen), cm (AES_CM_128_HMAC_SHA1_80, as Chromium settles on), gcm")
    parser.add_argument("--connect-timeout", type=float, default=30.0)
    parser.add_argument("--settle-timeout", type=float, default=30.0)
    parser.add_argument("--http-timeout", type=float, default=60.0)
    parser.add_argument("--profile", metavar="PATH",
                        help="py-spy the server over the speaking window (collapsed stacks)")
    parser.add_argument("--profiler", choices=("py-spy", "perf"), default="py-spy",
                        help="what --profile runs (perf: native code, bench/perf_profile.py)")
    parser.add_argument("--out", help="write the JSON result here (default: stdout)")
    args = parser.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
