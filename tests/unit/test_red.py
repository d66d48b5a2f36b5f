import pytest

from gateway.rtp import red


def test_round_trip_keeps_every_block_byte_identical():
    previous = [(1920, b"\x68" + bytes(range(40))), (960, b"\x68" + bytes(range(50, 99)))]
    payload = red.encode(b"\x68new", 111, previous)
    blocks = red.decode(payload)
    assert [(b.timestamp_offset, b.data) for b in blocks] == [*previous, (0, b"\x68new")]
    assert {b.payload_type for b in blocks} == {111}
    assert red.primary(payload) == b"\x68new"
    # the layout of RFC 2198 section 3: F|PT, 14-bit offset, 10-bit length, then F=0|PT
    assert payload[0] == 0x80 | 111 and int.from_bytes(payload[:4], "big") & 0x3FF == 41
    assert payload[8] == 111


def test_no_redundancy_is_one_header_byte():
    assert red.encode(b"\x68abc", 111, []) == bytes([111]) + b"\x68abc"


def test_blocks_that_do_not_fit_are_left_out():
    payload = red.encode(b"p", 111, [(960, b"x" * 2000), (0x4000, b"y"), (960, b"ok")])
    assert [b.data for b in red.decode(payload)] == [b"ok", b"p"]


@pytest.mark.parametrize("bad", [b"", b"\xef", b"\xef\x00\x04", b"\xef\x00\x04\x10\x6f"])
def test_malformed(bad):
    with pytest.raises(red.MalformedRed):
        red.decode(bad)
