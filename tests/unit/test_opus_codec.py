import numpy as np
import pytest

from gateway.media.opus_codec import (
    FRAME_BYTES,
    FRAME_SAMPLES,
    EncoderSettings,
    OpusFrameDecoder,
    OpusFrameEncoder,
    silence_packet,
)
from tests.helpers import dominant_frequency


def tone(seconds: float = 1.0, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(24000 * seconds)) / 24000
    return (np.sin(2 * np.pi * freq * t) * 12000).astype("<i2")


def test_fec_is_on_and_frames_round_trip():
    enc, dec = OpusFrameEncoder(), OpusFrameDecoder()
    assert enc.fec_enabled
    pcm = tone()
    packets = [enc.encode(pcm[i : i + FRAME_SAMPLES].tobytes()) for i in range(0, 24000, 480)]
    assert all(0 < len(p) < 400 for p in packets)
    out = np.concatenate([dec.decode(p) for p in packets])
    assert out.size == pcm.size
    assert abs(dominant_frequency(out[2400:], 24000) - 440) < 1


def test_encoding_is_deterministic():
    pcm = tone(0.2)
    runs = [[OpusFrameEncoder()] for _ in range(2)]
    outs = [
        [r[0].encode(pcm[i : i + 480].tobytes()) for i in range(0, pcm.size, 480)] for r in runs
    ]
    assert outs[0] == outs[1]


def test_fec_rebuilds_a_lost_frame_better_than_plc():
    enc = OpusFrameEncoder(EncoderSettings(bitrate=32000, expected_loss_percent=10))
    t = np.arange(24000) / 24000
    speechy = (np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * 12000)
    pcm = speechy.astype("<i2")
    packets = [enc.encode(pcm[i : i + 480].tobytes()) for i in range(0, 24000, 480)]
    lost = 30

    def run(use_fec: bool) -> np.ndarray:
        dec = OpusFrameDecoder()
        frames = []
        for i, p in enumerate(packets):
            if i == lost:
                frames.append(dec.recover_fec(packets[i + 1]) if use_fec else dec.conceal())
            else:
                frames.append(dec.decode(p))
        return np.concatenate(frames)

    clean = np.concatenate([OpusFrameDecoder().decode(p) for p in packets])
    seg = slice(lost * 480, (lost + 1) * 480)

    def err(x):
        return float(np.mean((x[seg].astype(float) - clean[seg]) ** 2))

    assert err(run(True)) < err(run(False))


def test_silence_packet_decodes_to_silence():
    packet = silence_packet()
    assert 0 < len(packet) < 40
    out = OpusFrameDecoder().decode(packet)
    assert out.size == FRAME_SAMPLES and np.abs(out).max() < 50


def test_wrong_frame_size_and_bad_settings_are_refused():
    with pytest.raises(ValueError):
        OpusFrameEncoder().encode(bytes(FRAME_BYTES - 2))
    with pytest.raises(ValueError):
        EncoderSettings(bitrate=1000)


def test_one_encoder_used_from_two_threads_is_serialized():
    # A cancelled batch may still be encoding when the next one starts on another worker thread;
    # unserialized, libopus would corrupt its state or abort the process.
    import threading

    enc = OpusFrameEncoder()
    frames = [tone(0.02, 300 + i).tobytes() for i in range(200)]
    results: list[list[bytes]] = []
    threads = [threading.Thread(target=lambda: results.append(enc.encode_many(frames)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(len(r) == 200 and all(r) for r in results)


def test_direct_decode_equals_opuslib_decode_plc_and_fec():
    """The decoder calls libopus into its own buffer; opuslib's own decode gives the same
    samples for packets, PLC and FEC, in the same sequence of calls."""
    from gateway.media.opus_lib import opuslib

    enc = OpusFrameEncoder(EncoderSettings(bitrate=24000, expected_loss_percent=20))
    t = np.arange(24000) / 24000
    pcm = (np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * 9000)
    packets = [enc.encode(pcm[i : i + 480].astype("<i2").tobytes()) for i in range(0, 24000, 480)]
    ours, ref = OpusFrameDecoder(), opuslib.Decoder(24000, 1)

    def reference(packet: bytes | None, samples: int, fec: bool) -> np.ndarray:
        if packet is None:
            raw = opuslib.api.decoder.decode(ref.decoder_state, None, 0, samples, False,
                                             channels=1)
        else:
            raw = ref.decode(packet, samples, decode_fec=fec)
        return np.frombuffer(raw, dtype="<i2")

    for i, packet in enumerate(packets):
        if i % 7 == 3:
            got, want = ours.conceal(240 * (1 + i % 3)), reference(None, 240 * (1 + i % 3), False)
        elif i % 7 == 5:
            got, want = ours.recover_fec(packet), reference(packet, 480, True)
        else:
            got, want = ours.decode(packet), reference(packet, 2880, False)
        assert got.dtype == np.int16 and got.flags.writeable
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError):
        ours.conceal(2881)
