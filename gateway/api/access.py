"""Who may call the API and how often: CORS for players on other origins, bearer tokens
(RFC 6750: static tokens and JWT HS256), per-address rate limits, the drain state.

Open routes (no token): the preflight (OPTIONS), ``/healthz``, ``/metrics``, the API document
and viewer, the demo page and its files, ``/v1/voices``. Every route that creates or touches a
session, and the HTTP speech routes, need a token when tokens are configured.

Rights (broadcast channels, docs/channels.md): a token may *speak* (create sessions and
channels, make either say something) and/or *listen* (join a channel: WHEP, HTTP, SSE). A JWT's
``"scope"`` claim is ``"listen"``, ``"speak"`` or both space-separated (both when absent); its
optional ``"channel"`` claim binds it to that one channel (and to no session route). Static
tokens have both rights; ``--listen-token`` ones only listen. The grant is in
``request[GRANT]``; routes outside ``/v1/channels`` need ``speak`` here, channel routes check
their own right (``require``).
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import jwt
from aiohttp import web

from gateway.api.client_address import TrustedProxies
from gateway.api.errors import ApiError, Handler
from gateway.api.rate_store import BucketStore, LocalBuckets
from gateway.config import B64TOKEN
from gateway.realtime.keys import PREFIX as EPHEMERAL_PREFIX
from gateway.realtime.keys import EphemeralKeys

CHANNEL_PREFIX = "/v1/channels"
#: where an ephemeral key (``ek_…``, gateway/realtime/keys.py) is a bearer token
EPHEMERAL_PATHS = ("/v1/realtime", "/v1/realtime/calls")

OPEN_PREFIXES = ("/healthz", "/metrics", "/openapi.json", "/docs", "/web/", "/v1/voices",
                 "/v1/elevenlabs/voices")
ALLOW_HEADERS = "Authorization, Content-Type, If-Match, xi-api-key, OpenAI-Beta"
EXPOSE_HEADERS = "Location, ETag, Link, Retry-After, Accept-Post"


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    cors_origins: tuple[str, ...] = ("*",)
    tokens: tuple[str, ...] = ()
    jwt_secret: str | None = None
    listen_tokens: tuple[str, ...] = ()
    jwt_max_lifetime_s: float = 86_400.0  # a JWT's exp at most this far ahead (0: no cap)
    jwt_audience: str | None = None  # required aud claim, when set
    jwt_issuer: str | None = None  # required iss claim, when set
    sessions_per_s: float = 0.0  # per client address; 0: unlimited
    speech_per_s: float = 0.0
    requests_per_s: float = 0.0  # every other route that does work
    trusted_proxies: tuple[str, ...] = ()  # X-Forwarded-For is believed from these
    #: Realtime ephemeral keys: good as bearers for EPHEMERAL_PATHS only
    ephemeral: EphemeralKeys | None = None

    def __post_init__(self) -> None:
        # an unset $TOKEN must never configure auth open: refuse to start instead
        for token in (*self.tokens, *self.listen_tokens):
            if not B64TOKEN.fullmatch(token):
                raise ValueError(
                    "an auth token must be 1+ of A-Z a-z 0-9 - . _ ~ + / (then = padding); "
                    f"got {'an empty or whitespace token' if not token.strip() else repr(token)}")
        if self.jwt_secret is not None and not self.jwt_secret.strip():
            raise ValueError("the JWT secret is empty or whitespace")

    @property
    def auth_required(self) -> bool:
        return bool(self.tokens) or bool(self.listen_tokens) or self.jwt_secret is not None


@dataclass(frozen=True, slots=True)
class Grant:
    """What a request's token allows."""

    speak: bool = True
    listen: bool = True
    channel: str | None = None  # bound to this channel only

    def allows(self, right: str, channel: str | None = None) -> bool:
        if not getattr(self, right):
            return False
        return self.channel is None or (channel is not None and channel == self.channel)


FULL = Grant()
GRANT = web.RequestKey("grant", Grant)


def grant_of(request: web.Request) -> Grant:
    return request.get(GRANT) or FULL


def require(request: web.Request, right: str, channel: str | None = None) -> Grant:
    """403 unless the request's token has ``right`` (``speak`` or ``listen``) on ``channel``
    (None: on no particular channel -- a channel-bound token has no such right)."""
    grant = grant_of(request)
    if not grant.allows(right, channel):
        where = f" on channel {channel!r}" if channel is not None else ""
        raise ApiError(403, "forbidden", f"this token may not {right}{where}")
    return grant


