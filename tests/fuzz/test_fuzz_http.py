"""The live API's body-taking routes through aiohttp's test client: random JSON, random bytes,
random content types. The property: never a 5xx, and every 4xx is a JSON error body
``{"error": {"code": str, "message": str}}`` (``/v1/audio/speech`` answers its own 400s in
OpenAI's shape, which adds ``param`` and ``type``).

Routes: ``POST /v1/sessions`` (the JSON offer form and the SDP form), ``POST /v1/audio/speech``,
``POST /v1/speech/stream``, ``POST /v1/sessions/{id}/speech`` and, as it takes outside text
too, ``PATCH /v1/sessions/{id}`` (trickle sdpfrag).

The 5xx bugs this fuzzing found are kept in ``FIXED_5XX`` with a minimal input each, as plain
regression tests (all fixed). A new one goes into ``KNOWN_5XX`` until it is fixed: the property
then tolerates a 500 only for a request that one of them describes; once fixed it moves to
``FIXED_5XX``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from hypothesis import example, given
from hypothesis import strategies as st

from gateway import aiortc_compat
from gateway.api.app import create_app
from gateway.api.routes import REGISTRY
from gateway.config import GatewayConfig
from gateway.runtime.gc_policy import GcPolicy
from tests.conftest import tone_voices
from tests.fuzz.profiles import FUZZ_MARKS, fuzz_settings
from tests.fuzz.strategies import (
    OFFERS,
    automatic_gc_off,
    encode_json,
    hostile_json_text,
    int_text,
    json_value,
    line_ending,
    mutated_sdp,
    note_event,
    small_text,
    speech_near_valid,
    weighted,
)

pytestmark = FUZZ_MARKS

SDP = "application/sdp"
JSON = "application/json"
SDPFRAG = "application/trickle-ice-sdpfrag"
CHROMIUM = next(text for text in OFFERS if "a=rtpmap:111 opus/48000/2" in text)

# Which routes read the body with request.text() / _json_body() (gateway/api/routes.py).
ACCEPTS = {"sessions": (SDP, JSON), "audio": (JSON,), "stream": (JSON,), "speech": (JSON,),
           "patch": (SDPFRAG,)}
JSON_BODY_ROUTES = {"stream", "speech"}  # and "sessions" with JSON


@dataclass(frozen=True)
class Call:
    route: str  # a key of ACCEPTS
    content_type: str | None
    body: bytes
    live_session: bool = True  # speech/patch: the live session, else an unknown id
    if_match: str | None = None  # patch: an ICE restart needs If-Match

    @property
    def method(self) -> str:
        return "PATCH" if self.route == "patch" else "POST"


def _parsed_type(content_type: str | None) -> tuple[str, str | None]:
    """aiohttp's own reading of the header: (content_type, charset)."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    request = make_mocked_request("POST", "/", headers=headers)
    return request.content_type, request.charset


def _text_of(call: Call) -> tuple[str | None, BaseException | None]:
    """What ``await request.text()`` gives the handler: the text, or what it raises."""
    _, charset = _parsed_type(call.content_type)
    try:
        return call.body.decode(charset or "utf-8"), None
    except Exception as exc:
        return None, exc


def _reaches_text(call: Call) -> bool:
    """The handler gets as far as reading the body as text (the type is one it accepts)."""
    if call.route in ("speech", "patch") and not call.live_session:
        return False  # 404 first
    if call.route == "audio":
        return False  # reads bytes (request.read()), never text
    return _parsed_type(call.content_type)[0] in ACCEPTS[call.route]


def _json_route(call: Call) -> bool:
    kind = _parsed_type(call.content_type)[0]
    return call.route in JSON_BODY_ROUTES or (call.route == "sessions" and kind == JSON)


def _undecodable_charset(call: Call) -> bool:
    _, exc = _text_of(call)
    return _reaches_text(call) and exc is not None and not isinstance(exc, UnicodeDecodeError)


def _invalid_utf8_sdp(call: Call) -> bool:
    _, exc = _text_of(call)
    return _reaches_text(call) and not _json_route(call) and isinstance(exc, UnicodeDecodeError)


def _json_loads_error(call: Call) -> BaseException | None:
    text, exc = _text_of(call)
    if exc is not None or not _reaches_text(call) or not _json_route(call):
        return None
    try:
        json.loads(text)
    except Exception as error:
        return error
    return None


def _json_recursion(call: Call) -> bool:
    return isinstance(_json_loads_error(call), RecursionError)


def _json_int_digits(call: Call) -> bool:
    error = _json_loads_error(call)
    return isinstance(error, ValueError) and not isinstance(error, json.JSONDecodeError)


@dataclass(frozen=True)
class KnownBug:
    name: str
    reason: str
    matches: Callable[[Call], bool]
    minimal: Call


