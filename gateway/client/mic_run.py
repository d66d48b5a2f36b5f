"""``python -m gateway.client --url ... --mic question.wav``: talk to a full-duplex gateway.

The WAV (any rate, any number of channels, 8/16/24/32-bit PCM) is mixed down to mono, resampled
to 48 kHz (libsoxr) and spoken into a sendrecv session in real time as its microphone
(``RecordedMic``: aiortc's Opus encoder, as a browser's), then silence, so the gateway's VAD sees
the speech end. The reply plays through our receive path as ``--text`` replies do (written to
``--out``). The session's events come over SSE (``GET /v1/sessions/{id}/events``): the run ends
once every turn the gateway heard is answered (``reply_done``), failed (``error``) or had
nothing to answer (an empty final transcript), and the reply's speech has played out. It prints
the final transcript, the reply text and where the time went: the gateway's split of the turn
(endpointing wait, ASR, agent first text, TTS first audio: ``GET /v1/sessions/{id}``) and, seen
from here, the end of the WAV's speech (its last sample above -50 dBFS, as it left the
microphone) -> the reply's first RTP packet, and -> its first audible frame played.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import soxr

from gateway import aiortc_compat
from gateway.agent.sse import SseParser
from gateway.client import receive_options
from gateway.client.first_audio import FirstAudible
from gateway.client.peer import GatewayClient
from gateway.client.wav_sink import WavSink
from gateway.testing.mic_track import RecordedMic

UPLINK_RATE = 48_000  # what the Opus uplink carries
SPEECH_DBFS = -50.0  # a sample louder than this is (the end of) speech
FINAL_UTTERANCE_STATES = ("done", "interrupted", "failed")
_TAIL_PERIODS = 10


# --- the WAV -------------------------------------------------------------------------------------

def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """A PCM WAV file as float32 mono in [-1, 1] (channels averaged) and its sample rate."""
    with wave.open(str(path), "rb") as wav:
        channels, width, rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
        raw = wav.readframes(wav.getnframes())
    if width == 1:  # unsigned 8-bit
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 3:  # 24-bit little-endian: sign-extend into int32
        b = np.frombuffer(raw[: len(raw) // 3 * 3], dtype=np.uint8).reshape(-1, 3)
        as32 = (b[:, 0].astype(np.int32) | (b[:, 1].astype(np.int32) << 8)
                | (b[:, 2].astype(np.int32) << 16))
        samples = ((as32 ^ 0x800000) - 0x800000).astype(np.float32) / 8_388_608.0
    elif width == 4:
        samples = np.frombuffer(raw, dtype="<i4").astype(np.float32) / 2_147_483_648.0
    else:
        raise ValueError(f"{path}: {8 * width}-bit samples are not supported")
    frames = samples[: len(samples) // channels * channels].reshape(-1, channels)
    return frames.mean(axis=1, dtype=np.float32), rate


def uplink_pcm(samples: np.ndarray, rate: int) -> np.ndarray:
    """float mono at ``rate`` -> int16 mono at 48 kHz (the Opus uplink's rate)."""
    if rate != UPLINK_RATE:
        samples = soxr.resample(samples, rate, UPLINK_RATE, quality="HQ")
    return np.clip(np.round(np.asarray(samples) * 32767.0), -32768, 32767).astype(np.int16)


def speech_end(pcm: np.ndarray, threshold_dbfs: float = SPEECH_DBFS) -> int | None:
    """The sample index just past the last sample louder than ``threshold_dbfs``."""
    threshold = 32768.0 * 10 ** (threshold_dbfs / 20)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > threshold)
    return int(loud[-1]) + 1 if loud.size else None


# --- the session's events --------------------------------------------------------------------

