"""gateway/net/srtp_tx.py: an outbound session's RTP protected in C (AES-GCM, AES-CM with
HMAC-SHA1) gives libsrtp's bytes, packet for packet, and refuses what libsrtp refuses.

The reference is pylibsrtp's own session made as aiortc makes its sender's (``_setup_srtp``:
SSRC_ANY_OUTBOUND, a 1,024-packet window, repeats allowed) on the same master key.
"""

from __future__ import annotations

import os
import platform
import random
from pathlib import Path

import pylibsrtp
import pytest

from gateway import aiortc_compat
from gateway.aiortc_compat.dtls import TxSession
from gateway.net import srtp_tx

pytestmark = pytest.mark.skipif(srtp_tx.load() is None,
                                reason="no compiler or libcrypto: the sessions stay libsrtp's")


def libsrtp_session(profile: int, master: bytes) -> pylibsrtp.Session:
    policy = pylibsrtp.Policy(key=master, ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND,
                              srtp_profile=profile)
    policy.allow_repeat_tx = True
    policy.window_size = 1024
    return pylibsrtp.Session(policy)


@pytest.fixture(params=["aes-ni", "evp"])
def cipher_path(request: pytest.FixtureRequest) -> str:
    """Both ways the C runs its ciphers: OpenSSL's GCM128 and AES-NI functions called
    directly, and every call through EVP (where the direct ones are missing)."""
    if request.param == "aes-ni" and not srtp_tx.direct():
        pytest.skip("no direct path here: OpenSSL's AES-NI functions or the CPU's AES-NI")
    return str(request.param)


def own_sender(profile: int, master: bytes, path: str) -> srtp_tx.SrtpTx:
    return srtp_tx.SrtpTx(srtp_tx.load(), srtp_tx.crypto(), profile, master,
                          use_direct=path == "aes-ni")


