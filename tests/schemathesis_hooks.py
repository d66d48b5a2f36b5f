"""Schemathesis hooks (SCHEMATHESIS_HOOKS=tests.schemathesis_hooks): the SDP media types are
text bodies."""

import schemathesis


@schemathesis.serializer("application/sdp", "application/trickle-ice-sdpfrag")
def text_body(ctx, value):
    return value.encode() if isinstance(value, str) else bytes(str(value), "utf-8")
