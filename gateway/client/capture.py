"""Raw RTP capture and offline decoding of what a client received.

Packets are taken straight from the receiver (``aiortc_compat.tap_rtp``), before aiortc's
jitter buffer and decoder, so the payload bytes and arrival times are exactly what crossed the
wire; they are kept only when a capture is asked for (``max_packets``), bounded. Decoding orders
packets by unwrapped sequence number and conceals gaps with libopus PLC.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from gateway.media.opus_codec import FRAME_SAMPLES, OpusFrameDecoder, silence_packet
from gateway.rtp import red


@dataclass(slots=True)
class ReceivedPacket:
    seq: int  # unwrapped (monotonic across the 65535 -> 0 wrap)
    timestamp: int
    payload: bytes
    arrival: float  # time.monotonic()
    payload_type: int
    ssrc: int
    marker: bool = False  # RTP M bit: a talkspurt's first packet (with DTX)


DEFAULT_MAX_PACKETS = 90_000  # 30 min of 20 ms packets, when a capture is asked for


class RtpCapture:
    """Counts packets and follows the newest sequence number (for the ``wait_*`` calls); keeps
    the packets themselves only when asked for: ``max_packets`` > 0 (then at most that many,
    later ones are counted in ``dropped``). A capture that keeps nothing refuses ``packets``,
    ``ordered`` and ``missing`` rather than answer them empty."""

    def __init__(self, max_packets: int = 0) -> None:
        if max_packets < 0:
            raise ValueError("max_packets must be >= 0")
        self.max_packets = max_packets
        self.count = 0  # packets seen
        self.dropped = 0  # seen but not kept, the capture being full
        self._packets: list[ReceivedPacket] = []
        self.red_payload_type: int | None = None  # packets of this type are RFC 2198 RED
        self._last_seq: int | None = None
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    @property
    def keeps_packets(self) -> bool:
        return self.max_packets > 0

    @property
    def packets(self) -> list[ReceivedPacket]:
        """The packets kept, in arrival order."""
        if not self.keeps_packets:
            raise RuntimeError("the RTP capture keeps no packets: GatewayClient(capture=True)")
        return self._packets

    def on_packet(self, packet: object, arrival_time_ms: int) -> None:
        now = time.monotonic()
        seq16 = int(packet.sequence_number)  # type: ignore[attr-defined]
        if self._last_seq is None:
            seq = seq16
        else:
            delta = (seq16 - self._last_seq) & 0xFFFF
            seq = self._last_seq + (delta - 0x10000 if delta >= 0x8000 else delta)
        self._last_seq = max(seq, self._last_seq) if self._last_seq is not None else seq
        self.count += 1
        if len(self._packets) < self.max_packets:
            self._packets.append(
                ReceivedPacket(
                    seq, int(packet.timestamp), bytes(packet.payload), now,  # type: ignore[attr-defined]
                    int(packet.payload_type), int(packet.ssrc),  # type: ignore[attr-defined]
                    bool(getattr(packet, "marker", False)),
                )
            )
        elif self.keeps_packets:
            self.dropped += 1
        for item in list(self._waiters):
            condition, fut = item
            if fut.done():
                self._waiters.remove(item)
            elif condition():
                fut.set_result(None)
                self._waiters.remove(item)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Until ``condition()`` holds, checked as each packet arrives."""
        if condition():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((condition, fut))
        try:
            await fut
        finally:
            if not fut.done():
                fut.cancel()

    async def wait_for_seq(self, seq16: int) -> None:
        """Until a packet at or after 16-bit ``seq16`` (serial order) has arrived."""
        await self.wait_until(
            lambda: self._last_seq is not None and (self._last_seq - seq16) & 0xFFFF < 0x8000
        )

    async def wait_packets(self, count: int) -> None:
        """Until ``count`` packets have arrived in all."""
        await self.wait_until(lambda: self.count >= count)

    async def wait_arrival(self, seq16: int, after_index: int = 0) -> ReceivedPacket:
        """Until a packet with 16-bit ``seq16`` arrives at capture index ``after_index`` or later
        (a retransmission of a sequence number already seen, say); returns it."""
        packets = self.packets

        def find() -> ReceivedPacket | None:
            for p in packets[after_index:]:
                if p.seq & 0xFFFF == seq16 & 0xFFFF:
                    return p
            return None

        await self.wait_until(lambda: find() is not None)
        found = find()
        assert found is not None
        return found

    def ordered(self) -> list[ReceivedPacket]:
        seen: dict[int, ReceivedPacket] = {}
        for p in self.packets:
            seen.setdefault(p.seq, p)
        return [seen[s] for s in sorted(seen)]

    def missing(self) -> list[int]:
        ordered = self.ordered()
        if not ordered:
            return []
        have = {p.seq for p in ordered}
        return [s for s in range(ordered[0].seq, ordered[-1].seq + 1) if s not in have]