def test_the_direct_path_is_found_on_a_cpu_with_aes_ni() -> None:
    """pylibsrtp's wheel exports OpenSSL's GCM128 and AES-NI functions (``srtp_tx.DIRECT``);
    on an x86 CPU with AES-NI the direct path is on. Fails loudly when an upgrade of the
    wheel hides them (the session then still works, through EVP, only slower)."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if platform.machine() not in ("x86_64", "AMD64") or " aes" not in flags:
        pytest.skip("not an x86 CPU with AES-NI")
    assert srtp_tx.direct() and srtp_tx.cipher_path() == "aes-ni"
    assert srtp_tx.cipher_path(use_direct=False) == "evp"


def packet(seq: int, ssrc: int = 0x12345678, payload: bytes = b"\x01\x02\x03",
           csrcs: int = 0, extension: bytes | None = None) -> bytes:
    first = 0x80 | csrcs | (0x10 if extension is not None else 0)
    header = bytes([first, 111]) + seq.to_bytes(2, "big") + (seq * 960 % 2**32).to_bytes(
        4, "big") + ssrc.to_bytes(4, "big")
    header += b"".join((0xC0000000 + i).to_bytes(4, "big") for i in range(csrcs))
    if extension is not None:
        header += b"\xbe\xde" + (len(extension) // 4).to_bytes(2, "big") + extension
    return header + payload


def outcome(protect, data: bytes) -> bytes | str:  # type: ignore[no-untyped-def]
    try:
        return protect(data)  # type: ignore[no-any-return]
    except pylibsrtp.Error as exc:
        return f"refused: {exc}"[:8]


@pytest.mark.parametrize("profile", sorted(srtp_tx.PROFILES))
@pytest.mark.parametrize("start", [0, 100, 0x7FF0, 0x8000, 0x8001, 65500])
def test_a_stream_across_the_wrap_is_libsrtps_bytes(profile: int, start: int,
                                                    cipher_path: str) -> None:
    master = os.urandom(sum(srtp_tx.PROFILES[profile][:2]))
    ref, own = libsrtp_session(profile, master), own_sender(profile, master, cipher_path)
    rng = random.Random(start)
    seq = start
    for i in range(700):
        data = packet(seq, payload=rng.randbytes(rng.randint(0, 300)))
        assert own.protect(data) == ref.protect(data), (profile, start, i)
        seq = (seq + 1) & 0xFFFF
    if start >= 65500:
        assert own.index >> 16 == 1  # the rollover counter went up at the wrap


@pytest.mark.parametrize("profile", sorted(srtp_tx.PROFILES))
def test_repeats_jumps_and_stragglers_are_libsrtps(profile: int, cipher_path: str) -> None:
    """Retransmissions (a sequence number sent before, as a NACK answer sends it), packets
    older than the window (refused by both), jumps forward and back across the wrap, CSRCs
    and a header extension (in the AAD, not encrypted): the same bytes or the same refusal."""
    master = os.urandom(sum(srtp_tx.PROFILES[profile][:2]))
    ref, own = libsrtp_session(profile, master), own_sender(profile, master, cipher_path)
    rng = random.Random(profile)
    newest = 65000
    seqs: list[int] = []
    for _ in range(3000):
        roll = rng.random()
        if roll < 0.70:
            newest = (newest + 1) & 0xFFFF
            seq = newest
        elif roll < 0.85:
            seq = (newest - rng.randint(0, 1100)) & 0xFFFF  # repeats; some past the window
        elif roll < 0.95:
            newest = (newest + rng.randint(2, 40000)) & 0xFFFF
            seq = newest
        else:
            seq = rng.randrange(65536)
        seqs.append(seq)
        kind = rng.randrange(3)
        data = packet(seq, payload=rng.randbytes(rng.randint(1, 80)),
                      csrcs=2 if kind == 1 else 0,
                      extension=b"\x10\xaa\xbb\xcc" if kind == 2 else None)
        assert outcome(own.protect, data) == outcome(ref.protect, data), seqs[-5:]
    old = packet((newest - 2000) & 0xFFFF)  # past the window: both refuse it
    assert isinstance(outcome(own.protect, old), str) and isinstance(outcome(ref.protect, old), str)


@pytest.mark.parametrize("data", [
    b"\x80\x6f\x00\x01",  # shorter than a header
    packet(1, csrcs=3)[:20],  # its CSRCs cut
    packet(1, extension=b"\x10\xaa\xbb\xcc")[:14],  # its extension header cut
    packet(1, extension=b"\x10\xaa\xbb\xcc")[:17],  # its extension cut
])
@pytest.mark.parametrize("profile", [1, 7])
def test_a_malformed_header_is_refused_as_libsrtp_refuses_it(profile: int, data: bytes,
                                                             cipher_path: str) -> None:
    master = os.urandom(sum(srtp_tx.PROFILES[profile][:2]))
    ref, own = libsrtp_session(profile, master), own_sender(profile, master, cipher_path)
    with pytest.raises(pylibsrtp.Error):
        ref.protect(data)
    with pytest.raises(pylibsrtp.Error):
        own.protect(data)


def test_the_key_derivation_is_rfc_3711s() -> None:
    """RFC 3711 Appendix B.3's key derivation test vector (AES_CM_128_HMAC_SHA1_80's keys); an
    AEAD profile's 12-octet salt padded to the derivation's 14 (the packets above are
    libsrtp's on that)."""
    key = bytes.fromhex("E1F97A0D3E018BE0D64FA32C06DE4139")
    salt = bytes.fromhex("0EC675AD498AFEEBB6960B3AABE6")
    cipher, session_salt, auth = srtp_tx.session_keys(1, key + salt)
    assert cipher.hex() == "c61e7a93744f39ee10734afe3ff7a087"
    assert session_salt.hex() == "30cbbc08863d8c85d49db34a9ae1"
    assert auth is not None and auth.hex() == "cebe321f6ff7716b6fd4ab49af256a156d38baa4"
    aead = srtp_tx.session_keys(7, key + salt[:12])
    assert aead == (srtp_tx.derive(key, salt[:12] + bytes(2), 0, 16),
                    srtp_tx.derive(key, salt[:12] + bytes(2), 2, 12), None)
    with pytest.raises(ValueError):
        srtp_tx.session_keys(7, (key + salt)[:20])


@pytest.mark.parametrize("profile", [1, 8])
def test_a_tx_session_protects_rtp_in_c_and_rtcp_by_libsrtp(profile: int) -> None:
    """The session aiortc gets (``install_srtp_sender``): its RTP is the C's, one state per
    SSRC; its RTCP is libsrtp's; and the compiled path's handle is the same state."""
    master = os.urandom(sum(srtp_tx.PROFILES[profile][:2]))
    policy = pylibsrtp.Policy(key=master, ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND,
                              srtp_profile=profile)
    policy.allow_repeat_tx = True
    policy.window_size = 1024
    session = TxSession(policy, srtp_tx.load(), srtp_tx.crypto())
    ref = libsrtp_session(profile, master)
    for seq in range(65530, 65536 + 10):
        for ssrc in (1, 2):
            data = packet(seq & 0xFFFF, ssrc=ssrc)
            assert session.protect(data) == ref.protect(data)
    rtcp = bytes([0x80, 200, 0, 6]) + (1).to_bytes(4, "big") + bytes(20)
    assert session.protect_rtcp(rtcp) == ref.protect_rtcp(rtcp)
    assert aiortc_compat.srtp_protect_handle(session, 1) == session.sender(1).protect_address
    assert aiortc_compat.srtp_protector(session) == session.protect
    with pytest.raises(pylibsrtp.Error):
        for ssrc in range(3, 3 + aiortc_compat.MAX_TX_SSRCS):
            session.protect(packet(1, ssrc=ssrc))


def test_install_makes_aiortcs_outbound_sessions_and_only_those() -> None:
    import aiortc.rtcdtlstransport as dtls

    try:
        assert aiortc_compat.install_srtp_sender("c") == ("c", "")
        outbound = pylibsrtp.Policy(key=os.urandom(28), srtp_profile=7,
                                    ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND)
        inbound = pylibsrtp.Policy(key=os.urandom(28), srtp_profile=7,
                                   ssrc_type=pylibsrtp.Policy.SSRC_ANY_INBOUND)
        cm = pylibsrtp.Policy(key=os.urandom(30), srtp_profile=1,
                              ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND)
        null = pylibsrtp.Policy(key=os.urandom(30), srtp_profile=5,  # NULL cipher, HMAC-SHA1
                                ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND)
        assert type(dtls.Session(outbound)) is TxSession
        assert type(dtls.Session(cm)) is TxSession  # (what Chromium negotiates)
        assert type(dtls.Session(inbound)) is pylibsrtp.Session
        assert type(dtls.Session(null)) is pylibsrtp.Session  # not done here: libsrtp's
        assert aiortc_compat.install_srtp_sender("libsrtp")[0] == "libsrtp"
        assert type(dtls.Session(outbound)) is pylibsrtp.Session
    finally:
        aiortc_compat.install_srtp_sender("auto")
    assert aiortc_compat.check_internals() == []


def test_without_the_module_auto_keeps_libsrtp_and_c_refuses(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A machine without a compiler (or OpenSSL's functions): ``auto`` says so and keeps
    libsrtp; ``c`` is an error at start, as ``--send-path compiled`` is."""
    import aiortc.rtcdtlstransport as dtls

    monkeypatch.setattr(srtp_tx, "load", lambda build_if_missing=True: None)
    try:
        assert aiortc_compat.install_srtp_sender("auto") == ("libsrtp", "unavailable")
        assert dtls.Session is pylibsrtp.Session
        with pytest.raises(RuntimeError):
            aiortc_compat.install_srtp_sender("c")
    finally:
        monkeypatch.undo()
        aiortc_compat.install_srtp_sender("auto")
