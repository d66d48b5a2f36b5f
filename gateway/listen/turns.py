"""Turn detection (endpointing): frame-by-frame speech probabilities -> speech started / barge-in /
speech stopped, with the segment's audio.

Pure and deterministic: time is stream time (frames pushed x frame length), nothing reads a clock.
Rules (defaults near FastRTC / Pipecat / LiveKit, see shared notes "anchors"):

- a frame is voiced at ``probability >= threshold``; once in speech, at ``>= release``
  (hysteresis, as Silero's own iterator does with threshold - 0.15);
- speech starts after ``start_ms`` of voiced frames, tolerating unvoiced gaps of at most
  ``start_gap_ms`` while counting (a longer gap starts the count again); ``SpeechStarted.at`` is
  the first voiced frame, and the segment keeps ``pre_speech_ms`` of audio before it;
- the turn ends after ``stop_ms`` of unvoiced frames in a row, so a shorter pause inside a
  sentence is part of the turn; the segment then ends ``post_speech_ms`` after the last voiced
  frame (the rest of the silence is dropped);
- a turn is cut at ``max_turn_ms``; if the user is still voiced, a new segment starts at once
  (no pre-speech audio, so no word is heard twice);
- ``BargeIn`` once per turn, when the turn holds ``barge_in_ms`` of voiced frames in all
  (counted from the first voiced frame): a 100 ms cough or noise burst never reaches it.

The silence that ends a turn may change while the user is quiet (``stop_frames``, ``end_now``):
``SemanticEndpointing`` below is that policy when a turn model judges the pause (the listener
feeds it, listen/listener.py): ``stop_ms`` is then its cap.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Literal

import numpy as np

from gateway.listen.audio import FRAME_MS, RATE

StopReason = Literal["silence", "semantic", "max_length", "flush"]


@dataclass(frozen=True, slots=True)
class TurnOptions:
    threshold: float = 0.5
    release: float = 0.35
    start_ms: int = 200
    start_gap_ms: int = 60
    stop_ms: int = 500
    pre_speech_ms: int = 300
    post_speech_ms: int = 200
    max_turn_ms: int = 20_000
    barge_in_ms: int = 300
    frame_ms: int = FRAME_MS
    rate: int = RATE

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0 or not 0.0 < self.release <= self.threshold:
            raise ValueError("need 0 < release <= threshold <= 1")
        if self.frame_ms <= 0 or self.rate * self.frame_ms % 1000:
            raise ValueError(f"a {self.frame_ms} ms frame is no whole number of samples")
        for name in ("start_ms", "stop_ms", "max_turn_ms", "barge_in_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("start_gap_ms", "pre_speech_ms", "post_speech_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.max_turn_ms < self.start_ms:
            raise ValueError("max_turn_ms must be at least start_ms")

    def frames(self, ms: int) -> int:
        """``ms`` as a whole number of frames (rounded up)."""
        return math.ceil(ms / self.frame_ms)

    @property
    def frame_samples(self) -> int:
        return self.rate * self.frame_ms // 1000


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    at: float  # stream seconds of the first voiced frame
    confirmed_at: float  # when the start was decided (end of the frame that decided it)


@dataclass(frozen=True, slots=True)
class BargeIn:
    at: float  # end of the frame that reached barge_in_ms voiced
    voiced: float  # seconds voiced in this turn so far
    started_at: float


@dataclass(frozen=True, slots=True, eq=False)
class SpeechStopped:
    at: float  # end of the last voiced frame
    detected_at: float  # end of the frame that ended the turn
    started_at: float
    reason: StopReason
    audio: np.ndarray  # the segment: pre-speech pad + speech + post-speech pad, int16

    @property
    def duration(self) -> float:
        return self.at - self.started_at


TurnEvent = SpeechStarted | BargeIn | SpeechStopped


class State(Enum):
    IDLE = "idle"
    STARTING = "starting"
    SPEAKING = "speaking"


class TurnDetector:
    """One stream's endpointing state machine. ``push`` a frame and its probability, get events."""

    def __init__(self, options: TurnOptions | None = None) -> None:
        self.options = o = options or TurnOptions()
        self._start = o.frames(o.start_ms)
        self._gap = o.frames(o.start_gap_ms)
        self._stop = o.frames(o.stop_ms)
        self._pre = o.frames(o.pre_speech_ms)
        self._post = o.frames(o.post_speech_ms)
        self._max = o.frames(o.max_turn_ms)
        self._barge = o.frames(o.barge_in_ms)
        # Enough history to hold the pre-speech pad before a start that is still being counted.
        self._ring: deque[tuple[int, np.ndarray]] = deque(
            maxlen=self._pre + self._start * (self._gap + 1) + 1)
        self.reset()

    def reset(self) -> None:
        #: unvoiced frames in a row that end the turn now (a policy may lower or raise it)
        self.stop_frames = self._stop
        self._ring.clear()
        self.state = State.IDLE
        self._index = 0  # frames pushed so far
        self._first = 0  # first voiced frame of the current start / turn
        self._voiced = 0  # voiced frames since _first
        self._unvoiced = 0  # unvoiced frames in a row
        self._last_voiced = 0
        self._segment: list[np.ndarray] = []
        self._segment_first = 0  # frame index of _segment[0]
        self._barged = False

    # -- reading ----------------------------------------------------------------------------
    def time(self, frame_index: int) -> float:
        return frame_index * self.options.frame_ms / 1000.0

    @property
    def now(self) -> float:
        """Stream seconds at the end of the frames pushed so far."""
        return self.time(self._index)

    @property
    def in_speech(self) -> bool:
        return self.state is State.SPEAKING

    @property
    def listening(self) -> bool:
        """Voice is being heard: a start is being counted, or a turn is in progress."""
        return self.state is not State.IDLE

    @property
    def voiced_now(self) -> bool:
        """The last frame pushed was voiced (by the threshold of the state it was heard in)."""
        return self.state is not State.IDLE and self._last_voiced == self._index - 1

    @property
    def voiced_ms(self) -> float:
        """Voiced time since the first voiced frame of the start or turn in progress (0 idle)."""
        return 0.0 if self.state is State.IDLE else self._voiced * self.options.frame_ms

    @property
    def onset(self) -> int | None:
        """Frame index of the first voiced frame of the start or turn in progress."""
        return None if self.state is State.IDLE else self._first

    @property
    def started_at(self) -> float | None:
        return self.time(self._first) if self.in_speech else None

    @property
    def silence(self) -> float:
        """Seconds of unvoiced frames in a row at the end of the turn so far (0 when voiced)."""
        return self._unvoiced * self.options.frame_ms / 1000.0 if self.in_speech else 0.0

    @property
    def last_voiced(self) -> int:
        """Frame index of the last voiced frame (of the turn in progress, or the last one)."""
        return self._last_voiced

    def closing_audio(self) -> np.ndarray | None:
        """The segment ``SpeechStopped.audio`` would hold if the turn ended now, once its
        post-speech pad is complete (the user quiet at least ``post_speech_ms``); else None.
        Until another voiced frame arrives the turn's final audio is exactly this."""
        if not self.in_speech or self._unvoiced < self._post:
            return None
        keep = self._last_voiced + 1 + self._post - self._segment_first
        if keep <= 0 or keep > len(self._segment):
            return None
        return np.concatenate(self._segment[:keep])

    def segment_audio(self) -> np.ndarray:
        """The current turn's audio so far (pre-speech pad included); empty when not in speech."""
        if not self._segment:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._segment)

    def audio_since(self, stream_s: float) -> np.ndarray:
        """The current turn's audio from stream time ``stream_s`` on (its frames that start
        there or later); empty when not in speech."""
        first = max(0, round(stream_s * 1000 / self.options.frame_ms) - self._segment_first)
        if not self._segment or first >= len(self._segment):
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._segment[first:])

    # -- feeding ----------------------------------------------------------------------------
    def push(self, frame: np.ndarray, probability: float) -> list[TurnEvent]:
        if len(frame) != self.options.frame_samples:
            raise ValueError(f"frames are {self.options.frame_samples} samples, not {len(frame)}")
        index = self._index
        self._index += 1
        self._ring.append((index, frame))
        if self.state is State.SPEAKING:
            return self._speaking(index, frame, probability >= self.options.release)
        voiced = probability >= self.options.threshold
        if self.state is State.IDLE:
            if not voiced:
                return []
            self.state = State.STARTING
            self._first, self._voiced, self._unvoiced = index, 0, 0
        if voiced:
            self._voiced += 1
            self._unvoiced = 0
            self._last_voiced = index
        else:
            self._unvoiced += 1
            if self._unvoiced > self._gap:
                self.state = State.IDLE
            return []
        if self._voiced < self._start:
            return []
        return self._begin(index)

    def end_now(self, reason: StopReason = "semantic") -> list[TurnEvent]:
        """End the turn in progress now, if the user is quiet (a policy decided between two
        frames); nothing if not in speech or the last frame was voiced."""
        if self.state is not State.SPEAKING or not self._unvoiced:
            return []
        return [self._end(reason)]

    def flush(self) -> list[TurnEvent]:
        """End the turn in progress now (end of stream); nothing if none."""
        if self.state is not State.SPEAKING:
            self.state = State.IDLE
            return []
        return [self._end("flush")]

    # -- transitions ------------------------------------------------------------------------
    def _begin(self, index: int) -> list[TurnEvent]:
        self.state = State.SPEAKING
        self._barged = False
        first_kept = self._first - self._pre
        kept = [(i, f) for i, f in self._ring if i >= first_kept]
        self._segment = [f for _, f in kept]
        self._segment_first = kept[0][0]
        events: list[TurnEvent] = [SpeechStarted(self.time(self._first), self.time(index + 1))]
        events += self._maybe_barge(index)
        return events

    def _speaking(self, index: int, frame: np.ndarray, voiced: bool) -> list[TurnEvent]:
        self._segment.append(frame)
        events: list[TurnEvent] = []
        if voiced:
            self._voiced += 1
            self._unvoiced = 0
            self._last_voiced = index
            events += self._maybe_barge(index)
        else:
            self._unvoiced += 1
        if self._unvoiced >= self.stop_frames:
            events.append(self._end("silence" if self.stop_frames == self._stop else "semantic"))
        elif index + 1 - self._first >= self._max:
            events.append(self._end("max_length"))
            if voiced:  # still talking: carry on in a new segment, no audio heard twice
                self.state = State.SPEAKING
                self._first = self._segment_first = index + 1
                self._voiced, self._unvoiced, self._barged = 0, 0, False
                self._segment = []
                events.append(SpeechStarted(self.time(index + 1), self.time(index + 1)))
        return events

    def _maybe_barge(self, index: int) -> list[TurnEvent]:
        if self._barged or self._voiced < self._barge:
            return []
        self._barged = True
        return [BargeIn(self.time(index + 1), self._voiced * self.options.frame_ms / 1000.0,
                        self.time(self._first))]

    def _end(self, reason: StopReason) -> SpeechStopped:
        keep = min(len(self._segment), self._last_voiced + 1 + self._post - self._segment_first)
        audio = (np.concatenate(self._segment[:max(keep, 0)]) if keep > 0
                 else np.zeros(0, dtype=np.int16))
        stopped = SpeechStopped(at=self.time(self._last_voiced + 1), detected_at=self.now,
                                started_at=self.time(self._first), reason=reason, audio=audio)
        self.state = State.IDLE
        self._segment = []
        self._unvoiced = 0
        self._voiced = 0
        return stopped