class SessionEvents:
    """The session's events, read over SSE into ``events`` as (arrival, type, data)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self._changed = asyncio.Event()
        self._response: aiohttp.ClientResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self.ended = False

    async def open(self, http: aiohttp.ClientSession, session_url: str) -> None:
        """Subscribe: every event published after this returns is seen."""
        response = await http.get(f"{session_url}/events",
                                  timeout=aiohttp.ClientTimeout(total=None))
        if response.status != 200:
            body = await response.text()
            response.release()
            raise ConnectionError(f"events: HTTP {response.status}: {body[:200]}")
        self._response = response
        self._reader = asyncio.create_task(self._read(response), name="session-events")

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        parser = SseParser()
        try:
            async for line in response.content:
                event = parser.feed_line(line)
                if event is not None:
                    self.events.append((time.monotonic(), event.event, json.loads(event.data)))
                    self._changed.set()
        except aiohttp.ClientError:
            pass
        finally:
            self.ended = True
            self._changed.set()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for _, k, data in self.events if k == kind]

    async def until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait for ``predicate()`` to hold, re-checked at each event; TimeoutError if not."""
        async def wait() -> None:
            while not predicate():
                if self.ended:
                    raise ConnectionError("the session's event stream ended")
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._response is not None:
            self._response.close()


def turns_answered(events: SessionEvents) -> bool:
    """Every turn heard has ended and is answered (or failed, or had no words), and every
    reply utterance has reached a final state."""
    started = {e["turn"] for e in events.of("speech_started")}
    stopped = {e["turn"] for e in events.of("speech_stopped")}
    if not started or started != stopped:
        return False
    done = {e["turn"] for e in events.of("reply_done")}
    done |= {e["turn"] for e in events.of("error") if "turn" in e}
    done |= {t["turn"] for t in events.of("transcript") if t["final"] and not t["text"].strip()}
    if not started <= done:
        return False
    ended = {u["id"] for u in events.of("utterance") if u["state"] in FINAL_UTTERANCE_STATES}
    ended |= {e["utterance"] for e in events.of("interrupted")}
    replies = {r["utterance"] for r in events.of("reply")}
    return replies <= ended


# --- the run ---------------------------------------------------------------------------------

