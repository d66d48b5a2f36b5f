"""An open utterance: its text appended while it already speaks (speech/text_feed.py)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.client.peer import GatewayClient
from gateway.speech.text_feed import TextFeed, TextFeedClosed


async def _open(client: GatewayClient, text: str, voice: str | None = None) -> dict:
    body = {"text": text, "open": True, **({"voice": voice} if voice else {})}
    async with client.http.post(f"{client.session_url}/speech", json=body) as r:
        assert r.status == 202
        return await r.json()


async def _append(client: GatewayClient, uid: str, **body) -> tuple[int, dict]:
    async with client.http.post(f"{client.session_url}/speech/{uid}/text", json=body) as r:
        return r.status, await r.json()


async def test_appended_text_is_spoken_as_one_utterance(connect):
    client = await connect()
    opened = await _open(client, "one two")
    for piece in [" three", ", four five", " six."]:
        status, reply = await _append(client, opened["id"], text=piece)
        assert status == 200 and not reply["ended"]
    status, reply = await _append(client, opened["id"], text=" Seven", end=True)
    assert status == 200 and reply["ended"] and reply["chars"] == len(
        "one two three, four five six. Seven")
    state = await client.wait_utterance(opened["id"])
    assert state["state"] == "done" and not state["cached"]
    # the tone voice speaks 1 s per clause: "one two" / "three, four five six." / "Seven"
    assert state["frames_sent"] == 3 * 50
    assert [w["word"] for w in state["words"]] == "one two three, four five six. Seven".split()
    starts = [w["start_ms"] for w in state["words"]]
    assert starts == sorted(starts) and starts[-1] >= 2000  # the third clause's second
    status, reply = await _append(client, opened["id"], text="more")
    assert status == 409 and reply["error"]["code"] == "text_ended"


async def test_a_closed_utterance_refuses_more_and_a_plain_one_is_not_open(connect):
    client = await connect()
    plain = await client.say("All at once.")
    status, reply = await _append(client, plain.utterance["id"], text="x")
    assert status == 409 and reply["error"]["code"] == "not_open"
    status, reply = await _append(client, "nope", text="x")
    assert status == 404


async def test_text_per_open_utterance_is_bounded(start_gateway):
    gateway = await start_gateway(max_text_chars=20)
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    try:
        opened = await _open(client, "x" * 15)
        status, reply = await _append(client, opened["id"], text="y" * 10)
        assert status == 400 and reply["error"]["code"] == "text_too_long"
        await _append(client, opened["id"], end=True)
    finally:
        await client.close()


async def test_an_idle_feed_ends_by_itself():
    feed = TextFeed(100, idle_s=0.05)
    feed.append("no end in sight")
    got = [c async for c in feed.clauses()]  # returns once idle: nothing holds for ever
    assert got == ["no end", "in sight"] and feed.ended
    with pytest.raises(TextFeedClosed):
        feed.append("late")


async def test_clauses_come_while_text_is_still_arriving():
    feed = TextFeed(1000, idle_s=5)
    clauses = feed.clauses()
    feed.append("Hello there my")
    feed.append(" friend, how")
    assert await asyncio.wait_for(anext(clauses), 1) == "Hello there"
    feed.append(" are you?", end=True)
    assert [c async for c in clauses] == ["my friend, how are you?"]


async def test_the_framed_stream_speaks_a_text_body_while_it_is_still_arriving(gateway):
    """POST /v1/speech/stream with a text/plain body written as an LLM writes it: the first
    frames come back before the body has ended."""
    from gateway.http.frame_records import EndRecord, FrameRecord, FrameRecordParser

    body_done = asyncio.Event()
    first_frame = asyncio.Event()

    async def body():
        for piece in ["Hello", " there", " my", " friend", ", how are", " you?"]:
            yield piece.encode()
            if piece == " friend":  # hold the rest until speech has come back
                await asyncio.wait_for(first_frame.wait(), 10)
        body_done.set()

    parser = FrameRecordParser()
    records = []
    async with gateway.http.post(f"{gateway.url}/v1/speech/stream?voice=tone", data=body(),
                                 headers={"Content-Type": "text/plain"}) as r:
        assert r.status == 200
        async for chunk in r.content.iter_any():
            for record in parser.feed(chunk):
                records.append(record)
                if isinstance(record, FrameRecord) and not first_frame.is_set():
                    assert not body_done.is_set()
                    first_frame.set()
    frames = [x for x in records if isinstance(x, FrameRecord)]
    assert isinstance(records[-1], EndRecord)
    # "Hello there" / "my friend, how are you?": two clauses of the 1 s tone
    assert len(frames) == 2 * 50


class _FirstChunkTimed:
    """A voice that times only a clause's first chunk, as Piper's split render does: its rest
    (the end of a word, a pause) carries no words."""

    name = "timed-first"

    async def stream(self, text: str):
        from gateway.text.timing import WordTiming
        from gateway.tts.base import PcmChunk

        yield PcmChunk(bytes(4800), 24000, (WordTiming(text, 0.0, 150.0),))
        yield PcmChunk(bytes(4800), 24000)

    async def close(self) -> None:
        pass


async def test_a_fed_clause_timed_by_its_voice_gets_no_estimated_words():
    from gateway.speech.text_feed import FedVoice

    feed = TextFeed(1000, idle_s=5)
    feed.append("Sure,", end=True)
    chunks = [c async for c in FedVoice(_FirstChunkTimed(), feed).stream("")]
    words = [w.word for c in chunks for w in c.words]
    assert words == ["Sure,"]  # the untimed rest was not estimated as the clause again
    assert len(chunks) == 2
