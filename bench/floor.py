"""The machine's floor for sending one RTP packet, measured on the core the gateway runs on.

``python -m bench.floor [--core 0] [--packets 200000] [--streams 500]``: CPU µs per packet for

- ``sendmmsg``: 120-byte datagrams to a loopback UDP socket on this machine, a batch of
  ``--streams`` per call (as one ticker tick sends one packet per stream), through the
  gateway's own ``gateway/net/sendmmsg.py`` (kernel and loopback delivery included);
- ``sendto``: the same datagrams one system call each (the fallback without sendmmsg);
- ``srtp``: SRTP protect (AES-128-CM, HMAC-SHA1-80, as DTLS-SRTP negotiates with Chromium) of a
  120-byte RTP packet through pylibsrtp, and through the gateway's direct call
  (``aiortc_compat.srtp_protector``);
- ``floor``: sendmmsg + the direct SRTP protect: what a perfect sender pays per packet;
- ``floor_fanout`` (``--fanout N[,M]``): the floor as the gateway meets it at N streams -- N
  destination sockets held by a drainer process pinned to another core (``--drain-core``, as
  the load generator is) that sleeps in epoll between datagrams, so a send also wakes it; N
  SRTP sessions as aiortc makes its sender's (``SRTP_PROFILES[0]``, AES-256-GCM between
  aiortc peers; a 1,024-packet window, repeats allowed);
  packets paced as the gateway's tick grid sends them (every stream once a 20 ms, the streams
  spread over the 8 ticks of 2.5 ms), so caches are as cold between ticks as in the gateway.
  Made from C (bench/floor_c.py: no Python between the calls, as the compiled send path makes
  them; with the C's back-to-back, one-destination figure beside it), or with the Python calls
  where the C does not build (``how``). Split into ``sendmmsg_fanout`` and ``srtp_fanout``;
- ``path_python`` / ``path_compiled``: the gateway's send step for one packet of a tick, as the
  batch path runs it -- the header patched from the stream's template, SRTP, the tick's packets
  in one ``sendmmsg`` -- in pure Python (``RtpHeaderTemplate.build``, ``srtp_protector``,
  ``BatchSocket.send``) and through the compiled send path (``net/sendpath.py``: one
  ``gw_stage`` call a packet, one ``gw_flush`` a tick); each printed with its ratio to
  ``floor``.

Every density figure (bench.load, bench.cluster) is to be read beside this floor measured in
the same run: machines here drift 2-3x from one day to the next (docs/density.md). Prints a
table and writes bench/results/floor.json. Sends only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pylibsrtp

from bench import floor_c
from gateway import aiortc_compat
from gateway.net import sendmmsg, sendpath, srtp_tx
from gateway.rtp.header import RtpHeaderTemplate

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


TICK_S = 0.0025  # the gateway's tick grid
PHASES = 8  # ticks a 20 ms frame: each stream sends in one of them


def drain(count: int, core: int | None, address: str = "127.0.0.1") -> None:
    """The drainer (``--drain N``): bind N UDP sockets on ``address`` (``--drain-ip``), print
    their ports as one JSON line, read every datagram until stdin closes, then print how many
    arrived."""
    if core is not None and core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    selector = selectors.DefaultSelector()
    sinks = []
    for _ in range(count):
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        sink.bind((address, 0))
        sink.setblocking(False)
        selector.register(sink, selectors.EVENT_READ)
        sinks.append(sink)
    selector.register(sys.stdin, selectors.EVENT_READ)
    print(json.dumps([s.getsockname()[1] for s in sinks]), flush=True)
    received = 0
    while True:
        for key, _ in selector.select():
            if key.fileobj is sys.stdin:
                if not sys.stdin.readline():
                    print(json.dumps({"received": received}), flush=True)
                    return
                continue
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                while True:
                    sock.recv(2048)
                    received += 1
            except BlockingIOError:
                pass


def gcm_session(in_c: bool = False, direct: bool = True) -> pylibsrtp.Session:
    """An outbound SRTP session as aiortc makes its sender's (rtcdtlstransport.py): the profile
    two aiortc peers negotiate (its first), a 1,024-packet replay window, repeats allowed (a
    retransmission is protected again). ``in_c``: as the gateway makes it (``TxSession``: its
    RTP protected by net/srtp_tx.py), where that builds; ``direct=False``: its cipher calls
    through EVP (``--srtp-sender c-evp``)."""
    from aiortc.rtcdtlstransport import SRTP_PROFILES

    profile = SRTP_PROFILES[0]
    size = profile.key_length + profile.salt_length
    policy = pylibsrtp.Policy(key=bytes(range(size)), ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND,
                              srtp_profile=profile.libsrtp_profile)
    policy.allow_repeat_tx = True
    policy.window_size = 1024
    module = srtp_tx.load() if in_c else None
    if module is not None:
        return aiortc_compat.TxSession(policy, module, srtp_tx.crypto(), direct)
    return pylibsrtp.Session(policy)


#: where the fan-out floors' drainer listens, and what its command starts with: loopback in
#: this namespace, or (bench/veth_floor.py) the far end of a veth pair in another namespace,
#: entered with ``ip netns exec``
DESTINATION: list[Any] = ["127.0.0.1", []]


def netns_exec(netns: str) -> list[str]:
    """The start of a command run in network namespace ``netns`` (iproute2)."""
    return ["ip", "netns", "exec", netns]


def drain_at(address: str = "127.0.0.1", netns: str = "") -> None:
    """The fan-out floors' drainer from now on: on ``address``, in ``netns`` when given."""
    DESTINATION[:] = [address, netns_exec(netns) if netns else []]


