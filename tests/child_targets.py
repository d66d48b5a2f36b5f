"""Child mains for tests/unit/test_child_process.py: module-level (a spawned child imports them
by name), each ending in ``child_process.serve`` as the real ones do."""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection
from typing import Any

from gateway.listen import child_process


def echo(conn: Connection, prefix: str) -> None:
    """Answers ``("ok", prefix + message)``; "raise" raises, "die" exits, "hang" sleeps."""

    def load() -> child_process.Handler:
        def handle(message: Any) -> child_process.Reply:
            if message == "raise":
                raise ValueError("asked to")
            if message == "die":
                os._exit(3)
            if message == "hang":
                time.sleep(60)
            if message == "pid":
                return ("ok", os.getpid())
            return ("ok", prefix + message)

        return handle

    child_process.serve(conn, load)


def fails_to_load(conn: Connection) -> None:
    def load() -> child_process.Handler:
        raise FileNotFoundError("no model here")

    child_process.serve(conn, load)


def exits_at_start(conn: Connection) -> None:
    os._exit(7)


def slow_to_load(conn: Connection, seconds: float) -> None:
    def load() -> child_process.Handler:
        time.sleep(seconds)
        return lambda message: ("ok", message)

    child_process.serve(conn, load)
