"""Random loss at the load generator's listeners, repaired by NACK (``bench.load --loss``).

Issue 28 asks for the density figures "also with RED and NACK at work (2 % random loss at the
receivers)". A header-only listener (bench/loadgen.py) never hands RTP to aiortc, so aiortc's
own NACK generator would not see a gap; this does what a receiver's NACK module does, cheaply:
each RTP datagram is dropped with probability ``rate`` as if the network had lost it, and a
generic NACK (RFC 4585) for its sequence number is sent to the gateway at once over the
session's SRTCP (where a receiver would send it on the next packet's arrival, 20 ms later:
the gateway's work per NACK is the same). A datagram whose sequence number awaits repair is
the gateway's retransmission: counted, timed and taken, never recorded as an arrival (the
on-time figures stay those of first transmissions; the dropped ones show as the window's loss).

Bounded: at most ``MAX_AWAITING`` sequence numbers wait per listener (the oldest is given up
and counted unrepaired), NACK sends in flight are tasks held in a set and cancelled on close.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from array import array
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from gateway.nack.rtcp import build_nack_packet

MAX_AWAITING = 64  # sequence numbers a listener waits on (3 s of 2 % loss is 3)
NACK_SENDER_SSRC = 0x4C4F5353  # "LOSS": the listener's own SSRC in its NACKs
_SEQ = struct.Struct("!H")
_SSRC = struct.Struct("!I")


class LossyListener:
    """One listener's loss and repair: ``take(data)`` on every RTP datagram it receives."""

    __slots__ = ("_send", "_tasks", "awaiting", "dropped", "rate", "repair_ms", "repaired",
                 "rng", "send_failed", "unrepaired")

    def __init__(self, rate: float, seed: int,
                 send: Callable[[bytes], Awaitable[None]]) -> None:
        if not 0.0 <= rate < 1.0:
            raise ValueError("loss rate must be in [0, 1)")
        self.rate = rate
        self.rng = random.Random(seed)
        self._send = send
        self._tasks: set[asyncio.Task[None]] = set()
        self.awaiting: dict[int, float] = {}  # seq -> when it was dropped (monotonic)
        self.reset()

    def reset(self) -> None:
        """Start a window's counts (what still awaits repair keeps waiting)."""
        self.dropped = 0
        self.repaired = 0
        self.unrepaired = 0  # given up: MAX_AWAITING newer ones waited
        self.send_failed = 0
        self.repair_ms = array("d")

    def take(self, data: bytes) -> bool:
        """True when the datagram is taken here: dropped as lost, or a retransmission."""
        seq = _SEQ.unpack_from(data, 2)[0]
        awaiting = self.awaiting
        if awaiting:
            dropped_at = awaiting.pop(seq, None)
            if dropped_at is not None:
                self.repaired += 1
                self.repair_ms.append((time.monotonic() - dropped_at) * 1000)
                return True
        if self.rng.random() >= self.rate:
            return False
        if len(awaiting) >= MAX_AWAITING:
            del awaiting[next(iter(awaiting))]
            self.unrepaired += 1
        awaiting[seq] = time.monotonic()
        self.dropped += 1
        nack = build_nack_packet(NACK_SENDER_SSRC, _SSRC.unpack_from(data, 8)[0], [seq])
        task = asyncio.ensure_future(self._sent(nack))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _sent(self, nack: bytes) -> None:
        try:
            await self._send(nack)
        except Exception:  # a closing transport: the NACK is lost, as on a network
            self.send_failed += 1

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()


def loss_summary(listeners: list[LossyListener]) -> dict[str, Any] | None:
    """A window's loss and repair over every lossy listener (None: no loss asked)."""
    if not listeners:
        return None
    repair = np.concatenate([np.frombuffer(x.repair_ms, dtype=np.float64) for x in listeners])
    dropped = sum(x.dropped for x in listeners)
    return {
        "rate": listeners[0].rate,
        "listeners": len(listeners),
        "dropped": dropped,
        "repaired": sum(x.repaired for x in listeners),
        "unrepaired": sum(x.unrepaired for x in listeners),
        "nack_send_failed": sum(x.send_failed for x in listeners),
        "repair_ms": None if not repair.size else {
            "p50": float(np.percentile(repair, 50)), "p99": float(np.percentile(repair, 99)),
        },
    }
