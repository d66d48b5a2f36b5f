"""An outbound SRTP session's RTP protection for the AEAD AES-GCM profiles (RFC 7714), in C.

Why: libsrtp's ``srtp_protect`` reaches a packet's key through about nine allocations one
after the other (the session, its stream list and entries, the stream, its session keys, the
cipher, the GCM context, OpenSSL's cipher context and its provider's), shifts a 1,024-bit
replay bitmap every packet and counts the key's use. At a thousand streams each of those is
a cache miss: the compiled send path measured 2.4-2.7 µs a protect against 1.5 µs for the
same calls in ``bench.floor --fanout``'s tighter loop (docs/density.md). Here a stream's
state is one block (its packet index, its salt, the OpenSSL context with the session key) and
a packet is the same five OpenSSL calls libsrtp makes.

**The bytes are libsrtp's** (tests/unit/test_srtp_gcm.py, against pylibsrtp on the same keys,
across the sequence number's wrap, CSRCs and header extensions, repeats and old packets): the
session key and salt from the master key by RFC 3711's AES-CM key derivation as libsrtp 2.7
runs it (the 12-byte master salt padded to 14); the packet index estimated as libsrtp's
replay database does (``srtp_rdbx_estimate_index``, ``srtp_index_guess``), advancing only
forward; the IV as ``srtp_calc_aead_iv`` builds it; the AAD the RTP header with its CSRCs and
extension; the same refusals, with libsrtp's codes (a header longer than the packet: 2; an
index more than the 1,024-packet window behind the newest: 10). Not kept: libsrtp's key-use
limit (2^48 packets) and its replay bitmap, which for a sender (``allow_repeat_tx``) only
decides that refusal.

One ``GcmTx`` per (session, SSRC) holds that state, and every RTP packet of the SSRC must be
protected by it, never by libsrtp too (two index estimates could part after a wrap): the
session that owns it (``aiortc_compat.dtls.TxSession``) makes its ``protect`` this. OpenSSL
is not linked: the EVP functions of the OpenSSL inside pylibsrtp's wheel (the one its libsrtp
calls: 3.5 with pylibsrtp 1.0; its extension exports them), or else of the ``libcrypto`` the
interpreter's ``_hashlib`` loaded, are looked up by name and handed over (as the send path is
handed libsrtp's ``srtp_protect``). The wheel's is the faster here (in ``bench.floor``'s fan-out
loop: 0.46-0.55 µs a protect against 0.64-0.73 for Debian's OpenSSL 3.0).
Built with cffi's API mode beside the send path (``python -m gateway.net.srtp_gcm``, ``make
install``, or the gateway's start); ``load()`` is None without a compiler or libcrypto, and
the session then stays libsrtp's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
from pathlib import Path
from typing import Any

import pylibsrtp

from gateway.net.cffi_build import build_and_say, compile_module, import_built

#: libsrtp's profile numbers (srtp_profile_t) for the AEAD profiles: their key lengths
PROFILES = {7: 16, 8: 32}  # srtp_profile_aead_aes_128_gcm, srtp_profile_aead_aes_256_gcm
SALT_LEN = 12
TAG_LEN = 16
WINDOW = 1024  # aiortc's tx policy's window_size: how far back a repeat may be protected

_CDEF = """
typedef struct gw_gcm gw_gcm;
int gw_gcm_setup(uintptr_t ctx_new, uintptr_t ctx_free, uintptr_t init, uintptr_t cipher,
                 uintptr_t ctrl);
gw_gcm *gw_gcm_new(uintptr_t evp_cipher, const unsigned char *key,
                   const unsigned char *salt, int window);
