"""CosyVoice over its FastAPI server (``runtime/python/fastapi/server.py``).

The request is what the official ``client.py`` sends: ``GET`` (or POST, configurable) to
``/inference_<mode>`` with the fields as an urlencoded form, or -- when a prompt WAV is attached
-- a multipart form whose bytes match ``requests``/urllib3's encoding (fields first, then the
file part ``name="prompt_wav"; filename="prompt_wav"``, ``application/octet-stream``).

The reply is headerless PCM streamed as the model produces it; bytes are yielded as they arrive,
odd byte counts included (the media pipeline rejoins split samples). The rate is the configured
one unless the reply carries ``X-Custom-Header-sampleRate`` (some forks), which wins. Forks'
``/stream/...`` endpoints send float32 samples with that header; with ``sample_format="f32"``
they are converted here to int16 (``x * 32768``, clipped and truncated like the server's own
int16 path), carrying partial floats across chunks. A 200 reply whose Content-Type is JSON or
text is an error page, never audio. Blank text yields nothing and sends no request.
"""

from __future__ import annotations

import asyncio
import binascii
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import numpy as np

from gateway.tts.base import PcmChunk, SynthesisError
from gateway.tts.cosyvoice_spec import MODE_FIELDS, CosyVoiceConfig

log = logging.getLogger(__name__)

RATE_HEADER = "X-Custom-Header-sampleRate"
_ERROR_BODY_LIMIT = 64 * 1024


def encode_form(fields: list[tuple[str, str]], wav: bytes | None) -> tuple[bytes, str]:
    """``(body, content_type)`` exactly as ``requests.request(..., data=, files=)`` builds it."""
    if wav is None:
        return urlencode(fields).encode("ascii"), "application/x-www-form-urlencoded"
    boundary = binascii.hexlify(os.urandom(16)).decode()
    out = bytearray()
    for name, value in fields:
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode("utf-8") + b"\r\n"
    out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"prompt_wav\"; "
            f'filename="prompt_wav"\r\nContent-Type: application/octet-stream\r\n\r\n').encode()
    out += wav + f"\r\n--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def summarise_error_body(body: bytes, content_type: str) -> str:
    """One line out of a FastAPI error body (``{"detail": [...]}``) or any other text."""
    text = body.decode("utf-8", "replace").strip()
    if "json" in content_type:
        try:
            detail = json.loads(text).get("detail")
        except (ValueError, AttributeError):
            detail = None
        if isinstance(detail, list):
            items = [d for d in detail if isinstance(d, dict)]
            return "; ".join(
                f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '?')}"
                for d in items[:6]) or text[:300]
        if isinstance(detail, str):
            return detail[:300]
    return " ".join(text.split())[:300] or "(empty body)"


class _Float32ToInt16:
    """float32 LE bytes -> int16 LE bytes, keeping a partial sample between chunks."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        data = self._carry + data
        usable = len(data) - len(data) % 4
        self._carry = data[usable:]
        floats = np.nan_to_num(np.frombuffer(data[:usable], dtype="<f4"))
        return np.clip(floats * 32768.0, -32768, 32767).astype("<i2").tobytes()


class CosyVoiceHttp:
    """A Synthesizer backed by a CosyVoice FastAPI server. One aiohttp session per backend."""

    def __init__(self, config: CosyVoiceConfig, name: str) -> None:
        if config.transport != "http":
            raise ValueError("CosyVoiceHttp needs an http config")
        self.name = name
        self.config = config
        self.url = config.endpoint_url
        self._wav: bytes | None = None
        if config.prompt_wav:
            try:
                self._wav = Path(config.prompt_wav).read_bytes()
            except OSError as exc:
                raise ValueError(f"cannot read prompt_wav {config.prompt_wav!r}: {exc}") from exc
        self._session: aiohttp.ClientSession | None = None

    takes_instructions = True  # instruct / instruct2 modes: a request's own instruct_text

    def form_fields(self, text: str, instructions: str | None = None) -> list[tuple[str, str]]:
        """The form fields in the official client's order (the prompt WAV goes as a file);
        ``instructions`` replace the voice's ``instruct_text`` in the modes that send one."""
        names = [f for f in MODE_FIELDS[self.config.mode] if f != "prompt_wav"]

        def value(field: str) -> str:
            if field == "instruct_text" and instructions:
                return instructions
            return str(getattr(self.config, field))

        return [("tts_text", text), *((f, value(f)) for f in names)]

    def _fail(self, what: str) -> SynthesisError:
        return SynthesisError(f"CosyVoice voice {self.name!r} ({self.url}): {what}")

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # One connection per utterance, like the official client: nothing pooled, so a
            # failed or abandoned reply never leaves a half-read socket open upstream.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def _raise_for_reply(self, resp: aiohttp.ClientResponse) -> None:
        ctype = resp.headers.get("Content-Type", "")
        if resp.status < 400 and not ctype.startswith(("application/json", "text/")):
            return
        body = bytearray()
        try:
            async with asyncio.timeout(min(5.0, self.config.first_chunk_timeout)):
                while len(body) < _ERROR_BODY_LIMIT and (data := await resp.content.readany()):
                    body += data
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass
        summary = summarise_error_body(bytes(body), ctype)
        raise self._fail(f"HTTP {resp.status} {resp.reason}: {summary}")

    def _rate(self, resp: aiohttp.ClientResponse) -> int:
        raw = resp.headers.get(RATE_HEADER)
        if raw is None:
            return self.config.sample_rate
        try:
            rate = int(float(raw))
            if rate > 0:
                return rate
        except ValueError:
            pass
        log.warning("%s: ignoring bad %s header %r", self.name, RATE_HEADER, raw)
        return self.config.sample_rate

    async def stream(
        self, text: str, *, instructions: str | None = None
    ) -> AsyncIterator[PcmChunk]:
        if not text.strip():
            return
        body, content_type = encode_form(self.form_fields(text, instructions), self._wav)
        cfg = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.first_chunk_timeout
        resp: aiohttp.ClientResponse | None = None
        received = 0
        finished = False
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    resp = await self._get_session().request(
                        cfg.method, self.url, data=body, headers={"Content-Type": content_type})
                    await self._raise_for_reply(resp)
            except TimeoutError:
                raise self._fail(f"no reply within {cfg.first_chunk_timeout:g} s") from None
            except (aiohttp.ClientError, OSError) as exc:
                raise self._fail(f"request failed: {type(exc).__name__}: {exc}") from exc
            rate = self._rate(resp)
            f32 = _Float32ToInt16() if cfg.sample_format == "f32" else None
            while True:
                limit = deadline if received == 0 else loop.time() + cfg.chunk_timeout
                try:
                    async with asyncio.timeout_at(limit):
                        data = await resp.content.readany()
                except TimeoutError:
                    wait = cfg.first_chunk_timeout if received == 0 else cfg.chunk_timeout
                    raise self._fail(
                        f"no audio for {wait:g} s (after {received} bytes)") from None
                except (aiohttp.ClientError, OSError) as exc:
                    raise self._fail(f"stream cut after {received} bytes: "
                                     f"{type(exc).__name__}: {exc}") from exc
                if not data:
                    break
                received += len(data)
                if f32 is not None and not (data := f32.feed(data)):
                    continue
                yield PcmChunk(data, rate)
            finished = True
        finally:
            if resp is not None:
                # Error, timeout, aclose or cancellation: close the socket now, which is what
                # makes the server stop generating.
                if finished:
                    resp.release()
                else:
                    resp.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