async def run_mic(args: Any) -> dict[str, Any]:
    samples, rate = read_wav(args.mic)
    pcm = uplink_pcm(samples, rate)
    end = speech_end(pcm)
    if end is None:
        raise ValueError(f"{args.mic}: no sound louder than {SPEECH_DBFS:g} dBFS in it")
    aiortc_compat.restrict_ice_hosts([h for h in args.ice_hosts.split(",") if h])
    mic = RecordedMic(np.zeros(UPLINK_RATE // 10, dtype=np.int16), UPLINK_RATE,
                      lead_silence_s=0.0)  # silence until the session is ready to hear
    client = GatewayClient(args.url, receive_path=receive_options.receive_config(args),
                           capture=True, red=not args.no_red)
    assert client.receive is not None
    sink = WavSink(args.out)
    heard = FirstAudible()
    client.receive.pcm.on_frame(sink)
    client.receive.pcm.on_frame(heard)
    events = SessionEvents()
    try:
        await client.connect(mic=mic)
        if "a=sendrecv" not in (client.answer_sdp or ""):
            raise ConnectionError("the gateway did not answer sendrecv: run it with --duplex")
        assert client.session_url is not None
        await events.open(client.http, client.session_url)
        mic.play(pcm)
        await mic.finished.wait()
        assert mic.finished_at is not None
        # the frame holding the last sample left at finished_at: the speech ended before it
        spoken_end = mic.finished_at - (len(pcm) - end) / UPLINK_RATE
        heard.since = spoken_end
        try:
            await events.until(lambda: turns_answered(events), args.timeout)
        except TimeoutError:
            raise TimeoutError(_unanswered(events, args.timeout)) from None
        state = await client.state()
        last = _last_utterance(events)
        if last is not None:
            played = await client.wait_utterance(last, timeout=args.timeout)
            if played.get("last_seq") is not None:
                await asyncio.wait_for(client.receive.wait_played(played["last_seq"]), 10.0)
            await asyncio.wait_for(client.receive.wait_periods(_TAIL_PERIODS), 10.0)
    finally:
        await events.close()
        mic.stop()
        await client.close()
        sink.close()
    return _report(args, events, state, client, heard, spoken_end, pcm, end)


def _unanswered(events: SessionEvents, timeout: float) -> str:
    if not events.of("speech_started"):
        return f"the gateway heard no speech within {timeout:g} s of the WAV's end"
    return (f"no complete answer within {timeout:g} s; events: "
            + ", ".join(k for _, k, _ in events.events))


def _last_utterance(events: SessionEvents) -> str | None:
    replies = events.of("reply")
    return replies[-1]["utterance"] if replies else None


def _report(args: Any, events: SessionEvents, state: dict[str, Any], client: GatewayClient,
            heard: FirstAudible, spoken_end: float, pcm: np.ndarray,
            end: int) -> dict[str, Any]:
    heard_turns = sorted({e["turn"] for e in events.of("speech_started")})
    by_number = {t["turn"]: t for t in (state.get("duplex") or {}).get("turns", [])}
    turns = []
    for number in heard_turns:
        turn = by_number.get(number, {})
        finals = [t["text"] for t in events.of("transcript") if t["final"] and t["turn"] == number]
        turns.append({
            "turn": number,
            "transcript": " ".join(finals).strip(),
            "reply": " ".join(r["text"] for r in events.of("reply") if r["turn"] == number),
            "latency_ms": turn.get("latency_ms"),
            "asr": turn.get("asr"),
            "error": next((e["message"] for e in events.of("error") if e.get("turn") == number),
                          None),
        })
    # the reply to the last turn, seen from here
    recent = {u["id"]: u for u in (state.get("utterances") or {}).get("recent", [])}
    last_turn = by_number.get(heard_turns[-1], {}) if heard_turns else {}
    first_id = (last_turn.get("utterances") or [None])[0]
    first_seq = (recent.get(first_id) or {}).get("first_seq") if first_id else None
    first_packet = None
    if first_seq is not None:
        first_packet = next((p.arrival for p in client.capture.packets
                             if p.seq & 0xFFFF == int(first_seq) & 0xFFFF
                             and p.arrival >= spoken_end), None)

    def ms(t: float | None) -> float | None:
        return None if t is None else round((t - spoken_end) * 1000, 1)

    return {
        "wav": str(args.mic), "speech_s": round(end / UPLINK_RATE, 2),
        "wav_s": round(len(pcm) / UPLINK_RATE, 2),
        "transcript": " ".join(t["transcript"] for t in turns if t["transcript"]),
        "reply": " ".join(t["reply"] for t in turns if t["reply"]),
        "turns": turns,
        "end_of_speech_to_first_packet_ms": ms(first_packet),
        "end_of_speech_to_first_audible_played_ms": (
            None if heard.frame is None else ms(heard.frame.at)),
        "connect_ms": round(client.connect_ms or 0, 1),
        "out": args.out,
        "uplink": {k: v for k, v in (state.get("uplink") or {}).items()
                   if k in ("received", "lost", "concealed", "jitter_ms", "playout_delay_ms")},
    }


def print_report(stats: dict[str, Any]) -> None:
    print(f"transcript: {stats['transcript']}")
    print(f"reply:      {stats['reply']}")
    labels = (("endpointing", "endpointing wait"), ("asr", "ASR"),
              ("agent_first_text", "agent first text"), ("tts_first_audio", "TTS first audio"),
              ("end_of_speech_to_audio", "server: end of speech -> first packet sent"))
    for turn in stats["turns"]:
        latency = turn["latency_ms"] or {}
        asr = turn.get("asr") or {}
        print(f"turn {turn['turn']}: {turn['transcript']!r}"
              + (f" (error: {turn['error']})" if turn["error"] else ""))
        for key, label in labels:
            value = latency.get(key)
            note = " (speculative decode)" if key == "asr" and asr.get("speculative") else ""
            print(f"  {label:<44} {'-' if value is None else f'{value:7.1f} ms'}{note}")
    for key, label in (("end_of_speech_to_first_packet_ms",
                        "client: end of speech -> first reply packet"),
                       ("end_of_speech_to_first_audible_played_ms",
                        "client: end of speech -> first audible played")):
        value = stats[key]
        print(f"  {label:<44} {'-' if value is None else f'{value:7.1f} ms'}")
    print(f"reply audio: {stats['out']}")
