"""Talk (full duplex) from Chromium with a fake microphone: a question spoken by espeak-ng (a
voice other than the reply's tone) is Chromium's capture device (``--use-file-for-fake-audio-
capture``, looped); the page sends it up a sendrecv offer with an ``events`` data channel, the
gateway (``--duplex``: Silero VAD, Whisper tiny.en, the echo agent) hears it, answers, and the
reply plays in the page; the events arrive over SSE and the data channel, and each turn's
latencies reach the page's timeline."""

from __future__ import annotations

import asyncio
import json
import wave
from pathlib import Path

import numpy as np
import pytest

from gateway.testing.spoken_audio import RATE, concat, have_espeak, silence, speak
from tests.browser.conftest import WAIT_MS, new_page, open_demo
from tests.installed import missing, need_module

pytestmark = pytest.mark.browser

QUESTION = "What is the weather like today?"
TALKING = ("() => window.gatewayDemo.talk.state === 'talking' && "
           "window.gatewayDemo.talk.channel === 'open' && window.gatewayDemo.talk.sse === 'open'")
LONG_MS = 90_000  # Whisper on 2 shared cores with other work running: generous
ARTIFACTS = Path(__file__).resolve().parents[2] / "tests" / "artifacts"  # git-ignored


def write_wav(path: Path, pcm: np.ndarray, rate: int = RATE) -> Path:
    """16-bit PCM mono: what Chromium's fake capture reads."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return path


@pytest.fixture
def question_wav(tmp_path: Path) -> Path:
    if not have_espeak():
        missing("espeak-ng", "speaks the question (Debian: apt-get install -y espeak-ng)")
    # silence first (the connection comes up while it plays), then the question, then 4 s
    # of quiet: time for the reply before the loop asks again
    return write_wav(tmp_path / "question.wav",
                     concat(silence(1.0), speak(QUESTION), silence(4.0)))


@pytest.fixture
async def mic_page(launch_browser, question_wav: Path):
    browser = await launch_browser(f"--use-file-for-fake-audio-capture={question_wav}")
    page = await new_page(browser)
    yield page
    assert not page.js_errors, f"uncaught errors in the page: {page.js_errors}"


async def read_sse(gw, session_id: str, into: list[tuple[str, dict]]) -> None:
    """The test's own SSE listener (aiohttp), beside the page's two."""
    async with gw.http.get(f"{gw.url}/v1/sessions/{session_id}/events") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        kind = None
        async for raw in r.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                into.append((kind, json.loads(line[6:])))


# Serial: the turn's latency bound needs CPU for Whisper's decode child, which runs SCHED_IDLE
# (it only gets what nothing else wants); beside three other tests it starved: 11.6 s of ASR.
@pytest.mark.serial
async def test_talk_question_heard_answered_and_timed(start_gateway, mic_page):
    need_module("faster_whisper", "the [listen] extra (faster-whisper listens)")
    gw = await start_gateway(duplex=True, agent="echo", reply_voice="tone")
    page = mic_page
    await open_demo(page, gw.url)
    await page.click("#talk-start")
    await page.wait_for_function(TALKING, timeout=WAIT_MS)
    talk = await page.evaluate("window.gatewayDemo.talk")
    assert talk["answerDirection"] == "sendrecv" and talk["mic"]["settings"]["echoCancellation"]
    heard: list[tuple[str, dict]] = []
    reader = asyncio.create_task(read_sse(gw, talk["sessionId"], heard))
    try:
        # the final transcript holds the question's words
        await page.wait_for_function(
            """() => window.gatewayDemo.talk.transcripts.some((t) => t.final &&
                 /weather/i.test(t.text) && /today/i.test(t.text))""", timeout=LONG_MS)
        # the reply: its audio plays here (level) and its utterance ends done
        await page.wait_for_function(
            """() => { const t = window.gatewayDemo.talk;
                 return t.replies.length > 0 && t.peakReplyLevel > 0.05 &&
                   t.replies.some((r) => r.state === 'done'); }""", timeout=LONG_MS)
        # the gateway's latencies for that turn, on the page, and its timeline drawn
        await page.wait_for_function(
            """() => window.gatewayDemo.talk.turns.some((t) => /weather/i.test(t.text) &&
                 t.latency?.end_of_speech_to_audio != null && t.client.heardMs != null)""",
            timeout=LONG_MS)
        talk = await page.evaluate("window.gatewayDemo.talk")
    finally:
        reader.cancel()
    turn = next(t for t in talk["turns"] if "weather" in t["text"].lower())
    final = turn["text"]
    assert "today" in final.lower(), final
    assert turn["reply"] and " ".join(turn["reply"]).startswith("You said"), turn
    lat = turn["latency"]
    assert all(lat[k] is not None and lat[k] >= 0 for k in
               ("endpointing", "asr", "agent_first_text", "tts_first_audio")), lat
    assert 0 < lat["end_of_speech_to_audio"] < 10_000, lat
    assert talk["peakMicLevel"] > 0.01  # the VAD meter showed the microphone
    # the page heard it after the gateway sent it (plus the endpointing wait the event comes at)
    assert turn["client"]["heardMs"] > 0
    rows = int(await page.get_attribute("#talk-timeline", "data-rows"))
    assert rows >= 1
    drawn = await page.eval_on_selector(
        "#talk-timeline",
        "c => c.getContext('2d').getImageData(0, 0, c.width, c.height).data"
        ".some((v, i) => i % 4 === 3 && v > 0)")
    assert drawn
    assert "weather" in (await page.inner_text("#talk-log")).lower()
    # captions: the reply's words came as heard (word events), and the log marks them heard
    heard_words = [w["word"] for u in turn["utterances"] for w in talk["words"].get(u, [])]
    assert heard_words and heard_words[0].lower().startswith("you"), talk["words"]
    marked = await page.locator("#talk-log .bot .word.heard").all_inner_texts()
    assert len(marked) >= len(heard_words) - 1 and marked[0].lower().startswith("you"), marked
    assert "end of speech" in await page.inner_text("#talk-latency")

    # every kind of event came both ways: SSE and the data channel, and each applied once
    events = talk["events"]
    for kind in ("speech_started", "speech_stopped", "transcript", "reply", "utterance"):
        assert events["sse"].get(kind, 0) >= 1, (kind, events)
        assert events["channel"].get(kind, 0) >= 1, (kind, events)
        assert events["applied"][kind] <= max(events["sse"][kind], events["channel"][kind])
    assert any(k == "transcript" and d["final"] for k, d in heard), heard  # the test's own SSE
    assert "data channel (open)" in await page.inner_text("#talk-events")

    state = await (await gw.http.get(f"{gw.url}/v1/sessions/{talk['sessionId']}")).json()
    assert state["direction"] == "sendrecv" and state["duplex"]["turns"]
    print(f"\nTalk in Chromium: final transcript {final!r}; reply {' '.join(turn['reply'])!r}")
    print("turn latencies (gateway, ms): " + ", ".join(f"{k} {v}" for k, v in lat.items()))
    print(f"speech_stopped event -> reply audible in the page: {turn['client']['heardMs']:.0f} ms; "
          f"end of speech -> heard ≈ {lat['endpointing'] + turn['client']['heardMs']:.0f} ms; "
          f"events: sse {sum(events['sse'].values())}, channel {sum(events['channel'].values())}, "
          f"first via {events['first']}")
    for t in talk["turns"]:
        print(f"  turn {t['turn']}: {t['text']!r} latency {t['latency']}")

    ARTIFACTS.mkdir(exist_ok=True)
    await page.locator(".talk").screenshot(path=str(ARTIFACTS / "talk.png"))

    await page.click("#talk-stop")
    await page.wait_for_function("() => window.gatewayDemo.talk.state === 'closed'")
    for _ in range(100):
        if len(gw.registry) == 0:
            break
        await asyncio.sleep(0.05)
    assert len(gw.registry) == 0
    assert await page.evaluate("window.gatewayDemo.talk.channel") == "closed"


async def test_talk_to_a_gateway_that_does_not_listen(start_gateway, page):
    gw = await start_gateway()  # no --duplex: a sendrecv offer is answered sendonly
    await open_demo(page, gw.url)
    await page.click("#talk-start")
    await page.wait_for_function("() => window.gatewayDemo.talk.state === 'failed'")
    talk = await page.evaluate("window.gatewayDemo.talk")
    assert talk["answerDirection"] == "sendonly"
    assert talk["error"]["title"] == "The gateway does not listen"
    assert "--duplex" in await page.inner_text("#error-message")
    assert await page.is_enabled("#talk-start") and await page.is_disabled("#talk-stop")
    for _ in range(100):  # the session it made was DELETEd
        if len(gw.registry) == 0:
            break
        await asyncio.sleep(0.05)
    assert len(gw.registry) == 0
