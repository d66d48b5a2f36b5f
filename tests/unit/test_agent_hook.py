"""Python hooks as the reply step: async generators, coroutines, errors, closing."""

from __future__ import annotations

import sys
import textwrap

import pytest

from gateway.agent.base import AgentError, Message
from gateway.agent.hook import HookAgent

HOOKS = '''
import asyncio

CLOSED = []

async def reply(text, history):
    yield f"{len(history)} before; "
    yield "you said "
    yield text

async def whole(text, history):
    return "one piece"

async def forever(text, history):
    try:
        while True:
            yield "la "
            await asyncio.sleep(0)
    finally:
        CLOSED.append(text)

async def broken(text, history):
    yield "first "
    raise RuntimeError("model exploded")

async def wrong_type(text, history):
    yield 42

def not_async(text, history):
    return ["a", "b"]

class Bot:
    async def answer(self, text, history):
        yield text.upper()

bot = Bot()
'''


@pytest.fixture
def hooks(tmp_path, monkeypatch):
    (tmp_path / "my_hooks.py").write_text(textwrap.dedent(HOOKS))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_hooks"
    sys.modules.pop("my_hooks", None)


async def collect(agent: HookAgent, text: str = "hi", history=()):
    return [p async for p in agent.reply(text, list(history))]


async def test_an_async_generator_hook_streams(hooks):
    agent = HookAgent(f"{hooks}:reply")
    assert await collect(agent, "hello", [Message("user", "a")]) == ["1 before; ", "you said ",
                                                                    "hello"]
    assert await collect(HookAgent(f"{hooks}:bot.answer"), "loud") == ["LOUD"]


async def test_a_coroutine_hook_gives_one_piece(hooks):
    assert await collect(HookAgent(f"{hooks}:whole")) == ["one piece"]


async def test_closing_the_reply_closes_the_hook_generator(hooks):
    reply = HookAgent(f"{hooks}:forever").reply("stop me", [])
    assert await anext(reply) == "la "
    await reply.aclose()
    assert sys.modules[hooks].CLOSED == ["stop me"]


@pytest.mark.parametrize(("name", "message"), [
    ("broken", "model exploded"), ("wrong_type", "yielded int"), ("not_async", "returned list"),
])
async def test_hook_failures_are_agent_errors(hooks, name, message):
    with pytest.raises(AgentError, match=message):
        await collect(HookAgent(f"{hooks}:{name}"))


def test_bad_targets(hooks):
    for target in ("no_colon", f"{hooks}:missing", "no_such_module_abc:f", f"{hooks}:CLOSED"):
        with pytest.raises(ValueError):
            HookAgent(target)


async def test_a_callable_can_be_given_directly():
    async def inline(text, history):
        yield "inline " + text

    assert await collect(HookAgent(inline), "ok") == ["inline ok"]