def _drainer(streams: int, drain_core: int | None) -> subprocess.Popen[str]:
    address, prefix = DESTINATION
    cmd = [*prefix, sys.executable, "-m", "bench.floor", "--drain", str(streams),
           "--drain-ip", address]
    if drain_core is not None:
        cmd += ["--drain-core", str(drain_core)]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parent.parent)


@contextlib.contextmanager
def drained_sockets(streams: int, drain_core: int | None
                    ) -> Iterator[tuple[socket.socket, list[int], dict[str, int]]]:
    """A drainer holding ``streams`` sockets, and a sending socket: (it, their ports, a dict
    that holds ``received``, how many datagrams the drainer read, once the block is done)."""
    child = _drainer(streams, drain_core)
    assert child.stdin is not None and child.stdout is not None
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    done: dict[str, int] = {}
    try:
        ports = json.loads(child.stdout.readline())
        out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        yield out, ports, done
        time.sleep(0.2)
        child.stdin.close()
        done["received"] = int(json.loads(child.stdout.readline())["received"])
    finally:
        out.close()
        child.kill()
        child.wait()


def measure_fanout_c(streams: int, seconds: float, drain_core: int | None, paced: bool = True,
                     one_destination: bool = False, srtp_c: bool = False, direct: bool = True
                     ) -> dict[str, float] | None:
    """``measure_fanout`` with no Python between the calls (bench/floor_c.py): the tick's
    SRTP calls and its ``sendmmsg`` from C. ``paced=False``: back to back;
    ``one_destination``: every stream to the drainer's first socket; ``srtp_c``: SRTP by the
    gateway's own C (``net/srtp_tx.py``, the same profile; ``direct=False``: through EVP)
    instead of libsrtp. None where the C
    does not build or libsrtp's entry point is not found."""
    module = floor_c.load()
    protect = aiortc_compat.srtp_protect_address()
    if module is None or protect is None:
        return None
    with drained_sockets(streams, drain_core) as (out, ports, done):
        raw = [sendmmsg.sockaddr_bytes((DESTINATION[0], ports[0] if one_destination else port))
               for port in ports]
        names = b"".join(r for r in raw if r is not None)
        sessions = [gcm_session(srtp_c, direct) for _ in ports]  # kept alive for the C's pointers
        handles = [aiortc_compat.srtp_protect_handle(s, 0x1234ABCD) for s in sessions]
        if any(h is None for h in handles):
            return None
        protect = handles[0][0]  # type: ignore[index]
        ctxs = module.ffi.new("uintptr_t[]", [h[1] for h in handles])  # type: ignore[index]
        result = module.ffi.new("double[3]")
        packet = rtp_packet(0)
        rc = module.lib.gwf_fanout(out.fileno(), protect, ctxs, names, len(raw[0] or b""),
                                   len(ports), packet, len(packet), int(seconds / 0.020),
                                   PHASES, int(TICK_S * 1e9) if paced else 0, result)
        if rc != 0:
            raise RuntimeError(f"gwf_fanout failed: {rc}")
    return _split(result[1], result[0], result[2], done["received"])


def _split(send_s: float, srtp_s: float, sent: float, received: int) -> dict[str, float]:
    sent = max(sent, 1.0)
    return {"sendmmsg_fanout": send_s / sent * 1e6, "srtp_fanout": srtp_s / sent * 1e6,
            "floor_fanout": (send_s + srtp_s) / sent * 1e6, "read_share": received / sent}


