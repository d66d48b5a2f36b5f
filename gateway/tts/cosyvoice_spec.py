"""CosyVoice voice specs: ``cosyvoice+http://...`` / ``cosyvoice+grpc://...`` -> a CosyVoiceConfig
(``gateway.tts.registry.build_cosyvoice`` makes the Synthesizer from it).

Grammar (query values percent-encoded; ``&`` inside a value must be ``%26``)::

    cosyvoice+http://HOST[:PORT][/BASE]?mode=MODE&...    FastAPI server (also cosyvoice+https)
    cosyvoice+grpc://HOST[:PORT]?mode=MODE&...           gRPC server

Keys: ``mode`` (sft | zero_shot | cross_lingual | instruct | instruct2; default sft), the mode's
voice fields (sft: spk_id; zero_shot: prompt_text, prompt_wav; cross_lingual: prompt_wav;
instruct: spk_id, instruct_text; instruct2: instruct_text, prompt_wav -- HTTP only), ``rate``
(the model's output rate: 22050 for CosyVoice-300M, 24000 for CosyVoice2/3; default 22050 like
the official client), ``timeout`` (seconds to the first audio byte, default 10), ``chunk_timeout``
(seconds of silence allowed between later chunks, default 30). HTTP only: ``method`` (GET, the
official client's choice, or POST), ``format`` (s16, or f32 for forks' ``/stream/...`` endpoints
that send float32; default f32 when BASE ends in ``/stream``, else s16). The default port is
50000, both servers' default. ``prompt_wav`` is a local file path, read once at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args
from urllib.parse import parse_qsl, urlsplit

Mode = Literal["sft", "zero_shot", "cross_lingual", "instruct", "instruct2"]
Transport = Literal["http", "grpc"]
SampleFormat = Literal["s16", "f32"]

MODES: tuple[str, ...] = get_args(Mode)
VOICE_FIELDS = ("spk_id", "prompt_text", "prompt_wav", "instruct_text")
#: The voice fields each mode needs, in the order the official client sends them.
MODE_FIELDS: dict[str, tuple[str, ...]] = {
    "sft": ("spk_id",),
    "zero_shot": ("prompt_text", "prompt_wav"),
    "cross_lingual": ("prompt_wav",),
    "instruct": ("spk_id", "instruct_text"),
    "instruct2": ("instruct_text", "prompt_wav"),
}
DEFAULT_PORT = 50000
_SCHEMES = {"cosyvoice+http": "http", "cosyvoice+https": "http", "cosyvoice+grpc": "grpc"}
_HTTP_ONLY_KEYS = ("method", "format")
_KEYS = ("mode", "rate", "timeout", "chunk_timeout", *VOICE_FIELDS, *_HTTP_ONLY_KEYS)


@dataclass(frozen=True, slots=True)
class CosyVoiceConfig:
    """Where a CosyVoice server is and which voice to ask it for. Validated on construction."""

    transport: Transport
    host: str
    port: int = DEFAULT_PORT
    mode: Mode = "sft"
    spk_id: str = ""
    prompt_text: str = ""
    prompt_wav: str = ""
    instruct_text: str = ""
    sample_rate: int = 22050
    first_chunk_timeout: float = 10.0
    chunk_timeout: float = 30.0
    method: Literal["GET", "POST"] = "GET"
    tls: bool = False
    base_path: str = ""
    sample_format: SampleFormat = "s16"

    def __post_init__(self) -> None:
        if self.transport not in get_args(Transport):
            raise ValueError(f"transport must be http or grpc, not {self.transport!r}")
        if not self.host:
            raise ValueError("a CosyVoice server host is required")
        if not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} is out of range")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        needed = MODE_FIELDS[self.mode]
        for field in VOICE_FIELDS:
            value = getattr(self, field)
            if field in needed and not value:
                raise ValueError(f"mode {self.mode} needs {field}")
            if field not in needed and value:
                raise ValueError(f"{field} is not used by mode {self.mode}")
        if self.transport == "grpc" and self.mode == "instruct2":
            raise ValueError("mode instruct2 is HTTP only (cosyvoice.proto has no instruct2)")
        if not 1000 <= self.sample_rate <= 384000:
            raise ValueError(f"rate {self.sample_rate} is not a plausible sample rate")
        for timeout in (self.first_chunk_timeout, self.chunk_timeout):
            if not 0 < timeout < math.inf:
                raise ValueError(f"timeouts must be positive and finite, not {timeout}")
        if self.method not in ("GET", "POST"):
            raise ValueError(f"method must be GET or POST, not {self.method!r}")
        if self.sample_format not in get_args(SampleFormat):
            raise ValueError(f"format must be s16 or f32, not {self.sample_format!r}")
        if self.transport == "grpc" and (self.method != "GET" or self.sample_format != "s16"
                                         or self.tls or self.base_path):
            raise ValueError("method, format, https and a URL path apply to HTTP only")
        if self.base_path and not self.base_path.startswith("/"):
            raise ValueError("base_path must start with '/'")

    @property
    def _netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def endpoint_url(self) -> str:
        """The FastAPI endpoint for this mode, e.g. ``http://h:50000/inference_sft``."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self._netloc}{self.base_path}/inference_{self.mode}"

    @property
    def grpc_target(self) -> str:
        return self._netloc


