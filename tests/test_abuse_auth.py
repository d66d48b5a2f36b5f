"""Issue 23, auth that cannot be configured open: an empty or whitespace token refuses to
start; tokens are compared exactly; the Bearer scheme is case-insensitive; a JWT's lifetime is
capped and its aud/iss checked when configured; a header that is not UTF-8 is a 401 in JSON."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import urlsplit

import jwt
import pytest

from gateway.api.access import AccessPolicy

SECRET = "a-test-secret-of-at-least-32-bytes!!"
SPEECH = "/v1/audio/speech?input=hi&voice=tone&response_format=pcm"


@pytest.mark.parametrize(("args", "env"), [
    (["--auth-token", ""], {}),
    (["--auth-token", " "], {}),
    ([], {"GATEWAY_AUTH_TOKEN": ","}),
    ([], {"GATEWAY_AUTH_TOKEN": ""}),
    (["--auth-jwt-secret", " "], {}),
])
def test_an_empty_token_refuses_to_start_with_a_clear_error(args, env):
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "--voice", "tone:440", "--port", "0", *args],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "refusing to start" in proc.stderr or "names no token" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_policy_itself_refuses_blank_tokens():
    for token in ("", " ", "\u00a0", "a b"):
        with pytest.raises(ValueError):
            AccessPolicy(tokens=(token,))


async def _status(gateway, headers=None, query: str = "") -> int:
    async with gateway.http.get(gateway.url + SPEECH + query, headers=headers or {}) as r:
        await r.read()
        if r.status >= 400:
            assert (await r.json())["error"]["code"]
        return r.status


async def test_tokens_are_compared_exactly_and_the_scheme_is_case_insensitive(start_gateway):
    gateway = await start_gateway(auth_tokens=("s3cret",))
    for header in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret"):
        assert await _status(gateway, {"Authorization": header}) == 200, header
    for header in ("Bearer \u00a0", "Bearer s3cret\u00a0", "Bearer  ", "Bearer s3cre",
                   "Bearer s3cret x", "Basic s3cret", "Bearer"):
        assert await _status(gateway, {"Authorization": header}) == 401, header
    assert await _status(gateway, query="&access_token=%20") == 401
    assert await _status(gateway, query="&access_token=s3cret") == 200


async def test_a_jwt_lifetime_is_capped_and_aud_iss_are_checked(start_gateway):
    gateway = await start_gateway(auth_jwt_secret=SECRET, auth_jwt_max_lifetime_s=3600,
                                  auth_jwt_audience="gw", auth_jwt_issuer="me")
    now = int(time.time())

    def bearer(**claims) -> dict:
        return {"Authorization": "Bearer " + jwt.encode(claims, SECRET, algorithm="HS256")}

    assert await _status(gateway, bearer(exp=now + 600, aud="gw", iss="me")) == 200
    assert await _status(gateway, bearer(exp=10**30, aud="gw", iss="me")) == 401
    assert await _status(gateway, bearer(exp=now + 7200, aud="gw", iss="me")) == 401
    assert await _status(gateway, bearer(exp=now + 600, aud="other", iss="me")) == 401
    assert await _status(gateway, bearer(exp=now + 600, aud="gw", iss="else")) == 401
    assert await _status(gateway, bearer(exp=now + 600, iss="me")) == 401  # aud required


async def test_an_authorization_header_that_is_not_utf8_is_a_401_json(start_gateway, caplog):
    import asyncio

    gateway = await start_gateway(auth_tokens=("s3cret",))
    url = urlsplit(gateway.url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(b"GET " + SPEECH.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer \xff\xfe\xc3\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:60]
    assert b'"invalid_token"' in answer
    assert "Traceback" not in caplog.text and "unhandled" not in caplog.text
