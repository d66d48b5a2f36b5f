"""The passthrough audio track: aiortc's own send loop as the transmitter of an ``RtpSink``.

aiortc's sender packs any non-``av.Frame`` it receives from ``recv()`` without re-encoding
(one ``av.Packet`` = one RTP payload) and does not pace, so this track waits for each 20 ms slot
of the sink's schedule (``PacingClock`` aligned to the process-wide ``Ticker`` grid) itself. The
RTP timestamp is derived from ``pts`` in a 1/48000 time base (the Opus RTP clock, so aiortc
converts nothing): slot ``n`` has pts ``960 n``.

aiortc records every packet it sends in its sender's history just before sending it:
``SenderHistory`` is that history (``aiortc_compat.install_sender_history``), recording into the
sink's frame store the payload and abs-send-time aiortc sent, attributed to the frame this track
handed over. Any exception there or in ``recv`` would end aiortc's send loop for good, so both are
guarded and counted (``stats.send_errors``).

Not a send path of the gateway's any more (every stream is sent from the shared tick,
gateway/webrtc/batch_sender.py): the tests keep it as a pull-based consumer of an ``RtpSink``
(tests/pipeline.py: the speaker's frames as aiortc's sender would take them).
"""

from __future__ import annotations

import asyncio
import fractions
import logging
from typing import Any

import av
from aiortc import RTCRtpSender
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from gateway import aiortc_compat
from gateway.media.frames import EncodedFrame
from gateway.media.opus_codec import RTP_CLOCK_RATE, RTP_TICKS_PER_FRAME
from gateway.rtp.header import RtpHeaderTemplate
from gateway.webrtc.pacer import PacingClock
from gateway.webrtc.rtp_sink import RtpSink

TIME_BASE = fractions.Fraction(1, RTP_CLOCK_RATE)
log = logging.getLogger(__name__)


class SenderHistory:
    """What aiortc's sender takes for its retransmission history: records into the sink."""

    __slots__ = ("next_frame", "next_red", "sink")

    def __init__(self, sink: RtpSink) -> None:
        self.sink = sink
        self.next_frame: EncodedFrame | None = None  # set by the track just before aiortc sends
        self.next_red = False  # ... and whether that payload is RED

    def __setitem__(self, key: int, packet: Any) -> None:
        frame, self.next_frame = self.next_frame, None
        owner, index = (None, 0) if frame is None else (frame.owner, frame.index)
        try:
            ast = packet.extensions.abs_send_time
            self.sink.store.record_sent(
                int(packet.sequence_number), int(packet.timestamp), bytes(packet.payload),
                owner, index, 0 if ast is None else int(ast), red=self.next_red,
            )
        except Exception:
            self.sink.stats.send_errors += 1
            log.exception("recording a sent packet failed (the stream carries on)")

    def get(self, key: int, default: Any = None) -> Any:
        """aiortc reads its history only to answer NACKs, which the ``Retransmitter`` takes
        out of the RTCP before aiortc sees it: nothing for aiortc to resend."""
        return default


class PassthroughOpusTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self, sink: RtpSink) -> None:
        super().__init__()
        self.sink = sink
        self.stats = sink.stats
        self.history = SenderHistory(sink)
        self._sender: RTCRtpSender | None = None
        self._payload_type = 0

    def bind(self, sender: RTCRtpSender, payload_type: int) -> None:
        """Become ``sender``'s source and history (after negotiation, before it starts)."""
        self._sender, self._payload_type = sender, payload_type
        aiortc_compat.install_sender_history(sender, self.history)
        if self.sink.drop_first_tx is not None or self.sink.red is not None:
            aiortc_compat.filter_first_transmissions(sender.transport, self._first_transmission)

    def _first_transmission(self, data: bytes) -> bytes | None:
        """aiortc sends every packet under the Opus payload type: a RED payload gets RED's
        (the marker bit kept), and the test-only drop applies."""
        red = self.sink.red
        if red is not None and self.history.next_red:
            data = bytes((data[0], (data[1] & 0x80) | red.red_pt)) + data[2:]
        drop = self.sink.drop_first_tx
        return None if drop is not None and drop(data) else data

    def _start(self) -> None:
        # aiortc calls recv() once the sender is configured (mid, header extensions): the
        # template NACK answers are rebuilt from is known from then on.
        sender = self._sender
        if sender is not None and self.sink.store.header is None:
            mid, extensions = aiortc_compat.sender_rtp_context(sender)
            ssrc = aiortc_compat.sender_ssrc(sender)
            self.sink.store.header = RtpHeaderTemplate.from_aiortc(
                self._payload_type, ssrc, extensions, mid
            )
            if self.sink.red is not None:
                self.sink.store.red_header = RtpHeaderTemplate.from_aiortc(
                    self.sink.red.red_pt, ssrc, extensions, mid
                )

    @property
    def pacer(self) -> PacingClock:
        return self.sink.pacer

    async def _wait_slot(self) -> None:
        pacer, ticker = self.sink.pacer, self.sink.ticker
        if pacer.time_to_next() <= 0:
            return
        if ticker is None:
            await pacer.wait_due()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ticker.wake_at(pacer.deadline(), waiter)
        await waiter

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        if self.sink.store.header is None:
            self._start()
        await self._wait_slot()
        if self.readyState != "live":
            raise MediaStreamError
        payload, owner, index, slot = self.sink.take_slot()
        # aiortc packs this packet and records it (SenderHistory) synchronously after we return.
        self.history.next_frame = None if owner is None else EncodedFrame(payload, owner, index)
        red = self.sink.red
        if red is not None:
            # offsets are what RED carries: the slot's pts is aiortc's timestamp less its origin
            pts = slot * RTP_TICKS_PER_FRAME
            payload, how = red.wrap(payload, pts, self.sink.pacer.now())
            self.history.next_red = bool(how)  # recorded as sent (the store's RED_AS_SENT)
        packet = av.Packet(payload)
        packet.pts = slot * RTP_TICKS_PER_FRAME
        packet.time_base = TIME_BASE
        return packet
