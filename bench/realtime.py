"""The Realtime API's own cost: the same gateway, the same questions, over the Realtime
WebSocket (the official ``openai`` SDK) and over our own duplex API (an aiortc peer), in one run.

- end of speech -> first audible reply: the question (espeak-ng, trimmed) streamed in real time
  as 20 ms ``input_audio_buffer.append`` chunks (silence between questions, as a microphone);
  end of speech = the last voiced chunk sent; first audible = the first delta with a 20 ms
  frame louder than -45 dBFS, as it arrives. The baseline: ``bench.duplex_peer.Talker`` (our
  duplex API over WebRTC) asking the same questions of the same gateway process. Target: the
  WebSocket's median and p90 within 30 ms of the duplex API's (the protocol must cost nothing).
- a text turn -> the first audio delta: ``response.create`` sent -> the first
  ``response.output_audio.delta`` received. The floor: ``POST /v1/audio/speech`` (pcm,
  streamed) of the reply's first clause ("You said:") -> its first body bytes, same voice.
  Target: <= 120 ms with Piper.

The echo agent; the phrase cache off (every clause is synthesized). After each first audible
reply the reply is cut (``response.cancel`` / DELETE .../speech) and a 0.4-0.9 s pause follows.

    python -m bench.realtime [--turns 15] [--voice piper] [--quick]

Results: bench/results/realtime.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import soxr

from bench.common import pct, write_results
from bench.duplex import WARM_UP, gateway
from bench.duplex_peer import AUDIBLE_DBFS, QUESTIONS, AudibleTap, Talker, question_audio

TARGET_DELTA_MS = 30.0
TARGET_FIRST_DELTA_MS = 120.0
CHUNK = 480  # 20 ms of 24 kHz


def stats(values: list[float]) -> dict[str, Any]:
    v = [x for x in values if x is not None]
    if not v:
        return {"n": 0, "median": None, "p90": None}
    return {"n": len(v), "median": round(statistics.median(v), 1), "p90": round(pct(v, 90), 1),
            "min": round(min(v), 1), "max": round(max(v), 1)}


def to24k(pcm16k: np.ndarray) -> np.ndarray:
    out = soxr.resample(pcm16k.astype(np.float32) / 32768, 16_000, 24_000, quality="HQ")
    return np.clip(np.round(out * 32767), -32768, 32767).astype(np.int16)


def audible(delta: str) -> bool:
    pcm = np.frombuffer(base64.b64decode(delta), dtype="<i2").astype(np.float32)
    threshold = 32768 * 10 ** (AUDIBLE_DBFS / 20)
    for at in range(0, len(pcm) - CHUNK + 1, CHUNK):
        if np.sqrt(np.mean(pcm[at:at + CHUNK] ** 2)) > threshold:
            return True
    return False


class WsTalker:
    """An SDK connection with a microphone: 20 ms chunks in real time, silence when idle."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.queue: list[np.ndarray] = []
        self.spoken_at: float | None = None  # the last chunk of the last question sent
        self.first_audible: asyncio.Future[float] | None = None
        self.first_delta: asyncio.Future[float] | None = None
        self.response_id: str | None = None
        self.transcripts: list[str] = []
        self.session_id: str | None = None
        self._tasks = [asyncio.create_task(self._mic()), asyncio.create_task(self._read())]

    async def _mic(self) -> None:
        silence = np.zeros(CHUNK, dtype=np.int16)
        started = time.monotonic()
        n = 0
        while True:
            chunk = silence
            last = False
            if self.queue:
                speech = self.queue[0]
                chunk, self.queue[0] = speech[:CHUNK], speech[CHUNK:]
                if not self.queue[0].size:
                    self.queue.pop(0)
                    last = True
                if chunk.size < CHUNK:
                    chunk = np.concatenate((chunk, silence[: CHUNK - chunk.size]))
            await self.conn.input_audio_buffer.append(
                audio=base64.b64encode(chunk.astype("<i2").tobytes()).decode())
            if last:
                self.spoken_at = time.monotonic()
            n += 1
            await asyncio.sleep(max(0.0, started + n * 0.02 - time.monotonic()))

    async def _read(self) -> None:
        async for event in self.conn:
            now = time.monotonic()
            if event.type == "response.created":
                self.response_id = event.response.id
            elif event.type == "response.output_audio.delta":
                if self.first_delta is not None and not self.first_delta.done():
                    self.first_delta.set_result(now)
                if self.first_audible is not None and not self.first_audible.done() \
                        and audible(event.delta):
                    self.first_audible.set_result(now)
            elif event.type == "session.created":
                self.session_id = event.session.id
            elif event.type == "conversation.item.input_audio_transcription.completed":
                self.transcripts.append(event.transcript)

    async def ask(self, question: str, timeout: float = 15.0) -> float | None:
        loop = asyncio.get_running_loop()
        self.first_audible = loop.create_future()
        self.spoken_at = None
        self.queue.append(to24k(question_audio(question)))
        try:
            heard = await asyncio.wait_for(self.first_audible, timeout)
        except TimeoutError:
            return None
        assert self.spoken_at is not None
        with contextlib.suppress(Exception):
            await self.conn.response.cancel()
        return (heard - self.spoken_at) * 1000

    async def text_turn(self, text: str, timeout: float = 15.0) -> float | None:
        self.first_delta = asyncio.get_running_loop().create_future()
        await self.conn.conversation.item.create(item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        sent = time.monotonic()
        await self.conn.response.create()
        try:
            got = await asyncio.wait_for(self.first_delta, timeout)
        except TimeoutError:
            return None
        with contextlib.suppress(Exception):
            await self.conn.response.cancel()
        return (got - sent) * 1000

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.conn.close()


class CallTalker:
    """A Realtime WebRTC call (``client.realtime.calls.create``): an aiortc peer whose
    microphone speaks the questions, its reply decoded packet by packet (``AudibleTap``)."""

    def __init__(self) -> None:
        from aiortc import RTCConfiguration, RTCPeerConnection

        from gateway import aiortc_compat
        from gateway.testing.mic_track import RecordedMic
        from gateway.testing.spoken_audio import silence

        self.mic = RecordedMic(silence(0.1), 16_000, lead_silence_s=0.0)
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.transceiver = self.pc.addTransceiver(self.mic, direction="sendrecv")
        self.channel = self.pc.createDataChannel("oai-events")
        self.tap = AudibleTap()
        aiortc_compat.tap_rtp(self.transceiver.receiver, self.tap.on_packet)
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)

    async def start(self, sdk: Any) -> None:
        from aiortc import RTCSessionDescription

        await self.pc.setLocalDescription(await self.pc.createOffer())
        answer = await sdk.realtime.calls.create(sdp=self.pc.localDescription.sdp,
                                                 session={"type": "realtime"})
        await self.pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
        await asyncio.wait_for(self.opened.wait(), 15)

    async def ask(self, question: str, timeout: float = 15.0) -> float | None:
        self.mic.play(question_audio(question))
        await self.mic.finished.wait()
        assert self.mic.finished_at is not None
        heard = await self.tap.wait_audible(self.mic.finished_at, timeout)
        if self.channel.readyState == "open":
            self.channel.send('{"type": "response.cancel"}')
        return None if heard is None else (heard - self.mic.finished_at) * 1000

    async def close(self) -> None:
        await self.pc.close()


