import fractions
import io
import struct
import time

import av
import numpy as np
import pytest

from gateway.http.ogg_opus import (
    PRE_SKIP,
    OggOpusWriter,
    ogg_crc,
    opus_head,
    opus_tags,
    packet_samples,
)
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from tests.helpers import dominant_frequency

PAGE = struct.Struct("<4sBBqIIIB")


def tone_packets(seconds: float = 1.0, freq: float = 440.0) -> list[bytes]:
    n = int(24000 * seconds)
    pcm = (np.sin(2 * np.pi * freq * np.arange(n) / 24000) * 12000).astype("<i2")
    enc = OpusFrameEncoder(EncoderSettings())
    return [enc.encode(pcm[i : i + FRAME_SAMPLES].tobytes()) for i in range(0, n, FRAME_SAMPLES)]


PACKETS = tone_packets()


def parse_pages(data: bytes) -> list[dict]:
    """Split bytes into whole Ogg pages, checking each CRC; fails on a partial page."""
    pages, pos = [], 0
    while pos < len(data):
        capture, version, flags, granule, serial, seq, crc, n = PAGE.unpack_from(data, pos)
        assert capture == b"OggS" and version == 0
        lacing = data[pos + 27 : pos + 27 + n]
        end = pos + 27 + n + sum(lacing)
        assert end <= len(data), "partial page"
        page = bytearray(data[pos:end])
        page[22:26] = bytes(4)
        assert ogg_crc(bytes(page)) == crc
        pages.append(
            {
                "flags": flags,
                "granule": granule,
                "serial": serial,
                "seq": seq,
                "payload": data[pos + 27 + n : end],
                "bytes": data[pos:end],
            }
        )
        pos = end
    return pages


