"""A duplex session's uplink decoded at the listener's 16 kHz (``ReceivePathConfig.sample_rate``)
instead of decoded at 24 kHz and resampled by libsoxr: what the recogniser hears, the receive
path's periods, concealment and FEC at that rate, and ``Duplex.hear`` taking it as it comes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import (
    ASR_FRAME,
    ASR_RATE,
    UPLINK_RECEIVE,
    DuplexFactory,
    HearingOptions,
)
from gateway.media.opus_codec import EncoderSettings, OpusFrameDecoder
from gateway.media.resample import Resampler
from gateway.receive.frame_decoder import ticks_to_samples
from gateway.receive.receive_config import ReceivePathConfig
from gateway.receive.receive_path import ReceivePath
from gateway.testing.mic_track import opus_packets
from gateway.tts.tone import ToneSynthesizer
from tests.opus_streams import encode, packetize, run, speechy


def browser_packets(pcm24: np.ndarray) -> list[bytes]:
    """What a client's Opus encoder sends for ``pcm24`` (aiortc's: 48 kHz stereo in)."""
    pcm48 = Resampler(24_000, 48_000).push(pcm24.astype(np.int16))
    return opus_packets([pcm48[i * 960 : (i + 1) * 960] for i in range(pcm48.size // 960)])


def band_snr_db(reference: np.ndarray, other: np.ndarray, low: float, high: float) -> float:
    ref, oth = np.fft.rfft(reference), np.fft.rfft(other)
    freqs = np.fft.rfftfreq(reference.size, 1 / ASR_RATE)
    band = (freqs >= low) & (freqs < high)
    error = np.sum(abs(ref[band] - oth[band]) ** 2)
    return float(10 * np.log10(np.sum(abs(ref[band]) ** 2) / error))


@pytest.mark.parametrize("signal", ["noise", "chirp"])
def test_decoded_at_16k_is_what_libsoxr_made_of_24k_below_7khz(signal: str) -> None:
    """The documented equivalent (docs/density.md, "A talker's period, third pass"): the same
    samples in time (no lag) and, up to 7 kHz, within 45 dB SNR of libsoxr's (measured 52-65);
    only libsoxr's transition band (7-8 kHz, where its HQ filter rolls off) differs."""
    n = 24_000 * 2
    if signal == "noise":
        pcm = np.random.default_rng(1).normal(0, 3000, n)
    else:  # a sweep 100 Hz -> 7.9 kHz
        t = np.arange(n) / 24_000
        pcm = 8000 * np.sin(2 * np.pi * (100 * t + 7800 / 4 * t**2))
    packets = browser_packets(pcm)
    at24, at16, soxr = OpusFrameDecoder(24_000), OpusFrameDecoder(16_000), Resampler(24_000,
                                                                                        16_000)
    resampled = np.concatenate([soxr.push(at24.decode(p)) for p in packets]).astype(float)
    direct = np.concatenate([at16.decode(p) for p in packets]).astype(float)
    size = min(resampled.size, direct.size) - 800
    a, b = resampled[400 : 400 + size], direct[400 : 400 + size]
    lag = max(range(-40, 41), key=lambda k: float(np.dot(resampled[400 + k : 400 + k + size], b)))
    assert lag == 0
    assert band_snr_db(b, a, 0, 4000) > 45
    assert band_snr_db(b, a, 4000, 7000) > 45


def test_ticks_to_samples_at_16k() -> None:
    assert ticks_to_samples(960, 16_000) == 320  # 20 ms
    assert ticks_to_samples(480, 16_000) == 160
    assert ticks_to_samples(2880, 16_000) == 960  # 60 ms
    assert ticks_to_samples(0, 16_000) == 320  # a period's when unknown
    assert ticks_to_samples(100, 16_000) == 40  # at least one 2.5 ms step
    assert ticks_to_samples(960 * 10, 16_000) == 1920  # at most 120 ms
    assert ticks_to_samples(960) == 480  # (24 kHz: as before)


