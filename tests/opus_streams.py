"""Real libopus RTP streams for receive-path tests: any packet duration, DTX, pauses, loss.

``encode`` runs libopus (24 kHz mono, VOIP) over PCM in packets of ``packet_ms``; ``packetize``
numbers them as a sender would: the timestamp advances 48 ticks per ms of audio whether a
packet is sent or not, the sequence number only per packet sent. With ``dtx=True`` the packets
libopus marks as not to be transmitted (one or two bytes) are not sent, as WebRTC does: during
silence one packet goes out per 400 ms. ``run`` interleaves arrivals and playout periods on a
virtual clock, polling the NACK generator each period as the receive path's NACK task would.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway.media.opus_lib import opuslib
from gateway.receive.receive_path import ReceivePath

RATE = 24_000
FRAME = 0.020
SSRC = 0x5151


def speechy(seconds: float, amplitude: float = 8000.0, start: float = 0.0) -> np.ndarray:
    """A voiced, gliding tone (SILK with LBRR once the encoder settles)."""
    t = start + np.arange(round(seconds * RATE)) / RATE
    pcm = amplitude * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t)
    return pcm.astype(np.int16)


def quiet(seconds: float, seed: int = 0) -> np.ndarray:
    """Background noise at about -80 dBFS: what a microphone hears in a pause (DTX kicks in)."""
    rng = np.random.default_rng(seed)
    return rng.normal(0, 3, round(seconds * RATE)).astype(np.int16)


def encoder(*, bitrate: int = 32_000, fec: bool = True, dtx: bool = False) -> Any:
    enc = opuslib.Encoder(RATE, 1, opuslib.APPLICATION_VOIP)
    enc.bitrate = bitrate
    enc.packet_loss_perc = 10 if fec else 0
    ctl = opuslib.api.encoder.encoder_ctl
    ctl(enc.encoder_state, opuslib.api.ctl.set_inband_fec, int(fec))
    ctl(enc.encoder_state, opuslib.api.ctl.set_dtx, int(dtx))
    return enc


def encode(
    pcm: np.ndarray, packet_ms: float, *, bitrate: int = 32_000, fec: bool = True,
    dtx: bool = False,
) -> list[bytes]:
    """One libopus packet per ``packet_ms`` of ``pcm`` (the tail short of a packet is dropped)."""
    enc = encoder(bitrate=bitrate, fec=fec, dtx=dtx)
    n = round(packet_ms * RATE / 1000)
    return [bytes(enc.encode(pcm[i : i + n].tobytes(), n)) for i in range(0, pcm.size - n + 1, n)]


@dataclass(frozen=True)
class Sent:
    at: float  # arrival time at the receiver
    seq: int
    ts: int
    payload: bytes
    index: int  # which encoder packet (0, 1, 2, ...)


def packetize(
    payloads: list[bytes],
    packet_ms: float,
    *,
    start_seq: int = 1000,
    ts0: int = 5000,
    delay: float = 0.005,
    dtx: bool = False,
    drop: Collection[int] = (),
    not_sent: Collection[int] = (),
) -> list[Sent]:
    """RTP as sent: packet ``i`` leaves when its audio is complete and arrives ``delay`` later.

    ``not_sent``: packets the sender never sends (a pause: no sequence number used); ``drop``:
    packets lost on the way (their sequence number is used); ``dtx``: tiny packets not sent.
    """
    ticks = round(packet_ms * 48)
    out: list[Sent] = []
    seq = start_seq
    for i, payload in enumerate(payloads):
        if i in not_sent or (dtx and len(payload) <= 2):
            continue
        if i not in drop:
            at = (i + 1) * packet_ms / 1000 + delay
            out.append(Sent(at, seq & 0xFFFF, (ts0 + i * ticks) & 0xFFFFFFFF, payload, i))
        seq += 1
    return out


def run(
    path: ReceivePath, packets: list[Sent], periods: int, *, phase: float = 0.015,
    red: bool = False,
) -> list[list[int]]:
    """Period ``k`` at ``phase + 20 ms * k``, after the packets that arrived by then; returns
    what the NACK generator asked for at each period. ``red``: the packets are RFC 2198 RED."""
    pending = sorted(packets, key=lambda p: p.at)
    asked: list[list[int]] = []
    k = 0
    for n in range(periods):
        now = phase + n * FRAME
        while k < len(pending) and pending[k].at <= now:
            p = pending[k]
            path.on_packet(p.seq, p.ts, p.payload, SSRC, p.at, red=red)
            k += 1
        path.tick(now)
        asked.append(path.nack.poll(now, path.jitter.playout_seq))
    return asked


def offline_decode(payloads: list[bytes]) -> np.ndarray:
    """Every packet decoded in order by a fresh decoder: what continuous playout must match."""
    decoder = opuslib.Decoder(RATE, 1)
    parts = [np.frombuffer(decoder.decode(p, 2880), dtype="<i2") for p in payloads]
    return np.concatenate(parts)
