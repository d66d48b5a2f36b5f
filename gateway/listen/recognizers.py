"""Recognisers by spec, like the voices' ``--voice`` specs.

    whisper | whisper:tiny.en                 the bundled Whisper tiny.en (default), int8, CPU
    whisper:/path/to/ct2-model?threads=2&workers=1&min_frames=1000&compute=int8&nice=5&idle=1
    whisper?cpus=auto                         (default) the event loop's thread pinned to one
                                              CPU, the decoding processes on the others
    whisper?cpus=1 | cpus=all                 the decoding processes on CPU 1 / wherever
    whisper?process=0                         decode on threads of this process (default: in
                                              child processes, no GIL shared with the loop)
    openai+http://host:port/v1?model=whisper-1&language=en&timeout=15&key_env=NAME
    openai+https://...                        any OpenAI-compatible transcription server

``key_env`` names an environment variable holding the bearer token (the key itself never goes
in a spec). Unknown query keys are errors.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

from gateway.listen.asr import Recognizer
from gateway.listen.openai_asr import OpenAITranscriber, OpenAITranscriptionConfig
from gateway.listen.whisper_asr import BUNDLED, WhisperOptions, WhisperRecognizer

DEFAULT_SPEC = "whisper:tiny.en"
_WHISPER_KEYS = {"threads": "cpu_threads", "workers": "workers", "min_frames": "min_frames",
                 "compute": "compute_type", "nice": "nice", "idle": "idle",
                 "process": "process", "cpus": "cpus"}
_OPENAI_KEYS = {"model", "language", "prompt", "timeout", "connect_timeout", "key_env",
                "partials"}


def _query(spec: str, query: str, allowed: set[str]) -> dict[str, str]:
    params = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"unknown keys {unknown} in recogniser spec {spec!r};"
                         f" known: {', '.join(sorted(allowed))}")
    return params


def parse_recognizer_spec(spec: str) -> WhisperOptions | OpenAITranscriptionConfig:
    spec = spec.strip() or DEFAULT_SPEC
    try:
        if spec == "whisper" or spec.startswith(("whisper:", "whisper?")):
            body, _, query = spec.removeprefix("whisper").removeprefix(":").partition("?")
            params = _query(spec, query, set(_WHISPER_KEYS))
            values: dict[str, object] = {"model": body or BUNDLED}
            for key, value in params.items():
                field = _WHISPER_KEYS[key]
                if field == "compute_type":
                    values[field] = value
                elif field == "cpus":
                    values[field] = (None if value == "auto" else () if value == "all" else
                                     tuple(int(c) for c in value.split(",") if c.strip()))
                elif field in ("idle", "process"):
                    if value not in ("0", "1"):
                        raise ValueError(f"{key} must be 0 or 1, not {value!r}")
                    values[field] = value == "1"
                else:
                    values[field] = int(value)
            return WhisperOptions(**values)  # type: ignore[arg-type]
        if spec.startswith(("openai+http://", "openai+https://")):
            parts = urlsplit(spec.removeprefix("openai+"))
            if not parts.hostname:
                raise ValueError("no host")
            params = _query(spec, parts.query, _OPENAI_KEYS)
            base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") or "/v1",
                               "", ""))
            timeout = float(params.get("timeout", 15.0))
            return OpenAITranscriptionConfig(
                base_url=base, model=params.get("model", "whisper-1"),
                language=params.get("language") or None, prompt=params.get("prompt") or None,
                timeout=timeout,
                connect_timeout=float(params.get("connect_timeout", min(3.0, timeout))),
                api_key_env=params.get("key_env") or None,
                max_partials=int(params.get("partials", 1)))
    except ValueError as exc:
        raise ValueError(f"bad recogniser spec {spec!r}: {exc}") from exc
    raise ValueError(f"unknown recogniser spec {spec!r}: use whisper[:MODEL] or"
                     " openai+http(s)://HOST:PORT/v1?model=...")


def build_recognizer(spec: str = DEFAULT_SPEC) -> Recognizer:
    """A recogniser for ``spec`` (Whisper is not loaded yet: ``await recognizer.load()``)."""
    config = parse_recognizer_spec(spec)
    if isinstance(config, WhisperOptions):
        return WhisperRecognizer(config)
    return OpenAITranscriber(config, name=urlsplit(config.base_url).hostname or "openai")