def measure_fanout(streams: int, seconds: float, drain_core: int | None) -> dict[str, float]:
    """CPU µs per packet at ``streams`` destinations, paced as the gateway's ticks send: see
    the module's docstring. Returns the split and the share of datagrams the drainer read."""
    with drained_sockets(streams, drain_core) as (out, ports, done):
        batcher = sendmmsg.BatchSocket(out.fileno())
        names = [sendmmsg.sockaddr((DESTINATION[0], port)) for port in ports]
        sessions = [gcm_session() for _ in ports]  # kept: a protector does not hold its own
        protects = [aiortc_compat.srtp_protector(session) for session in sessions]
        groups = [(protects[k::PHASES], names[k::PHASES]) for k in range(PHASES)]
        frames = int(seconds / 0.020)
        packets = [rtp_packet(i) for i in range(frames)]
        srtp_s = send_s = 0.0
        sent = 0
        due = time.monotonic() + 0.1
        for tick in range(frames * PHASES):
            group_protects, group_names = groups[tick % PHASES]
            packet = packets[tick // PHASES]
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            due += TICK_S
            start = _cpu()
            datagrams = [protect(packet) for protect in group_protects]
            middle = _cpu()
            for at in range(0, len(datagrams), sendmmsg.MAX_BATCH):
                sent += batcher.send(datagrams[at : at + sendmmsg.MAX_BATCH],
                                     group_names[at : at + sendmmsg.MAX_BATCH])
            send_s += _cpu() - middle
            srtp_s += middle - start
    return _split(send_s, srtp_s, sent, done["received"])


def fanout_floor(streams: int, seconds: float, drain_core: int | None,
                 repeat: int) -> dict[str, Any]:
    """The best of ``repeat`` fan-out floors: made from C where it builds (``how``: "c"; with
    the C's back-to-back, one-destination figure beside it), else the Python calls'."""
    c_runs = [measure_fanout_c(streams, seconds, drain_core) for _ in range(repeat)]
    if all(c_runs):
        best = dict(min((r for r in c_runs if r), key=lambda t: t["floor_fanout"]))
        hot = [measure_fanout_c(streams, seconds / 2, drain_core, paced=False,
                                one_destination=True) for _ in range(repeat)]
        best["floor_c_back_to_back_one_destination"] = min(
            h["floor_fanout"] for h in hot if h)
        own = [measure_fanout_c(streams, seconds, drain_core, srtp_c=True)
               for _ in range(repeat)]
        if all(own):
            best["floor_fanout_srtp_c"] = min(r["floor_fanout"] for r in own if r)
            best["srtp_fanout_srtp_c"] = min(r["srtp_fanout"] for r in own if r)
        if srtp_tx.direct():  # the direct cipher calls' worth: the same C through EVP
            evp = [measure_fanout_c(streams, seconds, drain_core, srtp_c=True, direct=False)
                   for _ in range(repeat)]
            if all(evp):
                best["srtp_fanout_srtp_c_evp"] = min(r["srtp_fanout"] for r in evp if r)
        return {"how": "c", **best}
    runs = [measure_fanout(streams, seconds, drain_core) for _ in range(repeat)]
    return {"how": "python", **min(runs, key=lambda t: t["floor_fanout"])}


def _template() -> RtpHeaderTemplate:
    """A 12-byte header + a one-byte extension block with mid and abs-send-time (as negotiated
    with Chromium): 24 bytes, abs-send-time at 17."""
    header = bytes([0x90, 111, 0, 0, 0, 0, 0, 0]) + (0x1234ABCD).to_bytes(4, "big")
    header += bytes([0xBE, 0xDE, 0, 2, 0x10, ord("0"), 0x32, 0, 0, 0, 0, 0])
    return RtpHeaderTemplate(header, 17)


def measure_path(packets: int, batch: int, compiled: bool) -> float | None:
    """CPU µs per packet of the send step: ``batch`` packets (one per stream) patched,
    protected and sent in one ``sendmmsg`` per round, the receiving socket drained outside the
    timed part. None when the path is not available here."""
    module = sendpath.load() if compiled else None
    protect_address = aiortc_compat.srtp_protect_address()
    if compiled and (module is None or protect_address is None):
        return None
    if not compiled and not sendmmsg.available():
        return None
    sink, addr = _sink()
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    template = _template()
    sessions = [srtp_session() for _ in range(batch)]  # a stream each, as in the gateway
    payload = bytes(PAYLOAD - 12)  # 120-byte packets with the 24-byte header
    spent, sent, seq = 0.0, 0, 0
    try:
        if compiled:
            assert module is not None and protect_address is not None
            staging = sendpath.CompiledBatch(module, out.fileno(), protect_address,
                                             pylibsrtp.SRTP_MAX_TRAILER_LEN)
            raw = sendmmsg.sockaddr_bytes(addr)
            assert raw is not None
            streams = [staging.new_stream(template.raw, template.ast_at,
                                          aiortc_compat.srtp_session_address(s) or 0, raw)
                       for s in sessions]
            stage, b1 = staging.stage, template.second_byte
            while sent < packets:
                start = _cpu()
                for stream in streams:
                    stage(stream, b1, seq, seq * 960, seq, payload)
                staging.flush()
                spent += _cpu() - start
                sent += batch
                seq = (seq + 1) & 0xFFFF
                _drain(sink)
        else:
            batcher = sendmmsg.BatchSocket(out.fileno())
            name = sendmmsg.sockaddr(addr)
            protects = [aiortc_compat.srtp_protector(s) for s in sessions]
            build = template.build
            while sent < packets:
                start = _cpu()
                datagrams, names = [], []
                ast = seq.to_bytes(3, "big")
                for protect in protects:
                    datagrams.append(protect(build(seq, seq * 960, ast, payload)))
                    names.append(name)
                batcher.send(datagrams, names)
                spent += _cpu() - start
                sent += batch
                seq = (seq + 1) & 0xFFFF
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
    parser.add_argument("--out", default=str(RESULTS / "floor.json"))
    parser.add_argument("--fanout", default="",
                        help="N[,M]: also the floor at N destinations, paced as the ticks")
    parser.add_argument("--fanout-seconds", type=float, default=4.0)
    parser.add_argument("--drain-core", type=int, default=1,
                        help="the drainer's core for --fanout (the load generator's; -1: any)")
    parser.add_argument("--drain", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--drain-ip", default="127.0.0.1",
                        help="the address the --fanout drainer listens on")
    parser.add_argument("--drain-netns", default="",
                        help="the network namespace the --fanout drainer runs in (ip netns "
                        "exec; bench.load --veth)")
    args = parser.parse_args()
    if args.drain:
        drain(args.drain, args.drain_core, args.drain_ip)
        return
    if args.drain_netns:
        drain_at(args.drain_ip, args.drain_netns)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    runs: dict[str, list[float]] = {"sendmmsg": [], "sendto": [], "srtp_pylibsrtp": [],
                                    "srtp_direct": [], "path_python": [], "path_compiled": []}
    for _ in range(args.repeat):
        if sendmmsg.available():
            runs["sendmmsg"].append(measure_send(args.packets, args.streams, True))
        runs["sendto"].append(measure_send(args.packets // 4, args.streams, False))
        runs["srtp_pylibsrtp"].append(measure_srtp(args.packets, direct=False))
        runs["srtp_direct"].append(measure_srtp(args.packets, direct=True))
        for compiled in (False, True):
            value = measure_path(args.packets, args.streams, compiled)
            if value is not None:
                runs["path_compiled" if compiled else "path_python"].append(value)
    best = {name: min(values) for name, values in runs.items() if values}
    send = best.get("sendmmsg", best["sendto"])
    best["floor"] = send + best["srtp_direct"]
    fanout: dict[str, dict[str, float]] = {}
    for count in sorted({int(x) for x in args.fanout.split(",") if x.strip()}):
        if not sendmmsg.available():
            break
        drain_core = args.drain_core if args.drain_core >= 0 else None
        fanout[str(count)] = fanout_floor(count, args.fanout_seconds, drain_core, args.repeat)
    ratios = {name: best[name] / best["floor"] for name in ("path_python", "path_compiled")
              if name in best}
    print(f"machine floor per RTP packet on core {args.core} (CPU µs, best of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.2f})")
    print(f"{'what':<16} {'µs/packet':>10}  runs")
    for name, value in best.items():
        shown = ", ".join(f"{v:.2f}" for v in runs.get(name, []))
        ratio = f"  (÷ floor: {ratios[name]:.2f})" if name in ratios else ""
        print(f"{name:<16} {value:>10.2f}  {shown}{ratio}")
    for count, split in fanout.items():
        hot = split.get("floor_c_back_to_back_one_destination")
        print(f"floor_fanout at {count} destinations ({split['how']}): "
              f"{split['floor_fanout']:.2f} µs/packet (sendmmsg {split['sendmmsg_fanout']:.2f}"
              f" + SRTP {split['srtp_fanout']:.2f}; {split['read_share']:.1%} read by the "
              f"drainer; best of {args.repeat})"
              + (f"; from C back to back to one destination: {hot:.2f}" if hot else "")
              + (f"; with the gateway's C SRTP: {split['floor_fanout_srtp_c']:.2f} (SRTP "
                 f"{split['srtp_fanout_srtp_c']:.2f}" if "floor_fanout_srtp_c" in split else "")
              + (f", through EVP {split['srtp_fanout_srtp_c_evp']:.2f}"
                 if "srtp_fanout_srtp_c_evp" in split else "")
              + (")" if "floor_fanout_srtp_c" in split else ""))
    print("target (issue 28): the gateway's µs/packet ÷ floor ≤ 2.0")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"core": args.core, "streams_per_call": args.streams,
                               "best_us": best, "runs_us": runs, "ratio_to_floor": ratios,
                               "fanout_us": fanout,
                               "loadavg": os.getloadavg(), "at": time.time()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
