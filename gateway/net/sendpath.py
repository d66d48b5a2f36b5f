"""The compiled send path: RTP headers patched, SRTP-protected and sent in C, one ``sendmmsg``
per tick.

The pure-Python batch path pays, per packet, a header join (``rtp/header.py``), a copy into
pylibsrtp's buffer and a ``bytes`` back out of it around ``srtp_protect``, a list append, and at
the end of the tick another copy into the ``sendmmsg`` arena (``net/sendmmsg.py``). Here a
packet is one cffi call, ``gw_stage``: the stream's header template and the payload are copied
into the packet's slot of a preallocated arena, sequence number, timestamp, abs-send-time and
the marker/payload-type octet are patched there, and the stream's protect function encrypts it
in place on the stream's SRTP state: ``net/srtp_tx.py``'s on the SSRC's own block, or libsrtp's
``srtp_protect`` on the session's ``srtp_t`` (either way the state every other RTP packet of
the session -- aiortc's, retransmissions -- is protected on: ``aiortc_compat.
srtp_protect_handle``). ``gw_flush``, once per tick, sends every staged slot with one
``sendmmsg``.

Neither protect function is linked here: their addresses are handed over (the batch's default,
libsrtp's inside pylibsrtp's cffi module, at ``CompiledBatch``'s creation; a stream's own at
``new_stream``) -- so no libsrtp headers are needed, only a C compiler and Python's headers.

Built with cffi's API mode into ``<venv>/share/voice-gateway/sendpath/`` (``python -m
gateway.net.sendpath`` at install, or the first start of a gateway: never at request time, no
download); its file name carries a hash of the C source, so an edited source is rebuilt.
Without a compiler the build fails once, is logged, and the Python path is used
(``load()`` returns None).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import sys
from array import array
from pathlib import Path
from typing import Any

from gateway.net.cffi_build import build_and_say, cache_dir, compile_module, import_built

log = logging.getLogger(__name__)

SLOT = 1536  # bytes per datagram slot (as net/sendmmsg.py)
MAX_BATCH = 512  # staged datagrams per socket before a flush (as net/sendmmsg.py)
MAX_HEADER = 64  # bytes of RTP header (12 + the extension block) a template may hold
PARKED_RING_WORDS = 256 * 4 + 2  # a FrameStore's ring: 4 words a slot, newest seq, recorded
FEED_MAX = 1275  # bytes of a fed speech frame: Opus's largest packet (RFC 6716 §3.4, R2)
FED_SLOTS = 48  # speech frames fed ahead to a stream C sends (gw_feed_run): 960 ms
FED_LOW = 4  # ... fed frames left when C asks for more (its handle in gw_consumed)
RED_MAX = 8  # previous frames a RED packet C makes carries at most (red_sender.MAX_DISTANCE)

_CDEF = """
typedef struct { ...; } gw_batch;
typedef struct { ...; } gw_stream;
typedef struct { ...; } gw_red_entry;
gw_batch *gw_batch_new(int fd, uintptr_t protect, int trailer);
void gw_batch_free(gw_batch *b);
int gw_stream_init(gw_stream *s, const unsigned char *header, int header_len, int ast_at,
                   uintptr_t srtp, uintptr_t protect, const unsigned char *addr, int addr_len);
void gw_stream_set_addr(gw_stream *s, const unsigned char *addr, int addr_len);
int gw_stage(gw_batch *b, gw_stream *s, unsigned int b1, unsigned int seq, unsigned int ts,
             unsigned int ast, unsigned long long ntp, const unsigned char *payload,
             int payload_len);
void gw_stream_take_counters(gw_stream *s, unsigned long long *out);
int gw_park(gw_batch *b, gw_stream *s, const double *times, long long slot, unsigned int seq,
            unsigned int ts_origin, unsigned int b1, unsigned int *meta,
            const unsigned char *silence, int silence_len, unsigned int handle);
int gw_unpark(gw_batch *b, gw_stream *s, double *times, long long *out);
int gw_run_parked(gw_batch *b, double now, unsigned long long ntp, unsigned int ast,
                  double early, int limit, double *next_due, int *n_consumed);
int gw_parked_count(gw_batch *b);
int gw_feed_run(gw_stream *s, const uintptr_t *ptrs, const int *lens, int n,
                unsigned int first_index, int report);
int gw_feed_list(gw_stream *s, uintptr_t list, unsigned int first_index, int report);
long long gw_take_sent(gw_stream *s);
int gw_unfeed(gw_stream *s);
unsigned int *gw_consumed(gw_batch *b);
int gw_red_set(gw_stream *s, unsigned int red_b1, unsigned int pt, double until,
               int distance, int raised, double raised_until, double now);
int gw_red_fill(gw_stream *s, uintptr_t entries, int cap, const unsigned int *ts,
                const unsigned char *data, const int *lens, int n);
void gw_red_take(gw_stream *s, unsigned long long *out);
int gw_dtx_set(gw_stream *s, long long idle, int last_empty, unsigned int marker_b1,
               int hangover, int every, const unsigned char *payload, int len);
void gw_dtx_state(gw_stream *s, long long *out);
void gw_batch_close(gw_batch *b);
int gw_flush(gw_batch *b);
int gw_count(gw_batch *b);
void gw_counters(gw_batch *b, unsigned long long *out);
int gw_copy_slot(gw_batch *b, int i, unsigned char *out, int size);
void gw_discard(gw_batch *b);
"""

_SOURCE = r"""
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/uio.h>

#define GW_SLOT 1536
#define GW_MAX 512
#define GW_HDR 64
#define GW_FEED @FEED_MAX@  /* bytes of a fed speech frame (larger: sent from the tick) */
#define GW_FED @FED_SLOTS@  /* speech frames fed ahead */
#define GW_FED_LOW @FED_LOW@  /* fed frames left when the sender is asked for more */
#define GW_REPORT 0x40000000  /* (in a fed frame's len) report the stream when it is sent */
#define GW_RING 256
#define GW_PARKED_HOW 0xFFu  /* FrameStore's PARKED_SILENCE */
#define GW_DTX_HOW 0xFEu  /* FrameStore's PARKED_DTX */
#define GW_DTX_MAX 8  /* octets of a DTX packet's payload (a TOC octet) */
#define GW_RED_REBUILT 2u  /* FrameStore's RED_REBUILT (+ k) */
#define GW_RED_SILENCE 0x100u  /* FrameStore's SILENCE_PRIMARY (| RED_REBUILT + k) */
#define GW_RED_MAX @RED_MAX@  /* previous frames a RED packet carries at most */
#define GW_RED_BLOCK 1023  /* octets of a RED block at most (RFC 2198's 10-bit length) */

