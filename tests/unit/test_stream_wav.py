import io
import struct
import wave

import av
import numpy as np

from gateway.http.wav import HEADER_BYTES, MEDIA_TYPE, wav_header

PCM = (np.sin(2 * np.pi * 440 * np.arange(24000) / 24000) * 12000).astype("<i2")


def test_header_layout_has_open_ended_sizes():
    header = wav_header()
    assert len(header) == HEADER_BYTES == 44
    assert header[:4] == b"RIFF" and header[8:16] == b"WAVEfmt "
    assert struct.unpack_from("<I", header, 4)[0] == 0xFFFFFFFF
    assert header[36:40] == b"data" and struct.unpack_from("<I", header, 40)[0] == 0xFFFFFFFF
    fmt = struct.unpack_from("<IHHIIHH", header, 16)
    assert fmt == (16, 1, 1, 24000, 48000, 2, 16)
    assert MEDIA_TYPE == "audio/wav"


def test_python_wave_reads_header_and_pcm():
    with wave.open(io.BytesIO(wav_header() + PCM.tobytes())) as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (
            1,
            2,
            24000,
        )
        data = reader.readframes(10**9)
    assert np.array_equal(np.frombuffer(data, "<i2"), PCM)


def test_pyav_decodes_header_and_pcm():
    container = av.open(io.BytesIO(wav_header() + PCM.tobytes()))
    stream = container.streams.audio[0]
    assert (stream.codec_context.name, stream.rate, stream.channels) == ("pcm_s16le", 24000, 1)
    out = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(stream)])
    assert np.array_equal(out, PCM)


def test_other_rates_and_channels():
    header = wav_header(48000, 2)
    assert struct.unpack_from("<HHIIHH", header, 20) == (1, 2, 48000, 192000, 4, 16)
