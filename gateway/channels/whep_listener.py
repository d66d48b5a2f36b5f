"""A WHEP listener: one peer connection carrying the channel's air.

It is a session's WebRTC leg (session/webrtc_leg.py: the RTP sink with its pacing, keep-alive,
5 s frame store and NACK answers, the batch send path, ICE restart) whose frame queue is fed by
the channel's air instead of a conversation's fan-out: the leg is never attached to a
conversation, its queue (``LagPolicy.queue_frames`` deep) is this listener's. The RTP payloads
are the aired Opus packets as the speaker encoded them; every listener costs only its SRTP and
send. It is fed from the first aired frame after its DTLS is up. The peer connection failing
or closing ends this listener only.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from aiortc import RTCConfiguration

from gateway.channels.listener import LagPolicy, Listener
from gateway.conversation.options import SessionOptions
from gateway.net.udp_mux import MuxGroup
from gateway.runtime.metrics import METRICS
from gateway.webrtc.leg import WebRtcLeg
from gateway.webrtc.sdp_policy import inspect_offer


class WhepListener(Listener):
    transport = "whep"

    def __init__(self, leg: WebRtcLeg, policy: LagPolicy) -> None:
        super().__init__(policy)
        self.leg = leg
        self.queue = leg.queue  # the RTP sink drains it, one frame per 20 ms slot
        self._closing: asyncio.Task[None] | None = None
        leg.on_failed = self.close_soon

    @classmethod
    async def answer(
        cls, offer_sdp: str, rtc_config: RTCConfiguration, options: SessionOptions,
        policy: LagPolicy, udp_mux: MuxGroup | None = None,
    ) -> tuple[WhepListener, str]:
        """Answer ``offer_sdp`` (raises SdpRejected); the leg sends once DTLS is up."""
        summary = inspect_offer(offer_sdp)
        options = dataclasses.replace(options, queue_frames=policy.queue_frames, uplink=False)
        leg = WebRtcLeg(rtc_config, options, summary, udp_mux)
        listener = cls(leg, policy)
        try:
            answer = await leg.negotiate(offer_sdp)
        except BaseException:
            await leg.close()
            raise
        METRICS.send.track(leg)
        return listener, answer

    def offer(self, payload: bytes, air_index: int) -> None:
        """Nothing is queued before DTLS is up: a listener still connecting would otherwise
        start a queue's worth behind the air."""
        if self.leg.connected.is_set():
            super().offer(payload, air_index)

    def _end(self, reason: str) -> None:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._close_leg())

    async def _close_leg(self) -> None:
        try:
            await self.leg.close()
        finally:
            METRICS.send.fold(self.leg)
            self._ended()

    def state(self) -> dict[str, Any]:
        leg = self.leg
        leg.transmitter.settle()  # (silence sent from C counted)
        return {**super().state(), "connection_state": leg.pc.connectionState,
                "packets_sent": leg.sink.stats.frames_sent,
                "speech_frames_sent": leg.sink.stats.speech_frames,
                "etag": leg.etag}
