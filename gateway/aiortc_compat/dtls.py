"""DTLS/SRTP: libsrtp's ``srtp_protect`` on pylibsrtp's own session, an outbound session's RTP
protected in C (``TxSession``, ``install_srtp_sender``), and the release of an established DTLS
client's OpenSSL state."""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import Any

import aiortc.rtcdtlstransport
import pylibsrtp
from aiortc import (
    RTCDtlsTransport,
)
from OpenSSL import SSL

from gateway.aiortc_compat._common import _require
from gateway.net import srtp_tx


def srtp_protector(session: pylibsrtp.Session) -> Callable[[bytes], bytes]:
    """``session.protect`` without its per-call overhead (a new ``int *`` per call, type checks):
    libsrtp's ``srtp_protect`` on the session's own buffer, ≈1.1 µs less per packet. Falls back
    to ``session.protect`` when pylibsrtp's internals are not where this expects them. A
    ``TxSession``'s own ``protect`` (its RTP is never libsrtp's)."""
    if isinstance(session, TxSession):
        return session.protect
    return _srtp_call(session, "srtp_protect", pylibsrtp.SRTP_MAX_TRAILER_LEN) or session.protect


def srtp_unprotector(session: pylibsrtp.Session) -> Callable[[bytes], bytes]:
    """``session.unprotect`` the way ``srtp_protector`` protects: libsrtp's ``srtp_unprotect``
    on the session's own buffer, one ``int *`` made once (the receive fast path, rx_fast.py).
    Raises ``pylibsrtp.Error`` as ``unprotect`` does (a replay, a failed authentication).
    Falls back to ``session.unprotect`` when pylibsrtp's internals are not where expected."""
    return _srtp_call(session, "srtp_unprotect", 0) or session.unprotect


def srtcp_unprotector(session: pylibsrtp.Session) -> Callable[[bytes], bytes]:
    """``session.unprotect_rtcp`` as ``srtp_unprotector`` does RTP (libsrtp's
    ``srtp_unprotect_rtcp``; the SRTCP fast path, rtcp_fast.py)."""
    return _srtp_call(session, "srtp_unprotect_rtcp", 0) or session.unprotect_rtcp


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


def srtp_protect_handle(session: pylibsrtp.Session, ssrc: int) -> tuple[int, int] | None:
    """(the address of a ``(void *, void *, int *)`` protect function, its first argument) that
    protects the session's RTP of ``ssrc`` from C: a ``TxSession``'s ``gw_srtp_protect`` on the
    SSRC's state, else libsrtp's ``srtp_protect`` on the session's ``srtp_t``. None when
    pylibsrtp's internals moved."""
    if isinstance(session, TxSession):
        return session.sender(ssrc).protect_address
    protect, srtp = srtp_protect_address(), srtp_session_address(session)
    if protect is None or srtp is None:
        return None
    return protect, srtp


# --- SRTP: an outbound session's RTP protected in C (gateway/net/srtp_tx.py) -----------------

MAX_TX_SSRCS = 16  # a gateway session sends one audio SSRC; libsrtp's template has no bound


class TxSession(pylibsrtp.Session):
    """aiortc's outbound SRTP session (``_tx_srtp``) whose RTP is protected by ``srtp_tx``, one
    ``SrtpTx`` per SSRC, made at its first packet as libsrtp clones its template; RTCP stays
    libsrtp's (``protect_rtcp``: its SRTCP index is its own). Every RTP packet of the session
    goes through ``protect`` / ``srtp_protect_handle``: aiortc's ``_send_rtp``, the direct and
    compiled senders, NACK answers -- never libsrtp too, so one index estimate exists per SSRC.
    The bytes are libsrtp's (tests/unit/test_srtp_tx.py)."""

    def __init__(self, policy: pylibsrtp.Policy, module: Any, crypto: Any,
                 use_direct: bool = True) -> None:
        super().__init__(policy)
        self._gw_master = bytes(policy.key or b"")  # (install's factory: never without a key)
        self._gw_profile = policy.srtp_profile
        self._gw_module, self._gw_crypto = module, crypto
        self._gw_direct = use_direct  # (srtp_tx's direct cipher calls where it has them)
        self._gw_senders: dict[int, srtp_tx.SrtpTx] = {}

    def sender(self, ssrc: int) -> srtp_tx.SrtpTx:
        """The SSRC's protection state (made now if new; ``pylibsrtp.Error`` past
        ``MAX_TX_SSRCS``)."""
        tx = self._gw_senders.get(ssrc)
        if tx is None:
            if len(self._gw_senders) >= MAX_TX_SSRCS:
                raise pylibsrtp.Error("too many outbound SSRCs on one SRTP session")
            tx = self._gw_senders[ssrc] = srtp_tx.SrtpTx(
                self._gw_module, self._gw_crypto, self._gw_profile, self._gw_master,
                self._gw_direct)
        return tx

    def protect(self, packet: bytes) -> bytes:
        if len(packet) < 12:
            raise pylibsrtp.Error("srtp_protect failed (2)")  # libsrtp's bad_param
        return self.sender(int.from_bytes(packet[8:12], "big")).protect(packet)


