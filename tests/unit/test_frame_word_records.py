"""Word records in the framed stream: encoded, parsed, refused when malformed, and written by
the formatter before the frame in which each word starts."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gateway.http import frame_records as fr
from gateway.http.formatters import FrameRecords
from gateway.text.timing import WordTiming


def test_a_word_record_round_trips_in_any_chunking():
    stream = (fr.encode_header() + fr.encode_word("naïve", 12.5, 300.0)
              + fr.encode_frame(0, 0, b"\xf8") + fr.encode_end())
    for cut in range(1, len(stream)):
        parser = fr.FrameRecordParser()
        records = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        assert records[1] == fr.WordRecord("naïve", 12.5, 300.0)
        assert isinstance(records[-1], fr.EndRecord)


@pytest.mark.parametrize("body", [b"[1]", b'{"word": 1, "start_ms": 0, "end_ms": 1}',
                                  b'{"word": "a", "start_ms": true, "end_ms": 1}', b"\xff"])
def test_a_malformed_word_record_is_refused(body):
    parser = fr.FrameRecordParser()
    with pytest.raises(fr.MalformedStream, match="word record"):
        parser.feed(fr.encode_header() + bytes([fr.TYPE_WORD]) + len(body).to_bytes(2, "big")
                    + body)


def test_a_long_word_is_cut_to_fit():
    record = fr.encode_word("x" * 10_000, 0, 1)
    parsed = fr.FrameRecordParser().feed(fr.encode_header() + record)[1]
    assert isinstance(parsed, fr.WordRecord) and 4000 < len(parsed.word) < 4096


@dataclass
class _Utterance:
    words: list[WordTiming] = field(default_factory=list)


def test_the_formatter_writes_each_word_before_the_frame_it_starts_in():
    out = FrameRecords(words=True)
    utterance = _Utterance([WordTiming("one", 0, 30), WordTiming("two", 45, 70),
                            WordTiming("late", 500, 600)])
    out.bind(utterance)
    data = out.start() + out.frames([b"\xf8"] * 3) + out.end()
    kinds = [type(r).__name__ for r in fr.FrameRecordParser().feed(data)[1:]]
    assert kinds == ["WordRecord", "FrameRecord", "FrameRecord", "WordRecord", "FrameRecord",
                     "WordRecord", "EndRecord"]  # "late" plays after the last frame: at the end


def test_without_words_asked_for_none_are_written():
    out = FrameRecords()
    out.bind(_Utterance([WordTiming("one", 0, 30)]))
    data = out.start() + out.frames([b"\xf8"]) + out.end()
    assert not any(isinstance(r, fr.WordRecord) for r in fr.FrameRecordParser().feed(data))
