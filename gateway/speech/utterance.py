"""An utterance: one text to speak, its state, and its progress at every sink it goes to.

The speaker produces an utterance's frames once; the fan-out hands them to each attached sink
(the WebRTC leg's RTP stream, an HTTP stream ...). Each sink gets its own ``Delivery`` of the
utterance (``Utterance.delivery``): told by the sink of every frame it sent (with the sink's own
sequence number and timestamp: RTP's for the RTP sink), asked by NACK responders whether the
frames were cut off. The utterance becomes PLAYING when any sink sends its first frame and DONE
when synthesis has ended and every delivery has all its frames out (or its sink is gone). Nothing
here knows RTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gateway.runtime.clock import wall_ms, wall_offset
from gateway.runtime.metrics import METRICS
from gateway.text.timing import WordTiming

if TYPE_CHECKING:
    from gateway.speech.text_feed import TextFeed

log = logging.getLogger(__name__)


class UtteranceState(StrEnum):
    QUEUED = "queued"
    SYNTHESIZING = "synthesizing"
    PLAYING = "playing"
    DONE = "done"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


FINAL_STATES = (UtteranceState.DONE, UtteranceState.INTERRUPTED, UtteranceState.FAILED)
_NO_DELIVERIES: Mapping[str, Delivery] = MappingProxyType({})


@dataclass(eq=False, slots=True)
class Delivery:
    """One sink's progress through one utterance (the ``FrameOwner`` its queued frames carry)."""

    utterance: Utterance
    sink: str
    first_index: int = 0  # a sink attached mid-utterance gets the frames from here on
    frames: int = 0  # frames the sink sent
    skipped: int = 0  # frames the sink never got (a DROP sink that was full)
    detached: bool = False  # the sink is gone: nothing more to wait for
    first_at: float | None = None
    last_at: float | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    first_timestamp: int | None = None

    @property
    def cancelled(self) -> bool:
        return self.utterance.state is UtteranceState.INTERRUPTED

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None:
        # ``on_frames_sent(index, 1, ...)`` written out: the WebRTC send path calls this once
        # per packet, and the two calls it saves (that one, ``complete``) are a tenth of it
        if self.first_at is None:
            self.first_at = at
            self.first_seq = seq
            self.first_timestamp = timestamp
            self.utterance._first_sent(at)
        self.frames += 1
        self.last_seq = seq & 0xFFFF
        self.last_at = at
        total = self.utterance.total_frames
        if total is not None and (
            self.detached or self.frames + self.skipped >= total - self.first_index
        ):
            self.utterance._check_done()

    def on_frames_sent(self, index: int, count: int, seq: int, timestamp: int, at: float) -> None:
        if count <= 0:
            return
        if self.first_at is None:
            self.first_at = at
            self.first_seq = seq
            self.first_timestamp = timestamp
            self.utterance._first_sent(at)
        self.frames += count
        self.last_seq = (seq + count - 1) & 0xFFFF
        self.last_at = at
        if self.utterance.total_frames is not None and self.complete:
            self.utterance._check_done()

    def skip(self, count: int) -> None:
        self.skipped += count

    def detach(self) -> None:
        self.detached = True
        self.utterance._check_done()

    @property
    def complete(self) -> bool:
        total = self.utterance.total_frames
        if self.detached:
            return True
        return total is not None and self.frames + self.skipped >= total - self.first_index

    def as_json(self) -> dict[str, Any]:
        return {
            "frames_sent": self.frames,
            "frames_skipped": self.skipped,
            "first_index": self.first_index,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "first_timestamp": self.first_timestamp,
            "detached": self.detached,
        }


