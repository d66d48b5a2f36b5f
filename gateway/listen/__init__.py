"""Hearing the user: 16 kHz mono speech -> voice activity -> turns -> text.

``audio`` (format constants, WAV bytes), ``vad`` (per-20 ms-frame speech probability: Silero v6
ONNX by default, WebRTC behind the same interface), ``turns`` (the endpointing state machine:
speech started / barge-in / speech stopped with the segment's audio), ``asr`` (the
``Recognizer`` interface and ``Transcript``), ``whisper_asr`` (faster-whisper, short encoder
context, own thread pool), ``openai_asr`` (OpenAI-compatible ``/v1/audio/transcriptions``),
``recognizers`` (specs), ``partials`` (re-decoding the growing segment), ``repetition``
(Whisper loop detection) and ``listener`` (all of it for one stream).

Layer: beside gateway.agent, under the session. May import only gateway.media, gateway.rtp,
gateway.runtime, gateway.tts and libraries.
"""

from gateway.listen.asr import RecognitionError, Recognizer, Transcript
from gateway.listen.turns import BargeIn, SpeechStarted, SpeechStopped, TurnDetector, TurnOptions
from gateway.listen.vad import VoiceDetector, build_vad

__all__ = [
    "BargeIn",
    "RecognitionError",
    "Recognizer",
    "SpeechStarted",
    "SpeechStopped",
    "Transcript",
    "TurnDetector",
    "TurnOptions",
    "VoiceDetector",
    "build_vad",
]
