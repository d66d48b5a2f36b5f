"""Opus at 24 kHz mono, 20 ms frames: the one encoder and decoder wrapper of the gateway.

Encoder settings follow the product promise: VOIP application, in-band FEC on (through the CTL:
opuslib 3.0.1's ``inband_fec`` setter is broken), a non-zero expected packet loss so SILK/hybrid
frames carry LBRR data, bitrate configurable. RTP carries Opus on a 48 kHz clock whatever the
coded bandwidth (RFC 7587 §4.1), so a 20 ms frame advances the RTP timestamp by 960 ticks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache

import numpy as np

from gateway.media.opus_lib import opuslib
from gateway.media.pcm_c import OpusCall

SAMPLE_RATE = 24_000
CHANNELS = 1
FRAME_MS = 20
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000  # 480
FRAME_BYTES = FRAME_SAMPLES * 2
RTP_CLOCK_RATE = 48_000
RTP_TICKS_PER_FRAME = RTP_CLOCK_RATE * FRAME_MS // 1000  # 960
MAX_PACKET_BYTES = 1275  # RFC 6716 §3.2.1: the largest frame
MAX_DECODE_SAMPLES = SAMPLE_RATE * 120 // 1000  # 2880: the most one decode call returns
ENCODER_LOOKAHEAD_SAMPLES = 156  # 6.5 ms at 24 kHz (VOIP/hybrid), for aligning decoded audio


@dataclass(frozen=True, slots=True)
class EncoderSettings:
    bitrate: int = 32_000
    fec: bool = True
    expected_loss_percent: int = 10
    complexity: int = 9

    def __post_init__(self) -> None:
        if not 6_000 <= self.bitrate <= 510_000:
            raise ValueError(f"Opus bitrate must be 6000..510000 bit/s, got {self.bitrate}")
        if not 0 <= self.expected_loss_percent <= 100:
            raise ValueError("expected loss must be 0..100 %")
        if not 0 <= self.complexity <= 10:
            raise ValueError("complexity must be 0..10")


class OpusFrameEncoder:
    """Encodes 480-sample (20 ms) int16 mono frames at 24 kHz into single Opus packets."""

    def __init__(self, settings: EncoderSettings | None = None) -> None:
        self.settings = settings or EncoderSettings()
        enc = opuslib.Encoder(SAMPLE_RATE, CHANNELS, opuslib.APPLICATION_VOIP)
        enc.bitrate = self.settings.bitrate
        enc.complexity = self.settings.complexity
        enc.packet_loss_perc = self.settings.expected_loss_percent
        ctl = opuslib.api.encoder.encoder_ctl
        ctl(enc.encoder_state, opuslib.api.ctl.set_inband_fec, int(self.settings.fec))
        got = ctl(enc.encoder_state, opuslib.api.ctl.get_inband_fec)
        if bool(got) != self.settings.fec:
            raise RuntimeError(f"libopus refused in-band FEC={self.settings.fec} (reads {got})")
        self._enc = enc
        # libopus encoder state is not thread-safe. Encoding runs on worker threads, and a batch
        # whose awaiting task was cancelled (barge-in) still runs to its end: the next batch of
        # the same session must wait for it, not share the state with it.
        self._lock = threading.Lock()

    @property
    def fec_enabled(self) -> bool:
        ctl = opuslib.api.encoder.encoder_ctl
        return bool(ctl(self._enc.encoder_state, opuslib.api.ctl.get_inband_fec))

    def encode(self, frame: bytes) -> bytes:
        """Encode exactly one 20 ms frame (960 bytes of s16le mono) into one Opus packet."""
        if len(frame) != FRAME_BYTES:
            raise ValueError(f"an Opus frame is {FRAME_BYTES} bytes, got {len(frame)}")
        with self._lock:
            return bytes(self._enc.encode(frame, FRAME_SAMPLES))

    def encode_many(self, frames: list[bytes]) -> list[bytes]:
        """Encode consecutive frames in order (one call per batch from a worker thread; libopus
        runs without the GIL)."""
        return [self.encode(frame) for frame in frames]


#: The rates libopus decodes at (RFC 6716 §4: any packet, whatever its coded bandwidth)
DECODE_RATES = (8_000, 12_000, 16_000, 24_000, 48_000)


class OpusFrameDecoder:
    """Decodes mono Opus packets to int16 PCM at ``sample_rate`` (24 kHz unless asked for
    another of ``DECODE_RATES``), with PLC and in-band FEC recovery.

    libopus is called directly into one buffer per decoder, kept for its life
    (``pcm_c.OpusCall``: from C where built, else ctypes): opuslib's ``Decoder.decode``
    allocates a zeroed 120 ms ctypes buffer per call and copies the samples out through a
    list of Python ints (about 30 µs for a 20 ms packet, ten times libopus's own work on a
    quiet one). Same decoder state (opuslib's), same calls, same samples. ``peak``: the last
    decode's ``max |sample|`` (-1: not measured, the Python path).
    """

    def __init__(self, sample_rate: int = SAMPLE_RATE) -> None:
        if sample_rate not in DECODE_RATES:
            raise ValueError(f"libopus decodes at {DECODE_RATES} Hz, not {sample_rate}")
        self.sample_rate = sample_rate
        self._max = sample_rate * 120 // 1000  # the most one decode call returns
        self._dec = opuslib.Decoder(sample_rate, CHANNELS)
        self._samples = np.zeros(self._max, dtype=np.int16)  # libopus writes here
        api = opuslib.api.decoder
        self._call = OpusCall(api.libopus_decode, self._dec.decoder_state, self._samples,
                              api.libopus_get_size(CHANNELS))

    @property
    def peak(self) -> int:
        return self._call.peak

    @property
    def skipped(self) -> int:
        """Repeated digital-silence packets libopus was not asked to decode again (``OpusCall``:
        provably the same zeros and state)."""
        return self._call.skipped

    def _run(self, packet: bytes | None, samples: int, fec: int) -> np.ndarray:
        if not 0 < samples <= self._max:  # (the buffer's size: libopus writes there)
            raise ValueError(f"1..{self._max} samples per decode, not {samples}")
        got = self._call.decode(packet, samples, fec)
        if got < 0:
            raise opuslib.OpusError(got)
        return self._samples[:got].copy()

    def decode(self, packet: bytes) -> np.ndarray:
        """A packet's samples (up to 120 ms): ``_run`` written out, a talker's every period."""
        got = self._call.decode(packet, self._max, 0)
        if got < 0:
            raise opuslib.OpusError(got)
        return self._samples[:got].copy()

    def conceal(self, samples: int = FRAME_SAMPLES) -> np.ndarray:
        """Packet loss concealment for a missing frame (libopus PLC)."""
        return self._run(None, samples, 0)

    def recover_fec(self, next_packet: bytes, samples: int = FRAME_SAMPLES) -> np.ndarray:
        """Rebuild the frame before ``next_packet`` from its LBRR data (PLC when it has none)."""
        return self._run(next_packet, samples, 1)


@cache
def silence_packet(settings: EncoderSettings = EncoderSettings()) -> bytes:
    """The steady-state Opus packet for 20 ms of digital silence, computed once per process.

    Sent between utterances to keep the stream alive without spending an encode per tick.
    """
    enc = OpusFrameEncoder(settings)
    zero = bytes(FRAME_BYTES)
    packet = b""
    for _ in range(10):  # let the encoder settle past its start-up frames
        packet = enc.encode(zero)
    return packet