_ORIGINAL_SESSION = aiortc.rtcdtlstransport.Session


def install_srtp_sender(mode: str) -> tuple[str, str]:
    """``--srtp-sender``: make aiortc's ``_setup_srtp`` create its outbound session of a profile
    ``srtp_tx`` does (AES-GCM, AES-CM with HMAC-SHA1) as a ``TxSession`` (``c``; ``auto``: where
    ``srtp_tx`` builds and finds OpenSSL's functions; ``c-evp``: ``c`` with every cipher call
    through EVP) or a plain libsrtp one (``libsrtp``). Process-wide, for sessions set up from
    now on. Returns (``c`` or ``libsrtp``, why not ``c``); ``c`` and ``c-evp`` raise
    RuntimeError where they cannot be had."""
    module = srtp_tx.load() if mode != "libsrtp" else None
    if module is None:
        aiortc.rtcdtlstransport.Session = _ORIGINAL_SESSION  # type: ignore[misc]
        if mode in ("c", "c-evp"):
            raise RuntimeError(f"--srtp-sender {mode}: the module or OpenSSL's functions are "
                               "unavailable")
        return "libsrtp", "--srtp-sender libsrtp" if mode == "libsrtp" else "unavailable"
    crypto = srtp_tx.crypto()
    use_direct = mode != "c-evp"

    def session(policy: pylibsrtp.Policy | None = None) -> pylibsrtp.Session:
        if (policy is not None and policy.ssrc_type == pylibsrtp.Policy.SSRC_ANY_OUTBOUND
                and policy.srtp_profile in srtp_tx.PROFILES and policy.key is not None):
            return TxSession(policy, module, crypto, use_direct)
        return _ORIGINAL_SESSION(policy)

    aiortc.rtcdtlstransport.Session = session  # type: ignore[misc, assignment]
    return "c", ""


def srtp_cipher_path(mode: str) -> str:
    """What ``install_srtp_sender(mode)``'s sessions run their ciphers on: ``aes-ni`` (OpenSSL's
    GCM128 and AES-NI functions called directly) or ``evp``."""
    return srtp_tx.cipher_path(use_direct=mode != "c-evp")


def _srtp_sender_problems() -> list[str]:
    """``_setup_srtp`` still makes its sessions by the module's ``Session`` name, with a
    ``window_size`` (``srtp_tx.WINDOW``) and ``allow_repeat_tx`` this protection mirrors."""
    setup = getattr(RTCDtlsTransport, "_setup_srtp", None)
    if not callable(setup):
        return ["RTCDtlsTransport._setup_srtp"]
    names = {ins.argval for ins in dis.get_instructions(setup)
             if ins.opname in ("LOAD_GLOBAL", "STORE_ATTR", "LOAD_ATTR")}
    consts = {ins.argval for ins in dis.get_instructions(setup) if ins.opname == "LOAD_CONST"}
    problems = [f"RTCDtlsTransport._setup_srtp no longer uses {name}"
                for name in ("Session", "Policy", "SSRC_ANY_OUTBOUND", "window_size",
                             "allow_repeat_tx") if name not in names]
    if srtp_tx.WINDOW not in consts:
        problems.append(f"RTCDtlsTransport._setup_srtp's window is not {srtp_tx.WINDOW}")
    return problems
