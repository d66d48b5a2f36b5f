"""The demo page in real headless Chromium against a real in-process gateway over loopback UDP."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from gateway.runtime.clock import wall_offset
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer
from gateway.webrtc.batch_sender import BatchStream
from tests.browser.conftest import connect, open_demo, speak, stats, wait_stats

pytestmark = pytest.mark.browser

WEB = Path(__file__).resolve().parents[2] / "web"
JAVASCRIPT = ("text/javascript", "application/javascript")  # both JavaScript MIME types to browsers

OPUS_FMTP_PINNED = ("maxplaybackrate=24000", "sprop-maxcapturerate=24000", "useinbandfec=1",
                    "stereo=0")


async def test_click_connect_speak_and_hear_440_hz(start_gateway, page, monkeypatch):
    sent_at: list[float] = []  # monotonic: each packet handed to the socket (one session here)
    emit = BatchStream._emit

    def recording_emit(self: BatchStream, *args: object) -> None:
        sent_at.append(time.monotonic())
        emit(self, *args)

    monkeypatch.setattr(BatchStream, "_emit", recording_emit)
    gw = await start_gateway(send_in_c=False)  # every packet through ``_emit``
    await open_demo(page, gw.url)
    assert await page.is_visible("#voice"), "several voices: the page offers a choice"
    options = await page.eval_on_selector_all("#voice option", "els => els.map(e => e.value)")
    assert options == ["tone", "tone48k", "long"]

    await connect(page)
    timing = await page.evaluate("window.gatewayDemo.timing")
    assert timing["offerPostedAt"] < timing["answerAt"] <= timing["firstPacketSeenAt"]
    # "first packet" is its arrival, not when a stats report first showed one. The page takes
    # Chromium's arrival stamp of the n-th packet its first report counted (latestPacketAt) and
    # dates the first (n - 1) x 20 ms before it.
    count = timing["firstPacketCount"]
    assert count >= 1 and len(sent_at) >= count, (count, len(sent_at))
    assert timing["firstPacketAt"] == pytest.approx(max(
        timing["latestPacketAt"] - (count - 1) * 20, timing["answerAt"], timing["clickedAt"]))
    # That stamp is the n-th packet's arrival: within a few ms of the gateway sending it (both
    # clocks are this machine's wall clock; measured -0.3..0.9 ms, where the report's sighting
    # came 2.6-20 ms after it). Compared packet to packet, a stalled gateway loop (a 20 ms GC
    # pause between the first and the n-th packet failed CI once) does not move it.
    origin = await page.evaluate("performance.timeOrigin")
    offset = wall_offset()
    arrived = origin + timing["latestPacketAt"]
    sent = (sent_at[count - 1] + offset) * 1000
    assert -3 < arrived - sent < 10, (arrived - sent, count, timing)
    state_url = gw.url + await page.evaluate("new URL(gatewayDemo.sessionUrl).pathname")
    async with gw.http.get(state_url) as r:
        first_sent = (await r.json())["connect_timeline_unix_ms"]["first_packet"]
    assert first_sent == pytest.approx((sent_at[0] + offset) * 1000, abs=5)
    assert timing["firstPacketAt"] <= timing["latestPacketAt"] <= timing["firstPacketSeenAt"]
    candidates = await page.evaluate("window.gatewayDemo.candidates")
    assert candidates["patches"] >= 1 and not candidates["patchErrors"], candidates

    before = await stats(page)
    await speak(page, "A tone, please.", voice="tone")  # 1 s of 440 Hz at 0.3 full scale
    # the page's own AnalyserNode hears it (the <audio> element really renders the stream) ...
    freq = await (await page.wait_for_function(
        "() => { const d = window.gatewayDemo; const f = d.dominantFrequency(); "
        "return d.level() > 0.18 && f !== null && f; }"  # steady tone (RMS 0.21), not its onset
    )).json_value()
    assert abs(freq - 440.0) < 2.0, freq
    # ... and so does Chromium's receive path
    during = await wait_stats(page, "s.audioLevel > 0.05")
    assert during["packetsReceived"] > before["packetsReceived"]
    assert during["totalSamplesReceived"] > before["totalSamplesReceived"]
    assert await page.evaluate("window.gatewayDemo.lastSpeak.audibleAt") is not None

    # and the gateway says the utterance played out
    await page.wait_for_function(
        "() => (window.gatewayDemo.serverState?.utterances?.recent ?? [])"
        ".some(u => u.state === 'done')"
    )
    async with gw.http.get(gw.url + (await page.evaluate("new URL(gatewayDemo.sessionUrl)"
                                                         ".pathname"))) as r:
        assert r.status == 200
        assert (await r.json())["utterances"]["done"] >= 1
    assert await page.inner_text("#s-received") != "\N{EN DASH}"  # the panel is live


async def test_fmtp_seen_by_chromium_and_nack_negotiated(start_gateway, page):
    """The pinned Opus fmtp reaches Chromium, and Chromium turns NACK on for the audio stream.

    Where Chromium shows the fmtp: ``pc.remoteDescription`` is Chromium's re-serialisation of the
    answer it parsed (parameters re-ordered alphabetically, so it is not our text echoed back).
    The codec stats' ``sdpFmtpLine`` is Chromium's *receive* codec, which comes from its own offer
    (``minptime=10;useinbandfec=1``): it never shows the sender's parameters.
    """
    gw = await start_gateway()
    await open_demo(page, gw.url)
    await connect(page)
    answer = await page.evaluate("window.gatewayDemo.answerSdp")
    offer = await page.evaluate("window.gatewayDemo.offerSdp")
    pt = re.search(r"^a=rtpmap:(\d+) opus/48000", offer, re.M).group(1)  # offerer's choice
    answer_fmtp = re.search(rf"^a=fmtp:{pt} (.*)$", answer, re.M).group(1).strip().split(";")
    for part in OPUS_FMTP_PINNED:
        assert part in answer_fmtp, (part, answer_fmtp)
    assert f"a=rtcp-fb:{pt} nack" in answer

    parsed = await page.evaluate("window.gatewayDemo.pc.remoteDescription.sdp")
    parsed_fmtp = re.search(rf"^a=fmtp:{pt} (.*)$", parsed, re.M).group(1).strip().split(";")
    for part in OPUS_FMTP_PINNED:
        assert part in parsed_fmtp, (part, parsed_fmtp)
    assert ";".join(parsed_fmtp) == await page.evaluate("window.gatewayDemo.answerFmtp")

    snapshot = await wait_stats(page, "s.packetsReceived >= 10 && s.codec?.sdpFmtpLine")
    codec = snapshot["codec"]
    assert codec["mimeType"] == "audio/opus" and codec["clockRate"] == 48000
    assert str(codec["payloadType"]) == pt
    assert "useinbandfec=1" in codec["sdpFmtpLine"].split(";"), codec
    # nackCount only appears in inbound-rtp when Chromium negotiated NACK for the stream
    assert isinstance(snapshot["nackCount"], int), snapshot
    # the panel shows both lines
    await page.wait_for_function(
        "() => document.querySelector('#s-answer-fmtp').textContent"
        ".includes('maxplaybackrate=24000') && "
        "document.querySelector('#s-fmtp').textContent.includes('useinbandfec=1')"
    )


async def test_single_voice_needs_no_choice(start_gateway, page):
    gw = await start_gateway(
        voices=VoiceRegistry([ToneSynthesizer(name="only", frequency=440.0, seconds=1.0)])
    )
    await open_demo(page, gw.url)
    assert not await page.is_visible("#voice")
    assert await page.inner_text("#voice-single") == "Voice: only"
    assert await page.is_disabled("#speak"), "nothing to speak to before Connect"
    await connect(page)
    utterance = await speak(page, "Hello.")
    assert utterance["voice"] == "only"


async def test_page_is_es_modules_served_as_javascript(start_gateway, page):
    """No build step: the page loads web/main.js as a module, which imports the rest. A module
    served without a JavaScript MIME type is refused by the browser (and the page would never
    become ready); every .js file in web/ is part of the page. The AudioWorklet module
    (``*-worklet.js``) is loaded by ``audioWorklet.addModule`` when the page starts, a fetch
    that resource timing does not list: the page says it loaded it; the onset detector's when
    the page connects (test_onset_readout.py checks it loads and hears)."""
    gw = await start_gateway()
    await open_demo(page, gw.url)
    loaded = await page.evaluate(
        "performance.getEntriesByType('resource').map(e => e.name).filter(n => n.endsWith('.js'))"
    )
    paths = {urlparse(url).path for url in loaded}
    worklets = {f"/web/{p.name}" for p in WEB.glob("*-worklet.js")}
    assert worklets == {"/web/http-playout-worklet.js", "/web/onset-worklet.js"}
    assert paths == {f"/web/{p.name}" for p in WEB.glob("*.js")} - worklets, paths
    await page.wait_for_function("() => window.gatewayDemo.http.workletReady")
    assert await page.eval_on_selector("script[src]", "s => s.type") == "module"
    for path in sorted(paths | worklets):
        async with gw.http.get(gw.url + path) as r:
            assert r.status == 200, path
            assert r.content_type in JAVASCRIPT, (path, r.content_type)
