"""Voice activity on real speech (espeak-ng), with pauses and white-noise bursts, through the real
detectors -- and the turn detector on top of the real Silero VAD."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gateway.listen.turns import BargeIn, SpeechStarted, SpeechStopped, TurnDetector
from gateway.listen.vad import (
    GATE_AFTER_FRAMES,
    SileroVad,
    VoiceDetector,
    WebRtcVad,
    build_vad,
)
from gateway.testing.spoken_audio import concat, frames, have_espeak, noise, silence, speak, trim
from tests.installed import need_module, needs

need_module("onnxruntime", "the [listen] extra (the Silero VAD runs on onnxruntime)")
need_module("faster_whisper", "the [listen] extra (faster-whisper carries the Silero VAD model)")

needs_espeak = needs("espeak-ng", have_espeak(), "speaks the test audio "
                     "(apt-get install -y espeak-ng)")


@pytest.fixture(scope="module")
def labelled() -> tuple[np.ndarray, np.ndarray]:
    """Two questions, each with a 300 ms pause inside, and 100 ms noise bursts between them.
    Labels per sample: 0 silence, 1 speech, 2 noise."""
    parts: list[tuple[np.ndarray, int]] = []
    for i, (a, b) in enumerate([("What is the weather like", "in Paris today?"),
                                ("Could you tell me", "a joke about computers?")]):
        parts += [(silence(0.8), 0), (trim(speak(a)), 1), (silence(0.3), 0),
                  (trim(speak(b)), 1), (silence(0.6), 0)]
        for level in (0.05, 0.15, 0.4):
            parts += [(noise(0.1, level=level, seed=i * 10 + round(level * 100)), 2),
                      (silence(0.5), 0)]
    audio = concat(*(p for p, _ in parts))
    labels = np.concatenate([np.full(len(p), k, np.int16) for p, k in parts])
    return audio, labels


def frame_labels(labels: np.ndarray) -> np.ndarray:
    return np.array([np.bincount(f, minlength=3).argmax() for f in frames(labels)])


def decisions(vad: VoiceDetector, audio: np.ndarray) -> np.ndarray:
    return np.array([vad.probability(f) for f in frames(audio)]) >= 0.5


@needs_espeak
def test_silero_finds_the_speech_and_ignores_noise_bursts(labelled):
    audio, labels = labelled
    voiced, truth = decisions(SileroVad(), audio), frame_labels(labels)
    assert voiced[truth == 1].mean() > 0.8
    assert voiced[truth == 0].mean() < 0.1  # the model's lag at the ends of words
    assert not voiced[truth == 2].any()


@needs_espeak
def test_webrtc_finds_the_speech_too_behind_the_same_interface(labelled):
    need_module("webrtcvad", "the [listen] extra (webrtcvad-wheels)")
    audio, labels = labelled
    vad = WebRtcVad(3)
    assert isinstance(vad, VoiceDetector)
    voiced, truth = decisions(vad, audio), frame_labels(labels)
    assert voiced[truth == 1].mean() > 0.9
    # Why it is not the default: it calls loud white noise speech.
    assert voiced[truth == 2].mean() > 0.5


@needs_espeak
def test_a_question_with_a_pause_is_one_turn_through_the_real_vad():
    question = concat(silence(0.5), trim(speak("What is the weather like")), silence(0.3),
                      trim(speak("in Paris today?")), silence(1.0))
    vad, det = SileroVad(), TurnDetector()
    events = [ev for f in frames(question) for ev in det.push(f, vad.probability(f))]
    assert [type(e) for e in events] == [SpeechStarted, BargeIn, SpeechStopped]
    stopped = events[-1]
    assert isinstance(stopped, SpeechStopped) and stopped.reason == "silence"
    spoken = (len(question) - 1.5 * 16000) / 16000
    assert stopped.duration == pytest.approx(spoken, abs=0.25)
    assert 0.45 <= stopped.started_at <= 0.6
    assert len(stopped.audio) >= (spoken + 0.3) * 16000


@needs_espeak
def test_noise_bursts_through_the_real_vad_start_no_turn_and_no_barge_in():
    bursts = concat(*[concat(silence(0.4), noise(0.1, level=lv, seed=s))
                      for s, lv in enumerate((0.05, 0.1, 0.2, 0.4, 0.8))], silence(0.6))
    vad, det = SileroVad(), TurnDetector()
    assert [ev for f in frames(bursts) for ev in det.push(f, vad.probability(f))] == []


@needs_espeak
def test_two_questions_a_second_apart_are_two_turns_with_barge_in_each():
    audio = concat(silence(0.3), trim(speak("Hello, can you hear me?")), silence(1.0),
                   trim(speak("Stop talking please.")), silence(1.0))
    vad, det = SileroVad(), TurnDetector()
    events = [ev for f in frames(audio) for ev in det.push(f, vad.probability(f))]
    assert [type(e) for e in events] == [SpeechStarted, BargeIn, SpeechStopped] * 2


def test_silence_is_not_speech_and_reset_forgets_the_stream():
    vad = SileroVad()
    probs = [vad.probability(f) for f in frames(silence(1.0))]
    assert max(probs) < 0.2
    vad.reset()
    assert vad.probability(np.zeros(320, dtype=np.int16)) == 0.0


def test_silero_costs_well_under_a_millisecond_per_frame():
    vad = SileroVad()
    audio = noise(2.0, level=0.05)
    start = time.perf_counter()
    for f in frames(audio):
        vad.probability(f)
    per_frame = (time.perf_counter() - start) / 100
    assert per_frame < 0.005  # measured ~0.2 ms; generous for a loaded CI machine
    assert vad.windows == 2 * 16000 // 512


def test_specs_and_frame_checks():
    need_module("webrtcvad", "the [listen] extra (webrtcvad-wheels)")
    assert build_vad().name == "silero"
    assert build_vad("webrtc").mode == 3  # type: ignore[attr-defined]
    assert build_vad("webrtc:1").mode == 1  # type: ignore[attr-defined]
    assert build_vad("silero:gate=-50").gate_dbfs == -50.0  # type: ignore[attr-defined]
    assert build_vad("silero:gate=off").gate_dbfs is None  # type: ignore[attr-defined]
    for bad in ("webrtc:7", "webrtc:x", "energy", "silero:2", "silero:gate=x", "silero:gate=nan",
                "silero:gate=1", "silero:gate=-121", "silero:gate="):
        with pytest.raises(ValueError):
            build_vad(bad)
    with pytest.raises(ValueError, match="320-sample"):
        WebRtcVad().probability(np.zeros(160, dtype=np.int16))


def test_a_stretch_below_the_gate_skips_the_model_and_speech_after_it_is_found_the_same():
    """Past 400 ms below the gate (-60 dBFS), digital silence and a muted microphone's hiss are
    answered without the model; the audio after them gets the ungated model's decisions."""
    quiet = frames(concat(silence(0.4), noise(0.6, level=0.0005, seed=3)))  # hiss: -66 dBFS
    loud = frames(noise(0.3, level=0.01, seed=4))  # -40 dBFS: the model decides
    gated, ungated = SileroVad(), SileroVad(gate_dbfs=None)
    probabilities = [gated.probability(f) for f in quiet]
    assert max(probabilities[:GATE_AFTER_FRAMES]) < 0.1  # the model's, on the first 400 ms
    assert probabilities[GATE_AFTER_FRAMES:] == [0.0] * (50 - GATE_AFTER_FRAMES)
    assert gated.gated == 50 - GATE_AFTER_FRAMES
    assert gated.windows == GATE_AFTER_FRAMES * 320 // 512
    for f in quiet:
        ungated.probability(f)
    assert ungated.gated == 0 and ungated.windows == 50 * 320 // 512
    seen = gated.windows, ungated.windows
    a = [gated.probability(f) for f in loud]
    b = [ungated.probability(f) for f in loud]
    assert a == pytest.approx(b, abs=0.1) and [x >= 0.5 for x in a] == [x >= 0.5 for x in b]
    assert gated.windows - seen[0] == ungated.windows - seen[1]