void gw_gcm_free(gw_gcm *g);
int gw_gcm_protect(void *g, void *hdr, int *len);
unsigned long long gw_gcm_index(gw_gcm *g);
"""

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GW_CTRL_GCM_SET_IVLEN 0x9
#define GW_CTRL_GCM_GET_TAG 0x10

static void *(*gw_ctx_new)(void);
static void (*gw_ctx_free)(void *);
static int (*gw_init)(void *, const void *, void *, const unsigned char *,
                      const unsigned char *, int);            /* EVP_CipherInit_ex */
static int (*gw_cipher)(void *, unsigned char *, const unsigned char *, unsigned int);
static int (*gw_ctrl)(void *, int, int, void *);             /* EVP_CIPHER_CTX_ctrl */

typedef struct gw_gcm {
    unsigned long long index;  /* libsrtp's rdbx index: the newest sent, ROC << 16 | seq */
    int window;
    unsigned char salt[12];
    void *ctx;                 /* EVP_CIPHER_CTX: AES-GCM, the session key, encrypting */
} gw_gcm;

int gw_gcm_setup(uintptr_t ctx_new, uintptr_t ctx_free, uintptr_t init, uintptr_t cipher,
                 uintptr_t ctrl) {
    gw_ctx_new = (void *(*)(void))ctx_new;
    gw_ctx_free = (void (*)(void *))ctx_free;
    gw_init = (int (*)(void *, const void *, void *, const unsigned char *,
                       const unsigned char *, int))init;
    gw_cipher = (int (*)(void *, unsigned char *, const unsigned char *, unsigned int))cipher;
    gw_ctrl = (int (*)(void *, int, int, void *))ctrl;
    return 0;
}

gw_gcm *gw_gcm_new(uintptr_t evp_cipher, const unsigned char *key,
                   const unsigned char *salt, int window) {
    gw_gcm *g = calloc(1, sizeof(gw_gcm));
    if (g == NULL) return NULL;
    g->ctx = gw_ctx_new();
    if (g->ctx == NULL
        || !gw_init(g->ctx, (const void *)evp_cipher, NULL, key, NULL, 1)
        || !gw_ctrl(g->ctx, GW_CTRL_GCM_SET_IVLEN, 12, NULL)) {
        if (g->ctx != NULL) gw_ctx_free(g->ctx);
        free(g);
        return NULL;
    }
    memcpy(g->salt, salt, 12);
    g->window = window;
    return g;
}

void gw_gcm_free(gw_gcm *g) {
    if (g == NULL) return;
    gw_ctx_free(g->ctx);
    free(g);
}

unsigned long long gw_gcm_index(gw_gcm *g) { return g->index; }

/* libsrtp's srtp_rdbx_estimate_index (rdbx.c): the index of sequence number s given the
   newest index; returns guess - index. */
static int gw_gcm_estimate(unsigned long long index, int s, unsigned long long *guess) {
    if (index > 0x8000) {
        unsigned int roc = (unsigned int)(index >> 16);
        int local = (int)(index & 0xFFFF), difference;
        if (local < 0x8000) {
            if (s - local > 0x8000) { roc -= 1; difference = s - local - 0x10000; }
            else difference = s - local;
        } else {
            if (local - 0x8000 > s) { roc += 1; difference = s - local + 0x10000; }
            else difference = s - local;
        }
        *guess = ((unsigned long long)roc << 16) | (unsigned int)s;
        return difference;
    }
    *guess = (unsigned long long)s;
    return s - (int)(index & 0xFFFF);
}

/* srtp_protect for an AEAD-GCM stream: the packet at hdr (*len bytes, room for the 16-byte
   tag after it) encrypted in place, *len += 16. 0, or libsrtp's error code. */
int gw_gcm_protect(void *state, void *hdr, int *len) {
    gw_gcm *g = (gw_gcm *)state;
    unsigned char *p = (unsigned char *)hdr;
    int n = *len;
    if (n < 12) return 2;
    int at = 12 + 4 * (p[0] & 0x0F);
    if (n < at) return 2;
    if (p[0] & 0x10) {
        if (n < at + 4) return 2;
        at += 4 + 4 * ((p[at + 2] << 8) | p[at + 3]);
        if (n < at) return 2;
    }
    unsigned long long est;
    int delta = gw_gcm_estimate(g->index, (p[2] << 8) | p[3], &est);
    if (delta <= 0 && g->window - 1 + delta < 0) return 10;  /* replay_old */
    if (delta > 0) g->index = est;
    unsigned char iv[12];
    unsigned int roc = (unsigned int)(est >> 16);
    iv[0] = 0; iv[1] = 0;
    memcpy(iv + 2, p + 8, 4);
    iv[6] = (unsigned char)(roc >> 24); iv[7] = (unsigned char)(roc >> 16);
    iv[8] = (unsigned char)(roc >> 8); iv[9] = (unsigned char)roc;
    iv[10] = p[2]; iv[11] = p[3];
    for (int i = 0; i < 12; i++) iv[i] ^= g->salt[i];
    if (!gw_init(g->ctx, NULL, NULL, NULL, iv, 1)) return 5;
    if (gw_cipher(g->ctx, NULL, p, (unsigned int)at) != at) return 11;
    int enc = n - at;
    if (gw_cipher(g->ctx, p + at, p + at, (unsigned int)enc) < 0) return 8;
    gw_cipher(g->ctx, NULL, NULL, 0);
    if (!gw_ctrl(g->ctx, GW_CTRL_GCM_GET_TAG, 16, p + n)) return 11;
    *len = n + 16;
    return 0;
}
"""

