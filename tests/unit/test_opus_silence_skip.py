"""A repeated digital-silence Opus packet not decoded again (``pcm_c.OpusCall``, compiled): the
samples, the peaks, what follows (speech again, a loss's concealment, an FEC rebuild) and what
a receive path plays are libopus's own, exactly -- compared with every packet decoded."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gateway.media import pcm_c
from gateway.media.opus_codec import OpusFrameDecoder
from gateway.receive.receive_config import ReceivePathConfig
from gateway.receive.receive_path import ReceivePath
from gateway.testing.mic_track import opus_packets
from tests.opus_streams import packetize, run

SILENT_AT = ((50, 90), (120, 125), (150, 200))  # frames of digital silence


@pytest.fixture
def compiled() -> Iterator[None]:
    if pcm_c.load() is None:
        pytest.skip(f"PCM helpers not built: {pcm_c.failure()}")
    yield


def browser_stream() -> list[bytes]:
    """A client's packets (aiortc's encoder, 48 kHz): speech, silence, speech, ..."""
    t = np.arange(960 * 230) / 48_000
    pcm = 9000 * np.sin(2 * np.pi * 230 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))
    for start, end in SILENT_AT:
        pcm[start * 960 : end * 960] = 0
    pcm16 = pcm.astype(np.int16)
    return opus_packets([pcm16[i * 960 : (i + 1) * 960] for i in range(230)])


def decode_all(decoder: OpusFrameDecoder, stream: list[bytes],
               lost: set[int]) -> list[tuple[np.ndarray, int]]:
    """Every packet in order; a lost one rebuilt from the next packet's FEC (odd) or concealed
    by PLC (even), as the receive path's frame decoder would."""
    out, period = [], decoder.sample_rate // 50
    for i, packet in enumerate(stream):
        if i in lost:
            pcm = (decoder.recover_fec(stream[i + 1], period) if i % 2
                   else decoder.conceal(period))
        else:
            pcm = decoder.decode(packet)
        out.append((pcm, decoder.peak))
    return out


@pytest.mark.parametrize("rate", [16_000, 24_000, 48_000])
def test_skipped_silence_decodes_to_libopus_own_samples(compiled, monkeypatch, rate) -> None:
    stream = browser_stream()
    silent = {len(p) for p in stream[60:85]}
    assert silent == {3}  # (the encoder's digital silence: the packets the skip is for)
    # losses right after a silent run (PLC and FEC from the skipped state) and inside one
    lost = {90, 91, 125, 160, 161}
    ours = OpusFrameDecoder(rate)
    got = decode_all(ours, stream, lost)
    assert ours.skipped >= 60  # most of the silent packets were not decoded again
    monkeypatch.setattr(pcm_c, "DISABLED", True)
    reference = OpusFrameDecoder(rate)
    want = decode_all(reference, stream, lost)
    assert reference.skipped == 0
    for (pcm, peak), (expected, _) in zip(got, want, strict=True):
        np.testing.assert_array_equal(pcm, expected)
        assert peak == pcm_c.peak_of(expected)
    assert any(p.any() for p, _ in want[200:])  # speech came back after the silence


def test_a_silent_packet_after_audio_is_decoded_until_the_state_settles(compiled) -> None:
    """The first silent packets after speech change libopus's state (its history, energies):
    they are decoded; only once a decode left the state as it found it is one skipped."""
    stream = browser_stream()
    decoder = OpusFrameDecoder(16_000)
    for packet in stream[:50]:
        decoder.decode(packet)
    assert decoder.skipped == 0
    for k, packet in enumerate(stream[50:53]):
        decoder.decode(packet)
        assert decoder.skipped == 0, k  # (the state still moved: a full decode each)
    for packet in stream[53:90]:
        decoder.decode(packet)
    assert decoder.skipped > 30


def test_a_receive_path_plays_the_same_with_and_without_the_skip(compiled, monkeypatch) -> None:
    """What the recogniser hears: a talker's periods, a loss after silence included."""
    packets = packetize(browser_stream(), 20, drop={90, 91, 125, 160})
    played = []
    for disabled in (False, True):
        monkeypatch.setattr(pcm_c, "DISABLED", disabled)
        path = ReceivePath(ReceivePathConfig(sample_rate=16_000, record_s=5.0, nack=False))
        run(path, packets, 240)
        played.append(path.played_pcm())
        skipped = path.decoder._decoder.skipped
        assert (skipped > 20) if not disabled else skipped == 0
    np.testing.assert_array_equal(played[0], played[1])
    assert played[0].any()
