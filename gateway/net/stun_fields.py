"""The few STUN (RFC 5389) header fields the UDP mux routes by, read without parsing the message.

RFC 7983 tells the protocols on one port apart by the first byte: 0-3 STUN, 20-63 DTLS,
128-191 RTP/RTCP. Only STUN needs a look inside: a binding request's USERNAME names the
session it is for (``<our ufrag>:<their ufrag>``), a response's transaction id answers a request
one of our sessions sent.
"""

from __future__ import annotations

MAGIC_COOKIE = b"\x21\x12\xa4\x42"
HEADER = 20
USERNAME = 0x0006
CLASS_MASK = 0x0110
REQUEST, INDICATION, SUCCESS, ERROR = 0x0000, 0x0010, 0x0100, 0x0110


def is_stun(data: bytes) -> bool:
    """A well-formed STUN header: first byte 0-3, the magic cookie, a length that fits."""
    return (
        len(data) >= HEADER
        and data[0] < 4
        and data[4:8] == MAGIC_COOKIE
        and int.from_bytes(data[2:4], "big") + HEADER == len(data)
    )


def stun_class(data: bytes) -> int:
    """REQUEST, INDICATION, SUCCESS or ERROR (of a message ``is_stun`` accepted)."""
    return int.from_bytes(data[0:2], "big") & CLASS_MASK


def transaction_id(data: bytes) -> bytes:
    return data[8:20]


def local_ufrag(data: bytes) -> str | None:
    """Of a STUN request: the part of its USERNAME before ':' (the receiver's ufrag), else None."""
    pos, end = HEADER, len(data)
    while pos + 4 <= end:
        kind = int.from_bytes(data[pos : pos + 2], "big")
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if pos + 4 + length > end:
            return None
        if kind == USERNAME:
            raw = data[pos + 4 : pos + 4 + length]
            ufrag, colon, _ = raw.partition(b":")
            if not colon or not ufrag:
                return None
            try:
                return ufrag.decode("utf-8")
            except UnicodeDecodeError:
                return None
        pos += 4 + length + (-length % 4)
    return None
