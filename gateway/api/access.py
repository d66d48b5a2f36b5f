"""Who may call the API and how often: CORS for players on other origins, bearer tokens
(RFC 6750: static tokens and JWT HS256), per-address rate limits, the drain state.

Open routes (no token): the preflight (OPTIONS), ``/healthz``, ``/metrics``, the API document
and viewer, the demo page and its files, ``/v1/voices``. Every route that creates or touches a
session, and the HTTP speech routes, need a token when tokens are configured.
"""

from __future__ import annotations

import hmac
import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import jwt
from aiohttp import web

from gateway.api.errors import ApiError, Handler
from gateway.realtime.keys import PREFIX as EPHEMERAL_PREFIX
from gateway.realtime.keys import EphemeralKeys

#: where an ephemeral key (``ek_…``, gateway/realtime/keys.py) is a bearer token
EPHEMERAL_PATHS = ("/v1/realtime", "/v1/realtime/calls")
OPEN_PREFIXES = ("/healthz", "/metrics", "/openapi.json", "/docs", "/web/", "/v1/voices")
ALLOW_HEADERS = "Authorization, Content-Type, If-Match, OpenAI-Beta"
EXPOSE_HEADERS = "Location, ETag, Link, Retry-After, Accept-Post"


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    cors_origins: tuple[str, ...] = ("*",)
    tokens: tuple[str, ...] = ()
    jwt_secret: str | None = None
    sessions_per_s: float = 0.0  # per client address; 0: unlimited
    speech_per_s: float = 0.0
    #: Realtime ephemeral keys: good as bearers for EPHEMERAL_PATHS only
    ephemeral: EphemeralKeys | None = None

    @property
    def auth_required(self) -> bool:
        return bool(self.tokens) or self.jwt_secret is not None


def _is_open(request: web.Request) -> bool:
    path = request.path
    return request.method == "OPTIONS" or path == "/" or path.startswith(OPEN_PREFIXES)


def _allowed_origin(policy: AccessPolicy, origin: str | None) -> str | None:
    if origin is None:
        return None
    if "*" in policy.cors_origins:
        return "*"
    return origin if origin in policy.cors_origins else None


def cors_middleware(policy: AccessPolicy) -> web.middleware:  # type: ignore[valid-type]
    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = _allowed_origin(policy, request.headers.get("Origin"))
        if request.method == "OPTIONS":
            response: web.StreamResponse = web.Response(status=204)
            response.headers["Allow"] = _allowed_methods(request)
            if request.path.rstrip("/") == "/v1/sessions":
                response.headers["Accept-Post"] = "application/sdp"
            if origin is not None:
                response.headers["Access-Control-Allow-Methods"] = response.headers["Allow"]
                response.headers["Access-Control-Allow-Headers"] = ALLOW_HEADERS
                response.headers["Access-Control-Max-Age"] = "600"
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = exc
                if origin is not None:
                    _cors_headers(response, origin)
                raise
        if origin is not None:
            _cors_headers(response, origin)
        return response

    return cors


def _allowed_methods(request: web.Request) -> str:
    """The methods the requested resource has (its routes'), OPTIONS included."""
    methods = {"OPTIONS"}
    refused = getattr(request.match_info, "http_exception", None)  # 405: no OPTIONS route
    if isinstance(refused, web.HTTPMethodNotAllowed):
        methods |= set(refused.allowed_methods)
    else:
        resource = getattr(getattr(request.match_info, "route", None), "resource", None)
        if resource is not None:
            methods |= {r.method for r in resource}
    return ", ".join(sorted(methods - {"HEAD", "*"}))


def _cors_headers(response: web.StreamResponse, origin: str) -> None:
    if response.prepared:  # a streamed response set its headers when it started
        return
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
    if origin != "*":
        response.headers["Vary"] = "Origin"


