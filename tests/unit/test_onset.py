"""An utterance's lead: cut at the speech onset, never longer than the sample threshold kept."""

from __future__ import annotations

import numpy as np

from gateway.tts import onset
from gateway.tts.piper_voice import LEAD_KEEP_S, SILENCE_THRESHOLD, trim_bounds

RATE = 22050


def tone(ms: float, dbfs: float, freq: float = 300.0) -> np.ndarray:
    t = np.arange(int(RATE * ms / 1000)) / RATE
    amp = 10 ** (dbfs / 20) * 32768 * np.sqrt(2)  # RMS at ``dbfs``
    return np.round(amp * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def murmur(ms: float, dbfs: float = -46.0) -> np.ndarray:
    """Noise at ``dbfs`` RMS: its peaks pass the sample threshold, as Piper's pre-roll does."""
    noise = np.random.default_rng(7).standard_normal(int(RATE * ms / 1000))
    return np.round(noise * 10 ** (dbfs / 20) * 32768).astype(np.int16)


def quiet_then_loud(murmur_ms: float = 30.0) -> np.ndarray:
    """50 ms of silence, a murmur at -46 dBFS (over the sample threshold), then speech."""
    return np.concatenate([np.zeros(int(RATE * 0.05), np.int16), murmur(murmur_ms),
                           tone(200, -15)])


def test_the_murmur_before_the_onset_is_cut():
    pcm = quiet_then_loud(30)
    loud_at = int(RATE * 0.05) + int(RATE * 0.03)  # where the -15 dBFS part begins
    assert np.abs(pcm[int(RATE * 0.05):loud_at]).max() > SILENCE_THRESHOLD
    start, end = trim_bounds(pcm, RATE, LEAD_KEEP_S, None, onset=True)
    window, keep = int(RATE * onset.ONSET_WINDOW_S), int(RATE * onset.ONSET_KEEP_S)
    assert loud_at - keep - window <= start <= loud_at - keep
    assert end == pcm.size
    # without it, the sample threshold keeps the whole murmur
    plain, _ = trim_bounds(pcm, RATE, LEAD_KEEP_S, None)
    assert plain <= int(RATE * 0.05)


def test_a_loud_start_keeps_the_old_lead():
    pcm = np.concatenate([np.zeros(1000, np.int16), tone(200, -15)])
    assert trim_bounds(pcm, RATE, LEAD_KEEP_S, None, onset=True) == \
        trim_bounds(pcm, RATE, LEAD_KEEP_S, None)


def test_nothing_loud_enough_falls_back_to_the_sample_threshold():
    pcm = np.concatenate([np.zeros(1000, np.int16), murmur(300)])
    assert np.abs(pcm).max() > SILENCE_THRESHOLD
    assert trim_bounds(pcm, RATE, LEAD_KEEP_S, None, onset=True) == \
        trim_bounds(pcm, RATE, LEAD_KEEP_S, None)
    assert onset.speech_onset(pcm, RATE) is None


def test_the_search_is_bounded():
    pcm = np.concatenate([murmur(onset.ONSET_SEARCH_S * 1000 + 50), tone(100, -15)])
    assert onset.speech_onset(pcm, RATE) is None


def test_fade_in_starts_from_zero_and_leaves_the_rest():
    pcm = tone(50, -10)
    faded = onset.fade_in(pcm, RATE)
    n = int(RATE * onset.FADE_IN_S)
    assert faded[0] == 0
    assert np.all(np.abs(faded[:n].astype(np.int32)) <= np.abs(pcm[:n].astype(np.int32)))
    assert np.array_equal(faded[n:], pcm[n:])
    assert faded is not pcm and pcm[1] != 0  # the caller's array is not written
