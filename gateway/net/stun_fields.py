"""The few STUN (RFC 5389) header fields the UDP mux routes by, read without parsing the message.

RFC 7983 tells the protocols on one port apart by the first byte: 0-3 STUN, 20-63 DTLS,
128-191 RTP/RTCP. Only STUN needs a look inside: a binding request's USERNAME names the
session it is for (``<our ufrag>:<their ufrag>``), a response's transaction id answers a request
one of our sessions sent.
"""

from __future__ import annotations

import hmac
import socket
import zlib

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
    """Of a STUN request: the part of its USERNAME before ':' (the receiver's ufrag), else None
    (no USERNAME, or an attribute that runs past the end)."""
    scanned = attributes(data)
    raw = None if scanned is None else scanned[0].get(USERNAME)
    if raw is None:
        return None
    ufrag, colon, _ = raw.partition(b":")
    if not colon or not ufrag:
        return None
    try:
        return ufrag.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --- a binding request's attributes, and a binding success response, from the bytes ----------

BINDING_REQUEST = 0x0001
BINDING_SUCCESS = 0x0101
XOR_MAPPED_ADDRESS = 0x0020
MESSAGE_INTEGRITY = 0x0008
FINGERPRINT = 0x8028
FINGERPRINT_XOR = 0x5354554E


Scanned = tuple[dict[int, bytes], int, int]


class _LastScan:
    """The last message ``attributes`` scanned and what it found: the mux scans a request for
    its USERNAME, then its answerer for the rest (the message held, so ``is`` is its id; only
    ``bytes``, which cannot change)."""

    __slots__ = ("data", "scanned")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.scanned: Scanned | None = None


_LAST = _LastScan()


def attributes(data: bytes) -> Scanned | None:
    """Of a message ``is_stun`` accepted: its attributes by type (the first of each; after
    MESSAGE-INTEGRITY only FINGERPRINT, as RFC 8489 §14.5 and aioice's ``parse_message``
    read them), where MESSAGE-INTEGRITY and FINGERPRINT start (-1: absent); None when an
    attribute runs past the end. The result is shared (the last message's, scanned once):
    read it, do not change it."""
    last = _LAST
    if data is last.data:
        return last.scanned
    scanned = _scan(data)
    if type(data) is bytes:  # (immutable: the same object, the same attributes)
        last.data, last.scanned = data, scanned
    return scanned


def _scan(data: bytes) -> Scanned | None:
    found: dict[int, bytes] = {}
    integrity_at = fingerprint_at = -1
    pos, end = HEADER, len(data)
    while pos + 4 <= end:
        kind = int.from_bytes(data[pos:pos + 2], "big")
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if pos + 4 + length > end:
            return None
        if (integrity_at < 0 or kind == FINGERPRINT) and kind not in found:
            found[kind] = data[pos + 4:pos + 4 + length]
            if kind == MESSAGE_INTEGRITY:
                integrity_at = pos
            elif kind == FINGERPRINT:
                fingerprint_at = pos
        pos += 4 + length + (-length % 4)
    return found, integrity_at, fingerprint_at


def _with_length(head: bytes, length: int) -> bytes:
    return head[0:2] + length.to_bytes(2, "big") + head[4:]


def integrity(head: bytes, key: bytes) -> bytes:
    """MESSAGE-INTEGRITY (RFC 5389 §15.4) of a message whose bytes before that attribute are
    ``head``: HMAC-SHA1 over them, the length counting the attribute."""
    return hmac.digest(key, _with_length(head, len(head) - HEADER + 24), "sha1")


def fingerprint(head: bytes) -> int:
    """FINGERPRINT (§15.5) of a message whose bytes before that attribute are ``head``."""
    return zlib.crc32(_with_length(head, len(head) - HEADER + 8)) ^ FINGERPRINT_XOR


def binding_success(transaction: bytes, address: tuple[str, int], key: bytes) -> bytes | None:
    """A binding success response for ``transaction`` (12 bytes) telling ``address`` (a numeric
    IPv4 or IPv6 address) as XOR-MAPPED-ADDRESS, with MESSAGE-INTEGRITY by ``key`` and a
    FINGERPRINT: aioice's own response, byte for byte. None: not a numeric address."""
    host, port = address
    try:
        if ":" in host:
            family, packed = 2, socket.inet_pton(socket.AF_INET6, host)
        else:
            family, packed = 1, socket.inet_pton(socket.AF_INET, host)
    except OSError:
        return None
    pad = MAGIC_COOKIE + transaction
    xport = port ^ 0x2112
    xaddr = bytes(a ^ b for a, b in zip(packed, pad, strict=False))
    value = bytes((0, family)) + xport.to_bytes(2, "big") + xaddr
    head = (BINDING_SUCCESS.to_bytes(2, "big") + len(value).to_bytes(2, "big") + MAGIC_COOKIE
            + transaction + XOR_MAPPED_ADDRESS.to_bytes(2, "big")
            + len(value).to_bytes(2, "big") + value)
    return sign(head, key)


def sign(head: bytes, key: bytes) -> bytes:
    """``head`` (a STUN header and its attributes) with MESSAGE-INTEGRITY by ``key`` and a
    FINGERPRINT appended, as aioice's ``add_message_integrity`` and ``bytes()`` make them."""
    head += MESSAGE_INTEGRITY.to_bytes(2, "big") + b"\x00\x14" + integrity(head, key)
    # (the header's length is set by each of them, and last for the whole message)
    return (_with_length(head, len(head) - HEADER + 8) + FINGERPRINT.to_bytes(2, "big")
            + b"\x00\x04" + fingerprint(head).to_bytes(4, "big"))


def with_transaction(message: bytes, transaction: bytes) -> bytes:
    """``message``'s bytes before MESSAGE-INTEGRITY with ``transaction`` (12 bytes) as its id:
    a request built once, sent as many checks."""
    return message[:8] + transaction + message[HEADER:]


def signed_by(data: bytes, key: bytes) -> bool:
    """Of a message ``is_stun`` accepted: it carries a MESSAGE-INTEGRITY by ``key`` (RFC 5389
    §15.4: over its bytes before that attribute), and a right FINGERPRINT if it has one."""
    scanned = attributes(data)
    return scanned is not None and scanned_signed_by(data, scanned, key)


def scanned_signed_by(data: bytes, scanned: Scanned, key: bytes) -> bool:
    """``signed_by`` for a message whose ``attributes`` the caller has already."""
    found, integrity_at, fingerprint_at = scanned
    if integrity_at < 0:
        return False
    if fingerprint_at >= 0 and (int.from_bytes(found[FINGERPRINT], "big")
                                != fingerprint(data[:fingerprint_at])):
        return False
    return hmac.compare_digest(found[MESSAGE_INTEGRITY], integrity(data[:integrity_at], key))