def test_a_lossy_stream_plays_the_same_at_16k_as_at_24k() -> None:
    """Periods of 320 samples; the same losses concealed or rebuilt from FEC, the same
    periods played, as the 24 kHz path; and the audio is its rate's decode."""
    payloads = encode(speechy(3.0), 20)
    packets = packetize(payloads, 20, drop={20, 21, 40, 77})
    paths = {rate: ReceivePath(ReceivePathConfig(sample_rate=rate, record_s=4.0, nack=False))
             for rate in (24_000, 16_000)}
    for path in paths.values():
        run(path, packets, 160)
    s24, s16 = paths[24_000].stats, paths[16_000].stats
    assert (s16.played, s16.concealed, s16.recovered_fec, s16.lost) == \
        (s24.played, s24.concealed, s24.recovered_fec, s24.lost)
    assert s16.recovered_fec + s16.concealed >= 3 and s16.lost == 4
    played16 = paths[16_000].played_pcm()
    assert played16.size == 160 * 320 and paths[24_000].played_pcm().size == 160 * 480
    assert paths[16_000].pcm.sample_rate == 16_000 and paths[16_000].pcm.frame_samples == 320
    # where nothing was lost, the period is the packet's own 16 kHz decode
    decoder = OpusFrameDecoder(16_000)
    first = [decoder.decode(p) for p in payloads[:10]]
    start = np.flatnonzero(played16)[0] // 320 * 320
    assert np.array_equal(played16[start : start + 3200], np.concatenate(first))


def test_bad_rate_refused() -> None:
    with pytest.raises(ValueError):
        ReceivePathConfig(sample_rate=22_050)
    with pytest.raises(ValueError):
        OpusFrameDecoder(44_100)


async def test_duplex_hears_a_16k_uplink_frame_by_frame() -> None:
    """An uplink decoded at 16 kHz: every period is one listener frame, heard in its own
    period (libsoxr's blocks brought two every other period), the same count as at 24 kHz."""
    voice = ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000)
    heard = {}
    for rate in (24_000, 16_000):
        conversation = Conversation(EncoderSettings(), encode=False)
        duplex = DuplexFactory(HearingOptions(), voice).make(conversation, uplink_rate=rate)
        assert duplex.uplink_rate == rate
        path = ReceivePath(dataclasses.replace(UPLINK_RECEIVE, sample_rate=rate))
        counts = []
        path.pcm.on_frame(lambda frame, d=duplex, c=counts: (d.hear(frame.pcm, frame.at),
                                                           c.append(d.frames_heard)))
        run(path, packetize(encode(speechy(1.0), 20), 20), 50)
        heard[rate] = counts
        await duplex.close()
        await conversation.close()
    assert heard[16_000] == list(range(1, 51))  # one frame each period, at once
    # (libsoxr still holds its filter's delay and its block: up to 40 ms not yet heard)
    assert 0 <= heard[16_000][-1] - heard[24_000][-1] <= 2
    assert ASR_FRAME == 320


async def test_the_pause_gate_level_is_the_vad_gates_sum_of_the_same_frame(monkeypatch) -> None:
    """The duplex pause gate's level of a frame is the exact mean square, from the sum of
    squares the VAD's gate took of that very frame: one sum a frame, not two."""
    from gateway.conversation import duplex as duplex_module
    from gateway.listen import vad as vad_module
    from gateway.media import pcm_c

    taken: list[np.ndarray] = []

    def counted(frame: np.ndarray) -> int:
        taken.append(frame)
        return pcm_c.sum_squares(frame)

    monkeypatch.setattr(vad_module, "sum_squares", counted)
    monkeypatch.setattr(duplex_module, "sum_squares", counted)
    voice = ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000)
    conversation = Conversation(EncoderSettings(), encode=False)
    duplex = DuplexFactory(HearingOptions(), voice).make(conversation, uplink_rate=ASR_RATE)
    try:
        for frame in (speechy(0.02, amplitude=3000.0)[:ASR_FRAME], np.zeros(ASR_FRAME, np.int16)):
            frame.flags.writeable = False
            taken.clear()
            duplex.hear(frame, 0.0)
            assert len(taken) == 1 and taken[0] is frame
            power = float(np.mean(np.square(frame, dtype=np.float64))) / 32768.0**2
            assert duplex._level_dbfs == pytest.approx(10 * np.log10(power + 1e-12), abs=1e-9)
    finally:
        await duplex.close()
        await conversation.close()
