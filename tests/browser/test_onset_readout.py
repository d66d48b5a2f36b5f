"""The page's "sound after" readout on an idle stream comes from the onset in its audio graph.

The voice's audio is 400 ms of digital silence and then a tone: its first packet is sent (and
played by Chromium's receiver) 400 ms before anything can be heard. The page's AudioWorklet
detector (web/onset-worklet.js) must date the sound where the tone starts, on the audio clock,
and the readout must be that figure: a readout taken from packets (the first packet's arrival or
playout, getStats, ...) would be about 400 ms early and fails here.
"""

from __future__ import annotations

import re
import wave
from pathlib import Path

import numpy as np
import pytest

from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import WavFileSynthesizer
from tests.browser.conftest import connect, open_demo, speak

pytestmark = pytest.mark.browser

RATE = 24_000
LEAD_MS = 400.0


def late_tone(path: Path) -> Path:
    """LEAD_MS of zeros, then 1 s of 440 Hz at -12 dBFS (16-bit mono WAV)."""
    lead = np.zeros(int(RATE * LEAD_MS / 1000), dtype=np.int16)
    t = np.arange(RATE) / RATE
    tone = (0.25 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.concatenate([lead, tone]).tobytes())
    return path


@pytest.mark.parametrize("idle", ["silence", "dtx"])
async def test_sound_after_is_the_onset_in_the_audio_graph(start_gateway, page, tmp_path, idle):
    """With the keep-alive silence (the gateway's default) and with DTX (``make run``'s)."""
    voice = WavFileSynthesizer(late_tone(tmp_path / "late.wav"), name="late")
    gw = await start_gateway(voices=VoiceRegistry([voice]), idle_packets=idle,
                             early_first_frame=idle == "dtx")
    await open_demo(page, gw.url)
    await connect(page)
    # the worklet detector is loaded and tapping the remote stream before we speak
    tapped = await page.evaluate("""async () => {
        const { audio } = await import("/web/audio.js");
        await audio.onsetReady;
        return audio.onsetTapped !== null;
    }""")
    assert tapped

    await speak(page, "Silence, then a tone.")  # the only voice: the default
    await page.wait_for_function("() => window.gatewayDemo.lastSpeak?.ms != null")
    record = await page.evaluate("window.gatewayDemo.lastSpeak")
    print(f"\nclick -> played {record['playedAt'] - record['clickedAt']:.1f} ms, -> onset "
          f"{record['ms']:.1f} ms (rendered {record['onsetRenderedAt'] - record['clickedAt']:.1f})")

    assert not record["busy"] and record["method"] == "onset", record
    assert record["onsetSource"] == "worklet", record
    assert record["audibleAt"] == record["onsetAt"], record
    # the tone starts LEAD_MS after the utterance's first packet played (plus the graph's and
    # the output's own delay): the readout is the tone's onset, not the packet
    after_packet = record["onsetAt"] - record["playedAt"]
    assert LEAD_MS - 30 < after_packet < LEAD_MS + 250, record
    # audible = rendered + the output's latency (as the AudioContext reports it)
    assert 0 <= record["onsetAt"] - record["onsetRenderedAt"] < 200, record
    text = (await page.inner_text("#latency")).strip()
    match = re.fullmatch(r"sound after (\d+) ms", text)
    assert match and abs(float(match.group(1)) - record["ms"]) <= 1, (text, record)
