import io

import av
import numpy as np
import pytest

from gateway.http import transcode
from gateway.http.transcode import (
    FORMATS,
    PcmPassthrough,
    TimeStretch,
    UnsupportedFormat,
    atempo_factors,
    open_encoder,
    open_pipeline,
    supported_formats,
    time_stretch,
)
from gateway.http.wav import wav_header
from tests.helpers import dominant_frequency

PCM = (np.sin(2 * np.pi * 440 * np.arange(24000) / 24000) * 12000).astype("<i2").tobytes()
DEMUXER = {"wav": "wav", "mp3": "mp3", "flac": "flac", "aac": "aac"}


def run(stage, pcm: bytes = PCM, chunk: int = 961) -> list[bytes]:
    """Odd-sized chunks on purpose: samples split across writes."""
    return [stage.write(pcm[i : i + chunk]) for i in range(0, len(pcm), chunk)] + [stage.flush()]


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    if fmt == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768, 24000
    container = av.open(io.BytesIO(data), format=DEMUXER[fmt])
    frames = list(container.decode(audio=0))
    assert frames, f"no audio decoded from {fmt}"
    pcm = np.concatenate([f.to_ndarray().reshape(-1).astype(np.float32) for f in frames])
    if frames[0].format.name.startswith("s16"):
        pcm /= 32768
    return pcm, frames[0].sample_rate


def test_this_build_supports_every_format():
    assert supported_formats() == frozenset(FORMATS)


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "flac", "aac"])
def test_each_format_decodes_back_to_about_the_input(fmt):
    chunks = run(open_encoder(fmt))
    data = b"".join(chunks)
    pcm, rate = decode(data, fmt)
    assert rate == 24000
    # codec priming and padding add at most a frame or two (aac 1024+, mp3 576+ samples)
    assert 1.0 <= pcm.size / rate <= 1.1
    assert abs(dominant_frequency(pcm[2400:22000], rate) - 440) < 2
    assert np.sqrt(np.mean(pcm[2400:22000] ** 2)) > 0.2
    assert sum(map(len, chunks[:-1])) > len(data) / 2, "incremental: most bytes before flush"


def test_containers_are_streamable_as_they_start():
    assert b"".join(run(open_encoder("pcm"))) == PCM
    assert b"".join(run(open_encoder("wav"))) == wav_header() + PCM
    mp3 = b"".join(run(open_encoder("mp3")))
    assert mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0  # a frame sync: no ID3 tag
    assert b"Xing" not in mp3[:2000] and b"Info" not in mp3[:2000]
    assert b"".join(run(open_encoder("flac"))).startswith(b"fLaC")
    aac = b"".join(run(open_encoder("aac")))
    assert aac[0] == 0xFF and aac[1] & 0xF6 == 0xF0  # ADTS sync, layer 0


def test_flac_blocks_come_out_per_20ms_frame():
    enc = open_encoder("flac")
    outs = [enc.write(PCM[i : i + 960]) for i in range(0, len(PCM), 960)]
    assert all(outs), "every 20 ms of PCM yields a FLAC frame at once"


def test_unknown_or_missing_format_names_the_supported_ones():
    with pytest.raises(UnsupportedFormat) as err:
        open_encoder("ogg")
    assert err.value.format == "ogg" and err.value.supported == supported_formats()
    assert "'aac'" in str(err.value) and "'wav'" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_a_build_without_an_encoder_reports_it_missing():
    assert not transcode._has(transcode._Spec("mp3", "no_such_encoder"))
    assert not transcode._has(transcode._Spec("no_such_muxer", "flac"))
    assert transcode._has(transcode._Spec("flac", "flac"))


def test_write_after_flush_is_refused():
    enc = open_encoder("mp3")
    enc.flush()
    assert enc.flush() == b""
    with pytest.raises(RuntimeError):
        enc.write(PCM[:960])


@pytest.mark.parametrize(
    ("speed", "factors"),
    [
        (2.0, [2.0]),
        (0.5, [0.5]),
        (4.0, [2.0, 2.0]),
        (0.25, [0.5, 0.5]),
        (3.0, [2.0, 1.5]),
        (0.3, [0.5, 0.6]),
        (1.25, [1.25]),
    ],
)
def test_atempo_factors_stay_within_half_to_double(speed, factors):
    assert atempo_factors(speed) == pytest.approx(factors)
    assert np.prod(atempo_factors(speed)) == pytest.approx(speed)


def test_speed_one_is_the_identity_without_a_filter():
    stage = time_stretch(1.0)
    assert isinstance(stage, PcmPassthrough)
    assert b"".join(run(stage)) == PCM
    assert open_pipeline("pcm", 1.0).write(PCM) == PCM


@pytest.mark.parametrize(("speed", "seconds"), [(2.0, 0.5), (0.5, 2.0), (4.0, 0.25), (0.25, 4.0)])
def test_speed_scales_the_duration_and_keeps_the_pitch(speed, seconds):
    stage = time_stretch(speed)
    assert isinstance(stage, TimeStretch)
    chunks = run(stage)
    pcm = np.frombuffer(b"".join(chunks), "<i2")
    assert pcm.size / 24000 == pytest.approx(seconds, rel=0.05, abs=0.03)
    assert abs(dominant_frequency(pcm[: pcm.size * 3 // 4], 24000) - 440) < 5
    assert sum(map(len, chunks[:-1])) > 0, "incremental: audio before flush"


@pytest.mark.parametrize("fmt", ["mp3", "flac", "aac"])
def test_speed_then_encoder(fmt):
    pcm, rate = decode(b"".join(run(open_pipeline(fmt, 2.0))), fmt)
    assert 0.48 <= pcm.size / rate <= 0.62


@pytest.mark.parametrize("speed", [0.2, 4.5, 0.0, -1.0])
def test_speed_out_of_range_is_refused(speed):
    with pytest.raises(ValueError):
        time_stretch(speed)
