"""The client CLI against an in-process gateway: the WAV is written from the receive path's PCM
source as it plays (the receive path itself records nothing)."""

import wave

import numpy as np
import pytest

from gateway.client import __main__ as cli
from gateway.receive.receive_path import ReceivePath
from tests.helpers import dominant_frequency

pytestmark = pytest.mark.timeout(60)


async def test_cli_streams_what_it_played_to_the_wav(gateway, tmp_path, monkeypatch):
    paths: list[ReceivePath] = []
    original = ReceivePath.__init__

    def spy(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        paths.append(self)

    monkeypatch.setattr(ReceivePath, "__init__", spy)
    out = tmp_path / "reply.wav"
    args = cli.build_parser().parse_args(
        ["--url", gateway.url, "--text", "A tone please.", "--voice", "tone", "--out", str(out)]
    )
    stats = await cli.run(args)
    assert [p.config.record_s for p in paths] == [0.0]  # nothing recorded in memory
    with wave.open(str(out), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24_000, 1, 2)
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    assert pcm.size == round(stats["audio_s"] * 24_000) == paths[0].periods * 480
    assert stats["receive"]["lost"] == 0 and stats["receive"]["concealed"] == 0
    loud = np.flatnonzero(np.abs(pcm) > 2000)
    assert loud.size > 20_000  # the 1 s tone is in it
    assert dominant_frequency(pcm[loud[0] : loud[0] + 12_000], 24_000) == pytest.approx(440, abs=2)


async def test_cli_raw_decodes_the_capture_offline(gateway, tmp_path):
    out = tmp_path / "raw.wav"
    args = cli.build_parser().parse_args(
        ["--url", gateway.url, "--text", "A tone please.", "--voice", "tone", "--out", str(out),
         "--raw"]
    )
    stats = await cli.run(args)
    assert "receive" not in stats and stats["packets"] > 50 and stats["missing"] == 0
    with wave.open(str(out), "rb") as wav:
        assert wav.getnframes() == round(stats["audio_s"] * 24_000) == stats["packets"] * 480
