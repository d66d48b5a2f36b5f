"""Rights to speak and to listen on channels: JWT ``scope`` and ``channel`` claims, static
tokens and ``--listen-token`` (api/access.py)."""

from __future__ import annotations

import time

import jwt
import pytest

SECRET = "channel-secret-of-at-least-32-bytes!"


def _jwt(**claims) -> str:
    return jwt.encode({"exp": int(time.time()) + 60, **claims}, SECRET, algorithm="HS256")


@pytest.fixture
async def gw(start_gateway):
    gateway = await start_gateway(auth_tokens=("both",), listen_tokens=("ears",),
                                  auth_jwt_secret=SECRET)
    for name in ("a", "b"):
        async with gateway.http.post(f"{gateway.url}/v1/channels", json={"name": name},
                                     headers={"Authorization": "Bearer both"}) as response:
            assert response.status == 201
    return gateway


async def _status(gw, method: str, path: str, token: str, **kwargs) -> tuple[int, str | None]:
    headers = {"Authorization": f"Bearer {token}"}
    async with getattr(gw.http, method)(gw.url + path, headers=headers, **kwargs) as response:
        code = None
        if response.content_type == "application/json" and response.status >= 400:
            code = (await response.json())["error"]["code"]
        return response.status, code


SPEAK = ("post", "/v1/channels/a/speech", {"json": {"text": "hi"}})
LISTEN = ("get", "/v1/channels/a", {})


@pytest.mark.parametrize(("token", "speak", "listen"), [
    ("both", 202, 200),
    ("ears", 403, 200),
    ({}, 202, 200),
    ({"scope": "listen"}, 403, 200),
    ({"scope": "speak"}, 202, 403),
    ({"scope": "listen speak"}, 202, 200),
    ({"scope": "listen", "channel": "a"}, 403, 200),
    ({"scope": "listen", "channel": "b"}, 403, 403),
    ({"channel": "a"}, 202, 200),
])
async def test_rights_by_token(gw, token, speak, listen):
    # a JWT is made when the test runs (claims given), not at collection: it must not expire
    # while a long suite gets there
    if isinstance(token, dict):
        token = _jwt(**token)
    method, path, kwargs = SPEAK
    assert (await _status(gw, method, path, token, **kwargs))[0] == speak
    method, path, kwargs = LISTEN
    assert (await _status(gw, method, path, token, **kwargs))[0] == listen


async def test_listen_only_and_bound_tokens_stay_out_of_sessions_and_other_channels(gw):
    assert await _status(gw, "post", "/v1/channels", "ears", json={"name": "c"}) == (
        403, "forbidden")
    status, code = await _status(gw, "get", "/v1/sessions/x", "ears")
    assert (status, code) == (403, "forbidden")
    bound = _jwt(channel="a")
    assert (await _status(gw, "get", "/v1/sessions/x", bound))[0] == 403
    assert (await _status(gw, "post", "/v1/channels", bound, json={"name": "c"}))[0] == 403
    assert (await _status(gw, "post", "/v1/channels", bound, json={"name": "a"}))[0] == 409
    assert (await _status(gw, "delete", "/v1/channels/b", bound))[0] == 403
    async with gw.http.get(f"{gw.url}/v1/channels",
                           headers={"Authorization": f"Bearer {bound}"}) as response:
        assert [c["name"] for c in (await response.json())["channels"]] == ["a"]


@pytest.mark.parametrize("claims", [{"scope": "shout"}, {"scope": 3}, {"scope": ""},
                                    {"channel": 7}])
async def test_malformed_claims_are_refused(gw, claims):
    assert await _status(gw, "get", "/v1/channels/a", _jwt(**claims)) == (401, "invalid_token")


async def test_a_listen_token_in_the_query_opens_the_stream(gw):
    """An <audio src> or EventSource cannot send headers: access_token on a GET."""
    async with gw.http.get(f"{gw.url}/v1/channels/a/events?access_token=ears") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