@dataclass(eq=False, slots=True)
class Utterance:
    """One text to speak (see the module). Slotted: a speaking session lists up to
    ``history`` of them, and a slotted one is ≈ 250 bytes where one with a ``__dict__`` was
    ≈ 550 (bench/session_memory.py --speaking)."""

    text: str
    voice: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: UtteranceState = UtteranceState.QUEUED
    error: str | None = None
    created_at: float = field(default_factory=time.monotonic)
    requested_at: float | None = None  # the HTTP request's arrival (before its body was read)
    started_at: float | None = None  # synthesis (or a cache replay) began: no longer waiting
    first_pcm_at: float | None = None
    first_frame_queued_at: float | None = None
    first_sent_at: float | None = None
    finished_at: float | None = None
    frames_encoded: int = 0
    frames_rendered: int = 0  # 20 ms PCM frames the voice has produced (ahead of encoding)
    cached: bool = False  # served from the phrase cache: no synthesis, no encoding
    total_frames: int | None = None  # known once synthesis has ended
    #: by sink, made with the first one (``deliveries``): a pending utterance has none, and
    #: an empty dict each was 64 bytes
    _deliveries: dict[str, Delivery] | None = field(default=None, repr=False)
    on_finish: Callable[[Utterance], None] | None = field(default=None, repr=False)
    #: told of every state change (``observer(utterance, state)``), after the code that made it
    observer: Callable[[Utterance, UtteranceState], None] | None = field(default=None, repr=False)
    _finished: asyncio.Event | None = field(default=None, repr=False)
    _sent: asyncio.Event | None = field(default=None, repr=False)
    chars: int = 0  # len(text): the text itself is dropped once synthesis has ended
    instructions: str | None = None  # for backends that take them (CosyVoice instruct modes)
    #: when each word plays, ms from the utterance's first sample (the synthesizer's own
    #: timings, else estimated; none for a phrase-cache replay), once synthesis has ended
    #: (an empty tuple until then, shared: a list each was 56 bytes per listed utterance)
    words: Sequence[WordTiming] = field(default=(), repr=False)
    #: an open utterance's text, still being appended (speech/text_feed.py); None: all given
    text_feed: TextFeed | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.chars = len(self.text)

    @property
    def finished(self) -> asyncio.Event:
        """Set once the utterance is in a final state. Made on first use: an Event costs
        ≈0.75 KB and a session lists up to ``history`` utterances nobody waits on."""
        if self._finished is None:
            self._finished = asyncio.Event()
            if self.state in FINAL_STATES:
                self._finished.set()
        return self._finished

    @property
    def started(self) -> asyncio.Event:
        """Set once a first frame was sent (or the utterance ended without one); made on use."""
        if self._sent is None:
            self._sent = asyncio.Event()
            if self.first_sent_at is not None or self.state in FINAL_STATES:
                self._sent.set()
        return self._sent

    @property
    def deliveries(self) -> Mapping[str, Delivery]:
        """Its delivery to each sink, by sink name (in the order the sinks got frames)."""
        deliveries = self._deliveries
        return _NO_DELIVERIES if deliveries is None else deliveries

    def delivery(self, sink: str, first_index: int = 0) -> Delivery:
        """This utterance's delivery to ``sink`` (made on the sink's first frames)."""
        deliveries = self._deliveries
        if deliveries is None:
            deliveries = self._deliveries = {}
        delivery = deliveries.get(sink)
        if delivery is None:
            delivery = deliveries[sink] = Delivery(self, sink, first_index)
        return delivery

    @property
    def primary(self) -> Delivery | None:
        """The first sink's delivery (the WebRTC leg's, for a WebRTC session)."""
        return next(iter(self.deliveries.values()), None)

    @property
    def frames_sent(self) -> int:
        primary = self.primary
        return 0 if primary is None else primary.frames

    def all_queued(self, count: int) -> None:
        """Synthesis (or replay) has ended after ``count`` frames."""
        self.total_frames = count
        self._check_done()

    def _first_sent(self, at: float) -> None:
        if self.first_sent_at is None:
            self.first_sent_at = at
            if self._sent is not None:
                self._sent.set()
            METRICS.say_to_first_packet.observe(max(0.0, at - self.created_at))
            if self.state is UtteranceState.SYNTHESIZING:
                self.set_state(UtteranceState.PLAYING)

    def _check_done(self) -> None:
        if self.total_frames is None or self.state in FINAL_STATES:
            return
        if self._deliveries is None or all(d.complete for d in self._deliveries.values()):
            self.finish(UtteranceState.DONE)

    def finish(self, state: UtteranceState, error: str | None = None) -> None:
        if self.state in FINAL_STATES:
            return
        self.set_state(state)
        self.error = error
        self.text = ""  # see ``chars``
        self.finished_at = time.monotonic()
        if self._finished is not None:
            self._finished.set()
        if self._sent is not None:
            self._sent.set()
        if self.on_finish is not None:
            # Often called from a sink's send tick: the owner's work (phrase cache, counters)
            # runs after it, and its failure cannot touch the stream.
            try:
                asyncio.get_running_loop().call_soon(self._notify)
            except RuntimeError:  # no loop (unit use): at once
                self._notify()

    def set_state(self, state: UtteranceState) -> None:
        self.state = state
        if self.observer is not None:
            try:
                asyncio.get_running_loop().call_soon(self._observe, state)
            except RuntimeError:
                self._observe(state)

    def _observe(self, state: UtteranceState) -> None:
        if self.observer is not None:
            with contextlib.suppress(Exception):
                self.observer(self, state)

    def _notify(self) -> None:
        if self.on_finish is not None:
            with contextlib.suppress(Exception):
                self.on_finish(self)

    def as_json(self) -> dict[str, Any]:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.created_at) * 1000, 3)

        primary = self.primary
        offset = wall_offset()
        return {
            "id": self.id,
            "voice": self.voice,
            "state": self.state.value,
            "error": self.error,
            "chars": self.chars,
            "frames_encoded": self.frames_encoded,
            "cached": self.cached,
            "frames_sent": self.frames_sent,
            # the primary sink's numbering (RTP for a WebRTC session)
            "first_seq": None if primary is None else primary.first_seq,
            "last_seq": None if primary is None else primary.last_seq,
            "first_timestamp": None if primary is None else primary.first_timestamp,
            "sinks": {name: d.as_json() for name, d in self.deliveries.items()},
            "latency_ms": {
                "request": ms(self.requested_at),  # <= 0: the request came before
                "started": ms(self.started_at),
                "first_pcm": ms(self.first_pcm_at),
                "first_frame_queued": ms(self.first_frame_queued_at),
                "first_sent": ms(self.first_sent_at),
                "finished": ms(self.finished_at),
            },
            # the same moments as Unix epoch ms (runtime/clock.py), for a browser on this host
            "timeline_unix_ms": {name: wall_ms(t, offset) for name, t in (
                ("request", self.requested_at), ("created", self.created_at),
                ("started", self.started_at), ("first_pcm", self.first_pcm_at),
                ("first_frame_queued", self.first_frame_queued_at),
                ("first_sent", self.first_sent_at), ("finished", self.finished_at),
            )},
            # first frame queued -> sent: the wait for the stream's next 20 ms slot
            "slot_wait_ms": (
                None
                if self.first_frame_queued_at is None or self.first_sent_at is None
                else round((self.first_sent_at - self.first_frame_queued_at) * 1000, 3)
            ),
            "server_overhead_ms": (
                None
                if self.first_pcm_at is None or self.first_sent_at is None
                else round((self.first_sent_at - self.first_pcm_at) * 1000, 3)
            ),
        }
