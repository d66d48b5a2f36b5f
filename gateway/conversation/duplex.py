"""Full duplex: the user's microphone -> VAD -> Whisper -> the agent -> speech, with barge-in.

One ``Duplex`` per talking session. ``hear`` takes each 20 ms of the uplink as the receive path
plays it (24 kHz), resamples it to 16 kHz (libsoxr) and pushes it to the ``Listener`` (VAD and
turns inline, ~0.1 ms a frame; Whisper on its own bounded pool, off the event loop). A final
transcript starts the reply: the agent's streamed text is cut into clauses and each clause is
said as soon as it is complete. Talking over a reply pauses its audio after ``pause_ms`` of voice
(session/barge_in.py: ``reply_paused``); once the user has talked for the barge-in minimum (300
ms by default) or said words that are neither fillers nor the reply's own echo, the reply stops
-- the agent's stream (and its upstream request) is closed, the speaker's queue emptied and its
synthesis cancelled, the utterances end ``interrupted`` (with what was heard of them,
session/heard.py) -- and the new turn is heard; if not (a cough, a "hm", the echo) it resumes
where it paused (``reply_resumed``) and that overlapping turn is not answered. The agent's
history keeps, of each reply, what the listener heard (``heard_text``), recorded once the reply
has played or been cut. Every step is an event (session/events.py) and every turn keeps its
timings (``turns``).

Preemptive reply (``preempt``, on by default; LiveKit Agents calls it preemptive generation):
the speculative final transcript arrives while the turn's end is still awaited (the user has
been quiet ``asr_speculate_ms``, not yet ``turn_silence_ms``); the agent is asked at once and
its first clause rendered (synthesized and encoded, ``Speaker.prerender``), but nothing is
said or published. If the turn ends on that transcript, the reply goes on from there: the
first packet leaves as soon as the turn is over. If the user speaks on, the prepared reply is
dropped (the agent's stream closed, the rendering cancelled): an agent call and a synthesis
wasted, never a word said early.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.agent.base import Agent, AgentError, History
from gateway.conversation.barge_in import PauseGate, words_heard
from gateway.conversation.continuation import CONTINUE_MS, continues, joined
from gateway.conversation.conversation import Conversation
from gateway.conversation.paused_words import PausedWords, paused_words_from
from gateway.listen.asr import Transcript
from gateway.listen.listener import (
    SPECULATE_MS,
    FinalTranscript,
    Listener,
    PartialTranscript,
    SegmentSkipped,
    TentativeTranscript,
    TranscriptionFailed,
)
from gateway.listen.turn_loader import load_turn_model
from gateway.listen.turn_model import TurnModel
from gateway.listen.turns import (
    BargeIn,
    SemanticOptions,
    SpeechStarted,
    SpeechStopped,
    TurnOptions,
)
from gateway.media.pcm_c import sum_squares
from gateway.media.resample import Resampler
from gateway.receive.receive_config import ReceivePathConfig
from gateway.runtime.defaults import default_of
from gateway.speech.prerender import Prerender
from gateway.speech.speaker import Speaker, SpeechQueueFull
from gateway.speech.utterance import FINAL_STATES, Utterance
from gateway.text.streaming import stream_clauses
from gateway.tts.base import Synthesizer

log = logging.getLogger(__name__)
UPLINK_RATE, ASR_RATE, ASR_FRAME = 24_000, 16_000, 320
#: the uplink's capture times are followed to within this (a resampled frame comes a period
#: early or late; a stall or skipped periods move them more) ...
CLOCK_JUMP_S = 0.045
CLOCK_JUMPS_KEPT = 16  # ... and this many jumps are remembered

#: The microphone's receive path (session/webrtc_leg.py). A shallow jitter buffer: what is heard
#: feeds VAD and ASR, not a loudspeaker, and every frame of depth delays endpointing and
#: barge-in (the client's default is 2-5 + 1). After a stall (a loop or CPU stall delivers a
#: backlog of packets together) it catches up in the next silence, a frame a period: a silent
#: frame is cut in every period that starts over the target (the client waits 25 periods: a
#: loudspeaker would click). Cutting silence is harmless here -- the turn's end then comes as
#: it would have without the stall, not a backlog later -- and speech is not cut (the
#: recogniser would lose words; the client's 5 s force-trim stays). No burst floor: a
#: loudspeaker's buffer deepens under bursty loss to wait for repairs (up to 240 ms), but
#: here depth is endpointing delay; a repair too late for the shallow buffer is concealed.
UPLINK_RECEIVE = ReceivePathConfig(pcm_ring_frames=0, min_frames=1, max_frames=3,
                                   trim_after_periods=1, burst_depth=False)


@dataclass(eq=False)
class Turn:
    number: int
    started_at: float  # monotonic: the user's first voiced frame
    stopped_at: float | None = None  # the last voiced frame
    detected_at: float | None = None  # when the turn was declared over (endpointing)
    transcript_at: float | None = None
    text: str = ""
    asr_decode_s: float | None = None  # the recogniser's own time for the final
    asr_wait_s: float | None = None  # ... and its queue wait (behind other decodes)
    speculative: bool = False  # the final was decoded before the turn ended
    prepared: bool = False  # the reply was prepared on it before the turn ended
    first_text_at: float | None = None  # the agent's first clause
    replied_at: float | None = None  # the agent's reply complete (every clause said)
    reply: list[str] = field(default_factory=list)
    utterances: list[Utterance] = field(default_factory=list)
    spoken: list[tuple[str, Utterance]] = field(default_factory=list)  # clause, its utterance
    interrupted: bool = False
    continues: int | None = None  # began soon enough after this turn to continue it
    superseded: bool = False  # continued by a later turn: its reply kept out of the history
    heard_text: str | None = None  # what the listener heard of the reply (once committed)
    heard_ms: int | None = None
    error: str | None = None

    @property
    def first_audio_at(self) -> float | None:
        sent = [u.first_sent_at for u in self.utterances if u.first_sent_at is not None]
        return min(sent) if sent else None

    def as_json(self) -> dict[str, Any]:
        def ms(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round((b - a) * 1000, 1)

        end = self.stopped_at
        return {
            "turn": self.number, "text": self.text, "reply": " ".join(self.reply),
            "utterances": [u.id for u in self.utterances], "interrupted": self.interrupted,
            "continues": self.continues, "superseded": self.superseded,
            "heard_text": self.heard_text, "heard_ms": self.heard_ms,
            "error": self.error, "reply_done": self.replied_at is not None,
            "asr": {"speculative": self.speculative,
                    "decode_ms": ms(0.0, self.asr_decode_s), "wait_ms": ms(0.0, self.asr_wait_s)},
            "reply_prepared": self.prepared,
            "latency_ms": {
                "endpointing": ms(end, self.detected_at),
                "asr": ms(self.detected_at, self.transcript_at),
                "agent_first_text": ms(self.transcript_at, self.first_text_at),
                "tts_first_audio": ms(self.first_text_at, self.first_audio_at),
                "end_of_speech_to_audio": ms(end, self.first_audio_at),
            },
        }


@dataclass(eq=False)
class PreparedReply:
    """A reply begun on a tentative transcript: the agent's clause stream, its first clause
    and that clause's rendering, held until the turn ends on the same text."""

    turn: int
    text: str
    clauses: AsyncIterator[str]
    task: asyncio.Task[None] | None = None  # reads the first clause, starts its rendering
    first: str | None = None
    first_at: float | None = None
    prerender: Prerender | None = None

    def take_prerender(self) -> Prerender | None:
        prerender, self.prerender = self.prerender, None
        return prerender

    async def read_first(self, speaker: Speaker, voice: Synthesizer) -> None:
        """Read the reply's first clause and start rendering it (``speaker.prerender``):
        nothing is said or sent until the turn ends on this text."""
        try:
            self.first = await anext(aiter(self.clauses))
        except StopAsyncIteration:
            return
        self.first_at = time.monotonic()
        self.prerender = speaker.prerender(self.first, voice)

    async def discard(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        aclose = getattr(self.clauses, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        prerender = self.take_prerender()
        if prerender is not None:
            prerender.cancel()


class Duplex:
    def __init__(
        self,
        conversation: Conversation,
        listener: Listener,
        agent: Agent,
        voice: Synthesizer,
        history_turns: int = 20,
        max_turns_kept: int = 32,
        preempt: bool = True,
        pause_ms: int = 100,
        backoff_on_first_echo: bool = False,
        continue_ms: int = CONTINUE_MS,
        uplink_rate: int = UPLINK_RATE,
    ) -> None:
        """``uplink_rate``: the rate of the PCM ``hear`` is given (24 kHz, resampled to the
        listener's 16 kHz by libsoxr; or 16 kHz, an uplink decoded at that rate: heard as
        it comes)."""
        self.conversation = conversation
        self.continue_ms = continue_ms  # 0: a turn never continues the one before
        self._level_dbfs = -120.0  # the last frame heard (RMS), for the pause gate
        self._pausing = pause_ms > 0  # 0: the old rule, the barge-in minimum cuts at once
        self._gate = PauseGate(pause_ms=pause_ms or 100,
                               backoff_on_first_lesson=backoff_on_first_echo)
        self._overlap: set[int] = set()  # turns begun over a reply, not (yet) a barge-in
        #: words heard while the reply is paused (the only stretch without its echo) confirm
        self._paused_words = PausedWords(listener.recognizer, self._paused_text,
                                         self._paused_checked)
        #: the last pause: (the user's first voiced frame, when the playout was held)
        self.last_pause: tuple[float, float] | None = None
        self.preempt = preempt
        self._prepared: PreparedReply | None = None
        self._discarding: set[asyncio.Task[None]] = set()  # prepared replies being dropped
        self._committing: set[asyncio.Task[None]] = set()  # replies playing, to be recorded
        self.replies_prepared = 0  # replies begun on a tentative transcript
        self.replies_prepared_used = 0  # ... that the turn's final confirmed
        self.listener = listener
        self.agent = agent
        self.voice = voice
        self.events = conversation.events
        self.history = History(max_messages=2 * history_turns)
        self.turns: deque[Turn] = deque(maxlen=max_turns_kept)
        self.uplink_rate = uplink_rate
        self._resampler = Resampler(uplink_rate, ASR_RATE)  # (passes 16 kHz through)
        self._pending = np.zeros(0, dtype=np.int16)
        #: capture time minus listener stream time (``PcmFrame.at``), from a stream time on:
        #: one entry per jump of the uplink clock (a stall, skipped periods), not per frame
        self._offsets: deque[tuple[float, float]] = deque(maxlen=CLOCK_JUMPS_KEPT)
        self._last_at = 0.0  # the last frame's capture time
        self._reply: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.frames_heard = 0
        self.barge_ins = 0
        self._closed = False
        #: the last barge-in: (the user's first voiced frame, when the reply was cut)
        self.last_barge_in: tuple[float, float] | None = None

    # -- hearing (called for every 20 ms the uplink plays: keep it cheap) --------------------
    def hear(self, pcm24k: np.ndarray, at: float | None = None) -> None:
        """One uplink frame and when it was captured (``PcmFrame.at``; now if not given), at
        ``uplink_rate``: a 16 kHz period is the listener's frame as it is."""
        if self._closed:
            return
        at = time.monotonic() if at is None else at
        if pcm24k.size == ASR_FRAME and self.uplink_rate == ASR_RATE and not self._pending.size:
            self._hear_frame(pcm24k, at)  # (an uplink decoded at 16 kHz: every period)
            return
        pcm = self._resampler.push(pcm24k)
        if not pcm.size:  # (libsoxr hands out blocks: every other 20 ms brings none)
            return
        if self._pending.size:
            pcm = np.concatenate((self._pending, pcm))
        cut = pcm.size - pcm.size % ASR_FRAME
        self._pending = pcm[cut:]
        for start in range(0, cut, ASR_FRAME):
            self._hear_frame(pcm[start : start + ASR_FRAME], at)

    def _hear_frame(self, frame: np.ndarray, at: float) -> None:
        """One 20 ms frame at 16 kHz to the listener, the pause gate and barge-in."""
        self.frames_heard += 1
        self._clock(self.frames_heard * ASR_FRAME / ASR_RATE, at)
        listener = self.listener
        for event in listener.push(frame):
            if isinstance(event, SpeechStarted) and self.speaking:
                self._overlap.add(listener.turn)
            elif isinstance(event, BargeIn) and self.speaking and not self._pausing:
                self.last_barge_in = (self._mono(event.started_at), time.monotonic())
                self.barge_in()
        if self._pausing:
            # the mean square from the exact sum of squares (media/pcm_c.py: in C where
            # built), the value ``np.mean(np.square(frame, dtype=np.float64))`` gives; the
            # VAD's gate measured this very frame (listen/vad.py): its sum, not a second one
            vad = listener.vad
            squares = vad.measured_squares if getattr(vad, "measured", None) is frame \
                else sum_squares(frame)
            power = squares / ASR_FRAME / 32768.0 ** 2
            self._level_dbfs = 10.0 * math.log10(power + 1e-12)
            self._gate_frame()

    def _gate_frame(self) -> None:
        """Pause the reply's playout on the onset of voice over it; cut it if the voice goes
        on while it is paused, resume it if not (session/barge_in.py)."""
        detector = self.listener.detector
        gate = self._gate
        action = gate.on_frame(audible=self.speaking, voiced=detector.voiced_now,
                               now=detector.now, level_dbfs=self._level_dbfs)
        if action == "cut":
            self._cut_now()
            return
        self._gate_action(action)
        if gate.paused_at is not None and self.listener.turn in self._overlap:
            since = paused_words_from(gate)
            self._paused_words.on_frame(gate, turn=self.listener.turn,
                                        voiced=detector.voiced_now,
                                        audio=lambda: detector.audio_since(since))

    def _gate_action(self, action: str | None) -> None:
        if action == "pause":
            self.conversation.pause()
            onset = self._gate.burst_from if self._gate.burst_from is not None \
                else self.listener.detector.now
            self.last_pause = (self._mono(onset), time.monotonic())
            self.events.publish("reply_paused", turn=self.listener.turn)
        elif action == "resume":
            self.conversation.resume()
            self.events.publish("reply_resumed", turn=self.listener.turn)

    def _paused_text(self, turn: int, transcript: Transcript) -> bool:
        """A transcript of what was said while the reply was paused: the user's words cut it."""
        if self._closed or turn != self.listener.turn or turn not in self._overlap \
                or not self.speaking or not _speech(transcript) \
                or not words_heard(transcript.text, self._reply_text()):
            return False
        self._cut_now()
        return True

    def _cut_now(self) -> None:
        """Cut the reply over the speech in progress, dated from that speech's first voiced
        frame (``last_barge_in``)."""
        detector = self.listener.detector
        started = detector.started_at
        if started is None:
            started = detector.now if detector.onset is None else detector.time(detector.onset)
        self.last_barge_in = (self._mono(started), time.monotonic())
        self.barge_in()

    def _paused_checked(self) -> None:
        if not self._closed:
            self._gate_action(self._gate.check_done())

    def _clock(self, stream_s: float, at: float) -> None:
        """Stream time ``stream_s`` (the end of an ASR frame) was captured at ``at``."""
        offset = at - stream_s
        if not self._offsets or abs(offset - self._offsets[-1][1]) > CLOCK_JUMP_S:
            self._offsets.append((stream_s, offset))
        self._last_at = at

    def _mono(self, stream_s: float) -> float:
        """When the listener's stream time ``stream_s`` was captured: the uplink is a clocked
        stream (every 20 ms period played, concealed if lost), so between jumps of its clock
        stream time and capture time advance together (and nothing heard was captured after
        the last frame)."""
        if not self._offsets:
            return time.monotonic()
        offset = self._offsets[0][1]
        for since, later in reversed(self._offsets):
            if since <= stream_s:
                offset = later
                break
        return min(stream_s + offset, self._last_at)

    @property
    def speaking(self) -> bool:
        """A reply is being thought of, synthesized or played."""
        if self._reply is not None and not self._reply.done():
            return True
        # the turn now being heard is new: the reply still playing is an earlier turn's
        return any(u.state not in FINAL_STATES for t in self.turns for u in t.utterances)

    def set_turn_detector(self, kind: str, semantic: SemanticOptions | None = None) -> None:
        """What ends the user's turns from the next pause on: ``smart-turn`` or ``silence``
        (the Realtime API's ``turn_detection`` ``semantic_vad`` / ``server_vad`` map here)."""
        if kind not in TURN_DETECTORS:
            raise ValueError(f"unknown turn detector {kind!r}: use {' or '.join(TURN_DETECTORS)}")
        self.listener.set_turn_detection(turn_model(kind), semantic)

    def barge_in(self) -> None:
        """Cut the reply (a confirmed barge-in): what was heard of it goes to the history."""
        self.barge_ins += 1
        if self._gate.paused:
            self._gate.confirmed()
        self._overlap.discard(self.listener.turn)  # this turn is the user's: it is answered
        if self._reply is not None and not self._reply.done():
            self._reply.cancel()  # closes the agent's stream and its upstream request
        cut = [turn for turn in self.turns
               if any(u.state not in FINAL_STATES for u in turn.utterances)]
        for turn in cut:
            turn.interrupted = True
        self.conversation.interrupt()  # queue emptied, synthesis cancelled: "interrupted"
        earlier = self._continued(self._turn())
        for turn in cut:
            if turn is not earlier:  # that one waits for this turn's final (continuation)
                self._commit(turn)

    def _commit(self, turn: Turn) -> None:
        """Record ``turn``'s exchange in the history, its reply as heard (once)."""
        if turn.heard_text is not None or turn.superseded or not turn.text.strip() \
                or any(t.continues == turn.number for t in self.turns):
            return  # (a later turn may yet continue it: settled at that turn's final)
        heard = [self.conversation.heard(u, clause) for clause, u in turn.spoken]
        turn.heard_text = " ".join(h.text for h in heard if h.text)
        turn.heard_ms = sum(h.ms for h in heard)
        self.history.record(turn.text, turn.heard_text)

    def _reply_text(self) -> str:
        """The clauses of the replies still being said (what an echo would repeat)."""
        return " ".join(c for t in self.turns if any(u.state not in FINAL_STATES
                                                     for u in t.utterances) for c in t.reply)

    # -- turns -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="duplex")

    async def _run(self) -> None:
        async for event in self.listener.events():
            try:
                self._on_event(event)
            except Exception:  # one bad event must not stop hearing
                log.exception("duplex event failed")

    def _on_event(self, event: object) -> None:
        publish = self.events.publish
        if isinstance(event, SpeechStarted):
            turn = Turn(self.listener.turn, self._mono(event.at))
            previous = self.turns[-1] if self.turns else None
            # (its final may still be on its way: the text is joined at this turn's final)
            if previous is not None and previous.heard_text is None and not previous.superseded \
                    and continues(previous.stopped_at, turn.started_at, self.continue_ms):
                turn.continues = previous.number
            self.turns.append(turn)
            publish("speech_started", turn=self.listener.turn)
        elif isinstance(event, SpeechStopped):
            turn = self._turn()
            if turn is not None:
                turn.stopped_at = self._mono(event.at)
                turn.detected_at = self._mono(event.detected_at)
            publish("speech_stopped", turn=self.listener.turn,
                    duration_ms=round((event.at - event.started_at) * 1000))
        elif isinstance(event, PartialTranscript):
            publish("transcript", text=event.text, final=False, turn=event.turn)
            if event.turn in self._overlap and self.speaking \
                    and self._words_confirm(event.turn, event.text, event.transcript):
                self.barge_in()  # words over the reply: no need to wait for the minimum
        elif isinstance(event, TentativeTranscript):
            if self.preempt and event.text.strip() and event.turn not in self._overlap:
                self._prepare(event.turn, self._whole_text(event.turn, event.text))
        elif isinstance(event, FinalTranscript):
            turn = self._turn(event.turn)
            if event.turn in self._overlap:
                self._overlap.discard(event.turn)
                if not self._words_confirm(event.turn, event.text, event.transcript):
                    # a "hm", a cough, the reply's own echo: heard, not answered
                    publish("transcript", text=event.text, final=True, turn=event.turn,
                            overlap=True)
                    self._settle_continuation(turn, answered=False)
                    return
                if self.speaking:
                    self.barge_in()  # words over the reply: a barge-in after all
            publish("transcript", text=event.text, final=True, turn=event.turn)
            text = self._whole_text(event.turn, event.text)
            prepared, self._prepared = self._prepared, None
            if prepared is not None and (turn is None or not event.text.strip()
                                         or (prepared.turn, prepared.text)
                                         != (event.turn, text)):
                self._discard(prepared)
                prepared = None
            self._settle_continuation(turn, answered=bool(event.text.strip()))
            if turn is not None:
                turn.transcript_at = time.monotonic()
                turn.text = text
                turn.speculative = event.speculative
                turn.asr_decode_s = event.transcript.decode_seconds or None
                if event.transcript.decode_seconds:
                    turn.asr_wait_s = max(0.0, event.transcript.latency
                                          - event.transcript.decode_seconds)
                if event.text.strip():
                    self._answer(turn, prepared)
        elif isinstance(event, SegmentSkipped):
            # too short to decode (a click, a cough that passed the VAD): no reply comes
            publish("transcript", text="", final=True, turn=event.turn, skipped=True)
            self._settle_continuation(self._turn(event.turn), answered=False)
        elif isinstance(event, TranscriptionFailed):
            publish("error", code="asr_failed", message=str(event.error), turn=event.turn)
            self._settle_continuation(self._turn(event.turn), answered=False)

    # -- a turn ended too early, taken back (conversation/continuation.py) ------------------
    def _continued(self, turn: Turn | None) -> Turn | None:
        """The earlier turn ``turn`` continues, while that one is still open to it."""
        if turn is None or turn.continues is None:
            return None
        earlier = self._turn(turn.continues)
        if earlier is None or earlier.superseded or earlier.heard_text is not None:
            return None
        return earlier

    def _whole_text(self, number: int, text: str) -> str:
        """``text`` of turn ``number``, with the turn it continues in front."""
        earlier = self._continued(self._turn(number))
        return text if earlier is None or not text.strip() else joined(earlier.text, text)

    def _settle_continuation(self, turn: Turn | None, *, answered: bool) -> None:
        """``turn``'s final is in: answered, the turn it continues is superseded (its reply
        cut if still going, kept out of the history); not, that one stands as it was heard."""
        earlier = self._continued(turn)
        if earlier is None or turn is None:
            return
        if not answered:
            turn.continues = None
            if earlier.interrupted or (earlier.replied_at is not None and all(
                    u.state in FINAL_STATES for u in earlier.utterances)):
                self._commit(earlier)  # cut by this turn's barge-in, or played: as heard
            return
        earlier.superseded = True
        if any(u.state not in FINAL_STATES for u in earlier.utterances):
            earlier.interrupted = True
            self.conversation.interrupt()
        self.events.publish("turn_continued", turn=turn.number, continues=earlier.number)

    def _words_confirm(self, turn: int, text: str, transcript: Transcript) -> bool:
        """A transcript of an overlapping turn says the user talked over the reply: speech, the
        user's own words (not the reply's echo, not fillers). Only without the pause gate: with
        it, only the words heard while the reply was paused confirm (``PausedWords``), as the
        turn's own transcript holds the reply's echo (conversation/barge_in.py)."""
        return not self._pausing and _speech(transcript) \
            and words_heard(text, self._reply_text())

    def _turn(self, number: int | None = None) -> Turn | None:
        number = self.listener.turn if number is None else number
        return next((t for t in reversed(self.turns) if t.number == number), None)

    # -- the preemptive reply ------------------------------------------------------------------
    def _prepare(self, turn: int, text: str) -> None:
        """A tentative transcript: begin the reply to it (agent and first clause's rendering),
        unless the one prepared already answers the same text."""
        old = self._prepared
        if old is not None:
            if (old.turn, old.text) == (turn, text):
                return
            self._discard(old)
        stream = stream_clauses(self.agent.reply(text, list(self.history)))
        prepared = PreparedReply(turn, text, stream)
        prepared.task = asyncio.get_running_loop().create_task(
            prepared.read_first(self.conversation.speaker, self.voice), name="reply-prepare")
        self._prepared = prepared
        self.replies_prepared += 1

    def _discard(self, prepared: PreparedReply) -> None:
        task = asyncio.get_running_loop().create_task(prepared.discard(), name="reply-discard")
        self._discarding.add(task)
        task.add_done_callback(self._discarding.discard)

    # -- the reply ---------------------------------------------------------------------------
    def _answer(self, turn: Turn, prepared: PreparedReply | None = None) -> None:
        if self._reply is not None and not self._reply.done():
            self._reply.cancel()
        self._reply = asyncio.get_running_loop().create_task(self._reply_to(turn, prepared))

    def _say(self, turn: Turn, clause: str, prerendered: Prerender | None = None) -> None:
        if turn.first_text_at is None:
            turn.first_text_at = time.monotonic()
        turn.reply.append(clause)
        try:
            utterance = self.conversation.say(clause, self.voice, prerendered=prerendered)
        except SpeechQueueFull:
            if prerendered is not None:
                prerendered.cancel()
            return
        turn.utterances.append(utterance)
        turn.spoken.append((clause, utterance))
        self.events.publish("reply", text=clause, utterance=utterance.id, turn=turn.number)

    async def _reply_to(self, turn: Turn, prepared: PreparedReply | None = None) -> None:
        if prepared is None:
            stream = stream_clauses(self.agent.reply(turn.text, list(self.history)))
        else:
            stream = prepared.clauses
        try:
            async with contextlib.aclosing(stream) as clauses:
                if prepared is not None and prepared.task is not None:
                    await prepared.task  # the first clause (an AgentError is the agent's)
                    turn.prepared = True
                    self.replies_prepared_used += 1
                    if prepared.first is not None:
                        self._say(turn, prepared.first, prepared.take_prerender())
                async for clause in clauses:
                    self._say(turn, clause)
        except AgentError as exc:
            turn.error = str(exc)
            self.events.publish("error", code="agent_failed", message=str(exc),
                                turn=turn.number)
            return
        finally:
            if prepared is not None:
                prerender = prepared.take_prerender()  # cut before it was said
                if prerender is not None:
                    prerender.cancel()
        turn.replied_at = time.monotonic()
        self.events.publish("reply_done", turn=turn.number, text=" ".join(turn.reply),
                            utterances=[u.id for u in turn.utterances])
        # into the history once heard: played to the end, or cut (then barge_in commits)
        task = asyncio.get_running_loop().create_task(self._commit_when_played(turn),
                                                      name="reply-commit")
        self._committing.add(task)
        task.add_done_callback(self._committing.discard)

    async def _commit_when_played(self, turn: Turn) -> None:
        for utterance in turn.utterances:
            await utterance.finished.wait()
        self._commit(turn)

    async def close(self) -> None:
        self._closed = True
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            await prepared.discard()
        await asyncio.gather(*self._discarding)
        for task in list(self._committing):
            task.cancel()
        for task in (self._reply, self._task):
            if task is not None:
                task.cancel()
        await self._paused_words.close()
        await self.listener.close()
        for task in (self._reply, self._task):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def state(self) -> dict[str, Any]:
        return {"frames_heard": self.frames_heard, "barge_ins": self.barge_ins,
                "reply_pauses": self._gate.pauses, "reply_resumes": self._gate.resumes,
                "paused_word_decodes": self._paused_words.decodes,
                "replies_prepared": self.replies_prepared,
                "replies_prepared_used": self.replies_prepared_used,
                **self.listener.stats(), **self.listener.turn_stats(),
                "turns": [t.as_json() for t in self.turns]}


def _speech(transcript: Transcript) -> bool:
    """Whisper heard speech (not noise it put words on: a cough can come out as "Thank you")."""
    return transcript.no_speech_prob is None or transcript.no_speech_prob < 0.5


_TURN_MODELS: dict[str, TurnModel | None] = {}


def turn_model(kind: str) -> TurnModel | None:
    """The process's model for a turn detector kind (made on first use, its child process
    started off the loop; None: silence). Cheap to call on the loop."""
    if kind not in _TURN_MODELS:
        _TURN_MODELS[kind] = load_turn_model(kind)
    return _TURN_MODELS[kind]


def close_turn_models() -> None:
    """Stop the models' child processes (blocking: call it off the loop). A model used again
    afterwards starts its child again."""
    for model in _TURN_MODELS.values():
        close = getattr(model, "close", None)
        if close is not None:
            close()


POST_SPEECH_MS = 200  # audio kept after the last voiced frame (at most the speculation's wait)
#: smart-turn's unsure wait and cap in the duplex loop: shorter than the listener's own
#: (SemanticOptions: 500 / 1200, which the Realtime door keeps), as the loop takes a turn ended
#: too early back (conversation/continuation.py); measured in docs/turns.md
DUPLEX_UNSURE_MS = 350
DUPLEX_MAX_SILENCE_MS = 800


@dataclass(frozen=True, slots=True)
class HearingOptions:
    """What a talking session is made with (from the command line)."""

    asr: str = "whisper:tiny.en"
    agent: str = "echo"
    vad: str = "silero"
    turn_silence_ms: int = default_of(TurnOptions, "stop_ms")
    #: "smart-turn": the turn model judges each pause (listen/turn_model.py); "silence":
    #: turn_silence_ms alone
    turn_detector: str = "silence"
    #: smart-turn: the pause after which the model is asked about the turn
    turn_probe_ms: int = default_of(SemanticOptions, "probe_ms")
    #: smart-turn: the pause that ends a turn the model calls unfinished whose transcript is a
    #: question
    turn_question_silence_ms: int = default_of(SemanticOptions, "question_silence_ms")
    #: smart-turn: the pause that ends a turn the model calls unfinished whose transcript could
    #: end there (not a question, no dangling word) ...
    turn_unsure_silence_ms: int = DUPLEX_UNSURE_MS
    #: ... and the pause that ends any turn (a dangling transcript, no verdict)
    turn_max_silence_ms: int = DUPLEX_MAX_SILENCE_MS
    barge_in_ms: int = default_of(TurnOptions, "barge_in_ms")
    #: voice over a reply this long pauses it (until confirmed as a barge-in, or resumed)
    barge_in_pause_ms: int = 100
    #: a reply's first echo pause also doubles the burst later pauses need (the rule before
    #: 2026-12-02; now the first one only learns the echo's level: conversation/barge_in.py)
    barge_in_backoff_on_first_echo: bool = False
    #: a turn starting this soon after the previous one's last word, over its reply, continues
    #: it (0: off; conversation/continuation.py)
    turn_continue_ms: int = CONTINUE_MS
    partials: bool = True
    #: start the final decode after this much silence, before the turn ends (0: off); the
    #: segment's post-speech pad is then as long (at most POST_SPEECH_MS)
    asr_speculate_ms: int = SPECULATE_MS
    #: prepare the reply (agent, first clause's synthesis) on the speculative transcript
    preemptive_reply: bool = True

    def __post_init__(self) -> None:
        if self.turn_detector not in TURN_DETECTORS:
            raise ValueError(f"unknown turn detector {self.turn_detector!r}: use "
                             f"{' or '.join(TURN_DETECTORS)}")
        self.semantic_options()  # refused now, not at the first session

    def semantic_options(self) -> SemanticOptions:
        """The smart-turn detector's waits (the Realtime API's semantic_vad has its own)."""
        return SemanticOptions(probe_ms=self.turn_probe_ms,
                               question_silence_ms=self.turn_question_silence_ms,
                               unsure_silence_ms=self.turn_unsure_silence_ms,
                               max_silence_ms=self.turn_max_silence_ms)


TURN_DETECTORS = ("smart-turn", "silence")


class DuplexFactory:
    """Process-wide: one recogniser (its own bounded pool) and one agent, shared by every
    talking session; each session gets its own listener (VAD state, turns)."""

    def __init__(self, options: HearingOptions, voice: Synthesizer) -> None:
        from gateway.agent.registry import build_agent
        from gateway.listen.recognizers import build_recognizer

        self.options = options
        self.voice = voice
        self.recognizer = build_recognizer(options.asr)
        self.agent = build_agent(options.agent)

    async def load(self) -> None:
        load = getattr(self.recognizer, "load", None)
        if load is not None:
            await load()
        model = turn_model(self.options.turn_detector)
        start = getattr(model, "start", None)
        if start is not None:  # its child process up and warm before the first session
            await asyncio.to_thread(start)

    def make(self, conversation: Conversation, turn_detector: str | None = None,
             uplink_rate: int = UPLINK_RATE) -> Duplex:
        """``turn_detector``: this session's (default: the gateway's); ``Duplex.
        set_turn_detector`` changes it later. ``uplink_rate``: the rate of what it will hear
        (``Duplex``)."""
        from gateway.listen.vad import build_vad

        # The speculation decodes the segment as it would end, post-speech pad included: a
        # speculation sooner than the default 200 ms pad comes with a pad that short.
        speculate = self.options.asr_speculate_ms
        turns = TurnOptions(stop_ms=self.options.turn_silence_ms,
                            barge_in_ms=self.options.barge_in_ms,
                            post_speech_ms=min(POST_SPEECH_MS, speculate or POST_SPEECH_MS))
        listener = Listener(self.recognizer, vad=build_vad(self.options.vad), turns=turns,
                            partials=self.options.partials,
                            speculate_ms=self.options.asr_speculate_ms or None)
        duplex = Duplex(conversation, listener, self.agent, self.voice,
                        preempt=self.options.preemptive_reply,
                        pause_ms=self.options.barge_in_pause_ms,
                        backoff_on_first_echo=self.options.barge_in_backoff_on_first_echo,
                        continue_ms=self.options.turn_continue_ms, uplink_rate=uplink_rate)
        duplex.set_turn_detector(turn_detector or self.options.turn_detector,
                                 self.options.semantic_options())
        return duplex

    async def close(self) -> None:
        await self.recognizer.close()
        await self.agent.close()
        await asyncio.to_thread(close_turn_models)