# Words a sentence does not end on (English): a pause after one is a hesitation, whatever the
# model hears. Fillers count: "I want to, um" is not a turn.
DANGLING = frozenset("""
a an the and or but so because if than that which who whose whom to of in on at by for from
with about into onto over under after before between through during without my your his her
its our their this these those is are was were am be been being will would can could should
shall may might must do does did have has had not very um uh er erm hmm mm like
""".split())


def dangling(text: str) -> bool:
    """The text stops on a word no sentence ends on (or trails off with "..." / "-")."""
    stripped = text.strip()
    if stripped.endswith(("...", "\u2026", "-", ",")):
        return True
    words = stripped.lower().replace("\u2019", "'").split()
    if not words:
        return False
    return words[-1].strip(".,!?;:\"'()") in DANGLING


def question(text: str) -> bool:
    """The transcript ends as a question (Whisper punctuates: "What time is it?")."""
    return text.rstrip().rstrip("\"')\u201d").endswith("?")


@dataclass(frozen=True, slots=True)
class SemanticOptions:
    """``min_silence_ms``: the pause that ends a turn judged complete; ``unsure_silence_ms``:
    the pause that ends one the model calls unfinished but whose transcript does not stop on a
    dangling word (the silence detector's own 500 ms: never cut sooner than it would);
    ``question_silence_ms``: the same when that transcript is a question (ends on "?"): the
    model hears a question's rising end as unfinished (0.1-0.3 on synthetic voices,
    docs/turns.md), the transcript says it is one; ``max_silence_ms``: the pause that ends any
    turn (the cap: a dangling transcript, or no verdict); ``probe_ms``: the pause after which
    the model is asked (before the speculative decode at 100 ms, so the two do not share the
    helper core at the same moment and the verdict is in when the transcript comes);
    ``threshold``: P(complete) at or above which the model says complete; ``use_text``: also
    wait for the speculative transcript, which vetoes a complete verdict when it stops on a
    dangling word."""

    min_silence_ms: int = 200
    unsure_silence_ms: int = 500
    max_silence_ms: int = 1200
    probe_ms: int = 60
    question_silence_ms: int = 300
    threshold: float = 0.5
    use_text: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.probe_ms <= self.min_silence_ms <= self.unsure_silence_ms \
                <= self.max_silence_ms:
            raise ValueError("need 0 < probe_ms <= min_silence_ms <= unsure_silence_ms "
                             "<= max_silence_ms")
        if not self.min_silence_ms <= self.question_silence_ms <= self.max_silence_ms:
            raise ValueError("need min_silence_ms <= question_silence_ms <= max_silence_ms")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be in (0, 1)")


