"""``python -m gateway.client --http`` against an in-process gateway: the framed stream (and the
OpenAI route's Ogg Opus) played through the same receive path as WebRTC, the WAV as it played,
the same stats and the first-audio latency."""

from __future__ import annotations

import struct
import wave

import numpy as np
import pytest

from gateway.client import __main__ as cli
from gateway.client.ogg_reader import MalformedOgg, OggOpusReader
from gateway.http.ogg_opus import OggOpusWriter, ogg_crc
from gateway.media.opus_codec import EncoderSettings, OpusFrameEncoder
from tests.helpers import dominant_frequency

pytestmark = pytest.mark.timeout(60)


def read_wav(path) -> np.ndarray:
    with wave.open(str(path), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24_000, 1, 2)
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")


async def run_cli(gateway, tmp_path, *options: str) -> tuple[dict, np.ndarray]:
    out = tmp_path / "reply.wav"
    args = cli.build_parser().parse_args(
        ["--url", gateway.url, "--text", "A tone please.", "--voice", "tone", "--out", str(out),
         "--http", *options]
    )
    stats = await cli.run(args)
    return stats, read_wav(out)


def check_tone(stats: dict, pcm: np.ndarray, frames: int) -> None:
    assert pcm.size == round(stats["audio_s"] * 24_000)
    loud = np.flatnonzero(np.abs(pcm) > 2000)
    # the 1 s tone, whole: from its first loud sample to its last
    assert 0.95 < (loud[-1] - loud[0]) / 24_000 < 1.05
    assert dominant_frequency(pcm[loud[0] : loud[0] + 12_000], 24_000) == pytest.approx(440, abs=2)
    receive = stats["receive"]
    assert receive["lost"] == 0 and receive["concealed"] == 0 and receive["late"] == 0
    assert receive["played"] >= frames
    # the end of the reply, and at most two stalls of a busy machine: an ``asap`` reply is
    # encoded as fast as the worker pool goes, and on a CI machine running four test processes on
    # two cores it once came 2 (0 lost, concealed or late) -- a speed, not this test's behaviour
    assert receive["underruns"] <= 3, receive


@pytest.mark.parametrize("pace", ["asap", "live"])
async def test_framed_stream_plays_through_the_receive_path(gateway, tmp_path, pace):
    stats, pcm = await run_cli(gateway, tmp_path, "--pace", pace)
    assert stats["transport"] == "http" and stats["format"] == "frames" and stats["ended"]
    assert stats["frames"] >= 50 and stats["stream_error"] is None
    check_tone(stats, pcm, stats["frames"])
    # request -> first audible frame: arrived, then played one jitter-buffer target later
    assert 0 < stats["response_ms"] <= stats["first_frame_ms"] <= stats["first_audio_ms"]
    assert stats["first_audio_ms"] < stats["first_played_ms"] < stats["first_audio_ms"] + 200
    assert stats["first_played_ms"] < 1000


async def test_ogg_opus_plays_through_the_receive_path(gateway, tmp_path):
    stats, pcm = await run_cli(gateway, tmp_path, "--http-format", "ogg")
    assert stats["format"] == "ogg" and stats["ended"] and stats["frames"] >= 50
    check_tone(stats, pcm, stats["frames"])
    assert stats["first_audio_ms"] < stats["first_played_ms"] < stats["first_audio_ms"] + 200


async def test_an_unknown_voice_is_an_error(gateway, tmp_path):
    args = cli.build_parser().parse_args(
        ["--url", gateway.url, "--text", "hi", "--voice", "nobody", "--http",
         "--out", str(tmp_path / "x.wav")]
    )
    with pytest.raises(cli.GatewayError, match="HTTP 4"):
        await cli.run(args)


def page(lacing: list[int], body: bytes, serial: int, sequence: int, flags: int = 0) -> bytes:
    header = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, 0, serial, sequence, 0, len(lacing))
    data = bytearray(header + bytes(lacing) + body)
    struct.pack_into("<I", data, 22, ogg_crc(bytes(data)))
    return bytes(data)


def test_ogg_reader_takes_any_chunking_and_packets_across_pages():
    encoder = OpusFrameEncoder(EncoderSettings())
    packets = [encoder.encode(bytes(960)) for _ in range(5)]
    writer = OggOpusWriter(serial=7)
    data = writer.header() + b"".join(writer.write(p) for p in packets)
    big = packets[0] + bytes(300 - len(packets[0]))  # 300 bytes: 255 on one page, 45 on the next
    data += page([255], big[:255], 7, 7) + page([45], big[255:], 7, 8, flags=0x01)
    data += writer.close()
    packets.append(big)
    for step in (1, 7, 4096):
        reader = OggOpusReader()
        got = [p for i in range(0, len(data), step) for p in reader.feed(data[i : i + step])]
        reader.close()
        assert got == packets and reader.ended and reader.head.pre_skip == 312
    reader = OggOpusReader()
    reader.feed(data[:40])
    with pytest.raises(MalformedOgg):
        reader.close()
    bad = bytearray(data)
    bad[-30] ^= 1
    with pytest.raises(MalformedOgg):
        OggOpusReader().feed(bytes(bad))
