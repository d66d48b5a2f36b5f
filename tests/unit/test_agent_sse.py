"""Server-sent event parsing as chat servers send it."""

from __future__ import annotations

from gateway.agent.sse import Event, SseParser


def parse(lines: list[bytes]) -> list[Event]:
    parser = SseParser()
    events = [e for line in lines if (e := parser.feed_line(line)) is not None]
    last = parser.finish()
    return [*events, *([last] if last else [])]


def test_data_lines_comments_and_events():
    events = parse([b": keep-alive\n", b"data: {\"a\":1}\n", b"\n", b"event: error\n",
                    b"data:no space\r\n", b"data:  two spaces\n", b"\r\n", b"id: 7\n",
                    b"retry: 100\n", b"\n", b"data: [DONE]\n", b"\n"])
    assert events == [Event('{"a":1}'), Event("no space\n two spaces", "error"),
                      Event("[DONE]")]


def test_an_event_without_the_final_blank_line_is_kept():
    assert parse([b"data: last"]) == [Event("last")]
    assert parse([]) == []


def test_error_shapes_that_chat_servers_send():
    import json

    import pytest

    from gateway.agent.base import AgentError
    from gateway.agent.openai_chat import _delta_text
    from gateway.net.error_body import error_message

    assert error_message(b'{"error": {"message": "bad key", "type": "x"}}') == "bad key"
    assert error_message(b'{"object": "error", "message": "too long", "code": 400}') == "too long"
    assert error_message(b'{"detail": "Not Found"}') == "Not Found"
    assert error_message(b"<html>502</html>") == "<html>502</html>"
    for chunk in ({"error": {"message": "boom"}}, {"object": "error", "message": "boom"}):
        with pytest.raises(AgentError, match="boom"):
            _delta_text(json.loads(json.dumps(chunk)))
    assert _delta_text({"choices": [{"delta": {"content": "hi"}, "finish_reason": None}]}) == \
        ("hi", None)
    assert _delta_text({"choices": [], "usage": {"total_tokens": 3}}) == ("", None)
    assert _delta_text({"choices": [{"delta": {"reasoning_content": "hm"}}]}) == ("", None)