def crc_reference(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def whole_stream(packets: list[bytes], **kwargs) -> bytes:
    w = OggOpusWriter(**kwargs)
    return w.header() + b"".join(w.write(p) for p in packets) + w.close()


def libavformat_stream(packets: list[bytes]) -> tuple[bytes, list[int]]:
    """The same packets through libavformat's ogg muxer (bit-exact, 20 ms pages); also returns
    how many bytes came out of each ``mux`` call."""
    template = av.open(io.BytesIO(), "w", format="ogg").add_stream("libopus", rate=48000)
    buf = io.BytesIO()
    out = av.open(
        buf,
        "w",
        format="ogg",
        container_options={"page_duration": "20000", "flush_packets": "1", "fflags": "bitexact"},
    )
    stream = out.add_stream_from_template(template)
    stream.codec_context.extradata = opus_head()
    stream.codec_context.layout = "mono"
    stream.time_base = fractions.Fraction(1, 48000)
    out.start_encoding()
    chunks, sizes = [buf.getvalue()], []
    for i, data in enumerate(packets):
        packet = av.Packet(data)
        packet.stream = stream
        packet.pts = packet.dts = i * 960
        packet.duration = 960
        packet.time_base = fractions.Fraction(1, 48000)
        buf.seek(0)
        buf.truncate()
        out.mux(packet)
        chunks.append(buf.getvalue())
        sizes.append(len(chunks[-1]))
    buf.seek(0)
    buf.truncate()
    out.close()
    return b"".join([*chunks, buf.getvalue()]), sizes


def test_crc_matches_the_bitwise_definition():
    for data in (b"", b"\x00", b"OggS", bytes(range(256)) * 3, np.random.bytes(1000)):
        assert ogg_crc(data) == crc_reference(data)


def test_header_pages_carry_opus_head_and_tags():
    pages = parse_pages(OggOpusWriter(serial=7).header())
    assert [p["flags"] for p in pages] == [0x02, 0x00]  # BOS, then plain
    assert [p["granule"] for p in pages] == [0, 0]
    assert [p["seq"] for p in pages] == [0, 1] and {p["serial"] for p in pages} == {7}
    head = pages[0]["payload"]
    magic, version, channels, pre_skip, rate, gain, family = struct.unpack("<8sBBHIhB", head)
    assert (magic, version, channels, pre_skip, rate, gain, family) == (
        b"OpusHead",
        1,
        1,
        312,
        24000,
        0,
        0,
    )
    assert pages[1]["payload"] == opus_tags()
    assert pages[1]["payload"].startswith(b"OpusTags\x0d\x00\x00\x00voice-gateway")


def test_each_write_returns_one_whole_page_at_once():
    w = OggOpusWriter()
    header = w.header()
    times = []
    for n, packet in enumerate(PACKETS, start=1):
        t0 = time.perf_counter()
        chunk = w.write(packet)
        times.append(time.perf_counter() - t0)
        assert chunk.startswith(b"OggS")
        (page,) = parse_pages(chunk)  # the first audio page comes out of the first write
        assert page["payload"] == packet
        assert page["granule"] == w.granule == 960 * n
        assert page["seq"] == n + 1 and page["flags"] == 0
    end = parse_pages(w.close())
    assert [(p["flags"], p["granule"], p["payload"]) for p in end] == [(0x04, 960 * 50, b"")]
    assert len(parse_pages(header)) == 2
    us = np.array(times) * 1e6
    print(f"\nOggOpusWriter.write: median {np.median(us):.1f} us, max {us.max():.1f} us per packet")
    assert np.median(us) < 1000


def test_stream_decodes_to_audible_pcm_of_the_right_duration():
    container = av.open(io.BytesIO(whole_stream(PACKETS)))
    stream = container.streams.audio[0]
    assert stream.codec_context.name == "opus"
    assert stream.codec_context.extradata == opus_head()
    frames = list(container.decode(stream))
    pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    rate = frames[0].sample_rate
    # all 50 packets, less the pre-skip the header announces
    assert pcm.size * 48000 // rate == 50 * 960 - PRE_SKIP
    assert np.sqrt(np.mean(pcm[rate // 10 :] ** 2)) > 0.1  # 12000/32768 peak sine ~ 0.26 rms
    assert abs(dominant_frequency(pcm[rate // 10 :], rate) - 440) < 2


def test_demuxed_packets_are_byte_identical():
    container = av.open(io.BytesIO(whole_stream(PACKETS)))
    packets = [p for p in container.demux(audio=0) if p.size]
    assert [bytes(p) for p in packets] == PACKETS
    assert [p.duration for p in packets] == [960] * len(PACKETS)


def test_pages_equal_libavformat_but_one_frame_sooner():
    """The same bytes as libavformat's muxer (bit-exact mode: serial 0, vendor "ffmpeg"), except
    that libavformat flags EOS on the last audio page, where this writer adds an empty page;
    and libavformat's page for packet n comes out of the mux call for packet n+1."""
    lavf, sizes = libavformat_stream(PACKETS)
    ours = parse_pages(whole_stream(PACKETS, serial=0, vendor="ffmpeg"))
    theirs = parse_pages(lavf)
    assert [p["bytes"] for p in ours[:-2]] == [p["bytes"] for p in theirs[:-1]]
    last_ours, last_theirs = ours[-2], theirs[-1]
    assert last_theirs["flags"] == 0x04 and last_ours["flags"] == 0
    assert last_ours["payload"] == last_theirs["payload"] == PACKETS[-1]
    assert sizes[0] == 0  # nothing out after packet 0 ...
    assert all(n > 0 for n in sizes[1:])  # ... then always the page of the packet before


@pytest.mark.parametrize(
    ("toc", "extra", "samples"),
    [
        (0x78, b"", 960),  # hybrid FB 20 ms, what the gateway's 24 kHz encoder emits
        (0x08, b"", 960),  # SILK NB 20 ms
        (0x18, b"", 2880),  # SILK NB 60 ms
        (0x70, b"", 480),  # hybrid 10 ms
        (0x80, b"", 120),  # CELT 2.5 ms
        (0xF8, b"", 960),  # CELT FB 20 ms
        (0x79, b"", 1920),  # code 1: two frames
        (0x7A, b"", 1920),  # code 2: two frames
        (0x7B, b"\x03", 2880),  # code 3: three frames
    ],
)
def test_packet_samples_from_toc(toc, extra, samples):
    assert packet_samples(bytes([toc]) + extra + b"\x00" * 10) == samples


@pytest.mark.parametrize("bad", [b"", b"\x7b", b"\x7b\x00", b"\x1b\x03"])  # 0 frames; 180 ms
def test_invalid_packets_are_refused(bad):
    w = OggOpusWriter()
    with pytest.raises(ValueError):
        w.write(bad)
    assert w.granule == 0


def test_oversized_packet_is_refused():
    with pytest.raises(ValueError):
        OggOpusWriter().write(b"\x78" * 70_000)


def test_header_is_written_once_and_write_before_header_emits_it():
    w = OggOpusWriter()
    first = parse_pages(w.write(PACKETS[0]))
    assert [p["flags"] for p in first] == [0x02, 0, 0] and first[2]["payload"] == PACKETS[0]
    with pytest.raises(RuntimeError):
        w.header()


def test_close_is_idempotent_and_final():
    w = OggOpusWriter()
    w.header()
    w.write(PACKETS[0])
    assert parse_pages(w.close())[0]["flags"] == 0x04
    assert w.close() == b""
    with pytest.raises(RuntimeError):
        w.write(PACKETS[1])


def test_serials_differ_between_writers():
    assert len({OggOpusWriter().serial for _ in range(8)}) > 1
