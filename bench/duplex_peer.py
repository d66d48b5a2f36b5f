"""A talking peer for the full-duplex benches and load test: an aiortc peer whose microphone speaks
espeak-ng questions in real time (``RecordedMic``), whose receiver decodes every reply packet as
it arrives (to find the first *audible* one: the gateway sends a keep-alive silence packet
between utterances), and which reads the session's events over SSE. Also: the questions, and a
small word error rate.

Times are ``time.monotonic()`` (CLOCK_MONOTONIC: the same clock in every process of the machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from gateway import aiortc_compat
from gateway.media.opus_codec import FRAME_SAMPLES, OpusFrameDecoder
from gateway.testing.mic_track import RecordedMic
from gateway.testing.spoken_audio import silence, speak, trim

# Questions a voice assistant hears: different words each, no digits, no contractions (so the
# reference text needs no normalisation beyond case and punctuation).
QUESTIONS = [
    "What time is it in London?",
    "Can you help me with my order?",
    "Where is the nearest train station?",
    "How is the weather looking for tomorrow?",
    "Please book a table for two people tonight.",
    "What is the capital city of France?",
    "Could you turn the kitchen lights off?",
    "When does the next bus leave for the airport?",
    "I would like to change my delivery address.",
    "How long does it take to boil an egg?",
    "Tell me a short story about a dragon.",
    "Which movies are playing near me this evening?",
    "Set an alarm for seven in the morning.",
    "What is the best way to learn to swim?",
    "Remind me to call my mother on Sunday.",
    "How far away is the moon from the earth?",
    "Can I return these shoes if they do not fit?",
    "Play some quiet music for reading.",
    "Why is the sky blue during the day?",
    "Send a message to the team about the meeting.",
    "What should I cook for dinner tonight?",
    "Is the museum open on public holidays?",
    "How do I reset my password?",
    "Find me a cheap hotel close to the beach.",
    "What is the difference between a frog and a toad?",
    "Please read me the latest news headlines.",
    "How much does a ticket to the concert cost?",
    "Translate good morning into Spanish.",
    "Who wrote the novel about the white whale?",
    "Cancel my appointment with the dentist.",
]

UPLINK_KEYS = ("received", "lost", "late", "concealed", "underruns", "jitter_ms",
               "target_frames", "depth_frames", "pcm_frames", "playout_delay_ms",
               "playout_delay_p95_ms", "skipped_periods", "clock_stalls", "rephases", "trimmed",
               "dropped", "played")
AUDIBLE_DBFS = -45.0  # a decoded 20 ms frame louder than this is audible reply audio


# --- word error rate ---------------------------------------------------------------------------

def words(text: str) -> list[str]:
    """Lower case, punctuation gone (an apostrophe inside a word stays), hyphens split words."""
    text = text.lower().replace("-", " ")
    return re.findall(r"[a-z0-9]+(?:'[a-z0-9]+)*", text)


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance over words (substitutions + deletions + insertions)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def wer(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Corpus WER of (reference, hypothesis) pairs: total edits / total reference words."""
    edits = sum(edit_distance(words(r), words(h)) for r, h in pairs)
    ref_words = sum(len(words(r)) for r, _ in pairs)
    exact = sum(words(r) == words(h) for r, h in pairs)
    return {"wer": edits / ref_words if ref_words else None, "edits": edits,
            "reference_words": ref_words, "utterances": len(pairs),
            "exact_utterances": exact}


# --- the question audio ------------------------------------------------------------------------

_SPOKEN: dict[str, np.ndarray] = {}


def question_audio(text: str) -> np.ndarray:
    """``text`` spoken by espeak-ng (16 kHz), trimmed: its last sample is the last voiced one,
    so ``RecordedMic.finished_at`` is the end of the user's speech."""
    if text not in _SPOKEN:
        _SPOKEN[text] = trim(speak(text))
    return _SPOKEN[text]


_HANGOVER: dict[str, float | None] = {}


def vad_hangover_ms(text: str, stop_ms: int = 500) -> float | None:
    """Where the gateway's VAD + turn rules (run here, offline, on the clean question audio)
    put the end of the last voiced frame, minus the true end of the speech: Silero's probability
    stays above the release threshold for a window or two after the voice stops. Part of what
    the client sees before the server's turn clock starts."""
    if text not in _HANGOVER:
        from gateway.listen.turns import SpeechStopped, TurnDetector, TurnOptions
        from gateway.listen.vad import SileroVad
        from gateway.testing.spoken_audio import concat, frames

        pcm = question_audio(text)
        lead = 0.3
        vad, detector = SileroVad(), TurnDetector(TurnOptions(stop_ms=stop_ms))
        _HANGOVER[text] = None
        for frame in frames(concat(silence(lead), pcm, silence(stop_ms / 1000 + 0.5))):
            for event in detector.push(frame, vad.probability(frame)):
                if isinstance(event, SpeechStopped):
                    _HANGOVER[text] = (event.at - lead - len(pcm) / 16_000) * 1000
    return _HANGOVER[text]


