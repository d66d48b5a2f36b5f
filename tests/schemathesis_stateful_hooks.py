"""Schemathesis hooks for the stateful run (``make fuzz``): the SDP bodies are text (the
shared serializer), and most offers generated for ``POST /v1/sessions`` are replaced by a real
Chromium offer, so sessions exist and the links Schemathesis infers from their ``Location``
(state, trickle, speech, utterances, events, DELETE) are followed with real session ids."""

from __future__ import annotations

import random
from pathlib import Path

import schemathesis

from tests import schemathesis_hooks  # noqa: F401 (registers the text serializer)

OFFERS = [p.read_text() for p in sorted(
    (Path(__file__).resolve().parent.parent / "sdp").glob("chromium-*.offer.sdp"))]
_RNG = random.Random(1)


@schemathesis.hook
def map_body(ctx, body):
    operation = ctx.operation
    if operation is not None and operation.method.upper() == "POST" and (
            operation.path == "/v1/sessions") and _RNG.random() < 0.8:
        offer = _RNG.choice(OFFERS)
        return offer if isinstance(body, str) else {"type": "offer", "sdp": offer}
    return body
