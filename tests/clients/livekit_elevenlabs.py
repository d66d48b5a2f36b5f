"""LiveKit Agents' ``elevenlabs.TTS``, unmodified, against the gateway (run by
tests/test_elevenlabs_clients.py with the clients' own venv's python; prints one JSON object).

    python livekit_elevenlabs.py BASE_URL MODE [VOICE] [ENCODING]

MODE: ``stream`` (text pushed a few characters at a time, flush, end_input), ``synthesize``
(the HTTP route), ``two`` (two streams at once on one TTS: two contexts on its one socket),
``close`` (the TTS, and with it its socket, closed after the first audio, mid-context).
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp
import numpy as np
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import elevenlabs

TEXT = ("Hello there, this is the gateway speaking through LiveKit. "
        "Every word is timed, and the audio arrives as the text is written.")


def frame_info(frames) -> dict:
    pcm = np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames]) \
        if frames else np.zeros(0, dtype=np.int16)
    rates = sorted({f.sample_rate for f in frames})
    words = [{"text": str(t), "start": t.start_time, "end": t.end_time}
             for f in frames for t in f.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    return {"rates": rates, "samples": int(pcm.size),
            "rms": float(np.sqrt(np.mean(pcm.astype(float) ** 2))) if pcm.size else 0.0,
            "pcm_b64": __import__("base64").b64encode(pcm.tobytes()).decode(),
            "words": words}


async def run_stream(tts, text: str, close_after_first: bool = False) -> dict:
    stream = tts.stream()
    frames, finals = [], 0

    async def push() -> None:
        for i in range(0, len(text), 4):  # an LLM's pace: a few characters at a time
            stream.push_text(text[i:i + 4])
            await asyncio.sleep(0.01)
        stream.flush()
        stream.end_input()

    pusher = asyncio.create_task(push())
    async for ev in stream:
        frames.append(ev.frame)
        finals += ev.is_final
        if close_after_first:
            break
    if close_after_first:  # mid-context: the socket goes with the TTS
        await tts.aclose()
    await stream.aclose()
    pusher.cancel()
    return {**frame_info(frames), "finals": finals, "segments": 1}


async def main() -> None:
    base_url, mode = sys.argv[1], sys.argv[2]
    voice = sys.argv[3] if len(sys.argv) > 3 else elevenlabs.DEFAULT_VOICE_ID
    encoding = sys.argv[4] if len(sys.argv) > 4 else "pcm_24000"
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.TTS(api_key="s3cret", base_url=base_url, voice_id=voice,
                             model="eleven_flash_v2_5", encoding=encoding,
                             http_session=session)
        if mode == "stream":
            out = await run_stream(tts, TEXT)
        elif mode == "synthesize":
            frames = []
            async with tts.synthesize(TEXT) as s:
                async for ev in s:
                    frames.append(ev.frame)
            out = frame_info(frames)
        elif mode == "two":
            a, b = await asyncio.gather(run_stream(tts, TEXT), run_stream(
                tts, "A second reply, spoken at the same time on the same socket."))
            out = {"a": a, "b": b}
        elif mode == "close":
            out = await run_stream(tts, TEXT * 3, close_after_first=True)
        else:
            raise SystemExit(f"unknown mode {mode}")
        await tts.aclose()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