FIXED_5XX = [
    KnownBug(
        "invalid_utf8_sdp",
        "BUG: POST /v1/sessions (application/sdp) and PATCH /v1/sessions/{id} call "
        "request.text() unguarded: a body that is not UTF-8 -> UnicodeDecodeError -> 500",
        _invalid_utf8_sdp,
        Call("sessions", SDP, b"v=0\r\n\xff"),
    ),
    KnownBug(
        "undecodable_charset",
        "BUG: request.text() with a charset Python cannot decode with "
        "(Content-Type: application/json; charset=bogus) -> LookupError -> 500, on every "
        "route that reads text (/v1/sessions, /v1/speech/stream, /v1/sessions/{id}/speech, PATCH)",
        _undecodable_charset,
        Call("stream", "application/json; charset=bogus", b'{"text": "hi"}'),
    ),
    KnownBug(
        "json_recursion",
        "BUG: routes._json_body catches JSONDecodeError/UnicodeDecodeError only: deeply nested "
        "JSON ([[[[...) -> RecursionError -> 500 (parse_speech_request already catches it)",
        _json_recursion,
        Call("stream", JSON, b"[" * 100_000),
    ),
    KnownBug(
        "punycode_charset",
        "BUG: a charset whose codec fails with a plain UnicodeError (punycode) -> 500",
        lambda call: "punycode" in (call.content_type or ""),
        Call("stream", "application/json; charset=punycode", b'{"text": "["}'),
    ),
    KnownBug(
        "json_int_digits",
        "BUG: routes._json_body: an integer of more than 4300 digits makes json.loads raise a "
        "plain ValueError (not JSONDecodeError) -> 500",
        _json_int_digits,
        Call("stream", JSON, b"1" * 4301),
    ),
]


#: bugs found and not fixed yet (a 5xx is tolerated for a request one of them describes)
KNOWN_5XX: list[KnownBug] = []


def known_bugs(call: Call) -> list[str]:
    return [bug.name for bug in KNOWN_5XX if bug.matches(call)]


# --- the gateway -------------------------------------------------------------------------------