MODULE = "_gw_srtp_gcm_" + hashlib.sha256((_CDEF + _SOURCE).encode()).hexdigest()[:12]

_loaded: list[Any] = []  # [module or None, the libcrypto it was set up with], once tried


def build() -> Path:
    return compile_module(MODULE, _CDEF, _SOURCE)


def _libcrypto() -> Any:
    """OpenSSL's EVP functions: those of the OpenSSL inside pylibsrtp's wheel (the very one its
    libsrtp calls; its extension exports them), else the ``libcrypto`` the interpreter's
    ``_hashlib`` loaded; None when neither has them."""
    candidates: list[str | None] = []
    binding = getattr(pylibsrtp, "_binding", None)
    if binding is not None and getattr(binding, "__file__", None):
        candidates.append(binding.__file__)
    try:
        import _hashlib  # noqa: F401  (loads libcrypto into the process, where Python has one)
    except ImportError:
        pass
    candidates += ["libcrypto.so.3", ctypes.util.find_library("crypto"), "libcrypto.so.1.1"]
    for name in candidates:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            for symbol in ("EVP_CIPHER_CTX_new", "EVP_CIPHER_CTX_free", "EVP_CipherInit_ex",
                           "EVP_Cipher", "EVP_CIPHER_CTX_ctrl", "EVP_aes_128_gcm",
                           "EVP_aes_256_gcm"):
                getattr(lib, symbol)
        except (OSError, AttributeError):
            continue
        return lib
    return None


def load(build_if_missing: bool = True) -> Any:
    """The built module, set up with libcrypto's functions (built now if missing and
    ``build_if_missing``), or None where it cannot be had: the caller keeps libsrtp."""
    if _loaded:
        return _loaded[0]
    module = import_built(MODULE)
    if module is None and build_if_missing:
        try:
            build()
        except Exception:
            module = None
        else:
            module = import_built(MODULE)
    crypto = _libcrypto() if module is not None else None
    if module is None or crypto is None:
        _loaded[:] = [None, None]
        return None

    def address(name: str) -> int:
        return int(ctypes.cast(getattr(crypto, name), ctypes.c_void_p).value or 0)

    module.lib.gw_gcm_setup(address("EVP_CIPHER_CTX_new"), address("EVP_CIPHER_CTX_free"),
                            address("EVP_CipherInit_ex"), address("EVP_Cipher"),
                            address("EVP_CIPHER_CTX_ctrl"))
    for name in ("EVP_aes_128_gcm", "EVP_aes_256_gcm"):
        getattr(crypto, name).restype = ctypes.c_void_p
    _loaded[:] = [module, crypto]
    return module