KEEP_ALIVE = silence_packet()  # what a slot carries when no frame is ready (default settings)


def utterance_slots(
    packets: list[ReceivedPacket], first_seq16: int, frames_sent: int, after: float = 0.0,
    keep_alive: bytes = KEEP_ALIVE,
) -> list[ReceivedPacket]:
    """One utterance's slots as heard, from seq-ordered ``packets``: from its first frame (16-bit
    ``first_seq16``, arrived at or after ``after``) to its ``frames_sent``-th frame. A slot
    whose frame was not ready in time (the voice or the encoder starved of CPU) carries the
    keep-alive silence and the frame goes in a later slot, so the run can be longer than
    ``frames_sent``; a frame that never arrived (lost, not repaired) still takes its slot."""
    start = next(i for i, p in enumerate(packets)
                 if p.seq % 65536 == first_seq16 and p.arrival >= after)
    slots: list[ReceivedPacket] = []
    frames = 0
    expected = packets[start].seq
    for p in packets[start:]:
        frames += p.seq - expected + (p.payload != keep_alive)  # a gap's slots were frames
        expected = p.seq + 1
        if frames > frames_sent:
            break
        slots.append(p)
        if frames == frames_sent:
            break
    return slots


def voice_frames(
    slots: list[ReceivedPacket], keep_alive: bytes = KEEP_ALIVE
) -> list[ReceivedPacket]:
    """The slots that carry the voice's frames, renumbered back to back from the first: the
    frames as the encoder produced them, to decode or compare without the keep-alive slots."""
    out: list[ReceivedPacket] = []
    skipped = 0
    for p in slots:
        if p.payload == keep_alive:
            skipped += 1
        else:
            out.append(replace(p, seq=p.seq - skipped))
    return out


@dataclass
class DecodedStream:
    pcm: np.ndarray  # 24 kHz mono int16, one 480-sample frame per sequence number
    first_seq: int
    concealed: int


def opus_payload(packet: ReceivedPacket, red_payload_type: int | None = None) -> bytes:
    """The Opus packet a received packet carries (a RED packet's primary)."""
    if red_payload_type is None or packet.payload_type != red_payload_type:
        return packet.payload
    try:
        return red.primary(packet.payload)
    except red.MalformedRed:
        return b""


def decode(packets: list[ReceivedPacket], red_payload_type: int | None = None) -> DecodedStream:
    """Decode seq-ordered packets; each missing sequence number is concealed (PLC). Packets of
    ``red_payload_type`` are RED: their primary is decoded (the copies are not used here)."""
    if not packets:
        return DecodedStream(np.zeros(0, dtype=np.int16), 0, 0)
    decoder = OpusFrameDecoder()
    frames: list[np.ndarray] = []
    concealed = 0
    expected = packets[0].seq
    for p in packets:
        while expected < p.seq:
            frames.append(decoder.conceal(FRAME_SAMPLES))
            concealed += 1
            expected += 1
        payload = opus_payload(p, red_payload_type)
        frames.append(decoder.decode(payload) if payload else decoder.conceal(FRAME_SAMPLES))
        expected = p.seq + 1
    return DecodedStream(np.concatenate(frames), packets[0].seq, concealed)


def frame_rms_dbfs(frame: np.ndarray) -> float:
    if not frame.size:
        return -120.0
    rms = float(np.sqrt(np.mean(frame.astype(np.float64) ** 2)))
    return 20 * np.log10(max(rms, 1e-3) / 32768)


def first_audible(
    packets: list[ReceivedPacket], stream: DecodedStream, threshold_dbfs: float = -45.0
) -> ReceivedPacket | None:
    """The first received packet whose decoded 20 ms frame is louder than ``threshold_dbfs``."""
    by_seq = {p.seq: p for p in packets}
    for i in range(stream.pcm.size // FRAME_SAMPLES):
        frame = stream.pcm[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
        if frame_rms_dbfs(frame) > threshold_dbfs:
            packet = by_seq.get(stream.first_seq + i)
            if packet is not None:
                return packet
    return None
