"""What a closed session does last: cut its reference cycles, so refcounting frees it at once.

A session's objects are frozen out of the collector's sight once it is set up
(runtime/gc_policy.py), so a reference cycle left behind at close is garbage only a full
collection of the whole heap can free -- the pause that stalls every other stream. Measured
(``gc.DEBUG_SAVEALL``, sessions closed by DELETE): every closed session was ≈312 cyclic objects
(the whole graph: peer connection, transports, ICE, our leg, sink, store, speaker, utterances);
after ``release`` none of them (what is left, ≈13 objects per session, is not the session's:
pyOpenSSL's verify-callback helper, freed young when DTLS state is released at connect, and
asyncio's TCP transports of HTTP connections).

The cycles cut, each a reference that nothing needs once the session is closed:

- leg -> ``on_failed`` (the session's bound ``close_soon``) -> session -> leg;
- speaker -> ``observer`` (the conversation's bound method) -> conversation -> speaker, and each
  utterance's ``observer`` / ``on_finish`` (bound methods of the conversation / speaker);
- utterance -> ``deliveries`` -> delivery -> ``utterance``: the delivery keeps a stand-in
  (``_ClosedUtterance``) so a late call on it is harmless; the utterance keeps its deliveries
  (``as_json`` still shows them to a request that was waiting on it);
- the batch path's parked track -> ``on_sender_started`` (the leg's bound method) -> leg, when
  the sender never started (a session that never connected);
- aiortc / aioice (``aiortc_compat.release_peer_connection``): the DTLS transport's listeners
  (the peer connection's bound ``__updateConnectionState``: aiortc removes the ICE transport's
  and its own at close, not the DTLS transport's), our instance-level wrappers on the DTLS
  transport and receiver (RTCP interception -> Retransmitter -> sender -> transport), aioice's
  check list (pair -> protocol -> ``receiver`` = the connection).

``release`` then hands the session's main objects to ``gc_policy.watch_closed``, which counts
them freed (by refcounting, at once), garbage (a cycle this module missed: reclaimed later) or
retained (held by something: a leak). Every step runs whatever the others do.

Not cut here (measured, ≈290 objects per closed full-duplex session): the uplink's
``ReceivePath`` keeps two cycles of its own after ``close`` (its ``PlayoutClock`` holds the bound
``tick``; its ``NackSender`` a lambda over the path), and through its RTCP closures they hold the
receiver, the DTLS and ICE transports and the Opus decoder. They are the receive path's to drop
on close; until then ``watch_closed`` counts such sessions as garbage and the GC policy reclaims
them (when idle, or once they add up).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from gateway import aiortc_compat
from gateway.runtime import gc_policy
from gateway.runtime.lazy_event import LazyEvent
from gateway.speech.utterance import Utterance, UtteranceState

# ``Session`` is not imported (session.py imports this module): a session is typed ``Any``.
Session = Any

log = logging.getLogger(__name__)


class _ClosedUtterance:
    """What a closed session's deliveries point at instead of their utterance (no cycle)."""

    __slots__ = ()
    state = UtteranceState.INTERRUPTED
    total_frames = None

    def _first_sent(self, at: float) -> None:
        return None

    def _check_done(self) -> None:
        return None


_CLOSED_UTTERANCE: Any = _ClosedUtterance()


def _ignore(*args: Any) -> None:
    return None


def release(session: Session) -> None:
    """Cut the closed ``session``'s reference cycles (call once it is closed)."""
    for step in (_release_session, _release_speech, _release_webrtc, _watch):
        try:
            step(session)
        except Exception:  # one step's failure must not keep the others from running
            log.exception("session %s: teardown step %s failed", session.id, step.__name__)


async def close_steps(what: str, steps: Sequence[Callable[[], Awaitable[None]]]) -> None:
    """Run every closing step of ``what`` in order; one that fails is logged and the next still
    runs (the peer connection, the recogniser's process, must close whatever came before)."""
    for step in steps:
        try:
            await step()
        except Exception:
            log.exception("%s: closing step failed", what)


