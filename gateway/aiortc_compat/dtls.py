"""DTLS/SRTP: libsrtp's ``srtp_protect`` on pylibsrtp's own session, and the release of an
established DTLS client's OpenSSL state."""

from __future__ import annotations

from collections.abc import Callable

import pylibsrtp
from aiortc import (
    RTCDtlsTransport,
)
from OpenSSL import SSL

from gateway.aiortc_compat._common import _require


def srtp_protector(session: pylibsrtp.Session) -> Callable[[bytes], bytes]:
    """``session.protect`` without its per-call overhead (a new ``int *`` per call, type checks):
    libsrtp's ``srtp_protect`` on the session's own buffer, ≈1.1 µs less per packet. Falls back
    to ``session.protect`` when pylibsrtp's internals are not where this expects them."""
    return _srtp_call(session, "srtp_protect", pylibsrtp.SRTP_MAX_TRAILER_LEN) or session.protect


def srtp_unprotector(session: pylibsrtp.Session) -> Callable[[bytes], bytes]:
    """``session.unprotect`` the way ``srtp_protector`` protects: libsrtp's ``srtp_unprotect``
    on the session's own buffer, one ``int *`` made once (the receive fast path, rx_fast.py).
    Raises ``pylibsrtp.Error`` as ``unprotect`` does (a replay, a failed authentication).
    Falls back to ``session.unprotect`` when pylibsrtp's internals are not where expected."""
    return _srtp_call(session, "srtp_unprotect", 0) or session.unprotect


def _srtp_call(session: pylibsrtp.Session, name: str, room: int
               ) -> Callable[[bytes], bytes] | None:
    """libsrtp's ``name`` (``srtp_protect`` / ``srtp_unprotect``) on the session's own buffer,
    leaving ``room`` bytes for the trailer; None when pylibsrtp's internals have moved."""
    srtp = getattr(session, "_srtp", None)
    cdata = getattr(session, "_cdata", None)
    buffer = getattr(session, "_buffer", None)
    binding = getattr(pylibsrtp, "_binding", None)
    if srtp is None or cdata is None or buffer is None or binding is None:
        return None
    call_c = getattr(binding.lib, name)
    length = binding.ffi.new("int *")
    ctx = srtp[0]
    limit = len(buffer) - room

    def call(packet: bytes) -> bytes:
        n = len(packet)
        if n > limit:
            raise ValueError("packet is too long")
        buffer[0:n] = packet
        length[0] = n
        rc = call_c(ctx, cdata, length)
        if rc:
            raise pylibsrtp.Error(f"{name} failed ({rc})")
        return bytes(buffer[0 : length[0]])

    return call


# --- DTLS: release the handshake's OpenSSL state ---------------------------------------------


class _ReleasedDtls:
    """Stands in for ``RTCDtlsTransport._ssl`` once an audio-only DTLS 1.2 client is established.

    What aiortc still asks of the connection then: read incoming DTLS records (an alert --
    content type 21, close_notify or fatal -- is the peer closing; anything else, such as a
    repeated handshake record, is dropped: there are no data channels), and on ``stop`` write a
    close_notify, which was produced by the real connection at release time (its record sequence
    number is still the next one: nothing else is sent over DTLS after the handshake).
    """

    __slots__ = ("_close_notify", "_peer_closed", "_shut")

    def __init__(self, close_notify: bytes) -> None:
        self._close_notify = close_notify
        self._peer_closed = False
        self._shut = False

    def bio_write(self, data: bytes) -> int:
        if data[:1] == b"\x15":
            self._peer_closed = True
        return len(data)

    def recv(self, bufsiz: int) -> bytes:
        if self._peer_closed:
            raise SSL.ZeroReturnError
        raise SSL.WantReadError

    def bio_read(self, bufsiz: int) -> bytes:
        if self._shut and self._close_notify:
            data, self._close_notify = self._close_notify, b""
            return data
        raise SSL.WantReadError

    def shutdown(self) -> bool:
        self._shut = True
        return True

    def send(self, buf: bytes, flags: int = 0) -> int:
        raise SSL.Error("DTLS state released: no application data on this transport")

    def DTLSv1_get_timeout(self) -> None:
        return None

    def DTLSv1_handle_timeout(self) -> bool:
        return False


def release_dtls(transport: RTCDtlsTransport) -> bool:
    """Free the DTLS connection's OpenSSL state (handshake buffers, record layers, the two 16 KB
    record buffers, its SSL_CTX: ≈100 KB) once the SRTP keys are derived, keeping what aiortc
    still needs (``_ReleasedDtls``). Only where nothing can need the real connection again:
    DTLS 1.2, client role (the peer sent the last flight: nothing of ours to retransmit), no
    data channel, handshake complete. Returns whether it released."""
    for attr in ("_ssl", "_role", "_data_receiver"):
        _require(transport, attr)
    ssl = transport._ssl
    if (
        ssl is None
        or isinstance(ssl, _ReleasedDtls)
        or transport.state != "connected"
        or transport._role != "client"
        or transport._data_receiver is not None
    ):
        return False
    try:
        if ssl.get_protocol_version_name() != "DTLSv1.2" or ssl.DTLSv1_get_timeout() is not None:
            return False
        ssl.shutdown()
        close_notify = ssl.bio_read(1500)
    except SSL.Error:
        return False
    if close_notify[:1] != b"\x15":
        return False
    transport._ssl = _ReleasedDtls(close_notify)  # type: ignore[assignment]
    return True


def dtls_released(transport: RTCDtlsTransport) -> bool:
    return isinstance(getattr(transport, "_ssl", None), _ReleasedDtls)


# --- SRTP: the compiled send path's handles on libsrtp (gateway/net/sendpath.py) -------------


def srtp_protect_address() -> int | None:
    """The address of libsrtp's ``srtp_protect`` inside pylibsrtp's cffi module (libsrtp 2's
    ``(srtp_t, void *, int *)`` signature), None if pylibsrtp's internals moved."""
    binding = getattr(pylibsrtp, "_binding", None)
    if binding is None or not hasattr(binding.lib, "srtp_protect"):
        return None
    ffi = binding.ffi
    try:
        pointer = ffi.addressof(binding.lib, "srtp_protect")
        if "int *" not in ffi.getctype(ffi.typeof(pointer)):
            return None  # another libsrtp API (3.x takes sizes, not an int *)
        return int(ffi.cast("uintptr_t", pointer))
    except (AttributeError, TypeError, ffi.error):
        return None


def srtp_session_address(session: pylibsrtp.Session) -> int | None:
    """The address of a pylibsrtp session's ``srtp_t`` (``Session._srtp[0]``): the one stream
    state (ROC, replay window) its own ``protect`` and the compiled path both use."""
    srtp = getattr(session, "_srtp", None)
    binding = getattr(pylibsrtp, "_binding", None)
    if srtp is None or binding is None:
        return None
    return int(binding.ffi.cast("uintptr_t", srtp[0]))