class SemanticEndpointing:
    """One pause's verdicts -> the silence that ends the turn (pure; the listener feeds it).

    The speculative transcript only vetoes: a last word no sentence ends on (``dangling``)
    keeps the cap. Otherwise the model decides: complete (P >= threshold) -- the turn ends
    after ``min_silence_ms`` once the transcript agrees (with ``use_text``), after
    ``unsure_silence_ms`` while it is still coming; not complete -- ``question_silence_ms``
    if the transcript is a question, ``unsure_silence_ms`` if it could end there otherwise,
    the cap while it is still coming. No verdict yet: the
    cap (or ``unsure_silence_ms`` on an acceptable transcript). A voiced frame starts a new
    pause (``new_pause``): earlier verdicts are forgotten.
    """

    def __init__(self, options: SemanticOptions | None = None) -> None:
        self.options = options or SemanticOptions()
        self.new_pause()

    def new_pause(self) -> None:
        self.probability: float | None = None
        self.text: str | None = None

    def complete(self) -> bool:
        """The turn is judged finished (it ends after ``min_silence_ms``)."""
        return self.stop_ms() == self.options.min_silence_ms

    def stop_ms(self) -> int:
        o = self.options
        text = self.text if o.use_text else ""
        if text is not None and text.strip() and dangling(text):
            return o.max_silence_ms
        if self.probability is None:
            return o.unsure_silence_ms if o.use_text and text else o.max_silence_ms
        if self.probability >= o.threshold:
            return o.unsure_silence_ms if text is None else o.min_silence_ms
        if text is None or not o.use_text:
            return o.max_silence_ms
        return o.question_silence_ms if question(text) else o.unsure_silence_ms
