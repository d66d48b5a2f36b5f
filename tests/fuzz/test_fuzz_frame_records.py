"""FrameRecordParser (stream/frame_records.py): only MalformedStream, any chunking, round trip."""

from __future__ import annotations

import itertools
import json
import struct

from hypothesis import example, given
from hypothesis import strategies as st

from gateway.http.frame_records import (
    MAX_ERROR_BYTES,
    EndRecord,
    ErrorRecord,
    FrameRecord,
    FrameRecordEncoder,
    FrameRecordParser,
    MalformedStream,
    StreamHeader,
    encode_header,
)
from tests.fuzz.profiles import FUZZ_MARKS, fuzz_settings
from tests.fuzz.strategies import automatic_gc_off, deep, json_value, note_event

pytestmark = FUZZ_MARKS

MAX_HELD = 3 + MAX_ERROR_BYTES  # "at most one incomplete record (< 4099 bytes)"

payload = st.one_of(
    st.binary(min_size=1, max_size=40),
    st.sampled_from([b"\xf8", b"\x68", b"\x00" * 1275]),
    st.integers(1, 1275).map(lambda n: b"\xfc" * n),
)
ending = st.one_of(
    st.just(("end",)),
    st.tuples(st.just("error"), st.text(max_size=20), st.text(max_size=200)),
    st.tuples(st.just("error"), st.text(max_size=5), st.text(min_size=2000, max_size=5000)),
    st.just(("none",)),  # truncated: no end record
)


@st.composite
def stream(draw: st.DrawFn) -> tuple[bytes, list, bool]:
    """(bytes, the records they encode, whether an end/error record closes them)."""
    sequence = draw(st.one_of(st.integers(0, 0xFFFF), st.integers(65_530, 65_535)))
    timestamp = draw(st.one_of(st.integers(0, 0xFFFFFFFF), st.just(0xFFFFFFFF - 960)))
    frames = draw(st.lists(payload, max_size=8))
    enc = FrameRecordEncoder(sequence=sequence, timestamp=timestamp)
    data = enc.header()
    records: list = [StreamHeader()]
    for i, frame in enumerate(frames):
        data += enc.frame(frame)
        records.append(FrameRecord((sequence + i) & 0xFFFF, (timestamp + 960 * i) & 0xFFFFFFFF,
                                   frame))
    end = draw(ending)
    if end[0] == "end":
        data += enc.end()
        records.append(EndRecord())
    elif end[0] == "error":
        data += enc.error(end[1], end[2])
        records.append(parse_all(data)[0][-1])  # the message may have been cut to fit
    return data, records, end[0] != "none"


def parse_all(data: bytes) -> tuple[list, FrameRecordParser]:
    parser = FrameRecordParser()
    return parser.feed(data), parser


def error_record(body: bytes) -> bytes:
    return struct.pack(">BH", 3, len(body) & 0xFFFF) + body


hostile_error_body = st.one_of(
    json_value.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"code": json_value, "message": json_value}).map(
        lambda v: json.dumps(v).encode()
    ),
    st.binary(min_size=1, max_size=64),
    st.integers(900, 4096).map(lambda n: deep(n // 2).encode()),  # RecursionError in json
    st.sampled_from([b'{"code": "x", "message": "\\ud800"}', b"NaN", b"\xff\xfe",
                     b'{"code": "x", "message": "y"}' + b" " * 5000, b"1" * 4096]),
)


@st.composite
def mutated_stream(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(stream())[0])
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "splice", "error", "cut"]))
        k = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            data[k % len(data)] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[k:k] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[k : k + draw(st.integers(1, 8))]
        elif op == "splice":
            data[k:k] = draw(stream())[0][draw(st.integers(0, 20)) :]
        elif op == "error":
            data[k:k] = error_record(draw(hostile_error_body))
        else:
            del data[k:]
    return bytes(data)


any_stream = st.one_of(
    mutated_stream(),
    st.binary(max_size=300),
    st.binary(max_size=300).map(lambda b: encode_header() + b),
    st.lists(st.one_of(hostile_error_body.map(error_record), st.binary(max_size=12)),
             max_size=4).map(lambda parts: encode_header() + b"".join(parts)),
)
cuts = st.lists(st.integers(0, 20_000), max_size=12)


Fed = tuple[list, MalformedStream | None, FrameRecordParser]


def feed(data: bytes, cut_points: list[int]) -> Fed:
    """Feed ``data`` in the chunks the cut points make, then close(): records, the failure."""
    parser, records, last = FrameRecordParser(), [], 0
    bounds = [*sorted(c % (len(data) + 1) for c in cut_points), len(data)]
    try:
        for cut in bounds:
            records += parser.feed(data[last:cut])
            assert parser.buffered < MAX_HELD
            last = cut
    except MalformedStream as exc:
        for again in (lambda: parser.feed(b"\x02"), parser.close):  # once failed, stays failed
            try:
                again()
            except MalformedStream:
                continue
            raise AssertionError("the parser went on after it failed") from exc
        return records, exc, parser
    try:
        parser.close()
    except MalformedStream as exc:
        assert not parser.done
        return records, exc, parser
    assert parser.done
    return records, None, parser


def check_records(records: list) -> None:
    assert not records or isinstance(records[0], StreamHeader)
    assert all(not isinstance(r, StreamHeader) for r in records[1:])
    frames = [r for r in records if isinstance(r, FrameRecord)]
    for a, b in itertools.pairwise(frames):
        assert b.sequence == (a.sequence + 1) & 0xFFFF
    assert all(1 <= len(f.payload) <= 1275 for f in frames)
    ends = [i for i, r in enumerate(records) if isinstance(r, EndRecord | ErrorRecord)]
    assert ends in ([], [len(records) - 1])
    for r in records:
        if isinstance(r, ErrorRecord):
            assert isinstance(r.code, str) and isinstance(r.message, str)


@fuzz_settings()
@given(any_stream, cuts)
@example(encode_header() + error_record(deep(2000).encode()), [])
@example(encode_header() + error_record(b"\xff"), [13])
@example(b"VGO", [1, 2])
@example(encode_header() + b"\x01\x00\x00\x00\x00\x00\x00\x00\x00", [])  # frame length 0
def test_feed_raises_only_malformed_stream_whatever_the_chunking(data, cut_points):
    with automatic_gc_off():  # error records may hold deeply nested JSON
        records, failure, parser = feed(data, cut_points)
        bytewise, bytewise_failure, _bytewise_parser = feed(data, list(range(len(data) + 1)))
    note_event("failed" if failure else "parsed")
    # Any chunking fails exactly when byte-by-byte feeding fails; it sees the same records (a
    # feed that fails returns none of the records completed in that same chunk: a prefix).
    assert (failure is None) == (bytewise_failure is None)
    assert records == bytewise[: len(records)]
    if failure is None:
        assert records == bytewise and parser.done and parser.buffered == 0
    check_records(bytewise)


@fuzz_settings()
@given(stream(), cuts)
def test_round_trip_in_any_chunks(encoded, cut_points):
    data, expected, closed = encoded
    records, failure, parser = feed(data, cut_points)
    if closed:
        assert failure is None and records == expected and parser.done
    else:  # no end record: every record parsed, then close() says truncated
        assert isinstance(failure, MalformedStream) and records == expected
        assert not parser.done
    check_records(records)
