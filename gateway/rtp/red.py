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

from collections.abc import Sequence
from dataclasses import dataclass

MAX_BLOCK = 1023
MAX_OFFSET = 0x3FFF


class MalformedRed(ValueError):
    """A RED payload whose headers do not fit its length."""


@dataclass(frozen=True, slots=True)
class RedBlock:
    payload_type: int
    timestamp_offset: int  # ticks before the packet's timestamp (0 for the primary)
    data: bytes


def encode(primary: bytes, payload_type: int, redundant: Sequence[tuple[int, bytes]]) -> bytes:
    """A RED payload: ``redundant`` as (timestamp offset, payload) oldest first, then the primary;
    every block of ``payload_type``. Blocks that cannot be carried (too long, offset too far)
    are left out."""
    headers = bytearray()
    body = []
    for offset, data in redundant:
        if not 0 < offset <= MAX_OFFSET or len(data) > MAX_BLOCK or not data:
            continue
        word = (0x80 | payload_type) << 24 | offset << 10 | len(data)
        headers += word.to_bytes(4, "big")
        body.append(data)
    headers.append(payload_type & 0x7F)
    return bytes(headers) + b"".join(body) + primary


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
