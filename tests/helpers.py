"""Signal checks shared by tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np


def dominant_frequency(pcm: np.ndarray, rate: int) -> float:
    """Peak of the windowed spectrum, refined by parabolic interpolation (sub-bin accuracy)."""
    x = pcm.astype(np.float64)
    x -= x.mean()
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    k = int(np.argmax(spectrum[1:]) + 1)
    a, b, c = np.log(spectrum[k - 1 : k + 2] + 1e-12)
    offset = 0.5 * (a - c) / (a - 2 * b + c)
    return (k + offset) * rate / x.size


@contextlib.asynccontextmanager
async def events_channel_session(gateway: Any) -> AsyncIterator[tuple[str, list[dict]]]:
    """A recvonly aiortc peer with the offerer's ``events`` data channel, connected to a new
    session of ``gateway``: yields the session's URL and the channel's messages (as they
    arrive), once the channel is open; the peer is closed after."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="recvonly")
    channel = pc.createDataChannel("events")
    opened = asyncio.Event()
    messages: list[dict] = []
    channel.on("open", opened.set)
    channel.on("message", lambda m: messages.append(json.loads(m)))
    try:
        await pc.setLocalDescription(await pc.createOffer())
        async with gateway.http.post(f"{gateway.url}/v1/sessions", data=pc.localDescription.sdp,
                                     headers={"Content-Type": "application/sdp"}) as r:
            assert r.status == 201
            location = gateway.url + r.headers["Location"]
            answer = await r.text()
        await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        await asyncio.wait_for(opened.wait(), 10)
        yield location, messages
    finally:
        await pc.close()
