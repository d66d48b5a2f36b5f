"""The receive path the headless client's options ask for (both the listening and --mic runs)."""

from __future__ import annotations

import argparse

from gateway.receive.receive_path import ReceivePathConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-nack", action="store_true", help="do not ask for lost packets")
    p.add_argument("--no-fec", action="store_true", help="conceal lost frames without FEC")
    p.add_argument("--start-hold", type=int, default=0, metavar="FRAMES",
                   help="hold a FRAMES-deep buffer from the first packet until the link has shown "
                   "its bursts (--start-hold-s), then what they need (12: bench.pesq_loss's "
                   "'everything on'; 0: off, the default: no latency paid on a clean link)")
    p.add_argument("--start-hold-s", type=float, default=10.0, metavar="S",
                   help="how long the start hold lasts (default 10)")


def receive_config(args: argparse.Namespace) -> ReceivePathConfig:
    return ReceivePathConfig(
        nack=not args.no_nack, fec=not args.no_fec,
        burst_start_frames=args.start_hold, burst_start_hold_s=args.start_hold_s,
    )
