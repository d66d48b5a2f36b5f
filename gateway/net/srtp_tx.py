"""An outbound SRTP session's RTP protection in C: the AEAD AES-GCM profiles (RFC 7714: what
aiortc peers negotiate) and AES_CM_128_HMAC_SHA1_80 / _32 (RFC 3711: what Chromium negotiates
with the gateway).

Why: libsrtp's ``srtp_protect`` reaches a packet's keys through about nine allocations one
after the other (the session, its stream list and entries, the stream, its session keys, the
cipher and the authenticator, their OpenSSL contexts and providers'), shifts a 1,024-bit
replay bitmap every packet and counts the key's use. At a thousand streams each of those is a
cache miss: in the compiled send path 2.4-2.7 µs a protect against 1.5 µs for the same calls in
``bench.floor --fanout``'s tighter loop (docs/density.md). Here a stream's state is one block
(its packet index, its salt, the OpenSSL cipher context with the session key, and for HMAC the
SHA-1 states after the key's two pads) and a packet is the cipher calls libsrtp makes.

**The bytes are libsrtp's** (tests/unit/test_srtp_tx.py, against pylibsrtp on the same keys,
for every profile, across the sequence number's wrap, with CSRCs and header extensions,
repeats and old packets): the session keys from the master key by RFC 3711's AES-CM key
derivation as libsrtp 2.7 runs it (an AEAD profile's 12-byte master salt padded to 14); the
packet index estimated as libsrtp's replay database does (``srtp_rdbx_estimate_index``,
``srtp_index_guess``), advancing only forward; the AEAD IV as ``srtp_calc_aead_iv`` builds it
and the AAD the RTP header with its CSRCs and extension; AES-CM's counter as ``srtp_protect``
and ``aes_icm_ossl.c`` build it and the tag HMAC-SHA1 over the packet and the ROC, cut to 10 or
4 octets; the same refusals, with libsrtp's codes (a header longer than the packet: 2; an index
more than the 1,024-packet window behind the newest: 10). Not kept: libsrtp's key-use limit
(2^48 packets) and its replay bitmap, which for a sender (``allow_repeat_tx``) only decides
that refusal.

One ``SrtpTx`` per (session, SSRC) holds that state, and every RTP packet of the SSRC must be
protected by it, never by libsrtp too (two index estimates could part after a wrap): the
session that owns it (``aiortc_compat.dtls.TxSession``) makes its ``protect`` this. OpenSSL
is not linked: the EVP and SHA-1 functions of the OpenSSL inside pylibsrtp's wheel (the one its
libsrtp calls: 3.5 with pylibsrtp 1.0; its extension exports them), or else of the
``libcrypto`` the interpreter's ``_hashlib`` loaded, are looked up by name and handed over (as
the send path is handed libsrtp's ``srtp_protect``). The wheel's is the faster here (in
``bench.floor``'s fan-out loop: 0.46-0.55 µs an AES-GCM protect against 0.64-0.73 for Debian's
OpenSSL 3.0).

**The direct path** (``DIRECT``, ``direct()``): beneath EVP, OpenSSL's provider runs AES-GCM as
``CRYPTO_gcm128_setiv`` / ``_aad`` / ``_encrypt_ctr32`` / ``_tag`` over its AES-NI functions,
and AES-CTR as ``aesni_ctr32_encrypt_blocks``; but each packet's EVP re-init goes through the
provider's dispatch and parameter handling first (``evp_cipher_init_internal``,
``ossl_gcm_einit``: 10.6 % of a 1,000-stream gateway's CPU in perf, 2026-12-07). Where the
wheel exports those functions (pylibsrtp 1.0's does; Debian's libcrypto hides the ``aesni_``
ones) and the CPU has AES-NI, a session calls them directly: the same calls on the same key
schedule, so the same bytes (tests/unit/test_srtp_tx.py runs every test both ways), 0.61 µs a
protect against 0.76 through EVP in ``bench.floor --fanout 1000``. ``--srtp-sender c-evp``
keeps EVP; ``/healthz`` says which (``srtp_sender.cipher``).

Built with cffi's API mode beside the send path (``python -m
gateway.net.srtp_tx``, ``make install``, or the gateway's start); ``load()`` is None without a
compiler or OpenSSL's functions, and the session then stays libsrtp's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
from pathlib import Path
from typing import Any

import pylibsrtp

from gateway.net.cffi_build import build_and_say, compile_module, import_built

#: libsrtp's profile numbers (srtp_profile_t) done here: (key, salt, tag) lengths in octets
PROFILES = {
    1: (16, 14, 10),  # srtp_profile_aes128_cm_sha1_80
    2: (16, 14, 4),  # srtp_profile_aes128_cm_sha1_32
    7: (16, 12, 16),  # srtp_profile_aead_aes_128_gcm
    8: (32, 12, 16),  # srtp_profile_aead_aes_256_gcm
}
AUTH_KEY_LEN = 20  # HMAC-SHA1's session authentication key
WINDOW = 1024  # aiortc's tx policy's window_size: how far back a repeat may be protected
FUNCTIONS = ("EVP_CIPHER_CTX_new", "EVP_CIPHER_CTX_free", "EVP_CipherInit_ex", "EVP_Cipher",
             "EVP_CIPHER_CTX_ctrl", "SHA1_Init", "SHA1_Update", "SHA1_Final")
CIPHERS = ("EVP_aes_128_gcm", "EVP_aes_256_gcm", "EVP_aes_128_ctr")
#: the direct path's (in gw_srtp_setup's order): OpenSSL's GCM128 mode and AES-NI functions,
#: exported by pylibsrtp's wheel (its OpenSSL is linked in statically, unhidden), not by
#: Debian's libcrypto, which keeps the aesni_ ones internal
DIRECT = ("CRYPTO_gcm128_new", "CRYPTO_gcm128_release", "CRYPTO_gcm128_setiv",
          "CRYPTO_gcm128_aad", "CRYPTO_gcm128_encrypt_ctr32", "CRYPTO_gcm128_tag",
          "aesni_set_encrypt_key", "aesni_encrypt", "aesni_ctr32_encrypt_blocks")

_CDEF = """
typedef struct gw_srtp gw_srtp;
int gw_srtp_setup(const uintptr_t *functions, const uintptr_t *direct);
gw_srtp *gw_srtp_new(uintptr_t evp_cipher, const unsigned char *key, int key_len,
                     const unsigned char *salt, int salt_len, const unsigned char *auth_key,
                     int tag_len, int window, int direct);