def crypto() -> Any:
    """The libcrypto ``load()`` set the module up with (None before, or where it failed)."""
    return _loaded[1] if _loaded else None


def session_keys(master: bytes, key_len: int) -> tuple[bytes, bytes]:
    """(session key, session salt) for RTP from a master key and its 12-byte salt, by RFC 3711's
    AES-CM key derivation (labels 0 and 2, key derivation rate 0) as libsrtp 2.7 runs it for
    the AEAD profiles: the master salt padded with two zero octets to the KDF's 14."""
    key, salt = master[:key_len], master[key_len:key_len + SALT_LEN]
    if len(key) != key_len or len(salt) != SALT_LEN:
        raise ValueError("master key and salt of the wrong length")
    return derive(key, salt + bytes(2), 0, key_len), derive(key, salt + bytes(2), 2, SALT_LEN)


def derive(key: bytes, salt: bytes, label: int, size: int) -> bytes:
    """RFC 3711 §4.3's AES-CM PRF: ``size`` octets of AES-CTR keystream under the master
    ``key`` from the counter (14-octet master ``salt`` XOR the label at octet 7) || 0x0000."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    counter = bytearray(salt + bytes(2))
    counter[7] ^= label
    encryptor = Cipher(algorithms.AES(key), modes.CTR(bytes(counter))).encryptor()
    return encryptor.update(bytes(size)) + encryptor.finalize()


class GcmTx:
    """One SSRC's outbound RTP protection state on one SRTP session (see the module)."""

    __slots__ = ("_buffer", "_cdata", "_ffi", "_length", "_lib", "_state", "protect_address")

    def __init__(self, module: Any, crypto: Any, profile: int, master: bytes) -> None:
        key_len = PROFILES[profile]
        key, salt = session_keys(master, key_len)
        cipher = (crypto.EVP_aes_128_gcm if key_len == 16 else crypto.EVP_aes_256_gcm)()
        ffi, lib = module.ffi, module.lib
        state = lib.gw_gcm_new(cipher, key, salt, WINDOW)
        if state == ffi.NULL:
            raise RuntimeError("OpenSSL refused the AES-GCM context")
        self._ffi, self._lib = ffi, lib
        self._state = ffi.gc(state, lib.gw_gcm_free)
        self._cdata = self._buffer = self._length = None  # Python's protect's, made at its first
        #: (gw_gcm_protect's address, this state's): what the compiled send path calls
        self.protect_address = (int(ffi.cast("uintptr_t", ffi.addressof(lib, "gw_gcm_protect"))),
                                int(ffi.cast("uintptr_t", self._state)))

    @property
    def index(self) -> int:
        """The newest packet index protected (ROC << 16 | seq), as libsrtp's replay database."""
        return int(self._lib.gw_gcm_index(self._state))

    def protect(self, packet: bytes) -> bytes:
        """The SRTP packet (raises ``ValueError`` when too long, ``pylibsrtp.Error`` with
        libsrtp's code when refused, as pylibsrtp's ``protect``)."""
        n = len(packet)
        if n > 1500 - TAG_LEN:
            raise ValueError("packet is too long")
        if self._buffer is None:  # (the compiled path protects in its own slots: most never)
            self._cdata = self._ffi.new("unsigned char[]", 1500)
            self._buffer = self._ffi.buffer(self._cdata)
            self._length = self._ffi.new("int *")
        self._buffer[0:n] = packet
        self._length[0] = n
        rc = self._lib.gw_gcm_protect(self._state, self._cdata, self._length)
        if rc:
            raise pylibsrtp.Error(f"srtp_protect failed ({rc})")
        return bytes(self._buffer[0:self._length[0]])


def main() -> None:
    """Build the module now (``make install``; a failure keeps libsrtp)."""
    build_and_say(build, "SRTP AES-GCM sender")


if __name__ == "__main__":
    main()
