"""RFC 2198 RED with real Chromium, under bursty loss of first transmissions at the gateway
(Gilbert-Elliott, 10 %, mean burst 3; the same seed in every run).

- Without NACK, RED alone must rebuild most of what the bursts took: Chromium decodes our RED
  packets and fills lost frames from the next packets' redundancy.
  Distance 2 against bursts of mean length 3 (geometric) can rebuild at most
  E[min(L, 2)] / E[L] = 5/9 of the lost frames: measured, concealment fell from 9.3 % to 4.4 %.
- With NACK on in both runs and a long round trip for repairs (resends leave 150 ms late, the
  test-only ``test_repair_delay_ms``: on loopback a NACK's round trip is otherwise a
  millisecond and NACK alone repairs everything in time), Chromium conceals less with RED than
  with NACK alone -- redundancy arrives 20 ms after a loss, a repair only a round trip later.
  Unless Chromium's NetEq has grown its buffer past that round trip, which it often does: then
  the late repairs play in time, paid for in delay. That comparison is Chromium's buffer, not
  ours: printed, not asserted. Asserted: RED + NACK rebuilds bursts as RED alone does.
  The audio keeps its level in every run.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import new_page
from tests.browser.test_nack import measure_with

pytestmark = [pytest.mark.browser, pytest.mark.serial]  # Chromium's concealment, compared
BURSTY = {"test_drop_first_tx_percent": 10.0, "test_drop_burst": 3.0, "test_drop_seed": 11}
RED = {"red_distance": 2, "red_adaptive": False}
NO_RED = {"red_distance": 0}
REPAIR_DELAY_MS = 150.0


async def test_red_rebuilds_bursts_in_chromium(start_gateway, browser, page):
    runs = {}
    for name, options in (("red", {**RED, "answer_nack": False}),
                          ("none", {**NO_RED, "answer_nack": False}),
                          ("red+nack", {**RED, "test_repair_delay_ms": REPAIR_DELAY_MS}),
                          ("nack", {**NO_RED, "test_repair_delay_ms": REPAIR_DELAY_MS})):
        target = page if not runs else await new_page(browser)
        runs[name] = await measure_with(start_gateway, target, {**BURSTY, **options})
        print(f"\n{name}: concealed {runs[name]['concealed_pct']:.2f} %, "
              f"jitter buffer {runs[name]['window_jitter_buffer_ms']:.0f} ms, "
              f"NACKs {runs[name]['nack_count']}, red {runs[name]['red']}")
    for run in runs.values():
        assert 6 < 100 * run["gateway"]["test_dropped"] / run["packets_sent"] < 15, run
        assert run["audio_level"] > 0, run
    assert runs["none"]["concealed_pct"] > 4.0, runs["none"]
    assert runs["red"]["concealed_pct"] < runs["none"]["concealed_pct"] * 0.65, runs
    assert runs["red"]["red"]["red_packets"] > 400
    both, nack = runs["red+nack"], runs["nack"]
    assert both["concealed_pct"] < runs["none"]["concealed_pct"] * 0.65, runs
    # RED + NACK against NACK alone is a figure of Chromium's adaptive buffer, printed, not
    # asserted (bench.pesq_loss compares them): it failed 2 runs in 4 of make test (NACK alone
    # 3.4 % concealed at a 192 ms buffer against RED + NACK's 4.4 % at 155 ms; 2.8 % vs 4.0 %)
    print(f"red+nack {both['concealed_pct']:.2f} % at {both['window_jitter_buffer_ms']:.0f} ms, "
          f"nack {nack['concealed_pct']:.2f} % at {nack['window_jitter_buffer_ms']:.0f} ms")


async def test_chromium_plays_red_made_in_c(start_gateway, page, monkeypatch):
    """RED on every packet (not adaptive) with no loss at the gateway: the stream is sent from
    C the whole time (``gw_run_parked`` makes each RED payload), and Chromium, which offered
    RED, decodes every packet -- nothing lost, nothing concealed past the first moments, the
    tone at its level -- while the gateway counts them RED. (The demo page's state polls,
    which take the stream back for a moment each to read its counters, leave it in C here.)"""
    from gateway.webrtc.batch_sender import BatchStream
    from tests.browser.conftest import connect, open_demo, speak, wait_packets

    monkeypatch.setattr(BatchStream, "settle", lambda self: None)
    gw = await start_gateway(**RED)
    await open_demo(page, gw.url)
    await connect(page)
    await speak(page, "Keep talking in redundancy.", voice="long")  # 30 s tone
    session = next(iter(gw.registry))
    stream = session.webrtc.transmitter
    first = await wait_packets(page, 100)
    parks, in_c = stream.handovers, 0
    for target in range(150, 650, 50):  # sampled while Chromium counts 500 packets
        await wait_packets(page, first["packetsReceived"] + target - 100, timeout_ms=20_000)
        in_c += stream.in_c
    last = await wait_packets(page, first["packetsReceived"] + 500)
    assert in_c == 10 and stream.handovers == parks  # C sent them, and kept them
    stream.back_to_tick()  # (C's counts are added when the stream is taken back)
    red = session.webrtc.sink.red.stats
    assert red.red_packets >= 600 and red.plain_packets == 0
    received = last["packetsReceived"] - first["packetsReceived"]
    concealed = last["concealedSamples"] - first["concealedSamples"]
    assert received >= 500 and last["packetsLost"] == first["packetsLost"], (first, last)
    assert concealed < 0.005 * (last["totalSamplesReceived"] - first["totalSamplesReceived"])
    assert last["audioLevel"] > 0.05, last
    await page.click("#disconnect")
