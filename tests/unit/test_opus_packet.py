"""Opus packet inspection (duration, in-band FEC) checked against libopus itself."""

import numpy as np
import pytest

from gateway.media.opus_lib import opuslib
from gateway.receive.opus_packet import has_lbrr, packet_ticks
from tests.opus_streams import RATE, encode, speechy

# (packet ms, bitrate): SILK frames of 10/20/40/60 ms, hybrid 10 ms and 2 or 3 x 20 ms frames
SHAPES = [(10, 48_000), (20, 32_000), (40, 24_000), (40, 48_000), (60, 24_000), (60, 48_000),
          (2.5, 64_000), (5, 64_000)]


@pytest.mark.parametrize(("packet_ms", "bitrate"), SHAPES)
def test_duration_on_the_rtp_clock(packet_ms, bitrate):
    payloads = encode(speechy(0.5), packet_ms, bitrate=bitrate)
    assert {packet_ticks(p) for p in payloads} == {round(packet_ms * 48)}


def test_unparseable_packets_have_no_duration():
    assert packet_ticks(b"") is None
    assert packet_ticks(b"\xff\xff\xff") is None  # code 3 with 63 frames: more than 120 ms
    assert packet_ticks(bytes([9 << 3])) == 960  # a TOC byte alone still says 20 ms


def _decoder_after(payloads: list[bytes]) -> opuslib.Decoder:
    decoder = opuslib.Decoder(RATE, 1)
    for p in payloads:
        decoder.decode(p, 2880)
    return decoder


@pytest.mark.parametrize(("packet_ms", "bitrate"), SHAPES[:6])
def test_lbrr_flag_is_what_libopus_decodes_fec_from(packet_ms, bitrate):
    """Rebuilding packet k from packet k + 1 differs from plain PLC exactly when the flag says
    k + 1 carries LBRR (libopus falls back to PLC without it)."""
    payloads = encode(speechy(1.2), packet_ms, bitrate=bitrate)
    samples = round(packet_ms * RATE / 1000)
    flags = []
    for k in range(10, len(payloads) - 1, max(1, len(payloads) // 12)):
        fec = _decoder_after(payloads[:k]).decode(payloads[k + 1], samples, decode_fec=True)
        concealer = _decoder_after(payloads[:k])  # (keep it: its __del__ frees the state)
        plc = opuslib.api.decoder.decode(
            concealer.decoder_state, None, 0, samples, False, channels=1
        )
        differs = not np.array_equal(np.frombuffer(fec, "<i2"), np.frombuffer(plc, "<i2"))
        assert differs == has_lbrr(payloads[k + 1]), (k, payloads[k + 1][:2].hex())
        flags.append(differs)
    assert any(flags)  # the shapes do carry FEC


@pytest.mark.parametrize("packet_ms", [10, 20, 40, 60])
def test_no_lbrr_when_the_encoder_has_fec_off(packet_ms):
    # (the old test assumed FEC in every multi-frame packet: codes 2 and 3 here)
    payloads = encode(speechy(0.6), packet_ms, bitrate=48_000, fec=False)
    assert not any(has_lbrr(p) for p in payloads)


def test_flag_bit_of_one_frame_packets():
    assert not has_lbrr(b"")
    assert not has_lbrr(bytes([16 << 3, 0xFF]))  # CELT-only: never
    assert has_lbrr(bytes([9 << 3, 0x40])) and not has_lbrr(bytes([9 << 3, 0x80]))
    # 60 ms SILK: three VAD flags, then LBRR
    assert has_lbrr(bytes([11 << 3, 0x10])) and not has_lbrr(bytes([11 << 3, 0xE0]))


def test_packet_ticks_from_the_toc_is_libopus_s_for_every_toc_and_count() -> None:
    """The table read of the TOC byte (no ctypes call per packet) answers as libopus's
    ``opus_packet_get_nb_samples``: every TOC, every code 3 frame count, short packets."""
    from gateway.receive.opus_packet import libopus_packet_ticks, packet_ticks

    cases = [b""]
    for toc in range(256):
        cases.append(bytes([toc]))
        cases.append(bytes([toc, 0]) + b"\x01" * 8)
        if toc & 3 == 3:
            cases += [bytes([toc, count]) + b"\x01" * 8 for count in range(256)]
    assert [packet_ticks(c) for c in cases] == [libopus_packet_ticks(c) for c in cases]
    assert packet_ticks(bytes([0b11111_000])) == 960  # CELT FB 20 ms
    assert packet_ticks(bytes([0b01111_011, 6])) == 6 * 960  # hybrid 20 ms x 6: 120 ms
    assert packet_ticks(bytes([0b01111_011, 7])) is None  # 140 ms: refused