class CloseOnce:
    """A session's close, run once: the first ``begin`` runs it, a later one waits for it to
    end; ``soon`` starts it from a callback (a failed peer connection, the idle sweep)."""

    def __init__(self) -> None:
        self.closed = LazyEvent()  # set once the close has run
        self.reason: str | None = None  # why, from the first close
        self._task: asyncio.Task[None] | None = None

    def soon(self, close: Callable[[str], Coroutine[Any, Any, None]], reason: str) -> None:
        if self._task is None and not self.closed.is_set():
            self._task = asyncio.get_running_loop().create_task(close(reason))

    async def begin(self, reason: str) -> bool:
        """True for the first close, which runs its steps and then calls ``finish``; a later
        one waits for it and gets False."""
        if self.reason is not None:
            await self.closed.wait()
            return False
        self.reason = reason
        return True

    def finish(self) -> None:
        """The close ran: ``closed`` is set, the closing task forgotten (a cycle through the
        session otherwise: task -> coroutine -> session)."""
        self.closed.set()
        self._task = None


class ClosesOnce:
    """What a session's front door shares about closing: ``closed``, ``close_reason``,
    ``close_soon`` and ``close`` run once through a ``CloseOnce`` (``_close``). A session
    names itself (``_label``), lists its closing steps (``_closing_steps``) and what it
    releases afterwards (``_release``); ``_on_closed`` (the registry's) is called once."""

    id: str
    _close: CloseOnce
    _on_closed: Callable[[Any], None] | None
    _label = "session"

    @property
    def closed(self) -> asyncio.Event:
        """Set once the session has closed."""
        return self._close.closed

    @property
    def close_reason(self) -> str | None:
        return self._close.reason

    def close_soon(self, reason: str) -> None:
        self._close.soon(self.close, reason)

    async def close(self, reason: str = "closed") -> None:
        if not await self._close.begin(reason):
            return
        what = f"{self._label} {self.id}"
        log.info("%s closing: %s", what, reason, extra={"session": self.id})
        try:
            await close_steps(what, self._closing_steps())
        finally:
            self._close.finish()
            on_closed, self._on_closed = self._on_closed, None
            if on_closed is not None:
                on_closed(self)
            try:  # its reference cycles cut: refcounting frees it (no full collection)
                self._release()
            except Exception:
                log.exception("%s: teardown failed", what)

    def _closing_steps(self) -> Sequence[Callable[[], Awaitable[None]]]:
        raise NotImplementedError

    def _release(self) -> None:
        """Cut the session's reference cycles once it has closed."""


def release_speech(session: Any) -> None:
    """The speech part of ``release``, for sessions of other front doors (a Realtime
    WebSocket: a conversation and no WebRTC leg)."""
    _release_speech(session)


def _release_session(session: Session) -> None:
    session.webrtc.on_failed = _ignore


def _release_speech(session: Session) -> None:
    speaker = session.conversation.speaker
    speaker.observer = None
    utterances: dict[int, Utterance] = {id(u): u for u in speaker.recent}
    for utterance in speaker.waiting():
        utterances[id(utterance)] = utterance
    for utterance in utterances.values():
        utterance.observer = None
        utterance.on_finish = None
        for delivery in utterance.deliveries.values():
            delivery.utterance = _CLOSED_UTTERANCE
    session.conversation.events.close()  # its data-channel sender holds the channel


def _release_webrtc(session: Session) -> None:
    leg = session.webrtc
    track = leg.track
    if getattr(track, "_on_sender_started", None) is not None:
        track._on_sender_started = None  # type: ignore[attr-defined]
    aiortc_compat.release_peer_connection(leg.pc)


def _watch(session: Session) -> None:
    leg = session.webrtc
    objects: list[object] = [session, session.conversation, session.speaker, leg, leg.pc,
                             leg.retransmitter]
    for part in (getattr(session, "duplex", None), getattr(leg, "uplink", None)):
        if part is not None:
            objects.append(part)
    objects.extend(aiortc_compat.peer_connection_transports(leg.pc))
    gc_policy.watch_closed(objects)
