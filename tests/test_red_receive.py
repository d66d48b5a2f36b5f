"""RED end to end: a gateway sending RFC 2198 RED on every packet (distance 2) to our client,
whose incoming datagrams suffer bursty (Gilbert-Elliott) loss in-process: the redundant copies
rebuild most lost frames before any NACK, so NACKs fall against a RED-off client on the same
loss, and nearly nothing is concealed."""

from __future__ import annotations

import asyncio
import re

import pytest

from gateway.client.peer import GatewayClient
from gateway.receive.receive_path import ReceivePathConfig
from gateway.testing.impairment import ImpairmentConfig

pytestmark = pytest.mark.timeout(90)

BURSTY = ImpairmentConfig(loss_pct=10.0, burst=2.5, seed=21)
PERIODS = 500  # 10 s measured


async def measure(client: GatewayClient) -> dict:
    path = client.receive
    assert path is not None
    await path.wait_periods(25)  # playout has started
    start = path.stats.as_dict()
    await path.wait_periods(PERIODS)
    end = path.stats.as_dict()
    return {k: end[k] - start[k] for k in end if isinstance(end[k], int)}


async def test_red_rebuilds_most_bursty_losses_and_nacks_fall(start_gateway):
    gateway = await start_gateway(red_distance=2, red_adaptive=False)
    clients = [
        GatewayClient(gateway.url, gateway.http, receive_path=ReceivePathConfig(),
                      impairment=BURSTY, red=red)
        for red in (True, False)
    ]
    try:
        await asyncio.gather(*(c.connect() for c in clients))
        with_red, without = clients
        assert with_red.red_payload_type is not None and without.red_payload_type is None
        assert re.search(r"a=rtpmap:\d+ red/48000/2", with_red.answer_sdp)
        for client in clients:
            await client.say("A long tone.", voice="long")
        red, plain = await asyncio.gather(*(measure(c) for c in clients))
    finally:
        for client in clients:
            await client.close()
    assert red["red_packets"] >= PERIODS * 0.8, red
    assert plain["red_packets"] == 0 and plain["recovered_red"] == 0, plain
    assert red["lost"] >= 25 and plain["lost"] >= 25, (red, plain)
    # bursts of up to two are rebuilt from the next packet (geometric bursts, mean 2.5: ~64 %)
    assert red["recovered_red"] >= 0.5 * red["lost"], red
    assert red["recovered_red"] + red["recovered_nack"] >= 0.85 * red["lost"], red
    assert red["seqs_nacked"] < 0.7 * plain["seqs_nacked"], (red, plain)
    assert red["nacks_cancelled"] >= red["recovered_red"] * 0.9, red
    assert red["concealed"] <= 0.01 * red["played"], red
