"""The receive path under loss on a virtual clock: no sockets, no event loop, no machine load.

``simulate`` plays the gateway's packets (20 ms apart, arriving 5 ms after they are complete)
through :class:`ReceivePath` with its playout periods on their schedule, the loss decided per
datagram by the same seeded impairment model as the live bench (``gateway.testing.impairment``,
Gilbert-Elliott for bursts: in a bad state the repairs are lost too). With ``red`` each packet
is RFC 2198 RED carrying the previous ``distance`` frames (as the gateway's RedSender builds it);
with NACK on, the generator is polled on every arrival, every period and whenever it says a
retry is due, and each requested packet comes back one ``rtt_s`` later unless the impairment
drops it. Same inputs, same result: what the live bench measures less the scheduling noise.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.receive_stats import ReceiveStats
from gateway.rtp import red as rfc2198
from gateway.testing.impairment import Impairment, ImpairmentConfig

OPUS_PT = 111
RTP_OVERHEAD = 12 + 10  # RTP header and SRTP's auth tag, per packet (UDP/IP not counted)
_FRAME = 0.020
_ARRIVAL = 0.005
_PHASE = 0.015


@dataclass
class SimResult:
    pcm: np.ndarray
    stats: ReceiveStats
    wire_bytes: int  # RTP bytes the sender sent (first transmissions, RED, retransmissions)


def _payloads(payloads: list[bytes], red: bool, distance: int) -> list[bytes]:
    if not red:
        return list(payloads)
    out = []
    for i, primary in enumerate(payloads):
        blocks = [(960 * (i - j), payloads[j]) for j in range(max(0, i - distance), i)]
        out.append(rfc2198.encode(primary, OPUS_PT, blocks))
    return out


def simulate(
    payloads: list[bytes], config: ReceivePathConfig, impairment: ImpairmentConfig | None, *,
    red: bool = False, distance: int = 2, rtt_s: float = 0.002, tail_periods: int = 30,
) -> SimResult:
    loss = Impairment(impairment) if impairment is not None else None
    path = ReceivePath(config)
    if red:
        path.red_payload_type = 63  # negotiated (the packets are fed with red=True)
    wire = _payloads(payloads, red, distance)
    order = itertools.count()
    events: list[tuple[float, int, str, int]] = []
    sent_bytes = 0
    for i, payload in enumerate(wire):
        at = _FRAME * (i + 1)
        sent_bytes += len(payload) + RTP_OVERHEAD
        if loss is None or loss.decide(at):
            heapq.heappush(events, (at + _ARRIVAL, next(order), "packet", i))
    periods = len(payloads) + tail_periods
    for k in range(periods):
        heapq.heappush(events, (_PHASE + _FRAME * k, next(order), "period", k))
    played: list[np.ndarray] = []

    def ask(now: float) -> None:
        nonlocal sent_bytes
        if not config.nack:
            return
        for seq in path.nack.poll(now, path.jitter.playout_seq):
            sent_bytes += len(wire[seq]) + RTP_OVERHEAD
            if loss is None or loss.decide(now):
                heapq.heappush(events, (now + rtt_s, next(order), "packet", seq))
        due = path.nack.next_due(now) if config.nack else None
        if due is not None and due > now:
            heapq.heappush(events, (due, next(order), "poll", 0))

    while events:
        now, _, kind, i = heapq.heappop(events)
        if kind == "period":
            played.append(path.tick(now))
        elif kind == "packet":
            path.on_packet(i, 1000 + 960 * i, wire[i], 0x5151, now, red=red)
        ask(now)
    return SimResult(np.concatenate(played), path.stats, sent_bytes)