void gw_srtp_free(gw_srtp *g);
int gw_srtp_protect(void *g, void *hdr, int *len);
unsigned long long gw_srtp_index(gw_srtp *g);
"""

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GW_CTRL_GCM_SET_IVLEN 0x9
#define GW_CTRL_GCM_GET_TAG 0x10
#define GW_SHA_WORDS 24  /* OpenSSL's SHA_CTX: 5 + 2 + 16 + 1 32-bit words (a public struct) */
#define GW_AES_WORDS 61  /* OpenSSL's AES_KEY: 4 * 15 round-key words and the rounds (public) */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static void *(*gw_ctx_new)(void);
static void (*gw_ctx_free)(void *);
static int (*gw_init)(void *, const void *, void *, const unsigned char *,
                      const unsigned char *, int);            /* EVP_CipherInit_ex */
static int (*gw_cipher)(void *, unsigned char *, const unsigned char *, unsigned int);
static int (*gw_ctrl)(void *, int, int, void *);             /* EVP_CIPHER_CTX_ctrl */
static int (*gw_sha1_init)(void *);
static int (*gw_sha1_update)(void *, const void *, size_t);
static int (*gw_sha1_final)(unsigned char *, void *);

/* The direct path (all set, or none): OpenSSL's GCM128 mode and its AES-NI block functions,
   the very calls its provider makes beneath EVP, without EVP's per-packet dispatch. */
typedef void (*gw_block_f)(const unsigned char *, unsigned char *, const void *);
typedef void (*gw_ctr_f)(const unsigned char *, unsigned char *, size_t, const void *,
                         const unsigned char *);
static void *(*gw_gcm_new)(void *, gw_block_f);                       /* CRYPTO_gcm128_new */
static void (*gw_gcm_release)(void *);
static void (*gw_gcm_setiv)(void *, const unsigned char *, size_t);
static int (*gw_gcm_aad)(void *, const unsigned char *, size_t);
static int (*gw_gcm_encrypt)(void *, const unsigned char *, unsigned char *, size_t,
                             gw_ctr_f);                              /* .._encrypt_ctr32 */
static void (*gw_gcm_tag)(void *, unsigned char *, size_t);
static int (*gw_aes_key)(const unsigned char *, int, void *);  /* aesni_set_encrypt_key */
static gw_block_f gw_aes_block;                                /* aesni_encrypt */
static gw_ctr_f gw_aes_ctr;                                    /* aesni_ctr32_encrypt_blocks */
static int gw_direct;

typedef struct gw_srtp {
    unsigned int aes[GW_AES_WORDS];  /* direct: the AES-NI key schedule of the session key */
    unsigned long long index;  /* libsrtp's rdbx index: the newest sent, ROC << 16 | seq */
    int window;
    int tag_len;               /* 16: AEAD AES-GCM; 10 or 4: AES-CM and HMAC-SHA1 */
    unsigned char salt[16];    /* the session salt (12 octets AEAD, 14 AES-CM) */
    void *ctx;                 /* EVP_CIPHER_CTX: AES-GCM or AES-CTR, the session key */
    void *gcm;                 /* direct AES-GCM: OpenSSL's GCM128_CONTEXT over aes */
    int direct;                /* the ciphers called directly, not through ctx */
    unsigned int ipad[GW_SHA_WORDS], opad[GW_SHA_WORDS];  /* HMAC: SHA-1 after each pad */
} gw_srtp;

/* AES-NI on this CPU: the direct block functions are its instructions, unguarded. */
static int gw_cpu_has_aesni(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & (1u << 25)) != 0;
#else
    return 0;
#endif
}

/* The functions (FUNCTIONS), and the direct path's (DIRECT: any 0 turns it off); returns
   whether the direct path is on. */
int gw_srtp_setup(const uintptr_t *f, const uintptr_t *x) {
    gw_ctx_new = (void *(*)(void))f[0];
    gw_ctx_free = (void (*)(void *))f[1];
    gw_init = (int (*)(void *, const void *, void *, const unsigned char *,
                       const unsigned char *, int))f[2];
    gw_cipher = (int (*)(void *, unsigned char *, const unsigned char *, unsigned int))f[3];
    gw_ctrl = (int (*)(void *, int, int, void *))f[4];
    gw_sha1_init = (int (*)(void *))f[5];
    gw_sha1_update = (int (*)(void *, const void *, size_t))f[6];
    gw_sha1_final = (int (*)(unsigned char *, void *))f[7];
    gw_direct = 0;
    for (int i = 0; i < 9; i++) if (x[i] == 0) return 0;
    if (!gw_cpu_has_aesni()) return 0;
    gw_gcm_new = (void *(*)(void *, gw_block_f))x[0];
    gw_gcm_release = (void (*)(void *))x[1];
    gw_gcm_setiv = (void (*)(void *, const unsigned char *, size_t))x[2];
    gw_gcm_aad = (int (*)(void *, const unsigned char *, size_t))x[3];
    gw_gcm_encrypt = (int (*)(void *, const unsigned char *, unsigned char *, size_t,
                              gw_ctr_f))x[4];
    gw_gcm_tag = (void (*)(void *, unsigned char *, size_t))x[5];
    gw_aes_key = (int (*)(const unsigned char *, int, void *))x[6];
    gw_aes_block = (gw_block_f)x[7];
    gw_aes_ctr = (gw_ctr_f)x[8];
    gw_direct = 1;
    return 1;
}

/* HMAC's two precomputed states (RFC 2104): SHA-1 after the 64-octet key XOR 0x36 / 0x5c. */
static void gw_srtp_pads(gw_srtp *g, const unsigned char *key, int key_len) {
    unsigned char block[64];
    for (int pad = 0; pad < 2; pad++) {
        memset(block, pad ? 0x5c : 0x36, sizeof block);
        for (int i = 0; i < key_len; i++) block[i] ^= key[i];
        unsigned int *state = pad ? g->opad : g->ipad;
        gw_sha1_init(state);
        gw_sha1_update(state, block, sizeof block);
    }
}

void gw_srtp_free(gw_srtp *g) {
    if (g == NULL) return;
    if (g->ctx != NULL) gw_ctx_free(g->ctx);
    if (g->gcm != NULL) gw_gcm_release(g->gcm);
    memset(g->aes, 0, sizeof g->aes);
    free(g);
}

gw_srtp *gw_srtp_new(uintptr_t evp_cipher, const unsigned char *key, int key_len,
                     const unsigned char *salt, int salt_len, const unsigned char *auth_key,
                     int tag_len, int window, int direct) {
    if (salt_len < 0 || salt_len > 16 || tag_len < 0 || tag_len > 20) return NULL;
    gw_srtp *g = calloc(1, sizeof(gw_srtp));
    if (g == NULL) return NULL;
    g->direct = direct && gw_direct;
    int keyed = g->direct  /* the AES-NI key schedule (and GCM over it), or an EVP context */
        ? gw_aes_key(key, 8 * key_len, g->aes) == 0
          && (auth_key != NULL || (g->gcm = gw_gcm_new(g->aes, gw_aes_block)) != NULL)
        : (g->ctx = gw_ctx_new()) != NULL
          && gw_init(g->ctx, (const void *)evp_cipher, NULL, key, NULL, 1)
          && (auth_key != NULL || gw_ctrl(g->ctx, GW_CTRL_GCM_SET_IVLEN, 12, NULL));
    if (!keyed) {
        gw_srtp_free(g);
        return NULL;
    }
    memcpy(g->salt, salt, salt_len);
    if (auth_key != NULL) gw_srtp_pads(g, auth_key, 20);
    g->tag_len = tag_len;
    g->window = window;
    return g;
}

unsigned long long gw_srtp_index(gw_srtp *g) { return g->index; }

/* libsrtp's srtp_rdbx_estimate_index (rdbx.c): the index of sequence number s given the
   newest index; returns guess - index. */
static int gw_srtp_estimate(unsigned long long index, int s, unsigned long long *guess) {
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

/* AEAD AES-GCM (srtp_protect_aead): the payload encrypted in place, the header its AAD, the
   16-octet tag after it. */
static int gw_srtp_gcm(gw_srtp *g, unsigned char *p, int n, int at, unsigned int roc) {
    unsigned char iv[12];
    iv[0] = 0; iv[1] = 0;
    memcpy(iv + 2, p + 8, 4);
    iv[6] = (unsigned char)(roc >> 24); iv[7] = (unsigned char)(roc >> 16);
    iv[8] = (unsigned char)(roc >> 8); iv[9] = (unsigned char)roc;
    iv[10] = p[2]; iv[11] = p[3];
    for (int i = 0; i < 12; i++) iv[i] ^= g->salt[i];
    if (g->direct) {  /* as the provider's gcm_cipher_hw_aesni does it beneath EVP */
        gw_gcm_setiv(g->gcm, iv, 12);
        if (gw_gcm_aad(g->gcm, p, (size_t)at) != 0) return 11;
        if (gw_gcm_encrypt(g->gcm, p + at, p + at, (size_t)(n - at), gw_aes_ctr) != 0) return 8;
        gw_gcm_tag(g->gcm, p + n, 16);
        return 0;
    }
    if (!gw_init(g->ctx, NULL, NULL, NULL, iv, 1)) return 5;
    if (gw_cipher(g->ctx, NULL, p, (unsigned int)at) != at) return 11;
    if (gw_cipher(g->ctx, p + at, p + at, (unsigned int)(n - at)) < 0) return 8;
    gw_cipher(g->ctx, NULL, NULL, 0);
    if (!gw_ctrl(g->ctx, GW_CTRL_GCM_GET_TAG, 16, p + n)) return 11;
    return 0;
}

/* AES-CM and HMAC-SHA1 (srtp_protect_mki's other branch): the payload XOR AES-CTR from the
   counter salt ^ (0, SSRC, ROC, seq, 0), then HMAC-SHA1 over the packet and the ROC, cut. */
static int gw_srtp_cm(gw_srtp *g, unsigned char *p, int n, int at, unsigned int roc) {
    unsigned char counter[16], r[4], inner[20], mac[20];
    unsigned int sha[GW_SHA_WORDS];
    memcpy(counter, g->salt, 14);
    counter[14] = 0; counter[15] = 0;
    for (int i = 0; i < 4; i++) counter[4 + i] ^= p[8 + i];
    r[0] = (unsigned char)(roc >> 24); r[1] = (unsigned char)(roc >> 16);
    r[2] = (unsigned char)(roc >> 8); r[3] = (unsigned char)roc;
    for (int i = 0; i < 4; i++) counter[8 + i] ^= r[i];
    counter[12] ^= p[2]; counter[13] ^= p[3];
    if (g->direct) {  /* as CRYPTO_ctr128_encrypt_ctr32 does it beneath EVP's AES-CTR */
        size_t len = (size_t)(n - at), blocks = len / 16, tail = len % 16;
        if (blocks) gw_aes_ctr(p + at, p + at, blocks, g->aes, counter);
        if (tail) {
            unsigned char block[16], stream[16];
            unsigned int c32 = ((unsigned int)counter[12] << 24 | (unsigned int)counter[13] << 16
                                | (unsigned int)counter[14] << 8 | counter[15])
                               + (unsigned int)blocks;
            memcpy(block, counter, 12);
            block[12] = (unsigned char)(c32 >> 24); block[13] = (unsigned char)(c32 >> 16);
            block[14] = (unsigned char)(c32 >> 8); block[15] = (unsigned char)c32;
            gw_aes_block(block, stream, g->aes);
            unsigned char *q = p + at + 16 * blocks;
            for (size_t i = 0; i < tail; i++) q[i] ^= stream[i];
        }
    } else {
        if (!gw_init(g->ctx, NULL, NULL, NULL, counter, 1)) return 8;
        if (n > at && gw_cipher(g->ctx, p + at, p + at, (unsigned int)(n - at)) <= 0) return 8;
    }
    memcpy(sha, g->ipad, sizeof sha);
    gw_sha1_update(sha, p, (size_t)n);
    gw_sha1_update(sha, r, 4);
    gw_sha1_final(inner, sha);
    memcpy(sha, g->opad, sizeof sha);
    gw_sha1_update(sha, inner, sizeof inner);
    gw_sha1_final(mac, sha);
    memcpy(p + n, mac, (size_t)g->tag_len);
    return 0;
}

/* srtp_protect for one SSRC: the packet at hdr (*len octets, room for the tag after it)
   protected in place, *len += the tag. 0, or libsrtp's error code. */
int gw_srtp_protect(void *state, void *hdr, int *len) {
    gw_srtp *g = (gw_srtp *)state;
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
    int delta = gw_srtp_estimate(g->index, (p[2] << 8) | p[3], &est);
    if (delta <= 0 && g->window - 1 + delta < 0) return 10;  /* replay_old */
    if (delta > 0) g->index = est;
    int rc = g->tag_len == 16 ? gw_srtp_gcm(g, p, n, at, (unsigned int)(est >> 16))
                              : gw_srtp_cm(g, p, n, at, (unsigned int)(est >> 16));
    if (rc) return rc;
    *len = n + g->tag_len;
    return 0;
}
"""

