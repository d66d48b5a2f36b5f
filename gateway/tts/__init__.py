"""Text-to-speech backends: each turns text into an async stream of PCM chunks."""

from gateway.tts.base import PcmChunk, SynthesisError, Synthesizer

__all__ = ["PcmChunk", "SynthesisError", "Synthesizer"]
