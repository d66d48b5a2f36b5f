"""The load benchmark's baseline: the gateway's two endpoints on stock aiortc.

``POST /v1/sessions`` (application/sdp offer -> 201 answer, Location), ``POST
/v1/sessions/{id}/speech`` (starts a 440 Hz tone), ``DELETE /v1/sessions/{id}``, ``GET /healthz``.
The track is a stock ``AudioStreamTrack`` subclass producing PCM frames (48 kHz s16 mono, 960
samples = 20 ms) on AudioStreamTrack's own absolute schedule, so aiortc does all the work a
naive server leaves to it: resampling, its audio-level loop, Opus encoding in its executor,
packetising. Silence (still encoded) until speech is asked for. Host candidates on 127.0.0.1
only, no STUN.

    python -m bench.baseline_server --port 8081
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fractions
import logging
import secrets
import time

import numpy as np
from aiohttp import web
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack, MediaStreamError
from av import AudioFrame

from gateway import aiortc_compat

RATE = 48_000
SAMPLES = 960  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)
TONE_HZ = 440.0


def _tone_frames() -> list[bytes]:
    """One period of 20 ms frames: 440 Hz is 8.8 cycles a frame, so the phase repeats every 5."""
    n = np.arange(5 * SAMPLES)
    pcm = (np.sin(2 * np.pi * TONE_HZ * n / RATE) * 0.3 * 32767).astype("<i2")
    return [pcm[i * SAMPLES : (i + 1) * SAMPLES].tobytes() for i in range(5)]


TONE = _tone_frames()
SILENCE = bytes(SAMPLES * 2)


class ToneTrack(AudioStreamTrack):
    """AudioStreamTrack's pacing (absolute schedule on time.time()), 48 kHz tone frames."""

    def __init__(self) -> None:
        super().__init__()
        self.speaking = False
        self._index = 0

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if hasattr(self, "_timestamp"):
            self._timestamp += SAMPLES
            wait = self._start + (self._timestamp / RATE) - time.time()
            await asyncio.sleep(wait)
        else:
            self._start = time.time()
            self._timestamp = 0
        frame = AudioFrame(format="s16", layout="mono", samples=SAMPLES)
        if self.speaking:
            frame.planes[0].update(TONE[self._index % 5])
            self._index += 1
        else:
            frame.planes[0].update(SILENCE)
        frame.pts = self._timestamp
        frame.sample_rate = RATE
        frame.time_base = TIME_BASE
        return frame


class BaselineSession:
    def __init__(self) -> None:
        self.id = secrets.token_urlsafe(12)
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.track = ToneTrack()

    async def answer(self, offer: str) -> str:
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        self.pc.addTrack(self.track)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    async def close(self) -> None:
        self.track.stop()
        await self.pc.close()


SESSIONS = web.AppKey("sessions", dict)


def _session(request: web.Request) -> BaselineSession:
    session = request.app[SESSIONS].get(request.match_info["sid"])
    if session is None:
        raise web.HTTPNotFound(text="no such session")
    return session


async def create_session(request: web.Request) -> web.Response:
    if request.content_type != "application/sdp":
        raise web.HTTPUnsupportedMediaType(text="use application/sdp")
    session = BaselineSession()
    sessions = request.app[SESSIONS]
    try:
        answer = await session.answer(await request.text())
    except Exception as exc:
        await session.close()
        raise web.HTTPBadRequest(text=f"offer refused: {exc}") from exc
    sessions[session.id] = session

    @session.pc.on("connectionstatechange")
    async def on_state() -> None:
        if session.pc.connectionState in ("failed", "closed"):
            sessions.pop(session.id, None)
            await session.close()

    return web.Response(
        status=201, text=answer, content_type="application/sdp",
        headers={"Location": f"/v1/sessions/{session.id}"},
    )


async def speak(request: web.Request) -> web.Response:
    session = _session(request)
    body = await request.json()
    if not isinstance(body, dict) or not str(body.get("text", "")).strip():
        raise web.HTTPBadRequest(text="text must be a non-empty string")
    session.track.speaking = True
    return web.json_response({"id": secrets.token_hex(6), "state": "playing"}, status=202)


async def delete_session(request: web.Request) -> web.Response:
    session = _session(request)
    request.app[SESSIONS].pop(session.id, None)
    await session.close()
    return web.Response(status=204)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "sessions": len(request.app[SESSIONS])})


def create_app() -> web.Application:
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    app = web.Application()
    app[SESSIONS] = {}
    app.router.add_post("/v1/sessions", create_session)
    app.router.add_post("/v1/sessions/{sid}/speech", speak)
    app.router.add_delete("/v1/sessions/{sid}", delete_session)
    app.router.add_get("/healthz", healthz)

    async def lifecycle(app: web.Application) -> object:
        yield
        sessions = list(app[SESSIONS].values())
        app[SESSIONS].clear()
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    app.cleanup_ctx.append(lifecycle)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with contextlib.suppress(KeyboardInterrupt):
        web.run_app(create_app(), host=args.host, port=args.port, access_log=None,
                    print=None, handle_signals=True)


if __name__ == "__main__":
    main()
