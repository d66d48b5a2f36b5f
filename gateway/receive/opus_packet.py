"""What libopus can tell about an Opus packet without decoding it: its duration and its FEC.

``packet_ticks`` is the packet's duration on the 48 kHz RTP clock (RFC 7587 §4.1) whatever the
coded bandwidth: 2.5 to 120 ms, one frame or several (codes 1-3 of RFC 6716 §3.2), what
``opus_packet_get_nb_samples`` answers, read here from the TOC byte (and a code 3 packet's
frame count) with a table: no ctypes call per received packet (tested equal to libopus for
every TOC and frame count). ``has_lbrr`` says whether the packet's first frame carries SILK
LBRR data (in-band FEC for the packet before it), as libopus 1.5's ``opus_packet_has_lbrr``;
libopus 1.3 lacks that call, so it is rebuilt here on ``opus_packet_parse``.
"""

from __future__ import annotations

import ctypes

from gateway.media.opus_codec import RTP_CLOCK_RATE
from gateway.media.opus_lib import opuslib

_CELT_ONLY_FIRST_CONFIG = 16  # RFC 6716 §3.1: configs 16..31 are CELT-only (no LBRR)
_MAX_FRAMES = 48  # RFC 6716 §3.2.5
MAX_PACKET_TICKS = RTP_CLOCK_RATE * 120 // 1000  # 120 ms, the longest Opus packet

_lib = opuslib.api.libopus
_nb_samples = _lib.opus_packet_get_nb_samples
_nb_samples.argtypes = (ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32)
_nb_samples.restype = ctypes.c_int
_samples_per_frame = _lib.opus_packet_get_samples_per_frame
_samples_per_frame.argtypes = (ctypes.c_char_p, ctypes.c_int32)
_samples_per_frame.restype = ctypes.c_int
_parse = _lib.opus_packet_parse
_parse.argtypes = (
    ctypes.c_void_p,
    ctypes.c_int32,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_int16),
    ctypes.c_void_p,
)
_parse.restype = ctypes.c_int


def _frame_ticks(config: int) -> int:
    """48 kHz ticks of one frame of TOC configuration ``config`` (RFC 6716 §3.1, Table 2)."""
    if config >= 16:  # CELT-only: 2.5, 5, 10, 20 ms
        return (RTP_CLOCK_RATE << (config & 3)) // 400
    if config >= 12:  # hybrid: 10, 20 ms
        return RTP_CLOCK_RATE // 50 if config & 1 else RTP_CLOCK_RATE // 100
    size = config & 3  # SILK-only: 10, 20, 40, 60 ms
    return RTP_CLOCK_RATE * 60 // 1000 if size == 3 else (RTP_CLOCK_RATE << size) // 100


_FRAME_TICKS = tuple(_frame_ticks(config) for config in range(32))


def packet_ticks(packet: bytes) -> int | None:
    """Duration in 48 kHz RTP ticks (960 for 20 ms); None when libopus cannot parse it (no
    TOC, a code 3 packet without its frame count, none or more than 120 ms of frames)."""
    if not packet:
        return None
    toc = packet[0]
    code = toc & 3
    if code == 0:
        frames = 1
    elif code != 3:
        frames = 2
    elif len(packet) < 2:
        return None
    else:
        frames = packet[1] & 0x3F
    ticks = frames * _FRAME_TICKS[toc >> 3]
    return ticks if 0 < ticks <= MAX_PACKET_TICKS else None


def libopus_packet_ticks(packet: bytes) -> int | None:
    """``packet_ticks`` as libopus's ``opus_packet_get_nb_samples`` answers it (tests)."""
    if not packet:
        return None
    ticks = int(_nb_samples(packet, len(packet), RTP_CLOCK_RATE))
    return ticks if 0 < ticks <= MAX_PACKET_TICKS else None


def _first_frame(packet: bytes) -> bytes | None:
    """The data of the packet's first frame, or None when it does not parse."""
    buffer = ctypes.create_string_buffer(packet, len(packet))
    frames = (ctypes.c_void_p * _MAX_FRAMES)()
    sizes = (ctypes.c_int16 * _MAX_FRAMES)()
    count = _parse(buffer, len(packet), None, frames, sizes, None)
    if count <= 0 or sizes[0] <= 0 or frames[0] is None:
        return None
    offset = frames[0] - ctypes.addressof(buffer)
    return packet[offset : offset + sizes[0]]


def has_lbrr(packet: bytes) -> bool:
    """Whether an Opus packet's first frame carries LBRR (in-band FEC) data.

    The LBRR flag follows one VAD flag per 20 ms SILK frame (two or three in a 40 or 60 ms
    SILK frame) at the start of the range-coded data: libopus 1.5's test, for any frame count
    code. CELT-only packets never carry it.
    """
    if len(packet) < 2 or packet[0] >> 3 >= _CELT_ONLY_FIRST_CONFIG:
        return False
    frame = _first_frame(packet)
    if not frame:
        return False
    per_frame = int(_samples_per_frame(packet, RTP_CLOCK_RATE))
    silk_frames = max(1, per_frame // (RTP_CLOCK_RATE // 50))
    lbrr = (frame[0] >> (7 - silk_frames)) & 1
    if packet[0] & 0x4:  # stereo: the side channel's flags follow
        lbrr |= (frame[0] >> (6 - 2 * silk_frames)) & 1
    return bool(lbrr)