typedef int (*gw_protect_fn)(void *ctx, void *hdr, int *len);

typedef struct gw_stream gw_stream;

/* One packet of a stream's RED history (gw_red_fill): its timestamp and primary (a primary
   longer than a RED block keeps its length only: no RED packet carries it). */
typedef struct {
    unsigned int ts;
    int len;
    unsigned char data[GW_RED_BLOCK];
} gw_red_entry;

/* A speech frame fed ahead: it lies in the sender's bytes object (kept alive by the sender
   until the frame is sent and taken, or taken back). */
typedef struct {
    const unsigned char *p;
    int len;  /* | GW_REPORT */
    unsigned int index;
} gw_fed;

typedef struct {
    int fd;
    int count;
    int n_parked, cap_parked;
    gw_stream **parked;  /* streams whose keep-alive silence C sends (gw_run_parked) */
    double *due;  /* parked[k]'s next slot's time: read each tick without touching the stream */
    unsigned int *consumed;  /* the last run's streams to report (handles) */
    int trailer;
    gw_protect_fn protect;
    unsigned long long calls, sent, failed, skipped, protect_failed, batches;
    unsigned char red_buf[GW_SLOT];  /* a RED payload being made (gw_run_parked) */
    struct mmsghdr msgs[GW_MAX];
    struct iovec iovs[GW_MAX];
    struct sockaddr_storage names[GW_MAX];
    unsigned char arena[GW_MAX * GW_SLOT];
} gw_batch;

struct gw_stream {
    unsigned char header[GW_HDR];
    int header_len;
    int ast_at;
    void *srtp;
    gw_protect_fn protect;  /* called as protect(srtp, packet, &len): the batch's, or its own */
    struct sockaddr_in6 addr;  /* (an IPv4 or IPv6 peer; not sockaddr_storage's 128 bytes) */
    socklen_t addr_len;
    /* what the sender's RTCP reports count, since the last take: packets and payload octets
       staged, and the last packet's RTP timestamp and NTP send time */
    unsigned long long packets, octets, last_ntp;
    unsigned int last_ts;
    /* parked (gw_park): the stream's schedule and state while C sends its silence */
    int parked_at;  /* index in the batch's parked array + 1 (0: not parked) */
    int broken;     /* a packet could not be staged: parked but silent until unparked */
    double origin, period, max_lateness, grid_origin, grid_period;
    long long slot;                 /* the next slot */
    unsigned int seq, ts_origin, b1;
    unsigned int *meta;             /* the FrameStore's ring: 4 words a slot, then 2 */
    const unsigned char *silence;  /* the sender's (pinned by CompiledBatch.park) */
    int silence_len;
    unsigned long long p_slots, p_late, p_rebases, p_frames, p_bytes, p_quiet;
    double p_max_late;
    /* the speech frames fed by the sender (gw_feed_run), oldest first: each goes in the next
       due slot instead of silence */
    unsigned int handle;
    int fed_head, fed_n;
    unsigned int sent_first, sent_n;  /* fed frames sent since the sender last took them */
    /* RFC 2198 RED (gw_red_set; off at gw_park): each packet RED while now < red_until,
       carrying the previous red_distance packets (red_raised while now < red_raised_until)
       from red_hist, the caller's ring of red_cap entries, which C keeps while RED is on */
    int red, red_distance, red_raised, red_cap, red_head, red_n;
    unsigned int red_b1, red_pt;
    double red_until, red_raised_until;
    gw_red_entry *red_hist;
    unsigned long long r_plain, r_red, r_redundant, r_primary;  /* gw_red_take's */
    /* DTX (gw_dtx_set; off at gw_park): an idle slot (no fed frame) carries the silence for
       dtx_hangover slots, then the DTX payload once every dtx_every, else nothing; the first
       speech after idle slots carries marker_b1 */
    int dtx, dtx_hangover, dtx_every, dtx_len, last_empty;
    long long idle;  /* slots since the last speech frame sent */
    unsigned int marker_b1;
    unsigned char dtx_payload[GW_DTX_MAX];
    gw_fed fed[GW_FED];
};

gw_batch *gw_batch_new(int fd, uintptr_t protect, int trailer) {
    gw_batch *b = calloc(1, sizeof(gw_batch));
    if (b == NULL) return NULL;
    b->fd = fd;
    b->trailer = trailer;
    b->protect = (gw_protect_fn)protect;
    for (int i = 0; i < GW_MAX; i++) {
        b->iovs[i].iov_base = b->arena + (size_t)i * GW_SLOT;
        b->msgs[i].msg_hdr.msg_iov = &b->iovs[i];
        b->msgs[i].msg_hdr.msg_iovlen = 1;
        b->msgs[i].msg_hdr.msg_name = &b->names[i];
    }
    return b;
}

void gw_batch_free(gw_batch *b) {
    if (b == NULL) return;
    free(b->parked);
    free(b->consumed);
    free(b->due);
    free(b);
}

int gw_parked_count(gw_batch *b) { return b->n_parked; }

/* The socket is gone: nothing more is staged or sent (its descriptor may be reused). */
void gw_batch_close(gw_batch *b) {
    for (int i = 0; i < b->n_parked; i++) b->parked[i]->parked_at = 0;
    b->n_parked = 0;
    b->count = 0;
    b->fd = -1;
}

void gw_stream_set_addr(gw_stream *s, const unsigned char *addr, int addr_len) {
    if (addr_len < 0 || addr_len > (int)sizeof(s->addr)) addr_len = 0;
    memcpy(&s->addr, addr, addr_len);
    s->addr_len = (socklen_t)addr_len;
}

int gw_stream_init(gw_stream *s, const unsigned char *header, int header_len, int ast_at,
                   uintptr_t srtp, uintptr_t protect, const unsigned char *addr, int addr_len) {
    if (header_len < 12 || header_len > GW_HDR) return -1;
    if (ast_at >= 0 && (ast_at < 12 || ast_at + 3 > header_len)) return -1;
    memcpy(s->header, header, header_len);
    s->header_len = header_len;
    s->ast_at = ast_at;
    s->srtp = (void *)srtp;
    s->protect = (gw_protect_fn)protect;
    gw_stream_set_addr(s, addr, addr_len);
    return 0;
}

