"""The registry of live sessions, with a cap."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterator

from aiortc import RTCConfiguration

from gateway.conversation.duplex import DuplexFactory
from gateway.conversation.options import SessionOptions
from gateway.net.udp_mux import MuxGroup
from gateway.runtime.gc_policy import GcPolicy
from gateway.runtime.metrics import METRICS
from gateway.session.session import Session, new_session_id
from gateway.speech.phrase_cache import PhraseCache

#: Close reasons counted by name in the metrics (any other is counted as "other").
CLOSE_REASONS = frozenset({
    "deleted", "deleted by client", "peer connection failed", "peer connection closed",
    "never connected", "gateway shutting down", "idle", "draining",
})


ENDED_KEPT = 4096  # ended session ids remembered (for an idempotent DELETE)


class SessionLimitReached(Exception):
    pass


class Draining(SessionLimitReached):
    """The gateway is shutting down: no new sessions."""


class SessionRegistry:
    def __init__(
        self,
        rtc_config: RTCConfiguration,
        options: SessionOptions,
        max_sessions: int = 100,
        phrase_cache: PhraseCache | None = None,
        id_prefix: str = "",
        idle_timeout_s: float = 0.0,
        duplex: DuplexFactory | None = None,
        udp_mux: MuxGroup | None = None,
    ) -> None:
        self.rtc_config = rtc_config
        self.udp_mux = udp_mux  # the worker's shared UDP sockets (None: one per session)
        self.options = options
        self.max_sessions = max_sessions
        self.phrase_cache = phrase_cache  # one per process, shared by every session
        self.gc = GcPolicy(live_sessions=self.__len__)
        self._sessions: dict[str, Session] = {}
        self._creating = 0
        self.created_total = 0
        self.id_prefix = id_prefix  # names this worker in its session ids (scale-out)
        self.idle_timeout_s = idle_timeout_s
        self.duplex = duplex  # hears sendrecv offers (full duplex) when set
        self.draining = False
        # Sessions that ended lately: a WHEP client that closes its peer connection first and
        # DELETEs after finds its session already reaped -- that DELETE is still a 204.
        self._ended: OrderedDict[str, float] = OrderedDict()
        self._sweeper: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    async def create(
        self, offer_sdp: str, requested_at: float | None = None, hear: bool = True
    ) -> tuple[Session, str]:
        """``requested_at``: time.monotonic() when the offer's request arrived (the start of
        the session's connect timeline; default: now). ``hear=False``: no duplex loop of
        its own (a Realtime call brings its own hearing: gateway/realtime/call.py)."""
        requested_at = time.monotonic() if requested_at is None else requested_at
        self.admit()
        self._creating += 1
        try:
            session, answer = await Session.create(
                offer_sdp, self.rtc_config, self.options, on_closed=self._forget,
                phrase_cache=self.phrase_cache, session_id=new_session_id(self.id_prefix),
                duplex=self.duplex if hear else None, udp_mux=self.udp_mux,
            )
        finally:
            self._creating -= 1
        session.webrtc.requested_at = requested_at
        self._sessions[session.id] = session
        self.created_total += 1
        METRICS.sessions_created.inc()
        METRICS.send.track(session.webrtc)
        self.gc.freeze()  # the session's long-lived objects leave the collector's sight
        if self.idle_timeout_s > 0 and self._sweeper is None:
            self._schedule_sweep()
        return session, answer

    def admit(self) -> None:
        """Raise ``Draining`` or ``SessionLimitReached`` if no session may start now."""
        if self.draining:
            METRICS.sessions_rejected.labels("draining").inc()
            raise Draining("the gateway is draining (shutting down): no new sessions")
        if len(self._sessions) + self._creating >= self.max_sessions:
            METRICS.sessions_rejected.labels("session_limit").inc()
            raise SessionLimitReached(f"the gateway is at its cap of {self.max_sessions} sessions")

    def new_id(self) -> str:
        return new_session_id(self.id_prefix)

    def add(self, session: Session) -> None:
        """A session made by another front door (gateway/realtime: no WebRTC leg of ours,
        ``session.webrtc`` is None), counted, capped, drained and swept like the others;
        call ``admit`` first. It calls the registry's ``forget`` when it closes."""
        self._sessions[session.id] = session
        self.created_total += 1
        METRICS.sessions_created.inc()
        if self.idle_timeout_s > 0 and self._sweeper is None:
            self._schedule_sweep()

    def forget(self, session: Session) -> None:
        self._forget(session)

    def _schedule_sweep(self) -> None:
        period = min(5.0, max(0.05, self.idle_timeout_s / 4))
        self._sweeper = asyncio.get_running_loop().call_later(period, self._sweep)

    def _sweep(self) -> None:
        """Close sessions idle past ``idle_timeout_s`` (no request, nothing said or playing)."""
        now = time.monotonic()
        for session in list(self._sessions.values()):
            if session.idle_for(now) > self.idle_timeout_s:
                session.close_soon("idle")
        self._schedule_sweep()

    async def drain(self, timeout_s: float) -> None:
        """Refuse new sessions, let what is playing finish (up to ``timeout_s``), then close
        every session cleanly (DTLS close_notify)."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for session in list(self._sessions.values()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(session.speaker.wait_played(), remaining)
        await asyncio.gather(*(s.close("draining") for s in self))

    def ended_lately(self, session_id: str, within_s: float = 60.0) -> bool:
        ended = self._ended.get(session_id)
        return ended is not None and time.monotonic() - ended < within_s

    def _forget(self, session: Session) -> None:
        self._ended[session.id] = time.monotonic()
        while len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)
        if self._sessions.pop(session.id, None) is not None:
            reason = session.close_reason or "closed"
            METRICS.sessions_closed.labels(reason if reason in CLOSE_REASONS else "other").inc()
            if session.webrtc is not None:
                METRICS.send.fold(session.webrtc)
            self.gc.session_closed(len(self._sessions))

    def count_by_state(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for session in self._sessions.values():
            state = "connected" if session.webrtc is None else session.webrtc.pc.connectionState
            counts[state] = counts.get(state, 0) + 1
        return counts

    async def close(self, session_id: str) -> bool:
        session = self._sessions.get(session_id)
        if session is None:
            return False
        await session.close("deleted")
        return True

    async def close_all(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await asyncio.gather(*(s.close("gateway shutting down") for s in self))
        self.gc.close()
