"""The client CLI against an in-process gateway: the WAV is written from the receive path's PCM
source as it plays (the receive path itself records nothing)."""

import wave

import numpy as np
import pytest

from gateway.client import __main__ as cli
from gateway.receive.receive_path import ReceivePath
from tests.helpers import dominant_frequency
from tests.installed import missing, need_module

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
    assert paths[0].config.burst_start_frames == 0  # no start hold unless asked for
    with wave.open(str(out), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24_000, 1, 2)
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    assert pcm.size == round(stats["audio_s"] * 24_000) == paths[0].periods * 480
    assert stats["receive"]["lost"] == 0 and stats["receive"]["concealed"] == 0
    loud = np.flatnonzero(np.abs(pcm) > 2000)
    assert loud.size > 20_000  # the 1 s tone is in it
    assert dominant_frequency(pcm[loud[0] : loud[0] + 12_000], 24_000) == pytest.approx(440, abs=2)


def test_start_hold_reaches_the_receive_path():
    from gateway.client.receive_options import receive_config

    args = cli.build_parser().parse_args(["--text", "x", "--start-hold", "12",
                                          "--start-hold-s", "5", "--no-fec"])
    config = receive_config(args)
    assert (config.burst_start_frames, config.burst_start_hold_s) == (12, 5.0)
    assert config.nack and not config.fec


async def test_cli_raw_decodes_the_capture_offline(gateway, tmp_path):
    out = tmp_path / "raw.wav"
    args = cli.build_parser().parse_args(
        ["--url", gateway.url, "--text", "A tone please.", "--voice", "tone", "--out", str(out),
         "--raw"]
    )
    stats = await cli.run(args)
    # the 1 s tone's 50 frames at least (keep-alive silence before it only if the speech
    # request did not make the stream's next slot)
    assert "receive" not in stats and stats["packets"] >= 50 and stats["missing"] == 0
    with wave.open(str(out), "rb") as wav:
        assert wav.getnframes() == round(stats["audio_s"] * 24_000) == stats["packets"] * 480


# --- --mic: talking to a full-duplex gateway ---------------------------------------------------

def _write_wav(path, pcm: np.ndarray, rate: int, channels: int = 1, width: int = 2) -> None:
    """``pcm`` (float mono in [-1, 1]) as a ``width``-byte PCM WAV of ``channels`` (the second
    channel at half level)."""
    frames = np.stack([pcm * (1.0 if c == 0 else 0.5) for c in range(channels)], axis=1)
    if width == 1:
        data = np.clip(np.round(frames * 127 + 128), 0, 255).astype(np.uint8).tobytes()
    elif width == 2:
        data = np.clip(np.round(frames * 32767), -32768, 32767).astype("<i2").tobytes()
    else:
        ints = np.clip(np.round(frames * 8_388_607), -8_388_608, 8_388_607).astype(np.int32)
        data = np.stack([(ints >> s) & 0xFF for s in (0, 8, 16)], axis=-1).astype(
            np.uint8).tobytes()
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(width)
        wav.setframerate(rate)
        wav.writeframes(data)


@pytest.mark.parametrize(("rate", "channels", "width"), [(44_100, 2, 3), (8_000, 1, 1),
                                                         (48_000, 1, 2)])
def test_mic_wavs_of_any_format_become_48k_mono(tmp_path, rate, channels, width):
    from gateway.client.mic_run import read_wav, speech_end, uplink_pcm

    t = np.arange(rate) / rate  # 1 s of 300 Hz, then 0.5 s of silence
    tone = np.concatenate([0.5 * np.sin(2 * np.pi * 300 * t), np.zeros(rate // 2)])
    path = tmp_path / "in.wav"
    _write_wav(path, tone, rate, channels, width)
    samples, got_rate = read_wav(path)
    assert got_rate == rate and len(samples) == len(tone)
    pcm = uplink_pcm(samples, rate)
    assert pcm.dtype == np.int16 and abs(len(pcm) - 72_000) <= 2
    assert dominant_frequency(pcm[:48_000], 48_000) == pytest.approx(300, abs=2)
    level = 0.5 * (1.0 + 0.5 * (channels - 1)) / channels  # the channels averaged
    assert np.abs(pcm[:48_000]).max() == pytest.approx(level * 32767, rel=0.03)
    end = speech_end(pcm)
    assert end is not None and abs(end - 48_000) < 48  # the tone's end, within 1 ms


@pytest.mark.asr
@pytest.mark.timeout(120)
async def test_cli_mic_speaks_a_wav_and_prints_the_transcript_reply_and_split(
        start_gateway, tmp_path):
    import asyncio
    import json
    import sys

    from gateway.testing.spoken_audio import have_espeak, speak

    need_module("faster_whisper", "the [listen] extra")
    if not have_espeak():
        missing("espeak-ng", "speaks the question (Debian)")
    gateway = await start_gateway(duplex=True)  # the echo agent
    question = tmp_path / "question.wav"  # 44.1 kHz stereo 24-bit: resampled and mixed down
    _write_wav(question, speak("Where is the nearest train station?", rate=44_100) / 32768.0,
               44_100, channels=2, width=3)
    out = tmp_path / "reply.wav"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.client", "--url", gateway.url, "--mic", str(question),
        "--out", str(out), "--json", "--timeout", "60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 100)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    stats = json.loads(stdout)
    words = stats["transcript"].lower()
    assert "nearest" in words and "train" in words and "station" in words, stats
    assert stats["reply"].startswith("You said:") and "station" in stats["reply"].lower()
    (turn,) = stats["turns"]  # one question, one turn
    latency = turn["latency_ms"]
    assert all(latency[k] is not None for k in ("endpointing", "asr", "agent_first_text",
                                                 "tts_first_audio", "end_of_speech_to_audio"))
    assert turn["asr"]["speculative"] is True  # decoded while the turn's end was awaited
    # the reply cannot reach us before the turn was declared over (the VAD may place the end
    # of speech a frame or two before the WAV's last loud sample)
    first = stats["end_of_speech_to_first_packet_ms"]
    assert first is not None and first >= latency["endpointing"] - 50
    played = stats["end_of_speech_to_first_audible_played_ms"]
    assert played is not None and played >= first
    with wave.open(str(out), "rb") as wav:
        reply = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    assert np.flatnonzero(np.abs(reply) > 2000).size > 12_000  # the reply (a tone) was heard
    # and the human-readable form prints the same
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.client", "--url", gateway.url, "--mic", str(question),
        "--out", str(out), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 100)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    text = stdout.decode()
    assert "transcript:" in text and "train" in text.lower() and "endpointing wait" in text
    assert "client: end of speech -> first reply packet" in text


async def test_cli_mic_needs_a_duplex_gateway(gateway, tmp_path):
    question = tmp_path / "tone.wav"
    t = np.arange(16_000) / 16_000
    _write_wav(question, 0.3 * np.sin(2 * np.pi * 200 * t), 16_000)
    args = cli.build_parser().parse_args(["--url", gateway.url, "--mic", str(question),
                                          "--out", str(tmp_path / "r.wav")])
    with pytest.raises(ConnectionError, match="--duplex"):
        await cli.run(args)
