"""Words heard while the reply was paused: the barge-in's words test on the only audio that
holds the user alone (issue 26).

With no echo canceller, an overlapping turn's audio holds the reply's own echo before the pause
and after a resume, and Whisper sometimes hears that -20 dB echo as other words ("the one other
end" for "The weather in London"): a "hm" over a reply, whose transcript then held such words,
was cut as a barge-in. While the reply is paused its echo is gone (after the gate's grace), so
``PausedWords`` transcribes *that* stretch on its own -- the turn's audio from the end of the
pause's grace to now -- and only its words confirm.

When: once the gate has heard ``MIN_VOICE_MS`` of voice while paused, at the first quiet frame
after voice (the user stopped or took a breath: a word is complete) and every ``EVERY_MS`` of
voice while it goes on. At most one decode in flight (the next waits for it, on the newest
audio); the gate holds its resume while one is in flight (``PauseGate.checking``), so a short
"Stop." is judged on its words, not resumed over. Bounded: the window is at most the pause's
``max_pause_ms`` of audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import numpy as np

from gateway.conversation.barge_in import LEARN_CAP_DBFS, PauseGate
from gateway.listen.asr import RecognitionError, Recognizer, Transcript

log = logging.getLogger(__name__)

#: voice while paused (after the gate's grace) before its words are worth a decode: the echo's
#: tail (its path, the VAD's window and hangover) can outlast the grace by a frame or two
MIN_VOICE_MS = 60.0
#: while the voice goes on, a new decode after this much more of it
EVERY_MS = 300.0
#: the window starts this long before the burst's first voiced frame (the VAD's window and
#: the word's soft start: Whisper tiny returns nothing, no_speech_prob ~0.8, for a clip cut
#: 200 ms into "Wait, stop")
ONSET_LEAD_S = 0.06


def paused_words_from(gate: PauseGate) -> float:
    """Stream time the paused stretch's decode starts at: the onset of the burst that paused
    the reply, when that burst was louder than an echo can be (it carries the user's first
    word; the echo under it is 20 dB down); else -- a burst quiet enough to be the reply's echo
    (``LEARN_CAP_DBFS``), whose words would be the reply's, misheard ("the what" for "The
    weather") -- the end of the pause's grace."""
    if gate.burst_from is not None and gate.paused_at is not None \
            and gate.burst_from <= gate.paused_at and gate.burst_peak_dbfs > LEARN_CAP_DBFS:
        return max(0.0, gate.burst_from - ONSET_LEAD_S)
    return (gate.paused_at or 0.0) + gate.grace_ms / 1000


class PausedWords:
    """Decides when to transcribe the paused stretch and hands each transcript to ``on_text``
    (the turn, the transcript: True if its words confirmed the barge-in); ``on_done`` after
    each decode that did not."""

    def __init__(self, recognizer: Recognizer,
                 on_text: Callable[[int, Transcript], bool],
                 on_done: Callable[[], None]) -> None:
        self.recognizer = recognizer
        self._on_text = on_text
        self._on_done = on_done
        self._task: asyncio.Task[None] | None = None
        self._checked_ms = 0.0  # voice while paused the last decode covered
        self._pause = 0  # the gate's pause count the above belongs to
        self.decodes = 0  # window decodes made

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def on_frame(self, gate: PauseGate, *, turn: int, voiced: bool,
                 audio: Callable[[], np.ndarray]) -> None:
        """After the gate saw a frame: start a decode of ``audio()`` (the paused stretch) if one
        is due. ``gate.checking`` says whether one is in flight."""
        if gate.pauses != self._pause:
            self._pause, self._checked_ms = gate.pauses, 0.0
        heard = gate.voiced_while_paused_ms
        gate.checking = self.busy
        if not gate.paused or self.busy or heard < MIN_VOICE_MS - 1e-6 \
                or heard <= self._checked_ms:
            return
        if voiced and heard - self._checked_ms < EVERY_MS - 1e-6:
            return
        clip = audio()
        if not clip.size:
            return
        self._checked_ms = heard
        self.decodes += 1
        gate.checking = True
        self._task = asyncio.get_running_loop().create_task(
            self._decode(turn, clip), name="paused-words")

    async def _decode(self, turn: int, clip: np.ndarray) -> None:
        try:
            transcript = await self.recognizer.transcribe(clip, final=True)
        except RecognitionError as exc:
            log.warning("paused-words decode failed: %s", exc)
            transcript = None
        except Exception:  # a bug here must not end the session's hearing
            log.exception("paused-words decode")
            transcript = None
        self._task = None
        if transcript is None or not self._on_text(turn, transcript):
            self._on_done()

    async def close(self) -> None:
        """Cancel a decode in flight and drop the callbacks (bound methods of the duplex loop
        that owns this: a closed session is then freed by refcounting, with no cycle)."""
        self._on_text = _no_text
        self._on_done = _nothing
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _no_text(turn: int, transcript: Transcript) -> bool:
    return False


def _nothing() -> None:
    return None