def _number(key: str, raw: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r} is not a number") from None


def parse_cosyvoice_spec(spec: str) -> CosyVoiceConfig:
    """Parse a ``cosyvoice+http|https|grpc://`` spec. Raises ValueError saying what is wrong."""
    parts = urlsplit(spec)
    transport = _SCHEMES.get(parts.scheme.lower())
    if transport is None:
        raise ValueError(f"{spec!r}: scheme must be one of {', '.join(_SCHEMES)}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{spec!r}: bad port ({exc})") from None
    if not host:
        raise ValueError(f"{spec!r}: no host")
    if parts.username or parts.password or parts.fragment:
        raise ValueError(f"{spec!r}: credentials and #fragments are not supported")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError(f"{spec!r}: malformed query string") from None
    opts: dict[str, str] = {}
    for key, value in pairs:
        if key not in _KEYS:
            raise ValueError(f"{spec!r}: unknown key {key!r} (known: {', '.join(_KEYS)})")
        if key in opts:
            raise ValueError(f"{spec!r}: {key} given twice")
        opts[key] = value
    if transport == "grpc":
        bad = [k for k in _HTTP_ONLY_KEYS if k in opts]
        if bad or parts.path not in ("", "/"):
            raise ValueError(f"{spec!r}: {', '.join(bad) or 'a URL path'} applies to HTTP only")
    base_path = parts.path.rstrip("/")
    fmt = opts.get("format", "f32" if base_path.endswith("/stream") else "s16")
    try:
        return CosyVoiceConfig(
            transport=transport,  # type: ignore[arg-type]
            host=host,
            port=port or DEFAULT_PORT,
            mode=opts.get("mode", "sft"),  # type: ignore[arg-type]
            spk_id=opts.get("spk_id", ""),
            prompt_text=opts.get("prompt_text", ""),
            prompt_wav=opts.get("prompt_wav", ""),
            instruct_text=opts.get("instruct_text", ""),
            sample_rate=int(_number("rate", opts.get("rate", "22050"), int)),
            first_chunk_timeout=_number("timeout", opts.get("timeout", "10"), float),
            chunk_timeout=_number("chunk_timeout", opts.get("chunk_timeout", "30"), float),
            method=opts.get("method", "GET").upper(),  # type: ignore[arg-type]
            tls=parts.scheme.lower() == "cosyvoice+https",
            base_path=base_path,
            sample_format=fmt,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise ValueError(f"{spec!r}: {exc}") from None
