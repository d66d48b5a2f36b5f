"""Every error leaves the API as JSON: ``{"error": {"code": "...", "message": "..."}}``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(Exception):
    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response(
        {"error": {"code": code, "message": message}}, status=status, headers=headers
    )


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.headers)
    except web.RequestPayloadError as exc:  # a body not valid in its Content-Encoding (gzip)
        log.info("unreadable body on %s %s: %s", request.method, request.path, exc)
        return error_response(400, "invalid_body", "the body could not be read: it is not "
                              "valid in its Content-Encoding, or was cut short")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _CODES.get(exc.status, "http_error")
        message = exc.text or exc.reason
        if exc.status == 413:
            message = f"the request body is larger than this endpoint accepts ({exc.text})"
        response = error_response(exc.status, code, message)
        for header in ("Allow",):
            if header in exc.headers:
                response.headers[header] = exc.headers[header]
        return response
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "the gateway hit an unexpected error")
