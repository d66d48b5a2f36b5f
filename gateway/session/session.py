"""A session: an id, a transport-free conversation and the legs that carry it.

A session's leg is WebRTC (``gateway.webrtc.leg.WebRtcLeg``: the peer connection, its RTP sink,
NACK answers and, in full duplex, the microphone's receive path); the leg is an ``AudioSink`` of
the conversation (``gateway.media.sink``). A session owns everything it starts and ``close``
ends all of it -- every step runs even when an earlier one fails -- and closing twice is
harmless. A peer that fails or closes its side ends its own session only.

Session ids are ``<prefix><random>``: the registry's prefix can later name the worker that owns
the session (scale-out), so any node can route a request by its id alone.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiortc import RTCConfiguration

from gateway.conversation import teardown
from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import ASR_RATE, Duplex, DuplexFactory
from gateway.conversation.options import SessionOptions
from gateway.media.opus_codec import SAMPLE_RATE
from gateway.net.udp_mux import MuxGroup
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.speaker import Speaker
from gateway.webrtc.leg import WebRtcLeg
from gateway.webrtc.sdp_policy import OfferSummary, inspect_offer

log = logging.getLogger(__name__)

__all__ = ["Session", "SessionOptions", "new_session_id"]


def new_session_id(prefix: str = "") -> str:
    return prefix + secrets.token_urlsafe(12)


class Session(teardown.ClosesOnce):
    def __init__(
        self,
        conversation: Conversation,
        webrtc: WebRtcLeg,
        on_closed: Callable[[Session], None] | None = None,
        session_id: str | None = None,
    ) -> None:
        self.duplex: Duplex | None = None  # hearing the user (a sendrecv offer, full duplex)
        self.id = session_id or new_session_id()
        self.conversation = conversation
        self.webrtc = webrtc
        self.created_at = time.monotonic()
        self.last_activity = self.created_at  # an API request, or speech (see ``idle_for``)
        self._close = teardown.CloseOnce()
        self._on_closed = on_closed
        webrtc.on_failed = self.close_soon

    @property
    def speaker(self) -> Speaker:
        return self.conversation.speaker

    @property
    def offer(self) -> OfferSummary:
        return self.webrtc.offer

    @classmethod
    async def create(
        cls,
        offer_sdp: str,
        rtc_config: RTCConfiguration,
        options: SessionOptions,
        on_closed: Callable[[Session], None] | None = None,
        phrase_cache: PhraseCache | None = None,
        session_id: str | None = None,
        duplex: DuplexFactory | None = None,
        udp_mux: MuxGroup | None = None,
    ) -> tuple[Session, str]:
        """Answer ``offer_sdp``; returns the session and the answer SDP. Raises SdpRejected."""
        summary = inspect_offer(offer_sdp)
        conversation = Conversation(
            options.encoder, options.max_pending_utterances, phrase_cache
        )
        # a duplex session's uplink is decoded at its listener's 16 kHz (no resampling)
        leg = WebRtcLeg(rtc_config, options, summary, udp_mux,
                        uplink_rate=ASR_RATE if duplex is not None else SAMPLE_RATE)
        session = cls(conversation, leg, on_closed, session_id)
        leg.attach(conversation)
        try:
            answer = await leg.negotiate(offer_sdp)
        except BaseException:
            await session.close("negotiation failed")
            raise
        if leg.uplink is not None and duplex is not None:
            session.duplex = duplex.make(conversation, uplink_rate=leg.uplink.pcm.sample_rate)
            leg.uplink.pcm.on_frame(lambda frame: session.duplex.hear(frame.pcm, frame.at)
                                    if session.duplex is not None else None)
            session.duplex.start()
        return session, answer

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def idle_for(self, now: float) -> float:
        """Seconds with no request and nothing said or playing (0 while speaking)."""
        if not self.speaker.idle.is_set() or len(self.webrtc.queue):
            self.last_activity = now
        return now - self.last_activity

    def _closing_steps(self) -> list[Callable[[], Any]]:
        steps = [self.conversation.close, self.webrtc.close]
        if self.duplex is not None:
            steps.insert(0, self.duplex.close)
        return steps

    def _release(self) -> None:
        teardown.release(self)

    def state(self) -> dict[str, Any]:
        speaker = self.speaker
        current = speaker.current
        return {
            "id": self.id,
            "age_s": round(time.monotonic() - self.created_at, 3),
            **self.webrtc.state(),
            "utterances": {
                "pending": speaker.pending,
                "current": current.id if current else None,
                **{state: n for state, n in speaker.counts.items()},
                "recent": [u.as_json() for u in list(speaker.recent)[-10:]],
            },
            "duplex": None if self.duplex is None else self.duplex.state(),
            "sinks": {
                port.name: {"policy": port.policy.value, "frames_in": port.frames_in,
                            "dropped": port.dropped, "queued": len(port.queue)}
                for port in self.conversation.fanout.ports
            },
        }
