"""Speech to text over an OpenAI-compatible server: ``POST {base}/audio/transcriptions``
(``base`` ends in ``/v1``), the protocol of OpenAI, speaches and faster-whisper-server.

The request is multipart/form-data: ``file`` (the segment as a 16 kHz 16-bit mono WAV named
``audio.wav``, ``audio/wav``), ``model``, ``response_format=json`` and the optional
``language``/``prompt``; the reply is JSON ``{"text": ...}``. Errors (unreachable server,
timeouts, non-200 answers with OpenAI's ``{"error": {"message": ...}}`` or FastAPI's
``{"detail": ...}``, replies without text) raise ``RecognitionError`` with the reason.

Partials: at most ``max_partials`` partial requests are in flight per recogniser; another
partial returns None at once. Final requests always go out.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import aiohttp
import numpy as np

from gateway.listen.asr import RecognitionError, Transcript
from gateway.listen.audio import RATE, as_int16, wav_bytes
from gateway.net.error_body import error_message

_ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class OpenAITranscriptionConfig:
    base_url: str  # http://host:port/v1
    model: str = "whisper-1"
    language: str | None = None
    prompt: str | None = None
    timeout: float = 15.0  # whole request, seconds
    connect_timeout: float = 3.0
    api_key_env: str | None = None  # name of an environment variable holding a bearer token
    max_partials: int = 1

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be http(s)://..., not {self.base_url!r}")
        if not self.model:
            raise ValueError("a model name is required")
        if not 0 < self.connect_timeout <= self.timeout:
            raise ValueError("need 0 < connect_timeout <= timeout")
        if self.max_partials < 0:
            raise ValueError("max_partials must not be negative")

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/audio/transcriptions"


class OpenAITranscriber:
    """``Recognizer`` over an OpenAI-compatible transcription endpoint."""

    def __init__(self, config: OpenAITranscriptionConfig, *, name: str = "openai") -> None:
        self.config = config
        self.name = name
        self._session: aiohttp.ClientSession | None = None
        self._partials = 0
        self.skipped = 0

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self.config.timeout,
                                            sock_connect=self.config.connect_timeout)
            headers = {}
            if self.config.api_key_env:
                token = os.environ.get(self.config.api_key_env)
                if not token:
                    raise RecognitionError(f"environment variable {self.config.api_key_env}"
                                           " (the API key) is not set")
                headers["Authorization"] = f"Bearer {token}"
            self._session = aiohttp.ClientSession(timeout=timeout, headers=headers)
        return self._session

    def _form(self, audio: np.ndarray) -> aiohttp.FormData:
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(audio, RATE), filename="audio.wav",
                       content_type="audio/wav")
        form.add_field("model", self.config.model)
        form.add_field("response_format", "json")
        if self.config.language:
            form.add_field("language", self.config.language)
        if self.config.prompt:
            form.add_field("prompt", self.config.prompt)
        return form

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        if not final and self._partials >= self.config.max_partials:
            self.skipped += 1
            return None
        audio = as_int16(np.asarray(audio16k))
        started = time.perf_counter()
        if not final:
            self._partials += 1
        try:
            text = await self._post(audio)
        finally:
            if not final:
                self._partials -= 1
        elapsed = time.perf_counter() - started
        return Transcript(text=text, final=final, audio_seconds=len(audio) / RATE,
                          latency=elapsed, decode_seconds=elapsed, backend=self.name)

    async def _post(self, audio: np.ndarray) -> str:
        url = self.config.endpoint
        try:
            async with self._http().post(url, data=self._form(audio)) as resp:
                body = await resp.content.read(_ERROR_BODY_LIMIT if resp.status != 200 else -1)
                if resp.status != 200:
                    raise RecognitionError(
                        f"{url} answered HTTP {resp.status}: {error_message(body)}")
        except TimeoutError as exc:
            raise RecognitionError(
                f"{url} did not answer within {self.config.timeout} s"
                f" (connect timeout {self.config.connect_timeout} s)") from exc
        except aiohttp.ClientError as exc:
            raise RecognitionError(f"cannot reach {url}: {exc}") from exc
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise RecognitionError(f"{url} sent no JSON: {body[:120]!r}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise RecognitionError(f"{url} sent JSON without a text field: {body[:120]!r}")
        return data["text"].strip()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