@needs_espeak
def test_the_gate_keeps_the_decisions_on_speech(labelled):
    audio, labels = labelled
    truth = frame_labels(labels)
    gated, plain = decisions(SileroVad(), audio), decisions(SileroVad(gate_dbfs=None), audio)
    assert (gated[truth != 0] == plain[truth != 0]).all()  # speech and noise: the same
    assert gated[truth == 0].mean() <= plain[truth == 0].mean()


def test_gate_specs():
    assert build_vad("silero").gate_dbfs == -60.0  # type: ignore[attr-defined]
    assert build_vad("silero:gate=-70").gate_dbfs == -70.0  # type: ignore[attr-defined]
    assert build_vad("silero:gate=off").gate_dbfs is None  # type: ignore[attr-defined]
    for bad in ("silero:gate=x", "silero:gate=5", "silero:gate", "silero:-60"):
        with pytest.raises(ValueError, match="gate"):
            build_vad(bad)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_gates_test_from_the_exact_energy_answers_as_the_float32_dot(compiled, monkeypatch):
    """The gate decides from the int16 frame's exact sum of squares (in C where built), and
    from the float32 dot it always used only near the gate: the same answer for every frame,
    those within the float32 rounding of the gate included."""
    from gateway.media import pcm_c

    if compiled and pcm_c.load() is None:
        pytest.skip(f"PCM helpers not built: {pcm_c.failure()}")
    monkeypatch.setattr(pcm_c, "DISABLED", not compiled)
    vad = SileroVad()
    rng = np.random.default_rng(11)
    base = rng.standard_normal((4000, 320))
    limit = vad._gate * 320
    near = 0
    for row, scale in zip(base, np.geomspace(20, 50, 4000), strict=True):
        frame = np.round(row / np.sqrt(np.mean(row**2)) * scale).astype(np.int16)
        samples = frame.astype(np.float32) / 32768.0
        legacy = float(np.dot(samples, samples)) < limit
        assert vad._below_gate(frame) is legacy
        near += abs(float(np.dot(samples, samples)) / limit - 1) < 1e-4
    assert near  # (frames the margin hands to the float32 dot were among them)
    assert not SileroVad(gate_dbfs=None)._below_gate(np.zeros(320, dtype=np.int16))
