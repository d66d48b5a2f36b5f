"""The HTTP API: happy paths and every bad input, each with its status and JSON error."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gateway import __version__

SAMPLES = Path(__file__).resolve().parent.parent / "sdp"
CHROMIUM = (SAMPLES / "chromium-156-recvonly.offer.sdp").read_text()


async def error_of(response, status: int) -> dict:
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    return body["error"]


async def test_healthz_and_voices(gateway):
    async with gateway.http.get(f"{gateway.url}/healthz") as r:
        body = await r.json()
    assert r.status == 200 and body["status"] == "ok" and body["version"] == __version__
    assert body["sessions"] == 0 and "freezes" in body["gc"]
    # the server's tasks now: at least the request handler answering this very request
    assert isinstance(body["tasks"], int) and body["tasks"] >= 1
    async with gateway.http.get(f"{gateway.url}/v1/voices") as r:
        assert (await r.json())["default"] == "tone"


async def test_whep_post_answers_sdp_with_location(gateway):
    async with gateway.http.post(
        f"{gateway.url}/v1/sessions", data=CHROMIUM, headers={"Content-Type": "application/sdp"}
    ) as r:
        answer = await r.text()
        assert r.status == 201 and r.content_type == "application/sdp"
        location = r.headers["Location"]
    assert location.startswith("/v1/sessions/")
    assert "a=fmtp:111 minptime=10;useinbandfec=1;stereo=0;sprop-stereo=0;" in answer
    async with gateway.http.get(gateway.url + location) as r:
        state = await r.json()
    assert state["connection_state"] in ("new", "connecting")
    assert state["opus_payload_type"] == 111
    async with gateway.http.delete(gateway.url + location) as r:
        assert r.status == 204
    async with gateway.http.get(gateway.url + location) as r:
        assert (await error_of(r, 404))["code"] == "unknown_session"


async def test_json_offer_gets_json_answer(gateway):
    async with gateway.http.post(
        f"{gateway.url}/v1/sessions", json={"type": "offer", "sdp": CHROMIUM}
    ) as r:
        body = await r.json()
    assert r.status == 201 and body["type"] == "answer" and body["id"]
    assert body["location"] == r.headers["Location"] == f"/v1/sessions/{body['id']}"
    assert body["sdp"].startswith("v=0")


NO_OPUS = CHROMIUM.replace("a=rtpmap:111 opus/48000/2", "a=rtpmap:111 speex/48000")
NO_AUDIO = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
SENDONLY = CHROMIUM.replace("a=recvonly", "a=sendonly")


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        ("{not json", {"Content-Type": "application/json"}, 400, "invalid_json"),
        ("[1, 2]", {"Content-Type": "application/json"}, 400, "invalid_json"),
        (json.dumps({"type": "answer", "sdp": CHROMIUM}), {"Content-Type": "application/json"},
         400, "not_an_offer"),
        (json.dumps({"type": "offer", "sdp": 5}), {"Content-Type": "application/json"},
         400, "invalid_sdp"),
        ("hello", {"Content-Type": "application/sdp"}, 400, "invalid_sdp"),
        (NO_AUDIO, {"Content-Type": "application/sdp"}, 400, "no_audio"),
        (NO_OPUS, {"Content-Type": "application/sdp"}, 400, "no_opus"),
        (SENDONLY, {"Content-Type": "application/sdp"}, 400, "audio_not_receivable"),
        (CHROMIUM, {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
        ("x" * (70 * 1024), {"Content-Type": "application/sdp"}, 413, "body_too_large"),
    ],
    ids=["malformed-json", "json-not-object", "answer-not-offer", "sdp-not-string",
         "garbage-sdp", "no-audio", "no-opus", "sendonly", "wrong-type", "too-large"],
)
async def test_bad_offers(start_gateway, body, headers, status, code):
    gateway = await start_gateway(max_body_bytes=64 * 1024)
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=body, headers=headers) as r:
        assert (await error_of(r, status))["code"] == code
    assert len(gateway.registry) == 0  # nothing was left half-made


@pytest.mark.parametrize(
    ("broken", "code"),
    [
        (CHROMIUM.replace("a=fingerprint:", "a=fingerprintx:"), "no_dtls_fingerprint"),
        (CHROMIUM.replace("a=ice-pwd:", "a=ice-pwdx:"), "no_ice_credentials"),
        (CHROMIUM.replace("a=setup:actpass", "a=setup:holdconn"), "invalid_sdp"),
        (CHROMIUM.replace("a=rtcp-mux\r\n", "").replace("a=rtcp-mux\n", ""), "invalid_offer"),
    ],
    ids=["no-fingerprint", "no-ice-pwd", "bad-setup", "no-rtcp-mux"],
)
async def test_offers_that_cannot_connect_are_400_and_leave_nothing(gateway, broken, code):
    async with gateway.http.post(
        f"{gateway.url}/v1/sessions", data=broken, headers={"Content-Type": "application/sdp"}
    ) as r:
        assert (await error_of(r, 400))["code"] == code
    assert len(gateway.registry) == 0


async def test_session_cap_gives_503(start_gateway):
    gateway = await start_gateway(max_sessions=1)
    headers = {"Content-Type": "application/sdp"}
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM, headers=headers) as r:
        assert r.status == 201
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM, headers=headers) as r:
        assert (await error_of(r, 503))["code"] == "session_limit"


@pytest.fixture
async def session_url(gateway):
    async with gateway.http.post(
        f"{gateway.url}/v1/sessions", data=CHROMIUM, headers={"Content-Type": "application/sdp"}
    ) as r:
        return gateway.url + r.headers["Location"]


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        ({"text": ""}, 400, "empty_text"),
        ({"text": "   "}, 400, "empty_text"),
        ({"text": 5}, 400, "empty_text"),
        ({}, 400, "empty_text"),
        ({"text": "x" * 2001}, 400, "text_too_long"),
        ({"text": "hi", "interrupt": "yes"}, 400, "invalid_interrupt"),
        ({"text": "hi", "voice": "nobody"}, 400, "unknown_voice"),
        ({"text": "hi", "voice": 3}, 400, "invalid_voice"),
    ],
)
async def test_bad_speech_requests(start_gateway, payload, status, code):
    gateway = await start_gateway(max_text_chars=2000)
    async with gateway.http.post(
        f"{gateway.url}/v1/sessions", data=CHROMIUM, headers={"Content-Type": "application/sdp"}
    ) as r:
        url = gateway.url + r.headers["Location"]
    async with gateway.http.post(f"{url}/speech", json=payload) as r:
        assert (await error_of(r, status))["code"] == code


async def test_speech_wrong_type_malformed_and_unknown_session(gateway, session_url):
    async with gateway.http.post(f"{session_url}/speech", data="text=hi",
                                 headers={"Content-Type": "text/plain"}) as r:
        assert (await error_of(r, 415))["code"] == "unsupported_media_type"
    async with gateway.http.post(f"{session_url}/speech", data="{",
                                 headers={"Content-Type": "application/json"}) as r:
        assert (await error_of(r, 400))["code"] == "invalid_json"
    async with gateway.http.post(f"{gateway.url}/v1/sessions/nope/speech", json={"text": "a"}) as r:
        assert (await error_of(r, 404))["code"] == "unknown_session"
    async with gateway.http.delete(f"{gateway.url}/v1/sessions/nope") as r:
        assert (await error_of(r, 404))["code"] == "unknown_session"
    async with gateway.http.get(f"{session_url}/speech/nope") as r:
        assert (await error_of(r, 404))["code"] == "unknown_utterance"
    async with gateway.http.get(f"{gateway.url}/v1/nothing-here") as r:
        assert (await error_of(r, 404))["code"] == "not_found"
    async with gateway.http.put(f"{session_url}") as r:
        assert (await error_of(r, 405))["code"] == "method_not_allowed"


async def test_speech_accepted_with_location(gateway, session_url):
    async with gateway.http.post(f"{session_url}/speech", json={"text": "hello"}) as r:
        body = await r.json()
        assert r.status == 202 and body["id"] and body["state"] == "queued"
        assert r.headers["Location"] == body["location"]
    async with gateway.http.get(gateway.url + body["location"]) as r:
        assert (await r.json())["id"] == body["id"]


async def test_speech_queue_is_bounded(start_gateway):
    gateway = await start_gateway()
    gateway.registry.options = type(gateway.registry.options)(max_pending_utterances=2)
    async with gateway.http.post(
        f"{gateway.url}/v1/sessions", data=CHROMIUM, headers={"Content-Type": "application/sdp"}
    ) as r:
        url = gateway.url + r.headers["Location"]
    statuses = []
    for _ in range(4):
        async with gateway.http.post(f"{url}/speech", json={"text": "x", "voice": "long"}) as r:
            statuses.append(r.status)
            if r.status == 429:
                assert (await error_of(r, 429))["code"] == "speech_queue_full"
    assert statuses.count(202) in (2, 3) and statuses[-1] == 429


async def test_trickle_ice_patch(gateway, session_url):
    frag = (
        "a=ice-ufrag:jJsd\r\na=ice-pwd:lj0G6Qp9er383IAy4B7cy7wm\r\nm=audio 9 RTP/AVP 0\r\n"
        "a=mid:0\r\na=candidate:1 1 udp 2122260223 127.0.0.1 40000 typ host\r\n"
        "a=end-of-candidates\r\n"
    )
    headers = {"Content-Type": "application/trickle-ice-sdpfrag"}
    async with gateway.http.patch(session_url, data=frag, headers=headers) as r:
        assert r.status == 204, await r.text()
    plain = {"Content-Type": "text/plain"}
    async with gateway.http.patch(session_url, data=frag, headers=plain) as r:
        assert (await error_of(r, 415))["code"] == "unsupported_media_type"
    bad = "a=mid:0\r\na=candidate:garbage\r\n"
    async with gateway.http.patch(session_url, data=bad, headers=headers) as r:
        assert (await error_of(r, 400))["code"] == "invalid_candidate"
    restart = frag.replace("jJsd", "zzzz")  # new credentials: an ICE restart needs If-Match
    async with gateway.http.patch(session_url, data=restart, headers=headers) as r:
        assert (await error_of(r, 428))["code"] == "if_match_required"


async def test_a_broken_session_does_not_affect_another(gateway, connect):
    healthy = await connect()
    # Hammer the API with garbage for another session and for a half-made one.
    headers = {"Content-Type": "application/sdp"}
    for body in ("v=0\r\nm=audio", "\x00\xff", NO_OPUS):
        async with gateway.http.post(f"{gateway.url}/v1/sessions", data=body, headers=headers) as r:
            assert r.status == 400
    result = await healthy.say("still here", voice="tone")
    state = await healthy.wait_utterance(result.utterance["id"])
    assert state["state"] == "done" and state["frames_sent"] == 50


async def test_wait_sent_returns_once_the_first_frame_is_out(gateway, connect):
    client = await connect()
    first = await client.say("long", voice="long")
    second = await client.say("tone", voice="tone")
    url = f"{client.session_url}/speech/{second.utterance['id']}"
    async with gateway.http.get(url, params={"wait": "sent", "timeout": "0.3"}) as r:
        queued = await r.json()
    assert queued["first_timestamp"] is None  # still behind the 30 s one: the wait timed out
    async with gateway.http.get(f"{client.session_url}/speech/{first.utterance['id']}",
                                params={"wait": "sent"}) as r:
        playing = await r.json()
    assert playing["first_timestamp"] is not None and playing["state"] == "playing"


async def test_the_connect_timeline_is_in_the_session_state(gateway, connect):
    client = await connect()
    await client.capture.wait_packets(3)
    state = await client.state()
    timeline = state["connect_timeline_ms"]
    assert None not in timeline.values(), timeline
    assert 0 < timeline["answer"] <= timeline["ice"] <= timeline["dtls"] <= timeline["first_packet"]


async def test_the_timelines_are_exported_on_the_wall_clock_in_order(gateway, connect):
    """Session and utterance timelines as Unix epoch ms (what a browser on this machine lines
    up with its own clock): each moment in the order it happens, the requests dated between
    our own clock readings around them, and the nominated ICE pair's candidate types."""
    before_connect = time.time() * 1000
    client = await connect()
    await client.capture.wait_packets(3)
    state = await client.state()
    t = state["connect_timeline_unix_ms"]
    assert None not in t.values(), t
    assert before_connect <= t["request"] <= t["offer"] <= t["answer"] <= t["ice"] \
        <= t["dtls"] <= t["first_packet"] <= time.time() * 1000, t
    # the relative timeline is the same moments: the offer (the leg's start) is its zero
    rel = state["connect_timeline_ms"]
    assert rel["request"] <= 0 and abs(t["dtls"] - t["offer"] - rel["dtls"]) < 1, (t, rel)
    assert state["ice_pair"]["local"] == "host", state["ice_pair"]
    assert state["ice_pair"]["remote"] in ("host", "prflx"), state["ice_pair"]

    before_say = time.time() * 1000
    result = await client.say("tone", voice="tone")
    after_say = time.time() * 1000
    u = await client.wait_utterance(result.utterance["id"])
    w = u["timeline_unix_ms"]
    assert before_say <= w["request"] <= w["created"] <= after_say, w
    assert w["created"] <= w["started"] <= w["first_pcm"] <= w["first_frame_queued"] \
        <= w["first_sent"] <= w["finished"], w
    # the first frame waits at most one 20 ms slot (and a 2.5 ms tick) for its turn
    assert u["slot_wait_ms"] == pytest.approx(w["first_sent"] - w["first_frame_queued"], abs=0.01)
    assert 0 <= u["slot_wait_ms"] <= 25, u
    assert u["latency_ms"]["request"] <= 0 <= u["latency_ms"]["started"], u["latency_ms"]


async def test_delete_of_a_session_that_just_ended_is_still_204(gateway, connect):
    client = await connect()
    session = next(iter(gateway.registry))
    await session.close("peer connection closed")  # as when the peer closes first
    async with gateway.http.delete(client.session_url) as r:
        assert r.status == 204  # idempotent: a WHEP client's stop() DELETEs after closing
    async with gateway.http.delete(f"{gateway.url}/v1/sessions/never-existed") as r:
        assert r.status == 404
