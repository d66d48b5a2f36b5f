"""The floor's two calls made from C: no Python between a packet's SRTP and its ``sendmmsg``.

``bench/floor.py``'s floor (the issue's definition) calls ``srtp_protect`` and ``sendmmsg``
through the gateway's Python wrappers, a Python call a packet; the gateway's compiled send path
makes both calls from C. So that a floor is not inflated by Python the gateway does not run,
``fanout`` here runs the whole measurement in C: for each tick of ``tick_ns`` (sleeping to it
with ``clock_nanosleep``, as a paced sender sleeps), every ``phases``-th stream's packet is
copied to its own buffer, its seq and timestamp set, protected on its own SRTP context, and the
tick's packets go in ``sendmmsg`` calls of up to 1,024; thread CPU time is read around the SRTP
calls and around the sends. With ``tick_ns`` 0 it runs back to back (the one-destination,
hot-cache shape of ``bench.floor``'s floor).

libsrtp is not linked: the address of the ``srtp_protect`` inside pylibsrtp's cffi module is
handed over (``aiortc_compat.srtp_protect_address``), as the compiled send path does. Built
with cffi's API mode into the same cache as the gateway's extensions on first use (a bench, not
the gateway: no start-up builds it); ``load()`` returns None without a compiler.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gateway.net.cffi_build import compile_module, import_built

_CDEF = """
int gwf_fanout(int fd, uintptr_t protect, uintptr_t *ctxs, const char *names, int namelen,
               int n, const char *packet, int len, int frames, int phases, long tick_ns,
               double *out);
"""

_SOURCE = r"""
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef int (*gwf_protect_fn)(void *ctx, void *hdr, int *len);

static double gwf_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* out: [0] SRTP seconds, [1] send seconds, [2] datagrams sent. 0, or -1 (no memory), or
   -(1000 + rc) when srtp_protect failed with rc. */
int gwf_fanout(int fd, uintptr_t protect, uintptr_t *ctxs, const char *names, int namelen,
               int n, const char *packet, int len, int frames, int phases, long tick_ns,
               double *out) {
    gwf_protect_fn p = (gwf_protect_fn)protect;
    int slot = len + 64;
    int per_tick = (n + phases - 1) / phases;
    unsigned char *bufs = malloc((size_t)n * slot);
    struct iovec *iovs = calloc((size_t)n, sizeof *iovs);
    struct mmsghdr *msgs = calloc((size_t)per_tick, sizeof *msgs);
    int rc = 0;
    if (!bufs || !iovs || !msgs) { rc = -1; goto done; }
    for (int i = 0; i < n; i++) iovs[i].iov_base = bufs + (size_t)i * slot;
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    due.tv_nsec += 100000000L;
    double srtp = 0, send = 0, sent = 0;
    for (long tick = 0; tick < (long)frames * phases; tick++) {
        if (tick_ns > 0) {
            while (due.tv_nsec >= 1000000000L) { due.tv_sec++; due.tv_nsec -= 1000000000L; }
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR) {}
            due.tv_nsec += tick_ns;
        }
        int frame = (int)(tick / phases), k = (int)(tick % phases);
        unsigned seq = (unsigned)frame & 0xFFFF, ts = (unsigned)frame * 960u;
        double a = gwf_cpu();
        int m = 0;
        for (int i = k; i < n; i += phases, m++) {
            unsigned char *b = bufs + (size_t)i * slot;
            memcpy(b, packet, (size_t)len);
            b[2] = (unsigned char)(seq >> 8); b[3] = (unsigned char)seq;
            b[4] = (unsigned char)(ts >> 24); b[5] = (unsigned char)(ts >> 16);
            b[6] = (unsigned char)(ts >> 8); b[7] = (unsigned char)ts;
            int size = len;
            int err = p((void *)ctxs[i], b, &size);
            if (err) { rc = -(1000 + err); goto done; }
            iovs[i].iov_len = (size_t)size;
            msgs[m].msg_hdr.msg_iov = &iovs[i];
            msgs[m].msg_hdr.msg_iovlen = 1;
            msgs[m].msg_hdr.msg_name = (void *)(names + (size_t)i * namelen);
            msgs[m].msg_hdr.msg_namelen = (socklen_t)namelen;
        }
        double b2 = gwf_cpu();
        for (int at = 0; at < m;) {
            int count = m - at < 1024 ? m - at : 1024;
            int r = sendmmsg(fd, msgs + at, (unsigned)count, 0);
            if (r <= 0) break;  /* a full socket buffer: the rest of the tick is dropped */
            at += r;
            sent += r;
        }
        srtp += b2 - a;
        send += gwf_cpu() - b2;
    }
    out[0] = srtp; out[1] = send; out[2] = sent;
done:
    free(bufs); free(iovs); free(msgs);
    return rc;
}
"""

MODULE = "_gw_floor_" + hashlib.sha256((_CDEF + _SOURCE).encode()).hexdigest()[:12]


def load() -> Any:
    """The compiled floor (built now if missing), or None where it cannot be built."""
    module = import_built(MODULE)
    if module is None:
        try:
            compile_module(MODULE, _CDEF, _SOURCE)
        except Exception:
            return None
        module = import_built(MODULE)
    return module
