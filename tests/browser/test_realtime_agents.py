"""The OpenAI Agents SDK's Realtime WebRTC transport (``@openai/agents-realtime``, from npm,
unmodified) in real Chromium against the gateway: an ephemeral key from ``POST
/v1/realtime/client_secrets``, ``RealtimeSession.connect`` (its own peer connection, its
``oai-events`` data channel, ``POST /v1/realtime/calls`` with the offer, the wait for
``session.updated``), a question spoken into Chromium's fake microphone (espeak-ng, looped) and
a spoken answer (the echo agent) heard on the page.

The page is made here, by this test only: ``npm ci`` of the pinned package-lock.json in
tests/browser/realtime_agents/ and an esbuild bundle (nothing of it on the run path, no CDN);
the gateway serves it as its demo directory, so the page and the API share one origin.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.testing.spoken_audio import concat, have_espeak, silence, speak
from tests.browser.conftest import new_page
from tests.browser.test_talk import write_wav
from tests.installed import missing, need_module

pytestmark = pytest.mark.browser

PAGE = Path(__file__).parent / "realtime_agents"
QUESTION = "What is the weather like today?"
LONG_MS = 90_000  # Whisper on 2 shared cores: generous


@pytest.fixture(scope="session")
def agents_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test page with the SDK bundled in, once per test session."""
    npm = shutil.which("npm")
    if npm is None:
        missing("npm", "@openai/agents-realtime comes from the npm registry")
    work = tmp_path_factory.mktemp("agents-realtime")
    for name in ("package.json", "package-lock.json", "entry.js", "index.html"):
        shutil.copy(PAGE / name, work / name)
    try:
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=work,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            missing("the npm registry", f"npm ci failed: {done.stderr.strip()[-400:]}")
        esbuild = work / "node_modules" / ".bin" / "esbuild"
        done = subprocess.run([str(esbuild), "entry.js", "--bundle", "--format=iife",
                               "--platform=browser", "--outfile=bundle.js", "--log-level=error"],
                              cwd=work, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        missing("the npm registry", "npm ci or esbuild timed out")
    assert done.returncode == 0, done.stderr
    assert (work / "bundle.js").stat().st_size > 10_000
    return work


@pytest.fixture
def question_wav(tmp_path: Path) -> Path:
    if not have_espeak():
        missing("espeak-ng", "speaks the question (Debian: apt-get install -y espeak-ng)")
    return write_wav(tmp_path / "question.wav",
                     concat(silence(2.0), speak(QUESTION), silence(5.0)))


async def test_agents_sdk_webrtc_session_hears_and_answers(
    start_gateway, launch_browser, agents_page, question_wav
):
    need_module("faster_whisper", "the [listen] extra (faster-whisper listens)")
    gw = await start_gateway(duplex=True, agent="echo", reply_voice="tone", web_dir=agents_page)
    browser = await launch_browser(f"--use-file-for-fake-audio-capture={question_wav}")
    page = await new_page(browser)
    await page.goto(f"{gw.url}/web/index.html")
    await page.wait_for_function("() => window.agentsConnect !== undefined")
    await page.evaluate("window.agentsConnect()")
    state = await page.evaluate("window.agentsTest")
    assert state["status"] == "connected", state
    assert state["secret"].startswith("ek_")
    assert "session.created" in state["events"] and "session.updated" in state["events"]
    # the question is heard (VAD, Whisper) and answered aloud
    await page.wait_for_function(
        "() => window.agentsTest.transcripts.length > 0 && window.agentsTest.maxLevel > 0.01",
        timeout=LONG_MS)
    state = await page.evaluate("window.agentsTest")
    events = state["events"]
    assert "input_audio_buffer.speech_started" in events, events
    assert "input_audio_buffer.speech_stopped" in events, events
    heard = " ".join(state["transcripts"]).lower()
    assert "weather" in heard, state["transcripts"]
    assert any(e.startswith("response.") for e in events), events
    assert state["error"] is None, state["error"]
    assert not page.js_errors, page.js_errors
    await page.evaluate("window.agentsSession.close()")