/* Stage one packet: header template + payload into the next slot, fields patched, protected in
   place. Returns the number staged (>= 1), or -1 (too long), -2 (batch full: flush first),
   -(1000 + rc) (srtp_protect failed with rc; nothing staged). */
int gw_stage(gw_batch *b, gw_stream *s, unsigned int b1, unsigned int seq, unsigned int ts,
             unsigned int ast, unsigned long long ntp, const unsigned char *payload,
             int payload_len) {
    int n = s->header_len + payload_len;
    if (payload_len < 0 || n + b->trailer > GW_SLOT) return -1;
    if (b->count >= GW_MAX) return -2;
    int i = b->count;
    unsigned char *p = b->arena + (size_t)i * GW_SLOT;
    memcpy(p, s->header, s->header_len);
    p[1] = (unsigned char)b1;
    p[2] = (unsigned char)(seq >> 8); p[3] = (unsigned char)seq;
    p[4] = (unsigned char)(ts >> 24); p[5] = (unsigned char)(ts >> 16);
    p[6] = (unsigned char)(ts >> 8); p[7] = (unsigned char)ts;
    if (s->ast_at >= 0) {
        unsigned char *a = p + s->ast_at;
        a[0] = (unsigned char)(ast >> 16); a[1] = (unsigned char)(ast >> 8);
        a[2] = (unsigned char)ast;
    }
    memcpy(p + s->header_len, payload, payload_len);
    int len = n;
    int rc = (s->protect ? s->protect : b->protect)(s->srtp, p, &len);
    if (rc) { b->protect_failed++; return -(1000 + rc); }
    b->iovs[i].iov_len = (size_t)len;
    memcpy(&b->names[i], &s->addr, s->addr_len);
    b->msgs[i].msg_hdr.msg_namelen = s->addr_len;
    b->count = i + 1;
    s->packets++;
    s->octets += (unsigned long long)payload_len;
    s->last_ts = ts;
    s->last_ntp = ntp;
    return b->count;
}

/* The sender-report counters since the last take (packets, octets, last timestamp, last NTP),
   the first two then zeroed. */
void gw_stream_take_counters(gw_stream *s, unsigned long long *out) {
    out[0] = s->packets; out[1] = s->octets; out[2] = s->last_ts; out[3] = s->last_ntp;
    s->packets = 0; s->octets = 0;
}

int gw_flush(gw_batch *b);

/* Park a stream: from now on gw_run_parked sends its keep-alive silence, one packet a due
   slot, and records each in its FrameStore's ring, until gw_unpark. times: the schedule's
   origin, period, the lateness that re-anchors it, the tick grid's origin and period (how
   early a slot may go is gw_run_parked's). Returns 0, or -1 (silence too long). */
int gw_park(gw_batch *b, gw_stream *s, const double *times, long long slot, unsigned int seq,
            unsigned int ts_origin, unsigned int b1, unsigned int *meta,
            const unsigned char *silence, int silence_len, unsigned int handle) {
    if (s->parked_at || silence_len < 0 || silence_len > GW_FEED || b->fd < 0) return -1;
    if (b->n_parked == b->cap_parked) {
        int cap = b->cap_parked ? b->cap_parked * 2 : 64;
        gw_stream **grown = realloc(b->parked, (size_t)cap * sizeof(gw_stream *));
        if (grown == NULL) return -1;
        b->parked = grown;
        unsigned int *room = realloc(b->consumed, (size_t)cap * sizeof(unsigned int));
        if (room == NULL) return -1;
        b->consumed = room;
        double *due = realloc(b->due, (size_t)cap * sizeof(double));
        if (due == NULL) return -1;
        b->due = due;
        b->cap_parked = cap;
    }
    s->origin = times[0]; s->period = times[1]; s->max_lateness = times[2];
    s->grid_origin = times[3]; s->grid_period = times[4];
    s->slot = slot; s->seq = seq & 0xFFFF; s->ts_origin = ts_origin; s->b1 = b1;
    s->meta = meta;
    s->silence = silence;
    s->silence_len = silence_len;
    s->handle = handle;
    s->p_slots = s->p_late = s->p_rebases = s->p_frames = s->p_bytes = s->p_quiet = 0;
    s->p_max_late = 0.0;
    s->broken = 0;
    s->fed_head = s->fed_n = 0;
    s->sent_n = 0;
    s->red = 0;  /* (gw_red_set after the park: the caller's history is not kept across) */
    s->red_hist = NULL;
    s->red_cap = s->red_head = s->red_n = 0;
    s->r_plain = s->r_red = s->r_redundant = s->r_primary = 0;
    s->dtx = 0;  /* (gw_dtx_set after the park) */
    b->due[b->n_parked] = s->origin + (double)s->slot * s->period;
    b->parked[b->n_parked++] = s;
    s->parked_at = b->n_parked;
    return 0;
}

/* Unpark: times <- origin, max lateness seen; out <- next slot, next seq, slots released, late
   slots, re-anchorings, silence packets sent, their bytes, silence packets since the last fed
   frame sent. Returns 0, -1 if not parked. */
int gw_unpark(gw_batch *b, gw_stream *s, double *times, long long *out) {
    if (!s->parked_at) return -1;
    int i = s->parked_at - 1;
    b->n_parked--;
    if (i != b->n_parked) {
        b->parked[i] = b->parked[b->n_parked];
        b->due[i] = b->due[b->n_parked];
        b->parked[i]->parked_at = i + 1;
    }
    s->parked_at = 0;
    s->fed_head = s->fed_n = 0;  /* (fed frames go back to the sender's queue: gw_unfeed first) */
    times[0] = s->origin; times[1] = s->p_max_late;
    out[0] = s->slot; out[1] = s->seq; out[2] = (long long)s->p_slots;
    out[3] = (long long)s->p_late; out[4] = (long long)s->p_rebases;
    out[5] = (long long)s->p_frames; out[6] = (long long)s->p_bytes;
    out[7] = (long long)s->p_quiet;
    return 0;
}

/* One speech frame into the stream's fed ring: 0 when the ring is full or the frame does not
   fit a slot (nothing written), else 1. */
static int gw_fed_push(gw_stream *s, const unsigned char *p, long len, unsigned int index,
                       int report) {
    if (s->fed_n >= GW_FED || len < 0 || len > GW_FEED) return 0;
    gw_fed *f = &s->fed[(s->fed_head + s->fed_n) % GW_FED];
    f->p = p;
    f->len = (int)len | (report ? GW_REPORT : 0);
    f->index = index;
    s->fed_n++;
    return 1;
}

