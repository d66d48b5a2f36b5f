import numpy as np
import pytest

from gateway.media.framer import Framer, SampleAligner


def test_frames_are_exactly_480_samples_and_tail_is_padded():
    framer = Framer(480)
    pcm = np.arange(1000, dtype="<i2")
    frames = framer.push(pcm)
    assert [len(f) for f in frames] == [960, 960]
    assert framer.buffered_samples == 40
    tail = framer.flush()
    assert len(tail) == 1 and len(tail[0]) == 960
    got = np.frombuffer(b"".join(frames + tail), dtype="<i2")
    assert np.array_equal(got[:1000], pcm) and not got[1000:].any()
    assert framer.flush() == []


def test_chunking_does_not_change_the_frames():
    pcm = np.random.default_rng(1).integers(-30000, 30000, 4801).astype("<i2")
    whole = Framer()
    expected = whole.push(pcm) + whole.flush()
    split = Framer()
    got = []
    for i in range(0, pcm.size, 37):
        got += split.push(pcm[i : i + 37])
    assert got + split.flush() == expected


def test_odd_byte_chunks_rejoin_split_samples():
    pcm = np.array([1, -2, 300, -32768, 32767, 5], dtype="<i2")
    data = pcm.tobytes()
    aligner = SampleAligner()
    pieces = [data[:1], data[1:4], data[4:5], data[5:]]
    out = np.concatenate([aligner.push(p) for p in pieces])
    assert np.array_equal(out, pcm) and not aligner.pending_byte
    assert aligner.push(b"\x01").size == 0 and aligner.pending_byte


def test_rejects_nonsense_frame_size():
    with pytest.raises(ValueError):
        Framer(0)
