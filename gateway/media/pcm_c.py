"""Two small PCM helpers in C for a talker's playout period, and the Python they replace.

Every 20 ms a talking session decodes one Opus packet (is it quiet? its peak), and its 16 kHz
frames' energy is measured twice (the duplex pause gate's level, the VAD's gate). With numpy
each of those is a reduction or two; on the event loop's cold caches a numpy call costs 3-10
µs of machinery around a few hundred multiplications (measured: ``max`` + ``min`` of 480
int16 samples 2.5 µs hot, 11 µs with the caches flushed). Here:

- ``OpusCall``: libopus's ``opus_decode`` called from C into the decoder's buffer, the
  decoded samples' peak (``max |sample|``) computed in the same call, and a repeated
  digital-silence packet not decoded again once provably a no-op (see the class);
- ``sum_squares``: the exact sum of an int16 frame's squares (int64).

The C is built with cffi's API mode next to the compiled send path
(``net/cffi_build.cache_dir``), by ``python -m gateway.media.pcm_c`` (``make install``) or the
gateway's start (``load()``); never at request time: ``kernel()`` only imports what is built.
libopus is not linked: the address of the ``opus_decode`` opuslib loaded is handed over, so
any libopus the gateway runs with works. Without a compiler (or with ``DISABLED``) every
helper is the Python below, tested equal (tests/unit/test_pcm_c.py).
"""

from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from gateway.net.cffi_build import build_and_say, compile_module, import_built

_CDEF = """
typedef struct gw_quiet gw_quiet;
gw_quiet *gw_quiet_new(uintptr_t fn, void *state, int size);
void gw_quiet_free(gw_quiet *q);
long long gw_quiet_skipped(gw_quiet *q);
int gw_opus_decode(gw_quiet *q, const char *data, int len, int16_t *pcm, int frame_size,
                   int fec, int *peak);
long long gw_sum_squares(const int16_t *pcm, int n);
"""

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gw_opus_decode_fn)(void *st, const unsigned char *data, int32_t len,
                                 int16_t *pcm, int frame_size, int decode_fec);

#define GW_QUIET_MAX 8 /* the longest packet remembered: digital silence is 1-3 bytes */

/* One decoder's call, and what makes a repeated silent packet's decode provably a no-op:
   libopus's decoder state is one block of ``size`` bytes (opus_decoder_get_size: offsets,
   no pointers to anything that changes), and opus_decode is a function of that block, the
   packet and the call's arguments alone. When a decode of packet P left the block exactly
   as it found it and wrote only zeros (``fixed``), decoding P again with the same arguments
   would write the same zeros and leave the same block: it is skipped. Any other call
   decodes for real, from the very state libopus would have had. */
typedef struct gw_quiet {
    gw_opus_decode_fn fn;
    void *state;
    int size;
    unsigned char *snap;         /* the block before a checking decode (allocated on need) */
    int fixed;                   /* decoding last[] is a no-op writing last_n zeros */
    int last_len;                /* -1: the last call was no silent packet to remember */
    int last_n, last_frame_size;
    unsigned char last[GW_QUIET_MAX];
    long long skipped;
} gw_quiet;

gw_quiet *gw_quiet_new(uintptr_t fn, void *state, int size) {
    gw_quiet *q = calloc(1, sizeof(gw_quiet));
    if (!q) return NULL;
    q->fn = (gw_opus_decode_fn)fn;
    q->state = state;
    q->size = size;
    q->last_len = -1;
    return q;
}

void gw_quiet_free(gw_quiet *q) {
    if (q) free(q->snap);
    free(q);
}

long long gw_quiet_skipped(gw_quiet *q) { return q->skipped; }

/* opus_decode (mono), then the peak |sample| of what it wrote (0 when nothing) */
int gw_opus_decode(gw_quiet *q, const char *data, int len, int16_t *pcm, int frame_size,
                   int fec, int *peak) {
    int same = data && !fec && len > 0 && len <= GW_QUIET_MAX && len == q->last_len
               && frame_size == q->last_frame_size && memcmp(data, q->last, len) == 0;
    if (same && q->fixed) {
        memset(pcm, 0, (size_t)q->last_n * sizeof(int16_t));
        *peak = 0;
        q->skipped++;
        return q->last_n;
    }
    int check = 0;
    if (same && q->size > 0) {  /* this packet decoded to zeros last time: a fixed point? */
        if (!q->snap) q->snap = malloc((size_t)q->size);
        if (q->snap) {
            memcpy(q->snap, q->state, (size_t)q->size);
            check = 1;
        }
    }
    int n = q->fn(q->state, (const unsigned char *)data, len, pcm, frame_size, fec);
    int top = 0;
    for (int i = 0; i < n; i++) {
        int a = pcm[i] < 0 ? -(int)pcm[i] : (int)pcm[i];
        if (a > top) top = a;
    }
    *peak = top;
    q->fixed = 0;
    q->last_len = -1;
    if (n > 0 && top == 0 && data && !fec && len > 0 && len <= GW_QUIET_MAX) {
        q->fixed = check && memcmp(q->snap, q->state, (size_t)q->size) == 0;
        memcpy(q->last, data, (size_t)len);
        q->last_len = len;
        q->last_n = n;
        q->last_frame_size = frame_size;
    }
    return n;
}

