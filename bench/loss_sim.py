"""The receive path under loss on a virtual clock: no sockets, no event loop, no machine load.

``simulate`` plays the gateway's packets (sent 20 ms apart, arriving 5 ms after they are
complete) through :class:`ReceivePath` with its playout periods on their schedule. First
transmissions are lost by the same seeded impairment model as the live bench
(``gateway.testing.impairment``, Gilbert-Elliott for bursts), decided per packet in order, so
every receiver of a condition sees the same first-transmission losses. The link is one channel
in time: a retransmission sent while the model is in its bad state (during a burst) is lost as a
first transmission there would be, one sent in the good state gets through (independent loss:
it is lost with the same probability, on its own draw). With ``red`` each packet is RFC 2198
RED as the gateway's :class:`RedSender` builds it (``distance`` previous frames, raised up to
``max_distance`` while the NACKs reaching it show longer bursts). With NACK on, the generator is
polled on every arrival, every period and whenever it says a retry is due; a NACK reaches the
sender half a round trip (``rtt_s``) later and each requested packet arrives the other half
after that, unless the channel drops it. Same inputs, same result: what the live bench measures
less the scheduling noise.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.receive_stats import ReceiveStats
from gateway.testing.impairment import Impairment, ImpairmentConfig
from gateway.webrtc.red_sender import RedSender
from gateway.webrtc.retransmission import longest_run

OPUS_PT = 111
RED_PT = 63
RTP_OVERHEAD = 12 + 10  # RTP header and SRTP's auth tag, per packet (UDP/IP not counted)
_FRAME = 0.020
_ARRIVAL = 0.005
_PHASE = 0.015


@dataclass
class SimResult:
    pcm: np.ndarray
    stats: ReceiveStats
    wire_bytes: int  # RTP bytes the sender sent (first transmissions, RED, retransmissions)
    retransmissions_lost: int = 0
    red_distance_max: int = 0  # the most copies a packet carried


class _Channel(Impairment):
    """The impairment model, with its state kept per 20 ms slot for the retransmissions."""

    def __init__(self, config: ImpairmentConfig) -> None:
        super().__init__(config)
        self.bad: list[bool] = []
        self._repair_rng = random.Random((config.seed or 0) + 7919)

    def first(self, at: float) -> bool:
        """Packet of the next slot: delivered?"""
        self.bad.append(self._bad)
        return bool(self.decide(at))

    def repair(self, at: float) -> bool:
        """A retransmission sent at ``at`` (the slot then, its state): delivered?"""
        cfg = self.config
        ge = cfg.gilbert_elliott()
        draw = self._repair_rng.random()
        if ge is None:
            return not (cfg.loss_pct and draw * 100.0 < cfg.loss_pct)
        _, _, bad_loss, good_loss = ge
        slot = int(at / _FRAME) - 1
        bad = self.bad[slot] if 0 <= slot < len(self.bad) else False
        return draw >= (bad_loss if bad else good_loss)


class _VirtualClock:
    """The sim's clock for the receive path (its playout clock is never started: the sim
    calls ``tick`` itself)."""

    t = 0.0

    def now(self) -> float:
        return self.t

    def tick_at_or_after(self, t: float) -> int:
        raise NotImplementedError

    def time_of(self, tick: int) -> float:
        raise NotImplementedError

    def period_tick(self, t: float) -> int:
        raise NotImplementedError

    def call_after_sends(self, t: float, callback: Callable[[], None]) -> None:
        raise NotImplementedError


def simulate(
    payloads: list[bytes], config: ReceivePathConfig, impairment: ImpairmentConfig | None, *,
    red: bool = False, distance: int = 2, max_distance: int | None = None,
    rtt_s: float = 0.002, tail_periods: int = 30,
) -> SimResult:
    channel = _Channel(impairment) if impairment is not None else None
    sender = RedSender(RED_PT, OPUS_PT, distance, adaptive=False, max_distance=max_distance)
    clock = _VirtualClock()
    path = ReceivePath(config, ticker=clock)
    if red:
        path.red_payload_type = RED_PT  # negotiated (the packets are fed with red=True)
    wire: dict[int, bytes] = {}
    order = itertools.count()
    events: list[tuple[float, int, str, object]] = []
    for i in range(len(payloads)):
        heapq.heappush(events, (_FRAME * (i + 1), next(order), "send", i))
    for k in range(len(payloads) + tail_periods):
        heapq.heappush(events, (_PHASE + _FRAME * k, next(order), "period", k))
    played: list[np.ndarray] = []
    sent_bytes = 0
    repairs_lost = 0
    most_copies = 0

    def ask(now: float) -> None:
        if not config.nack:
            return
        seqs = path.nack.poll(now, path.jitter.playout_seq)
        if seqs:
            heapq.heappush(events, (now + rtt_s / 2, next(order), "nack", seqs))
        due = path.nack.next_due(now)
        if due is not None and due > now:
            heapq.heappush(events, (due, next(order), "poll", None))

    while events:
        now, _, kind, item = heapq.heappop(events)
        clock.t = now
        if kind == "send":
            i = int(item)  # type: ignore[call-overload]
            payload = payloads[i]
            if red:
                payload, _ = sender.wrap(payload, 1000 + 960 * i, now)
                most_copies = max(most_copies, sender.distance_at(now))
            wire[i] = payload
            sent_bytes += len(payload) + RTP_OVERHEAD
            if channel is None or channel.first(now):
                heapq.heappush(events, (now + _ARRIVAL, next(order), "packet", i))
            continue
        if kind == "nack":  # at the sender: resend what it has, learn the burst
            seqs = list(item)  # type: ignore[call-overload]
            sender.burst_reported(longest_run(seqs), now)
            for seq in seqs:
                sent_bytes += len(wire[seq]) + RTP_OVERHEAD
                if channel is None or channel.repair(now):
                    heapq.heappush(events, (now + rtt_s / 2, next(order), "packet", seq))
                else:
                    repairs_lost += 1
            continue
        if kind == "period":
            played.append(path.tick(now))
        elif kind == "packet":
            i = int(item)  # type: ignore[call-overload]
            path.on_packet(i, 1000 + 960 * i, wire[i], 0x5151, now, red=red)
        ask(now)
    return SimResult(np.concatenate(played), path.stats, sent_bytes, repairs_lost, most_copies)
