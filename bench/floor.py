"""The machine's floor for sending one RTP packet, measured on the core the gateway runs on.

``python -m bench.floor [--core 0] [--packets 200000] [--streams 500]``: CPU µs per packet for

- ``sendmmsg``: 120-byte datagrams to a loopback UDP socket on this machine, a batch of
  ``--streams`` per call (as one ticker tick sends one packet per stream), through the
  gateway's own ``gateway/net/sendmmsg.py`` (kernel and loopback delivery included);
- ``sendto``: the same datagrams one system call each (the fallback without sendmmsg);
- ``srtp``: SRTP protect (AES-128-CM, HMAC-SHA1-80, as DTLS-SRTP negotiates with Chromium) of a
  120-byte RTP packet through pylibsrtp, and through the gateway's direct call
  (``aiortc_compat.srtp_protector``);
- ``floor``: sendmmsg + the direct SRTP protect: what a perfect sender pays per packet.

Every density figure (bench.load, bench.cluster) is to be read beside this floor measured in
the same run: machines here drift 2-3x from one day to the next (docs/density.md). Prints a
table and writes bench/results/floor.json. Sends only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import pylibsrtp

from gateway import aiortc_compat
from gateway.net import sendmmsg

RESULTS = Path(__file__).resolve().parent / "results"
PAYLOAD = 108  # + a 12-byte RTP header: 120 bytes, a 32 kbit/s Opus frame's packet


def _cpu() -> float:
    return time.thread_time()


def rtp_packet(seq: int, ssrc: int = 0x1234ABCD) -> bytes:
    header = bytes([0x80, 111]) + (seq & 0xFFFF).to_bytes(2, "big")
    header += (seq * 960 & 0xFFFFFFFF).to_bytes(4, "big") + ssrc.to_bytes(4, "big")
    return header + bytes(PAYLOAD)


def srtp_session() -> pylibsrtp.Session:
    policy = pylibsrtp.Policy(key=bytes(range(30)), ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND,
                              srtp_profile=pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80)
    return pylibsrtp.Session(policy=policy)


def measure_srtp(packets: int, direct: bool) -> float:
    session = srtp_session()
    protect = aiortc_compat.srtp_protector(session) if direct else session.protect
    data = [rtp_packet(i) for i in range(packets)]  # each seq once: libsrtp refuses a replay
    start = _cpu()
    for packet in data:
        protect(packet)
    return (_cpu() - start) / packets * 1e6


def _sink() -> tuple[socket.socket, tuple[str, int]]:
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sink.bind(("127.0.0.1", 0))
    sink.setblocking(False)
    return sink, sink.getsockname()


def _drain(sink: socket.socket) -> None:
    try:
        while True:
            sink.recv(2048)
    except BlockingIOError:
        pass


def measure_send(packets: int, batch: int, use_sendmmsg: bool) -> float:
    """CPU µs per datagram of this thread (the kernel's send and loopback delivery are charged
    to the sender); the receiving socket is drained outside the timed calls."""
    sink, addr = _sink()
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    data = [rtp_packet(i) for i in range(batch)]
    spent = 0.0
    sent = 0
    try:
        if use_sendmmsg:
            batcher = sendmmsg.BatchSocket(out.fileno())
            name = sendmmsg.sockaddr(addr)
            assert name is not None
            names = [name] * batch
            while sent < packets:
                start = _cpu()
                n = batcher.send(data, names)
                spent += _cpu() - start
                sent += n
                _drain(sink)
        else:
            while sent < packets:
                start = _cpu()
                for datagram in data:
                    out.sendto(datagram, addr)
                spent += _cpu() - start
                sent += batch
                _drain(sink)
    finally:
        out.close()
        sink.close()
    return spent / sent * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--core", type=int, default=0, help="the core to pin to (the gateway's)")
    parser.add_argument("--packets", type=int, default=200_000)
    parser.add_argument("--streams", type=int, default=500, help="datagrams per sendmmsg call")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is kept")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    runs: dict[str, list[float]] = {"sendmmsg": [], "sendto": [], "srtp_pylibsrtp": [],
                                    "srtp_direct": []}
    for _ in range(args.repeat):
        if sendmmsg.available():
            runs["sendmmsg"].append(measure_send(args.packets, args.streams, True))
        runs["sendto"].append(measure_send(args.packets // 4, args.streams, False))
        runs["srtp_pylibsrtp"].append(measure_srtp(args.packets, direct=False))
        runs["srtp_direct"].append(measure_srtp(args.packets, direct=True))
    best = {name: min(values) for name, values in runs.items() if values}
    send = best.get("sendmmsg", best["sendto"])
    best["floor"] = send + best["srtp_direct"]
    print(f"machine floor per RTP packet on core {args.core} (CPU µs, best of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.2f})")
    print(f"{'what':<16} {'µs/packet':>10}  runs")
    for name, value in best.items():
        shown = ", ".join(f"{v:.2f}" for v in runs.get(name, []))
        print(f"{name:<16} {value:>10.2f}  {shown}")
    print("target (issue 28): the gateway's µs/packet ÷ floor ≤ 2.0")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "floor.json"
    out.write_text(json.dumps({"core": args.core, "streams_per_call": args.streams,
                               "best_us": best, "runs_us": runs,
                               "loadavg": os.getloadavg(), "at": time.time()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
