"""Speech in, scores out: the embedded voice, the clean reference, alignment and PESQ-WB."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import soxr

from gateway.media.framer import Framer
from gateway.media.opus_codec import (
    FRAME_SAMPLES,
    SAMPLE_RATE,
    EncoderSettings,
    OpusFrameDecoder,
    OpusFrameEncoder,
)

PESQ_RATE = 16_000
SENTENCES = (
    "Thanks for calling the service desk, my name is Joe and I will be helping you today.",
    "Your order left our warehouse on Monday morning and should arrive by Thursday afternoon.",
    "If the parcel is not there by then, please call us back and we will send a new one.",
    "You can also track it online, using the eight digit number printed on your receipt.",
    "Is there anything else I can help you with, or would you like to hear that again?",
    "Great, then have a wonderful day, and thank you for choosing us.",
)


TAIL_S = 0.5  # silence after the last sentence


def synthesize_speech(seconds: float) -> np.ndarray:
    """Whole sentences of Piper speech, about ``seconds`` of it (the first that reach it), then
    ``TAIL_S`` of silence; 24 kHz, whole 20 ms frames, int16 mono.

    Deterministic (Piper's noise scales 0: the same samples every run, so runs compare), and it
    ends in silence: cut in a word, any latency a receiver adds or trims would push the last
    word out of the scored span, or pad it with nothing, and PESQ would charge that as loss.
    """
    from piper import SynthesisConfig

    from gateway.tts.piper_voice import load_piper_voice

    voice = load_piper_voice()
    rate = int(voice.config.sample_rate)
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    parts: list[np.ndarray] = []
    total = 0
    while total < seconds * rate:
        for sentence in SENTENCES:
            for chunk in voice.synthesize(sentence, syn_config=config):
                pcm = np.asarray(chunk.audio_int16_array, dtype=np.int16).reshape(-1)
                parts.append(pcm)
                total += pcm.size
            if total >= seconds * rate:
                break
    speech = soxr.resample(np.concatenate(parts), rate, SAMPLE_RATE, quality="HQ")
    speech = np.clip(speech, -32768, 32767).astype(np.int16)
    tail = np.zeros(int(TAIL_S * SAMPLE_RATE), dtype=np.int16)
    speech = np.concatenate([speech, tail])
    frames = speech.size // FRAME_SAMPLES
    return speech[: frames * FRAME_SAMPLES]


def encode_decode(pcm: np.ndarray, settings: EncoderSettings) -> tuple[list[bytes], np.ndarray]:
    """The gateway's packets for ``pcm`` (same encoder, same framing) and their clean decode."""
    framer = Framer(FRAME_SAMPLES)
    encoder = OpusFrameEncoder(settings)
    payloads = [encoder.encode(f) for f in framer.push(pcm) + framer.flush()]
    decoder = OpusFrameDecoder()
    return payloads, np.concatenate([decoder.decode(p) for p in payloads])


def align(ref: np.ndarray, deg: np.ndarray) -> tuple[np.ndarray, int]:
    """``deg`` cut to ``ref``'s length at the lag of best cross-correlation (zero-padded)."""
    a = ref.astype(np.float64)
    b = deg.astype(np.float64)
    size = 1 << int(np.ceil(np.log2(a.size + b.size)))
    corr = np.fft.irfft(np.fft.rfft(b, size) * np.conj(np.fft.rfft(a, size)), size)
    lag = int(np.argmax(corr[: b.size]))
    out = np.zeros(ref.size, dtype=np.int16)
    piece = deg[lag : lag + ref.size]
    out[: piece.size] = piece
    return out, lag


def pesq_wb(ref24: np.ndarray, deg24: np.ndarray) -> float | None:
    """Wideband PESQ (P.862.2) of ``deg24`` against ``ref24`` (both 24 kHz), after alignment."""
    from pesq import PesqError, pesq

    deg, _ = align(ref24, deg24)
    ref16 = soxr.resample(ref24.astype(np.float32) / 32768, SAMPLE_RATE, PESQ_RATE)
    deg16 = soxr.resample(deg.astype(np.float32) / 32768, SAMPLE_RATE, PESQ_RATE)
    score = pesq(PESQ_RATE, ref16, deg16, "wb", on_error=PesqError.RETURN_VALUES)
    return None if score < 0 else round(float(score), 3)


def playout(frames: Sequence[tuple[float, np.ndarray]], period: float = 0.020) -> np.ndarray:
    """What a real-time device plays from frames that became available at the given times.

    It starts with the first frame and takes one frame per period; when none is waiting, it
    plays silence (as any sound card does) and the backlog plays later: a stall adds delay.
    """
    if not frames:
        return np.zeros(0, dtype=np.int16)
    size = frames[0][1].size
    out: list[np.ndarray] = []
    tick = frames[0][0]
    i = 0
    while i < len(frames):
        if frames[i][0] <= tick + 1e-9:
            out.append(frames[i][1])
            i += 1
        else:
            out.append(np.zeros(size, dtype=np.int16))
        tick += period
    return np.concatenate(out)


def playout_ticks(frames: Sequence[tuple[float, object]], period: float = 0.020) -> list[float]:
    """The device time at which each frame of :func:`playout` was played."""
    ticks: list[float] = []
    tick = frames[0][0] if frames else 0.0
    for available, _ in frames:
        while available > tick + 1e-9:
            tick += period
        ticks.append(tick)
        tick += period
    return ticks


def utterances(ref24: np.ndarray, min_pause_frames: int = 10, quiet_peak: int = 64,
               frame: int = 480) -> list[tuple[int, int]]:
    """``ref24`` cut in the middle of each pause of at least ``min_pause_frames`` quiet 20 ms
    frames: (start, end) sample spans that cover it, each one or more whole utterances."""
    n = ref24.size // frame
    peaks = np.abs(ref24[: n * frame].reshape(n, frame).astype(np.int32)).max(axis=1)
    quiet = peaks <= quiet_peak
    cuts = [0]
    run = 0
    for i in range(n + 1):
        if i < n and quiet[i]:
            run += 1
            continue
        if run >= min_pause_frames and i - run > 0 and i < n:
            cuts.append((i - run // 2) * frame)
        run = 0
    cuts.append(ref24.size)
    return list(itertools.pairwise(cuts))


def pesq_wb_utterances(ref24: np.ndarray, deg24: np.ndarray, search_s: float = 0.5) -> float | None:
    """PESQ-WB per utterance, each aligned on its own, weighted by length: what each utterance
    sounds like, whatever delay the receiver added or removed in the pauses between them (the
    whole-file score charges such changes of delay, even in silence; this one does not, a stall
    in speech it still does)."""
    from pesq import PesqError, pesq

    _, lag = align(ref24, deg24)
    deg = deg24.astype(np.float64)
    search = int(search_s * SAMPLE_RATE)
    total = weight = 0.0
    offset = lag
    for start, end in utterances(ref24):
        seg = ref24[start:end].astype(np.float64)
        lo = max(0, start + offset - search)
        window = deg[lo : end + offset + search]
        if window.size < seg.size:
            continue
        size = 1 << int(np.ceil(np.log2(window.size + seg.size)))
        corr = np.fft.irfft(np.fft.rfft(window, size) * np.conj(np.fft.rfft(seg, size)), size)
        best = int(np.argmax(corr[: window.size - seg.size + 1]))
        offset = lo + best - start
        piece = deg24[lo + best : lo + best + seg.size]
        ref16 = soxr.resample(ref24[start:end].astype(np.float32) / 32768, SAMPLE_RATE, PESQ_RATE)
        deg16 = soxr.resample(piece.astype(np.float32) / 32768, SAMPLE_RATE, PESQ_RATE)
        score = pesq(PESQ_RATE, ref16, deg16, "wb", on_error=PesqError.RETURN_VALUES)
        if score < 0:
            continue
        total += float(score) * seg.size
        weight += seg.size
    return round(total / weight, 3) if weight else None