def _claims_grant(claims: dict[str, object]) -> Grant:
    scope = claims.get("scope")
    channel = claims.get("channel")
    if scope is None:
        rights = {"speak", "listen"}
    elif isinstance(scope, str):
        rights = set(scope.split())
    else:
        raise ApiError(401, "invalid_token", 'the "scope" claim must be a string')
    if not rights or not rights <= {"speak", "listen"}:
        raise ApiError(401, "invalid_token",
                       'the "scope" claim must be "listen", "speak" or both')
    if channel is not None and not isinstance(channel, str):
        raise ApiError(401, "invalid_token", 'the "channel" claim must be a string')
    return Grant("speak" in rights, "listen" in rights, channel)


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
    """RFC 6750 bearer tokens: the scheme case-insensitive (RFC 7235 §2.1), the token exactly
    as sent (a b64token: nothing trimmed, nothing else accepted), compared in constant time
    with each static token, else checked as an HS256 JWT (exp required, its lifetime capped,
    aud/iss when configured)."""

    def __init__(self, policy: AccessPolicy) -> None:
        self._tokens = [t.encode() for t in policy.tokens]
        self._listen_tokens = [t.encode() for t in policy.listen_tokens]
        self._secret = policy.jwt_secret
        self._ephemeral = policy.ephemeral
        self._policy = policy

    def check(self, header: str | None, path: str = "") -> Grant:
        challenge = 'Bearer realm="voice-gateway"'
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer":
            raise ApiError(401, "unauthorized", "a bearer token is required (Authorization: "
                           "Bearer <token>)", {"WWW-Authenticate": challenge})
        token = token.lstrip(" ")
        invalid = {"WWW-Authenticate": f'{challenge}, error="invalid_token"'}
        if token.startswith(EPHEMERAL_PREFIX) and self._ephemeral is not None:
            if path.rstrip("/") in EPHEMERAL_PATHS and self._ephemeral.get(token) is not None:
                return FULL  # (good on those two paths only)
            raise ApiError(401, "invalid_token", "the ephemeral key is unknown, expired, or "
                           "not good here (only for the Realtime calls and WebSocket)", invalid)
        if not B64TOKEN.fullmatch(token):  # also a header that was not UTF-8 (surrogates)
            raise ApiError(401, "invalid_token", "the token is not valid", invalid)
        raw = token.encode("ascii")
        if any(hmac.compare_digest(raw, t) for t in self._tokens):
            return FULL
        if any(hmac.compare_digest(raw, t) for t in self._listen_tokens):
            return Grant(speak=False, listen=True)
        if self._secret is not None and token.count(".") == 2:
            policy = self._policy
            try:
                claims = jwt.decode(
                    token, self._secret, algorithms=["HS256"], audience=policy.jwt_audience,
                    issuer=policy.jwt_issuer,
                    options={"require": ["exp"] + (["aud"] if policy.jwt_audience else [])
                             + (["iss"] if policy.jwt_issuer else [])})
                ahead = float(claims["exp"]) - time.time()
                if policy.jwt_max_lifetime_s > 0 and ahead > policy.jwt_max_lifetime_s:
                    raise ApiError(401, "invalid_token", f"the token's exp is {ahead:.0f} s "
                                   f"ahead; at most {policy.jwt_max_lifetime_s:g} are accepted "
                                   "(--auth-jwt-max-lifetime)", invalid)
                return _claims_grant(claims)
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
    if header is None and "xi-api-key" in request.headers:
        # ElevenLabs' clients (Pipecat, LiveKit) send their key so: it is our bearer token
        return f"Bearer {request.headers['xi-api-key']}"
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
            grant = check.check(_credentials(request), request.path)
            request[GRANT] = grant
            if not request.path.startswith(CHANNEL_PREFIX):
                require(request, "speak")
        return await handler(request)

    return auth


RATE_STORE = web.AppKey("rate_store", BucketStore)  # type: ignore[type-abstract]


def _limited(request: web.Request) -> str | None:
    """Which limit a request counts against: 'sessions', 'speech', 'requests' (every other
    route that does work: a session's state, trickle, events, utterances, DELETE) or None
    (open routes: health, metrics, the page, the API document, the voice list). A new
    Realtime socket or call is a new session."""
    path = request.path.rstrip("/")
    method = request.method
    if method == "OPTIONS" or _is_open(request):
        return None
    if method == "GET" and path == "/v1/realtime" and "call_id" not in request.query:
        return "sessions"
    if (method == "POST" and path in ("/v1/sessions", "/v1/realtime", "/v1/realtime/calls")) \
            or (path.startswith(CHANNEL_PREFIX) and path.endswith("/whep")):
        return "sessions"
    if path == "/v1/audio/speech" and method in ("GET", "HEAD", "POST"):
        return "speech"  # a GET (<audio src>) speaks as much as a POST
    if method == "POST" and (path == "/v1/speech/stream" or path.endswith("/speech")):
        return "speech"
    if "/text-to-speech/" in path:  # the ElevenLabs-compatible HTTP routes
        return "speech"
    return "requests"


_LOCAL = LocalBuckets()  # an app built without a store (create_app always sets one)


def rate_limit_middleware(policy: AccessPolicy) -> web.middleware:  # type: ignore[valid-type]
    rates = {"sessions": policy.sessions_per_s, "speech": policy.speech_per_s,
             "requests": policy.requests_per_s}
    proxies = TrustedProxies(policy.trusted_proxies)

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        kind = _limited(request)
        rate = rates.get(kind, 0.0) if kind else 0.0
        if kind and rate > 0:
            store = request.app.get(RATE_STORE) or _LOCAL
            wait = await store.retry_after(kind, proxies.client_of(request), rate)
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
