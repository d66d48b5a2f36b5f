"""bench.common.free_port: ports for servers started later, safe beside parallel tests (xdist)."""

from __future__ import annotations

import random
import socket

from bench.common import _ephemeral_low, free_port


def test_the_port_is_below_the_ephemeral_range_and_free_for_tcp_and_udp():
    for _ in range(20):
        port = free_port()
        assert 1024 <= port < _ephemeral_low()  # no outgoing connection can be handed it
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            with socket.socket(socket.AF_INET, kind) as s:
                s.bind(("127.0.0.1", port))


def test_a_seeded_random_module_does_not_make_parallel_callers_draw_alike():
    draws = []
    for _ in range(2):  # two xdist workers whose tests both ran random.seed(0)
        random.seed(0)
        draws.append([free_port() for _ in range(5)])
    assert draws[0] != draws[1]


def test_a_port_in_use_is_never_drawn():
    held = []
    try:
        for _ in range(30):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            s.listen()
            held.append(s)
        ports = {s.getsockname()[1] for s in held}
        assert len(ports) == len(held)  # each bind succeeded on a port not already taken
    finally:
        for s in held:
            s.close()
