"""Turns what the jitter buffer hands out each playout period into 20 ms of 24 kHz PCM.

``FRAME`` is decoded; a one-byte Opus packet (no frame data: the gateway's answer to a NACK it
could not serve) decodes through libopus PLC and counts as concealed. ``LOST`` is rebuilt from the
in-band FEC (LBRR) of the next packet when that packet is buffered, FEC is on and the packet
carries LBRR data; otherwise libopus PLC conceals it. ``UNDERRUN`` plays PLC for a few periods
after audio has played (so a stall fades out instead of clicking), silence otherwise.
"""

from __future__ import annotations

import enum

import numpy as np

from gateway.media.opus_codec import FRAME_SAMPLES, OpusFrameDecoder
from gateway.media.opus_lib import opuslib
from gateway.receive.jitter_buffer import PopKind, PopResult

_CELT_ONLY_FIRST_CONFIG = 16  # RFC 6716 §3.1: configs 16..31 are CELT-only (no LBRR)
_SILENCE = np.zeros(FRAME_SAMPLES, dtype=np.int16)


class FrameKind(enum.Enum):
    FRAME = "frame"  # decoded as received
    FEC = "fec"  # lost, rebuilt from the next packet's LBRR data
    PLC = "plc"  # lost, concealed
    CONCEALMENT_PACKET = "concealment_packet"  # the sender had nothing left: concealed
    UNDERRUN = "underrun"  # nothing to play
    INSERTED = "inserted"  # silence added in a pause to let the jitter buffer fill up


def has_lbrr(packet: bytes) -> bool:
    """Whether an Opus packet's first SILK frame carries LBRR (in-band FEC) data.

    Same test as libopus 1.5's ``opus_packet_has_lbrr`` for the one-frame and two-equal-frame
    codes (0 and 1) of 20 ms mono packets: the LBRR flag is the second bit of the first frame.
    Other codes are assumed to carry it unless CELT-only (decode_fec falls back to PLC anyway).
    """
    if len(packet) < 2 or packet[0] >> 3 >= _CELT_ONLY_FIRST_CONFIG:
        return False
    if packet[0] & 0x3 in (0, 1):
        return bool((packet[1] >> 6) & 1)
    return True


class FrameDecoder:
    """One Opus decoder and the policy for lost frames; counts nothing (the caller does)."""

    def __init__(self, fec: bool = True, plc_underrun_frames: int = 5) -> None:
        self.fec = fec
        self._decoder = OpusFrameDecoder()
        self._plc_underrun_frames = plc_underrun_frames
        self._underrun_run = 0
        self._played_audio = False

    def decode(self, result: PopResult) -> tuple[FrameKind, np.ndarray]:
        if result.kind is PopKind.UNDERRUN:
            self._underrun_run += 1
            if self._played_audio and self._underrun_run <= self._plc_underrun_frames:
                return FrameKind.UNDERRUN, self._fit(self._decoder.conceal())
            return FrameKind.UNDERRUN, _SILENCE.copy()
        self._underrun_run = 0
        self._played_audio = True
        if result.kind is PopKind.FRAME:
            payload = result.payload or b""
            if len(payload) <= 1:
                return FrameKind.CONCEALMENT_PACKET, self._fit(self._decoder.conceal())
            try:
                return FrameKind.FRAME, self._fit(self._decoder.decode(payload))
            except opuslib.OpusError:  # a corrupt packet is a lost one
                return FrameKind.PLC, self._fit(self._decoder.conceal())
        fec_payload = result.fec_payload
        if self.fec and fec_payload is not None and has_lbrr(fec_payload):
            try:
                return FrameKind.FEC, self._fit(self._decoder.recover_fec(fec_payload))
            except opuslib.OpusError:
                pass
        return FrameKind.PLC, self._fit(self._decoder.conceal())

    @staticmethod
    def _fit(pcm: np.ndarray) -> np.ndarray:
        """Exactly one 20 ms frame (a corrupt or longer packet must not shift the timeline)."""
        if pcm.size == FRAME_SAMPLES:
            return pcm
        out = np.zeros(FRAME_SAMPLES, dtype=np.int16)
        out[: min(pcm.size, FRAME_SAMPLES)] = pcm[:FRAME_SAMPLES]
        return out
