"""The OpenAI-compatible chat agent against the stand-in server (loopback, real HTTP, SSE):
streaming, clauses before the reply is complete, failures as AgentError, cancellation that
reaches the server, and the stand-in's own wire format."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest

from gateway.agent.base import Agent, AgentError, History, Message
from gateway.agent.openai_chat import ChatConfig, OpenAIChatAgent
from gateway.agent.registry import build_agent
from gateway.testing.chat_server import ChatStandIn, StandInConfig
from gateway.text.streaming import stream_clauses

REPLY = ["Sure", ",", " I", " can", " help", " with", " that", ".", " The", " train", " leaves",
         " at", " nine", " fifteen", ",", " from", " platform", " two", "."]


@pytest.fixture
async def standin():
    async with ChatStandIn(StandInConfig(tokens=REPLY)) as server:
        yield server


def agent_for(server: ChatStandIn, **kw) -> OpenAIChatAgent:
    return OpenAIChatAgent(ChatConfig(base_url=server.url, model="stand-in", **kw))


async def test_streams_the_reply_token_by_token(standin):
    agent = agent_for(standin, system="Be brief.", max_tokens=64, temperature=0.2)
    assert isinstance(agent, Agent)
    history = [Message("user", "Hi"), Message("assistant", "Hello!")]
    pieces = [p async for p in agent.reply("When is the train?", history)]
    await agent.close()
    assert pieces == REPLY
    (req,) = standin.requests
    assert req.outcome == "completed"
    assert req.body == {"model": "stand-in", "stream": True, "max_tokens": 64,
                        "temperature": 0.2, "messages": [
                            {"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello!"},
                            {"role": "user", "content": "When is the train?"}]}
    assert req.headers["Content-Type"] == "application/json"


async def test_clauses_arrive_before_the_reply_is_complete(standin):
    standin.gate = asyncio.Event()
    standin.config.gate_after = 12  # hold the stream after "... The train leaves at"
    agent = agent_for(standin)
    clauses = stream_clauses(agent.reply("When is the train?", []))
    first = await asyncio.wait_for(anext(clauses), 5)
    second = await asyncio.wait_for(anext(clauses), 5)
    assert (first, second) == ("Sure,", "I can help with that.")
    assert standin.requests[0].tokens_sent == 12 and not standin.requests[0].finished.is_set()
    standin.gate.set()
    rest = [c async for c in clauses]
    await agent.close()
    assert rest == ["The train leaves at nine fifteen,", "from platform two."]


async def test_closing_the_reply_closes_the_upstream_request(standin):
    standin.config.token_delay_ms = 30
    agent = agent_for(standin)
    reply = agent.reply("Talk for a while", [])
    assert await anext(reply) == "Sure"
    await reply.aclose()
    req = standin.requests[0]
    await asyncio.wait_for(req.finished.wait(), 2)
    assert req.outcome == "cancelled" and req.tokens_sent < len(REPLY)
    await agent.close()


async def test_cancelling_the_consumer_task_closes_upstream_too(standin):
    standin.config.token_delay_ms = 30
    agent = agent_for(standin)
    got: list[str] = []

    async def speak() -> None:
        async for clause in stream_clauses(agent.reply("Go on", [])):
            got.append(clause)

    task = asyncio.create_task(speak())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(standin.requests[0].finished.wait(), 2)
    assert standin.requests[0].outcome == "cancelled"
    await agent.close()


@pytest.mark.parametrize(("fault", "message"), [
    ("http500", "HTTP 500: The server had an error"),
    ("http401", "HTTP 401: Incorrect API key"),
    ("error_event", "failed mid-stream: The model crashed"),
    ("cut_mid_stream", "failed|cut the stream"),
    ("no_done", "cut the stream before"),
])
async def test_a_failing_server_raises_agent_error(standin, fault, message):
    standin.faults = fault
    agent = agent_for(standin)
    got: list[str] = []
    with pytest.raises(AgentError, match=message):
        async for piece in agent.reply("Hello", []):
            got.append(piece)
    await agent.close()
    if fault in ("error_event", "cut_mid_stream", "no_done"):
        assert got == REPLY[: len(REPLY) // 2]  # what came before the failure was streamed


async def test_timeouts_raise_agent_error(standin):
    standin.faults = "hang"
    agent = agent_for(standin, first_token_timeout=0.3)
    with pytest.raises(AgentError, match=r"no text within 0\.3 s"):
        [p async for p in agent.reply("Hello", [])]
    await agent.close()
    standin.faults = None
    standin.gate = asyncio.Event()
    standin.config.gate_after = 3
    agent = agent_for(standin, token_timeout=0.2)
    with pytest.raises(AgentError, match=r"nothing for 0\.2 s"):
        [p async for p in agent.reply("Hello", [])]
    await agent.close()


async def test_an_unreachable_server_raises_agent_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agent = OpenAIChatAgent(ChatConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    with pytest.raises(AgentError, match="failed"):
        [p async for p in agent.reply("Hello", [])]
    await agent.close()


async def test_a_server_that_ignores_stream_is_read_whole(standin):
    standin.faults = "ignore_stream"
    agent = agent_for(standin)
    assert [p async for p in agent.reply("Hi", [])] == ["".join(REPLY)]
    await agent.close()


async def test_history_is_bounded_and_carried_between_turns(standin):
    agent = agent_for(standin, system="")
    history = History(max_messages=4)
    for turn in ("one", "two", "three"):
        reply = "".join([p async for p in agent.reply(turn, history)])
        history.record(turn, reply)
    await agent.close()
    last = standin.requests[-1].body["messages"]
    assert [m["content"] for m in last] == ["one", "".join(REPLY), "two", "".join(REPLY),
                                            "three"]
    assert [m.content for m in history] == ["two", "".join(REPLY), "three", "".join(REPLY)]


async def test_the_spec_builds_a_working_agent(standin):
    agent = build_agent(f"openai+{standin.url}?model=stand-in&system=Be%20brief.&timeout=5")
    assert [p async for p in agent.reply("Hi", [])] == REPLY
    await agent.close()
    assert standin.requests[0].body["messages"][0] == {"role": "system",
                                                       "content": "Be brief."}


async def test_standin_wire_format_byte_for_byte(standin):
    standin.config.tokens = ["Hi", " there"]
    async with aiohttp.ClientSession() as http:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        async with http.post(standin.url + "/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            raw = await resp.read()
        events = raw.decode().split("\n\n")
        assert events[-2:] == ["data: [DONE]", ""]
        chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
        assert [c["choices"][0]["delta"] for c in chunks] == [
            {"role": "assistant", "content": ""}, {"content": "Hi"}, {"content": " there"}, {}]
        assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "stop"]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert b'"delta":{"content":"Hi"}' in raw  # compact JSON, as OpenAI sends it
        async with http.post(standin.url + "/chat/completions", json={"model": "m"}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["param"] == "messages"
        async with http.get(standin.url + "/models") as resp:
            assert (await resp.json())["data"][0]["id"] == "stand-in"
        async with http.post(standin.url + "/chat/completions", data=b"{") as resp:
            assert resp.status == 400