class Gateway:
    """One app on aiohttp's test server, driven from synchronous Hypothesis tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.client: TestClient = self.run(self._start())
        self.app = self.client.app
        self.session_id = ""

    @staticmethod
    async def _start() -> TestClient:
        config = GatewayConfig(host="127.0.0.1", port=0, ice_hosts=("127.0.0.1",))
        client = TestClient(TestServer(create_app(config, tone_voices())))  # cancels handlers
        await client.start_server()
        return client

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        self.run(self.client.close())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    async def live_session(self) -> str:
        """A session for the speech/PATCH routes (re-made if the connect watchdog reaped it)."""
        if not self.session_id or self.app[REGISTRY].get(self.session_id) is None:
            async with self.client.post("/v1/sessions", data=CHROMIUM,
                                        headers={"Content-Type": SDP}) as r:
                assert r.status == 201, await r.text()
                self.session_id = r.headers["Location"].rsplit("/", 1)[1]
        return self.session_id

    async def call(self, call: Call) -> tuple[int, str, bytes]:
        if call.route in ("speech", "patch"):
            sid = await self.live_session() if call.live_session else "no-such-session"
            path = f"/v1/sessions/{sid}" + ("/speech" if call.route == "speech" else "")
        else:
            path = {"sessions": "/v1/sessions", "audio": "/v1/audio/speech",
                    "stream": "/v1/speech/stream"}[call.route]
        headers = {} if call.content_type is None else {"Content-Type": call.content_type}
        if call.if_match is not None:
            headers["If-Match"] = call.if_match
        # skip_auto_headers: without a Content-Type, aiohttp would add application/octet-stream
        response = await self.client.request(
            call.method, path, data=call.body, headers=headers,
            skip_auto_headers=() if call.content_type is not None else ("Content-Type",),
        )
        try:
            status, ctype = response.status, response.content_type
            if status < 300 and call.route in ("audio", "stream"):
                return status, ctype, b""  # a speech stream: closing it cancels the handler
            body = await response.read()
        finally:
            response.close()
        if status == 201 and call.route == "sessions":
            async with self.client.delete(response.headers["Location"]) as r:
                assert r.status == 204
        if status == 202 and call.route == "speech":
            async with self.client.delete(f"{path}"):  # interrupt: keep the queue short
                pass
        return status, ctype, body


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    gw = Gateway()
    try:
        yield gw
    finally:
        gw.close()
        aiortc_compat.restrict_ice_hosts(None)


def check(gateway: Gateway, call: Call) -> None:
    with automatic_gc_off():  # see automatic_gc_off: deep JSON and the gateway's gc callback
        status, ctype, body = gateway.run(gateway.call(call))
        bugs = known_bugs(call) if status >= 500 else []
    note_event(f"{call.route} {status}")
    if status >= 500:
        assert status == 500 and bugs, (
            f"{status} from {call.method} {call.route} Content-Type {call.content_type!r}: "
            f"{body[:300]!r}"
        )
        note_event(f"known bug: {bugs[0]}")
    if 400 <= status < 600:
        assert ctype == JSON, (status, ctype, body[:200])
        payload = json.loads(body)
        assert isinstance(payload, dict) and set(payload) == {"error"}, payload
        error = payload["error"]
        allowed = {"code", "message"} | ({"param", "type"} if call.route == "audio" else set())
        assert isinstance(error, dict) and {"code", "message"} <= set(error) <= allowed, error
        assert isinstance(error["code"], str) and error["code"]
        assert isinstance(error["message"], str) and error["message"]


# --- strategies --------------------------------------------------------------------------------

content_types = {
    route: weighted(
        st.sampled_from([*accepted, *(f"{t}; charset=utf-8" for t in accepted)]),
        st.one_of(
            st.none(),
            st.sampled_from([
                "", "text/plain", "application/octet-stream", "multipart/form-data",
                "application/x-www-form-urlencoded", "APPLICATION/JSON", "application/json;",
                "application/json; charset=latin-1", "application/json; charset=utf-16",
                "application/sdp; charset=utf-32", "application/json; charset=bogus",
                "application/json; charset=rot13", "application/json; charset=punycode",
                'application/json; charset="utf-8"', "application/jsonx", "*/*", ";",
                "application/trickle-ice-sdpfrag", "application/sdp",
            ]),
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
        ),
    )
    for route, accepted in ACCEPTS.items()
}


def encoded(values: st.SearchStrategy) -> st.SearchStrategy[bytes]:
    """JSON values as bytes: mostly UTF-8, sometimes another encoding, a BOM or cut short."""
    how = st.sampled_from(["utf-8"] * 5 + ["ascii", "utf-16", "latin-1", "cut"])
    return st.tuples(values, how).map(lambda pair: _encode(*pair))


def _encode(value: object, how: str) -> bytes:
    if how == "ascii":  # \\uXXXX escapes: lone surrogates get through as text
        return json.dumps(value).encode()
    if how == "latin-1":
        return json.dumps(value, ensure_ascii=False).encode("latin-1", "replace")
    raw = encode_json(value, "utf-8" if how == "cut" else how)
    return raw[: len(raw) // 2] if how == "cut" else raw


hostile_bytes = st.one_of(
    hostile_json_text.map(str.encode), st.binary(max_size=300),
    st.binary(max_size=40).map(lambda b: b'{"text": "' + b + b'"}'),
)
offer_text = st.one_of(mutated_sdp(OFFERS, max_mutations=2), mutated_sdp())
offer_form = st.fixed_dictionaries(
    {"type": weighted(st.just("offer"), st.one_of(st.sampled_from(["answer", "Offer"]),
                                                  json_value)),
     "sdp": weighted(offer_text, json_value)},
    optional={"extra": json_value},
)
stream_form = st.fixed_dictionaries(
    {"text": weighted(st.text(min_size=1, max_size=40), json_value)},
    optional={"voice": weighted(st.sampled_from(["tone", "tone48k", "long"]),
                                st.one_of(st.sampled_from(["nope", ""]), json_value)),
              "pace": weighted(st.sampled_from(["asap", "live"]), json_value),
              "extra": json_value},
)
speech_form = st.fixed_dictionaries(
    {"text": weighted(st.text(min_size=1, max_size=40), json_value)},
    optional={"voice": weighted(st.sampled_from(["tone", "tone48k"]),
                                st.one_of(st.sampled_from(["nope", ""]), json_value)),
              "interrupt": weighted(st.booleans(), json_value),
              "extra": json_value},
)
safe_ip = st.sampled_from(["127.0.0.1", "::1", "127.0.0.2", "0.0.0.0", "256.1.1.1", "1.2.3", "",
                           "[::1]"])  # no public address, no mDNS name: nothing leaves the host
patch_line = st.one_of(
    st.builds(
        lambda f, c, proto, prio, ip, port, kind, extra: (
            f"a=candidate:{f} {c} {proto} {prio} {ip} {port} typ {kind}{extra}"
        ),
        st.sampled_from(["1", "2138010029", "x"]), st.sampled_from(["1", "2", "0", "-1"]),
        st.sampled_from(["udp", "tcp", "x"]), int_text, safe_ip, int_text,
        st.sampled_from(["host", "srflx", "relay", "x"]),
        st.sampled_from(["", " generation 0", " raddr 127.0.0.1 rport 9", " tcptype active",
                         " rport"]),
    ),
    st.sampled_from(["a=end-of-candidates", "a=ice-ufrag:jJsd", "a=ice-ufrag:other",
                     "a=ice-pwd:lj0G6Qp9er383IAy4B7cy7wm", "a=ice-pwd:short", "a=ice-pwd:",
                     "a=mid:0", "a=mid:1", "a=candidate:", "", "garbage"]),
    st.builds(lambda v: f"a=mid:{v}", small_text),
)
sdpfrag_body = st.one_of(
    st.lists(st.tuples(patch_line, line_ending), max_size=6).map(
        lambda pairs: "".join(line + end for line, end in pairs).encode("utf-8", "surrogatepass")
    ),
    st.binary(max_size=100),
)

route_bodies = {
    "sessions": st.one_of(encoded(offer_form), encoded(json_value), hostile_bytes,
                          weighted(offer_text.map(lambda t: t.encode("utf-8", "replace")),
                                   offer_text.map(lambda t: t.encode("utf-8", "surrogatepass")))),
    "audio": st.one_of(encoded(speech_near_valid), encoded(json_value), hostile_bytes),
    "stream": st.one_of(encoded(stream_form), encoded(json_value), hostile_bytes),
    "speech": st.one_of(encoded(speech_form), encoded(json_value), hostile_bytes),
    "patch": sdpfrag_body,
}


if_match = st.one_of(
    st.none(), st.sampled_from(["*", '"*"', '"stale"', ""]),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20),
)


def calls(route: str) -> st.SearchStrategy[Call]:
    live = weighted(st.just(True), st.just(False), odds=9)
    match = if_match if route == "patch" else st.none()
    return st.builds(Call, st.just(route), content_types[route], route_bodies[route], live, match)


# --- the properties ----------------------------------------------------------------------------


@fuzz_settings(http=True)
@given(call=calls("sessions"))
@example(call=Call("sessions", JSON, encode_json({"type": "offer", "sdp": CHROMIUM})))
@example(call=Call("sessions", SDP, CHROMIUM.encode()))
@example(call=Call("sessions", JSON, json.dumps(  # a lone surrogate, as a JSON escape
    {"type": "offer", "sdp": CHROMIUM.replace("a=mid:0", "a=mid:\ud800")}).encode()))
def test_post_sessions(gateway, call):
    check(gateway, call)


@fuzz_settings(http=True)
@given(call=calls("audio"))
@example(call=Call("audio", JSON, b'{"input": "hi", "voice": "tone"}'))
def test_post_audio_speech(gateway, call):
    check(gateway, call)


@fuzz_settings(http=True)
@given(call=calls("stream"))
@example(call=Call("stream", JSON, b'{"text": "hi"}'))
def test_post_speech_stream(gateway, call):
    check(gateway, call)


@fuzz_settings(http=True)
@given(call=calls("speech"))
@example(call=Call("speech", JSON, b'{"text": "hi", "voice": "tone"}'))
def test_post_session_speech(gateway, call):
    check(gateway, call)


@fuzz_settings(http=True)
@given(call=calls("patch"))
@example(call=Call("patch", SDPFRAG, b"a=ice-ufrag:other\r\n"))
def test_patch_session_sdpfrag(gateway, call):
    check(gateway, call)


def test_oversized_body_is_a_json_413(gateway):
    check(gateway, Call("stream", JSON, b" " * ((1 << 20) + 1)))


@pytest.mark.parametrize("bug", [pytest.param(b, id=b.name) for b in FIXED_5XX])
def test_fixed_5xx_regression(gateway, bug):
    """Each bug's minimal input (a 500 before its fix): it gets a JSON 4xx."""
    with automatic_gc_off():
        assert bug.matches(bug.minimal)
        status, ctype, body = gateway.run(gateway.call(bug.minimal))
    assert status < 500, f"{status}: {body[:200]!r}"
    assert ctype == JSON and set(json.loads(body)["error"]) == {"code", "message"}


def _collect_at_depth(target: int, depth: int) -> None:
    if depth < target:
        _collect_at_depth(target, depth + 1)
        return
    gc.collect()


def test_gc_callback_survives_a_collection_near_the_recursion_limit():
    policy = GcPolicy()
    ignored: list[type[BaseException] | None] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: ignored.append(u.exc_type)  # cheap: it runs deep too
    try:
        depth, frame = 0, sys._getframe()
        while frame is not None:
            depth, frame = depth + 1, frame.f_back
        limit = sys.getrecursionlimit()
        for headroom in range(1, 20):
            try:
                _collect_at_depth(limit - headroom, depth + 1)
            except RecursionError:
                pass
    finally:
        sys.unraisablehook = previous
        policy.close()
    assert ignored == []
    assert policy.stats.collections != [0, 0, 0]  # the hook still timed the others