long long gw_sum_squares(const int16_t *pcm, int n) {
    long long sum = 0;
    for (int i = 0; i < n; i++) sum += (long long)pcm[i] * pcm[i];
    return sum;
}
"""

MODULE = "_gw_pcm_" + hashlib.sha256((_CDEF + _SOURCE).encode()).hexdigest()[:12]
INT16 = np.dtype(np.int16)
DISABLED = False  # tests: a machine where the helpers cannot be built or loaded
_loaded: Any = None
_failure: str | None = None


def _import() -> Any:
    return import_built(MODULE)


def build() -> Path:
    """Compile the helpers into ``cache_dir()``; returns the .so path (raises without a
    compiler, cffi or Python's headers)."""
    return compile_module(MODULE, _CDEF, _SOURCE)


def load(build_if_missing: bool = True) -> Any:
    """The compiled helpers (built first if missing and allowed), or None: the Python path
    (``failure()`` says why)."""
    global _loaded, _failure
    if DISABLED:
        return None
    if _loaded is None and _failure is None:
        try:
            module = _import()
            if module is None and build_if_missing:
                build()
                module = _import()
            if module is None:
                _failure = "not built (python -m gateway.media.pcm_c)"
            _loaded = module
        except Exception as exc:  # no compiler, no headers, a read-only venv
            _failure = f"{type(exc).__name__}: {exc}".strip()[:300]
    return _loaded


def kernel() -> Any:
    """What is built, never building (request time): None for the Python path."""
    return None if DISABLED else (_loaded if _loaded is not None else load(False))


def failure() -> str | None:
    return "disabled" if DISABLED else _failure


def sum_squares(pcm: np.ndarray) -> int:
    """The exact sum of the squares of int16 samples (twice a talker's period: the VAD's gate
    and the duplex pause gate's level; so no context manager, no helper call around C)."""
    module = None if DISABLED else (_loaded if _loaded is not None else load(False))
    if module is not None and type(pcm) is np.ndarray and pcm.dtype is INT16:
        try:
            return module.lib.gw_sum_squares(  # type: ignore[no-any-return]
                module.ffi.from_buffer("int16_t[]", pcm), pcm.size)
        except (BufferError, TypeError, ValueError):  # (not contiguous): the Python path
            pass
    samples = np.asarray(pcm, dtype=np.int16).astype(np.float64)
    return int(samples @ samples)  # (exact: every partial sum is an integer below 2**53)


class OpusCall:
    """``opus_decode`` for one decoder into its buffer, with the decoded samples' peak.

    ``decode(packet, samples, fec)`` returns libopus's count (negative: its error) and sets
    ``peak``; the compiled call where built, else ctypes through opuslib's binding, and
    ``peak`` -1: not known (the caller measures the samples itself, as before).

    Compiled, a repeated digital-silence packet is not decoded again once decoding it has
    been seen to leave libopus's whole state block byte for byte as it found it and to
    write only zeros (``skipped`` counts them): libopus's decode is a function of that
    block and its arguments, so the skipped call would have written the same zeros and left
    the same state -- the samples are libopus's own, exactly, and the next packet, a loss's
    concealment or an FEC rebuild is decoded from the state libopus would have had. A muted
    microphone sends such packets (the benches' silent talkers too): each a full libopus
    decode (≈ 45 µs on the loop's cold caches) for 20 ms of zeros.
    """

    def __init__(self, opus_decode: Any, state: Any, buffer: np.ndarray,
                 state_size: int = 0) -> None:
        """``opus_decode``: opuslib's ctypes function; ``state``: its decoder pointer;
        ``buffer``: the int16 array libopus writes into (kept by the caller);
        ``state_size``: the decoder state's bytes (``opus_decoder_get_size``; 0: every
        packet decoded)."""
        self.peak = 0
        module = kernel()
        self._call: Any = None  # the compiled function, where built
        if module is not None:
            ffi, lib = module.ffi, module.lib
            fn = ctypes.cast(opus_decode, ctypes.c_void_p).value
            address = ctypes.cast(state, ctypes.c_void_p).value
            quiet = lib.gw_quiet_new(fn, ffi.cast("void *", address), state_size)
            if quiet == ffi.NULL:
                raise MemoryError("gw_quiet_new")
            self._quiet = ffi.gc(quiet, lib.gw_quiet_free)  # (it never frees the state)
            self._skipped = lib.gw_quiet_skipped
            self._call = lib.gw_opus_decode
            self._out = ffi.from_buffer("int16_t[]", buffer, require_writable=True)
            self._peak = ffi.new("int[1]")
            self._null = ffi.NULL
        else:
            self._opus_decode, self._ctypes_state = opus_decode, state
            self._pointer = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_int16))

    @property
    def skipped(self) -> int:
        """Repeated silent packets not decoded again (their zeros written; 0 in Python)."""
        return int(self._skipped(self._quiet)) if self._call is not None else 0

    def decode(self, packet: bytes | None, samples: int, fec: int) -> int:
        if self._call is None:
            got = int(self._opus_decode(self._ctypes_state, packet,
                                        len(packet) if packet else 0, self._pointer, samples,
                                        fec))
            self.peak = -1
            return got
        if packet is None:  # (PLC: libopus takes NULL)
            got = self._call(self._quiet, self._null, 0, self._out, samples, fec, self._peak)
        else:
            got = self._call(self._quiet, packet, len(packet), self._out, samples, fec,
                             self._peak)
        self.peak = self._peak[0]
        return int(got)


def peak_of(pcm: np.ndarray) -> int:
    """``max |sample|`` of int16 samples (0 for none)."""
    if not pcm.size:
        return 0
    return max(int(pcm.max()), -int(pcm.min()))


def main() -> None:
    """Build the helpers now (``make install``; a failure leaves the Python path)."""
    build_and_say(build, "PCM helpers")


if __name__ == "__main__":
    main()
