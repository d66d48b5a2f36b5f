"""Voice activity per 20 ms frame of 16 kHz int16 mono: a speech probability in [0, 1].

Two detectors behind one interface (``VoiceDetector``), built by ``build_vad``:

- ``silero`` (default): Silero VAD v6, the ONNX file faster-whisper bundles
  (``faster_whisper/assets/silero_vad_v6.onnx``), run with onnxruntime directly (no torch).
  The model takes 512-sample windows (32 ms) plus 64 samples of context and carries an LSTM
  state; frames are buffered into windows and each frame reports the newest window's
  probability (so a decision lags the audio by at most one window). Once ``GATE_AFTER_FRAMES``
  frames in a row were quieter than ``gate_dbfs`` (RMS, default -60 dBFS: a muted or
  noise-suppressed microphone, digital silence; speech is louder than -45), further quiet
  frames are silence without running the model -- the quiet gaps inside speech (up to 400 ms)
  still go through it, so its decisions on speech are unchanged (tested: after 200 ms the
  model's state had not settled, and speech onsets came a frame or two later).
  Measured (py-spy, 4 talkers whose microphones sent silence): the model was a fifth of the
  event loop's busy time.
- ``webrtc``: the WebRTC VAD (``webrtcvad-wheels``), 0 or 1 per frame, aggressiveness 0-3.

A detector holds one stream's state: one instance per listener. The ONNX session is shared
by the process (onnxruntime sessions are thread-safe). Cost per 20 ms frame is well under a
millisecond (see the report in gateway/listen/__init__.py), so callers may run it inline.
"""

from __future__ import annotations

import contextlib
import functools
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gateway.listen.audio import FRAME_SAMPLES, INT16, RATE, as_float32, as_int16
from gateway.media.pcm_c import sum_squares

SILERO_WINDOW = 512
SILERO_CONTEXT = 64
DEFAULT_GATE_DBFS = -60.0
GATE_AFTER_FRAMES = 20  # quiet frames the model still sees before the gate closes (400 ms)
_GATE_MARGIN = 1e-4  # relative: nearer the gate than this, the float32 dot decides


@runtime_checkable
class VoiceDetector(Protocol):
    name: str

    def probability(self, frame: np.ndarray) -> float:
        """Speech probability for the next 20 ms frame (320 int16 samples) of the stream."""
        ...

    def reset(self) -> None:
        """Forget the stream (start of a new one)."""
        ...


def silero_model_path() -> Path:
    """The Silero VAD v6 ONNX file inside the installed faster-whisper package."""
    path = Path(str(resources.files("faster_whisper") / "assets" / "silero_vad_v6.onnx"))
    if not path.is_file():
        raise FileNotFoundError(f"faster-whisper ships no Silero VAD at {path}")
    return path


@functools.cache
def _silero_session(path: str) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = 1
    options.enable_cpu_mem_arena = False
    options.log_severity_level = 4
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"],
                                        sess_options=options)


