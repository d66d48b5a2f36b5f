"""RFC 2198 redundant audio (RED): one RTP payload carrying the new frame and copies of the
previous ones.

Payload layout (network order)::

    |1|  block PT  |   timestamp offset (14)   | block length (10) |   one per redundant block
    |0|  block PT  |                                                   the primary's header
    redundant block data (oldest first) ... primary data

Offsets are in RTP clock ticks before the packet's timestamp (960 per 20 ms frame at Opus's
48 kHz clock); a block is at most 1023 bytes. ``encode`` copies the blocks byte for byte, so a
receiver rebuilding a lost frame from redundancy gets exactly the packet that was sent.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

MAX_BLOCK = 1023
MAX_OFFSET = 0x3FFF
MAX_BLOCKS = 16  # redundant blocks one payload carries at most (the send path: 8)


class MalformedRed(ValueError):
    """A RED payload whose headers do not fit its length."""


@dataclass(frozen=True, slots=True)
class RedBlock:
    payload_type: int
    timestamp_offset: int  # ticks before the packet's timestamp (0 for the primary)
    data: bytes


# The block headers of a RED payload with k redundant blocks: k 32-bit words, then the
# primary's octet (one ``pack`` per packet, not a bytearray grown word by word).
_HEADERS = [struct.Struct(">" + "I" * k + "B") for k in range(MAX_BLOCKS + 1)]


def encode(primary: bytes, payload_type: int, redundant: Sequence[tuple[int, bytes]]) -> bytes:
    """A RED payload: ``redundant`` as (timestamp offset, payload) oldest first, then the primary;
    every block of ``payload_type``. Blocks that cannot be carried (too long, offset too far,
    empty, more than ``MAX_BLOCKS``) are left out. The send path calls this for every packet
    while RED is on: one header ``pack`` and one join."""
    high = (0x80 | payload_type) << 24
    words = []
    parts: list[bytes] = [b""]
    for offset, data in redundant:
        size = len(data)
        if 0 < offset <= MAX_OFFSET and 0 < size <= MAX_BLOCK and len(words) < MAX_BLOCKS:
            words.append(high | offset << 10 | size)
            parts.append(data)
    parts[0] = _HEADERS[len(words)].pack(*words, payload_type & 0x7F)
    parts.append(primary)
    return b"".join(parts)


def decode(payload: bytes) -> list[RedBlock]:
    """The blocks of a RED payload, oldest first, the primary last (offset 0)."""
    headers: list[tuple[int, int, int]] = []
    i = 0
    while True:
        if i >= len(payload):
            raise MalformedRed("RED payload ends inside its block headers")
        first = payload[i]
        if not first & 0x80:
            primary_pt = first & 0x7F
            i += 1
            break
        if i + 4 > len(payload):
            raise MalformedRed("RED block header cut short")
        word = int.from_bytes(payload[i : i + 4], "big")
        headers.append(((word >> 24) & 0x7F, (word >> 10) & MAX_OFFSET, word & 0x3FF))
        i += 4
    blocks = []
    for pt, offset, length in headers:
        if i + length > len(payload):
            raise MalformedRed("RED block longer than the payload")
        blocks.append(RedBlock(pt, offset, payload[i : i + length]))
        i += length
    blocks.append(RedBlock(primary_pt, 0, payload[i:]))
    return blocks


def primary(payload: bytes) -> bytes:
    """The primary block of a RED payload (the frame the packet is new for)."""
    return decode(payload)[-1].data