# --- the reply audio, frame by frame ----------------------------------------------------------

class AudibleTap:
    """Decodes every received RTP packet on arrival (24 kHz Opus, in arrival order, PLC for
    gaps) and remembers when frames were audible; ``wait_audible(after)`` resolves with the
    arrival time of the first audible frame received after ``after``."""

    def __init__(self, threshold_dbfs: float = AUDIBLE_DBFS) -> None:
        self.decoder = OpusFrameDecoder()
        self.threshold = 32768 * 10 ** (threshold_dbfs / 20)
        self.packets = 0
        self.audible: list[float] = []  # arrival times of audible frames (bounded below)
        self.decode_errors = 0
        self.arrivals: dict[int, float] = {}  # 16-bit sequence number -> arrival (recent ones)
        self._last_seq: int | None = None
        self._waiters: list[tuple[float, asyncio.Future[float]]] = []

    def on_packet(self, packet: Any, _arrival_ms: int = 0) -> None:
        now = time.monotonic()
        self.packets += 1
        seq = int(packet.sequence_number)
        self.arrivals[seq] = now
        if len(self.arrivals) > 8192:  # keep the last ~80 s (a dict keeps insertion order)
            for old in list(self.arrivals)[:4096]:
                del self.arrivals[old]
        if self._last_seq is not None:
            gap = (seq - self._last_seq) & 0xFFFF
            if gap >= 0x8000:  # late or duplicate: already concealed
                return
            for _ in range(min(gap - 1, 5)):
                self.decoder.conceal(FRAME_SAMPLES)
        self._last_seq = seq
        try:
            pcm = self.decoder.decode(bytes(packet.payload))
        except Exception:  # a concealment packet or garbage: nothing audible
            self.decode_errors += 1
            return
        if pcm.size and np.sqrt(np.mean(pcm.astype(np.float32) ** 2)) > self.threshold:
            self.audible.append(now)
            if len(self.audible) > 20_000:
                del self.audible[:10_000]
            for item in list(self._waiters):
                after, fut = item
                if now > after and not fut.done():
                    fut.set_result(now)
                    self._waiters.remove(item)

    def first_audible_after(self, after: float) -> float | None:
        return next((t for t in self.audible if t > after), None)

    async def wait_audible(self, after: float, timeout: float) -> float | None:
        found = self.first_audible_after(after)
        if found is not None:
            return found
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        item = (after, fut)
        self._waiters.append(item)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            if item in self._waiters:
                self._waiters.remove(item)


# --- the peer ---------------------------------------------------------------------------------

@dataclass
class TurnResult:
    question: str
    session: int
    spoken_s: float  # length of the question audio
    end_of_speech: float  # RecordedMic.finished_at
    first_audible: float | None = None
    first_packet: float | None = None  # arrival of the reply's first RTP packet (first_seq)
    turns: list[int] = field(default_factory=list)  # the gateway's turn numbers it made
    transcript: str = ""
    server: dict[str, Any] | None = None  # the gateway's turn JSON (the first turn)
    uplink: dict[str, Any] | None = None  # the gateway's uplink receive path stats, after
    error: str | None = None

    @property
    def client_ms(self) -> float | None:
        if self.first_audible is None:
            return None
        return (self.first_audible - self.end_of_speech) * 1000

    @property
    def lead_in_ms(self) -> float | None:
        """The reply's first packet -> its first audible frame (quiet frames Piper starts with)."""
        if self.first_audible is None or self.first_packet is None:
            return None
        return (self.first_audible - self.first_packet) * 1000

    @property
    def uplink_ms(self) -> float | None:
        """What the client sees that the server's turn does not: the mic's last frame sent ->
        the gateway hearing its last voiced frame (network, jitter buffer, playout, and where
        the VAD puts the end), plus the downlink (loopback: ~0). client = uplink + server
        end_of_speech_to_audio + lead-in."""
        server = ((self.server or {}).get("latency_ms") or {}).get("end_of_speech_to_audio")
        if self.client_ms is None or server is None or self.lead_in_ms is None:
            return None
        return self.client_ms - server - self.lead_in_ms

    def as_json(self) -> dict[str, Any]:
        latency = (self.server or {}).get("latency_ms") or {}

        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 1)

        return {
            "session": self.session, "question": self.question,
            "spoken_s": round(self.spoken_s, 2), "turns": self.turns,
            "transcript": self.transcript,
            "end_of_speech_to_audible_ms": None if self.client_ms is None
            else round(self.client_ms, 1),
            "uplink_ms": r(self.uplink_ms), "vad_hangover_ms": r(vad_hangover_ms(self.question)),
            "reply_lead_in_ms": r(self.lead_in_ms),
            "server_ms": latency, "error": self.error, "gateway_uplink": self.uplink,
        }