/* Feed a parked stream n speech frames (their data at ptrs, lengths lens; indexes from
   first_index): each goes in a due slot of its own, in order, before any silence. report: the
   stream is listed in gw_consumed when the first of them is sent (a new owner's first frame).
   The data must stay valid until the frames are sent and taken (gw_take_sent) or taken back
   (gw_unfeed). Returns how many were taken: all, or fewer when the ring is full or a frame is
   too long (the first not taken); -1: not parked. */
int gw_feed_run(gw_stream *s, const uintptr_t *ptrs, const int *lens, int n,
                unsigned int first_index, int report) {
    if (!s->parked_at) return -1;
    int taken = 0;
    while (taken < n && gw_fed_push(s, (const unsigned char *)ptrs[taken], lens[taken],
                                    first_index + (unsigned int)taken, taken == 0 && report))
        taken++;
    return taken;
}

/* gw_feed_run for a Python list of exactly-bytes frames (list: its address, the id() of a
   list the caller keeps, unchanged, until they are sent and taken or taken back): each
   frame's data and length read from its bytes object here, in one call, instead of two
   arrays built in Python a frame at a time. Holds the GIL while it reads them (cffi released
   it). -2, nothing taken: an item is not exactly bytes (the caller feeds a copy instead). */
int gw_feed_list(gw_stream *s, uintptr_t list, unsigned int first_index, int report) {
    if (!s->parked_at) return -1;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *frames = (PyObject *)list;
    Py_ssize_t n = PyList_Size(frames);
    int taken = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_CheckExact(PyList_GetItem(frames, i))) {
            taken = -2;
            break;
        }
    }
    while (taken >= 0 && taken < n) {
        PyObject *frame = PyList_GetItem(frames, taken);
        if (!gw_fed_push(s, (const unsigned char *)PyBytes_AsString(frame),
                         (long)PyBytes_Size(frame), first_index + (unsigned int)taken,
                         taken == 0 && report))
            break;
        taken++;
    }
    PyGILState_Release(gil);
    return taken;
}

/* The fed frames sent since the last take, as (count << 16) | the first one's seq (their seqs
   follow on: no silence goes while a frame is fed); the count then restarts at 0. */
long long gw_take_sent(gw_stream *s) {
    long long out = ((long long)s->sent_n << 16) | (s->sent_first & 0xFFFF);
    s->sent_n = 0;
    return out;
}

/* Take back the fed frames not sent yet (take the sent ones first): how many there were -- the
   sender's newest fed frames, which it queues again. */
int gw_unfeed(gw_stream *s) {
    int n = s->fed_n;
    s->fed_head = s->fed_n = 0;
    return n;
}

unsigned int *gw_consumed(gw_batch *b) { return b->consumed; }

/* RED's state for a parked stream, as RedSender's (webrtc/red_sender.py): on while now <
   until, carrying distance previous packets, or raised while now < raised_until; red_b1: a
   RED packet's second octet (marker | RED's payload type), pt: its blocks' (Opus). Returns 1
   when C's history is to be filled (gw_red_fill) -- RED was not on here at now and is --
   else 0: while it is on, C keeps its history itself. */
int gw_red_set(gw_stream *s, unsigned int red_b1, unsigned int pt, double until,
               int distance, int raised, double raised_until, double now) {
    int was = s->red && s->red_hist != NULL && now < s->red_until;
    s->red = 1;
    s->red_b1 = red_b1 & 0xFF;
    s->red_pt = pt & 0x7F;
    s->red_until = until;
    s->red_distance = distance < 0 ? 0 : distance > GW_RED_MAX ? GW_RED_MAX : distance;
    s->red_raised = raised < 0 ? 0 : raised > GW_RED_MAX ? GW_RED_MAX : raised;
    s->red_raised_until = raised_until;
    return !was && now < until;
}

static void gw_red_push(gw_stream *s, unsigned int ts, const unsigned char *p, int len) {
    gw_red_entry *e;
    if (s->red_n < s->red_cap) {
        e = &s->red_hist[(s->red_head + s->red_n) % s->red_cap];
        s->red_n++;
    } else {
        e = &s->red_hist[s->red_head];
        s->red_head = (s->red_head + 1) % s->red_cap;
    }
    e->ts = ts;
    e->len = len;
    if (len > 0 && len <= GW_RED_BLOCK) memcpy(e->data, p, (size_t)len);
}

/* The history RED packets start from: entries, the caller's array of cap gw_red_entry (kept
   alive until the stream is unparked or filled again), holding the last of the n packets
   given (timestamps ts, primaries laid end to end in data, lengths lens), oldest first: the
   packets sent before the next. Returns 0, -1 (cap out of range). */
int gw_red_fill(gw_stream *s, uintptr_t entries, int cap, const unsigned int *ts,
                const unsigned char *data, const int *lens, int n) {
    if (cap < 1 || cap > GW_RED_MAX || entries == 0) return -1;
    s->red_hist = (gw_red_entry *)entries;
    s->red_cap = cap;
    s->red_head = s->red_n = 0;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (i >= n - cap) gw_red_push(s, ts[i], data + at, lens[i]);
        at += (size_t)lens[i];
    }
    return 0;
}

/* RED's counters since the last take (plain packets, RED packets, redundant octets, primary
   octets), then zeroed. */
void gw_red_take(gw_stream *s, unsigned long long *out) {
    out[0] = s->r_plain; out[1] = s->r_red; out[2] = s->r_redundant; out[3] = s->r_primary;
    s->r_plain = s->r_red = s->r_redundant = s->r_primary = 0;
}

/* DTX for a parked stream, as the batch path's idle slots send it (webrtc/batch_sender.py
   _idle_slot): idle slots since the last speech, whether the last slot sent nothing, the
   second octet of a talkspurt's first packet, the silent slots after speech, one DTX packet
   every so many slots after them, its payload. Returns 0, -1 (out of range). */
int gw_dtx_set(gw_stream *s, long long idle, int last_empty, unsigned int marker_b1,
               int hangover, int every, const unsigned char *payload, int len) {
    if (len < 1 || len > GW_DTX_MAX || hangover < 0 || every < 1 || idle < 0) return -1;
    s->dtx = 1;
    s->idle = idle;
    s->last_empty = last_empty != 0;
    s->marker_b1 = marker_b1 & 0xFF;
    s->dtx_hangover = hangover;
    s->dtx_every = every;
    memcpy(s->dtx_payload, payload, (size_t)len);
    s->dtx_len = len;
    return 0;
}

