"""The per-stream store of sent RTP packets, keyed by 16-bit RTP sequence number.

It holds the last ``capacity`` packets (250 = 5 s of 20 ms frames) for retransmission. Slots are
a fixed ring of 256 (a power of two, so ``seq & 255`` stays continuous across the 65535 -> 0
wrap); an entry counts only while it is among the newest ``capacity`` sequence numbers, so the
window is exact, O(1) per packet and bounded whatever the stream length.

Recording allocates nothing: the ring is a set of preallocated arrays. Both send paths record
the Opus payload (shared with the phrase cache, or the one keep-alive silence packet) and the
abs-send-time it carried (the aiortc path through ``track.SenderHistory``, the mapping aiortc's
sender writes its history to); the packet is rebuilt from the stream's header template
(``RtpHeaderTemplate``) only when a NACK asks for it, byte-identical to what was sent.
``lookup`` builds a ``StoredPacket`` view on demand.
A packet the batch path sent as RFC 2198 RED is kept as its primary frame (the shared payload)
and how many of the packets before it rode along (``RED_REBUILT + k``): their primaries are
the ring's previous entries, so the RED payload is rebuilt byte-identical on lookup
(``red.encode``). Kept as sent, 5 s of RED payloads were ~60 KB a speaking stream (each a
new ~230-byte ``bytes``; bench.load --server loss: 181 KB of RSS a stream against 100 without
loss). A RED packet whose previous entries the ring no longer holds (the oldest few of the
window) is not answered.
The frame a packet carried is kept as its owner and index (``EncodedFrame`` rebuilt on lookup).
Per packet objects would be ~250 GC-tracked objects and ~50 KB per stream, and full collections
walking them stalled every stream at hundreds of streams (bench/load.py).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.media.frames import EncodedFrame, FrameOwner
from gateway.rtp import red as rfc2198
from gateway.rtp.header import RtpHeaderTemplate

RING = 256
DEFAULT_CAPACITY = 250
# ``record_sent``'s ``red``: how the packet went out.
PLAIN = 0  # the payload as sent, under the stream's payload type
RED_AS_SENT = 1  # the payload is the RED payload as sent (``True`` means this)
RED_REBUILT = 2  # + k: RED from this primary and the k packets before it (``RedSender.wrap``)
EMPTY = 0xFFFFFFFF  # a ring slot that holds no packet (a packet's word is seq | how << 16)
# Keep-alive silence recorded by the compiled path's parked sender (net/sendpath.py
# ``gw_run_parked``), which cannot write the refs list: the payload is ``silence``, no owner.
PARKED_SILENCE = 0xFF
# ... and with RED on there, ``SILENCE_PRIMARY | RED_REBUILT + k``: RED of ``silence``.
SILENCE_PRIMARY = 0x100
# ... and a DTX stream's DTX packet sent there: the payload is ``dtx``, no owner.
PARKED_DTX = 0xFE
NEWEST, RECORDED = RING * 4, RING * 4 + 1  # ``_meta``'s words after the ring


class Recorder(Protocol):
    """What records into a store some packets after they went (``FrameStore.before_read``)."""

    def record_from_c(self) -> None: ...


@dataclass(slots=True)
class StoredPacket:
    seq: int
    timestamp: int
    packet: bytes  # the serialized RTP packet, resent unchanged
    payload: bytes  # the RTP payload it carries (an Opus packet, or RED wrapping Opus packets)
    frame: EncodedFrame | None
    red: bool = False  # sent as RFC 2198 RED (``payload`` is the RED payload)


class FrameStore:
    __slots__ = ("_clock", "_meta", "_refs", "before_read", "capacity", "dtx", "header",
                 "red_header", "red_opus_pt", "silence")

    def __init__(
        self, capacity: int = DEFAULT_CAPACITY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not 0 < capacity <= RING:
            raise ValueError(f"capacity must be 1..{RING}")
        self.capacity = capacity
        self._clock = clock
        # One packet's fields side by side (a record touches one cache line of each, not seven
        # arrays and lists: at hundreds of streams every per-stream line is a cache miss,
        # docs/density.md "Where the time goes in the CPU"). ``_meta``: four 32-bit words
        # a slot -- seq | how << 16 (EMPTY: none), timestamp, abs-send-time, frame index --,
        # then the newest seq (EMPTY: none yet) and how many were recorded (mod 2**32): the
        # layout the compiled path's parked sender writes too (sendpath.PARKED_RING_WORDS).
        # ``_refs``: two a slot -- the Opus payload, its owner (None: keep-alive silence).
        self._meta = array("I", [EMPTY, 0, 0, 0]) * RING + array("I", [EMPTY, 0])
        self._refs: list[bytes | FrameOwner | None] = [b"", None] * RING
        self.header: RtpHeaderTemplate | None = None  # set by the send path when it starts
        self.red_header: RtpHeaderTemplate | None = None  # the RED payload type's, if any
        self.red_opus_pt = 0  # the RED blocks' payload type (Opus), for RED_REBUILT
        self.silence = b""  # the keep-alive silence packet (PARKED_SILENCE entries)
        self.dtx = b""  # a DTX stream's DTX packet (PARKED_DTX entries)
        #: a stream sent from C records the speech frames C sent some packets later (their
        #: ring fields are C's at once, their refs not yet): while it does, a weak reference
        #: to it, whose ``record_from_c`` is called before the refs are read
        self.before_read: Callable[[], Recorder | None] | None = None

    def record_sent(
        self,
        seq: int,
        timestamp: int,
        payload: bytes,
        owner: FrameOwner | None,
        index: int = 0,
        abs_send_time: int = 0,
        at: float | None = None,
        red: int = PLAIN,
    ) -> None:
        """Keep the packet sent as ``seq`` (its payload and the abs-send-time it carried; the
        header comes from ``header``) for frame ``index`` of ``owner`` (None: keep-alive
        silence) and tell the owner; ``at``: the caller's clock reading, if it has one.
        ``red``: ``PLAIN``; ``RED_AS_SENT`` (or True): ``payload`` is the RED payload sent;
        ``RED_REBUILT + k``: ``payload`` is the primary of a RED payload that also carried
        the ``k`` packets recorded before this one."""
        i = (seq & (RING - 1)) << 2
        meta = self._meta
        meta[i] = seq | red << 16
        meta[i + 1] = timestamp
        meta[i + 2] = abs_send_time
        meta[i + 3] = index
        j = i >> 1
        refs = self._refs
        refs[j] = payload
        refs[j + 1] = owner
        meta[NEWEST] = seq
        meta[RECORDED] = (meta[RECORDED] + 1) & 0xFFFFFFFF
        if owner is not None:
            owner.on_frame_sent(index, seq, timestamp, self._clock() if at is None else at)

    def record_run(self, seq: int, payloads: list[bytes], owner: FrameOwner | None) -> int:
        """The payloads and owner of consecutive packets from ``seq`` that the compiled path
        sent from C, which wrote their fields in the ring already (``_meta``: as sent, PLAIN
        or RED_REBUILT + k):
        ``record_sent``'s other half, the owner not told. Returns the first one's
        timestamp."""
        j = (seq & (RING - 1)) << 1
        n = len(payloads)
        refs = self._refs
        end = j + 2 * n
        if end <= len(refs):
            refs[j:end:2] = payloads
            refs[j + 1:end:2] = [owner] * n
        else:  # across the ring's end
            for k, payload in enumerate(payloads):
                i = ((seq + k) & (RING - 1)) << 1
                refs[i] = payload
                refs[i + 1] = owner
        return self.timestamp_of(seq)

    def timestamp_of(self, seq: int) -> int:
        """The RTP timestamp the ring holds for ``seq``'s slot."""
        return self._meta[((seq & (RING - 1)) << 2) + 1]

    def _before_read(self) -> None:
        hook = self.before_read
        recorder = None if hook is None else hook()
        if recorder is not None:
            recorder.record_from_c()

    def lookup(self, seq: int) -> StoredPacket | None:
        """The stored packet for ``seq`` if it is within the window, else None."""
        if self.before_read is not None:
            self._before_read()
        newest = self._meta[NEWEST]
        if newest == EMPTY:
            return None
        age = (newest - seq) & 0xFFFF
        if age >= self.capacity:
            return None
        i = (seq & (RING - 1)) << 2
        meta = self._meta
        word = meta[i]
        if word & 0xFFFF != seq or word == EMPTY:
            return None
        how = word >> 16
        timestamp = meta[i + 1]
        primary = payload = self._primary(i, word)
        if how == PARKED_SILENCE or how == PARKED_DTX:
            if self.header is None:
                return None
            packet = self.header.build(seq, timestamp, meta[i + 2].to_bytes(3, "big"), payload)
            return StoredPacket(seq, timestamp, packet, payload, None, False)
        silent = how & SILENCE_PRIMARY
        how &= 0xFF
        header = self.red_header if how else self.header
        if header is None:
            return None
        if how >= RED_REBUILT:
            rebuilt = self._red_payload(seq, timestamp, primary, how - RED_REBUILT)
            if rebuilt is None:
                return None
            payload = rebuilt
        packet = header.build(seq, timestamp, meta[i + 2].to_bytes(3, "big"), payload)
        owner = None if silent else self._refs[(i >> 1) + 1]
        frame = None if owner is None else EncodedFrame(primary, owner, meta[i + 3])
        return StoredPacket(seq, timestamp, packet, payload, frame, bool(how))

    def _primary(self, i: int, word: int) -> bytes:
        """The payload (a RED packet's primary) of the packet at ring word ``i``."""
        how = word >> 16
        if how == PARKED_SILENCE or how & SILENCE_PRIMARY:
            return self.silence
        if how == PARKED_DTX:
            return self.dtx
        payload = self._refs[i >> 1]
        assert isinstance(payload, bytes)
        return payload

    def _red_payload(self, seq: int, timestamp: int, primary: bytes, previous: int
                     ) -> bytes | None:
        """The RED payload ``RedSender.wrap`` made: ``primary`` after the ``previous``
        packets before ``seq``, oldest first (None: the ring no longer holds them all)."""
        blocks = []
        meta = self._meta
        for back in range(previous, 0, -1):
            earlier = (seq - back) & 0xFFFF
            j = (earlier & (RING - 1)) << 2
            word = meta[j]
            if word & 0xFFFF != earlier or word == EMPTY:
                return None
            blocks.append(((timestamp - meta[j + 1]) & 0xFFFFFFFF, self._primary(j, word)))
        return rfc2198.encode(primary, self.red_opus_pt, blocks)

    def last_sent(self, count: int) -> list[tuple[int, bytes]]:
        """The newest ``count`` packets' (timestamp, payload -- a RED packet's primary),
        oldest first: what RED carries in the packet after them (``RedSender.restore``); fewer
        where the ring holds fewer in a row."""
        if self.before_read is not None:
            self._before_read()
        meta = self._meta
        newest = meta[NEWEST]
        out: list[tuple[int, bytes]] = []
        if newest == EMPTY:
            return out
        for back in range(min(count, self.capacity)):
            seq = (newest - back) & 0xFFFF
            i = (seq & (RING - 1)) << 2
            word = meta[i]
            if word == EMPTY or word & 0xFFFF != seq:
                break
            out.append((meta[i + 1], self._primary(i, word)))
        out.reverse()
        return out

    def kept_payload(self, seq: int) -> bytes | None:
        """The payload the ring keeps for ``seq`` (a RED packet's primary), None if none."""
        if self.before_read is not None:
            self._before_read()
        i = (seq & (RING - 1)) << 2
        word = self._meta[i]
        if word == EMPTY or word & 0xFFFF != seq:
            return None
        return self._primary(i, word)

    @property
    def newest_seq(self) -> int | None:
        newest = self._meta[NEWEST]
        return None if newest == EMPTY else newest

    @property
    def recorded(self) -> int:
        """Packets recorded (mod 2**32)."""
        return self._meta[RECORDED]

    @property
    def ring(self) -> array:
        """The ring's 32-bit words (``_meta``), for the compiled path's parked sender."""
        return self._meta

    def __len__(self) -> int:
        return min(self.recorded, self.capacity)