class Talker:
    """One talking session: ``start()`` connects (sendrecv), ``ask(question)`` speaks one and
    measures the reply."""

    def __init__(self, url: str, http: aiohttp.ClientSession, index: int = 0) -> None:
        self.url, self.http, self.index = url.rstrip("/"), http, index
        self.mic = RecordedMic(silence(0.1), 16_000, lead_silence_s=0.0)
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.transceiver = self.pc.addTransceiver(self.mic, direction="sendrecv")
        self.tap = AudibleTap()
        aiortc_compat.tap_rtp(self.transceiver.receiver, self.tap.on_packet)
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self.changed = asyncio.Event()
        self.location: str | None = None
        self.connect_ms: float | None = None
        self._sse: aiohttp.ClientResponse | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 30.0) -> None:
        started = time.monotonic()
        connected = asyncio.get_running_loop().create_future()

        @self.pc.on("connectionstatechange")
        def on_state() -> None:
            if connected.done():
                return
            if self.pc.connectionState == "connected":
                connected.set_result(True)
            elif self.pc.connectionState in ("failed", "closed"):
                connected.set_exception(ConnectionError(self.pc.connectionState))

        await self.pc.setLocalDescription(await self.pc.createOffer())
        async with self.http.post(
            f"{self.url}/v1/sessions", data=self.pc.localDescription.sdp,
            headers={"Content-Type": "application/sdp"},
        ) as r:
            answer = await r.text()
            if r.status != 201:
                raise ConnectionError(f"HTTP {r.status}: {answer[:200]}")
            self.location = self.url + r.headers["Location"]
        if "a=sendrecv" not in answer:
            raise RuntimeError("the gateway did not answer sendrecv: is it run with --duplex?")
        self._sse = await self.http.get(f"{self.location}/events",
                                        timeout=aiohttp.ClientTimeout(total=None))
        self._reader = asyncio.create_task(self._read())
        await self.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        await asyncio.wait_for(connected, timeout)
        self.connect_ms = (time.monotonic() - started) * 1000

    async def _read(self) -> None:
        assert self._sse is not None
        kind = None
        with contextlib.suppress(aiohttp.ClientError, asyncio.CancelledError):
            async for raw in self._sse.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind is not None:
                    self.events.append((time.monotonic(), kind, json.loads(line[6:])))
                    self.changed.set()

    def of(self, kind: str, since: int = 0) -> list[dict[str, Any]]:
        return [d for _, k, d in self.events[since:] if k == kind]

    async def until(self, predicate: Any, timeout: float) -> bool:
        async def wait() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        try:
            await asyncio.wait_for(wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def state(self) -> dict[str, Any]:
        assert self.location is not None
        async with self.http.get(self.location) as r:
            return dict(await r.json())

    async def stop_speaking(self) -> None:
        assert self.location is not None
        async with self.http.delete(f"{self.location}/speech") as r:
            await r.read()

    async def ask(self, question: str, *, reply_timeout: float = 15.0,
                  stop_reply: bool = True) -> TurnResult:
        """Speak ``question``; wait for the first audible reply frame; read the gateway's turn
        timings; then (``stop_reply``) cut the reply short with DELETE .../speech, so the next
        question need not wait for it to be spoken out."""
        pcm = question_audio(question)
        since = len(self.events)
        self.mic.play(pcm)
        await self.mic.finished.wait()
        assert self.mic.finished_at is not None
        result = TurnResult(question, self.index, len(pcm) / 16_000, self.mic.finished_at)
        result.first_audible = await self.tap.wait_audible(self.mic.finished_at, reply_timeout)
        # the final transcript and the reply event of the turn(s) this question made
        await self.until(lambda: any(t["final"] for t in self.of("transcript", since))
                         and self.of("reply", since), 5.0 if result.first_audible else 1.0)
        result.turns = [e["turn"] for e in self.of("speech_started", since)]
        finals = [t for t in self.of("transcript", since) if t["final"]]
        result.transcript = " ".join(t["text"] for t in finals)
        if result.first_audible is None:
            result.error = "no audible reply" if finals else "no final transcript"
        if result.turns:
            # first_sent is known once the first reply packet went out (before it was heard)
            state = await self.state()
            turns = {t["turn"]: t for t in (state.get("duplex") or {}).get("turns", [])}
            result.server = turns.get(result.turns[0])
            result.uplink = {k: v for k, v in (state.get("uplink") or {}).items()
                             if k in UPLINK_KEYS}
            first = (result.server or {}).get("utterances") or []
            recent = {u["id"]: u for u in (state.get("utterances") or {}).get("recent", [])}
            seq = (recent.get(first[0]) or {}).get("first_seq") if first else None
            if seq is not None:
                result.first_packet = self.tap.arrivals.get(int(seq) & 0xFFFF)
        if stop_reply:
            await self.stop_speaking()
        return result

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self._sse is not None:
            self._sse.close()
        if self.location is not None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.http.delete(self.location) as r:
                    await r.read()
        with contextlib.suppress(Exception):
            await self.pc.close()
