"""Turns what the jitter buffer hands out into PCM (24 kHz unless the receive path asks for
another rate libopus decodes at), each slot at its real duration.

``FRAME`` is decoded as it is: libopus returns the packet's own length (2.5 to 120 ms, one frame
or several). A one-byte Opus packet (no frame data: the gateway's answer to a NACK it could not
serve) decodes through libopus PLC for the slot's duration and counts as concealed. ``LOST`` is
rebuilt from the in-band FEC (LBRR) of the next packet when that packet is buffered, FEC is on
and the packet carries LBRR data; otherwise libopus PLC conceals it, for the duration the jitter
buffer measured in RTP timestamps (48 kHz ticks; two ticks per 24 kHz sample, three per
16 kHz one). ``UNDERRUN``
fills what the caller asks for: PLC for a few periods after audio has played (so a stall or the
start of a pause fades out instead of clicking), silence after that and before any audio.
"""

from __future__ import annotations

import enum

import numpy as np

from gateway.media.opus_codec import FRAME_SAMPLES, RTP_CLOCK_RATE, SAMPLE_RATE, OpusFrameDecoder
from gateway.media.opus_lib import opuslib
from gateway.receive.jitter_buffer import PopKind, PopResult
from gateway.receive.opus_packet import has_lbrr

__all__ = ["FrameDecoder", "FrameKind", "has_lbrr", "ticks_to_samples"]



class FrameKind(enum.Enum):
    FRAME = "frame"  # decoded as received
    FEC = "fec"  # lost, rebuilt from the next packet's LBRR data
    PLC = "plc"  # lost, concealed
    CONCEALMENT_PACKET = "concealment_packet"  # the sender had nothing left: concealed
    UNDERRUN = "underrun"  # nothing to play (a stall, or the sender paused: DTX, mute)
    INSERTED = "inserted"  # silence added in a pause to let the jitter buffer fill up


def ticks_to_samples(ticks: int, sample_rate: int = SAMPLE_RATE) -> int:
    """Samples at ``sample_rate`` in ``ticks`` of the RTP clock, in whole 2.5 ms steps (at
    least one, at most 120 ms: libopus conceals in multiples of 2.5 ms); a period's when
    ``ticks`` is not positive."""
    step = sample_rate // 400
    samples = ticks // (RTP_CLOCK_RATE // sample_rate) if ticks > 0 else sample_rate // 50
    return min(sample_rate * 120 // 1000, max(step, samples - samples % step))


class FrameDecoder:
    """One Opus decoder and the policy for lost frames; counts nothing (the caller does)."""

    def __init__(self, fec: bool = True, plc_underrun_frames: int = 5,
                 sample_rate: int = SAMPLE_RATE) -> None:
        self.fec = fec
        self.sample_rate = sample_rate
        self._decoder = OpusFrameDecoder(sample_rate)
        self._step = sample_rate // 400  # PLC in 2.5 ms steps ...
        self._max = sample_rate * 120 // 1000  # ... of at most 120 ms a call
        self._plc_underrun_frames = plc_underrun_frames
        self._underrun_run = 0
        self._played_audio = False

    @property
    def peak(self) -> int:
        """``max |sample|`` of the last ``FRAME`` returned (its one libopus call), or -1 where
        the decoder does not measure it (the Python path): then measure the pcm."""
        return self._decoder.peak

    def decode(
        self, result: PopResult, underrun_samples: int = FRAME_SAMPLES
    ) -> tuple[FrameKind, np.ndarray]:
        """PCM for one slot; ``underrun_samples``: how much to fill when there is none (the
        receive path passes it: the default is a 24 kHz period)."""
        if result.kind is PopKind.UNDERRUN:
            self._underrun_run += 1
            if self._played_audio and self._underrun_run <= self._plc_underrun_frames:
                return FrameKind.UNDERRUN, self._conceal(underrun_samples)
            return FrameKind.UNDERRUN, np.zeros(underrun_samples, dtype=np.int16)
        self._underrun_run = 0
        self._played_audio = True
        if result.kind is PopKind.FRAME:
            payload = result.payload or b""
            if len(payload) > 1:
                try:
                    pcm = self._decoder.decode(payload)
                except opuslib.OpusError:  # a corrupt packet is a lost one
                    pcm = None
                if pcm is not None and pcm.size:
                    return FrameKind.FRAME, pcm  # (the slot's length only for concealing)
            samples = ticks_to_samples(result.duration, self.sample_rate)
            if len(payload) <= 1:
                return FrameKind.CONCEALMENT_PACKET, self._conceal(samples)
            return FrameKind.PLC, self._conceal(samples)
        samples = ticks_to_samples(result.duration, self.sample_rate)
        fec_payload = result.fec_payload
        if self.fec and fec_payload is not None and has_lbrr(fec_payload):
            try:
                return FrameKind.FEC, self._decoder.recover_fec(fec_payload, samples)
            except opuslib.OpusError:
                pass
        return FrameKind.PLC, self._conceal(samples)

    def _conceal(self, samples: int) -> np.ndarray:
        """Exactly ``samples`` of libopus PLC, asked for in whole 2.5 ms steps of at most 120 ms."""
        out = np.zeros(samples, dtype=np.int16)
        done, step = 0, self._step
        while done < samples:
            ask = min(self._max, -(-(samples - done) // step) * step)
            got = self._decoder.conceal(ask)[: samples - done]
            if not got.size:
                break  # (silence for the rest)
            out[done : done + got.size] = got
            done += got.size
        return out