class TokenCheck:
    def __init__(self, policy: AccessPolicy) -> None:
        self._tokens = [t.encode() for t in policy.tokens]
        self._secret = policy.jwt_secret
        self._ephemeral = policy.ephemeral

    def check(self, header: str | None, path: str = "") -> None:
        challenge = 'Bearer realm="voice-gateway"'
        if not header or not header.startswith("Bearer "):
            raise ApiError(401, "unauthorized", "a bearer token is required (Authorization: "
                           "Bearer <token>)", {"WWW-Authenticate": challenge})
        token = header[7:].strip()
        invalid = {"WWW-Authenticate": f'{challenge}, error="invalid_token"'}
        if token.startswith(EPHEMERAL_PREFIX) and self._ephemeral is not None:
            if path.rstrip("/") in EPHEMERAL_PATHS and self._ephemeral.get(token) is not None:
                return
            raise ApiError(401, "invalid_token", "the ephemeral key is unknown, expired, or "
                           "not good here (only for the Realtime calls and WebSocket)", invalid)
        raw = token.encode()
        if any(hmac.compare_digest(raw, t) for t in self._tokens):
            return
        if self._secret is not None and token.count(".") == 2:
            try:
                jwt.decode(token, self._secret, algorithms=["HS256"],
                           options={"require": ["exp"]})
                return
            except jwt.ExpiredSignatureError:
                raise ApiError(401, "token_expired", "the token has expired", invalid) from None
            except jwt.InvalidTokenError as exc:
                raise ApiError(401, "invalid_token", f"the token is not valid: {exc}",
                               invalid) from None
        raise ApiError(401, "invalid_token", "the token is not valid", invalid)


def _credentials(request: web.Request) -> str | None:
    """The Authorization header; for a GET without one, RFC 6750 section 2.3's
    ``access_token`` query parameter -- what an ``<audio src>`` or an ``EventSource`` (neither
    can send headers) carries. Never for requests that change state: a token in a URL ends up
    in histories and logs, so it may only read."""
    header = request.headers.get("Authorization")
    if header is None and request.method in ("GET", "HEAD"):
        token = request.query.get("access_token") or _subprotocol_key(request)
        if token:
            return f"Bearer {token}"
    return header


def _subprotocol_key(request: web.Request) -> str | None:
    """A browser's Realtime WebSocket cannot send headers: OpenAI's SDKs put the key in a
    subprotocol, ``openai-insecure-api-key.<key>`` (gateway/realtime)."""
    for protocol in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
        protocol = protocol.strip()
        if protocol.startswith("openai-insecure-api-key."):
            return protocol.removeprefix("openai-insecure-api-key.") or None
    return None


def auth_middleware(policy: AccessPolicy) -> web.middleware:  # type: ignore[valid-type]
    check = TokenCheck(policy)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if policy.auth_required and not _is_open(request):
            check.check(_credentials(request), request.path)
        return await handler(request)

    return auth


class RateLimiter:
    """Token buckets per client address (``rate`` per second, a burst of twice as many, at
    least 1), the least recently seen forgotten past ``max_clients``."""

    def __init__(self, rate: float, max_clients: int = 10_000) -> None:
        self.rate = rate
        self.burst = max(1.0, 2 * rate)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._max = max_clients

    def retry_after(self, client: str, now: float | None = None) -> float:
        """0 if ``client`` may go ahead now (and charge it), else the seconds to wait."""
        now = time.monotonic() if now is None else now
        tokens, at = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[client] = (tokens - 1.0, now)
            wait = 0.0
        else:
            self._buckets[client] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return wait


def _limited(request: web.Request) -> str | None:
    """Which limit a request counts against: 'sessions', 'speech' or None."""
    path = request.path.rstrip("/")
    if request.method == "GET" and path == "/v1/realtime" and "call_id" not in request.query:
        return "sessions"  # a Realtime WebSocket is a new session
    if request.method != "POST":
        return None
    if path in ("/v1/sessions", "/v1/realtime", "/v1/realtime/calls"):
        return "sessions"
    if path in ("/v1/audio/speech", "/v1/speech/stream") or path.endswith("/speech"):
        return "speech"
    return None


def rate_limit_middleware(policy: AccessPolicy) -> web.middleware:  # type: ignore[valid-type]
    limiters = {
        name: RateLimiter(rate)
        for name, rate in (("sessions", policy.sessions_per_s), ("speech", policy.speech_per_s))
        if rate > 0
    }

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        kind = _limited(request)
        limiter = limiters.get(kind) if kind else None
        if limiter is not None:
            wait = limiter.retry_after(request.remote or "?")
            if wait > 0:
                raise ApiError(429, "rate_limited",
                               f"too many {kind} requests from this address; retry later",
                               {"Retry-After": str(max(1, math.ceil(wait)))})
        return await handler(request)

    return rate_limit


def middlewares(policy: AccessPolicy) -> Sequence[web.middleware]:  # type: ignore[valid-type]
    """Outermost first: CORS answers preflights and decorates every response, then auth,
    then the rate limits."""
    return (cors_middleware(policy), auth_middleware(policy), rate_limit_middleware(policy))
