import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.http.frame_records import (
    MAX_ERROR_BYTES,
    MEDIA_TYPE,
    EndRecord,
    ErrorRecord,
    FrameRecord,
    FrameRecordEncoder,
    FrameRecordParser,
    MalformedStream,
    StreamHeader,
    encode_error,
    encode_frame,
    encode_header,
)

payloads = st.lists(st.binary(min_size=1, max_size=1275), max_size=12)
errors = st.none() | st.tuples(st.text(max_size=20), st.text(max_size=200))


def build(frames, error=None, *, sequence=0, timestamp=0) -> bytes:
    enc = FrameRecordEncoder(sequence=sequence, timestamp=timestamp)
    out = enc.header() + b"".join(enc.frame(p) for p in frames)
    return out + (enc.error(*error) if error else enc.end())


def expected(frames, error=None, *, sequence=0, timestamp=0) -> list:
    records = [StreamHeader()]
    records += [
        FrameRecord((sequence + i) & 0xFFFF, (timestamp + 960 * i) & 0xFFFFFFFF, p)
        for i, p in enumerate(frames)
    ]
    return [*records, ErrorRecord(*error) if error else EndRecord()]


def feed_in_chunks(data: bytes, cuts: list[int]) -> tuple[FrameRecordParser, list]:
    parser, records, last = FrameRecordParser(), [], 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        records += parser.feed(data[last:cut])
        last = cut
    return parser, records


def test_media_type_and_header_layout():
    assert MEDIA_TYPE == "application/vnd.voice-gateway.opus-frames"
    # version 2: the header ends with the encoder's pre-skip (48 kHz samples, as in OpusHead)
    assert encode_header() == b"VGOF\x02" + struct.pack(">IHBH", 24000, 20, 1, 312)
    assert len(encode_header()) == 14
    with pytest.raises(ValueError):  # what is written always says its pre-skip
        encode_header(StreamHeader(version=1, pre_skip=None))


def test_the_header_carries_the_ogg_streams_pre_skip():
    from gateway.http.ogg_opus import PRE_SKIP, opus_head

    (header,) = FrameRecordParser().feed(encode_header())
    assert header.pre_skip == PRE_SKIP == 312
    assert struct.unpack_from("<H", opus_head(), 10)[0] == header.pre_skip


@pytest.mark.parametrize("cut", [3, 5, 12, 13])
def test_version_1_streams_still_parse_without_a_pre_skip(cut):
    v1 = b"VGOF\x01" + struct.pack(">IHB", 24000, 20, 1) + encode_frame(5, 960, b"\x08a")
    parser = FrameRecordParser()
    records = parser.feed(v1[:cut]) + parser.feed(v1[cut:] + b"\x02")
    assert records == [StreamHeader(version=1, pre_skip=None), FrameRecord(5, 960, b"\x08a"),
                       EndRecord()]


def test_frame_record_layout_is_big_endian():
    record = encode_frame(0x1234, 0x89ABCDEF, b"\x78\x01\x02")
    assert record == b"\x01\x12\x34\x89\xab\xcd\xef\x00\x03\x78\x01\x02"


def test_encoder_numbers_frames_like_rtp():
    data = build([b"a", b"b", b"c"], sequence=65535, timestamp=2**32 - 960)
    records = FrameRecordParser().feed(data)
    assert records[1:4] == [
        FrameRecord(65535, 2**32 - 960, b"a"),
        FrameRecord(0, 0, b"b"),
        FrameRecord(1, 960, b"c"),
    ]


@settings(max_examples=100, deadline=None)
@given(frames=payloads, split=st.integers(0, 40), sequence=st.integers(0, 0xFFFF),
       timestamp=st.integers(0, 0xFFFFFFFF))
def test_frames_at_once_are_the_same_bytes_as_one_by_one(frames, split, sequence, timestamp):
    one, many = (FrameRecordEncoder(sequence=sequence, timestamp=timestamp) for _ in range(2))
    expected = b"".join(one.frame(p) for p in frames) + one.end()
    assert many.frames(frames[:split]) + many.frames(frames[split:]) + many.end() == expected


def test_frames_at_once_validate_before_numbering():
    encoder = FrameRecordEncoder()
    with pytest.raises(ValueError):
        encoder.frames([b"ok", b""])
    assert FrameRecordParser().feed(encoder.frames([b"a"]))[1] == FrameRecord(0, 0, b"a")


@settings(max_examples=200, deadline=None)
@given(
    frames=payloads,
    error=errors,
    sequence=st.integers(0, 0xFFFF),
    timestamp=st.integers(0, 0xFFFFFFFF),
    cuts=st.lists(st.integers(0, 20_000), max_size=30),
)
def test_round_trip_with_any_chunking(frames, error, sequence, timestamp, cuts):
    data = build(frames, error, sequence=sequence, timestamp=timestamp)
    parser, records = feed_in_chunks(data, cuts)
    assert records == expected(frames, error, sequence=sequence, timestamp=timestamp)
    assert parser.done and parser.buffered == 0
    parser.close()