MODULE = "_gw_srtp_tx_" + hashlib.sha256((_CDEF + _SOURCE).encode()).hexdigest()[:12]

_loaded: list[Any] = []  # [module or None, the OpenSSL it was set up with, direct], once tried


def build() -> Path:
    return compile_module(MODULE, _CDEF, _SOURCE)


def _libcrypto() -> Any:
    """OpenSSL's functions (``FUNCTIONS``, ``CIPHERS``): those of the OpenSSL inside pylibsrtp's
    wheel (the very one its libsrtp calls; its extension exports them), else the ``libcrypto``
    the interpreter's ``_hashlib`` loaded; None when neither has them all."""
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
            for symbol in FUNCTIONS + CIPHERS:
                getattr(lib, symbol)
        except (OSError, AttributeError):
            continue
        for symbol in CIPHERS:
            getattr(lib, symbol).restype = ctypes.c_void_p
        return lib
    return None


def load(build_if_missing: bool = True) -> Any:
    """The built module, set up with OpenSSL's functions (built now if missing and
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
        _loaded[:] = [None, None, False]
        return None
    addresses = [_address(crypto, name) for name in FUNCTIONS]
    direct = [_address(crypto, name) for name in DIRECT]
    on = module.lib.gw_srtp_setup(module.ffi.new("uintptr_t[]", addresses),
                                  module.ffi.new("uintptr_t[]", direct))
    _loaded[:] = [module, crypto, bool(on)]
    return module


def _address(lib: Any, name: str) -> int:
    """A function's address in ``lib``, or 0 where it does not export it."""
    try:
        return int(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0)
    except AttributeError:
        return 0