/* A DTX stream's idle slots since the last speech and whether its last slot sent nothing. */
void gw_dtx_state(gw_stream *s, long long *out) {
    out[0] = s->idle;
    out[1] = s->last_empty;
}

/* A history entry a RED packet at ts carries (rtp/red.py encode's rule: not empty, not
   longer than a block, its offset within 14 bits and not 0). */
static int gw_red_carried(const gw_red_entry *e, unsigned int ts) {
    unsigned int offset = ts - e->ts;
    return e->len > 0 && e->len <= GW_RED_BLOCK && offset > 0 && offset <= 0x3FFF;
}

/* The RED payload of primary p (len octets) at ts after the stream's last k history
   entries, into out, as rtp/red.py encode makes it; its length. With max >= 0, nothing is
   written: the length, or -1 if it is over max. */
static int gw_red_encode(const gw_stream *s, int k, unsigned int ts, const unsigned char *p,
                         int len, unsigned char *out, int max) {
    int size = 1 + len;
    for (int j = s->red_n - k; j < s->red_n; j++) {
        const gw_red_entry *e = &s->red_hist[(s->red_head + j) % s->red_cap];
        if (gw_red_carried(e, ts)) size += 4 + e->len;
    }
    if (max >= 0) return size > max ? -1 : size;
    unsigned char *o = out;
    for (int j = s->red_n - k; j < s->red_n; j++) {
        const gw_red_entry *e = &s->red_hist[(s->red_head + j) % s->red_cap];
        if (!gw_red_carried(e, ts)) continue;
        unsigned int w = ((0x80u | s->red_pt) << 24) | ((ts - e->ts) << 10) | (unsigned)e->len;
        o[0] = (unsigned char)(w >> 24); o[1] = (unsigned char)(w >> 16);
        o[2] = (unsigned char)(w >> 8); o[3] = (unsigned char)w;
        o += 4;
    }
    *o++ = (unsigned char)s->red_pt;
    for (int j = s->red_n - k; j < s->red_n; j++) {
        const gw_red_entry *e = &s->red_hist[(s->red_head + j) % s->red_cap];
        if (!gw_red_carried(e, ts)) continue;
        memcpy(o, e->data, (size_t)e->len);
        o += e->len;
    }
    memcpy(o, p, (size_t)len);
    return (int)(o - out) + len;
}

static double gw_align(const gw_stream *s, double t) {
    double k = ceil((t - s->grid_origin) / s->grid_period - 1e-6);
    return s->grid_origin + k * s->grid_period;
}

/* Every parked stream's due slots (at most limit each), as PacingClock.release_due and the
   batch path's tick: the oldest fed speech frame if there is one (recorded in the ring as seq |
   PLAIN << 16, timestamp, abs-send-time, its index -- the sender writes its refs once it takes
   it: gw_take_sent), else the silence (seq | PARKED << 16, timestamp, abs-send-time, 0); then
   newest seq and the count recorded. A stream is listed in gw_consumed (its handle, once a
   run) when a fed frame marked GW_REPORT went, or its fed frames fell to GW_FED_LOW or to none
   -- the sender then takes what was sent and feeds more. Returns the packets staged;
   *n_consumed <- the streams listed; next_due <- the earliest next slot of any parked stream
   (HUGE_VAL: none). */
int gw_run_parked(gw_batch *b, double now, unsigned long long ntp, unsigned int ast,
                  double early, int limit, double *next_due, int *n_consumed) {
    int staged = 0, consumed = 0;
    double earliest = HUGE_VAL;
    const double *dues = b->due;
    for (int k = 0; k < b->n_parked; k++) {
        if (dues[k] - now > early) {  /* not due: its stream is not touched (cache misses) */
            if (dues[k] < earliest) earliest = dues[k];
            continue;
        }
        gw_stream *s = b->parked[k];
        double origin = s->origin;
        long long first = s->slot, slot = first;
        double due = origin + (double)slot * s->period;
        int report = 0;
        while (slot - first < limit && due - now <= early) {
            double lateness = now - due;
            long long released = slot++;
            s->p_slots++;
            if (lateness > 0.005) {
                s->p_late++;
                if (lateness > s->p_max_late) s->p_max_late = lateness;
            }
            if (lateness > s->max_lateness) {  /* a stall: the next slot a period from now */
                origin = gw_align(s, origin + lateness);
                s->p_rebases++;
            }
            due = origin + (double)slot * s->period;
            if (s->broken) continue;
            unsigned int seq = s->seq;
            unsigned int ts = s->ts_origin + (unsigned int)(released * 960);
            int speech = s->fed_n > 0;
            const gw_fed *f = speech ? &s->fed[s->fed_head] : NULL;
            const unsigned char *primary = speech ? f->p : s->silence;
            int plen = speech ? (f->len & ~GW_REPORT) : s->silence_len;
            unsigned int b1 = s->b1, how = speech ? 0u : GW_PARKED_HOW;
            if (s->dtx) {
                if (speech) {
                    if (s->idle) b1 = s->marker_b1;  /* a talkspurt starts */
                } else if (s->idle >= s->dtx_hangover) {
                    if ((s->idle - s->dtx_hangover) % s->dtx_every) {  /* nothing this slot */
                        s->idle++;
                        s->last_empty = 1;
                        continue;
                    }
                    primary = s->dtx_payload;
                    plen = s->dtx_len;
                    how = GW_DTX_HOW;
                }
            }
            const unsigned char *payload = primary;
            int len = plen, red_k = -1;
            if (s->red && now < s->red_until && s->red_hist != NULL) {
                /* RED (RedSender.wrap's): this primary after the previous k, fewer (the
                   oldest left out) where the datagram would not fit */
                red_k = now < s->red_raised_until ? s->red_raised : s->red_distance;
                if (red_k > s->red_n) red_k = s->red_n;
                int room = GW_SLOT - b->trailer - s->header_len;
                while (red_k > 0 && gw_red_encode(s, red_k, ts, primary, plen, NULL, room) < 0)
                    red_k--;
                len = gw_red_encode(s, red_k, ts, primary, plen, b->red_buf, -1);
                payload = b->red_buf;
                b1 = s->red_b1;
                how = (speech ? 0u : GW_RED_SILENCE) | (GW_RED_REBUILT + (unsigned)red_k);
            }
            int n = gw_stage(b, s, b1, seq, ts, ast, ntp, payload, len);
            if (n == -2) {
                gw_flush(b);
                n = gw_stage(b, s, b1, seq, ts, ast, ntp, payload, len);
            }
            if (n <= 0) { s->broken = 1; continue; }
            staged++;
            if (s->red) {
                s->r_primary += (unsigned long long)plen;
                if (red_k < 0) {
                    s->r_plain++;
                } else {
                    s->r_red++;
                    s->r_redundant += (unsigned long long)(len - plen);
                    gw_red_push(s, ts, primary, plen);
                }
            }
            s->last_empty = 0;
            if (s->dtx) s->idle = speech ? 0 : s->idle + 1;
            unsigned int *m = s->meta + (size_t)(seq & (GW_RING - 1)) * 4;
            m[0] = seq | (how << 16); m[1] = ts;
            m[2] = ast & 0xFFFFFF; m[3] = speech ? f->index : 0;
            s->meta[GW_RING * 4] = seq;
            s->meta[GW_RING * 4 + 1]++;
            s->seq = (seq + 1) & 0xFFFF;
            if (speech) {
                if (f->len & GW_REPORT) report = 1;
                s->fed_head = (s->fed_head + 1) % GW_FED;
                s->fed_n--;
                if (s->fed_n == GW_FED_LOW || s->fed_n == 0) report = 1;
                if (s->sent_n++ == 0) s->sent_first = seq;
                s->p_quiet = 0;
                continue;
            }
            s->p_quiet++;
            s->p_frames++;
            s->p_bytes += (unsigned long long)plen;
        }
        s->origin = origin;
        s->slot = slot;
        b->due[k] = due;
        if (report) b->consumed[consumed++] = s->handle;
        if (due < earliest) earliest = due;
    }
    *next_due = earliest;
    *n_consumed = consumed;
    return staged;
}

