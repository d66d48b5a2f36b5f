"""Two small PCM helpers in C for a talker's playout period, and the Python they replace.

Every 20 ms a talking session decodes one Opus packet (is it quiet? its peak), and its 16 kHz
frames' energy is measured twice (the duplex pause gate's level, the VAD's gate). With numpy
each of those is a reduction or two; on the event loop's cold caches a numpy call costs 3-10
µs of machinery around a few hundred multiplications (measured: ``max`` + ``min`` of 480
int16 samples 2.5 µs hot, 11 µs with the caches flushed). Here:

- ``OpusCall``: libopus's ``opus_decode`` called from C into the decoder's buffer, the
  decoded samples' peak (``max |sample|``) computed in the same call;
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
int gw_opus_decode(uintptr_t fn, void *state, const char *data, int len, int16_t *pcm,
                   int frame_size, int fec, int *peak);
long long gw_sum_squares(const int16_t *pcm, int n);
"""

_SOURCE = r"""
#include <stdint.h>

typedef int (*gw_opus_decode_fn)(void *st, const unsigned char *data, int32_t len,
                                 int16_t *pcm, int frame_size, int decode_fec);

/* opus_decode (mono), then the peak |sample| of what it wrote (0 when nothing) */
int gw_opus_decode(uintptr_t fn, void *state, const char *data, int len, int16_t *pcm,
                   int frame_size, int fec, int *peak) {
    int n = ((gw_opus_decode_fn)fn)(state, (const unsigned char *)data, len, pcm,
                                    frame_size, fec);
    int top = 0;
    for (int i = 0; i < n; i++) {
        int a = pcm[i] < 0 ? -(int)pcm[i] : (int)pcm[i];
        if (a > top) top = a;
    }
    *peak = top;
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
    ``peak`` -1: not known (the caller measures the samples itself, as before)."""

    def __init__(self, opus_decode: Any, state: Any, buffer: np.ndarray) -> None:
        """``opus_decode``: opuslib's ctypes function; ``state``: its decoder pointer;
        ``buffer``: the int16 array libopus writes into (kept by the caller)."""
        self.peak = 0
        module = kernel()
        self._call: Any = None  # the compiled function, where built
        if module is not None:
            ffi = module.ffi
            self._call = module.lib.gw_opus_decode
            self._fn = ctypes.cast(opus_decode, ctypes.c_void_p).value
            self._state = ffi.cast("void *", ctypes.cast(state, ctypes.c_void_p).value)
            self._out = ffi.from_buffer("int16_t[]", buffer, require_writable=True)
            self._peak = ffi.new("int[1]")
            self._null = ffi.NULL
        else:
            self._opus_decode, self._ctypes_state = opus_decode, state
            self._pointer = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_int16))

    def decode(self, packet: bytes | None, samples: int, fec: int) -> int:
        if self._call is None:
            got = int(self._opus_decode(self._ctypes_state, packet,
                                        len(packet) if packet else 0, self._pointer, samples,
                                        fec))
            self.peak = -1
            return got
        if packet is None:  # (PLC: libopus takes NULL)
            got = self._call(self._fn, self._state, self._null, 0, self._out, samples, fec,
                             self._peak)
        else:
            got = self._call(self._fn, self._state, packet, len(packet), self._out, samples,
                             fec, self._peak)
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
