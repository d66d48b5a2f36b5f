"""Barge-in that pauses first, scripted: voice over a reply holds its playout at once; a cough
(too short for a turn), a "hm" or the reply's own echo (a short turn whose words are no
barge-in) lets it resume from the same frame; the barge-in minimum, or real words, cut it --
and the history and the ``interrupted`` event keep what was heard, not what was generated.
A loud/quiet VAD, a recogniser with a given text and a hand-driven "RTP sink" (frames popped
and reported sent by the test)."""

from __future__ import annotations

import asyncio

import numpy as np

from gateway.agent.echo import EchoAgent
from gateway.conversation.barge_in import PauseGate, words_heard
from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import Duplex, Turn
from gateway.conversation.heard import heard_words
from gateway.listen.asr import Transcript
from gateway.listen.listener import Listener
from gateway.listen.turns import TurnOptions
from gateway.media.fanout import SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.speech.utterance import UtteranceState
from gateway.tts.tone import ToneSynthesizer

REPLY = "one two three four five six seven eight nine ten"
UP = 480  # 20 ms at the uplink's 24 kHz


class LoudIsSpeech:
    name = "loud"

    def probability(self, frame: np.ndarray) -> float:
        return 0.9 if np.abs(frame).max() > 1000 else 0.05

    def reset(self) -> None:
        return None


class SaysRecognizer:
    name = "says"

    def __init__(self) -> None:
        self.text = ""

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        return Transcript(self.text, final, len(audio16k) / 16_000)

    async def close(self) -> None:
        return None


class CountingAgent(EchoAgent):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list]] = []

    async def reply(self, text, history):
        self.calls.append((text, list(history)))
        async for piece in super().reply(text, history):
            yield piece