/* Send every staged slot (one sendmmsg, more only when the kernel takes part); returns how many
   went. A datagram refused for its destination is skipped; a full buffer drops the rest
   (counted as failed: UDP would drop them anyway). */
int gw_flush(gw_batch *b) {
    int n = b->count, sent = 0;
    b->count = 0;
    if (n == 0 || b->fd < 0) return 0;
    b->batches++;
    while (sent < n) {
        int rc = sendmmsg(b->fd, b->msgs + sent, (unsigned int)(n - sent), 0);
        b->calls++;
        if (rc >= 0) { sent += rc; continue; }
        int err = errno;
        if (err == EINTR) continue;
        if (err == EMSGSIZE || err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH
            || err == EACCES || err == EPERM || err == EADDRNOTAVAIL || err == EAFNOSUPPORT) {
            sent++; b->skipped++; continue;
        }
        break;
    }
    b->failed += (unsigned long long)(n - sent);
    b->sent += (unsigned long long)sent;
    return sent;
}

int gw_count(gw_batch *b) { return b->count; }

void gw_counters(gw_batch *b, unsigned long long *out) {
    out[0] = b->calls; out[1] = b->sent; out[2] = b->failed; out[3] = b->skipped;
    out[4] = b->protect_failed; out[5] = b->batches;
}

/* Tests: the protected bytes of staged slot i (its length; -1 if no such slot). */
int gw_copy_slot(gw_batch *b, int i, unsigned char *out, int size) {
    if (i < 0 || i >= b->count) return -1;
    int len = (int)b->iovs[i].iov_len;
    if (len > size) return -1;
    memcpy(out, b->arena + (size_t)i * GW_SLOT, len);
    return len;
}

