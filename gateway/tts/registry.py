"""Voices by name, built from ``--voice`` specs.

Spec forms (``NAME=`` prefix optional; the default name is the backend's):
  piper | piper:joe[?first_words=4]     the embedded neural voice (the ``voice`` extra); a
                                        first clause over first_words is cut after 3 words;
                                        &split=0: the whole-graph render (peak-normalised)
  tone:440 | tone:440?seconds=2&rate=48000
  wav:/path/to/file.wav
  cosyvoice+http://host:50000?...       a CosyVoice server (FastAPI), see gateway.tts.cosyvoice_spec
  cosyvoice+grpc://host:50001?...       a CosyVoice server (gRPC)
The first voice is the default for speech requests that name none.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qs, urlsplit

from gateway.tts.base import Synthesizer
from gateway.tts.cosyvoice_spec import parse_cosyvoice_spec


class UnknownVoice(KeyError):
    pass


def _split_name(spec: str) -> tuple[str | None, str]:
    head, sep, rest = spec.partition("=")
    if sep and head and ":" not in head and "/" not in head and "?" not in head:
        return head.strip(), rest.strip()
    return None, spec.strip()


def build_voice(spec: str) -> Synthesizer:
    name, body = _split_name(spec)
    kind, _, arg = body.partition(":")
    # piper[:model][?first_words=N][&split=0]
    if body == "piper" or body.startswith(("piper:", "piper?")):
        from gateway.tts.piper_voice import FIRST_MAX_WORDS, PiperSynthesizer

        kind, _, query = body.partition("?")
        _, _, model = kind.partition(":")
        model = model or "joe"
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        try:
            first = int(params.get("first_words", FIRST_MAX_WORDS))
            split = params.get("split", "1")
            if split not in ("0", "1"):
                raise ValueError(f"split must be 0 or 1, not {split!r}")
        except ValueError as exc:
            raise ValueError(f"bad piper voice spec {spec!r}: {exc}") from exc
        return PiperSynthesizer(name=name or model, model=model, first_max_words=first,
                                split=split == "1")
    if kind == "tone":
        from gateway.tts.tone import ToneSynthesizer

        freq_text, _, query = arg.partition("?")
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        try:
            return ToneSynthesizer(
                name=name or "tone",
                frequency=float(freq_text or 440),
                seconds=float(params.get("seconds", 1.0)),
                sample_rate=int(params.get("rate", 24000)),
            )
        except ValueError as exc:
            raise ValueError(f"bad tone voice spec {spec!r}: {exc}") from exc
    if kind == "wav":
        from gateway.tts.tone import WavFileSynthesizer

        if not arg:
            raise ValueError(f"bad wav voice spec {spec!r}: give a path, wav:/path/file.wav")
        return WavFileSynthesizer(arg, name=name or "wav")
    if kind.startswith("cosyvoice+"):
        return build_cosyvoice(body, name=name or urlsplit(body).hostname or "cosyvoice")
    raise ValueError(
        f"unknown voice spec {spec!r}: use piper, tone:HZ, wav:PATH or cosyvoice+http(s)/grpc://"
    )


def build_cosyvoice(spec: str, name: str) -> Synthesizer:
    """A CosyVoice Synthesizer named ``name`` for ``spec`` (reads prompt_wav now, if any)."""
    config = parse_cosyvoice_spec(spec)
    if config.transport == "http":
        from gateway.tts.cosyvoice_http import CosyVoiceHttp

        return CosyVoiceHttp(config, name)
    from gateway.tts.cosyvoice_grpc import CosyVoiceGrpc

    return CosyVoiceGrpc(config, name)


class VoiceRegistry:
    def __init__(self, voices: Iterable[Synthesizer]) -> None:
        self._voices: dict[str, Synthesizer] = {}
        for voice in voices:
            if voice.name in self._voices:
                raise ValueError(f"two voices are named {voice.name!r}")
            self._voices[voice.name] = voice
        if not self._voices:
            raise ValueError("at least one voice is needed")
        self.default = next(iter(self._voices))

    @classmethod
    def from_specs(cls, specs: Iterable[str]) -> VoiceRegistry:
        return cls(build_voice(s) for s in specs)

    def get(self, name: str | None) -> Synthesizer:
        voice = self._voices.get(name or self.default)
        if voice is None:
            raise UnknownVoice(name)
        return voice

    @property
    def names(self) -> list[str]:
        return list(self._voices)

    async def warm_up(self) -> dict[str, float]:
        """Warm every voice that can be (``warm_up()``, e.g. Piper's first inference) so the
        first utterance after start is not the slowest; returns seconds per voice."""
        took = {}
        for voice in self._voices.values():
            warm = getattr(voice, "warm_up", None)
            if warm is not None:
                took[voice.name] = await warm()
        return took

    async def close(self) -> None:
        for voice in self._voices.values():
            await voice.close()
