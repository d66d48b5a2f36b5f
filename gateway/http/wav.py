"""A streamed WAV header: 44 bytes of RIFF/WAVE/fmt/data for PCM whose length is unknown.

Both size fields hold 0xFFFFFFFF, the convention of streamed WAV (OpenAI's ``wav`` speech
responses, ffmpeg writing WAV to a pipe): a reader takes the data to run until the end of the
response. The samples that follow are little-endian signed 16-bit, 24 kHz mono by default.
"""

from __future__ import annotations

import struct

from gateway.media.opus_codec import CHANNELS, SAMPLE_RATE

MEDIA_TYPE = "audio/wav"
UNKNOWN_SIZE = 0xFFFFFFFF
HEADER_BYTES = 44
_PCM = 1  # WAVE_FORMAT_PCM


def wav_header(
    sample_rate: int = SAMPLE_RATE, channels: int = CHANNELS, bits_per_sample: int = 16
) -> bytes:
    """The header for a WAV stream of open-ended length."""
    block_align = channels * bits_per_sample // 8
    fmt = struct.pack(
        "<HHIIHH",
        _PCM,
        channels,
        sample_rate,
        sample_rate * block_align,
        block_align,
        bits_per_sample,
    )
    return b"".join(
        [
            b"RIFF",
            struct.pack("<I", UNKNOWN_SIZE),
            b"WAVE",
            b"fmt ",
            struct.pack("<I", len(fmt)),
            fmt,
            b"data",
            struct.pack("<I", UNKNOWN_SIZE),
        ]
    )
