import numpy as np
import pytest

from gateway.media.resample import Resampler
from tests.helpers import dominant_frequency


@pytest.mark.parametrize("rate", [16000, 22050, 44100, 48000])
def test_streaming_resample_to_24k_keeps_pitch_and_length(rate):
    t = np.arange(rate) / rate
    pcm = (np.sin(2 * np.pi * 1000 * t) * 10000).astype(np.int16)
    resampler = Resampler(rate)
    out = [resampler.push(pcm[i : i + 1234]) for i in range(0, pcm.size, 1234)]
    out.append(resampler.flush())
    y = np.concatenate(out)
    assert abs(y.size - 24000) <= 2
    assert abs(dominant_frequency(y[1000:-1000], 24000) - 1000) < 0.5
    assert y.dtype == np.int16


def test_same_rate_is_passthrough():
    pcm = np.arange(10, dtype=np.int16)
    r = Resampler(24000)
    assert r.push(pcm) is pcm and r.flush().size == 0


def test_bad_rate():
    with pytest.raises(ValueError):
        Resampler(0)


def test_a_rate_change_keeps_the_old_rates_tail():
    import numpy as np

    from gateway.media.resample import RateFollower

    follower = RateFollower()
    half_22k = np.full(11025, 1000, dtype=np.int16)  # 0.5 s at 22050 Hz
    half_24k = np.full(12000, 1000, dtype=np.int16)  # 0.5 s at 24000 Hz (passthrough)
    out = [follower.push(half_22k, 22050), follower.push(half_24k, 24000), follower.flush()]
    total = sum(o.size for o in out)
    assert abs(total - 24000) <= 2  # replacing the converter without a flush lost its delay
    assert follower.push(half_24k, 24000).size == 12000


def test_the_direct_int16_path_gives_resample_chunks_samples():
    """``push`` of int16 frames skips ``resample_chunk``'s wrapper: the same output, frame by
    frame, as soxr's own method on a second stream -- the same sizes, and samples equal up
    to libsoxr's int16 dither (+-2: two soxr streams differ as much, see below); a
    non-contiguous chunk still goes through ``resample_chunk``."""
    import soxr

    def hq() -> soxr.ResampleStream:
        return soxr.ResampleStream(24000, 16000, 1, dtype="int16", quality="HQ")

    rng = np.random.default_rng(7)
    pcm = (rng.standard_normal(24000) * 3000).astype(np.int16)
    ours = Resampler(24000, 16000)
    assert ours._process is not None  # (the installed soxr has the converter this uses)
    reference = hq()
    # (not compared equal: libsoxr dithers its int16 output from a seed of its own, so two
    # streams fed the same chunks usually differ by 1-2 and now and then not at all -- an
    # assertion that they differ failed a CI run)
    for start in range(0, pcm.size, 480):
        chunk = pcm[start : start + 480]
        got, want = ours.push(chunk), reference.resample_chunk(chunk)
        assert got.dtype == np.int16 and got.ndim == 1 and got.size == want.size
        assert np.abs(got.astype(np.int32) - want).max(initial=0) <= 2
    strided = np.repeat(pcm[:960], 2)[::2]
    got, want = ours.push(strided), reference.resample_chunk(pcm[:960])
    assert got.size == want.size and np.abs(got.astype(np.int32) - want).max(initial=0) <= 2
