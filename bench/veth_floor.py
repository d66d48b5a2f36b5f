"""The fan-out floor over loopback and over a veth pair: is the sender's kernel cost of 1,000
destinations a property of loopback?

``sudo python -m bench.veth_floor [--streams 1000] [--rounds 3]`` (root, iproute2): the C
fan-out floor of ``bench.floor`` (``measure_fanout_c``: SRTP and ``sendmmsg`` from C, paced as
the ticks, a drainer on core 1 sleeping in epoll) to N sockets and to one, alternated in the
same minutes,

- over loopback, as every other bench here: the receive path (IP, the UDP socket lookup, the
  enqueue, the drainer's wake-up) runs on the sending core, inside its ``sendmmsg``;
- over a veth pair between two network namespaces this bench makes (``gwbench-tx`` and
  ``gwbench-rx``, 10.254.77.1 and .2, removed at the end), with RPS steering the receiving
  end's packets to the drainer's core: the sending core pays the send path and the hand-off,
  as with a NIC, and the receive path runs where the receivers are.

Why: on loopback one destination costs the sender less than a thousand (``bench.floor``'s
one-destination floor against its fan-out floor, docs/density.md), and issue 28's target is
set against the one destination. This shows how much of that gap is loopback's.

Traffic stays in namespaces this bench creates (and on 127.0.0.1). Prints a table; writes
bench/results/veth_floor.json.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from bench import floor
from bench.common import write_results

TX, RX = "gwbench-tx", "gwbench-rx"
TX_IF, RX_IF = "gwb-tx", "gwb-rx"
TX_IP, RX_IP = "10.254.77.1", "10.254.77.2"
CLONE_NEWNET = 0x40000000


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def _remove() -> None:
    for name in (TX, RX):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _rps(netns: str, device: str, core: int) -> None:
    subprocess.run([*floor.netns_exec(netns), "sh", "-c",
                    f"echo {1 << core:x} > /sys/class/net/{device}/queues/rx-0/rps_cpus"],
                   check=True)


@contextlib.contextmanager
def veth_pair(rx_core: int, tx_core: int | None = None) -> Iterator[None]:
    """Two namespaces joined by a veth pair: RPS on the receiving end (``RX``) to ``rx_core``,
    and on the sending end to ``tx_core`` (None: none; as a NIC's interrupts on the sender's
    core, for what the sender receives)."""
    _remove()
    try:
        for name in (TX, RX):
            _ip("netns", "add", name)
            _ip("link", "set", "lo", "up", netns=name)
        _ip("link", "add", TX_IF, "netns", TX, "type", "veth", "peer", "name", RX_IF,
            "netns", RX)
        _ip("addr", "add", f"{TX_IP}/30", "dev", TX_IF, netns=TX)
        _ip("addr", "add", f"{RX_IP}/30", "dev", RX_IF, netns=RX)
        _ip("link", "set", TX_IF, "up", netns=TX)
        _ip("link", "set", RX_IF, "up", netns=RX)
        _rps(RX, RX_IF, rx_core)
        if tx_core is not None:
            _rps(TX, TX_IF, tx_core)
        yield
    finally:
        _remove()


def _setns(fd: int) -> None:
    """This thread (and the sockets and children it makes) into the namespace ``fd`` names."""
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


@contextlib.contextmanager
def sending_from(path: str = f"/var/run/netns/{TX}") -> Iterator[None]:
    """This process in the sender's namespace (sockets made inside stay there; children
    started inside are born there), then back."""
    home = os.open(f"/proc/{os.getpid()}/ns/net", os.O_RDONLY)
    there = os.open(path, os.O_RDONLY)
    try:
        _setns(there)
        yield
    finally:
        _setns(home)
        os.close(there)
        os.close(home)


def measure(streams: int, seconds: float, drain_core: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(rounds):
        for path in ("loopback", "veth"):
            for one in (False, True):
                key = f"{path} {'1' if one else streams}"
                if path == "loopback":
                    floor.drain_at()
                    result = floor.measure_fanout_c(streams, seconds, drain_core,
                                                    one_destination=one)
                else:
                    floor.drain_at(RX_IP, RX)
                    with sending_from():
                        result = floor.measure_fanout_c(streams, seconds, drain_core,
                                                        one_destination=one)
                if result is None:
                    raise SystemExit("the C fan-out floor does not build here")
                runs.setdefault(key, []).append(result)
    floor.drain_at()
    return runs


def available() -> bool:
    """Root and iproute2's ``ip``: what the namespaces need."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", type=int, default=0, help="the sender's core")
    parser.add_argument("--drain-core", type=int, default=1)
    args = parser.parse_args()
    if not available():
        raise SystemExit("needs root and iproute2's ip (network namespaces)")
    os.sched_setaffinity(0, {args.core})
    with veth_pair(args.drain_core):
        runs = measure(args.streams, args.seconds, args.drain_core, args.rounds)
    print(f"sender's CPU µs a datagram on core {args.core} (C, paced as the ticks; the drainer "
          f"on core {args.drain_core}); every round, then the best")
    print(f"{'path, destinations':<20} {'sendmmsg':>9} {'SRTP':>6} {'total':>7} {'read':>6}  "
          "sendmmsg per round")
    best: dict[str, dict[str, float]] = {}
    for key, results in runs.items():
        top = best[key] = min(results, key=lambda r: r["sendmmsg_fanout"])
        rounds = ", ".join(f"{r['sendmmsg_fanout']:.2f}" for r in results)
        print(f"{key:<20} {top['sendmmsg_fanout']:>9.2f} {top['srtp_fanout']:>6.2f} "
              f"{top['floor_fanout']:>7.2f} {top['read_share']:>6.1%}  {rounds}")
    path = write_results("veth_floor", {"streams": args.streams, "rounds": runs, "best": best})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