@settings(max_examples=100, deadline=None)
@given(frames=payloads, error=errors, data=st.data())
def test_every_truncation_is_reported_at_close(frames, error, data):
    stream = build(frames, error)
    cut = data.draw(st.integers(0, len(stream) - 1))
    parser = FrameRecordParser()
    parser.feed(stream[:cut])
    assert not parser.done
    with pytest.raises(MalformedStream, match="truncated"):
        parser.close()


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=300), prefix=st.booleans(), cuts=st.lists(st.integers()))
def test_arbitrary_bytes_raise_only_malformed_stream(garbage, prefix, cuts):
    data = (encode_header() if prefix else b"") + garbage
    try:
        parser, _ = feed_in_chunks(data, cuts)
        parser.close()
    except MalformedStream:
        pass


def test_buffer_stays_bounded_by_one_record():
    parser = FrameRecordParser()
    parser.feed(encode_header())
    big = encode_frame(0, 0, b"x" * 1275)
    for i in range(1, len(big)):
        parser.feed(big[i - 1 : i])
        assert parser.buffered == i
    assert parser.feed(big[-1:]) == [FrameRecord(0, 0, b"x" * 1275)]
    assert parser.buffered == 0


def test_error_record_carries_code_and_message():
    data = build([b"\x78"], ("tts_failed", "the voice backend stopped: ünïcode ✓"))
    records = FrameRecordParser().feed(data)
    assert records[-1] == ErrorRecord("tts_failed", "the voice backend stopped: ünïcode ✓")
    body = data[data.rindex(b"\x03") + 3 :]
    assert json.loads(body) == {"code": "tts_failed", "message": records[-1].message}


def test_long_error_message_is_cut_to_fit():
    record = encode_error("x", "é" * 10_000)
    assert len(record) <= 3 + MAX_ERROR_BYTES
    parser = FrameRecordParser()
    (_, error) = parser.feed(encode_header() + record)
    assert error.code == "x" and error.message == "é" * len(error.message)
    with pytest.raises(ValueError):
        encode_error("c" * 5000, "")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"RIFF" + bytes(8), "magic"),
        (b"VGOF\x03" + struct.pack(">IHBH", 24000, 20, 1, 312), "version"),
        (b"VGOF\x00" + struct.pack(">IHB", 24000, 20, 1), "version"),
        (b"VGOF\x02" + struct.pack(">IHBH", 24000, 20, 3, 312), "header"),
        (b"VGOF\x01" + struct.pack(">IHB", 24000, 20, 3), "header"),
        (b"VGOF\x02" + struct.pack(">IHBH", 0, 20, 1, 312), "header"),
        (encode_header() + b"\x07", "unknown record type"),
        (encode_header() + b"\x01\x00\x00\x00\x00\x00\x00\x00\x00", "length"),  # empty frame
        (encode_header() + b"\x01\x00\x00\x00\x00\x00\x00\x05\x00", "length"),  # 1280 > 1275
        (encode_header() + encode_frame(0, 0, b"a") + encode_frame(2, 960, b"b"), "due"),
        (encode_header() + b"\x03\x00\x00", "error record length"),
        (encode_header() + b"\x03\x00\x02\xff\xfe", "UTF-8 JSON"),
        (encode_header() + b"\x03\x00\x02[]", "code"),
        (encode_header() + b'\x03\x00\x0b{"code": 1}', "code"),
        (encode_header() + b"\x03\x04\x00" + b"[" * 1024, "JSON"),
        (encode_header() + b"\x02\x02", "after"),
    ],
)
def test_malformed_streams(data, match):
    parser = FrameRecordParser()
    with pytest.raises(MalformedStream, match=match):
        parser.feed(data)
    with pytest.raises(MalformedStream, match="already failed"):  # and it stays failed
        parser.feed(b"")


def test_bytes_after_end_in_a_later_feed():
    parser = FrameRecordParser()
    parser.feed(build([b"a"]))
    assert parser.feed(b"") == []
    with pytest.raises(MalformedStream, match="after"):
        parser.feed(b"\x01")


def test_malformed_stream_is_a_value_error():
    assert issubclass(MalformedStream, ValueError)


def test_encoder_refuses_bad_frames_and_writes_after_the_end():
    enc = FrameRecordEncoder()
    with pytest.raises(ValueError):
        enc.frame(b"")
    with pytest.raises(ValueError):
        enc.frame(b"x" * 1276)
    first = enc.frame(b"a")
    assert first.startswith(encode_header())  # the header comes first when never taken
    with pytest.raises(RuntimeError):
        enc.header()
    enc.end()
    with pytest.raises(RuntimeError):
        enc.frame(b"b")
    with pytest.raises(RuntimeError):
        enc.error("c", "m")