def crypto() -> Any:
    """The OpenSSL ``load()`` set the module up with (None before, or where it failed)."""
    return _loaded[1] if _loaded else None


def direct() -> bool:
    """Whether ``load()`` found the direct path: OpenSSL's GCM128 and AES-NI functions (all of
    ``DIRECT``) on a CPU with AES-NI. Else every cipher call goes through EVP."""
    return bool(_loaded and _loaded[2])


def cipher_path(use_direct: bool = True) -> str:
    """What new sessions' ciphers run on: ``aes-ni`` (the direct path) or ``evp``."""
    return "aes-ni" if direct() and use_direct else "evp"


def session_keys(profile: int, master: bytes) -> tuple[bytes, bytes, bytes | None]:
    """(session key, session salt, HMAC key or None) for RTP from a master key and salt, by RFC
    3711's AES-CM key derivation (labels 0, 2 and 1; key derivation rate 0) as libsrtp 2.7 runs
    it: an AEAD profile's 12-octet master salt padded with two zero octets to the KDF's 14."""
    key_len, salt_len, tag_len = PROFILES[profile]
    key, salt = master[:key_len], master[key_len:]
    if len(key) != key_len or len(salt) != salt_len:
        raise ValueError("master key and salt of the wrong length")
    padded = salt + bytes(14 - salt_len)
    auth = derive(key, padded, 1, AUTH_KEY_LEN) if tag_len != 16 else None
    return derive(key, padded, 0, key_len), derive(key, padded, 2, salt_len), auth


