"""The compiled PCM helpers (media/pcm_c.py) against the Python they replace: the same
samples, peaks and sums."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gateway.media import pcm_c
from gateway.media.opus_codec import EncoderSettings, OpusFrameDecoder, OpusFrameEncoder
from gateway.receive.level import is_quiet


@pytest.fixture
def compiled() -> Iterator[None]:
    if pcm_c.load() is None:  # (builds it where missing; no compiler: nothing to compare)
        pytest.skip(f"PCM helpers not built: {pcm_c.failure()}")
    yield


@pytest.fixture
def python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pcm_c, "DISABLED", True)


def packets() -> list[bytes]:
    enc = OpusFrameEncoder(EncoderSettings(bitrate=24000, expected_loss_percent=20))
    t = np.arange(24000) / 24000
    pcm = np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * 9000
    pcm[6000:9000] = 0  # digital silence
    pcm[9000:12000] *= 0.004  # quiet: peak about 36
    frames = pcm.astype("<i2")
    return [enc.encode(frames[i : i + 480].tobytes()) for i in range(0, 24000, 480)]


def run(decoder: OpusFrameDecoder, stream: list[bytes]) -> list[tuple[np.ndarray, int]]:
    out = []
    for i, packet in enumerate(stream):
        if i % 9 == 4:
            pcm = decoder.conceal(240 * (1 + i % 3))
        elif i % 9 == 7:
            pcm = decoder.recover_fec(packet)
        else:
            pcm = decoder.decode(packet)
        out.append((pcm, decoder.peak))
    return out


def test_compiled_decode_gives_the_python_paths_samples_and_their_peak(compiled, monkeypatch):
    stream = packets()
    ours = run(OpusFrameDecoder(), stream)
    monkeypatch.setattr(pcm_c, "DISABLED", True)
    reference = run(OpusFrameDecoder(), stream)
    quiet = 0
    for (pcm, peak), (want, unknown) in zip(ours, reference, strict=True):
        np.testing.assert_array_equal(pcm, want)
        assert unknown == -1  # (the Python path leaves the peak to the caller)
        assert peak == pcm_c.peak_of(want)
        assert (peak <= 64) == is_quiet(want)
        quiet += is_quiet(want)
    assert 0 < quiet < len(stream)  # both kinds of frame were seen


def test_sum_squares_is_exact_either_way(compiled, monkeypatch):
    rng = np.random.default_rng(3)
    frames = [rng.integers(-32768, 32768, size=320, dtype=np.int16),
              np.full(320, -32768, dtype=np.int16), np.zeros(320, dtype=np.int16),
              np.arange(-480, 480, dtype=np.int16)[::3]]  # (not contiguous: the fallback)
    exact = [sum(int(x) * int(x) for x in frame) for frame in frames]
    assert [pcm_c.sum_squares(f) for f in frames] == exact
    monkeypatch.setattr(pcm_c, "DISABLED", True)
    assert [pcm_c.sum_squares(f) for f in frames] == exact


def test_without_the_helpers_the_decoder_runs_the_python_path(python_path):
    decoder = OpusFrameDecoder()
    pcm = decoder.decode(packets()[10])
    assert pcm.size == 480 and decoder.peak == -1
