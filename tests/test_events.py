"""A session's events reach SSE listeners and the offerer's ``events`` data channel."""

from __future__ import annotations

import asyncio
import json

from gateway.conversation.events import EventBus
from tests.helpers import events_channel_session


async def read_sse(response, until_state: str, utterance_id_box: list[str]) -> list[tuple]:
    events, kind = [], None
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            events.append((kind, data))
            if kind == "utterance" and utterance_id_box and data["id"] == utterance_id_box[0] \
                    and data["state"] == until_state:
                return events
    return events


async def test_sse_and_data_channel_carry_utterance_events(gateway):
    async with events_channel_session(gateway) as (location, messages):
        box: list[str] = []
        async with gateway.http.get(f"{location}/events") as sse:
            assert sse.status == 200 and sse.content_type == "text/event-stream"
            reader = asyncio.create_task(read_sse(sse, "done", box))
            async with gateway.http.post(f"{location}/speech",
                                         json={"text": "hi", "voice": "tone"}) as r:
                box.append((await r.json())["id"])
            events = await asyncio.wait_for(reader, 10)
        states = [d["state"] for k, d in events if k == "utterance" and d["id"] == box[0]]
        assert states == ["queued", "synthesizing", "playing", "done"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while not any(m.get("state") == "done" for m in messages):
            assert loop.time() < deadline, messages
            await asyncio.sleep(0.01)  # data-channel messages arrive on their own schedule
        assert [m["state"] for m in messages if m["type"] == "utterance"] == states


async def test_an_interrupt_is_an_event_and_a_slow_listener_only_loses_its_own():
    bus = EventBus()
    slow, fast = bus.subscribe(maxsize=2), bus.subscribe(maxsize=100)
    for i in range(10):
        bus.publish("utterance", id=str(i), state="queued")
    assert slow.dropped == 8 and fast.dropped == 0
    assert (await slow.get()).data["id"] == "8"
    assert [(await fast.get()).data["id"] for _ in range(10)] == [str(i) for i in range(10)]
    bus.close()
    assert await fast.get() is None


async def test_events_end_with_the_session(gateway, connect):
    client = await connect()
    async with gateway.http.get(f"{client.session_url}/events") as sse:
        await sse.content.readline()  # the opening comment: subscribed
        await client.say("long", voice="long")
        await client.interrupt()
        async with gateway.http.delete(client.session_url) as r:
            assert r.status == 204
        body = (await asyncio.wait_for(sse.content.read(), 5)).decode()
    assert "event: interrupted" in body
