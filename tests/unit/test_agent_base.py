"""History bounds, the echo agent and agent specs."""

from __future__ import annotations

import pytest

from gateway.agent.base import Agent, History, Message
from gateway.agent.echo import EchoAgent
from gateway.agent.hook import HookAgent
from gateway.agent.openai_chat import ChatConfig, OpenAIChatAgent
from gateway.agent.registry import build_agent, parse_chat_spec


def test_history_drops_whole_exchanges_oldest_first():
    history = History(max_messages=4, max_chars=1000)
    for i in range(4):
        history.record(f"q{i}", f"a{i}")
    assert [m.content for m in history] == ["q2", "a2", "q3", "a3"]
    assert history.messages[0] == history[0] == Message("user", "q2")
    assert history[-1].content == "a3" and [m.content for m in history[1:3]] == ["a2", "q3"]
    history.record("barged in", "")  # nothing was answered
    assert [m.role for m in history] == ["user", "assistant", "user"]
    small = History(max_messages=10, max_chars=10)
    small.record("hello", "world")
    small.record("again", "x")
    assert [m.content for m in small] == ["again", "x"]
    small.clear()
    assert len(small) == 0
    with pytest.raises(ValueError):
        History(max_messages=1)


async def test_echo_streams_word_by_word():
    agent = EchoAgent()
    assert isinstance(agent, Agent)
    pieces = [p async for p in agent.reply("  what   time is it? ", [])]
    assert pieces == ["You", " said:", " what", " time", " is", " it?"]
    assert "".join(pieces) == "You said: what time is it?"


def test_agent_specs():
    assert isinstance(build_agent(), EchoAgent) and isinstance(build_agent("echo"), EchoAgent)
    agent = build_agent("openai+http://127.0.0.1:8080/v1?model=llama&system=Be%20brief."
                        "&max_tokens=100&temperature=0.5&timeout=30&token_timeout=5"
                        "&connect_timeout=1&key_env=LLM_KEY")
    assert isinstance(agent, OpenAIChatAgent)
    assert agent.config == ChatConfig(
        base_url="http://127.0.0.1:8080/v1", model="llama", system="Be brief.", max_tokens=100,
        temperature=0.5, first_token_timeout=30.0, token_timeout=5.0, connect_timeout=1.0,
        api_key_env="LLM_KEY")
    assert agent.config.endpoint == "http://127.0.0.1:8080/v1/chat/completions"
    assert parse_chat_spec("openai+http://localhost:11434?model=x").base_url == \
        "http://localhost:11434/v1"
    assert isinstance(build_agent("python:gateway.agent.echo:EchoAgent"), HookAgent)


@pytest.mark.parametrize("spec", ["gpt", "openai+http://h:1/v1", "openai+http://h:1/v1?model=m&x=1",
                                  "openai+http://h:1/v1?model=m&max_tokens=0",
                                  "openai+http://h:1/v1?model=m&timeout=-1", "python:nomodule",
                                  "python:no_such_module_xyz:f", "python:gateway.agent.echo:nope"])
def test_bad_agent_specs(spec):
    with pytest.raises(ValueError):
        build_agent(spec)