def derive(key: bytes, salt: bytes, label: int, size: int) -> bytes:
    """RFC 3711 §4.3's AES-CM PRF: ``size`` octets of AES-CTR keystream under the master
    ``key`` from the counter (14-octet master ``salt`` XOR the label at octet 7) || 0x0000."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    counter = bytearray(salt + bytes(2))
    counter[7] ^= label
    encryptor = Cipher(algorithms.AES(key), modes.CTR(bytes(counter))).encryptor()
    return encryptor.update(bytes(size)) + encryptor.finalize()


class SrtpTx:
    """One SSRC's outbound RTP protection state on one SRTP session (see the module)."""

    __slots__ = ("_buffer", "_cdata", "_ffi", "_length", "_lib", "_state", "protect_address")

    def __init__(self, module: Any, crypto: Any, profile: int, master: bytes,
                 use_direct: bool = True) -> None:
        """``use_direct``: the ciphers by the direct path where ``load()`` found it (False:
        through EVP always)."""
        key, salt, auth = session_keys(profile, master)
        key_len, salt_len, tag_len = PROFILES[profile]
        cipher = getattr(crypto, "EVP_aes_128_ctr" if auth is not None else
                         f"EVP_aes_{8 * key_len}_gcm")()
        ffi, lib = module.ffi, module.lib
        state = lib.gw_srtp_new(cipher, key, key_len, salt, salt_len,
                                auth if auth is not None else ffi.NULL, tag_len, WINDOW,
                                int(use_direct))
        if state == ffi.NULL:
            raise RuntimeError("OpenSSL refused the cipher context")
        self._ffi, self._lib = ffi, lib
        self._state = ffi.gc(state, lib.gw_srtp_free)
        self._cdata = self._buffer = self._length = None  # Python's protect's, made at its first
        #: (gw_srtp_protect's address, this state's): what the compiled send path calls
        self.protect_address = (
            int(ffi.cast("uintptr_t", ffi.addressof(lib, "gw_srtp_protect"))),
            int(ffi.cast("uintptr_t", self._state)))

    @property
    def index(self) -> int:
        """The newest packet index protected (ROC << 16 | seq), as libsrtp's replay database."""
        return int(self._lib.gw_srtp_index(self._state))

    def protect(self, packet: bytes) -> bytes:
        """The SRTP packet (raises ``ValueError`` when too long, ``pylibsrtp.Error`` with
        libsrtp's code when refused, as pylibsrtp's ``protect``)."""
        n = len(packet)
        if n > 1500 - 16:
            raise ValueError("packet is too long")
        if self._buffer is None:  # (the compiled path protects in its own slots: most never)
            self._cdata = self._ffi.new("unsigned char[]", 1500)
            self._buffer = self._ffi.buffer(self._cdata)
            self._length = self._ffi.new("int *")
        self._buffer[0:n] = packet
        self._length[0] = n
        rc = self._lib.gw_srtp_protect(self._state, self._cdata, self._length)
        if rc:
            raise pylibsrtp.Error(f"srtp_protect failed ({rc})")
        return bytes(self._buffer[0:self._length[0]])


def main() -> None:
    """Build the module now (``make install``; a failure keeps libsrtp)."""
    build_and_say(build, "outbound SRTP in C")


if __name__ == "__main__":
    main()