class Rig:
    def __init__(self) -> None:
        self.conversation = Conversation(EncoderSettings())
        self.queue = FrameQueue(500)
        self.conversation.attach_sink("rtp", self.queue, SinkPolicy.BLOCK)
        self.events: list[tuple[str, dict]] = []
        self.conversation.events.on_event(lambda e: self.events.append((e.type, e.data)))
        self.recognizer = SaysRecognizer()
        self.agent = CountingAgent()
        turns = TurnOptions(stop_ms=500, barge_in_ms=300, post_speech_ms=100)
        listener = Listener(self.recognizer, vad=LoudIsSpeech(), turns=turns, partials=False,
                            speculate_ms=None)
        self.duplex = Duplex(self.conversation, listener, self.agent,
                             ToneSynthesizer(seconds=1.0), pause_ms=100)
        self.duplex.start()
        self.sent = 0
        self.indexes: list[int] = []

    async def reply(self) -> Turn:
        """A reply of 50 frames (1 s) to an earlier turn, all queued."""
        turn = Turn(1, 0.0, text="count to ten")
        self.duplex.turns.append(turn)
        self.duplex._say(turn, REPLY)
        utterance = turn.utterances[0]
        for _ in range(200):
            if utterance.total_frames is not None:
                break
            await asyncio.sleep(0.005)
        assert utterance.total_frames == 50
        return turn

    def play(self, frames: int) -> int:
        """The sink's next ``frames`` slots: what was sent (a held queue sends nothing)."""
        sent = 0
        for _ in range(frames):
            fields = self.queue.pop_fields()
            if fields is None:
                continue
            _payload, owner, index = fields
            owner.on_frame_sent(index, self.sent & 0xFFFF, self.sent * 960,
                                asyncio.get_running_loop().time())
            self.indexes.append(index)
            self.sent += 1
            sent += 1
        return sent

    async def hear(self, ms: int, loud: bool) -> None:
        frame = np.full(UP, 8000 if loud else 0, dtype=np.int16)
        for _ in range(ms // 20):
            self.duplex.hear(frame)
            await asyncio.sleep(0)

    def of(self, kind: str) -> list[dict]:
        return [d for k, d in self.events if k == kind]

    async def close(self) -> None:
        await self.duplex.close()
        await self.conversation.close()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_cough_pauses_the_reply_and_it_resumes_from_the_same_frame():
    rig = Rig()
    turn = await rig.reply()
    await rig.hear(200, loud=False)
    assert rig.play(10) == 10
    await rig.hear(140, loud=True)  # a cough: 140 ms, short of a turn's start (200)
    assert rig.conversation.paused and rig.duplex.state()["reply_pauses"] == 1
    assert rig.play(5) == 0  # held: the stream sends its silence
    await rig.hear(400, loud=False)  # quiet while paused: not the user
    assert not rig.conversation.paused
    assert rig.play(5) == 5 and rig.indexes == list(range(15))  # on from frame 10
    await settle()
    assert rig.of("reply_paused") and rig.of("reply_resumed") and not rig.of("interrupted")
    assert turn.utterances[0].state is UtteranceState.PLAYING
    await rig.close()


async def test_the_pause_comes_after_100_ms_of_voice():
    rig = Rig()
    await rig.reply()
    rig.play(5)
    await rig.hear(200, loud=False)
    await rig.hear(80, loud=True)
    assert not rig.conversation.paused
    await rig.hear(60, loud=True)  # the resampler's delay: a frame later than 100 ms
    assert rig.conversation.paused
    heard_at, paused_at = rig.duplex.last_pause
    assert paused_at >= heard_at
    await rig.close()


async def test_talking_on_cuts_the_reply_and_the_history_keeps_what_was_heard():
    rig = Rig()
    turn = await rig.reply()
    await rig.hear(200, loud=False)
    rig.play(25)  # half the reply sent
    await rig.hear(900, loud=True)  # voice goes on while the reply is paused: confirmed
    utterance = turn.utterances[0]
    assert utterance.state is UtteranceState.INTERRUPTED and rig.duplex.barge_ins == 1
    assert not rig.conversation.paused and len(rig.queue) == 0
    await settle()
    (cut,) = rig.of("interrupted")
    assert cut["utterance"] == utterance.id
    # 25 frames sent (500 ms), less what the client had not played yet (up to 60 ms)
    assert 440 <= cut["heard_ms"] <= 500
    assert cut["heard_text"] == heard_words(REPLY, cut["heard_ms"] / 1000)
    assert cut["heard_text"] and REPLY.startswith(cut["heard_text"])
    assert len(cut["heard_text"].split()) < len(REPLY.split())
    assert turn.heard_text == cut["heard_text"] and turn.interrupted
    assert [m.content for m in rig.duplex.history] == ["count to ten", cut["heard_text"]]
    # the new turn is answered, with the heard reply in its history
    rig.recognizer.text = "what comes after four"
    await rig.hear(700, loud=False)
    for _ in range(100):
        if rig.agent.calls:
            break
        await asyncio.sleep(0.01)
    text, history = rig.agent.calls[0]
    assert text == "what comes after four"
    assert [m.content for m in history] == ["count to ten", cut["heard_text"]]
    await rig.close()


async def test_a_hm_or_the_echo_over_the_reply_is_not_answered_and_words_cut_it():
    rig = Rig()
    turn = await rig.reply()
    await rig.hear(200, loud=False)
    rig.play(10)
    for said in ("Hmm.", "three four five"):  # a filler; the reply's own words (an echo)
        rig.recognizer.text = said
        await rig.hear(260, loud=True)  # a turn (>= 200 ms) short of a barge-in (300 ms)
        assert rig.conversation.paused
        await rig.hear(700, loud=False)  # the turn ends: the reply resumes
        assert not rig.conversation.paused
        await settle()
        await asyncio.sleep(0.05)
        await settle()
        assert rig.agent.calls == [] and turn.utterances[0].state is UtteranceState.PLAYING
        assert any(t["text"] == said and t.get("overlap") for t in rig.of("transcript"))
        rig.play(2)
    rig.recognizer.text = "Wait, stop."  # real words, however short: a barge-in
    await rig.hear(260, loud=True)
    await rig.hear(700, loud=False)
    for _ in range(100):
        if rig.agent.calls:
            break
        await asyncio.sleep(0.01)
    assert turn.utterances[0].state is UtteranceState.INTERRUPTED
    assert rig.agent.calls and rig.agent.calls[0][0] == "Wait, stop."
    await rig.close()


async def test_words_over_a_pause_with_no_voice_while_paused_do_not_cut():
    # an echo Whisper misheard as other words, over a pause the echo (or a cough) caused: the
    # voice ended within the pause's grace, so the words are not the user's
    rig = Rig()
    rig.duplex._gate.grace_ms = 300  # the 260 ms burst ends inside the grace
    turn = await rig.reply()
    rig.play(10)
    rig.recognizer.text = "the one other end"
    await rig.hear(260, loud=True)
    assert rig.conversation.paused
    await rig.hear(700, loud=False)
    await settle()
    await asyncio.sleep(0.05)
    await settle()
    assert rig.agent.calls == [] and turn.utterances[0].state is UtteranceState.PLAYING
    assert any(t["text"] == "the one other end" and t.get("overlap")
               for t in rig.of("transcript"))
    await rig.close()


class EchoMishearing:
    """Whisper on an uplink with no echo canceller: a clip holding the reply's echo (frames of
    amplitude ~1020 here, -30 dBFS: as quiet as the gate takes an echo to be) comes out as
    misheard words; the user alone (~9000) as ``user``."""

    name = "mishears"

    def __init__(self) -> None:
        self.user = "Hmm."
        self.clips: list[np.ndarray] = []

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        self.clips.append(audio16k)
        frames = audio16k[: len(audio16k) // 320 * 320].reshape(-1, 320)
        echo = any(900 < np.median(np.abs(f)) < 1200 for f in frames)
        text = "the one other end" if echo else self.user
        return Transcript(text, final, len(audio16k) / 16_000)

    async def close(self) -> None:
        return None


ECHO = 1020  # -30.1 dBFS: voiced for LoudIsSpeech, and no louder than an echo


async def hear_level(rig: Rig, ms: int, level: int) -> None:
    frame = np.full(UP, level, dtype=np.int16)
    for _ in range(ms // 20):
        rig.duplex.hear(frame)
        await asyncio.sleep(0)


async def wait_for(predicate, seconds: float = 2.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)


async def test_only_the_words_said_while_paused_confirm_a_barge_in():
    # the bench's "hm" case: the reply's echo starts the overlapping turn and pauses the reply,
    # the user says "hm" while it is paused; the turn's own transcript (echo included) reads
    # as other words, the paused stretch's as a filler: not cut, resumed, not answered
    rig = Rig()
    recognizer = EchoMishearing()
    rig.duplex.listener.recognizer = recognizer
    rig.duplex._paused_words.recognizer = recognizer
    turn = await rig.reply()
    rig.play(10)
    await hear_level(rig, 140, ECHO)  # the echo: a burst that pauses the reply
    assert rig.conversation.paused
    await hear_level(rig, 240, 9000)  # "hm", while paused
    await hear_level(rig, 700, 0)
    await wait_for(lambda: any(t.get("overlap") for t in rig.of("transcript")))
    assert not rig.conversation.paused and rig.of("reply_resumed")
    assert turn.utterances[0].state is UtteranceState.PLAYING and rig.agent.calls == []
    overlap = [t for t in rig.of("transcript") if t.get("overlap")]
    assert [t["text"] for t in overlap] == ["the one other end"]  # the whole turn, heard
    state = rig.duplex.state()
    assert state["paused_word_decodes"] >= 1
    window = recognizer.clips[0]  # the paused stretch: no echo in it, the hm and its end
    assert len(window) < 16_000 * 0.5 and np.abs(window).max() > 8000
    # the echo again: the gate learnt its level from that pause, it no longer pauses
    rig.play(2)
    await hear_level(rig, 140, ECHO)
    assert not rig.conversation.paused
    # the user's words pause it (louder than an echo: the window starts at their onset) and
    # are decoded at the first quiet frame after them: cut at once, the turn answered
    recognizer.user = "Wait, stop."
    await hear_level(rig, 200, 0)
    await hear_level(rig, 240, 9000)
    assert rig.conversation.paused
    await hear_level(rig, 100, 0)
    await wait_for(lambda: rig.duplex.barge_ins)
    assert turn.utterances[0].state is UtteranceState.INTERRUPTED
    await hear_level(rig, 700, 0)
    await wait_for(lambda: rig.agent.calls)
    # answered: the overlapping turn's own transcript (its segment began on the echo)
    assert [text for text, _ in rig.agent.calls] == ["the one other end"]
    await rig.close()


def test_a_pending_words_decode_holds_the_quiet_resume():
    gate = PauseGate(confirm_ms=600, resume_ms=160)
    assert run(gate, "vvvvv" + "vvvvvv") == {4: "pause"}  # frames 0.02-0.22 s
    gate.checking = True  # the words of those 6 frames are being decoded
    assert run(gate, "." * 20, start=0.22) == {}  # quiet, but not resumed over the decode
    assert gate.paused and gate.check_done() == "resume" and not gate.paused
    early = PauseGate(confirm_ms=600, resume_ms=160)
    run(early, "vvvvv" + "vvvvvv")
    early.checking = True
    run(early, "..", start=0.22)
    assert early.check_done() is None and early.paused  # back before the pause went quiet
    assert run(early, "......", start=0.26) == {5: "resume"}
    capped = PauseGate(confirm_ms=600, resume_ms=160, max_pause_ms=500)
    run(capped, "vvvvv" + "vvvvvv")
    capped.checking = True
    assert run(capped, "." * 30, start=0.22) == {18: "resume"}  # max_pause_ms still holds


def run(gate: PauseGate, pattern: str, start: float = 0.0, audible: bool = True,
        level: float = -20.0):
    """Frames: 'v' voiced, '.' not; the actions taken, by frame index."""
    out = {}
    for i, c in enumerate(pattern):
        action = gate.on_frame(audible=audible, voiced=c == "v", now=start + (i + 1) * 0.02,
                               level_dbfs=level)
        if action:
            out[i] = action
    return out


def test_the_gate_pauses_on_a_burst_and_the_voice_going_on_confirms():
    gate = PauseGate(confirm_ms=120, resume_ms=160)  # pause 100, grace 100, confirm 120, resume 160
    assert run(gate, "vvvv") == {}
    # the 5th voiced frame pauses; 4 frames of grace; 6 voiced frames while paused: a cut
    fast = PauseGate(confirm_ms=120, resume_ms=160)
    assert run(fast, "vvvvv" + "vvvv" + "vvvvvv") == {4: "pause", 14: "cut"}
    gaps = PauseGate(confirm_ms=120, resume_ms=160)
    assert run(gaps, "vv.vv.v") == {6: "pause"}  # short gaps are bridged
    gap = PauseGate(confirm_ms=120, resume_ms=160)
    assert run(gap, "vv....vvv") == {}  # a longer gap starts again


def test_the_gate_resumes_when_the_voice_stops_with_the_reply_and_backs_off():
    gate = PauseGate(confirm_ms=120, resume_ms=160)
    # an echo: it stops with the pause (within the grace); 8 quiet frames resume
    assert run(gate, "vvvvv" + "vv.." + "........", level=-45) == {4: "pause", 16: "resume"}
    assert gate.needed_ms == 100  # the first lesson only learns the echo's level
    assert gate.resumed_on_echo  # (its voice while paused was the echo's tail)
    # the echo again, louder than learnt: a second lesson backs the gate off
    assert run(gate, "vvvvv", start=1.0, level=-38) == {4: "pause"}
    assert run(gate, "........", start=2.0) == {7: "resume"}
    assert gate.needed_ms == 200  # the next pause needs a longer burst
    assert run(gate, "vvvvvvvvvv", start=3.0, level=-31) == {9: "pause"}
    assert run(gate, "........", start=4.0) == {7: "resume"}
    assert gate.needed_ms == 400 and (gate.pauses, gate.resumes) == (3, 3)
    cough = PauseGate(confirm_ms=120, resume_ms=160)  # loud and short: no backoff
    assert run(cough, "vvvvv" + "...." + "........", level=-10) == {4: "pause", 16: "resume"}
    assert cough.needed_ms == 100 and not cough.resumed_on_echo
    assert run(gate, "vvvvv", start=5.0, audible=False) == {}  # nothing playing
    assert gate.needed_ms == 100  # ... and the next reply starts afresh
    long = PauseGate(confirm_ms=120, resume_ms=160, max_pause_ms=300)
    assert run(long, "vvvvv" + "v..v..v..v..v..") == {4: "pause", 19: "resume"}


def test_the_old_rule_backs_off_on_the_first_lesson_too():
    old = PauseGate(confirm_ms=120, resume_ms=160, backoff_on_first_lesson=True)
    assert run(old, "vvvvv" + "vv.." + "........", level=-45) == {4: "pause", 16: "resume"}
    assert old.needed_ms == 200 and old.echo_dbfs == -45
    new = PauseGate(confirm_ms=120, resume_ms=160)
    run(new, "vvvvv" + "vv.." + "........", level=-45)
    # the user's barge-in after the echo's lesson: paused on the 5th frame, not the 10th
    assert run(new, "vvvvvvvvvv", start=1.0, level=-20) == {4: "pause"}
    assert run(old, "vvvvvvvvvv", start=1.0, level=-20) == {9: "pause"}


def test_an_unconfirmed_pause_teaches_the_gate_the_echo_level():
    gate = PauseGate(confirm_ms=120, resume_ms=160)
    frames = [(True, -42.0)] * 5 + [(False, -90.0)] * 12  # an echo at -42 dBFS, then quiet
    actions = [gate.on_frame(audible=True, voiced=v, now=(i + 1) * 0.02, level_dbfs=lv)
               for i, (v, lv) in enumerate(frames)]
    assert actions.count("pause") == 1 and actions.count("resume") == 1
    assert gate.echo_dbfs == -42.0
    quiet = [gate.on_frame(audible=True, voiced=True, now=1 + i * 0.02, level_dbfs=-40.0)
             for i in range(30)]
    assert "pause" not in quiet  # the echo again: under the learnt level + 6 dB
    loud = [gate.on_frame(audible=True, voiced=True, now=2 + i * 0.02, level_dbfs=-25.0)
            for i in range(10)]
    assert "pause" in loud  # the user, louder than the echo
    cough = PauseGate(confirm_ms=120, resume_ms=160)
    for i, (v, _) in enumerate(frames):
        cough.on_frame(audible=True, voiced=v, now=(i + 1) * 0.02, level_dbfs=-10.0)
    assert cough.echo_dbfs == float("-inf")  # a loud burst teaches nothing


def test_words_heard():
    assert not words_heard("Hmm.") and not words_heard("uh-huh, mm") and not words_heard("")
    assert not words_heard("three, four", REPLY)  # the reply's own words: an echo
    assert not words_heard("My favorite colour is 10", "Your favourite colour is ten")
    assert words_heard("Wait, stop.", REPLY) and words_heard("no", REPLY)
    assert heard_words(REPLY, 0.0) == "" and heard_words(REPLY, 1.0) == REPLY
    assert heard_words(REPLY, 0.5) == "one two three four five"