async def speech_floor(url: str, http: aiohttp.ClientSession, voice: str) -> float:
    sent = time.monotonic()
    async with http.post(f"{url}/v1/audio/speech", json={
            "model": "tts-1", "input": "You said:", "voice": voice,
            "response_format": "pcm"}) as r:
        assert r.status == 200, await r.text()
        await r.content.readany()
        first = time.monotonic()
        await r.read()
    return (first - sent) * 1000


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import openai

    rng = random.Random(7)
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.turns)]
    tmp = Path(tempfile.mkdtemp(prefix="bench-realtime-"))
    async with contextlib.AsyncExitStack() as stack:
        url, _proc = await stack.enter_async_context(gateway("echo", args, tmp, "realtime"))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)

        # the duplex API (the baseline), then the Realtime WebSocket, alternating per question
        talker = Talker(url, http)
        await talker.start()
        stack.push_async_callback(talker.close)
        conn = await sdk.realtime.connect(model="gpt-realtime", max_retries=0).enter()
        ws = WsTalker(conn)
        stack.push_async_callback(ws.close)
        call = CallTalker()
        await call.start(sdk)
        stack.push_async_callback(call.close)
        await talker.ask(WARM_UP)
        await ws.ask(WARM_UP)
        await call.ask(WARM_UP)
        duplex_ms: list[float] = []
        ws_ms: list[float] = []
        call_ms: list[float] = []
        for i, q in enumerate(questions):
            row = await talker.ask(q)
            if row.client_ms is not None:
                duplex_ms.append(row.client_ms)
            await asyncio.sleep(rng.uniform(0.4, 0.9))
            got = await ws.ask(q)
            if got is not None:
                ws_ms.append(got)
            await asyncio.sleep(rng.uniform(0.4, 0.9))
            on_call = await call.ask(q)
            if on_call is not None:
                call_ms.append(on_call)
            await asyncio.sleep(rng.uniform(0.4, 0.9))
            print(f"  {i + 1:>2}/{len(questions)} duplex {row.client_ms or float('nan'):6.0f} ms"
                  f"  realtime ws {got or float('nan'):6.0f} ms"
                  f"  realtime call {on_call or float('nan'):6.0f} ms  {q!r}", flush=True)

        async with http.get(f"{url}/v1/sessions/{ws.session_id}") as r:
            engine = (await r.json())["realtime"]
        prepared = {k: engine[k] for k in ("replies_prepared", "replies_prepared_used")}
        # text turns: response.create -> first audio delta, beside the speech API's floor
        await conn.session.update(session={"type": "realtime",
                                           "audio": {"input": {"turn_detection": None}}})
        await asyncio.sleep(0.5)
        first_delta: list[float] = []
        floor: list[float] = []
        for i in range(args.turns):
            text = questions[i].rstrip("?")
            got = await ws.text_turn(text)
            if got is not None:
                first_delta.append(got)
            floor.append(await speech_floor(url, http, "alloy"))  # the default voice
            await asyncio.sleep(0.3)
    result = {
        "turns": args.turns, "voice": args.voice, "agent": "echo",
        "end_of_speech_to_audible_ms": {"duplex_api": stats(duplex_ms),
                                        "realtime_ws": stats(ws_ms),
                                        "realtime_call": stats(call_ms)},
        "text_turn_first_delta_ms": {"realtime_ws": stats(first_delta),
                                     "speech_api_floor": stats(floor)},
        "targets": {"ws_minus_duplex_ms": TARGET_DELTA_MS,
                    "first_delta_ms": TARGET_FIRST_DELTA_MS},
        "transcripts": ws.transcripts[-5:],
        "realtime_preemptive_replies": prepared,
        "raw": {"duplex_ms": duplex_ms, "ws_ms": ws_ms, "call_ms": call_ms,
                "first_delta_ms": first_delta, "floor_ms": floor},
    }
    return result


