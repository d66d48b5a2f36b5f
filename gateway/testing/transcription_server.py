"""A stand-in OpenAI-compatible transcription server on loopback (what speaches /
faster-whisper-server and OpenAI itself answer), for tests and demos.

    python -m gateway.testing.transcription_server --port 8000 --text "hello there"

``POST /v1/audio/transcriptions`` with a multipart/form-data body: ``file`` (an audio file part;
WAV is decoded, other extensions of OpenAI's list are accepted unread), ``model`` (required),
optional ``language``, ``prompt``, ``response_format`` (``json`` -> ``{"text": ...}``, ``text``
-> plain text, ``verbose_json`` -> text plus task, language, duration, segments) and
``temperature``. Errors are OpenAI's JSON: ``{"error": {"message", "type", "param", "code"}}``
with 400 for a bad request, 404 for other paths, 405 for other methods.

The answer comes from ``StandInConfig.text`` or from ``answer(audio, fields)``; ``delay_ms``
holds each reply; ``faults`` injects ``http500``, ``http503``, ``bad_json`` (200 with a body that
is no JSON), ``no_text`` (JSON without "text"), ``hang`` (never answers) or ``drop`` (closes the
connection). ``requests`` records each request's raw body, parsed fields, file and decoded
audio.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
from aiohttp import web

from gateway.testing.cosyvoice_form import FormPart, parse_form
from gateway.testing.stand_in import HttpStandIn

PATH = "/v1/audio/transcriptions"
Fault = Literal["http500", "http503", "bad_json", "no_text", "hang", "drop"]
FAULTS: tuple[str, ...] = get_args(Fault)
EXTENSIONS = ("flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "wav", "webm")
FORMATS = ("json", "text", "verbose_json")


@dataclass
class StandInConfig:
    text: str = "hello world"
    delay_ms: float = 0.0
    #: If set, the text is ``answer(audio_int16, fields)`` (audio None for non-WAV files).
    answer: Callable[[np.ndarray | None, dict[str, str]], str] | None = None


@dataclass(eq=False)
class ReceivedTranscription:
    headers: dict[str, str]
    body: bytes
    fields: dict[str, str] = field(default_factory=dict)
    file: FormPart | None = None
    audio: np.ndarray | None = None
    sample_rate: int | None = None
    fault: Fault | None = None
    status: int | None = None
    outcome: str = "pending"  # completed, rejected, fault, cancelled


def _error(status: int, message: str, param: str | None = None,
           kind: str = "invalid_request_error") -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
    return web.Response(status=status, body=json.dumps(body).encode(),
                        content_type="application/json")


def read_wav(data: bytes) -> tuple[np.ndarray, int]:
    """int16 mono samples and rate of a PCM WAV file (first channel). Raises ValueError."""
    try:
        with wave.open(io.BytesIO(data)) as reader:
            if reader.getsampwidth() != 2:
                raise ValueError("only 16-bit WAV is read")
            raw = reader.readframes(reader.getnframes())
            channels, rate = reader.getnchannels(), reader.getframerate()
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"not a WAV file: {exc}") from exc
    return np.frombuffer(raw, dtype="<i2")[::channels].copy(), rate


class TranscriptionStandIn(HttpStandIn):
    FAULTS = FAULTS

    def __init__(self, config: StandInConfig | None = None, *, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.config = config or StandInConfig()
        super().__init__(host, port)
        self.requests: list[ReceivedTranscription] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path != PATH:
            return _error(404, f"Invalid URL ({request.method} {request.path})")
        if request.method != "POST":
            return _error(405, f"Method {request.method} not allowed")
        rec = ReceivedTranscription(dict(request.headers), await request.read())
        self.requests.append(rec)
        try:
            resp = await self._transcribe(request, rec)
        except asyncio.CancelledError:
            rec.outcome = "cancelled"
            raise
        rec.status = resp.status
        if rec.outcome == "pending":
            rec.outcome = "completed" if resp.status == 200 else "rejected"
        return resp

    async def _transcribe(self, request: web.Request,
                          rec: ReceivedTranscription) -> web.StreamResponse:
        content_type = request.headers.get("Content-Type", "")
        if not content_type.lower().startswith("multipart/form-data"):
            return _error(400, "Content-Type must be multipart/form-data")
        try:
            rec.fields, files = parse_form(content_type, rec.body)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"Could not parse multipart form: {exc}")
        rec.file = files.get("file")
        if rec.file is None:
            return _error(400, "you must provide a file", "file")
        if not rec.fields.get("model"):
            return _error(400, "you must provide a model parameter", "model")
        fmt = rec.fields.get("response_format", "json")
        if fmt not in FORMATS:
            return _error(400, f"response_format must be one of {', '.join(FORMATS)}",
                          "response_format")
        extension = (rec.file.filename or "").rpartition(".")[2].lower()
        if extension not in EXTENSIONS:
            return _error(400, f"Invalid file format. Supported formats: {list(EXTENSIONS)}",
                          "file")
        if extension == "wav":
            try:
                rec.audio, rec.sample_rate = read_wav(rec.file.data)
            except ValueError as exc:
                return _error(400, f"Invalid file: {exc}", "file")
        rec.fault = fault = self._next_fault()
        if self.config.delay_ms:
            await asyncio.sleep(self.config.delay_ms / 1000)
        if fault is not None:
            rec.outcome = "fault"
            return await self._fault(request, fault)
        cfg = self.config
        text = cfg.answer(rec.audio, rec.fields) if cfg.answer else cfg.text
        if fmt == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        body: dict[str, Any] = {"text": text}
        if fmt == "verbose_json":
            duration = len(rec.audio) / rec.sample_rate if rec.audio is not None \
                and rec.sample_rate else 0.0
            body = {"task": "transcribe", "language": rec.fields.get("language", "english"),
                    "duration": round(duration, 3), "text": text, "segments": []}
        return web.Response(body=json.dumps(body, ensure_ascii=False).encode(),
                            content_type="application/json")

    async def _fault(self, request: web.Request, fault: Fault) -> web.StreamResponse:
        if fault == "http500":
            return _error(500, "The server had an error processing your request.", None,
                          "server_error")
        if fault == "http503":
            return _error(503, "The engine is currently overloaded.", None, "server_error")
        if fault == "bad_json":
            return web.Response(text="<html>oops</html>", content_type="application/json")
        if fault == "no_text":
            return web.json_response({"result": "no text field"})
        if fault == "drop" and request.transport is not None:
            request.transport.close()
        await self._stopping.wait()  # hang (or wait for the cancel a drop brings)
        raise ConnectionResetError("stand-in ended the exchange without a reply")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--text", default="hello world", help="the transcript every request gets")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--fault", choices=FAULTS, default=None, help="inject into every request")
    args = p.parse_args(argv)

    async def serve() -> None:
        standin = TranscriptionStandIn(StandInConfig(text=args.text, delay_ms=args.delay_ms),
                                       host=args.host, port=args.port)
        standin.faults = args.fault
        async with standin:
            print(f"transcription stand-in: {standin.url}", flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
