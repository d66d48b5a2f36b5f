"""A negotiated session's SDP descriptions kept packed (aiortc_compat/descriptions.py): every
field comes back as it was on the first read, in a small fraction of the parsed object's
memory, and a session still takes a trickled candidate (which reads the offer) and packs it
again."""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from aiortc import sdp

from gateway import aiortc_compat
from gateway.aiortc_compat.descriptions import LOCAL, REMOTE, PackedDescription

CORPUS = sorted((Path(__file__).resolve().parent.parent / "sdp").glob("*.sdp"))


def fields(obj: Any) -> Any:
    """Every field, recursively, as comparable values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__,
                tuple((f.name, fields(getattr(obj, f.name))) for f in dataclasses.fields(obj)))
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return (type(obj).__name__, tuple(sorted((k, fields(v)) for k, v in vars(obj).items()
                                                 if k != "_packed")))
    if isinstance(obj, list | tuple):
        return tuple(fields(x) for x in obj)
    if isinstance(obj, dict):
        return tuple(sorted((k, fields(v)) for k, v in obj.items()))
    return obj


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_a_packed_description_reads_back_every_field(path):
    parsed = sdp.SessionDescription.parse(path.read_text())
    parsed.type = "offer"
    packed = PackedDescription(parsed)
    assert packed.packed
    assert packed.type == "offer" and not packed.packed  # the first read unpacks it
    assert fields(packed)[1] == fields(parsed)[1]
    assert str(packed) == str(parsed)


def test_the_firefox_style_offer_keeps_its_rtcp_mux():
    """Why a pickle and not the SDP text: aiortc writes ``a=rtcp-mux`` only beside an
    ``a=rtcp`` line, so this offer re-serialised and parsed again would lose it."""
    parsed = sdp.SessionDescription.parse(
        (CORPUS[0].parent / "firefox-style-recvonly.offer.sdp").read_text())
    assert parsed.media[0].rtcp_mux
    assert not sdp.SessionDescription.parse(str(parsed)).media[0].rtcp_mux
    assert PackedDescription(parsed).media[0].rtcp_mux


def heap_of(make) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = make()
        gc.collect()
        size = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del kept
    return size


def test_packed_it_keeps_a_fraction_of_the_parsed_memory():
    text = (CORPUS[0].parent / "chromium-156-recvonly.offer.sdp").read_text()
    parsed = heap_of(lambda: sdp.SessionDescription.parse(text))
    packed = heap_of(lambda: PackedDescription(sdp.SessionDescription.parse(text)))
    assert parsed > 8_000  # (≈ 17.5 KB)
    assert packed < parsed / 4, (packed, parsed)


async def test_a_session_keeps_them_packed_and_takes_a_trickled_candidate(gateway, connect):
    client = await connect()
    session = next(iter(gateway.registry))
    pc = session.webrtc.pc
    kept = [getattr(pc, name) for name in LOCAL + REMOTE]
    described = [d for d in kept if d is not None]
    assert len(described) == 2  # the answer (current), the offer (aiortc leaves it pending)
    assert all(isinstance(d, PackedDescription) and d.packed for d in described)
    assert aiortc_compat.pack_descriptions(pc) == 0  # (already packed)
    frag = (f"m=audio 9 RTP/AVP 0\r\na=mid:{session.webrtc.offer.audio_mid}\r\n"
            "a=candidate:1 1 udp 2122260223 127.0.0.1 40000 typ host\r\n")
    headers = {"Content-Type": "application/trickle-ice-sdpfrag"}
    async with gateway.http.patch(client.session_url, data=frag, headers=headers) as r:
        assert r.status == 204, await r.text()
    remote = next(d for d in (getattr(pc, name) for name in REMOTE) if d is not None)
    assert isinstance(remote, PackedDescription) and remote.packed  # packed again
    assert any(c.port == 40000 for c in remote.media[0].ice_candidates)
    result = await client.say("still speaking", voice="tone")
    assert (await client.wait_utterance(result.utterance["id"]))["state"] == "done"
