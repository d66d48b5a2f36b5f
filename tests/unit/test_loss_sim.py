"""The offline loss bench's pieces: one channel in time, the RED sender learning from NACKs,
the utterance cut and the per-utterance score."""

from __future__ import annotations

import numpy as np

from bench.audio_score import pesq_wb, pesq_wb_utterances, utterances
from bench.loss_sim import _Channel, simulate
from gateway.receive.receive_path import ReceivePathConfig
from gateway.testing.impairment import ImpairmentConfig
from tests.opus_streams import encode, quiet, speechy

BURSTY = ImpairmentConfig(loss_pct=10, burst=3, seed=1)


def test_a_retransmission_in_a_burst_is_lost_too():
    channel = _Channel(BURSTY)
    delivered = [channel.first(0.020 * (i + 1)) for i in range(2000)]
    bad = channel.bad
    assert len(bad) == 2000 and 0.05 < sum(bad) / 2000 < 0.15
    assert all(ok == (not b) for ok, b in zip(delivered, bad, strict=True))  # bad_loss 1
    # a repair sent within slot i (after its packet left, before the next) shares its state
    repairs = [channel.repair(0.020 * (i + 1) + 0.007) for i in range(2000)]
    assert all(ok == (not b) for ok, b in zip(repairs, bad, strict=True))
    independent = _Channel(ImpairmentConfig(loss_pct=10, seed=1))
    lost = sum(not independent.repair(0.0) for _ in range(4000))
    assert 300 < lost < 500  # its own draws, 10 %


def test_the_sim_sender_raises_red_distance_on_nacked_bursts():
    payloads = encode(speechy(8.0), 20)
    config = ReceivePathConfig(record_s=10.0)
    fixed = simulate(payloads, config, BURSTY, red=True)
    learnt = simulate(payloads, config, BURSTY, red=True, max_distance=4)
    assert fixed.red_distance_max == 2 and learnt.red_distance_max == 4
    assert learnt.wire_bytes > fixed.wire_bytes
    # the same first-transmission losses for both
    assert fixed.stats.lost == learnt.stats.lost > 0
    clean = simulate(payloads, config, None)
    assert clean.stats.lost == 0 and clean.retransmissions_lost == 0
    assert clean.pcm.size == (len(payloads) + 30) * 480


def test_utterances_are_cut_in_the_middle_of_long_pauses():
    frame = 480
    pcm = np.concatenate([speechy(1.0), np.zeros(12 * frame, np.int16), speechy(1.0),
                          np.zeros(4 * frame, np.int16), speechy(0.5)])
    cuts = utterances(pcm)
    assert cuts == [(0, (50 + 6) * frame), ((50 + 6) * frame, pcm.size)]  # the short one not


def test_a_delay_change_in_a_pause_is_not_charged_per_utterance():
    frame = 480
    sentence = np.concatenate([speechy(1.6), quiet(0.6)])
    ref = np.concatenate([sentence, speechy(1.6, start=2.2), quiet(0.6), speechy(1.6, start=4.4),
                          quiet(0.5)])
    pause = (80 + 15) * frame  # in the first pause
    longer = np.concatenate([ref[:pause], np.zeros(6 * frame, np.int16), ref[pause:]])
    clean = pesq_wb_utterances(ref, ref)
    assert clean is not None and pesq_wb_utterances(ref, longer) == clean
    hole = ref.copy()
    hole[40 * frame : 42 * frame] = 0  # 40 ms gone in the first utterance
    worse = pesq_wb_utterances(ref, hole)
    assert worse is not None and worse < clean - 0.05
    assert (pesq_wb(ref, hole) or 0) < (pesq_wb(ref, ref) or 0)