void gw_discard(gw_batch *b) { b->count = 0; }
"""

_SOURCE = (_SOURCE.replace("@FEED_MAX@", str(FEED_MAX)).replace("@FED_SLOTS@", str(FED_SLOTS))
           .replace("@FED_LOW@", str(FED_LOW)).replace("@RED_MAX@", str(RED_MAX)))
_DIGEST = hashlib.sha256((_CDEF + _SOURCE).encode()).hexdigest()[:12]
MODULE = f"_gw_sendpath_{_DIGEST}"

_loaded: Any = None
#: where a ``bytes`` object's data starts, from its ``id`` (CPython: the address of the object,
#: which never moves; the data inline after the header); measured at load (``_data_offset``),
#: None where it does not hold, and fed frames are then copied
_DATA_OFFSET: int | None = None
_failure: str | None = None
DISABLED = False  # tests: simulate a machine where the extension cannot be built or loaded


def _import_from(directory: Path) -> Any:
    return import_built(MODULE, directory)


def build(directory: Path | None = None) -> Path:
    """Compile the extension into ``directory`` (default ``cache_dir()``); returns the .so path.
    Raises when there is no compiler (or cffi, or Python's headers)."""
    return compile_module(MODULE, _CDEF, _SOURCE, directory)


def load(build_if_missing: bool = True) -> Any:
    """The compiled module (``.ffi``, ``.lib``), built on first use if missing; None where it
    cannot be (no compiler, not Linux, ``DISABLED``): the reason is in ``failure()``."""
    global _loaded, _failure
    if DISABLED:
        return None
    if _loaded is not None:
        return _loaded
    if _failure is not None:
        return None
    if not sys.platform.startswith("linux"):
        _failure = "not Linux (sendmmsg)"
        return None
    try:
        module = _import_from(cache_dir())
        if module is None and build_if_missing:
            build()
            module = _import_from(cache_dir())
    except Exception as exc:  # no compiler, no headers, a read-only venv: the Python path
        _failure = f"{type(exc).__name__}: {exc}".strip()[:300]
        return None
    if module is None:
        _failure = "not built (python -m gateway.net.sendpath)"
        return None
    global _DATA_OFFSET
    _DATA_OFFSET = _data_offset(module.ffi)
    _loaded = module
    return module


def _data_offset(ffi: Any) -> int | None:
    """``bytes`` data's offset from the object's ``id``, if it is one for every ``bytes``
    (CPython's inline ``ob_sval``: checked on objects of several sizes, as cffi's buffer sees
    them); else None."""
    if sys.implementation.name != "cpython":
        return None
    offsets = set()
    for size in (1, 7, 64, 1275, 5000):
        probe = bytes(range(256)) * (size // 256) + bytes(size % 256)
        offsets.add(int(ffi.cast("uintptr_t", ffi.from_buffer(probe))) - id(probe))
    offset = offsets.pop()
    return offset if not offsets and 0 < offset <= 64 else None


def failure() -> str | None:
    return "disabled" if DISABLED else _failure


class CompiledBatch:
    """One socket's staged, protected datagrams (``gw_batch``), sent by ``flush``."""

    __slots__ = ("__weakref__", "_counters", "_ffi", "_lib", "_n_consumed", "_next_due", "_ptr",
                 "_red", "_rings", "_taken", "flush_c", "ptr", "stage", "stage_c")

    def __init__(self, module: Any, fd: int, protect_address: int, trailer: int) -> None:
        self._ffi, self._lib = module.ffi, module.lib
        ptr = self._lib.gw_batch_new(fd, protect_address, trailer)
        if ptr == self._ffi.NULL:
            raise MemoryError("gw_batch_new")
        self._ptr = self._ffi.gc(ptr, self._lib.gw_batch_free)
        self._counters = self._ffi.new("unsigned long long[6]")
        self._taken = self._ffi.new("unsigned long long[4]")  # (take_counters')
        self._next_due = self._ffi.new("double[1]")
        self._n_consumed = self._ffi.new("int[1]")
        self._rings: dict[Any, Any] = {}  # parked stream -> its pinned ring and silence
        self._red: dict[Any, Any] = {}  # parked stream -> its RED history (gw_red_fill)
        lib, p = self._lib, self._ptr
        stage_c = lib.gw_stage

        def stage(stream: Any, b1: int, seq: int, ts: int, ast: int, payload: bytes,
                  ntp: int = 0) -> int:
            return int(stage_c(p, stream, b1, seq, ts, ast, ntp, payload, len(payload)))

        self.stage = stage
        # For a caller's own closure (aiortc_compat.compiled_rtp_sender): ``stage_c(ptr,
        # stream, b1, seq, ts, ast, ntp, payload, len(payload))`` is ``stage`` without the Python
        # frame between -- one call per packet fewer on the hottest path.
        self.stage_c = stage_c
        self.ptr = p
        self.flush_c = lib.gw_flush

    def new_stream(self, header: bytes, ast_at: int, srtp_address: int, addr: bytes,
                   protect_address: int = 0) -> Any:
        """A ``gw_stream`` (owned by the caller: keep it as long as packets are staged; and
        the state at ``srtp_address`` as long as the stream). Its packets are protected by
        ``protect_address(srtp_address, packet, &len)``; 0: the batch's (libsrtp's)."""
        stream = self._ffi.new("gw_stream *")
        rc = self._lib.gw_stream_init(stream, header, len(header), ast_at, srtp_address,
                                      protect_address, addr, len(addr))
        if rc:
            raise ValueError("header template does not fit the compiled path")
        return stream

    def set_address(self, stream: Any, addr: bytes) -> None:
        self._lib.gw_stream_set_addr(stream, addr, len(addr))

    def stage_raw(self, stream: Any, b1: int, seq: int, ts: int, ast: int,
                  payload: bytes, ntp: int = 0) -> int:
        return int(self._lib.gw_stage(self._ptr, stream, b1, seq, ts, ast, ntp, payload,
                                      len(payload)))

    def take_counters(self, stream: Any) -> tuple[int, int, int, int]:
        """A stream's sender-report counters since the last take: (packets, payload octets,
        the last packet's RTP timestamp, its NTP send time); the first two restart at 0."""
        out = self._taken  # (one array a batch, not one a call: 200 reports a second)
        self._lib.gw_stream_take_counters(stream, out)
        return int(out[0]), int(out[1]), int(out[2]), int(out[3])

    def flush(self) -> int:
        return int(self.flush_c(self._ptr))

    def park(self, stream: Any, times: tuple[float, float, float, float, float],
             slot: int, seq: int, ts_origin: int, b1: int, ring: array, silence: bytes,
             handle: int = 0) -> bool:
        """Hand a stream's keep-alive silence to C (``gw_park``): ``times`` -- its schedule's
        origin, period, re-anchoring lateness, the tick grid's origin and period; ``slot``,
        ``seq``: the next ones; ``ring``: its FrameStore's ring
        (``PARKED_RING_WORDS`` 32-bit words) and ``silence`` (up to ``FEED_MAX`` bytes): both
        kept alive here, where C reads them, until ``unpark``; ``handle``: the caller's name for
        it in ``run_parked``'s list. False: not parked."""
        if ring.itemsize != 4 or len(ring) != PARKED_RING_WORDS or stream in self._rings:
            return False
        # (C's pointers into them: the array's buffer, which stays put while it is not
        # resized -- a ring never is --, and the silence's bytes; no cdata kept per stream)
        ffi = self._ffi
        meta = ffi.cast("unsigned int *", ring.buffer_info()[0])
        if _DATA_OFFSET is not None and type(silence) is bytes:
            pinned: tuple[Any, ...] = (ring, silence)
            data = ffi.cast("const unsigned char *", id(silence) + _DATA_OFFSET)
        else:
            data = ffi.from_buffer("unsigned char[]", silence)
            pinned = (ring, data)
        rc = self._lib.gw_park(self._ptr, stream, list(times), slot, seq & 0xFFFF,
                               ts_origin & 0xFFFFFFFF, b1, meta, data, len(silence), handle)
        if rc:
            return False
        self._rings[stream] = pinned
        return True

    def unpark(self, stream: Any) -> tuple[float, float, list[int]] | None:
        """Take a parked stream back: (its schedule's origin, the most lateness seen, [next
        slot, next seq, slots released, late slots, re-anchorings, silence packets sent, their
        bytes, silence packets since the last fed frame]); None when it was not parked. Fed
        frames not sent are dropped (``unfeed`` them first to keep them)."""
        times = self._ffi.new("double[2]")
        out = self._ffi.new("long long[8]")
        rc = self._lib.gw_unpark(self._ptr, stream, times, out)
        self._rings.pop(stream, None)
        self._red.pop(stream, None)
        if rc:
            return None
        return float(times[0]), float(times[1]), [int(v) for v in out]

    def run_parked(self, now: float, ntp: int, ast: int, early: float, limit: int
                   ) -> tuple[int, float, memoryview | None]:
        """Every parked stream's due slots sent (``gw_run_parked``): (packets staged, the
        earliest next slot -- ``math.inf`` when none is parked --, the handles of the streams
        whose sender is to take the fed frames sent and feed more (``take_sent``,
        ``feed_run``), 32-bit words, None when none is: valid until the next run)."""
        run = self._lib.gw_run_parked(self._ptr, now, ntp, ast, early, limit, self._next_due,
                                      self._n_consumed)
        n = self._n_consumed[0]
        consumed = None
        if n:
            words = self._lib.gw_consumed(self._ptr)
            consumed = memoryview(self._ffi.buffer(words, n * 4)).cast("I")
        return int(run), float(self._next_due[0]), consumed

    def feed_run(self, stream: Any, payloads: list[bytes], first_index: int, report: bool
                 ) -> tuple[int, Any]:
        """Feed a parked stream speech frames (indexes from ``first_index``), each sent in a
        due slot of its own, in order, before any silence: (how many C took -- all, or fewer
        when its ring is full or a frame is longer than ``FEED_MAX`` --, what else the caller
        keeps alive with ``payloads`` until they are taken or taken back). C reads each frame
        where it lies, in its ``bytes``: their lengths and data read from the list in C
        (``gw_feed_list``, one call a run); where that cannot be relied on (not CPython, not a
        list, or a payload that is not exactly ``bytes``), from a copy of them end to end, the
        second item. ``report``: its handle is listed by
        ``run_parked`` when the first is sent. -1 taken: not parked."""
        if _DATA_OFFSET is not None and type(payloads) is list:
            # (C reads each frame's length and data from its bytes: one call, no arrays)
            taken = self._lib.gw_feed_list(stream, id(payloads), first_index & 0xFFFFFFFF,
                                           report)
            if taken != -2:  # (-2: a payload not exactly bytes, nothing taken: a copy)
                return int(taken), None
        lens = [len(p) for p in payloads]
        buf = self._ffi.from_buffer("unsigned char[]", b"".join(payloads))
        base = int(self._ffi.cast("uintptr_t", buf))
        ptrs = list(itertools.accumulate(lens[:-1], initial=base))
        taken = self._lib.gw_feed_run(stream, ptrs, lens, len(payloads),
                                      first_index & 0xFFFFFFFF, report)
        return int(taken), buf

    def take_sent(self, stream: Any) -> tuple[int, int]:
        """The fed frames sent since the last take: (how many, the first one's seq; the
        others' follow on)."""
        packed = self._lib.gw_take_sent(stream)
        return packed >> 16, packed & 0xFFFF

    def unfeed(self, stream: Any) -> int:
        """Take back the fed frames not sent yet (take the sent ones first): how many -- the
        newest fed."""
        return int(self._lib.gw_unfeed(stream))

    def red_set(self, stream: Any, red_b1: int, payload_type: int,
                state: tuple[float, int, int, float], now: float) -> bool:
        """RED for a parked stream (``gw_red_set``): ``state`` -- ``RedSender.state()`` --,
        ``red_b1`` a RED packet's second octet, ``payload_type`` its blocks'. True: RED turned
        on in C at ``now``, whose history is to be given (``red_fill``)."""
        until, distance, raised, raised_until = state
        return bool(self._lib.gw_red_set(stream, red_b1, payload_type, until, distance, raised,
                                         raised_until, now))

    def red_fill(self, stream: Any, capacity: int, history: list[tuple[int, bytes]]) -> bool:
        """A parked stream's RED history (``gw_red_fill``): the packets sent before its next,
        (timestamp, primary) oldest first, of which C keeps the last ``capacity``. False: not
        parked (its socket closed meanwhile), nothing given."""
        if stream not in self._rings:
            return False
        entries = self._red.get(stream)
        if entries is None or len(entries) != capacity:
            entries = self._ffi.new("gw_red_entry[]", capacity)
        data = b"".join(p for _, p in history)
        rc = self._lib.gw_red_fill(stream, self._ffi.cast("uintptr_t", entries), capacity,
                                   [ts & 0xFFFFFFFF for ts, _ in history], data,
                                   [len(p) for _, p in history], len(history))
        if rc:
            raise ValueError(f"RED history of {capacity} entries (1..{RED_MAX})")
        self._red[stream] = entries  # (C's pointer: kept until unparked or filled again)
        return True

    def red_take(self, stream: Any) -> tuple[int, int, int, int]:
        """RED's counters of a parked stream since the last take: (plain packets, RED
        packets, redundant octets, primary octets)."""
        out = self._ffi.new("unsigned long long[4]")
        self._lib.gw_red_take(stream, out)
        return int(out[0]), int(out[1]), int(out[2]), int(out[3])

    def dtx_set(self, stream: Any, idle: int, last_empty: bool, marker_b1: int,
                hangover: int, every: int, payload: bytes) -> bool:
        """DTX for a parked stream (``gw_dtx_set``): its idle slots so far, whether the last
        sent nothing, a talkspurt's first packet's second octet, the silent slots after
        speech, a DTX packet (``payload``, up to 8 octets) every ``every`` slots after them.
        False: out of range, nothing set."""
        return not self._lib.gw_dtx_set(stream, idle, last_empty, marker_b1, hangover, every,
                                         payload, len(payload))

    def dtx_state(self, stream: Any) -> tuple[int, bool]:
        """A DTX stream's idle slots since its last speech and whether its last slot sent
        nothing."""
        out = self._ffi.new("long long[2]")
        self._lib.gw_dtx_state(stream, out)
        return int(out[0]), bool(out[1])

    @property
    def parked(self) -> int:
        return int(self._lib.gw_parked_count(self._ptr))

    def close(self) -> None:
        """The socket is closed: every parked stream dropped, nothing more sent."""
        self._lib.gw_batch_close(self._ptr)
        self._rings.clear()
        self._red.clear()

    def count(self) -> int:
        return int(self._lib.gw_count(self._ptr))

    def counters(self) -> dict[str, int]:
        self._lib.gw_counters(self._ptr, self._counters)
        c = self._counters
        return {"calls": c[0], "sent": c[1], "failed": c[2], "skipped": c[3],
                "protect_failed": c[4], "batches": c[5]}

    def staged(self) -> list[bytes]:
        """Tests: the protected datagrams staged so far."""
        out = self._ffi.new("unsigned char[]", SLOT)
        result = []
        for i in range(self.count()):
            n = self._lib.gw_copy_slot(self._ptr, i, out, SLOT)
            result.append(bytes(self._ffi.buffer(out, n)))
        return result

    def discard(self) -> None:
        self._lib.gw_discard(self._ptr)


def main() -> None:
    """Build the extension now (``make install`` calls this; failure is not an error: the
    gateway then runs the Python path)."""
    logging.basicConfig(level=logging.INFO)
    build_and_say(build, "compiled send path")


if __name__ == "__main__":
    main()