def report(r: dict[str, Any]) -> None:
    e, t = r["end_of_speech_to_audible_ms"], r["text_turn_first_delta_ms"]
    d, w, c = e["duplex_api"], e["realtime_ws"], e["realtime_call"]

    def gap(k: str, x: dict[str, Any]) -> str:
        return "-" if d[k] is None or x[k] is None else f"{x[k] - d[k]:+.0f}"

    print(f"\nend of speech -> first audible reply (ms; {r['voice']}, echo agent)")
    print(f"{'':<22}{'n':>4}{'median':>9}{'p90':>9}")
    print(f"{'duplex API (WebRTC)':<22}{d['n']:>4}{d['median'] or 0:>9.0f}{d['p90'] or 0:>9.0f}")
    print(f"{'Realtime WebSocket':<22}{w['n']:>4}{w['median'] or 0:>9.0f}{w['p90'] or 0:>9.0f}")
    print(f"{'  difference':<22}{'':>4}{gap('median', w):>9}{gap('p90', w):>9}   target "
          f"within {TARGET_DELTA_MS:.0f} ms")
    print(f"{'Realtime call (WebRTC)':<22}{c['n']:>4}{c['median'] or 0:>9.0f}"
          f"{c['p90'] or 0:>9.0f}")
    print(f"{'  difference':<22}{'':>4}{gap('median', c):>9}{gap('p90', c):>9}   target "
          f"within {TARGET_DELTA_MS:.0f} ms")
    f, s = t["realtime_ws"], t["speech_api_floor"]
    print("\ntext turn: response.create -> first audio delta (ms)")
    print(f"{'Realtime WebSocket':<22}{f['n']:>4}{f['median'] or 0:>9.0f}{f['p90'] or 0:>9.0f}"
          f"   target <= {TARGET_FIRST_DELTA_MS:.0f}")
    print(f"{'speech API first byte':<22}{s['n']:>4}{s['median'] or 0:>9.0f}{s['p90'] or 0:>9.0f}"
          "   (the floor: the first clause's synthesis)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=15)
    p.add_argument("--voice", default="piper")
    p.add_argument("--phrase-cache", action="store_true")
    p.add_argument("--gateway-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--quick", action="store_true", help="3 turns")
    args = p.parse_args(argv)
    if args.quick:
        args.turns = 3
    result = asyncio.run(run(args))
    report(result)
    path = write_results("realtime", result)
    print(f"\nwrote {path}")
    return result


if __name__ == "__main__":
    main()
