"""The WebRTC leg of a session: one peer connection carrying the conversation's audio.

It owns the peer connection and the RTP side of the media path -- the ``RtpSink`` (frame queue,
5 s frame store, pacing, silence, counters), its transmitter (the batch path's tick callback or
aiortc's loop through the passthrough track) and the NACK ``Retransmitter`` -- and attaches the
sink's queue to the conversation's fan-out as its BLOCK sink named ``rtp``. The audio direction
is ``sendonly`` (a listener); ``sendrecv`` is answered once the session is to hear the user
(``SessionOptions.uplink``, the full-duplex loop).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiortc import RTCConfiguration, RTCDataChannel, RTCPeerConnection, RTCSessionDescription
from aiortc import sdp as aiortc_sdp
from aiortc.mediastreams import MediaStreamTrack

from gateway import aiortc_compat
from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import UPLINK_RECEIVE
from gateway.conversation.events import Event
from gateway.conversation.options import SessionOptions
from gateway.media.fanout import SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import SAMPLE_RATE, silence_packet
from gateway.media.ticker import shared_ticker
from gateway.nack.store import FrameStore
from gateway.net.udp_mux import MuxGroup
from gateway.receive.receive_path import ReceivePath
from gateway.runtime.clock import wall_ms, wall_offset
from gateway.runtime.lazy_event import LazyEvent, make_lazy, slim_queue
from gateway.webrtc.batch_sender import BatchStream, ParkedTrack
from gateway.webrtc.red_sender import RedSender
from gateway.webrtc.retransmission import Retransmitter
from gateway.webrtc.rtp_sink import RtpSink
from gateway.webrtc.sdp_policy import (
    OfferSummary,
    SdpRejected,
    answer_codec,
    answer_direction,
    red_codec,
)

log = logging.getLogger(__name__)

SINK_NAME = "rtp"
EVENTS_CHANNEL = "events"


class WebRtcLeg:
    name = "webrtc"

    def __init__(
        self,
        rtc_config: RTCConfiguration,
        options: SessionOptions,
        offer: OfferSummary,
        udp_mux: MuxGroup | None = None,
        uplink_rate: int = SAMPLE_RATE,
    ) -> None:
        """``uplink_rate``: the rate the uplink is decoded at (``uplink.pcm``): 24 kHz, or
        the 16 kHz of a duplex session's listener (no resampling per period)."""
        self.pc = RTCPeerConnection(rtc_config)
        self.uplink_rate = uplink_rate
        aiortc_compat.share_certificate(self.pc)  # one per process, not 6.4 KB a session
        self.udp_mux = udp_mux
        self.options = options
        self.offer = offer
        self.created_at = time.monotonic()
        self.requested_at = self.created_at  # the offer's HTTP request (set by the registry)
        self.connected_at: float | None = None  # DTLS (and so SRTP) up: media can flow
        self.answered_at: float | None = None
        self.ice_connected_at: float | None = None
        self.connected = LazyEvent()
        self.dtls_released = False
        self.direction = answer_direction(offer, options.uplink)
        self.on_failed: Callable[[str], None] = lambda reason: None  # set by the session
        self.queue = FrameQueue(options.queue_frames)
        self.store = FrameStore(options.store_frames)
        silence = silence_packet(options.encoder)
        self.sink = RtpSink(self.queue, self.store, silence, shared_ticker())
        if options.test_drop_first_tx_percent > 0:
            self.sink.lose_first_transmissions(
                options.test_drop_first_tx_percent, options.test_drop_seed,
                options.test_drop_burst,
            )
        self.sink.repair_delay_s = options.test_repair_delay_ms / 1000
        self.transmitter = BatchStream(
            self.sink, dtx=options.idle_packets == "dtx",
            early_first_frame=options.early_first_frame,
        )
        self.transmitter.in_c_allowed = options.send_in_c
        self.transmitter.report_interval_s = options.rtcp_report_interval_s
        self.track: MediaStreamTrack = ParkedTrack(on_sender_started=self._start_batch)
        self.retransmitter = Retransmitter(self.sink)
        self.retransmitter.on_red_changed = self.transmitter.red_changed
        self._watchdog: asyncio.TimerHandle | None = None
        self._payload_type = offer.opus_payload_type
        self.events_channel: RTCDataChannel | None = None
        self.uplink: ReceivePath | None = None  # the user's microphone, when sendrecv
        #: The uplink's receive fast path (None: aiortc's receive task; ``rx_fast_refusal``)
        self.rx_fast: aiortc_compat.FastReceiveStats | None = None
        self.rx_fast_refusal: str | None = None
        #: The session's SRTCP fast path (None: aiortc's receive task; ``rtcp_fast_refusal``)
        self.rtcp_fast: aiortc_compat.FastRtcpStats | None = None
        self.rtcp_fast_refusal: str | None = None
        self.ice_generation = 0
        self._etag_nonce = secrets.token_hex(4)

    def attach(self, conversation: Conversation) -> None:
        conversation.attach_sink(SINK_NAME, self.queue, SinkPolicy.BLOCK, sink=self)
        events = conversation.events

        @self.pc.on("datachannel")
        def on_datachannel(channel: RTCDataChannel) -> None:
            # The offerer's channel labelled "events" carries the session's events as JSON.
            if channel.label != EVENTS_CHANNEL:
                return
            self.events_channel = channel

            def send(event: Event) -> None:
                if channel.readyState == "open":
                    channel.send(event.message())

            events.on_event(send)

    def listener_delay_s(self) -> float:
        """A frame's send -> its playout: RTT/2 from the receiver's reports (0 before the
        first) plus the receiver's playout delay, which RTCP does not carry (an allowance)."""
        rtt = self.retransmitter.rtt_s or 0.0
        return rtt / 2 + self.options.playout_allowance_s

    def record_sent(self) -> None:
        """What C sent of the fed speech frames, recorded now (their owners told)."""
        self.transmitter.record_from_c()

    async def negotiate(self, offer_sdp: str) -> str:
        """Answer ``offer_sdp`` (raises SdpRejected); the leg then waits for ICE and DTLS."""
        pc = self.pc
        transceiver = pc.addTransceiver(self.track, direction=self.direction)
        # the batch path sends the sender reports from the tick (webrtc/batch_sender.py)
        aiortc_compat.park_sender_reports(transceiver.sender)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        except Exception as exc:  # aiortc's ValueError, OperationError, InvalidStateError, ...
            raise SdpRejected("invalid_offer", f"the offer was refused: {exc}") from exc
        if self.udp_mux is not None:  # gather on the worker's shared socket(s)
            aiortc_compat.share_udp_socket(pc, self.udp_mux.get)
        aiortc_compat.tolerate_late_consent(pc)  # a late consent answer still counts
        aiortc_compat.pace_connectivity_checks(pc, self.options.stun_checks_per_s)
        codecs = aiortc_compat.negotiated_codecs(transceiver)
        opus = answer_codec(codecs, nack=self.options.answer_nack)
        pinned = [opus]
        red_pt = self.offer.red_payload_type
        if red_pt is not None and self.options.red_distance > 0:
            # Opus first (what aiortc's own sender packs), RED after it: Chromium decodes both
            pinned.append(red_codec(red_pt, opus.payloadType))
            distance = self.options.red_distance
            self.sink.red = RedSender(
                red_pt, opus.payloadType, distance, self.options.red_adaptive,
                max_distance=max(distance, self.options.red_max_distance),
            )
        aiortc_compat.pin_codecs(transceiver, pinned)
        self._transceiver, self._payload_type = transceiver, opus.payloadType
        answer = await pc.createAnswer()
        await pc.setLocalDescription(answer)
        self.retransmitter.attach(transceiver.sender)
        if self.direction == "sendrecv":
            self._hear(transceiver.receiver)
        self.answered_at = time.monotonic()
        self._watch()
        answer_sdp = pc.localDescription.sdp
        aiortc_compat.pack_descriptions(pc)  # kept packed until read (≈ 20-26 KB a session)
        return answer_sdp

    def _hear(self, receiver: Any) -> None:
        """The uplink through the same receive path as the headless client (jitter buffer,
        NACKs, FEC/PLC): its played PCM is the conversation's to hear (``uplink.pcm``)."""

        async def send_rtcp(data: bytes) -> bool:
            return await aiortc_compat.send_receiver_rtcp(receiver, data)

        config = UPLINK_RECEIVE
        if config.sample_rate != self.uplink_rate:
            config = dataclasses.replace(config, sample_rate=self.uplink_rate)
        path = ReceivePath(
            config, send_rtcp,
            lambda: aiortc_compat.receiver_rtcp_ssrc(receiver),
        )
        aiortc_compat.tap_rtp(receiver, path.on_rtp)  # (packet, arrival_time_ms)
        path.start()
        self.uplink = path

    def _start_batch(self) -> None:
        self.transmitter.start(self._transceiver.sender, self._payload_type)

    def _watch(self) -> None:
        @self.pc.on("iceconnectionstatechange")
        def on_ice() -> None:
            if self.pc.iceConnectionState == "completed" and self.ice_connected_at is None:
                self.ice_connected_at = time.monotonic()

        @self.pc.on("connectionstatechange")
        def on_state() -> None:
            state = self.pc.connectionState
            if state == "connected" and self.connected_at is None:
                self.connected_at = time.monotonic()
                if self._watchdog is not None:
                    self._watchdog.cancel()
                # A data channel (an m=application section) still needs DTLS: SCTP runs on it.
                if self.options.release_dtls and "application" not in self.offer.media_kinds:
                    transport = self._transceiver.sender.transport
                    self.dtls_released = aiortc_compat.release_dtls(transport)
                aiortc_compat.lazy_events(self.pc, make_lazy, slim_queue)  # docs/density.md
                if self.udp_mux is not None:  # the peer's consent checks answered from the bytes
                    aiortc_compat.answer_consent_directly(self.pc)
                self._receive_directly()
                self.connected.set()
            elif state in ("failed", "closed"):
                self.on_failed(f"peer connection {state}")

        self._watchdog = asyncio.get_running_loop().call_later(
            self.options.connect_timeout_s, self._reap_if_never_connected
        )

    def _receive_directly(self) -> None:
        """The session's SRTCP and the uplink's SRTP straight from the shared socket's read
        loop (docs/density.md, "The receive fast path", "SRTCP from the read loop"): no aiortc
        receive task, queue or coroutine wake-up per datagram."""
        transport = self._transceiver.sender.transport
        if not self.options.rtcp_fast_path:
            self.rtcp_fast_refusal = "off (--no-rtcp-fast-path)"
        else:  # (first: the RTP path hands SRTCP on to it)
            self.rtcp_fast = aiortc_compat.receive_rtcp_directly(transport)
            if self.rtcp_fast is None:
                self.rtcp_fast_refusal = aiortc_compat.fast_rtcp_refusal(transport)
                log.debug("SRTCP fast path not taken: %s", self.rtcp_fast_refusal)
        if self.uplink is None:
            return
        if not self.options.rx_fast_path:
            self.rx_fast_refusal = "off (--no-rx-fast-path)"
            return
        receiver = self._transceiver.receiver
        self.rx_fast = aiortc_compat.receive_rtp_directly(receiver)
        if self.rx_fast is None:
            self.rx_fast_refusal = aiortc_compat.fast_receive_refusal(receiver)
            log.debug("receive fast path not taken: %s", self.rx_fast_refusal)

    def _reap_if_never_connected(self) -> None:
        if self.connected_at is None:
            self.on_failed("never connected")

    @property
    def etag(self) -> str:
        """A strong ETag of the ICE session: it changes with every ICE restart."""
        return f'"{self.ice_generation}-{self._etag_nonce}"'

    @property
    def _ice(self) -> Any:
        return self._transceiver.sender.transport.transport

    @property
    def remote_ufrag(self) -> str | None:
        return aiortc_compat.ice_credentials(self._ice)[1][0]

    def restart_ice(self, remote_ufrag: str, remote_pwd: str) -> str:
        """An ICE restart (RFC 8445 §9, WHEP's PATCH): new credentials on both sides, the same
        candidates; returns the gateway's sdpfrag. Raises ValueError for bad credentials and
        then leaves the ICE session as it was."""
        previous = aiortc_compat.ice_credentials(self._ice)
        try:
            ufrag, pwd = aiortc_compat.restart_ice(self._ice, remote_ufrag, remote_pwd)
        except ValueError:
            aiortc_compat.restart_ice(self._ice, previous[1][0] or "", previous[1][1] or "",
                                      local=previous[0])
            raise
        self.ice_generation += 1
        gatherer = self._transceiver.sender.transport.transport.iceGatherer
        lines = [f"a=ice-ufrag:{ufrag}", f"a=ice-pwd:{pwd}",
                 f"m=audio 9 UDP/TLS/RTP/SAVPF {self._payload_type}"]
        if self.offer.audio_mid is not None:
            lines.append(f"a=mid:{self.offer.audio_mid}")
        lines += [f"a=candidate:{aiortc_sdp.candidate_to_sdp(c)}"
                  for c in gatherer.getLocalCandidates()]
        lines.append("a=end-of-candidates")
        return "\r\n".join(lines) + "\r\n"

    async def add_ice_candidates(self, candidates: list[Any], end: bool) -> None:
        for candidate in candidates:
            await self.pc.addIceCandidate(candidate)
        if end:
            await self.pc.addIceCandidate(None)
        aiortc_compat.pack_descriptions(self.pc)  # (addIceCandidate unpacked the offer)

    async def close(self) -> None:
        """Stop sending and close the peer connection (each step runs whatever the others do)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.retransmitter.close()
        try:
            if self.uplink is not None:
                await self.uplink.close()
            self.transmitter.stop()
            self.track.stop()
        finally:
            await self.pc.close()

    def send_counts(self) -> dict[str, int]:
        """This leg's counters, named as the process metrics (runtime/metrics.py) name them."""
        self.transmitter.settle()  # (silence sent from C counted)
        stats, nack = self.sink.stats, self.retransmitter.stats()
        return {
            "rtp_packets_sent": stats.frames_sent,
            "rtp_speech_packets_sent": stats.speech_frames,
            "rtp_bytes_sent": stats.bytes_sent,
            "nacks_received": nack["nacks_received"],
            "retransmissions": nack["hits"],
            "concealments": nack["concealments_sent"],
            "nack_rate_limited": nack["rate_limited"],
            "send_errors": stats.send_errors,
        }

    def timeline(self) -> dict[str, float | None]:
        """Where the connect time went, in ms from the offer's arrival (the leg's creation,
        once the body was read): the answer sent, ICE connected, DTLS up, the first packet on
        the wire; ``request``: the HTTP request's arrival (≤ 0)."""
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.created_at) * 1000, 1)

        return {"request": ms(self.requested_at), "answer": ms(self.answered_at),
                "ice": ms(self.ice_connected_at), "dtls": ms(self.connected_at),
                "first_packet": ms(self.sink.stats.first_sent_at)}

    def timeline_unix_ms(self) -> dict[str, float | None]:
        """The same moments as Unix epoch ms (runtime/clock.py): a browser on this machine
        lines them up with ``performance.timeOrigin + performance.now()``."""
        offset = wall_offset()
        return {name: wall_ms(t, offset) for name, t in (
            ("request", self.requested_at), ("offer", self.created_at),
            ("answer", self.answered_at), ("ice", self.ice_connected_at),
            ("dtls", self.connected_at), ("first_packet", self.sink.stats.first_sent_at),
        )}

    def ice_pair(self) -> dict[str, str | None] | None:
        """The nominated ICE pair's candidate types (host / prflx ...), once there is one."""
        transceiver = getattr(self, "_transceiver", None)
        if transceiver is None or transceiver.sender.transport is None:
            return None
        return aiortc_compat.nominated_pair_types(transceiver.sender.transport)

    def state(self) -> dict[str, Any]:
        self.transmitter.settle()  # (silence sent from C counted)
        sink = self.sink
        stats, pacer = sink.stats, sink.pacer.stats
        return {
            "connection_state": self.pc.connectionState,
            "ice_connection_state": self.pc.iceConnectionState,
            "direction": self.direction,
            "uplink": None if self.uplink is None else self.uplink.stats.as_dict(),
            "rx_fast": None if self.rx_fast is None else self.rx_fast.as_dict(),
            "rx_fast_refusal": self.rx_fast_refusal,
            "rtcp_fast": None if self.rtcp_fast is None else self.rtcp_fast.as_dict(),
            "rtcp_fast_refusal": self.rtcp_fast_refusal,
            "dtls_released": self.dtls_released,
            "connect_ms": (
                None
                if self.connected_at is None
                else round((self.connected_at - self.created_at) * 1000, 1)
            ),
            "connect_timeline_ms": self.timeline(),
            "connect_timeline_unix_ms": self.timeline_unix_ms(),
            "ice_pair": self.ice_pair(),
            "opus_payload_type": self._payload_type,
            "packets_sent": stats.frames_sent,
            "speech_frames_sent": stats.speech_frames,
            "silence_frames_sent": stats.silence_frames,
            "send_errors": stats.send_errors,
            "async_sends": stats.async_sends,
            "async_dropped": stats.async_dropped,
            "idle_packets": self.options.idle_packets,
            "early_first_frames": getattr(self.transmitter, "early_sends", 0),
            "queued_frames": len(self.queue),
            "frame_store": {"size": len(self.store), "capacity": self.store.capacity},
            "nack": self.retransmitter.stats(),
            "red": None if self.sink.red is None else self.sink.red.as_json(),
            "rtcp": {"rtt_ms": None if self.retransmitter.rtt_s is None
                     else round(self.retransmitter.rtt_s * 1000, 2),
                     "fraction_lost": self.retransmitter.fraction_lost},
            "pacer": {
                "late_slots": pacer.late_slots,
                "rebases": pacer.rebases,
                "max_lateness_ms": round(pacer.max_lateness_s * 1000, 3),
            },
        }
