"""One listener: a peer connection, its paced Opus track, frame store and speaker.

A session owns everything it starts (the speaker task, the track, the peer connection) and
``close`` ends all of it; closing twice is harmless. A peer that fails or closes its side ends
its own session only.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamTrack

from gateway import aiortc_compat
from gateway.media.batch_sender import BatchStream, ParkedTrack
from gateway.media.frame_queue import FrameQueue
from gateway.media.frame_store import FrameStore, StoredPacket
from gateway.media.opus_codec import EncoderSettings, silence_packet
from gateway.media.retransmission import Retransmitter
from gateway.media.ticker import shared_ticker
from gateway.media.track import PassthroughOpusTrack
from gateway.session.sdp_policy import OfferSummary, SdpRejected, answer_codec, inspect_offer
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.speaker import Speaker, Utterance, UtteranceState

log = logging.getLogger(__name__)


def _cut_off(entry: StoredPacket) -> bool:
    """Speech that barge-in cut off: not worth resending."""
    owner = entry.frame.owner if entry.frame is not None else None
    return isinstance(owner, Utterance) and owner.state is UtteranceState.INTERRUPTED


@dataclass(frozen=True, slots=True)
class SessionOptions:
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    queue_frames: int = 50  # ≈1 s of audio between encoder and track
    store_frames: int = 250  # 5 s of sent packets kept for retransmission
    max_pending_utterances: int = 32
    connect_timeout_s: float = 30.0  # a session that never connects is reaped
    answer_nack: bool = True  # a=rtcp-fb:<pt> nack in the answer (off only to compare, in tests)
    test_drop_first_tx_percent: float = 0.0  # TEST ONLY: lose this share of first transmissions
    test_drop_seed: int | None = None
    send_path: str = "batch"  # "batch": one tick callback sends every stream; "aiortc": its loop
    release_dtls: bool = True  # free OpenSSL's DTLS state once connected (aiortc_compat)


class Session:
    def __init__(
        self,
        pc: RTCPeerConnection,
        options: SessionOptions,
        on_closed: Callable[[Session], None] | None = None,
        phrase_cache: PhraseCache | None = None,
    ) -> None:
        self.id = secrets.token_urlsafe(12)
        self.pc = pc
        self.options = options
        self.created_at = time.monotonic()
        self.connected_at: float | None = None
        self.connected = asyncio.Event()
        self.closed = asyncio.Event()
        self.close_reason: str | None = None
        self.queue = FrameQueue(options.queue_frames)
        self.store = FrameStore(options.store_frames)
        silence = silence_packet(options.encoder)
        self.batch: BatchStream | None = None
        self.track: MediaStreamTrack
        if options.send_path == "batch":
            self.batch = BatchStream(self.queue, self.store, silence, shared_ticker())
            self.track = ParkedTrack(on_sender_started=self._start_batch)
            self.media: PassthroughOpusTrack | BatchStream = self.batch
        else:
            self.track = self.media = PassthroughOpusTrack(
                self.queue, self.store, silence, shared_ticker()
            )
        self.speaker = Speaker(
            self.queue, options.encoder, options.max_pending_utterances,
            cache=phrase_cache,
        )
        self.retransmitter = Retransmitter(self.store, is_cancelled=_cut_off)
        self.offer: OfferSummary | None = None
        self._on_closed = on_closed
        self._closing: asyncio.Task[None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self.dtls_released = False

    @classmethod
    async def create(
        cls,
        offer_sdp: str,
        rtc_config: RTCConfiguration,
        options: SessionOptions,
        on_closed: Callable[[Session], None] | None = None,
        phrase_cache: PhraseCache | None = None,
    ) -> tuple[Session, str]:
        """Answer ``offer_sdp``; returns the session and the answer SDP. Raises SdpRejected."""
        summary = inspect_offer(offer_sdp)
        pc = RTCPeerConnection(rtc_config)
        session = cls(pc, options, on_closed, phrase_cache)
        session.offer = summary
        try:
            answer = await session._negotiate(offer_sdp)
        except BaseException:
            await session.close("negotiation failed")
            raise
        session._start()
        return session, answer

    async def _negotiate(self, offer_sdp: str) -> str:
        pc = self.pc
        transceiver = pc.addTransceiver(self.track, direction="sendonly")
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise SdpRejected("invalid_offer", f"the offer was refused: {exc}") from exc
        except Exception as exc:  # aiortc's OperationError / InvalidStateError and kin
            raise SdpRejected("invalid_offer", f"the offer was refused: {exc}") from exc
        codecs = aiortc_compat.negotiated_codecs(transceiver)
        opus = answer_codec(codecs, nack=self.options.answer_nack)
        aiortc_compat.pin_codecs(transceiver, [opus])
        self._transceiver, self._payload_type = transceiver, opus.payloadType
        aiortc_compat.install_sender_history(transceiver.sender, self.store)
        answer = await pc.createAnswer()
        await pc.setLocalDescription(answer)
        self.retransmitter.attach(transceiver.sender)
        if self.options.test_drop_first_tx_percent > 0:
            percent, seed = self.options.test_drop_first_tx_percent, self.options.test_drop_seed
            if self.batch is not None:
                self.batch.drop_first_tx = self.retransmitter.first_transmission_filter(
                    percent, seed
                )
            else:
                self.retransmitter.drop_first_transmissions(percent, seed)
        return pc.localDescription.sdp

    def _start_batch(self) -> None:
        assert self.batch is not None
        self.batch.start(self._transceiver.sender, self._payload_type)

    def _start(self) -> None:
        # (the speaker's task starts with the first utterance: idle sessions hold no task)
        @self.pc.on("connectionstatechange")
        def on_state() -> None:
            state = self.pc.connectionState
            if state == "connected" and self.connected_at is None:
                self.connected_at = time.monotonic()
                if self._watchdog is not None:
                    self._watchdog.cancel()
                if self.options.release_dtls:
                    transport = self._transceiver.sender.transport
                    self.dtls_released = aiortc_compat.release_dtls(transport)
                self.connected.set()
            elif state in ("failed", "closed"):
                self.close_soon(f"peer connection {state}")

        self._watchdog = asyncio.get_running_loop().call_later(
            self.options.connect_timeout_s, self._reap_if_never_connected
        )

    def _reap_if_never_connected(self) -> None:
        if self.connected_at is None:
            self.close_soon("never connected")

    def close_soon(self, reason: str) -> None:
        if self._closing is None and not self.closed.is_set():
            self._closing = asyncio.get_running_loop().create_task(self.close(reason))

    async def close(self, reason: str = "closed") -> None:
        if self.close_reason is not None:
            await self.closed.wait()
            return
        self.close_reason = reason
        log.info("session %s closing: %s", self.id, reason)
        try:
            if self._watchdog is not None:
                self._watchdog.cancel()
            await self.speaker.close()
            if self.batch is not None:
                self.batch.stop()
            self.track.stop()
            await self.pc.close()
        finally:
            self.closed.set()
            if self._on_closed is not None:
                self._on_closed(self)

    async def add_ice_candidates(self, candidates: list[Any], end: bool) -> None:
        for candidate in candidates:
            await self.pc.addIceCandidate(candidate)
        if end:
            await self.pc.addIceCandidate(None)

    def state(self) -> dict[str, Any]:
        speaker, track = self.speaker, self.media
        current = speaker.current
        return {
            "id": self.id,
            "connection_state": self.pc.connectionState,
            "dtls_released": self.dtls_released,
            "ice_connection_state": self.pc.iceConnectionState,
            "age_s": round(time.monotonic() - self.created_at, 3),
            "connect_ms": (
                None
                if self.connected_at is None
                else round((self.connected_at - self.created_at) * 1000, 1)
            ),
            "opus_payload_type": self.offer.opus_payload_type if self.offer else None,
            "utterances": {
                "pending": speaker.pending,
                "current": current.id if current else None,
                **{state: n for state, n in speaker.counts.items()},
                "recent": [u.as_json() for u in list(speaker.recent)[-10:]],
            },
            "packets_sent": track.stats.frames_sent,
            "speech_frames_sent": track.stats.speech_frames,
            "silence_frames_sent": track.stats.silence_frames,
            "queued_frames": len(self.queue),
            "frame_store": {"size": len(self.store), "capacity": self.store.capacity},
            "nack": self.retransmitter.stats(),
            "pacer": {
                "late_slots": track.pacer.stats.late_slots,
                "rebases": track.pacer.stats.rebases,
                "max_lateness_ms": round(track.pacer.stats.max_lateness_s * 1000, 3),
            },
        }