class SileroVad:
    """Silero VAD v6 over onnxruntime; probabilities are the model's own."""

    name = "silero"

    def __init__(self, model_path: str | Path | None = None,
                 gate_dbfs: float | None = DEFAULT_GATE_DBFS) -> None:
        """``gate_dbfs``: frames below this RMS level are silence, unseen by the model (None:
        every frame goes through it)."""
        self._session = _silero_session(str(model_path or silero_model_path()))
        self._pending = np.zeros(0, dtype=np.float32)
        self._last = 0.0
        self.gate_dbfs = gate_dbfs
        # mean square of float32 samples in [-1, 1) at the gate
        self._gate = -1.0 if gate_dbfs is None else 10.0 ** (gate_dbfs / 10.0)
        self._quiet_run = 0  # frames below the gate in a row
        self.windows = 0  # model runs so far (for cost accounting)
        self.gated = 0  # frames the gate answered without the model
        #: the last int16 frame the gate measured and its exact sum of squares: the duplex
        #: pause gate's level of the same frame reads it instead of measuring it again
        self.measured: np.ndarray | None = None
        self.measured_squares = 0
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(SILERO_CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)
        self._last = 0.0
        self._quiet_run = 0

    def probability(self, frame: np.ndarray) -> float:
        if len(frame) and self._below_gate(frame):
            self._quiet_run += 1
            if self._quiet_run > GATE_AFTER_FRAMES:
                self.gated += 1
                if len(self._pending):
                    self._pending = self._pending[:0]  # the next window starts with new audio
                self._last = 0.0
                return 0.0
        else:
            self._quiet_run = 0
        samples = as_float32(frame)
        self._pending = np.concatenate([self._pending, samples])
        while len(self._pending) >= SILERO_WINDOW:
            window = self._pending[:SILERO_WINDOW]
            self._pending = self._pending[SILERO_WINDOW:]
            self._last = self._run(window)
        return self._last

    def _below_gate(self, frame: np.ndarray) -> bool:
        """The gate's test, ``float(np.dot(s, s)) < gate * n`` on the float32 samples ``s``
        (what it has always been), decided from the exact int16 sum of squares (no numpy
        call where media/pcm_c.py is built) unless that is within ``_GATE_MARGIN`` of the
        gate: the float32 dot's rounding (relative 2e-5 at most for 320 samples) cannot
        change the answer further out. Near the gate, and for float frames, the float32 dot."""
        if type(frame) is np.ndarray and frame.dtype is INT16:
            limit = self._gate * len(frame)
            squares = sum_squares(frame)
            self.measured, self.measured_squares = frame, squares  # (the duplex's level too)
            level = squares / 32768.0 ** 2
            if level < limit * (1.0 - _GATE_MARGIN):
                return True
            if level > limit * (1.0 + _GATE_MARGIN):
                return False
        samples = as_float32(frame)
        return float(np.dot(samples, samples)) < self._gate * len(samples)

    def _run(self, window: np.ndarray) -> float:
        batch = np.concatenate([self._context, window])[np.newaxis, :]
        prob, self._h, self._c = self._session.run(
            None, {"input": batch, "h": self._h, "c": self._c})
        self._context = window[-SILERO_CONTEXT:]
        self.windows += 1
        return float(np.asarray(prob).reshape(-1)[0])


class WebRtcVad:
    """The WebRTC VAD: 1.0 for a voiced frame, else 0.0. ``mode`` 0 (lenient) to 3 (strict)."""

    name = "webrtc"

    def __init__(self, mode: int = 3) -> None:
        import webrtcvad

        if mode not in (0, 1, 2, 3):
            raise ValueError(f"webrtc VAD mode must be 0-3, not {mode}")
        self.mode = mode
        self._vad = webrtcvad.Vad(mode)

    def reset(self) -> None:
        self._vad.set_mode(self.mode)

    def probability(self, frame: np.ndarray) -> float:
        pcm = as_int16(frame)
        if len(pcm) != FRAME_SAMPLES:
            raise ValueError(f"webrtc VAD takes {FRAME_SAMPLES}-sample frames, not {len(pcm)}")
        return 1.0 if self._vad.is_speech(pcm.astype("<i2", copy=False).tobytes(), RATE) else 0.0


def build_vad(spec: str = "silero") -> VoiceDetector:
    """``silero`` / ``silero:gate=DBFS`` (``gate=off``: the model sees every frame) or
    ``webrtc`` / ``webrtc:MODE`` (0-3, default 3)."""
    kind, _, arg = spec.strip().partition(":")
    if kind == "silero":
        if not arg:
            return SileroVad()
        key, _, value = arg.partition("=")
        if key == "gate" and value == "off":
            return SileroVad(gate_dbfs=None)
        if key == "gate":
            with contextlib.suppress(ValueError):
                if -120.0 <= (level := float(value)) <= 0.0:
                    return SileroVad(gate_dbfs=level)
        raise ValueError(f"bad VAD spec {spec!r}: silero takes gate=DBFS (-120..0) or gate=off")
    if kind == "webrtc":
        try:
            return WebRtcVad(int(arg) if arg else 3)
        except ValueError as exc:
            raise ValueError(f"bad VAD spec {spec!r}: {exc}") from exc
    raise ValueError(f"unknown VAD spec {spec!r}: use silero or webrtc[:0-3]")
